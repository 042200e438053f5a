"""Spark bridge: feed Spark DataFrames into actors by path, confirmed and idempotent.

    from spark_bridge import feed, FeedResult, start_bridge
    start_bridge(system)
    result = feed(df, system=admin_port, to="destination", feed_id="deposits-2026-11-21")
"""

from spark_bridge.bridge import BRIDGE_PATH, SparkBridge, start_bridge
from spark_bridge.feed import FeedError, FeedResult, feed, feed_stream
from spark_bridge.messages import BatchAccepted, BatchStored, IngestBatch

__all__ = ["BRIDGE_PATH", "BatchAccepted", "BatchStored", "FeedError", "FeedResult", "IngestBatch", "SparkBridge",
           "feed", "feed_stream", "start_bridge"]

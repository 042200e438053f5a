"""Spark bridge: feed Spark DataFrames into actors by path, confirmed and idempotent.

    from spark_bridge import feed, FeedResult, start_bridge
    start_bridge(system)
    result = feed(df, system=admin_port, to="destination", feed_id="deposits-2026-11-21")

Guarantees: a batch is acknowledged once it is one event in the bridge's journal (ack="persisted");
batches are deduplicated by (feed id, partition, batch number), or row by row with `key=`, so Spark
task retries, speculative tasks and reruns of a feed id store and deliver nothing twice. Fan-out to
destinations is a tell after the commit; after a restart the bridge sends its latest batches again,
so destinations must be idempotent (dedup on a row id). ack="processed" is not implemented yet.

Cluster recipe: run one member actor system per executor host (Thespian convention: `actors.start(
"multiproc", leader="leader-ip:port", node=...)`), pass each executor's local admin port as `system`
(the same port on every host), keep the bridge's journal on PostgreSQL (`journal="postgresql://..."`)
so that a bridge restarted on another host finds its dedup state, and let executors use the driver's
Python (PYSPARK_PYTHON).
"""

from spark_bridge.bridge import BRIDGE_PATH, SparkBridge, start_bridge
from spark_bridge.feed import FeedError, FeedResult, feed, feed_stream
from spark_bridge.messages import BatchAccepted, BatchStored, IngestBatch

__all__ = ["BRIDGE_PATH", "BatchAccepted", "BatchStored", "FeedError", "FeedResult", "IngestBatch", "SparkBridge",
           "feed", "feed_stream", "start_bridge"]

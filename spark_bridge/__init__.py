"""Spark bridge: feed Spark DataFrames into actors by path, confirmed, idempotent and fast.

    from spark_bridge import feed, FeedResult, start_bridge
    start_bridge(system)
    result = feed(df, system=admin_port, to="destination", feed_id="deposits-2026-11-21")

Guarantees (Spark's commit protocol): each task attempt's batches are staged, durable, in the bridge's
journal under the attempt; when the job commits, the winning attempt of each partition is released, in one
event, and only its rows are delivered, so rows of failed or speculative attempts are never delivered, even
when their content differed. A released partition of a feed id is done: a rerun stores and delivers
nothing again (with `key=`, rows are deduplicated by key instead). ack="persisted" returns once the release
is durable. Every released row goes to its destination as one at-least-once delivery (a `Row`),
redelivered until the destination confirms it, across restarts of the bridge; rows whose path nobody
serves are dead-lettered and counted.
Destinations confirm with `ack(self, row)` or, durably and exactly once, with `FeedReceiver.apply_row`
(or `FeedTable.apply_row`: a host's entities as rows of one EntityTable, one journal record per group
commit), and may send follow-ups anchored to the row (a FeedTable sends its own straight to their receivers and
confirms the row once they are confirmed). With ack="processed", `feed` returns only when every row and
everything anchored to it is confirmed (Storm's XOR acker, one 64-bit value per batch).

Cluster recipe: run one member actor system per executor host (Thespian convention: `actors.start(
"multiproc", leader="leader-ip:port", node=...)`), `start_bridges(system, nodes=[...])` for a bridge per
node (at `bridge_path(node)`; /system/spark-bridge coordinates their releases), set REPRISE_PORT (and
REPRISE_HOST) in each Spark worker's environment to its host's admin port, or the Spark conf keys
spark.reprise.port/host, so that its executors stage at their own node's bridge; keep the journal on
PostgreSQL (`journal="postgresql://..."`) so that a bridge restarted on another host finds its state,
and let executors use the driver's Python (PYSPARK_PYTHON, set by `feed` when missing).

Writing the Spark way: `register(spark)`, then `df.write.format("reprise").option("port", admin_port)
.option("to", "/user/accounts/{account}").save()` or `df.writeStream.format("reprise")...start()`, with
feed's guarantees (spark_bridge.sink); `last_write_result(feed_id)` then gives the FeedResult save() cannot
return.

Staged but never released (the driver died between its tasks and its commit): `staged_runs(system)` lists
such runs, `discard_staged(system, feed_id, run)` or `discard_staged(system, idle_for=SECONDS)` discards them,
and each bridge discards a run idle for its `staged_ttl` (start_bridge; a day by default) by itself. A late
release of a discarded run fails its feed with a FeedError: nothing acknowledged is lost silently. A node
bridge (start_bridges) asks the coordinator first: a run it had decided is released, not discarded.

Reading the journal back: `register(spark)`, then `spark.read.format("reprise-journal").option("url", ...)
.option("tag", ...).load()` or `spark.readStream...` (spark_bridge.source).
"""

from typing import Any

from spark_bridge.bridge import (
    BRIDGE_PATH,
    BRIDGES_PATH,
    STAGED_TTL,
    SparkBridge,
    bridge_path,
    start_bridge,
    start_bridges,
)
from spark_bridge.destination import FeedReceiver, FeedTable, ack
from spark_bridge.feed import FeedError, FeedResult, FeedSystemDown, feed, feed_stream, last_write_result
from spark_bridge.messages import FeedProgress, GetFeedProgress, Row, StagedRun
from spark_bridge.progress import ProgressBar
from spark_bridge.session import SessionError, cluster_session, local_session
from spark_bridge.staged import discard_staged, staged_runs


def register(spark: Any) -> None:
    """Register Reprise's Spark data sources with `spark` (a SparkSession): "reprise-journal" (read), "reprise" (write).

    Spark looks them up in the calling thread's active session: a thread other than the one that registered
    them calls register(spark) too before it writes or reads.
    """
    from spark_bridge.sink import RepriseSink  # (imports pyspark: only when asked)
    from spark_bridge.source import JournalDataSource

    spark.dataSource.register(JournalDataSource)
    spark.dataSource.register(RepriseSink)
    # Spark finds a Python data source through the active session of the JVM thread that runs the write, and a
    # new Python thread has a JVM thread of its own with none (DATA_SOURCE_NOT_FOUND: reprise): make `spark` the
    # calling thread's, so that register(spark) in a thread is all it needs. (No hook reaches threads started
    # later: each must call it, or any PySpark call that sets it, such as spark.createDataFrame.)
    jvm_session = getattr(spark, "_jsparkSession", None)  # (a Spark Connect session has none: the server looks up)
    if jvm_session is not None:
        spark._jvm.SparkSession.setActiveSession(jvm_session)


# The user API only: the other messages of spark_bridge.messages are the bridge's own protocol and events.
__all__ = ["BRIDGES_PATH", "BRIDGE_PATH", "FeedError", "FeedProgress", "FeedSystemDown", "FeedReceiver", "FeedResult", "FeedTable", "GetFeedProgress", "ProgressBar", "Row",
           "STAGED_TTL", "SessionError", "StagedRun", "SparkBridge", "ack", "cluster_session", "feed", "feed_stream", "last_write_result", "local_session",
           "bridge_path", "discard_staged", "register", "staged_runs", "start_bridge", "start_bridges"]

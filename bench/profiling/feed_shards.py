"""PROFILE.md §30: two FeedTable processed feeds of ROWS rows into TableAccounts in SHARDS host processes, through
fanout_bridge.LoggingBridge ($WIN, $CHUNK, $FANLOG): rows/s and CPU µs a row of every shard and the bridge.

    FANLOG=/tmp/fan2.log PYTHONPATH=$PWD python bench/profiling/feed_shards.py 1000000 2
"""

import sys
import tempfile

import actors
from bench.profiling.fanout_bridge import LoggingBridge, LoggingTable
from bench.profiling.spy import process_cpu
from bench.spark_feed import session_and_frame
from spark_bridge import BRIDGE_PATH, feed, start_bridge

rows, shards = int(sys.argv[1]), int(sys.argv[2])
spark, df = session_and_frame("feed-shards", rows)
with tempfile.TemporaryDirectory() as tmp, actors.start(
        "multiproc", journal=f"sqlite:///{tmp}/journal.db", snapshot_store=f"sqlite:///{tmp}/s.db") as system:
    system.spawn(LoggingTable, path="/user/accounts", entities=True, shards=shards)
    start_bridge(system, cls=LoggingBridge)
    feed(df.limit(10_000), system=system.admin_port, feed_id="warm-up", ack="processed", progress=False)
    pids = {k: v.pid for k, v in system.status().hosts.items() if k.startswith("/user/accounts") or k == BRIDGE_PATH}
    out = []
    for k in range(2):
        before = {n: process_cpu(p) for n, p in pids.items()}
        r = feed(df, system=system.admin_port, feed_id=f"f{k}", ack="processed", progress=False)
        out.append(f"{r.rows_per_second:,.0f} rows/s " + " ".join(
            f"{n}={(process_cpu(p) - before[n]) / rows * 1e6:.2f}" for n, p in pids.items()))
spark.stop()
print(f"window {LoggingBridge.fan_out_window}, chunk {LoggingBridge.fan_out_chunk}, {shards} shard(s): " + " | ".join(out))

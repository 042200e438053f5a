"""The bridge's journal over several feeds while a run whose driver died stays staged (§34): its events and bytes
after each feed. Before BatchRestaged the dead run held the pruning of every later batch back (until staged_ttl).

One system (multiproc, SQLite journal and snapshots in a temp dir), in-memory accounts; a "dead" run of DEAD
batches of 2,000 rows staged by hand first (as a task whose driver never released it), then FEEDS feeds of ROWS
rows each, ack="processed".

    PYTHONPATH=. .venv/bin/python bench/profiling/bridge_dead_run.py [ROWS] [FEEDS] [DEAD]
"""

import os
import sqlite3
import sys
import tempfile

from bench.spark_feed import _system, session_and_frame
from spark_bridge import feed
from spark_bridge.bridge import BRIDGE_PATH
from spark_bridge.messages import BatchAccepted, IngestBatch
from tests.spark_bridge.sample import Account

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
feeds = int(sys.argv[2]) if len(sys.argv) > 2 else 6
dead = int(sys.argv[3]) if len(sys.argv) > 3 else 10
spark, df = session_and_frame("reprise-bridge-dead-run", rows)
with tempfile.TemporaryDirectory(prefix="reprise-dead-run-") as tmp, _system(Account, tmp) as system:
    probe = system.probe()
    paths = [f"/user/accounts/a{i % 1000}" for i in range(2000)]
    for b in range(dead):
        values = [{"amount": 1, "txid": 10**9 + b * 2000 + i} for i in range(2000)]
        system.tell(BRIDGE_PATH, IngestBatch("dead-feed", 0, b, paths, values, probe.path, attempt="deadrun/1"))
        assert isinstance(probe.receive(30), BatchAccepted)
    path = f"{tmp}/journal.db"
    for k in range(feeds):
        result = feed(df, system=system.admin_port, feed_id=f"growth-{k}", ack="processed", progress=False)
        with sqlite3.connect(path) as conn:
            events, stored = conn.execute("SELECT count(*), coalesce(sum(length(record)), 0) FROM journal "
                                          "WHERE persistence_id = 'spark-bridge'").fetchone()
        counters = system.status().hosts[BRIDGE_PATH].counters
        print(f"feed {k + 1}: {result.rows:,} rows, {result.rows / result.seconds:,.0f} rows/s; bridge events "
              f"{events:,}, {stored / 1e6:.1f} MB; staged runs {counters['staged_runs']}, pruned to "
              f"{counters['journal_pruned_to']}, restaged {counters.get('staged_restaged', '-')}", flush=True)
spark.stop()

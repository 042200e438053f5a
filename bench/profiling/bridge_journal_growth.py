"""The bridge's journal over several feeds: its file (and WAL) after each, so that pruning (prune_journal) shows.

One system (multiproc, SQLite journal and snapshots in a temp dir), in-memory accounts that confirm at once, and
FEEDS feeds of ROWS rows each, ack="processed" (every row delivered and confirmed when a feed returns). Prints
rows/s per feed, the journal's size, the bridge's events left in it, and their bytes. With DEAD > 0, a run of DEAD
batches of 2,000 rows is staged first and never released, as by a task whose driver died (§34: such a run used to
hold the pruning of every later batch back until staged_ttl; its batches are now written again, BatchRestaged).

    PYTHONPATH=. .venv/bin/python bench/profiling/bridge_journal_growth.py [ROWS] [FEEDS] [DEAD]
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
feeds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
dead = int(sys.argv[3]) if len(sys.argv) > 3 else 0
spark, df = session_and_frame("reprise-bridge-journal", rows)
with tempfile.TemporaryDirectory(prefix="reprise-growth-") as tmp, _system(Account, tmp) as system:
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
        size = os.path.getsize(path) + os.path.getsize(path + "-wal")
        counters = system.status().hosts[BRIDGE_PATH].counters
        print(f"feed {k + 1}: {result.rows:,} rows, {result.rows / result.seconds:,.0f} rows/s; journal.db + wal "
              f"{size / 1e6:.1f} MB; bridge events {events:,}, {stored / 1e6:.1f} MB; staged runs "
              f"{counters['staged_runs']}, pruned to {counters['journal_pruned_to']}, restaged "
              f"{counters.get('staged_restaged', '-')}", flush=True)
spark.stop()

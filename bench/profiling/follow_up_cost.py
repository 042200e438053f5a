"""What a FeedTable's follow-ups cost per row (issue 16, PROFILE.md §27): feed(ack="processed") of ROWS rows into the
demo's AccountTable (examples/accounts/pipeline.py, one host, 1,000 accounts), with an Entry follow-up per row to a
LedgerTable (LEDGER=1, the default) or without (LEDGER=0); CPU µs per row of the accounts host, the ledger host
and the bridge, REPEATS feeds in one system. With a third argument PREFIX: py-spy on the three hosts over all
the feeds, into PREFIX-accounts.raw, PREFIX-ledger.raw and PREFIX-bridge.raw.

    LEDGER=1 PYTHONPATH=$PWD python bench/profiling/follow_up_cost.py 500000 3 [PREFIX]
"""

import os
import signal
import sys
import tempfile
import time

import actors
from bench.profiling.demo_procs import cpu
from bench.profiling.spy import record
from bench.spark_feed import session_and_frame
from examples.accounts.pipeline import AccountTable, LedgerTable
from spark_bridge import BRIDGE_PATH, feed, start_bridge

rows, repeats = int(sys.argv[1]), int(sys.argv[2])
spy = sys.argv[3] if len(sys.argv) > 3 else None
ledger = os.environ.get("LEDGER", "1") == "1"
spark, df = session_and_frame("follow-up-cost", rows)
with tempfile.TemporaryDirectory(prefix="reprise-follow-up-cost-") as tmp:
    system = actors.start("multiproc", journal=f"sqlite:///{tmp}/journal.db", snapshot_store=f"sqlite:///{tmp}/snap.db")
    with system:
        lj = f"sqlite:///{tmp}/ledger.db"
        aj = f"sqlite:///{tmp}/accounts.db"
        system.spawn(LedgerTable, "/user/ledger", entities=True, journal=lj, snapshot_store=lj)
        system.spawn(AccountTable, "/user/accounts", entities=True, kwargs={"ledger": "/user/ledger" if ledger else None},
                     journal=aj, snapshot_store=aj)
        start_bridge(system)
        feed(df.limit(10_000), system=system.admin_port, feed_id="warm-up", ack="processed", progress=False)
        hosts = system.status().hosts
        pids = {"accounts": hosts["/user/accounts"].pid, "ledger": hosts["/user/ledger"].pid,
                "bridge": hosts[BRIDGE_PATH].pid}
        procs = [record(p, f"{spy}-{n}.raw", rate=250) for n, p in pids.items()] if spy else []
        if procs:
            time.sleep(1.0)
        for k in range(repeats):
            c0 = {n: cpu(p) for n, p in pids.items()}
            r = feed(df, system=system.admin_port, feed_id=f"follow-up-cost-{k}", ack="processed", progress=False)
            c1 = {n: cpu(p) for n, p in pids.items()}
            print(f"{'ledger' if ledger else 'no ledger'}: {r.rows_per_second:,.0f} rows/s; "
                  + ", ".join(f"{n} {(c1[n] - c0[n]) / rows * 1e6:.2f}" for n in pids) + " CPU us/row", flush=True)
        for p in procs:
            p.send_signal(signal.SIGINT)
            p.wait(30)
spark.stop()

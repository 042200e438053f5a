"""feed(ack="persisted") into in-memory accounts (bench.spark_feed's first feed), several times in one Spark
session: rows/s and the bridge's CPU per row; with SPY_OUT, py-spy on the bridge over the last feed.

    PYTHONPATH=<tree> python bench/profiling/persist_spy.py ROWS RUNS
"""

import os
import signal
import sys
import tempfile
import time

from bench.profiling.spy import process_cpu, record
from bench.spark_feed import _drained, _system, session_and_frame
from spark_bridge import BRIDGE_PATH, feed
from tests.spark_bridge.sample import Account

rows, runs, out = int(sys.argv[1]), int(sys.argv[2]), os.environ.get("SPY_OUT")


spark, df = session_and_frame("reprise-prof-persist", rows)
with tempfile.TemporaryDirectory(prefix="reprise-prof-") as tmp, _system(Account, tmp) as system:
    feed(df.limit(10_000), system=system.admin_port, feed_id="warm-up", progress=False)
    bridge = system.status().hosts[BRIDGE_PATH].pid
    for i in range(runs):
        spy = None
        if out and i == runs - 1:
            spy = record(bridge, out)
            time.sleep(1.0)
        c0 = process_cpu(bridge)
        r = feed(df, system=system.admin_port, feed_id=f"persisted-{i}", progress=False)
        c1 = process_cpu(bridge)
        _drained(system, f"persisted-{i}", rows)  # the fan-out finishes before the next run
        if spy is not None:
            spy.send_signal(signal.SIGINT)
            spy.wait(30)
        print(f"run {i}: {r.rows_per_second:,.0f} rows/s persisted, bridge CPU {(c1 - c0) / rows * 1e6:.2f} us/row "
              f"during the feed; load {open('/proc/loadavg').read().split()[0]}", flush=True)
spark.stop()

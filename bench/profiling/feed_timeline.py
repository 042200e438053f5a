"""A timeline of one feed(ack="processed") into durable accounts: every 0.5 s (--every) the rows accepted (staged) and
processed, and each host's CPU share meanwhile, so staging, release and processing show apart.

    PYTHONPATH=. .venv/bin/python bench/profiling/feed_timeline.py [ROWS] [--account TableAccounts] [--shards 1] [--every 0.5]
"""

import argparse
import tempfile
import threading
import time

from bench.profiling.spy import process_cpu
from bench.spark_feed import _system, session_and_frame
from spark_bridge import BRIDGE_PATH, GetFeedProgress, feed
from tests.spark_bridge import sample

ap = argparse.ArgumentParser()
ap.add_argument("rows", nargs="?", type=int, default=1_000_000)
ap.add_argument("--account", default="TableAccounts", help="a class of tests.spark_bridge.sample")
ap.add_argument("--shards", type=int, default=1)
ap.add_argument("--every", type=float, default=0.5, help="seconds between two lines")
args = ap.parse_args()
spark, df = session_and_frame("reprise-feed-timeline", args.rows)
with tempfile.TemporaryDirectory() as tmp, _system(getattr(sample, args.account), tmp, args.shards) as system:
    feed(df.limit(10_000), system=system.admin_port, feed_id="warm-up", ack="processed", progress=False)
    pids = {k: h.pid for k, h in system.status().hosts.items() if k.startswith("/user/accounts")}
    pids["bridge"] = system.status().hosts[BRIDGE_PATH].pid
    done = []
    t0 = last_t = time.monotonic()
    worker = threading.Thread(target=lambda: done.append(
        feed(df, system=system.admin_port, feed_id="timed", ack="processed", progress=False)))
    worker.start()
    last = {name: process_cpu(pid) for name, pid in pids.items()}
    while worker.is_alive():
        time.sleep(args.every)
        p = system.ask(BRIDGE_PATH, GetFeedProgress("timed"), timeout=5)
        now = time.monotonic()
        now_cpu = {name: process_cpu(pid) for name, pid in pids.items()}
        shares = " ".join(f"{name}={(now_cpu[name] - last[name]) / (now - last_t):.2f}" for name in pids)
        print(f"{now - t0:6.2f} s  accepted {p.accepted:>9,}  processed {p.processed:>9,}  CPU {shares}", flush=True)
        last, last_t = now_cpu, now
    print(f"{done[0].rows_per_second:,.0f} rows/s, {done[0].seconds:.2f} s")
spark.stop()

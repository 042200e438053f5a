"""Seconds from the driver's Release to the first ROWS rows processed, for feeds of 1M rows with ack="processed" into
durable accounts as rows of one FeedTable (bench/PROFILE.md §25); also each feed's rows/s.

    PYTHONPATH=. .venv/bin/python bench/profiling/release_ramp.py [LABEL] [--feeds 3] [--rows 20000]
"""

import argparse
import importlib
import tempfile
import threading
import time

from bench.spark_feed import _system, session_and_frame
from spark_bridge import BRIDGE_PATH, GetFeedProgress, feed
from tests.spark_bridge import sample

feed_module = importlib.import_module("spark_bridge.feed")  # (spark_bridge.feed is also the function)
ap = argparse.ArgumentParser()
ap.add_argument("label", nargs="?", default="")
ap.add_argument("--feeds", type=int, default=3)
ap.add_argument("--rows", type=int, default=20_000, help="rows processed that end the ramp")
args = ap.parse_args()

released: list[float] = []
original_release = feed_module._release


def timed_release(*a, **k):
    released.append(time.monotonic())
    return original_release(*a, **k)


feed_module._release = timed_release
spark, df = session_and_frame("reprise-release-ramp", 1_000_000)
out = []
with tempfile.TemporaryDirectory() as tmp, _system(sample.TableAccounts, tmp, 1) as system:
    feed(df.limit(10_000), system=system.admin_port, feed_id="warm-up", ack="processed", progress=False)
    for i in range(args.feeds):
        released.clear()
        done = []
        worker = threading.Thread(target=lambda i=i, done=done: done.append(
            feed(df, system=system.admin_port, feed_id=f"ramp-{i}", ack="processed", progress=False)))
        worker.start()
        ramp = None
        while worker.is_alive():
            if released and ramp is None and system.ask(
                    BRIDGE_PATH, GetFeedProgress(f"ramp-{i}"), timeout=5).processed >= args.rows:
                ramp = time.monotonic() - released[0]
            time.sleep(0.005)
        worker.join()
        out.append(f"{ramp:.3f} s / {done[0].rows_per_second:,.0f} rows/s" if ramp is not None else "n/a")
print(args.label, f"Release to {args.rows:,} rows processed / the feed's rows/s:", ", ".join(out), flush=True)
spark.stop()

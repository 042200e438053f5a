"""PROFILE.md §28: the staging of feed(ack="processed") of the demo's DataFrame (1M rows, 8 partitions, uncached) into
in-memory accounts, N feeds in one Spark session (the first with cold Python workers and a cold JVM): seconds until
Spark's job ended, and the CPU of the JVM, the pyspark workers and the actor system meanwhile.

    N=3 PYTHONPATH=<tree> python bench/profiling/stage_cpu.py
    CLASS_ARCHIVE=.venv/spark-classes.jsa N=1 PYTHONPATH=<tree> python bench/profiling/stage_cpu.py   (§29: the JVM
    maps Spark's classes from that archive, built first when missing)
"""

import importlib
import os
import sys
import tempfile
import time

from bench.profiling.demo_procs import cpu_by_kind, cpu_used
from bench.spark_feed import _system
from examples.demo import spark_session, transactions
from spark_bridge import feed
from tests.spark_bridge.sample import Account

feed_module = importlib.import_module("spark_bridge.feed")  # (the package exports a function of that name)
staged: list[tuple[float, dict[str, float]]] = []
commit_run = feed_module.commit_run


def timed_commit_run(*args, **kwargs):
    staged.append((time.monotonic(), cpu_by_kind()))
    return commit_run(*args, **kwargs)


feed_module.commit_run = timed_commit_run
spark = spark_session(8, os.environ.get("CLASS_ARCHIVE") or None)
df = transactions(spark, 1_000_000, 10_000, 8)
with tempfile.TemporaryDirectory() as tmp, _system(Account, tmp) as system:
    for i in range(int(os.environ.get("N", "3"))):
        started, before = time.monotonic(), cpu_by_kind()
        feed(df, system=system.admin_port, feed_id=f"stage-{i}", ack="processed", progress=False)
        at, after = staged[-1]
        print(f"feed {i}: staged in {at - started:.2f} s; CPU {cpu_used(before, after)}", file=sys.stderr)

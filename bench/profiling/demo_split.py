"""PROFILE.md §28: the demo in this process, its feed split in staging (until Spark's job ends: the driver's commit) and
release + processing, with the CPU of each kind of process in each phase (the Spark JVM, the pyspark workers, the actor
system's processes together).

    PYTHONPATH=<tree> python bench/profiling/demo_split.py [demo options, e.g. --no-chaos]
"""

import importlib
import sys
import time

from bench.profiling.demo_procs import cpu_by_kind, cpu_used

feed_module = importlib.import_module("spark_bridge.feed")  # (the package exports a function of that name)
demo = importlib.import_module("examples.demo")
marks: dict[str, tuple[float, dict[str, float]]] = {}
commit_run, run_feed = feed_module.commit_run, demo.feed


def timed_commit_run(*args, **kwargs):
    marks["staged"] = (time.monotonic(), cpu_by_kind())
    return commit_run(*args, **kwargs)


def timed_feed(*args, **kwargs):
    marks["start"] = (time.monotonic(), cpu_by_kind())
    try:
        return run_feed(*args, **kwargs)
    finally:
        marks["end"] = (time.monotonic(), cpu_by_kind())


feed_module.commit_run, demo.feed = timed_commit_run, timed_feed
code = demo.main(sys.argv[1:])
(start, c0), (staged, c1), (end, c2) = marks["start"], marks["staged"], marks["end"]
print(f"SPLIT staging {staged - start:.2f} s: CPU {cpu_used(c0, c1)}", file=sys.stderr)
print(f"SPLIT release + processing {end - staged:.2f} s: CPU {cpu_used(c1, c2)}", file=sys.stderr)
sys.exit(code)

"""PROFILE.md §26: CPU of every process of a running demo, second by second (its staging and processing phases).

    PYTHONPATH=$PWD python bench/profiling/demo_phases.py TAG > phases.txt &
    PYTHONPATH=$PWD python -m examples.demo --tag TAG

One column per host (from `status()`, taken once: a host restarted after the chaos kill is not followed), the Spark
JVM, the pyspark workers and the demo driver; it stops after 3 idle seconds.
"""

import sys
import time

from bench.profiling.demo_procs import cpu, demo_hosts, process_kinds


def others() -> dict[int, str]:
    """Pid -> kind of the Spark and driver processes (the hosts are columns of their own)."""
    return {pid: kind for pid, kind in process_kinds().items() if kind != "actor-system"}


names = demo_hosts(sys.argv[1], 120)
if not names:
    raise SystemExit(f"no demo tagged {sys.argv[1]} came up within 120 s")
columns = sorted(set(names.values())) + ["jvm", "pyworkers", "driver"]
print("t   " + " ".join(f"{c.replace('/user/', '').replace(' ', '')[:11]:>11}" for c in columns), flush=True)
last: dict[int, float] = {}
started, idle = time.monotonic(), 0
while idle < 3:
    time.sleep(1.0)
    used = dict.fromkeys(columns, 0.0)
    for pid, kind in {**names, **others()}.items():
        now = cpu(pid)
        if now is None:
            continue
        if pid in last:
            used[kind] += now - last[pid]
        last[pid] = now
    idle = idle + 1 if sum(used.values()) < 0.1 else 0
    print(f"{time.monotonic() - started:3.0f} " + " ".join(f"{used[c]:11.2f}" for c in columns), flush=True)

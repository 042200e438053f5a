"""Watch a running demo (python -m examples.demo --tag TAG): py-spy on its hosts (SPY=1; SPY_ONLY=text[,text...]: only
the hosts whose path contains one of them), CPU of each process."""

import os
import sys
import time

from bench.profiling.demo_procs import cpu, demo_hosts
from bench.profiling.spy import record

# TAG "-": the tag is read from $DEMO_TAG, so that it is not on this process's command line (the demo kills the
# processes left with its tag on theirs when it shuts down).
tag, out, spy = sys.argv[1], sys.argv[2], os.environ.get("SPY") == "1"
if tag == "-":
    tag = os.environ["DEMO_TAG"]


# The demo's Spark JVM is told its workers' PYTHONPATH: the checkout the demo runs from (this one).
spark_mark = "spark.executorEnv.PYTHONPATH=" + os.environ.get("SPARK_MARK", os.getcwd())
last, first, procs = {}, {}, []
deadline = time.monotonic() + 600
names = demo_hosts(tag, 600)
for pid, name in names.items():
    first[pid] = cpu(pid)
    only = os.environ.get("SPY_ONLY", "").split(",")
    if spy and ("/user/" in name or "spark-bridge" in name) and any(o in name for o in only):
        fn = f"{out}-{name.strip('/').replace('/', '_').replace(' ', '_')}.raw"
        procs.append(record(pid, fn, rate=250))


def allcpu():
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            c = cpu(int(d))
            if c is not None:
                try:
                    cmd = open(f"/proc/{d}/cmdline").read().replace("\0", " ")
                    ppid = int(open(f"/proc/{d}/stat").read().rsplit(")", 1)[1].split()[1])
                    out[int(d)] = (c, cmd[:80], ppid, spark_mark in cmd)
                except OSError:
                    pass
    return out


a0 = allcpu()
alast = dict(a0)
k = 0
t0 = time.monotonic()
while any(cpu(p) is not None for p in names) and time.monotonic() < deadline:
    k += 1
    if k % 5 == 0:
        alast.update(allcpu())
    for p in names:
        c = cpu(p)
        if c is not None:
            last[p] = c
    time.sleep(0.1)
for p in procs:
    p.wait(30)
print(f"watched {time.monotonic() - t0:.1f} s (from when the hosts were up to their exit)")
for pid, name in sorted(names.items(), key=lambda kv: -(last.get(kv[0], 0) - (first[kv[0]] or 0))):
    print(f"  {last.get(pid, 0) - (first[pid] or 0):6.2f} s CPU  pid {pid}  {name}")
print("all processes (CPU while the hosts were up):")
for d, p, cmd in sorted(((alast[p][0] - a0.get(p, (0,))[0], p, alast[p][1]) for p in alast), reverse=True)[
    :10
]:
    print(f"  {d:6.2f} s  pid {p} {names.get(p, '')} {cmd}")
# The demo's Spark: its JVM (app name reprise-demo) and the pyspark daemon and workers under it (their CPU
# while the hosts were up; a worker that exited between two samples is missed).
spark = {p for p, v in alast.items() if v[3] and "java" in v[1]}
workers = {p for p, v in alast.items() if v[2] in spark}
workers |= {p for p, v in alast.items() if v[2] in workers}
for what, pids in (("Spark JVM", spark), ("pyspark daemon + workers", workers)):
    print(f"  {sum(alast[p][0] - a0.get(p, (0,))[0] for p in pids):6.2f} s  {what} ({len(pids)} processes)")

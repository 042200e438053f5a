"""Watch a running demo (python -m examples.demo --tag TAG): py-spy on its hosts (SPY=1), CPU of each process."""

import os
import re
import sys
import time

import actors
from actors.system import tagged_pids
from bench.profiling.spy import record

tag, out, spy = sys.argv[1], sys.argv[2], os.environ.get("SPY") == "1"


def cpu(pid):
    try:
        f = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
        return (int(f[11]) + int(f[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


names, last, first, procs = {}, {}, {}, []
deadline = time.monotonic() + 600
while time.monotonic() < deadline and not names:
    pids = tagged_pids(tag)
    if pids:
        port = next(
            (
                int(m.group(1))
                for p in pids
                for m in [re.search(r"--port (\d+)", open(f"/proc/{p}/cmdline").read().replace("\0", " "))]
                if m
            ),
            None,
        )
        try:
            system = actors.connect(port)
            st = system.status()
            if "/user/accounts" in " ".join(st.hosts) and "/system/spark-bridge" in st.hosts:
                names = {h.pid: k for k, h in st.hosts.items()}
            system.close()
        except Exception:
            pass
    time.sleep(0.2)
for pid, name in names.items():
    first[pid] = cpu(pid)
    if spy and ("/user/" in name or "spark-bridge" in name):
        fn = f"{out}-{name.strip('/').replace('/', '_').replace(' ', '_')}.raw"
        procs.append(record(pid, fn, rate=250))


def allcpu():
    out = {}
    for d in os.listdir("/proc"):
        if d.isdigit():
            c = cpu(int(d))
            if c is not None:
                try:
                    out[int(d)] = (c, open(f"/proc/{d}/cmdline").read().replace("\0", " ")[:80])
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

"""PROFILE.md §26: CPU of every process of a running demo, second by second (its staging and processing phases).

    PYTHONPATH=$PWD python bench/profiling/demo_phases.py TAG > phases.txt &
    PYTHONPATH=$PWD python -m examples.demo --tag TAG

One column per host (from `status()`, taken once: a host restarted after the chaos kill is not followed), the Spark
JVM, the pyspark workers and the demo driver; it stops after 3 idle seconds.
"""

import os
import re
import sys
import time

import actors
from actors.system import tagged_pids


def cpu(pid: int) -> float | None:
    """CPU seconds (user + system) of `pid`, None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except OSError:
        return None


def hosts_of(tag: str) -> dict[int, str]:
    """Pid -> host name of the demo's system tagged `tag`, once its bridge and accounts run."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        for pid in tagged_pids(tag):
            with open(f"/proc/{pid}/cmdline") as f:
                found = re.search(r"--port (\d+)", f.read().replace("\0", " "))
            if not found:
                continue
            try:
                system = actors.connect(int(found.group(1)))
            except Exception:
                continue
            try:
                hosts = system.status().hosts
            finally:
                system.close()
            if "/system/spark-bridge" in hosts and any("accounts" in name for name in hosts) \
                    and all(h.pid for h in hosts.values()):
                return {h.pid: name for name, h in hosts.items() if h.pid}
        time.sleep(0.2)
    raise SystemExit(f"no demo tagged {tag} came up within 120 s")


def others() -> dict[int, str]:
    """Pid -> kind of the Spark and driver processes."""
    found = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                line = f.read().decode(errors="replace")
        except OSError:
            continue
        if "java" in line and "spark" in line:
            found[int(entry)] = "jvm"
        elif "pyspark" in line:
            found[int(entry)] = "pyworkers"
        elif "examples.demo" in line:
            found[int(entry)] = "driver"
    return found


names = hosts_of(sys.argv[1])
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

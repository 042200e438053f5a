"""What the demo watchers (demo_watch.py, demo_phases.py) read of a running demo: a process's CPU, and the demo's hosts."""

import os
import re
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


def demo_hosts(tag: str, timeout: float) -> dict[int, str]:
    """Pid -> host name of the demo's system tagged `tag`, once its bridge and accounts run with a process each
    ({} if that takes longer than `timeout` s)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pid in tagged_pids(tag):
            try:
                with open(f"/proc/{pid}/cmdline") as f:
                    found = re.search(r"--port (\d+)", f.read().replace("\0", " "))
            except OSError:
                continue
            if not found:
                continue
            try:
                system = actors.connect(int(found.group(1)))
            except Exception:
                continue
            try:
                hosts = system.status().hosts
            except Exception:
                continue
            finally:
                system.close()
            if "/system/spark-bridge" in hosts and any("/user/accounts" in name for name in hosts) \
                    and all(h.pid for h in hosts.values()):
                return {h.pid: name for name, h in hosts.items()}
        time.sleep(0.2)
    return {}


def process_kinds() -> dict[int, str]:
    """Pid -> kind of the processes alive now that a demo or a feed runs: "jvm" (Spark's), "pyworkers" (pyspark's
    daemon and workers), "driver" (`python -m examples.demo`), "actor-system" (a guardian or host)."""
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
        elif "actors/boot.py" in line or "actors.boot" in line:
            found[int(entry)] = "actor-system"
    return found


def cpu_by_kind() -> dict[str, float]:
    """CPU seconds so far of the processes alive now, by process_kinds() (a process that exited is not counted)."""
    out: dict[str, float] = {}
    for pid, kind in process_kinds().items():
        out[kind] = out.get(kind, 0.0) + (cpu(pid) or 0.0)
    return out


def cpu_used(before: dict[str, float], after: dict[str, float]) -> str:
    """"kind seconds ..." between two cpu_by_kind() readings."""
    return " ".join(f"{k} {after.get(k, 0) - before.get(k, 0):.2f}" for k in sorted(after))

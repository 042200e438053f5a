"""py-spy (with --idle, so the fsync wait counts) on the host of one closed-loop persisting actor (issue 16,
PROFILE.md §12): python bench/profiling/persist_loop_spy.py EVENTS OUT.raw ("nospy" as OUT: timing only).
Prints events/s, µs per event and the host's CPU µs per event; the stage split is stages.py's."""

import signal
import subprocess
import sys
import tempfile
import time

import actors
from bench._delivery_actors import BenchPersister, PersistLoop
from bench.profiling.spy import record

n = int(sys.argv[1]) if len(sys.argv) > 1 else 30_000
out = sys.argv[2] if len(sys.argv) > 2 else "nospy"
d = tempfile.mkdtemp(prefix="reprise-spy-")
with actors.start("multiproc", journal=f"sqlite:///{d}/j.db") as s:
    s.spawn(BenchPersister, path="/user/persister")
    probe = s.probe()
    s.tell("/user/persister", PersistLoop(100, probe.path))
    probe.receive(60)
    pid = next(h.pid for path, h in s.status().hosts.items() if path == "/user/persister")
    p = None
    if out != "nospy":
        p = record(pid, out, rate=2000, extra=["--idle"], stderr=subprocess.PIPE)
        time.sleep(1.0)  # py-spy attaches
    cpu = s.ask("/user/persister", "cpu")
    t = time.perf_counter()
    s.tell("/user/persister", PersistLoop(n, probe.path))
    probe.receive(600)
    elapsed = time.perf_counter() - t
    cpu = s.ask("/user/persister", "cpu") - cpu
    if p is not None:
        p.send_signal(signal.SIGINT)
        p.wait(30)
print(f"host pid {pid}: {n / elapsed:,.0f} events/s, {elapsed / n * 1e6:.1f} µs per event, "
      f"host CPU {cpu / n * 1e6:.1f} µs per event", file=sys.stderr)

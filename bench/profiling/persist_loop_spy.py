"""py-spy (with --idle, so the fsync wait counts) on the host of closed-loop persisting actors (issue 16,
PROFILE.md §12): python bench/profiling/persist_loop_spy.py EVENTS OUT.raw [ACTORS]
("nospy" as OUT: timing only; ACTORS > 1: that many entities of one host, EVENTS each, at once).
Prints events/s, µs per event and the host's CPU µs per event; persist_stages.py splits OUT.raw in stages."""

import atexit
import shutil
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
fanout = int(sys.argv[3]) if len(sys.argv) > 3 else 1
d = tempfile.mkdtemp(prefix="reprise-spy-")
atexit.register(shutil.rmtree, d, ignore_errors=True)  # (its journal files go when the script ends)
host = "/user/persister" if fanout == 1 else "/user/persisters"
targets = [host] if fanout == 1 else [f"{host}/{k}" for k in range(fanout)]
with actors.start("multiproc", journal=f"sqlite:///{d}/j.db") as s:
    s.spawn(BenchPersister, path=host, entities=fanout > 1, passivate_after=3600.0)
    probe = s.probe()
    s.tell_many([(t, PersistLoop(20, probe.path)) for t in targets])
    probe.receive_many(len(targets), 60)
    pid = s.status().hosts[host].pid
    p = None
    if out != "nospy":
        p = record(pid, out, rate=1000, extra=["--idle"], stderr=subprocess.PIPE)
        time.sleep(1.0)  # py-spy attaches
    cpu = s.ask(targets[0], "cpu")
    t = time.perf_counter()
    s.tell_many([(t, PersistLoop(n, probe.path)) for t in targets])
    probe.receive_many(len(targets), 600)
    elapsed = time.perf_counter() - t
    cpu = s.ask(targets[0], "cpu") - cpu
    if p is not None:
        p.send_signal(signal.SIGINT)
        p.wait(30)
events = n * len(targets)
print(f"host pid {pid}: {events / elapsed:,.0f} events/s, {elapsed / events * 1e6:.1f} µs per event, "
      f"host CPU {cpu / events * 1e6:.1f} µs per event", file=sys.stderr)

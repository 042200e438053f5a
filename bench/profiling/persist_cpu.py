"""CPU µs per event of the persist closed loop (bench._delivery_actors.BenchPersister) in one process (issue 16,
PROFILE.md §13): python bench/profiling/persist_cpu.py ACTORS EVENTS_EACH REPEATS [cprofile OUT.pstats]

The local base with the journal at synchronous=NORMAL (WAL: no fsync per commit), so the figure is the Python
and SQLite CPU of the path without the fsync wait; the host's GC thresholds as actors.boot sets them. Prints the
minimum and the median over REPEATS rounds: the minimum is the figure least disturbed by other load.
With "cprofile OUT": one round under cProfile, dumped to OUT (then cstages.py splits it in stages)."""

import atexit
import cProfile
import gc
import shutil
import statistics
import sys
import tempfile
import time

import actors
from actors.boot import GC_THRESHOLDS
from bench._delivery_actors import BenchPersister, PersistLoop

gc.set_threshold(*GC_THRESHOLDS)
fanout, each, reps = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
profile_to = sys.argv[5] if len(sys.argv) > 5 and sys.argv[4] == "cprofile" else None
d = tempfile.mkdtemp(prefix="reprise-cpu-")
atexit.register(shutil.rmtree, d, ignore_errors=True)  # (its journal files go when the script ends)
with actors.start("local", journal=f"sqlite:///{d}/j.db?synchronous=NORMAL") as s:
    s.spawn(BenchPersister, path="/user/p", entities=True, passivate_after=3600.0)
    probe = s.probe()
    targets = [f"/user/p/{k}" for k in range(fanout)]
    s.tell_many([(t, PersistLoop(5, probe.path)) for t in targets])
    probe.receive_many(fanout, 60)
    if profile_to:
        pr = cProfile.Profile()
        pr.enable()
        s.tell_many([(t, PersistLoop(each, probe.path)) for t in targets])
        probe.receive_many(fanout, 600)
        pr.disable()
        pr.dump_stats(profile_to)
        sys.exit(0)
    runs = []
    for _ in range(reps):
        c = time.process_time()
        s.tell_many([(t, PersistLoop(each, probe.path)) for t in targets])
        probe.receive_many(fanout, 600)
        runs.append((time.process_time() - c) / (fanout * each) * 1e6)
print(f"{fanout} actors x {each}: CPU µs/event min {min(runs):.2f} median {statistics.median(runs):.2f}")

"""Bytes an idle persistent entity takes in its host (issue 16, PROFILE.md §27): python bench/profiling/entity_memory.py
[ENTITIES] [lean|receiver]

On the local base (the entities live in this process, where tracemalloc sees them), ENTITIES new entities get one
command each that persists one event; prints the memory that stayed allocated, per entity, and the allocation
sites that hold most of it. `lean`: tests/persistence/footprint_actors.py's Lean (a plain PersistentActor);
`receiver`: bench/entities.py's Account (an IdempotentReceiver, with its dedup state).
"""

import gc
import sys
import tempfile
import tracemalloc

import actors
from bench.entities import Account, Deposit
from tests.persistence.footprint_actors import Lean

n = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
receiver = len(sys.argv) > 2 and sys.argv[2] == "receiver"
cls = Account if receiver else Lean


def command(i: int) -> object:
    return Deposit(i + 1, 1) if receiver else "e"


with tempfile.TemporaryDirectory() as d, actors.start("local", journal=f"sqlite:///{d}/j.db?synchronous=NORMAL") as s:
    s.spawn(cls, path="/user/e", entities=True, passivate_after=3600.0)
    s.tell_many([(f"/user/e/w{i}", command(1_000_000 + i)) for i in range(100)])  # warm: the journal, caches
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    s.tell_many([(f"/user/e/{i}", command(i)) for i in range(n)])
    gc.collect()
    stats = tracemalloc.take_snapshot().compare_to(before, "lineno")
    print(f"{n} {cls.__name__} entities: {sum(st.size_diff for st in stats) / n:,.0f} bytes an entity")
    for st in stats[:10]:
        print(f"  {st.size_diff / n:6.0f} B  {st.count_diff / n:4.1f} objects  {st.traceback}")

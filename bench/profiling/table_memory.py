"""Bytes an EntityTable keeps per entity (its state stays in memory), local base, tracemalloc (the memory audit):
    PYTHONPATH=<tree> python bench/profiling/table_memory.py [ENTITIES]"""
import gc
import sys
import tempfile
import tracemalloc

import actors
from tests.persistence.table_actors import Accounts, Deposit

n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
with tempfile.TemporaryDirectory() as d, actors.start("local", journal=f"sqlite:///{d}/j.db") as s:
    s.spawn(Accounts, path="/user/acc", entities=True)
    probe = s.probe()
    s.tell_many([(f"/user/acc/w{i}", Deposit("/o", i + 1, 1)) for i in range(100)], sender=probe.path)
    probe.receive_many(100, 60)
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    s.tell_many([(f"/user/acc/{i}", Deposit("/o", 1000 + i, 1)) for i in range(n)], sender=probe.path)
    probe.receive_many(n, 120)
    gc.collect()
    stats = tracemalloc.take_snapshot().compare_to(before, "lineno")
    print(f"{n} table entities: {sum(st.size_diff for st in stats) / n:,.0f} bytes an entity")
    for st in stats[:5]:
        print(f"  {st.size_diff / n:6.0f} B  {st.traceback}")

"""PROFILE.md §39: what recovering an IdempotentReceiver entity costs, per entity and per replayed event.

    PYTHONPATH=$PWD python bench/profiling/entity_recovery.py ENTITIES EVENTS [local|multiproc]

Journals EVENTS applications to each of ENTITIES entities of bench.entities' Account, then twice: starts a
new system on that journal and tells every entity one more deposit (each recovers first), then one more
again (recovered): the difference is the recovery.
"""

import sys
import tempfile
import time

import actors
from bench.entities import HOST, Account, feed

entities, events = int(sys.argv[1]), int(sys.argv[2])
base = sys.argv[3] if len(sys.argv) > 3 else "multiproc"
with tempfile.TemporaryDirectory() as d:
    kw = dict(journal=f"sqlite:///{d}/j.db", snapshot_store=f"sqlite:///{d}/s.db")
    next_id = 1
    with actors.start(base, **kw) as system:
        system.spawn(Account, HOST, entities=True, passivate_after=3600.0)
        rows = [(e, next_id + k * entities + e) for k in range(events) for e in range(entities)]
        next_id += len(rows)
        feed(system, system.probe(), rows, 2000, 4)
    for _ in range(2):
        with actors.start(base, **kw) as system:
            system.spawn(Account, HOST, entities=True, passivate_after=3600.0)
            probe = system.probe()
            took = []
            for _ in range(2):
                t = time.perf_counter()
                feed(system, probe, [(e, next_id + e) for e in range(entities)], 2000, 4)
                next_id += entities
                took.append(time.perf_counter() - t)
        cold, warm = took
        print(f"{base}: {entities} entities of {events} events: a message to each {cold:.2f} s, again {warm:.2f} s "
              f"-> recovery {(cold - warm) / entities * 1e6:.0f} µs an entity, "
              f"{(cold - warm) / (entities * events) * 1e6:.2f} µs an event")

"""What a delete_messages of an IdempotentReceiver costs with its dedup state kept (a DedupKept journaled first), by
the number of origins it knows (each with one gap), local base, SQLite; and the recovery that replays that state:
    PYTHONPATH=<tree> python bench/profiling/dedup_delete.py [ORIGINS ...]
Run it on a tree without the DedupKept too (the delete alone) for the difference."""
import statistics
import sys
import tempfile
import time

import actors
from journal.serialization import serialize
from persistence.idempotent import DedupKept, SeenIds
from tests.persistence.dedup_delete_actors import DeletingReceiver

ROUNDS = 7

for n in [int(a) for a in sys.argv[1:]] or [1, 100, 10_000]:
    with tempfile.TemporaryDirectory() as d, actors.start(
            "local", journal=f"sqlite:///{d}/j.db", snapshot_store=f"sqlite:///{d}/s.db") as s:
        s.spawn(DeletingReceiver, path="/user/rcv", entities=True)
        rcv = "/user/rcv/r"
        probe = s.probe()
        # ids 1 and 3 of each origin: one gap each (a range kept above the watermark)
        s.tell_many([(rcv, ("apply", f"/user/origin-{k}", i, "v")) for k in range(n) for i in (1, 3)],
                    sender=probe.path)
        probe.receive_many(2 * n, 300)
        took = []
        for _ in range(ROUNDS):
            s.tell(rcv, ("apply", "/user/origin-0", 10 + len(took), "v"), sender=probe.path)
            probe.receive(30)
            started = time.perf_counter()
            assert s.ask(rcv, ("delete", "max"), timeout=120) == ("deleted",)
            took.append(time.perf_counter() - started)
        started = time.perf_counter()
        s.tell(rcv, "boom")
        assert s.ask(rcv, "values", timeout=120) == ()
        recovered = time.perf_counter() - started
        size = len(serialize(DedupKept({f"/user/origin-{k}": SeenIds.of(1, (3,)).state() for k in range(n)}, 1)))
        print(f"{n:>6} origins: delete {statistics.median(took) * 1000:8.2f} ms median of {ROUNDS} "
              f"(min {min(took) * 1000:.2f}), DedupKept {size:,} bytes, restart+recovery {recovered * 1000:.1f} ms")

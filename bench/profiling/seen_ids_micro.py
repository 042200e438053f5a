"""SeenIds.add (and advance_to) for one shard's share of a bridge's delivery ids: ascending, with gaps (the other
shard's ids), trimmed now and then to a watermark ~10,000 ids behind (FeedTable.apply_row's forget_applied_up_to).

    PYTHONPATH=<tree> .venv/bin/python bench/profiling/seen_ids_micro.py
"""
import random
import time

from persistence.idempotent import SeenIds

random.seed(1)
ids = [i for i in range(1, 1_000_001) if random.random() < 0.5]
def run(every):
    s = SeenIds()
    add, adv = s.add, s.advance_to
    t = time.perf_counter()
    for k, i in enumerate(ids):
        add(i)
        if k % every == every - 1:  # to the bridge's settled watermark, ~10,000 ids behind
            adv(i - 10_000)
    return (time.perf_counter() - t) / len(ids) * 1e9
for every in (16, 256, 1024):
    print(f"trim every {every}: add + trim ns/id: %.0f" % min(run(every) for _ in range(3)))

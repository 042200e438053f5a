"""PROFILE.md §26: SeenIds.advance_to over a FeedTable shard's share of the ids under the bridge's settled watermark
(every other id, 20,000 ranges), CPU ms per call, min of 9 rounds.  PYTHONPATH=<tree> python bench/profiling/seen_advance_micro.py"""

import time

from persistence import SeenIds

best = 1e9
for _ in range(9):
    seen = SeenIds()
    for i in range(2, 80_002, 2):
        seen.add(i)
    t = time.process_time()
    seen.advance_to(40_000)  # drops the first 20,000 ranges
    best = min(best, time.process_time() - t)
    assert seen.low == 40_000 and seen.range_count == 20_000
print(f"advance_to over 20,000 ranges: {best * 1e3:.3f} ms")

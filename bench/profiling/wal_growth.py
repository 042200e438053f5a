"""PROFILE.md §37: µs per one-event write_messages on a new SQLite journal, while its WAL grows and after.

    PYTHONPATH=<tree> python bench/profiling/wal_growth.py [LABEL] [N]

Alternate trees (a `git worktree` of the base) with PYTHONPATH: the first 2,000 writes are those before the WAL
first reaches the 4,000 pages that start a checkpoint.
"""

import os
import shutil
import sys
import tempfile
import time

from bench.journal import _event
from journal import AtomicWrite, PersistentRepr, open_journal

label = sys.argv[1] if len(sys.argv) > 1 else os.environ.get("PYTHONPATH", ".")
n = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
d = tempfile.mkdtemp(prefix="wal-growth-")
try:
    with open_journal(f"sqlite://{d}/j.db") as j:
        took = []
        for k in range(1, n + 1):
            t = time.perf_counter()
            j.write_messages([AtomicWrite([PersistentRepr(_event(k), k, "single", writer_uuid="w")])])
            took.append(time.perf_counter() - t)
finally:
    shutil.rmtree(d)
head = took[:2000]
tail = took[2000:] or [0.0]
print(f"{label}: first {len(head)} {sum(head) / len(head) * 1e6:.0f} µs, "
      f"last {len(took) - len(head)} {sum(tail) / len(tail) * 1e6:.0f} µs a write")

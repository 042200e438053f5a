"""TableCommits of 2,000 deposits each: journal write rows/s, bytes on disk per row, replay rows/s (one process,
SQLite). Run it with PYTHONPATH set to the tree to measure (e.g. a `git worktree` of the base), alternating."""

import atexit
import os
import shutil
import tempfile
import time

from journal import AtomicWrite, PersistentRepr, open_journal
from persistence.table import TableCommit
from tests.persistence.table_actors import Deposited

d = tempfile.mkdtemp()
atexit.register(shutil.rmtree, d, ignore_errors=True)  # (its journal files go when the script ends)
url = f"sqlite:///{d}/j.db"
n, commits = 2000, 250
with open_journal(url) as j:
    t = time.perf_counter()
    for s in range(1, commits + 1):
        c = TableCommit(1, tuple(f"a{k % 1000}" for k in range(n)), tuple(Deposited(k % 97 + 1) for k in range(n)),
                        ("/system/spark-bridge",) * n, tuple(range(s * n, s * n + n)))
        assert j.write_messages([AtomicWrite([PersistentRepr(c, s, "/user/acc")])]) == [None]
    w = time.perf_counter() - t
size = sum(os.path.getsize(f"{d}/{f}") for f in os.listdir(d))
with open_journal(url) as j:
    t = time.perf_counter()
    rows = 0
    with j.events_by_persistence_id("/user/acc") as q:
        for e in q:
            rows += len(e.event.events)
    r = time.perf_counter() - t
print(f"{commits * n:,} rows: write {commits * n / w:,.0f} rows/s, files {size / commits / n:.1f} B/row, "
      f"replay {rows / r:,.0f} rows/s")

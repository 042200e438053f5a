"""A group commit of 100 persistence ids, one event each (ids with 300 events of history): µs per commit and
WAL bytes per commit with the journal's (pid, sequence_nr) index and without it, at 4 KiB and 1 KiB pages
(bench/PROFILE.md §22: the index rewrites a leaf page per id)."""

import atexit
import os
import shutil
import sqlite3
import tempfile
import time

BLOB = os.urandom(120)
INSERT = "INSERT INTO events (pid, sequence_nr, record, checksum) VALUES (?, ?, ?, 0)"


def run(page: int, index: bool, rounds: int = 300, pids: int = 100) -> None:
    d = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, d, ignore_errors=True)  # (its journal files go when the script ends)
    c = sqlite3.connect(f"{d}/j.db", isolation_level=None)
    for pragma in (f"page_size={page}", "journal_mode=WAL", "synchronous=FULL", "wal_autocheckpoint=0"):
        c.execute(f"PRAGMA {pragma}")
    c.execute("CREATE TABLE events (ordering INTEGER PRIMARY KEY, pid INTEGER NOT NULL, sequence_nr INTEGER NOT NULL, "
              "record BLOB NOT NULL, checksum INTEGER NOT NULL)")
    if index:
        c.execute("CREATE UNIQUE INDEX events_pid_sequence_nr ON events (pid, sequence_nr)")
    c.execute("BEGIN")
    c.executemany(INSERT, [(p, s, BLOB) for s in range(300) for p in range(pids)])
    c.execute("COMMIT")
    c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    w0 = os.path.getsize(f"{d}/j.db-wal")
    t = time.perf_counter()
    for r in range(rounds):
        c.execute("BEGIN IMMEDIATE")
        c.executemany(INSERT, [(p, 300 + r, BLOB) for p in range(pids)])
        c.execute("COMMIT")
    elapsed = time.perf_counter() - t
    wal = os.path.getsize(f"{d}/j.db-wal") - w0
    print(f"page {page:5} index={index}: {elapsed / rounds * 1e6:7.0f} us/commit of {pids}, "
          f"{rounds * pids / elapsed:8,.0f} events/s, WAL {wal / rounds / 1024:6.1f} KiB/commit", flush=True)


for page in (4096, 1024):
    for index in (True, False):
        run(page, index)

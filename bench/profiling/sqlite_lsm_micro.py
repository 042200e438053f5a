"""Micro-benchmark: would a small "recent" table, merged into the indexed events table in sorted bulk, cut the
index page every event writes (PROFILE.md §6, §18)? CPU per row of 2,000-row commits over 10,000 ids.

    python bench/profiling/sqlite_lsm_micro.py [PREFILL] [today|lsm ...]     (MERGE=rows, SYNC=FULL|OFF)

`today`: schema 2's events table with its unique (pid, sequence_nr) index. `lsm`: the same rows go to a
`recent` table (its own unique index, and a trigger that rejects an (id, sequence nr) already in `events`),
moved into `events` in (pid, sequence_nr) order once MERGE rows are waiting.
"""

import os
import random
import sqlite3
import sys
import tempfile
import time

IDS, BATCH, ROUNDS = 10_000, 2_000, int(os.environ.get("ROUNDS", 100))
PREFILL = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
MERGE = int(os.environ.get("MERGE", 20_000))
_TABLE = ("(ordering INTEGER PRIMARY KEY, pid INTEGER NOT NULL, sequence_nr INTEGER NOT NULL, record BLOB NOT NULL, "
          "checksum INTEGER NOT NULL)")
_SCHEMA = (
    f"CREATE TABLE events {_TABLE}",
    "CREATE UNIQUE INDEX events_key ON events (pid, sequence_nr)",
    f"CREATE TABLE recent {_TABLE}",
    "CREATE UNIQUE INDEX recent_key ON recent (pid, sequence_nr)",
    "CREATE TRIGGER recent_unique BEFORE INSERT ON recent WHEN EXISTS (SELECT 1 FROM events WHERE pid = NEW.pid "
    "AND sequence_nr = NEW.sequence_nr) BEGIN SELECT RAISE(ABORT, 'UNIQUE constraint failed'); END",
)


def cpu() -> float:
    t = os.times()
    return t.user + t.system


def run(mode: str) -> None:
    with tempfile.TemporaryDirectory() as d:
        c = sqlite3.connect(os.path.join(d, "j.db"), isolation_level=None)
        for pragma in ("journal_mode=WAL", f"synchronous={os.environ.get('SYNC', 'FULL')}", "cache_size=-16384",
                       "wal_autocheckpoint=4000"):  # as journal/sqlite.py
            c.execute(f"PRAGMA {pragma}")
        for ddl in _SCHEMA:
            c.execute(ddl)
        rng = random.Random(1)
        seq = [0] * IDS
        blob = os.urandom(140)
        ordering = 0

        def rows(n: int) -> list[tuple[int, int, int, bytes, int]]:
            nonlocal ordering
            out = []
            for _ in range(n):
                p = rng.randrange(IDS)
                seq[p] += 1
                ordering += 1
                out.append((ordering, p, seq[p], blob, 7))
            return out

        c.execute("BEGIN")
        c.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", rows(PREFILL))
        c.execute("COMMIT")
        c.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        t0, w0 = cpu(), time.perf_counter()
        merges = waiting = 0
        for _ in range(ROUNDS):
            batch = rows(BATCH)
            c.execute("BEGIN IMMEDIATE")
            if mode == "today":
                c.executemany("INSERT INTO events VALUES (?, ?, ?, ?, ?)", batch)
            else:
                c.executemany("INSERT INTO recent VALUES (?, ?, ?, ?, ?)", batch)
                waiting += len(batch)
                if waiting >= MERGE:
                    c.execute("INSERT INTO events SELECT * FROM recent ORDER BY pid, sequence_nr")
                    c.execute("DELETE FROM recent")
                    waiting = 0
                    merges += 1
            c.execute("COMMIT")
        n = ROUNDS * BATCH
        print(f"{mode:6} prefill {PREFILL:,} merge {MERGE:,}: {(cpu() - t0) / n * 1e6:.2f} CPU µs/row, "
              f"{(time.perf_counter() - w0) / n * 1e6:.2f} wall µs/row, merges {merges}", flush=True)


for m in sys.argv[2:] or ["today", "lsm", "today", "lsm"]:
    run(m)

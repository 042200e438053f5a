"""Micro-benchmark: CPU per journal row inserted the way SqliteJournal._store does (multi-row INSERT of 100,
2,000 rows per transaction, rows of 5,000 persistence ids in random order, ~150-byte records), on a journal
that already holds PREFILL rows; synchronous=OFF so that only the CPU is measured, not the fsync
(SYNC=FULL: with the fsync, as the journal; compare the wall figures).

    python bench/profiling/sqlite_insert_micro.py [PREFILL]
"""

import os
import random
import sqlite3
import sys
import tempfile
import time
from itertools import chain

PREFILL = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
IDS, BATCH, MULTI, ROUNDS = 5_000, 2_000, 100, 50
SCHEMAS = {
    "today: rowid table + UNIQUE (persistence_id, sequence_nr)": (
        "CREATE TABLE journal (ordering INTEGER PRIMARY KEY, persistence_id TEXT NOT NULL, sequence_nr INTEGER "
        "NOT NULL, record BLOB NOT NULL, checksum INTEGER NOT NULL, UNIQUE (persistence_id, sequence_nr))",
        "(persistence_id, sequence_nr, record, checksum)", 4),
    "no UNIQUE index (rowid table only: the lower bound)": (
        "CREATE TABLE journal (ordering INTEGER PRIMARY KEY, persistence_id TEXT NOT NULL, sequence_nr INTEGER "
        "NOT NULL, record BLOB NOT NULL, checksum INTEGER NOT NULL)",
        "(persistence_id, sequence_nr, record, checksum)", 4),
    "today's schema, page_size=1024": (
        "PAGE1024 CREATE TABLE journal (ordering INTEGER PRIMARY KEY, persistence_id TEXT NOT NULL, sequence_nr "
        "INTEGER NOT NULL, record BLOB NOT NULL, checksum INTEGER NOT NULL, UNIQUE (persistence_id, sequence_nr))",
        "(persistence_id, sequence_nr, record, checksum)", 4),
    "integer persistence id (a lookup table): UNIQUE (pid INTEGER, sequence_nr)": (
        "CREATE TABLE journal (ordering INTEGER PRIMARY KEY, persistence_id INTEGER NOT NULL, sequence_nr INTEGER "
        "NOT NULL, record BLOB NOT NULL, checksum INTEGER NOT NULL, UNIQUE (persistence_id, sequence_nr))",
        "(persistence_id, sequence_nr, record, checksum)", -4),
    "WITHOUT ROWID, PRIMARY KEY (persistence_id, sequence_nr)": (
        "CREATE TABLE journal (persistence_id TEXT NOT NULL, sequence_nr INTEGER NOT NULL, ordering INTEGER NOT NULL, "
        "record BLOB NOT NULL, checksum INTEGER NOT NULL, PRIMARY KEY (persistence_id, sequence_nr)) WITHOUT ROWID",
        "(persistence_id, sequence_nr, ordering, record, checksum)", 5),
}


def run(name: str, ddl: str, cols: str, width: int) -> float:
    with tempfile.TemporaryDirectory() as d:
        conn = sqlite3.connect(os.path.join(d, "j.db"), isolation_level=None)
        if ddl.startswith("PAGE1024 "):
            ddl = ddl[len("PAGE1024 "):]
            conn.execute("PRAGMA page_size=1024")
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute(f"PRAGMA synchronous={os.environ.get('SYNC', 'OFF')}")  # SYNC=FULL: as the journal
        conn.execute("PRAGMA cache_size=-16384")  # as journal/sqlite.py
        conn.execute("PRAGMA wal_autocheckpoint=4000")
        conn.execute(ddl)
        rng = random.Random(1)
        seq = [0] * IDS
        ordering = 0
        blob = os.urandom(150)
        pids = [f"/user/accounts/{i}" for i in range(IDS)]
        if width < 0:  # integer persistence ids
            width, pids = -width, list(range(IDS))
        sql = f"INSERT INTO journal {cols} VALUES " + ",".join(["(" + ",".join("?" * width) + ")"] * MULTI)

        def batch() -> list:
            nonlocal ordering
            rows = []
            for _ in range(BATCH):
                e = rng.randrange(IDS)
                seq[e] += 1
                ordering += 1
                if width == 4:
                    rows.append((pids[e], seq[e], blob, 12345))
                else:
                    rows.append((pids[e], seq[e], ordering, blob, 12345))
            return rows

        def write(rows: list) -> None:
            conn.execute("BEGIN IMMEDIATE")
            for i in range(0, len(rows), MULTI):
                conn.execute(sql, list(chain.from_iterable(rows[i:i + MULTI])))
            conn.execute("COMMIT")

        for _ in range(PREFILL // BATCH):
            write(batch())
        batches = [batch() for _ in range(ROUNDS)]
        wal = os.path.join(d, "j.db-wal")
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        conn.execute("PRAGMA wal_autocheckpoint=0")  # WAL growth of the measured batches = bytes written
        t, w = time.process_time(), time.perf_counter()
        for rows in batches:
            write(rows)
        us = (time.process_time() - t) / (ROUNDS * BATCH) * 1e6
        wall = (time.perf_counter() - w) / (ROUNDS * BATCH) * 1e6
        print(f"      WAL bytes per row {os.path.getsize(wal) / (ROUNDS * BATCH):,.0f} (no checkpoint while measuring), "
              f"wall {wall:.2f} us/row")
        conn.close()
        return us


for name, (ddl, cols, width) in SCHEMAS.items():
    print(f"{run(name, ddl, cols, width):5.2f} CPU us/row  {name}  (prefill {PREFILL:,} rows)", flush=True)

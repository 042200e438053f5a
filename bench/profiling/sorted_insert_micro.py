"""PROFILE.md §30: commits of 2,000 rows for 2,000 of 10,000 persistence ids (the entity host's shape) after
PREFILL rows, the rows in arrival order against sorted by id: CPU µs a row of BEGIN, INSERTs and COMMIT
(synchronous=OFF; the journal's schema and pragmas), three rounds of 50 alternated commits.

    python bench/profiling/sorted_insert_micro.py 300000
"""

import os
import random
import sqlite3
import sys
import tempfile
import time

blob = os.urandom(150)
IDS, ROWS = 10_000, 2_000
prefill = int(sys.argv[1]) if len(sys.argv) > 1 else 300_000
INSERT = "INSERT INTO events (pid, sequence_nr, record, checksum) VALUES (?, ?, ?, ?)"


def connect(path: str) -> sqlite3.Connection:
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=OFF")
    c.execute("PRAGMA cache_size=-16384")
    c.execute("PRAGMA wal_autocheckpoint=4000")
    c.execute("CREATE TABLE events (ordering INTEGER PRIMARY KEY, pid INTEGER NOT NULL, sequence_nr INTEGER NOT NULL, "
              "record BLOB NOT NULL, checksum INTEGER NOT NULL)")
    c.execute("CREATE UNIQUE INDEX events_pid_sequence_nr ON events (pid, sequence_nr)")
    return c


rng = random.Random(1)
with tempfile.TemporaryDirectory() as d:
    conns = {"arrival": connect(f"{d}/a.db"), "sorted": connect(f"{d}/s.db")}
    seqs = {name: [0] * IDS for name in conns}

    def commit(name: str, ids: list[int]) -> float:
        seq = seqs[name]
        rows = []
        for p in ids:
            seq[p] += 1
            rows.append((p, seq[p], blob, 1))
        if name == "sorted":
            rows.sort(key=lambda r: r[0])  # (stable: one id's rows keep their order)
        c = conns[name]
        t = time.process_time()
        c.execute("BEGIN IMMEDIATE")
        c.executemany(INSERT, rows)
        c.execute("COMMIT")
        return time.process_time() - t

    for _ in range(prefill // ROWS):
        ids = rng.sample(range(IDS), ROWS)
        commit("arrival", ids)
        commit("sorted", ids)
    for _ in range(3):
        total = dict.fromkeys(conns, 0.0)
        for k in range(50):
            ids = rng.sample(range(IDS), ROWS)
            for name in (("arrival", "sorted") if k % 2 else ("sorted", "arrival")):
                total[name] += commit(name, ids)
        print(" ".join(f"{name} {v / (50 * ROWS) * 1e6:.2f} µs/row" for name, v in total.items()))
    for c in conns.values():
        c.close()

"""PROFILE.md §30: one-row commits at synchronous=FULL in one process, alternated: raw sqlite3's form against the
journal's schema (integer pid, ordering, checksum), its pragmas (cache, checkpoint every 4,000 pages) and BEGIN
IMMEDIATE: median µs a commit and commits/s, three rounds.

    PYTHONPATH=$PWD python bench/profiling/commit_forms_micro.py 3000
"""

import sqlite3
import statistics
import sys
import tempfile
import time

from bench.journal import _raw_blob

blob = _raw_blob()
n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
VARIANTS = [("raw", False, False, "BEGIN"), ("raw + BEGIN IMMEDIATE", False, False, "BEGIN IMMEDIATE"),
            ("journal schema", True, False, "BEGIN"), ("journal schema + pragmas", True, True, "BEGIN"),
            ("journal schema, pragmas, IMMEDIATE", True, True, "BEGIN IMMEDIATE")]


def connect(path: str, journal_schema: bool, pragmas: bool) -> sqlite3.Connection:
    c = sqlite3.connect(path, isolation_level=None)
    c.execute("PRAGMA journal_mode=WAL")
    c.execute("PRAGMA synchronous=FULL")
    if pragmas:
        c.execute("PRAGMA cache_size=-16384")
        c.execute("PRAGMA wal_autocheckpoint=4000")
    if journal_schema:
        c.execute("CREATE TABLE events (ordering INTEGER PRIMARY KEY, pid INTEGER NOT NULL, sequence_nr INTEGER "
                  "NOT NULL, record BLOB NOT NULL, checksum INTEGER NOT NULL)")
        c.execute("CREATE UNIQUE INDEX events_pid_sequence_nr ON events (pid, sequence_nr)")
    else:
        c.execute("CREATE TABLE events (persistence_id TEXT NOT NULL, sequence_nr INTEGER NOT NULL, payload BLOB "
                  "NOT NULL, PRIMARY KEY (persistence_id, sequence_nr))")
    return c


def commits(c: sqlite3.Connection, journal_schema: bool, begin: str, start: int, count: int) -> tuple[float, float]:
    insert = ("INSERT INTO events (pid, sequence_nr, record, checksum) VALUES (?, ?, ?, ?)" if journal_schema
              else "INSERT INTO events VALUES (?, ?, ?)")
    times = []
    for i in range(start, start + count):
        t = time.perf_counter()
        c.execute(begin)
        c.execute(insert, (1, i, blob, 12345) if journal_schema else ("single", i, blob))
        c.execute("COMMIT")
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6, count / sum(times)


with tempfile.TemporaryDirectory() as d:
    conns = [connect(f"{d}/{k}.db", v[1], v[2]) for k, v in enumerate(VARIANTS)]
    for c, v in zip(conns, VARIANTS, strict=True):
        commits(c, v[1], v[3], 0, 2000)  # warm-up: grows the WAL
    results: dict[str, list[tuple[float, float]]] = {v[0]: [] for v in VARIANTS}
    for r in range(3):
        for c, v in zip(conns, VARIANTS, strict=True):
            results[v[0]].append(commits(c, v[1], v[3], 2000 + r * n, n))
    for name, rs in results.items():
        print(f"{name:36s} median µs/commit " + " / ".join(f"{m:.0f}" for m, _ in rs)
              + "   commits/s " + " / ".join(f"{x:,.0f}" for _, x in rs))
    for c in conns:
        c.close()

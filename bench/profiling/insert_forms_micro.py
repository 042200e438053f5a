"""Micro-benchmark: CPU per row of one group commit's INSERTs, by the form of the statements (plan item 1 of §10).

Every form writes the same rounds (SIZES rows per commit, 5,000 persistence ids in random order, 150-byte
records) into its own file with the journal's schema and pragmas, after PREFILL rows; forms are interleaved
round by round so the machine's load hits each alike. synchronous=OFF: CPU only (SYNC=FULL to add fsync).
INTPID=1: integer persistence ids (schema 2's index); IDS=n: that many persistence ids.

    python bench/profiling/insert_forms_micro.py [PREFILL] [ROUNDS]
"""

import os
import random
import sqlite3
import sys
import tempfile
import time
from collections.abc import Callable
from itertools import chain

PREFILL = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 20
IDS = int(os.environ.get('IDS', 5_000))
SIZES = (1, 7, 100, 777, 2000)
DDL = ("CREATE TABLE journal (ordering INTEGER PRIMARY KEY, persistence_id TEXT NOT NULL, sequence_nr INTEGER "
       "NOT NULL, record BLOB NOT NULL, checksum INTEGER NOT NULL, UNIQUE (persistence_id, sequence_nr))")
ONE = "INSERT INTO journal (persistence_id, sequence_nr, record, checksum) VALUES (?, ?, ?, ?)"
Rows = list[tuple[str | int, int, bytes, int]]


def multi(n: int) -> str:
    return ONE + ", (?, ?, ?, ?)" * (n - 1)


def today(conn: sqlite3.Connection, rows: Rows) -> None:
    """journal/sqlite.py before: 100-row statements, executemany for the rest."""
    whole = len(rows) - len(rows) % 100
    for i in range(0, whole, 100):
        conn.execute(multi(100), list(chain.from_iterable(rows[i:i + 100])))
    if len(rows) == 1:
        conn.execute(ONE, rows[0])
    elif whole < len(rows):
        conn.executemany(ONE, rows[whole:])


def exact(conn: sqlite3.Connection, rows: Rows) -> None:
    """One statement of exactly len(rows) rows (prepared again whenever the size is new to the cache)."""
    conn.execute(multi(len(rows)), list(chain.from_iterable(rows)))


_PADDED = {n: ("INSERT INTO journal (persistence_id, sequence_nr, record, checksum) "
               "SELECT column1, column2, column3, column4 FROM (VALUES "
               + ", ".join(["(?, ?, ?, ?)"] * n) + ") WHERE column1 IS NOT NULL") for n in (2 ** k for k in range(12))}
_PAD = (None, None, None, None)


def padded(conn: sqlite3.Connection, rows: Rows) -> None:
    """One cached statement per power of two (1 .. 2,048 rows), padded with NULL rows it skips."""
    for i in range(0, len(rows), 2048):
        part = rows[i:i + 2048]
        n = 1 << (len(part) - 1).bit_length()
        conn.execute(_PADDED[n], list(chain.from_iterable(chain(part, [_PAD] * (n - len(part))))))


def binary(conn: sqlite3.Connection, rows: Rows) -> None:
    """Statements of power-of-two sizes (at most 12 per 2,048 rows), each cached."""
    i, left = 0, len(rows)
    while left:
        n = min(1 << (left.bit_length() - 1), 2048)
        conn.execute(multi(n), list(chain.from_iterable(rows[i:i + n])))
        i, left = i + n, left - n


def many(conn: sqlite3.Connection, rows: Rows) -> None:
    """executemany of the one-row statement."""
    conn.executemany(ONE, rows)


FORMS: dict[str, Callable[[sqlite3.Connection, Rows], None]] = {
    "today (100-row statements + executemany)": today, "exact size, one statement": exact,
    "padded power of two, one statement": padded, "power-of-two statements": binary,
    "executemany 1-row": many}


def main() -> None:
    rng = random.Random(1)
    seq = [0] * IDS
    pids: list = list(range(IDS)) if os.environ.get("INTPID") else [f"/user/accounts/{i}" for i in range(IDS)]
    blob = os.urandom(150)

    def batch(n: int) -> Rows:
        rows = []
        for _ in range(n):
            e = rng.randrange(IDS)
            seq[e] += 1
            rows.append((pids[e], seq[e], blob, 12345))
        return rows

    prefill = [batch(2000) for _ in range(PREFILL // 2000)]
    rounds = [[batch(n) for n in SIZES] for _ in range(ROUNDS)]
    with tempfile.TemporaryDirectory() as d:
        conns = {}
        for k, name in enumerate(FORMS):
            conn = sqlite3.connect(os.path.join(d, f"{k}.db"), isolation_level=None, cached_statements=64)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={os.environ.get('SYNC', 'OFF')}")
            conn.execute("PRAGMA cache_size=-16384")
            conn.execute("PRAGMA wal_autocheckpoint=4000")
            conn.execute(DDL)
            for rows in prefill:
                conn.execute("BEGIN IMMEDIATE")
                today(conn, rows)
                conn.execute("COMMIT")
            conns[name] = conn
        cpu = {(name, n): 0.0 for name in FORMS for n in SIZES}
        for batches in rounds:
            for name, form in FORMS.items():
                conn = conns[name]
                for n, rows in zip(SIZES, batches, strict=True):
                    conn.execute("BEGIN IMMEDIATE")
                    t = time.process_time()
                    form(conn, rows)
                    cpu[name, n] += time.process_time() - t
                    conn.execute("COMMIT")
        for conn in conns.values():
            conn.close()
    print(f"CPU us per row of the INSERTs (prefill {PREFILL:,}, {ROUNDS} rounds, load {os.getloadavg()[0]:.1f})")
    print("| form | " + " | ".join(f"{n} rows" for n in SIZES) + " |")
    print("|---|" + "---:|" * len(SIZES))
    for name in FORMS:
        print(f"| {name} | " + " | ".join(f"{cpu[name, n] / (ROUNDS * n) * 1e6:.2f}" for n in SIZES) + " |")


main()

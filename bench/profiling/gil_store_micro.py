"""How long a 2,000-row SQLite commit (as SqliteJournal._store does it) takes on a second thread while the
main thread is idle or busy in Python (the GIL cost of a pipelined group commit; bench/PROFILE.md §8).

    python bench/profiling/gil_store_micro.py
"""

from __future__ import annotations

import atexit
import os
import random
import shutil
import sqlite3
import sys
import tempfile
import threading
import time
from itertools import chain

_INSERT = "INSERT INTO journal (persistence_id, sequence_nr, record, checksum) VALUES (?, ?, ?, ?)"
_MULTI = _INSERT + ", (?, ?, ?, ?)" * 99


def main() -> None:
    """Print the median commit time of a writer thread: main thread idle, busy, busy at a 0.5 ms switch."""
    d = tempfile.mkdtemp()
    atexit.register(shutil.rmtree, d, ignore_errors=True)  # (its journal files go when the script ends)
    conn = sqlite3.connect(f"{d}/j.db", isolation_level=None, check_same_thread=False)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("PRAGMA cache_size=-16384")
    conn.execute("CREATE TABLE journal (ordering INTEGER PRIMARY KEY, persistence_id TEXT NOT NULL, "
                 "sequence_nr INTEGER NOT NULL, record BLOB NOT NULL, checksum INTEGER NOT NULL, "
                 "UNIQUE (persistence_id, sequence_nr))")
    seqs: dict[str, int] = {}

    def rows(n: int) -> list[tuple[str, int, bytes, int]]:
        out = []
        for _ in range(n):
            pid = f"/user/acc/{random.randrange(5000)}"
            seq = seqs[pid] = seqs.get(pid, 0) + 1
            out.append((pid, seq, os.urandom(150), 1))
        return out

    def store(rs: list[tuple[str, int, bytes, int]]) -> None:
        conn.execute("BEGIN IMMEDIATE")
        for i in range(0, len(rs), 100):
            conn.execute(_MULTI, list(chain.from_iterable(rs[i:i + 100])))
        conn.execute("COMMIT")

    for _ in range(50):
        store(rows(2000))
    busy = threading.Event()

    def spin() -> None:
        x = 0
        while busy.is_set():
            for i in range(1000):
                x += i

    def measure(label: str) -> None:
        lat = []
        for _ in range(15):
            rs = rows(2000)
            t = time.perf_counter()
            writer = threading.Thread(target=store, args=(rs,))
            writer.start()
            writer.join()
            lat.append(time.perf_counter() - t)
        lat.sort()
        print(f"{label}: median {lat[7] * 1e3:.1f} ms per 2,000-row commit", flush=True)

    measure("main thread idle")
    busy.set()
    spinner = threading.Thread(target=spin)
    spinner.start()
    measure("main thread busy, switch interval 5 ms")
    sys.setswitchinterval(0.0005)
    measure("main thread busy, switch interval 0.5 ms")
    busy.clear()
    spinner.join()


if __name__ == "__main__":
    main()

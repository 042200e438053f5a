"""PROFILE.md §30: one event per write_messages call (the SQLite journal's API, no actor) against raw sqlite3's
one-row transactions (bench.delivery's form), alternated: median µs a call and calls/s.

    PYTHONPATH=$PWD python bench/profiling/journal_vs_raw.py 3000
"""

import statistics
import sys
import tempfile
import time

from bench.journal import _RAW_INSERT, _raw_blob, _raw_connection
from journal import open_journal
from journal.model import AtomicWrite, PersistentRepr

n = int(sys.argv[1]) if len(sys.argv) > 1 else 3000
blob = _raw_blob()
with tempfile.TemporaryDirectory() as d, open_journal(f"sqlite:///{d}/j.db") as journal:
    raw = _raw_connection(f"{d}/raw.db")
    written = {"journal": 0, "raw": 0}

    def journal_calls(count: int) -> tuple[float, float]:
        times = []
        for _ in range(count):
            written["journal"] += 1
            write = AtomicWrite([PersistentRepr("salary", written["journal"], "acc-1", writer_uuid="w" * 36)])
            t = time.perf_counter()
            journal.write_messages([write])
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e6, count / sum(times)

    def raw_calls(count: int) -> tuple[float, float]:
        times = []
        for _ in range(count):
            written["raw"] += 1
            t = time.perf_counter()
            raw.execute("BEGIN")
            raw.execute(_RAW_INSERT, ("single", written["raw"], blob))
            raw.execute("COMMIT")
            times.append(time.perf_counter() - t)
        return statistics.median(times) * 1e6, count / sum(times)

    journal_calls(2000)  # warm-up: both WALs grown
    raw_calls(2000)
    for _ in range(3):
        (jm, jr), (rm, rr) = journal_calls(n), raw_calls(n)
        print(f"journal {jm:.0f} µs ({jr:,.0f}/s)   raw {rm:.0f} µs ({rr:,.0f}/s)")
    raw.close()

"""Where one actor's persist closed loop spends its time between two fsyncs, against raw sqlite3 (issue 16's
Persist target, PROFILE.md §27): python bench/profiling/persist_gap.py [EVENTS] [FULL|NORMAL] [ACTORS]

One BenchPersister (bench/_delivery_actors.py) on the local base (in this process, so the journal's `_store`
can be timed here) persists EVENTS events one per command after a warm-up that grows the WAL; raw sqlite3 then
writes EVENTS rows one per BEGIN/INSERT/COMMIT. Per event, medians: COMMIT (the WAL write and, at FULL, the
fdatasync), BEGIN..COMMIT (the write lock and the INSERT), and the time from one COMMIT's end to the next
transaction's start (the actor: its handler, the next command, persist, the group commit and encoding; raw:
nothing). NORMAL (no fsync) shows the same code without the wait in between. With ACTORS > 1, that many
entities of one host persist EVENTS events each at once (the bench's 100 actors: one commit carries an event of
each), and the figures are per commit.
"""

import statistics
import sys
import tempfile
import time

import actors
from bench._delivery_actors import BenchPersister, PersistLoop
from bench.journal import _RAW_INSERT, _raw_blob, _raw_connection
from journal.sqlite import SqliteJournal

events = int(sys.argv[1]) if len(sys.argv) > 1 else 4000
synchronous = sys.argv[2] if len(sys.argv) > 2 else "FULL"
fanout = int(sys.argv[3]) if len(sys.argv) > 3 else 1
marks: list[list[float]] = []  # [start of _store, start of COMMIT, end of _store] per commit


def _timed(store):
    def timed_store(self, batch):
        shared = self._h.c  # the file's one connection (journal.sqlite._Connection), traced once
        if not getattr(shared, "_gap_traced", False):
            # The statement trace runs as each statement starts: its COMMIT is where the commit begins.
            shared.conn.set_trace_callback(
                lambda sql: marks[-1].__setitem__(1, time.perf_counter()) if sql == "COMMIT" else None)
            shared._gap_traced = True
        marks.append([time.perf_counter(), 0.0, 0.0])
        store(self, batch)
        marks[-1][2] = time.perf_counter()
    return timed_store


def report(label: str, rows: list[list[float]], per: int = 1) -> None:
    """Print the medians of one loop's commits (the first fifth left out: caches, the WAL's first growth);
    `per` events a commit."""
    rows = rows[len(rows) // 5:]
    commit = statistics.median(r[2] - r[1] for r in rows) * 1e6
    before = statistics.median(r[1] - r[0] for r in rows) * 1e6
    between = statistics.median(b[0] - a[2] for a, b in zip(rows, rows[1:], strict=False)) * 1e6
    period = statistics.median(b[0] - a[0] for a, b in zip(rows, rows[1:], strict=False)) * 1e6
    print(f"{label:>5}: COMMIT {commit:6.0f} µs, BEGIN..COMMIT {before:5.0f} µs, COMMIT end to next start "
          f"{between:5.0f} µs; {period:6.0f} µs a commit of {per} ({per * 1e6 / period:,.0f} events/s)")


SqliteJournal._store = _timed(SqliteJournal._store)  # type: ignore[method-assign]
with tempfile.TemporaryDirectory(prefix="reprise-gap-") as d:
    with actors.start("local", journal=f"sqlite:///{d}/j.db?synchronous={synchronous}") as system:
        system.spawn(BenchPersister, path="/user/persisters", entities=True, passivate_after=3600.0)
        probe = system.probe()
        targets = [f"/user/persisters/{k}" for k in range(fanout)]
        for n in (events, events):  # the first run grows the WAL (a growing file costs more per fsync)
            marks.clear()
            # One message for all: their loops then run at once, one event of each per commit.
            system.tell_many([(t, PersistLoop(n, probe.path)) for t in targets])
            probe.receive_many(fanout, 600)
        report("actor" if fanout == 1 else f"{fanout} actors", marks, fanout)
    raw = _raw_connection(f"{d}/raw.db")
    raw.execute(f"PRAGMA synchronous={synchronous}")
    blob = _raw_blob()
    for first in (0, events):
        timed = []
        for i in range(first, first + events):
            t0 = time.perf_counter()
            raw.execute("BEGIN")
            raw.execute(_RAW_INSERT, ("single", i, blob))
            t1 = time.perf_counter()
            raw.execute("COMMIT")
            timed.append([t0, t1, time.perf_counter()])
    raw.close()
    report("raw", timed)

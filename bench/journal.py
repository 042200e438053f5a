"""Journal benchmark (not a test): write and replay throughput of the Reprise journal against its peers.

    .venv/bin/python -m bench.journal [--json out.json] [--scale 1.0]

Measures events/s written one per `write_messages` call (alternating with raw sqlite3, median round) and in batches of 10/100/1,000 AtomicWrites,
and replay of a 100k-event persistence id, on SQLite and PostgreSQL; the read side in the same run: a
100k-event id with every other event tagged, replayed and read by events_by_tag (50k rows), and events_by_tag over 100k
events of 1,000 interleaved ids (a projection over an entity host's journal); against raw `sqlite3` (one row per
transaction, and `executemany` of 1,000 rows per transaction, same durability: WAL + synchronous=FULL)
and the `eventsourcing` library (SQLite module, one event per save and 100 per save). Targets: one event
per call >= 0.8x raw SQLite per transaction; batches of 1,000 >= 0.5x raw executemany; replay >= 300k/s.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from journal import AtomicWrite, Journal, PersistentRepr, open_journal, register_type
from journal.serialization import serialize

PG_URL = os.environ.get("REPRISE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


@register_type(manifest="bench.Deposited")
@dataclass(frozen=True)
class Deposited:
    """A typical small domain event."""

    account: str
    amount: int
    note: str


def _event(n: int) -> Deposited:
    return Deposited(f"acc-{n % 1000}", n, "salary")


@dataclass
class Result:
    system: str
    measurement: str
    events: int
    seconds: float

    @property
    def rate(self) -> float:
        return self.events / self.seconds if self.seconds else float("inf")


def _timed(fn: Callable[[], int]) -> tuple[int, float]:
    # Each measurement starts from a collected heap: otherwise whether a full collection (of every object the
    # process holds) falls inside a 0.3 s read depends on the measurements before it, and the read rows were
    # bimodal (PostgreSQL events_by_persistence_id ~305k or ~228k/s; bench/PROFILE.md §38).
    gc.collect()
    t = time.perf_counter()
    n = fn()
    return n, time.perf_counter() - t


# --- Reprise journal -------------------------------------------------------------------------------


def _alternating(writers: list[Callable[[int], None]], total: int, rounds: int = 10) -> list[float]:
    """Seconds each writer needs for `total` single writes: alternating rounds, so the machine's fsync
    jitter hits every writer alike, and the median round times `rounds`, so one burst does not decide."""
    times: list[list[float]] = [[] for _ in writers]
    per_round = max(1, total // rounds)
    for r in range(rounds):
        for i, write in enumerate(writers):
            t = time.perf_counter()
            for n in range(r * per_round + 1, (r + 1) * per_round + 1):
                write(n)
            times[i].append(time.perf_counter() - t)
    return [statistics.median(ts) * rounds for ts in times]


def bench_sqlite_singles(workdir: str, singles: int) -> list[Result]:
    """One event per write_messages call vs raw sqlite3 one row per transaction, same durability."""
    j = open_journal(f"sqlite://{workdir}/singles.db")
    raw = _raw_connection(f"{workdir}/raw-singles.db")
    blob = _raw_blob()

    def reprise(n: int) -> None:
        j.write_messages([AtomicWrite([PersistentRepr(_event(n), n, "single", writer_uuid="w")])])

    def raw_one(n: int) -> None:
        raw.execute("BEGIN")
        raw.execute(_RAW_INSERT, ("single", n, blob))
        raw.execute("COMMIT")

    ours, theirs = _alternating([reprise, raw_one], singles)
    events = singles // 10 * 10
    j.close()
    raw.close()
    return [Result("reprise sqlite", "write, 1 event per call", events, ours),
            Result("raw sqlite3", "1 row per transaction", events, theirs)]


def bench_reprise(system: str, url: str, singles: int, scale: float) -> list[Result]:
    """Write one per call (unless `singles` is 0) and in batches, then replay the 100k id twice."""
    out: list[Result] = []
    with open_journal(url) as j:
        if singles:
            def one_per_call() -> int:
                for n in range(1, singles + 1):
                    j.write_messages([AtomicWrite([PersistentRepr(_event(n), n, "single", writer_uuid="w")])])
                return singles

            out.append(Result(system, "write, 1 event per call", *_timed(one_per_call)))
        replay_pid = ""
        for size, total in ((10, 20_000), (100, 50_000), (1000, 100_000)):
            total = max(size, int(total * scale) // size * size)
            pid = f"batch-{size}"
            writes = [AtomicWrite([PersistentRepr(_event(n), n, pid, writer_uuid="w")]) for n in range(1, total + 1)]

            def batched(writes: list[AtomicWrite] = writes, size: int = size) -> int:
                for i in range(0, len(writes), size):
                    j.write_messages(writes[i:i + size])
                return len(writes)

            out.append(Result(system, f"write, batches of {size:,}", *_timed(batched)))
            replay_pid = pid
        del writes, batched  # (a reader's heap does not hold the writer's 100,000 AtomicWrites)
        n_replay = j.highest_sequence_nr(replay_pid)
        for when in ("first read", "again"):
            out.append(Result(system, f"replay one id of {n_replay:,} events ({when})",
                              *_timed(lambda: sum(1 for _ in j.replay_messages(replay_pid)))))
        out += bench_query(system, j, scale)
    return out


TAG = "bench-tag"


def write_all(j: Journal, writes: list[AtomicWrite], batch: int = 1000) -> None:
    """Write `writes` in write_messages calls of `batch`, checking that every one was stored."""
    for i in range(0, len(writes), batch):
        part = writes[i:i + batch]
        if j.write_messages(part) != [None] * len(part):
            raise RuntimeError(f"the journal rejected a write of {len(part)} AtomicWrites")


def bench_query(system: str, j: Journal, scale: float) -> list[Result]:
    """The read side on one tagged journal: replay of a 100k-event id, and events_by_tag over its tagged half."""
    total = max(1000, int(100_000 * scale) // 1000 * 1000)
    pid = "tagged"
    tagged, untagged = frozenset({TAG}), frozenset[str]()
    # (made in the call and dropped after it: a reader's heap does not hold the writer's AtomicWrites)
    write_all(j, [AtomicWrite([PersistentRepr(_event(n), n, pid, writer_uuid="w", tags=tagged if n % 2 else untagged)])
                   for n in range(1, total + 1)])
    out: list[Result] = []
    for when in ("first read", "again"):
        out.append(Result(system, f"replay tagged id {total:,} ({when})",
                          *_timed(lambda: sum(1 for _ in j.replay_messages(pid)))))
        out.append(Result(system, f"events_by_tag {total // 2:,}/{total:,} ({when})",
                          *_timed(lambda: sum(1 for _ in j.events_by_tag(TAG)))))
    out.append(Result(system, f"events_by_persistence_id {total:,}",
                      *_timed(lambda: sum(1 for _ in j.events_by_persistence_id(pid)))))
    # What a projection over an entity host's journal reads: each group commit holds one event of many ids,
    # so consecutive events by tag belong to different ids.
    mixed, ids = frozenset({TAG + "-mixed"}), 1000
    write_all(j, [AtomicWrite([PersistentRepr(_event(n), n // ids + 1, f"entity-{n % ids}", writer_uuid="w",
                                               tags=mixed)]) for n in range(total)])
    out.append(Result(system, f"events_by_tag {total:,} of {ids:,} interleaved ids",
                      *_timed(lambda: sum(1 for _ in j.events_by_tag(TAG + "-mixed")))))
    return out


# --- raw sqlite3 -----------------------------------------------------------------------------------

_RAW_INSERT = "INSERT INTO events VALUES (?, ?, ?)"


def _raw_connection(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE events (persistence_id TEXT NOT NULL, sequence_nr INTEGER NOT NULL, "
                 "payload BLOB NOT NULL, PRIMARY KEY (persistence_id, sequence_nr))")
    return conn


def _raw_blob() -> bytes:
    """The bytes Reprise stores for one benchmark event, so raw sqlite3 writes the same amount."""
    return serialize(["w", "", 1_700_000_000_000, [], None, "bench.Deposited", 1, "acc-1", 1, "salary"])


def bench_raw_sqlite(path: str, scale: float) -> list[Result]:
    """The floor: the same bytes inserted with sqlite3 directly, same durability settings."""
    conn = _raw_connection(path)
    blob = _raw_blob()
    out: list[Result] = []
    total = max(1000, int(100_000 * scale) // 1000 * 1000)
    rows = [("many", n, blob) for n in range(1, total + 1)]

    def executemany() -> int:
        for i in range(0, total, 1000):
            conn.execute("BEGIN")
            conn.executemany(_RAW_INSERT, rows[i:i + 1000])
            conn.execute("COMMIT")
        return total

    out.append(Result("raw sqlite3", "executemany, 1,000 rows per transaction", *_timed(executemany)))
    out.append(Result("raw sqlite3", f"select one id of {total:,} rows", *_timed(lambda: len(conn.execute(
        "SELECT sequence_nr, payload FROM events WHERE persistence_id = ? ORDER BY sequence_nr",
        ("many",)).fetchall()))))
    conn.close()
    return out


# --- eventsourcing -----------------------------------------------------------------------------------


def bench_eventsourcing(path: str, singles: int, scale: float) -> list[Result]:
    """The `eventsourcing` library's SQLite module (WAL, SQLite's default synchronous=FULL)."""
    from eventsourcing.application import Application
    from eventsourcing.domain import Aggregate, event

    class Account(Aggregate):
        def __init__(self) -> None:
            self.balance = 0

        @event("Deposited")
        def deposit(self, amount: int) -> None:
            self.balance += amount

    app = Application(env={"PERSISTENCE_MODULE": "eventsourcing.sqlite", "SQLITE_DBNAME": path})
    out: list[Result] = []
    account = Account()
    app.save(account)

    def one_per_save() -> int:
        for n in range(singles):
            account.deposit(n)
            app.save(account)
        return singles

    out.append(Result("eventsourcing 9 (sqlite)", "1 event per save", *_timed(one_per_save)))
    saves = max(1, int(200 * scale))

    def hundred_per_save() -> int:
        for _ in range(saves):
            for n in range(100):
                account.deposit(n)
            app.save(account)
        return saves * 100

    out.append(Result("eventsourcing 9 (sqlite)", "100 events per save", *_timed(hundred_per_save)))
    n = len(list(app.repository.event_store.get(account.id)))
    out.append(Result("eventsourcing 9 (sqlite)", f"read one aggregate's {n:,} events",
                      *_timed(lambda: len(list(app.repository.event_store.get(account.id))))))
    app.close()
    return out


# --- report ------------------------------------------------------------------------------------------


def _find(results: list[Result], system: str, prefix: str) -> Result | None:
    return next((r for r in results if r.system == system and r.measurement.startswith(prefix)), None)


def targets(results: list[Result]) -> list[tuple[str, float, float, bool]]:
    """(target, achieved, required, met) for each target the issue sets."""
    rows: list[tuple[str, float, float, bool]] = []
    raw1, rawmany = _find(results, "raw sqlite3", "1 row"), _find(results, "raw sqlite3", "executemany")
    for system in ("reprise sqlite", "reprise postgresql"):
        one, thousand = _find(results, system, "write, 1 event"), _find(results, system, "write, batches of 1,000")
        replays = [r for r in results if r.system == system and r.measurement.startswith("replay one id")]
        if system == "reprise sqlite" and one and raw1:
            rows.append((f"{system}: 1 event per call vs raw per-transaction", one.rate / raw1.rate, 0.8,
                         one.rate / raw1.rate >= 0.8))
        if system == "reprise sqlite" and thousand and rawmany:
            ratio = thousand.rate / rawmany.rate
            rows.append((f"{system}: batches of 1,000 vs raw executemany", ratio, 0.5, ratio >= 0.5))
        for replay in replays:
            when = replay.measurement.rsplit("(", 1)[-1].rstrip(")")
            rows.append((f"{system}: replay events/s ({when})", replay.rate, 300_000, replay.rate >= 300_000))
    return rows


def render(results: list[Result]) -> str:
    """The results as a plain-text table with ratios to raw sqlite3 and the targets."""
    raw1, rawmany = _find(results, "raw sqlite3", "1 row"), _find(results, "raw sqlite3", "executemany")
    lines = [f"{'system':<26} {'measurement':<42} {'events':>9} {'seconds':>8} {'events/s':>11} {'vs raw':>7}",
             "-" * 108]
    for r in results:
        base = raw1 if ("1 event" in r.measurement or "1 row" in r.measurement) else rawmany
        ratio = f"{r.rate / base.rate:6.2f}x" if base and "replay" not in r.measurement \
            and "select" not in r.measurement and "read" not in r.measurement \
            and "events_by" not in r.measurement else ""
        lines.append(f"{r.system:<26} {r.measurement:<42} {r.events:>9,} {r.seconds:>8.3f} {r.rate:>11,.0f} {ratio:>7}")
    lines += ["", "read side (same run, same tagged journal): events_by_tag rows/s vs replay rows/s:"]
    for system in ("reprise sqlite", "reprise postgresql"):
        for when in ("first read", "again"):
            replay = next((r for r in results if r.system == system
                           and r.measurement.startswith("replay tagged id") and when in r.measurement), None)
            by_tag = next((r for r in results if r.system == system
                           and r.measurement.startswith("events_by_tag") and when in r.measurement), None)
            if replay and by_tag:
                lines.append(f"  {system} ({when}): events_by_tag {by_tag.rate:,.0f}/s, replay {replay.rate:,.0f}/s "
                             f"({by_tag.rate / replay.rate:.2f}x)")
    lines += ["", "targets:"]
    for name, got, need, ok in targets(results):
        fmt = (lambda v: f"{v:,.0f}/s") if need > 10 else (lambda v: f"{v:.2f}x")
        lines.append(f"  {'MET   ' if ok else 'MISSED'} {name}: {fmt(got)} (target >= {fmt(need)})")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    """Run every measurement once and print the table (and optionally write JSON)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--scale", type=float, default=1.0, help="multiply the batch sizes' event totals")
    ap.add_argument("--singles", type=int, default=10_000, help="events written one per call / transaction")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--dir", default=None, help="where the SQLite files go (default: a temp dir)")
    args = ap.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="reprise-bench-", dir=args.dir)
    results: list[Result] = []
    notes: list[str] = []
    try:
        results += bench_sqlite_singles(workdir, args.singles)
        results += bench_reprise("reprise sqlite", f"sqlite://{workdir}/reprise.db", 0, args.scale)
        results += bench_raw_sqlite(f"{workdir}/raw.db", args.scale)
        if not args.no_postgres:
            pg = f"{PG_URL}?schema=reprise_bench_{uuid.uuid4().hex[:8]}"
            try:
                results += bench_reprise("reprise postgresql", pg, max(1, args.singles // 3), args.scale)
            except Exception as e:  # a missing server is reported, not fatal
                notes.append(f"postgresql skipped: {e}")
            finally:
                try:
                    from journal.postgres import drop_schema
                    drop_schema(pg)
                except Exception:
                    pass
        try:
            results += bench_eventsourcing(f"{workdir}/es.db", max(1, args.singles // 3), args.scale)
        except ImportError as e:
            notes.append(f"eventsourcing skipped: {e}")
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    print(f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} cpus, "
          f"{platform.platform()}")
    print(render(results))
    for n in notes:
        print(n)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": [dict(r.__dict__, rate=r.rate) for r in results],
                       "targets": [dict(zip(("target", "achieved", "required", "met"), t, strict=True))
                                   for t in targets(results)], "notes": notes}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

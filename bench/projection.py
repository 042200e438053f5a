"""Projection benchmark (not a test): a projection's events/s against replay of the same events, in one run.

    .venv/bin/python -m bench.projection [--json out.json] [--events 100000] [--no-postgres]

Writes `--events` tagged events (100 per persistence id, in batches of 100) to a journal, then measures
on SQLite and PostgreSQL: replay of every id (the write side's recovery path), and a Projection actor
(in its own process, on the multi-process base) reading the tag from offset 0 until its stored offset is the newest
(timed from the spawn, less the measured cost of spawning a host process):
at-least-once with a handler that only counts, and exactly-once in groups of 100 with a handler that
upserts a per-id sum into the offset store's database (the accounts read model's shape).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sqlite3
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass
from typing import Any

import actors
from journal import AtomicWrite, EventEnvelope, PersistentRepr, open_journal, register_type
from persistence import EventsByTag, GetProjectionState, Projection

PG_URL = os.environ.get("REPRISE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
TAG = "bench"
PER_ID = 100


@register_type(manifest="bench.projection.Added")
@dataclass(frozen=True)
class Added:
    """A small event."""

    amount: int


def count(envelope: EventEnvelope) -> None:
    """The at-least-once handler: does nothing but be called."""


def upsert_sums(conn: Any, envelopes: list[EventEnvelope]) -> None:
    """The exactly-once grouped handler: add each id's amounts to a sums table, in the projection's transaction."""
    sums: dict[str, int] = {}
    for e in envelopes:
        sums[e.persistence_id] = sums.get(e.persistence_id, 0) + e.event.amount
    mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    conn.execute("CREATE TABLE IF NOT EXISTS sums (pid TEXT PRIMARY KEY, total BIGINT NOT NULL)")
    conn.cursor().executemany(f"INSERT INTO sums VALUES ({mark}, {mark}) ON CONFLICT (pid) DO UPDATE "
                              "SET total = sums.total + excluded.total", sorted(sums.items()))


def fill(url: str, events: int) -> list[str]:
    """Write `events` tagged events, PER_ID per persistence id; return the ids."""
    pids = [f"p-{i}" for i in range(max(1, events // PER_ID))]
    with open_journal(url) as j:
        for pid in pids:
            j.write_messages([AtomicWrite([PersistentRepr(Added(n), n, pid, writer_uuid="w", tags=frozenset({TAG}))
                                           for n in range(1, PER_ID + 1)])])
    return pids


def replay(url: str, pids: list[str]) -> tuple[int, float]:
    with open_journal(url) as j:
        t = time.perf_counter()
        n = sum(1 for pid in pids for _ in j.replay_messages(pid))
        return n, time.perf_counter() - t


def project(url: str, store: str, events: int, **kwargs: Any) -> tuple[int, float]:
    """Seconds from spawning a projection until its stored offset is the newest of the tag, less a spawn's cost.

    A spawn starts a host process (a few hundred ms, as long as projecting 20,000 events takes): the time
    to spawn a projection of an empty tag and get its first answer is measured first and subtracted.
    """
    with open_journal(url) as j:
        newest = max(e.offset for e in j.events_by_tag(TAG))
    system = actors.start("multiproc", journal=url)
    try:
        spawn = dict(offset_store=store, poll_interval=0.01, **kwargs)
        t = time.perf_counter()
        system.spawn(Projection, "/user/empty", kwargs=dict(source=EventsByTag("no-such-tag"), **spawn))
        system.ask("/user/empty", GetProjectionState(), timeout=60)
        startup = time.perf_counter() - t
        t = time.perf_counter()
        system.spawn(Projection, "/user/bench", kwargs=dict(source=EventsByTag(TAG), **spawn))
        while system.ask("/user/bench", GetProjectionState(), timeout=60).stored_offset < newest:
            time.sleep(0.005)
        return events, max(time.perf_counter() - t - startup, 1e-6)
    finally:
        system.shutdown()


def run(name: str, url: str, store: str, events: int) -> list[dict[str, Any]]:
    pids = fill(url, events)
    n = len(pids) * PER_ID
    out = []
    for measurement, (count_, seconds) in (
            ("replay of every id", replay(url, pids)),
            ("projection, at-least-once, counting handler", project(url, store, n, handler="bench.projection:count")),
            ("projection, exactly-once, groups of 100, SQL upsert",
             project(url, store, n, handler="bench.projection:upsert_sums", exactly_once=True, group_size=100,
                     projection_id="exactly-once"))):
        out.append({"system": name, "measurement": measurement, "events": count_, "seconds": seconds,
                    "rate": count_ / seconds})
    return out


def main(argv: list[str] | None = None) -> int:
    """Run the measurements once, print a table (and optionally write JSON)."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="also write the results to this file")
    ap.add_argument("--events", type=int, default=100_000, help="tagged events written and projected")
    ap.add_argument("--no-postgres", action="store_true")
    args = ap.parse_args(argv)
    workdir = tempfile.mkdtemp(prefix="reprise-bench-projection-")
    results: list[dict[str, Any]] = []
    notes: list[str] = []
    try:
        results += run("reprise sqlite", f"sqlite://{workdir}/journal.db", f"sqlite://{workdir}/read.db",
                       args.events)
        if not args.no_postgres:
            from journal.postgres import drop_schema

            journal, store = (f"{PG_URL}?schema=reprise_bench_{kind}_{uuid.uuid4().hex[:8]}" for kind in "jr")
            try:
                results += run("reprise postgresql", journal, store, args.events)
            except Exception as e:  # a missing server is reported, not fatal
                notes.append(f"postgresql skipped: {e}")
            finally:
                for url in (journal, store):
                    try:
                        drop_schema(url)
                    except Exception:
                        pass
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    for r in results:
        print(f"{r['system']:<20} {r['measurement']:<52} {r['events']:>8,} events {r['rate']:>12,.0f}/s")
    by_system: dict[str, dict[str, float]] = {}
    for r in results:
        by_system.setdefault(r["system"], {})[r["measurement"]] = r["rate"]
    for system, rates in by_system.items():
        base = rates["replay of every id"]
        print(f"{system}: " + ", ".join(f"{m.split(',')[1].strip()} {rate / base:.2f}x replay"
                                        for m, rate in rates.items() if m.startswith("projection")))
    for n in notes:
        print(n)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": results, "notes": notes}, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())

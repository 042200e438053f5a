"""Handlers for tests/persistence/test_projection*.py: importable by name, so every actor process finds them.

Each records what it handled in a `handled` table: of its own SQLite file (at-least-once, bound with
functools.partial) or of the offset store's database, in the projection's transaction (exactly-once).
"""

from __future__ import annotations

import os
import sqlite3
from typing import Any

from journal import EventEnvelope
from journal.postgres import lock_ddl

_CREATE = ("CREATE TABLE IF NOT EXISTS handled (persistence_id TEXT, sequence_nr INTEGER, "
           "event_offset INTEGER, amount INTEGER, call INTEGER)")


def _row(e: EventEnvelope, call: int) -> tuple[str, int, int, int, int]:
    return e.persistence_id, e.sequence_nr, e.offset, e.event.amount, call


def record_to(path: str, envelope: EventEnvelope) -> None:
    """At-least-once: append the envelope to `path`'s handled table."""
    with sqlite3.connect(path, timeout=30) as db:
        db.execute(_CREATE)
        db.execute("INSERT INTO handled VALUES (?, ?, ?, ?, ?)", _row(envelope, 0))


def record_to_failing_once(fail_marker: str, path: str, envelope: EventEnvelope) -> None:
    """record_to, failing once on amount 13 before recording it (creating `fail_marker`)."""
    if envelope.event.amount == 13 and not os.path.exists(fail_marker):
        open(fail_marker, "w").close()
        raise RuntimeError("injected handler failure on amount 13")
    record_to(path, envelope)


def record_group_to(path: str, envelopes: list[EventEnvelope]) -> None:
    """At-least-once, grouped: append the envelopes, numbering the call (to see how they were grouped)."""
    with sqlite3.connect(path, timeout=30) as db:
        db.execute(_CREATE)
        call = db.execute("SELECT coalesce(max(call), 0) + 1 FROM handled").fetchone()[0]
        db.executemany("INSERT INTO handled VALUES (?, ?, ?, ?, ?)", [_row(e, call) for e in envelopes])


def record_in_transaction(conn: Any, envelopes: EventEnvelope | list[EventEnvelope]) -> None:
    """Exactly-once: insert into the offset store's database, in the projection's transaction."""
    failing_once_in_transaction(None, conn, envelopes)


def failing_once_in_transaction(fail_marker: str | None, conn: Any,
                                envelopes: EventEnvelope | list[EventEnvelope]) -> None:
    """record_in_transaction, failing once on amount 13 when `fail_marker` is given (creating that file).

    The failure comes after the inserts: the transaction must roll them back with the offset.
    """
    batch = envelopes if isinstance(envelopes, list) else [envelopes]
    mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    if mark == "%s":
        lock_ddl(conn)  # (two projections on one new store would race in CREATE TABLE IF NOT EXISTS)
    conn.execute(_CREATE)
    for e in batch:
        conn.execute(f"INSERT INTO handled VALUES ({', '.join([mark] * 5)})", _row(e, len(batch)))
    if fail_marker and any(e.event.amount == 13 for e in batch) and not os.path.exists(fail_marker):
        open(fail_marker, "w").close()
        raise RuntimeError("injected handler failure on amount 13")


def record_offsets_to(path: str, envelope: EventEnvelope) -> None:
    """At-least-once, any event: append (offset, persistence id) to `path`'s offsets table."""
    with sqlite3.connect(path, timeout=30) as db:
        db.execute("CREATE TABLE IF NOT EXISTS offsets (event_offset INTEGER, persistence_id TEXT)")
        db.execute("INSERT INTO offsets VALUES (?, ?)", (envelope.offset, envelope.persistence_id))


def failing_once_in_with_block(fail_marker: str, conn: Any, envelope: EventEnvelope) -> None:
    """Exactly-once on SQLite the idiomatic sqlite3 way (`with conn:`), failing once on amount 13 after its insert."""
    conn.execute(_CREATE)
    with conn:
        conn.execute("INSERT INTO handled VALUES (?, ?, ?, ?, ?)", _row(envelope, 1))
    if envelope.event.amount == 13 and not os.path.exists(fail_marker):
        open(fail_marker, "w").close()
        raise RuntimeError("injected handler failure on amount 13")


def write_moves_in_child(url: str, pids: list[str], events: int, go: Any) -> None:
    """A writer process: Moved(amount) events tagged "moves", one write per event, `events` per id (ids interleaved),
    once `go` is set. Amounts are unique per (id, sequence nr): 1000 * the id's index in `pids` + sequence nr."""
    from journal import AtomicWrite, PersistentRepr, open_journal
    from tests.persistence.tagging_actors import Moved

    go.wait(60)
    with open_journal(url) as j:
        for n in range(1, events + 1):
            for i, pid in enumerate(pids):
                write = AtomicWrite([PersistentRepr(Moved(1000 * i + n), n, pid, tags=frozenset({"moves"}))])
                if j.write_messages([write]) != [None]:
                    raise SystemExit(f"write of {pid} #{n} rejected")

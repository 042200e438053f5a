"""An exactly-once projection stays exact while writer processes commit concurrently (both bases, SQLite and
PostgreSQL journals): on PostgreSQL one writer's write is held before its COMMIT while the others commit later offsets,
and the projection must neither pass it nor handle anything twice."""

from __future__ import annotations

import contextlib
import multiprocessing
import uuid

import pytest

from journal import open_journal
from persistence import EventsByTag, GetProjectionState, Projection
from tests.journal.held_commits import postgres_commits_held
from tests.persistence.projection_fixtures import record_in_transaction, write_moves_in_child
from tests.persistence.test_projection import handled_rows
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(180)

PROJECTION = "/user/projection"


def test_an_exactly_once_projection_handles_each_event_of_concurrent_writers_once_in_offset_order(
        base, projection_stores, make_system):
    journal, store = projection_stores
    groups = [[f"w{g}-{i}-{uuid.uuid4().hex[:6]}" for i in range(2)] for g in range(3)]
    pids = [p for g in groups for p in g]
    events = 20
    system = make_system(base, journal=journal)
    system.spawn(Projection, PROJECTION, kwargs=dict(
        source=EventsByTag("moves", gap_timeout=60), handler=record_in_transaction, offset_store=store,
        exactly_once=True, batch=7, poll_interval=0.05))
    on_postgres = journal.startswith("postgresql")
    ctx = multiprocessing.get_context("spawn")
    gos = [ctx.Event() for _ in groups]
    writers = [ctx.Process(target=write_moves_in_child, args=(journal, g, events, go))
               for g, go in zip(groups, gos, strict=True)]
    held_state = None
    with open_journal(journal) as j:
        try:
            for w in writers:
                w.start()
            hold = postgres_commits_held(journal, groups[0][0]) if on_postgres else contextlib.nullcontext(None)
            with hold as held:
                gos[0].set()
                if held is not None:  # the others start once group 0's first write drew its offset and waits
                    wait_for(held, 60)
                for go in gos[1:]:
                    go.set()
                if held is not None:
                    wait_for(lambda: all(j.highest_sequence_nr(p) >= 5 for g in groups[1:] for p in g), 60)
                    held_state = system.ask(PROJECTION, GetProjectionState(), timeout=30)
            for w in writers:
                w.join(120)
            assert [w.exitcode for w in writers] == [0] * len(writers)
            tagged = [e for e in j.events_by_tag("moves")]
            assert len(tagged) == events * len(pids)
            wait_for(lambda: system.ask(PROJECTION, GetProjectionState(), timeout=30).stored_offset
                     == tagged[-1].offset, 60)
        finally:
            for go in gos:
                go.set()
            for w in writers:
                w.join(30)
                if w.is_alive():
                    w.kill()
    rows = handled_rows(store)
    assert [(p, s, o) for p, s, o, _, _ in rows] == [(e.persistence_id, e.sequence_nr, e.offset) for e in tagged], (
        "handled rows must be every tagged event once, in offset order")
    if held_state is not None:
        first = next(e.offset for e in tagged if (e.persistence_id, e.sequence_nr) == (groups[0][0], 1))
        later = max(e.offset for e in tagged if e.persistence_id in groups[1][0:2] and e.sequence_nr <= 5)
        assert later > first, "the scenario needs later offsets committed while the held write was open"
        assert held_state.handled_offset < first, "the projection passed a write in flight"
    state = system.ask(PROJECTION, GetProjectionState(), timeout=30)
    assert (state.stored_offset, state.lag) == (tagged[-1].offset, 0)

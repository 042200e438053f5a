"""Projections on real actor systems (both bases), SQLite and PostgreSQL journals and offset stores."""

from __future__ import annotations

import functools
import json
import os
import re
import sqlite3
import subprocess
import sys
import time
import uuid

import psycopg
import pytest

from actors import ConfigError, SpawnFailed
from actors.topology import loads, resolve_class
from journal import open_journal
from persistence import (
    EventsByTag,
    GetProjectionState,
    OffsetStoreError,
    Projection,
    ProjectionError,
    open_offset_store,
)
from tests.conftest import pg_schema_url
from tests.persistence.projection_fixtures import (
    failing_once_in_transaction,
    record_group_to,
    record_in_transaction,
    record_offsets_to,
    record_to,
    record_to_failing_once,
)
from tests.persistence.tagging_actors import Mover
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

PROJECTION = "/user/projection"




def move(system, amounts_by_id: dict[str, list[int]]) -> None:
    """Persist Moved(amount) events (tagged "moves") through Mover entities; returns once all are stored."""
    for pid, amounts in amounts_by_id.items():
        assert system.ask(f"/user/movers/{pid}", amounts, timeout=30) == "done"


def handled_rows(store_url: str) -> list[tuple]:
    """The handled table of the offset store's database: (pid, seq, offset, amount, call), in insertion order."""
    if store_url.startswith("sqlite"):
        with sqlite3.connect(store_url[len("sqlite://"):]) as db:
            return db.execute("SELECT * FROM handled ORDER BY rowid").fetchall()
    from persistence.offset_store import postgres_conninfo

    conninfo, schema = postgres_conninfo(store_url)
    with psycopg.connect(conninfo) as db:
        return db.execute(f"SELECT * FROM {schema}.handled ORDER BY ctid").fetchall()


def tagged_offsets(journal_url: str, tag: str = "moves") -> list[int]:
    with open_journal(journal_url) as j:
        return [e.offset for e in j.events_by_tag(tag)]


def state(system):
    return system.ask(PROJECTION, GetProjectionState(), timeout=10)


def test_exactly_once_from_a_topology_entry_hands_every_event_once_in_offset_order(base, projection_stores, make_system):
    journal, store = projection_stores
    system = make_system(base, journal=journal)
    system.spawn(Mover, "/user/movers", entities=True)
    move(system, {"a": [1, 2, 3], "b": [150]})
    topology = loads(f"""
        [[actor]]
        path = "{PROJECTION}"
        class = "persistence:Projection"
        max_restarts = 3
        [actor.kwargs]
        source = {{ tag = "moves" }}
        handler = "tests.persistence.projection_fixtures:record_in_transaction"
        offset_store = "{store}"
        exactly_once = true
        poll_interval = 0.1
    """)
    (entry,) = topology.entries
    system.spawn(resolve_class(entry.factory), entry.path, kwargs=entry.kwargs, **entry.options)
    move(system, {"b": [7, 8], "c": [9]})  # written while the projection runs: followed live
    offsets = tagged_offsets(journal)
    assert len(offsets) == 7
    wait_for(lambda: state(system).stored_offset == offsets[-1], timeout=30, interval=0.05)
    rows = handled_rows(store)
    assert [r[2] for r in rows] == offsets, "each event once, in offset order"
    assert sorted(r[3] for r in rows) == [1, 2, 3, 7, 8, 9, 150]
    assert system.status().hosts[PROJECTION].counters["projection_lag"] == 0


def test_exactly_once_grouped_survives_a_failing_handler_and_restarts_from_the_stored_offset(
        base, projection_stores, make_system, tmp_path):
    journal, store = projection_stores
    system = make_system(base, journal=journal)
    system.spawn(Mover, "/user/movers", entities=True)
    move(system, {"a": list(range(1, 11)), "b": [11, 12]})
    marker = str(tmp_path / "failed-once")
    system.spawn(Projection, PROJECTION, kwargs=dict(
        source=EventsByTag("moves"), handler=functools.partial(failing_once_in_transaction, marker),
        offset_store=store, exactly_once=True, group_size=4, group_within=0.05, batch=5, poll_interval=0.1))
    move(system, {"c": [13, 14, 15], "a": [16]})  # 13: the handler fails once, after its inserts
    offsets = tagged_offsets(journal)
    assert len(offsets) == 16
    wait_for(lambda: state(system).stored_offset == offsets[-1], timeout=60, interval=0.05)
    rows = handled_rows(store)
    assert [r[2] for r in rows] == offsets, "every event exactly once: the failed group's rows rolled back"
    assert max(r[4] for r in rows) == 4, "handled in groups of up to group_size"
    assert (tmp_path / "failed-once").exists()
    s = state(system)
    assert (s.stored_offset, s.handled_offset, s.read_offset, s.lag) == (offsets[-1],) * 3 + (0,)
    # The error names the event the handler failed on, not the projection's timer tick.
    reasons = [e.reason for e in system.errors().recent if e.path == PROJECTION]
    assert any(re.search(r"ProjectionHandlerError: projection .*: the handler failed on event \S+ #\d+ \(offset "
                         r"\d+\) \(first of a group of \d\): RuntimeError", r) for r in reasons), reasons


def test_exactly_once_with_two_systems_on_one_offset_store_applies_each_event_once(base, projection_stores,
                                                                                  make_system):
    # Two systems started on the same journal and offset store (a topology brought up twice, or a node cut off
    # while its replacement runs): each projection committed its offset over the other's, and the read model
    # counted every event twice.
    journal, store = projection_stores
    systems = [make_system(base, journal=journal) for _ in range(2)]
    for system in systems:
        system.spawn(Mover, "/user/movers", entities=True)
        system.spawn(Projection, PROJECTION, kwargs=dict(
            source=EventsByTag("moves"), handler="tests.persistence.projection_fixtures:record_in_transaction",
            offset_store=store, exactly_once=True, poll_interval=0.05), max_restarts=100)
    for system in systems:  # both have loaded the offset (none) before there are events: the second to commit conflicts
        wait_for(lambda system=system: state(system).stored_offset == 0, timeout=60, interval=0.05)
    move(systems[0], {"a": [1, 2, 3], "b": [4]})
    move(systems[0], {"c": [5, 6]})
    offsets = tagged_offsets(journal)
    assert len(offsets) == 6
    for system in systems:
        wait_for(lambda system=system: state(system).stored_offset == offsets[-1], timeout=60, interval=0.05)
    assert [r[2] for r in handled_rows(store)] == offsets, "every event once, in offset order"
    reasons = [e.reason for system in systems for e in system.errors().recent if e.path == PROJECTION]
    assert any("OffsetConflict: projection /user/projection: the offset store" in r for r in reasons), reasons
    for system in systems:  # (their offset store connections go before the fixture drops its schema)
        system.stop(PROJECTION)


def test_at_least_once_one_by_one_resumes_after_the_last_event_handled_before_a_failing_one(
        base, make_system, tmp_path):
    journal = f"sqlite:///{tmp_path}/journal.db"
    sink = f"{tmp_path}/sink.db"
    system = make_system(base, journal=journal)
    system.spawn(Mover, "/user/movers", entities=True)
    move(system, {"a": list(range(1, 11)), "b": list(range(11, 16))})  # 15 events, read in one batch
    marker = str(tmp_path / "failed-once")
    system.spawn(Projection, PROJECTION, kwargs=dict(
        source=EventsByTag("moves"), handler=functools.partial(record_to_failing_once, marker, sink),
        offset_store=f"sqlite:///{tmp_path}/offsets.db", save_after_envelopes=5, save_after_duration=60,
        poll_interval=0.1))
    offsets = tagged_offsets(journal)
    wait_for(lambda: state(system).handled_offset == offsets[-1], timeout=30, interval=0.05)
    assert (tmp_path / "failed-once").exists()
    # Saved after 5 and 10; the failure on the 13th stopped the projection with 11 and 12 handled, which its
    # stop saved: the restart handles the 13th on, and nothing twice.
    with sqlite3.connect(sink) as db:
        assert [r[0] for r in db.execute("SELECT event_offset FROM handled ORDER BY rowid")] == offsets
    failing = offsets[12]
    reasons = [e.reason for e in system.errors().recent if e.path == PROJECTION]
    assert any(re.search(rf"ProjectionHandlerError: projection .*: the handler failed on event /user/movers/b #3 \(offset "
                         rf"{failing}\): RuntimeError: injected", r) for r in reasons), reasons


def test_at_least_once_grouped_saves_the_offset_after_n_envelopes_and_resumes_there(base, make_system, tmp_path):
    journal = f"sqlite:///{tmp_path}/journal.db"
    sink = f"{tmp_path}/sink.db"
    offsets_url = f"sqlite:///{tmp_path}/offsets.db"
    system = make_system(base, journal=journal)
    system.spawn(Mover, "/user/movers", entities=True)
    move(system, {"a": list(range(1, 8))})
    kwargs = dict(source=EventsByTag("moves", journal=journal), handler=functools.partial(record_group_to, sink),
                  offset_store=offsets_url, group_size=3, group_within=0.05, save_after_envelopes=3,
                  save_after_duration=60, poll_interval=0.1)
    system.spawn(Projection, PROJECTION, kwargs=kwargs)
    offsets = tagged_offsets(journal)
    wait_for(lambda: state(system).handled_offset == offsets[-1], timeout=30, interval=0.05)
    # 7 events in groups of 3, 3, 1; saved after 6 (the 7th waits for save_after_duration or a stop).
    assert state(system).stored_offset == offsets[5]
    with sqlite3.connect(sink) as db:
        calls = [r[0] for r in db.execute("SELECT call FROM handled ORDER BY rowid")]
    assert calls == [1, 1, 1, 2, 2, 2, 3]
    system.stop(PROJECTION)
    with open_offset_store(offsets_url) as s:  # the stop saved the last handled offset
        assert s.load(PROJECTION) == offsets[-1]
    move(system, {"b": [100]})
    system.spawn(Projection, PROJECTION, kwargs=kwargs)
    wait_for(lambda: state(system).handled_offset == tagged_offsets(journal)[-1], timeout=30, interval=0.05)
    with sqlite3.connect(sink) as db:
        assert db.execute("SELECT count(*) FROM handled").fetchone()[0] == 8, "resumed after the stored offset"


def test_bad_configuration_is_refused_naming_the_fix():
    ok = dict(source=EventsByTag("t"), handler=print, offset_store="sqlite:///x.db")
    with pytest.raises(ProjectionError, match="non-empty tag"):
        EventsByTag("")
    with pytest.raises(ProjectionError, match="handler 'nowhere:thing' cannot be imported"):
        Projection(**{**ok, "handler": "nowhere:thing"})
    with pytest.raises(ProjectionError, match="offset_store 'read.db' is a file path, not a URL: .* give "
                                              "sqlite://read.db "):
        Projection(**{**ok, "offset_store": "read.db"})
    with pytest.raises(ProjectionError, match="offset_store must be a URL such as sqlite:///"):
        Projection(**{**ok, "offset_store": "sqlite:read.db"})
    with pytest.raises(OffsetStoreError, match="'read.db' is a file path, not an offset store URL: .* give "
                                               "sqlite://read.db "):
        open_offset_store("read.db")
    with pytest.raises(ProjectionError, match="group_size must be a positive int"):
        Projection(**ok, group_size=0)
    with pytest.raises(ProjectionError, match=r"source \{'tg': 'x'\}.*keys: tag, journal, gap_timeout"):
        Projection(**{**ok, "source": {"tg": "x"}})
    assert Projection(**{**ok, "handler": "tests.persistence.projection_fixtures:record_to"}).handler is record_to


def test_a_projection_that_cannot_start_fails_its_spawn_leading_with_the_projection_error(base, make_system,
                                                                                         tmp_path):
    system = make_system(base)  # no journal: the projection has nothing to read
    with pytest.raises(SpawnFailed) as failed:
        system.spawn(Projection, PROJECTION, kwargs=dict(source=EventsByTag("moves"), handler=record_to,
                                                         offset_store=f"sqlite:///{tmp_path}/offsets.db"))
    first = str(failed.value).splitlines()[0]
    assert first == (f"{PROJECTION} failed to start: ProjectionError: projection {PROJECTION}: no journal to read: "
                     "give EventsByTag(tag, journal=URL) or start the system with journal=URL")
    assert "Traceback" in str(failed.value)  # after it, for whoever debugs


def test_postgresql_an_event_committing_late_with_a_smaller_offset_is_handled_first_and_never_blocks_a_tick(
        request, base, make_system, tmp_path):
    from tests.journal.test_query import _begin_held_write, _ev

    journal = pg_schema_url(request, "proj_late")
    sink = f"{tmp_path}/sink.db"
    with open_journal(journal) as j:
        held, early = _begin_held_write(journal, "early", "late")  # drew its offset, not committed
        request.addfinalizer(held.close)  # before the schema is dropped (finalizers run last-in first-out)
        j.write_messages([_ev("later", "late")])
        later = j.newest_offset("late")
    system = make_system(base, journal=journal)
    system.spawn(Projection, PROJECTION, kwargs=dict(
        source=EventsByTag("late", gap_timeout=30), handler=functools.partial(record_offsets_to, sink),
        offset_store=f"sqlite:///{tmp_path}/offsets.db", poll_interval=0.1))
    # While the smaller offset is in flight the projection reads nothing, and still answers at once: its ticks
    # do not wait on the write (on the in-process base a waiting tick would stall the whole system).
    for _ in range(3):
        t0 = time.monotonic()
        s = state(system)
        assert time.monotonic() - t0 < 2, "the projection's tick waited for a write in flight"
        assert (s.read_offset, s.handled_offset, s.newest_offset, s.lag) == (0, 0, later, later)
    held.commit()
    wait_for(lambda: state(system).handled_offset == later, timeout=30, interval=0.05)
    with sqlite3.connect(sink) as db:
        rows = db.execute("SELECT event_offset, persistence_id FROM offsets ORDER BY rowid").fetchall()
    assert rows == [(early, "early"), (later, "later")], "the late-committing smaller offset must not be skipped"


def test_the_lag_is_exact_while_catching_up_counting_events_not_read_yet(base, projection_stores, make_system):
    journal, store = projection_stores
    system = make_system(base, journal=journal)
    system.spawn(Mover, "/user/movers", entities=True)
    move(system, {"a": [1, 2, 3]})
    # Grouped by 100 within a minute, looking again after a minute: the 3 events are read, not handled yet.
    system.spawn(Projection, PROJECTION, kwargs=dict(
        source=EventsByTag("moves"), handler=record_in_transaction, offset_store=store, exactly_once=True,
        group_size=100, group_within=60, poll_interval=60))
    offsets = tagged_offsets(journal)
    s = wait_for(lambda: (lambda s: s if s.read_offset == offsets[-1] else None)(state(system)), timeout=30)
    assert (s.stored_offset, s.newest_offset, s.lag) == (0, offsets[-1], offsets[-1])
    move(system, {"b": [4, 5]})  # journaled, not read yet: the lag counts them too
    newest = tagged_offsets(journal)[-1]
    s = state(system)
    assert (s.stored_offset, s.read_offset, s.newest_offset, s.lag) == (0, offsets[-1], newest, newest)
    assert system.status().hosts[PROJECTION].counters == {"projection_lag": newest}


@pytest.mark.multiproc
def test_reprise_status_shows_the_projection_lag(make_system, tmp_path):
    journal = f"sqlite:///{tmp_path}/journal.db"
    system = make_system("multiproc", journal=journal)
    system.spawn(Mover, "/user/movers", entities=True)
    move(system, {"a": [1, 2, 3]})
    # Saved only after 100 events or a minute: the 3 handled stay unsaved, a lag of 3 offsets.
    system.spawn(Projection, PROJECTION, kwargs=dict(
        source=EventsByTag("moves"), handler=functools.partial(record_to, f"{tmp_path}/sink.db"),
        offset_store=f"sqlite:///{tmp_path}/offsets.db", save_after_duration=60, poll_interval=0.1))
    offsets = tagged_offsets(journal)
    wait_for(lambda: state(system).handled_offset == offsets[-1], timeout=30, interval=0.05)
    lag = offsets[-1]
    assert system.status().hosts[PROJECTION].counters == {"projection_lag": lag}
    reprise = os.path.join(os.path.dirname(sys.executable), "reprise")
    out = subprocess.run([reprise, "status", "--port", str(system.admin_port)], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"projection_lag {lag}" in out.stdout
    doc = json.loads(subprocess.run([reprise, "status", "--port", str(system.admin_port), "--json"],
                                    capture_output=True, text=True, timeout=60).stdout)
    assert doc["hosts"][PROJECTION]["counters"] == {"projection_lag": lag}


def test_at_least_once_saves_the_offset_after_save_after_duration_when_fewer_events_came(base, make_system, tmp_path):
    journal = f"sqlite:///{tmp_path}/journal.db"
    system = make_system(base, journal=journal)
    system.spawn(Mover, "/user/movers", entities=True)
    move(system, {"a": [1, 2]})
    system.spawn(Projection, PROJECTION, kwargs=dict(
        source=EventsByTag("moves"), handler=functools.partial(record_to, f"{tmp_path}/sink.db"),
        offset_store=f"sqlite:///{tmp_path}/offsets.db", save_after_envelopes=1000, save_after_duration=0.2,
        poll_interval=30))  # the save must come from its own timer, not from a poll
    offsets = tagged_offsets(journal)
    s = wait_for(lambda: (lambda s: s if s.stored_offset == offsets[-1] else None)(state(system)),
                 timeout=20, interval=0.05)
    assert s.handled_offset == s.read_offset == offsets[-1] and s.lag == 0


def test_an_offset_store_that_lost_its_connection_is_named_not_the_handler_and_the_projection_goes_on(
        base, make_system, postgres_url):
    # A terminated connection (server restart, idle_session_timeout, a pooler) failed the next BEGIN, and the
    # error said "the handler failed on event ...", sending operators to the wrong place.
    from journal.postgres import drop_schema

    app = f"proj_store_{uuid.uuid4().hex[:8]}"
    journal, store = (f"{postgres_url}?schema={app}_{kind}&application_name={app}_{kind}" for kind in ("j", "r"))
    system = make_system(base, journal=journal)
    try:
        system.spawn(Mover, "/user/movers", entities=True)
        system.spawn(Projection, PROJECTION, kwargs=dict(
            source=EventsByTag("moves"), handler="tests.persistence.projection_fixtures:record_in_transaction",
            offset_store=store, exactly_once=True, poll_interval=0.05), backoff=(0.05, 0.2, 0))
        move(system, {"a": [1, 2]})
        offsets = tagged_offsets(journal)
        wait_for(lambda: state(system).stored_offset == offsets[-1], timeout=60, interval=0.05)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            assert admin.execute("SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                                 "WHERE application_name = %s", (f"{app}_r",)).fetchone()[0] >= 1
        move(system, {"b": [3, 4]})
        offsets = tagged_offsets(journal)
        wait_for(lambda: state(system).stored_offset == offsets[-1], timeout=60, interval=0.05)
        assert [r[2] for r in handled_rows(store)] == offsets, "every event once, in offset order"
        reasons = [e.reason for e in system.errors().recent if e.path == PROJECTION]
        assert any("OffsetStoreError: projection /user/projection: the offset store" in r for r in reasons), reasons
        assert not any("the handler failed" in r for r in reasons), reasons
    finally:
        system.stop(PROJECTION)  # (a running projection would make its store's schema again)
        drop_schema(journal)
        drop_schema(store)


@pytest.mark.parametrize("where", ["offset_store", "source journal"])
def test_a_memory_store_in_a_projections_arguments_is_refused_on_multiproc_and_taken_on_local(make_system, tmp_path,
                                                                                             where):
    # The host process's memory: an at-least-once projection restarted with its host (or `reprise down`/`up`)
    # handled the whole tag again from offset 0, where the README promises only the events since its last save.
    journal = f"sqlite:///{tmp_path}/journal.db"
    kwargs = dict(source=EventsByTag("moves"), handler=functools.partial(record_to, str(tmp_path / "rows")),
                  offset_store=f"sqlite:///{tmp_path}/offsets.db", poll_interval=0.05)
    if where == "offset_store":
        kwargs["offset_store"], named = "memory://offsets", "kwargs['offset_store']='memory://offsets'"
    else:
        kwargs["source"], named = EventsByTag("moves", journal="memory://j"), "kwargs['source'].journal='memory://j'"
    system = make_system("multiproc", journal=journal)
    with pytest.raises(ConfigError, match=re.escape(named) + " lives in one process's memory"):
        system.spawn(Projection, PROJECTION, kwargs=kwargs)
    assert system.status().hosts.get(PROJECTION) is None  # nothing was started
    local = make_system("local", journal=journal)
    local.spawn(Projection, PROJECTION, kwargs=kwargs)  # one process: its memory is shared
    assert local.ask(PROJECTION, GetProjectionState(), timeout=30) is not None


def test_a_projection_reading_an_older_postgresql_schema_as_a_select_only_role_handles_its_events(
        base, make_system, tmp_path, postgres_url):
    # Opening a schema an older Reprise made upgrades it (DDL): a projection reading with a role granted SELECT only
    # failed its spawn ("permission denied for database"). It reads the schema as it is.
    from journal.postgres import drop_schema
    from tests.journal.test_postgres import _as, _make_old, _role

    app = f"proj_old_{uuid.uuid4().hex[:8]}"
    journal = f"{postgres_url}?schema={app}"
    sink = str(tmp_path / "sink.db")
    system = make_system(base, journal=journal)
    try:
        system.spawn(Mover, "/user/movers", entities=True)
        move(system, {"a": [1, 2], "b": [3]})
        offsets = tagged_offsets(journal)
        with psycopg.connect(postgres_url, autocommit=True) as admin, _role(admin, app, "SELECT") as role:
            _make_old(admin, app)
            system.spawn(Projection, PROJECTION, kwargs=dict(
                source=EventsByTag("moves", journal=_as(journal, role)), handler=functools.partial(record_to, sink),
                offset_store=f"sqlite:///{tmp_path}/offsets.db", poll_interval=0.05))
            wait_for(lambda: state(system).handled_offset == offsets[-1], timeout=60, interval=0.05)
            with sqlite3.connect(sink) as db:
                assert [r[0] for r in db.execute("SELECT event_offset FROM handled ORDER BY rowid")] == offsets
            system.stop(PROJECTION)  # (before its role is dropped)
    finally:
        drop_schema(journal)

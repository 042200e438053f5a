"""Exactly-once projections whose handler's writes could commit apart from the offset (both bases, SQLite)."""

from __future__ import annotations

import functools
import sqlite3

import pytest

from journal import open_journal
from persistence import EventsByTag, GetProjectionState, OffsetStoreError, Projection, open_offset_store
from tests.persistence.projection_fixtures import failing_once_in_with_block
from tests.persistence.tagging_actors import Mover
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

PROJECTION = "/user/projection"


def test_an_exactly_once_handler_s_with_block_commits_with_the_offset_not_before_it(base, make_system, tmp_path):
    # The handler gets the offset store's sqlite3 connection inside the transaction that stores the offset. Written
    # the idiomatic way (`with conn: ...`), its block's exit committed that transaction early: the handler's rows
    # were durable before the offset, and stayed when the handler then failed: the restarted projection handled the
    # event again, and the read model counted it twice. (Every event also failed the final COMMIT, and restarted the
    # projection.)
    journal, store = f"sqlite:///{tmp_path}/journal.db", f"sqlite:///{tmp_path}/read-model.db"
    system = make_system(base, journal=journal)
    system.spawn(Mover, "/user/movers", entities=True)
    for pid, amounts in {"a": [11, 12, 13], "b": [14]}.items():
        assert system.ask(f"/user/movers/{pid}", amounts, timeout=30) == "done"
    system.spawn(Projection, PROJECTION, kwargs=dict(
        source=EventsByTag("moves"),
        handler=functools.partial(failing_once_in_with_block, str(tmp_path / "failed-once")),
        offset_store=store, exactly_once=True, poll_interval=0.1), max_restarts=100)
    with open_journal(journal) as j:
        offsets = [e.offset for e in j.events_by_tag("moves")]
    wait_for(lambda: system.ask(PROJECTION, GetProjectionState(), timeout=10).stored_offset == offsets[-1],
             timeout=60, interval=0.05)
    assert (tmp_path / "failed-once").exists()
    with sqlite3.connect(f"{tmp_path}/read-model.db") as db:
        handled = [r[0] for r in db.execute("SELECT event_offset FROM handled ORDER BY rowid")]
    assert handled == offsets, "each event once: the failed handler's row rolled back with the offset"
    reasons = [e.reason for e in system.errors().recent if e.path == PROJECTION]
    assert len(reasons) == 1 and "injected handler failure" in reasons[0], reasons


def test_what_an_exactly_once_handler_calls_on_the_sqlite_connection_never_commits_apart_from_the_offset(tmp_path):
    # The store level of the test above: commit() and `with conn:` commit with the offset; rollback() discards the
    # handler's writes so far and the offset still commits (the handler chose to write nothing); executescript, which
    # would commit first, is refused; a handler that fails rolls back everything, its `with conn:` block's writes too.
    path = f"{tmp_path}/read-model.db"
    with open_offset_store(f"sqlite://{path}") as store:
        with store.transaction("p", 1, expected=0) as conn:
            conn.execute("CREATE TABLE rows (v INTEGER)")
        with store.transaction("p", 2, expected=1) as conn:
            conn.execute("INSERT INTO rows VALUES (1)")
            conn.rollback()
            with conn:
                conn.execute("INSERT INTO rows VALUES (2)")
            conn.commit()
            conn.execute("INSERT INTO rows VALUES (3)")
        with pytest.raises(RuntimeError), store.transaction("p", 3, expected=2) as conn:
            with conn:
                conn.execute("INSERT INTO rows VALUES (4)")
            raise RuntimeError("the handler fails")
        with pytest.raises(OffsetStoreError, match="executescript"), store.transaction("p", 3, expected=2) as conn:
            conn.executescript("INSERT INTO rows VALUES (5);")
        assert store.load("p") == 2
    with sqlite3.connect(path) as db:
        assert [r[0] for r in db.execute("SELECT v FROM rows ORDER BY v")] == [2, 3]

"""Exactly-once projections whose handler's writes could commit apart from the offset (both bases, SQLite)."""

from __future__ import annotations

import contextlib
import functools
import sqlite3
import uuid
from collections.abc import Callable, Iterator
from typing import Any

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


class _Text(str):
    """A str subclass (what a query builder may hand over): the driver sends its text."""


@pytest.mark.parametrize("sql", ["COMMIT", "end transaction", "  /* done */ commit", "-- done\nCOMMIT TRANSACTION",
                                 "BEGIN", pytest.param(_Text("COMMIT"), id="str-subclass"), "; COMMIT"])
@pytest.mark.parametrize("through", ["connection", "cursor"])
def test_an_exactly_once_handler_s_raw_transaction_sql_is_refused_before_it_commits_apart_from_the_offset(
        tmp_path, sql, through):
    # commit() and `with conn:` were guarded, but the same commit as SQL (conn.execute("COMMIT"), or through a cursor)
    # committed the handler's writes before the offset: they stayed when the projection then failed (the final COMMIT
    # found no transaction), and the restarted projection applied the event again. It is refused now, before it runs,
    # naming the fix; the transaction (the handler's writes with it) rolls back.
    path = f"{tmp_path}/read-model.db"
    with open_offset_store(f"sqlite://{path}") as store:
        with store.transaction("p", 1, expected=0) as conn:
            conn.execute("CREATE TABLE rows (v INTEGER)")
        with pytest.raises(OffsetStoreError, match="must not execute"), store.transaction("p", 2, expected=1) as conn:
            conn.execute("INSERT INTO rows VALUES (1)")
            (conn if through == "connection" else conn.cursor()).execute(sql)
        with pytest.raises(OffsetStoreError, match="executescript"), store.transaction("p", 2, expected=1) as conn:
            conn.cursor().executescript("INSERT INTO rows VALUES (2);")
        # Raw ROLLBACK does what rollback() does (discards the writes so far; the offset commits), and savepoints work.
        with store.transaction("p", 2, expected=1) as conn:
            conn.execute("INSERT INTO rows VALUES (3)")
            (conn if through == "connection" else conn.cursor()).execute("ROLLBACK")
            conn.execute("SAVEPOINT s")
            conn.execute("INSERT INTO rows VALUES (4)")
            conn.execute("ROLLBACK TO s")
            conn.execute("RELEASE s")
            conn.execute("INSERT INTO rows VALUES (5)")
        assert store.load("p") == 2
        conn.execute("INSERT INTO rows VALUES (6)")  # (outside a transaction: nothing is refused)
    with sqlite3.connect(path) as db:
        assert [r[0] for r in db.execute("SELECT v FROM rows ORDER BY v")] == [5, 6]


def test_an_exactly_once_handler_s_with_block_on_postgresql_is_refused_as_it_is_entered(postgres_url):
    # On PostgreSQL, `with conn:` (fine on the SQLite store) failed every event with psycopg's "Explicit commit()
    # forbidden within a Transaction context", which names neither the handler nor the fix; a block that raised also
    # closed the store's connection. It is refused as it is entered now, naming the fix; nothing is committed, and
    # the store goes on.
    from journal.postgres import drop_schema

    url = f"{postgres_url}?schema=proj_with_{uuid.uuid4().hex[:8]}"
    try:
        with open_offset_store(url) as store:
            with store.transaction("p", 1, expected=0) as conn:
                conn.execute("CREATE TABLE rows (v integer)")
            for failing in (False, True):
                with pytest.raises(OffsetStoreError, match="must not use `with conn:`"), \
                        store.transaction("p", 2, expected=1) as conn:
                    conn.execute("INSERT INTO rows VALUES (1)")
                    with conn:
                        conn.execute("INSERT INTO rows VALUES (2)")
                        if failing:
                            raise RuntimeError("the handler fails")
            assert store.load("p") == 1
            with store.transaction("p", 2, expected=1) as conn:
                with conn.transaction():  # (a savepoint: fine)
                    conn.execute("INSERT INTO rows VALUES (3)")
            assert store.load("p") == 2
            with store.transaction("p", 3, expected=2) as conn:
                assert [r[0] for r in conn.execute("SELECT v FROM rows ORDER BY v")] == [3]
    finally:
        drop_schema(url)


@pytest.mark.parametrize("sql", ["COMMIT", "end", "/* done */ ROLLBACK", "abort", "start transaction", "BEGIN"])
@pytest.mark.parametrize("through", ["connection", "cursor"])
def test_an_exactly_once_handler_s_raw_transaction_sql_on_postgresql_is_refused_before_it_runs(
        postgres_url, sql, through):
    # As on SQLite: a raw COMMIT (or ROLLBACK, END, ...) on the PostgreSQL store's connection ended the projection's
    # transaction behind psycopg's back: the handler's writes committed before the offset and stayed when the handler
    # then failed (applied twice after the restart). Refused before it runs; a savepoint's ROLLBACK TO is fine.
    with _pg_store_with_rows(postgres_url) as store:
        _refused_before_it_runs(store, lambda conn: (conn if through == "connection" else conn.cursor()).execute(sql))
        with store.transaction("p", 2, expected=1) as conn:
            conn.execute("SAVEPOINT s")
            conn.execute("INSERT INTO rows VALUES (2)")
            conn.execute("ROLLBACK TO SAVEPOINT s")
            conn.execute("INSERT INTO rows VALUES (3)")
        assert store.load("p") == 2
        with store.transaction("p", 3, expected=2) as conn:
            assert [r[0] for r in conn.execute("SELECT v FROM rows ORDER BY v")] == [3]


@contextlib.contextmanager
def _pg_store_with_rows(postgres_url: str) -> Iterator[Any]:
    """A PostgreSQL offset store in a schema of its own (dropped after), offset 1 stored with a table `rows`."""
    from journal.postgres import drop_schema

    url = f"{postgres_url}?schema=proj_tx_{uuid.uuid4().hex[:8]}"
    try:
        with open_offset_store(url) as store:
            with store.transaction("p", 1, expected=0) as conn:
                conn.execute("CREATE TABLE rows (v integer)")
            yield store
    finally:
        drop_schema(url)


def _refused_before_it_runs(store: Any, send: Callable[[Any], object]) -> None:
    """An exactly-once handler that inserts a row, then `send(conn)`s a transaction statement, then fails: the
    statement is refused, and the row goes with the offset's rollback (before: it committed, and stayed)."""
    with pytest.raises(OffsetStoreError, match="must not execute"), store.transaction("p", 2, expected=1) as conn:
        conn.execute("INSERT INTO rows VALUES (1)")
        send(conn)
        raise RuntimeError("the handler fails after it")  # (before: its write stayed)
    assert store.load("p") == 1


@pytest.mark.postgres
@pytest.mark.timeout(60)
def test_an_exactly_once_handler_s_composed_psycopg_queries_run_and_a_composed_commit_is_refused(postgres_url):
    # Queries built with psycopg.sql (unhashable objects, not str) are how psycopg's docs say to name tables: the
    # check of what a handler executes raised TypeError on every one of them. They run, and a composed COMMIT is
    # refused like a text one; bytes too.
    from psycopg import sql as pgsql

    from journal.postgres import drop_schema

    url = f"{postgres_url}?schema=proj_comp_{uuid.uuid4().hex[:8]}"
    try:
        with open_offset_store(url) as store:
            with store.transaction("p", 1, expected=0) as conn:
                conn.execute(pgsql.SQL("CREATE TABLE {} (v integer)").format(pgsql.Identifier("rows")))
                conn.execute(pgsql.SQL("INSERT INTO {} VALUES (%s)").format(pgsql.Identifier("rows")), (1,))
                conn.cursor().execute(b"INSERT INTO rows VALUES (2)")
            for commit in (pgsql.SQL("COMMIT"), pgsql.SQL("{}").format(pgsql.SQL("END")), b"COMMIT"):
                with pytest.raises(OffsetStoreError, match="must not execute"), \
                        store.transaction("p", 2, expected=1) as conn:
                    conn.execute(pgsql.SQL("INSERT INTO {} VALUES (9)").format(pgsql.Identifier("rows")))
                    conn.execute(commit)
                assert store.load("p") == 1
            with store.transaction("p", 2, expected=1) as conn:
                assert [r[0] for r in conn.execute("SELECT v FROM rows ORDER BY v")] == [1, 2]
    finally:
        drop_schema(url)


_PG_WAYS_TO_COMMIT = {
    # Each ran its COMMIT: the handler's INSERT stayed when the handler then failed (checked only the first statement
    # of an exact str given to execute). The ids say how.
    "str-subclass": lambda conn: conn.execute(_Text("COMMIT")),
    "second-statement": lambda conn: conn.execute("INSERT INTO rows VALUES (9); COMMIT"),
    "second-statement-composed": lambda conn: conn.execute(__import__("psycopg").sql.SQL("SELECT 1;END")),
    "after-an-empty-statement": lambda conn: conn.execute(";commit"),
    "nested-comment": lambda conn: conn.execute("SELECT 1; /* a /* b */ ; */ COMMIT"),
    "executemany": lambda conn: conn.cursor().executemany("COMMIT", [(), ()]),
    "stream": lambda conn: list(conn.cursor().stream("COMMIT")),
    "copy": lambda conn: conn.cursor().copy("COMMIT").__enter__(),
}


@pytest.mark.postgres
@pytest.mark.timeout(60)
@pytest.mark.parametrize("way", list(_PG_WAYS_TO_COMMIT))
def test_every_way_an_exactly_once_handler_can_send_a_commit_to_postgresql_is_refused_before_it_runs(postgres_url, way):
    # The check looked at the first statement of an exact str given to execute: PostgreSQL runs every statement of a
    # text sent without parameters, and executemany, stream and copy send theirs past execute. Each of these
    # committed the handler's write before the offset (it stayed when the handler then failed: applied twice after
    # the restart). Now each is refused before it runs, and the write rolls back with the offset.
    with _pg_store_with_rows(postgres_url) as store:
        _refused_before_it_runs(store, _PG_WAYS_TO_COMMIT[way])
        with store.transaction("p", 2, expected=1) as conn:
            assert [r[0] for r in conn.execute("SELECT v FROM rows")] == []


@pytest.mark.postgres
@pytest.mark.timeout(60)
def test_an_exactly_once_handler_s_several_statements_run_when_commit_is_only_in_quotes_comments_or_a_function_body(
        postgres_url):
    # Each statement of a text is checked now: "commit" inside a literal, a quoted name, a dollar quote, a comment or
    # a BEGIN ATOMIC body's END is no statement, and such texts run as before.
    from journal.postgres import drop_schema

    url = f"{postgres_url}?schema=proj_quoted_{uuid.uuid4().hex[:8]}"
    try:
        with open_offset_store(url) as store:
            with store.transaction("p", 1, expected=0) as conn:
                conn.execute('CREATE TABLE rows (v text, "x;commit" integer); '
                             "INSERT INTO rows VALUES ('a; commit', 1); "
                             "INSERT INTO rows VALUES (E'it\\'s; commit', 2); -- ; commit\n"
                             "INSERT INTO rows VALUES ($q$; commit $$ ;end$q$, 3); /* ; /* commit */ ; */ "
                             "CREATE FUNCTION two() RETURNS integer LANGUAGE SQL BEGIN ATOMIC "
                             "SELECT CASE WHEN true THEN 2 END; END; SELECT 1")
            assert store.load("p") == 1
            with store.transaction("p", 2, expected=1) as conn:
                assert [r[0] for r in conn.execute('SELECT v FROM rows ORDER BY "x;commit"')] == [
                    "a; commit", "it's; commit", "; commit $$ ;end"]
                assert conn.execute("SELECT two()").fetchone()[0] == 2
    finally:
        drop_schema(url)


_SQLITE_WAYS_PAST_THE_CHECKS = {
    # Each committed the handler's write before the offset (it stayed when the handler then failed: applied twice
    # after the restart): the store's connection checked what went through its own execute and cursors only.
    "own-cursor": lambda conn: sqlite3.Cursor(conn).execute("COMMIT"),
    "cursor-factory": lambda conn: conn.cursor(sqlite3.Cursor).execute("COMMIT"),
    "base-class-execute": lambda conn: sqlite3.Connection.execute(conn, "COMMIT"),
    "base-class-commit": lambda conn: sqlite3.Connection.commit(conn),
    "base-class-executescript": lambda conn: sqlite3.Connection.executescript(conn, "SELECT 1;"),
    "base-class-with-exit": lambda conn: sqlite3.Connection.__exit__(conn, None, None, None),
    "own-cursor-rollback": lambda conn: sqlite3.Cursor(conn).execute("ROLLBACK"),
    "caught": lambda conn: _caught(lambda: sqlite3.Cursor(conn).execute("COMMIT")),
}


def _caught(send: Callable[[], object]) -> bool:
    """Run `send()`, swallowing the driver's error as a careless handler would."""
    with contextlib.suppress(Exception):
        send()
    return True


@pytest.mark.parametrize("way", list(_SQLITE_WAYS_PAST_THE_CHECKS))
def test_every_way_past_the_checks_an_exactly_once_handler_can_commit_on_sqlite_is_refused_before_it_commits(
        tmp_path, way):
    path = f"{tmp_path}/read-model.db"
    with open_offset_store(f"sqlite://{path}") as store:
        with store.transaction("p", 1, expected=0) as conn:
            conn.execute("CREATE TABLE rows (v INTEGER)")
        _refused_before_it_runs(store, _SQLITE_WAYS_PAST_THE_CHECKS[way])
        with store.transaction("p", 2, expected=1) as conn:  # (the store goes on: its own COMMIT is not refused)
            conn.execute("INSERT INTO rows VALUES (2)")
        assert store.load("p") == 2
    with sqlite3.connect(path) as db:
        assert [r[0] for r in db.execute("SELECT v FROM rows")] == [2]


def _set_cursor_factory(conn: Any) -> object:
    import psycopg

    conn.cursor_factory = psycopg.Cursor
    return conn.execute("COMMIT")


def _pg_ways_past_the_checks() -> dict[str, Callable[[Any], object]]:
    import psycopg

    return {
        "psycopg.Cursor": lambda conn: psycopg.Cursor(conn).execute("COMMIT"),
        "psycopg.ClientCursor": lambda conn: psycopg.ClientCursor(conn).execute("COMMIT"),
        "psycopg.RawCursor": lambda conn: psycopg.RawCursor(conn).execute("COMMIT"),
        "cursor_factory": _set_cursor_factory,
        "raw-libpq": lambda conn: conn.pgconn.exec_(b"COMMIT"),
        "caught": lambda conn: _caught(lambda: psycopg.ClientCursor(conn).execute("END")),
    }


@pytest.mark.postgres
@pytest.mark.timeout(60)
@pytest.mark.parametrize("way", ["psycopg.Cursor", "psycopg.ClientCursor", "psycopg.RawCursor", "cursor_factory",
                                 "raw-libpq", "caught"])
def test_every_way_past_the_checks_an_exactly_once_handler_can_commit_on_postgresql_is_refused_before_it_commits(
        postgres_url, way):
    # A cursor the handler builds itself, a cursor_factory it sets, the raw libpq connection: each sent its COMMIT past
    # the store's cursor, and the handler's write stayed when it then failed. A deferred constraint the projection
    # satisfies just before its own COMMIT fails any earlier one, and PostgreSQL rolls the transaction back.
    with _pg_store_with_rows(postgres_url) as store:
        _refused_before_it_runs(store, _pg_ways_past_the_checks()[way])
        with store.transaction("p", 2, expected=1) as conn:  # (the store goes on, its checks back)
            conn.execute("INSERT INTO rows VALUES (2)")
            with pytest.raises(OffsetStoreError, match="must not execute"):
                conn.execute("COMMIT")
        assert store.load("p") == 2
        with store.transaction("p", 3, expected=2) as conn:
            assert [r[0] for r in conn.execute("SELECT v FROM rows")] == [2]

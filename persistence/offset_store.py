"""Where a projection keeps its offset: SQLite, PostgreSQL or memory, opened by URL like a journal.

    store = open_offset_store("sqlite:///var/read-model.db")
    store.load("balances")                      # 0 when the projection never stored one
    store.save("balances", 1234)                # at-least-once: after N events or T seconds
    with store.transaction("balances", 1240) as conn:   # exactly-once: the handler's writes and
        conn.execute("UPDATE balance ...")              # the offset commit together, or neither

The SQL stores are Akka Projections' JDBC offset store: one row per projection id in
`projection_offset_store`. On PostgreSQL the connection's search_path is the URL's `schema`, so the
handler's unqualified table names land next to the offset table.
"""

from __future__ import annotations

import functools
import os
import sqlite3
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import TracebackType
from typing import Any, Literal, TypeVar, cast

from journal import InvalidUrl, JournalError, RepriseError
from journal.sqlite import create_private_file, retry_busy
from journal.urls import file_path_fix, redact_url

from .tx_statements import transaction_statement

__all__ = ["MemoryOffsetStore", "OffsetConflict", "OffsetStore", "OffsetStoreError", "PostgresOffsetStore",
           "SqliteOffsetStore", "open_offset_store", "postgres_conninfo"]

_R = TypeVar("_R")
_TABLE = "projection_offset_store"
_EXAMPLES = "sqlite:///abs/path.db, sqlite://relative.db, postgresql://user@host:port/db?schema=name, memory://name"


class OffsetStoreError(RepriseError, ValueError):
    """An offset store URL is wrong, or the store cannot do what was asked (e.g. exactly-once in memory)."""


class OffsetConflict(OffsetStoreError):
    """An exactly-once commit found another offset stored than the one it expected: another instance of the
    projection committed meanwhile. The transaction (the handler's writes with it) was rolled back."""


class OffsetStore(ABC):
    """The stored offset of each projection id; `transaction` commits a handler's writes with it."""

    url: str = ""

    @abstractmethod
    def load(self, projection_id: str) -> int:
        """The offset stored for the projection (0 when none is)."""

    @abstractmethod
    def save(self, projection_id: str, offset: int) -> None:
        """Store `offset` for the projection, replacing the one stored (durable when this returns)."""

    @contextmanager
    def transaction(self, projection_id: str, offset: int, expected: int | None = None) -> Iterator[Any]:
        """Yield the store's connection inside a transaction that also stores `offset`; commit on exit.

        An exception in the block rolls back the handler's writes and the offset together. With `expected`
        (the offset this caller last loaded or committed; 0: none stored), the commit happens only if that is
        still the stored offset, else the transaction rolls back with OffsetConflict: two instances of one
        projection never both apply the same events.
        """
        raise OffsetStoreError(f"{type(self).__name__} ({redact_url(self.url)}) gives no connection for "
                               "exactly-once projections: use a sqlite:// or postgresql:// offset store")
        yield  # pragma: no cover  (makes this a generator)

    def handler_failure(self, conn: Any, error: Exception, handler: str = "an exactly-once handler") -> Exception:
        """What `error`, raised by `handler` inside `transaction`, stands for: the store's refusal (OffsetStoreError)
        when the driver's error is that of a statement refused because it would end the projection's transaction,
        else `error` itself."""
        return error

    @abstractmethod
    def close(self) -> None:
        """Release the connection; a closed store must not be used again."""

    def __enter__(self) -> OffsetStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _SqlOffsetStore(OffsetStore):
    """What the SQLite and PostgreSQL stores share: one connection under a lock, and the offsets table."""

    _conn: Any
    _lock: threading.Lock
    _P = "?"  # the driver's parameter placeholder
    _HINT = ""  # what to do instead of a commit, in a refusal's message

    def _ended(self, conn: Any) -> str | None:
        """The transaction statement the handler sent past the store's checks (refused, or ending the transaction)."""
        return None

    def handler_failure(self, conn: Any, error: Exception, handler: str = "an exactly-once handler") -> Exception:
        """See OffsetStore.handler_failure."""
        refusal = self._refusal(conn, error, handler)
        return error if refusal is None else refusal

    def _refusal(self, conn: Any, error: BaseException | None, handler: str = "an exactly-once handler") \
            -> OffsetStoreError | None:
        """The OffsetStoreError for a transaction statement the handler sent past the statement checks (a cursor
        class of its own, the driver's base class's methods, the raw connection), or None: none was, or `error`
        is (or wraps) that refusal already."""
        if isinstance(error, OffsetStoreError) or isinstance(getattr(error, "__cause__", None), OffsetStoreError):
            return None
        what = self._ended(conn)
        if what is None:
            return None
        return OffsetStoreError(f"{handler} must not execute {what}, also not through a cursor or a connection "
                                "method other than the store's own (sqlite3.Cursor(conn), psycopg.Cursor(conn), "
                                "the driver's base class, the raw connection): the projection commits the handler's "
                                "writes together with the offset, so that a failure after them applies the event "
                                f"again from nothing. It was refused, and the transaction rolls back. Drop the "
                                f"statement ({self._HINT}), or use SAVEPOINT / RELEASE / ROLLBACK TO for a part of the "
                                "handler's writes")

    def load(self, projection_id: str) -> int:
        """The offset stored for the projection (0 when none is)."""
        with self._lock:
            row = self._conn.execute(f"SELECT current_offset FROM {_TABLE} WHERE projection_id = {self._P}",
                                     (projection_id,)).fetchone()
        return int(row[0]) if row else 0

    def save(self, projection_id: str, offset: int) -> None:
        """Store `offset` for the projection (one autocommitted upsert)."""
        with self._lock:
            self._upsert(self._conn, projection_id, offset)

    def _upsert(self, conn: Any, projection_id: str, offset: int) -> None:
        p = self._P
        conn.execute(f"INSERT INTO {_TABLE} VALUES ({p}, {p}, {p}) ON CONFLICT (projection_id) DO UPDATE SET "
                     "current_offset = excluded.current_offset, last_updated = excluded.last_updated",
                     (projection_id, offset, _now_ms()))

    def _advance(self, conn: Any, projection_id: str, offset: int, expected: int | None) -> None:
        """Store `offset` inside the caller's transaction; with `expected`, only over that stored offset."""
        if expected is None:
            self._upsert(conn, projection_id, offset)
            return
        p, now = self._P, _now_ms()
        # A conditional write, not a read then a write: under PostgreSQL's READ COMMITTED a concurrent commit
        # of the same row makes this UPDATE wait, then re-check its condition against the committed row.
        done = conn.execute(f"UPDATE {_TABLE} SET current_offset = {p}, last_updated = {p} "
                            f"WHERE projection_id = {p} AND current_offset = {p}",
                            (offset, now, projection_id, expected)).rowcount
        if not done and expected == 0:
            done = conn.execute(f"INSERT INTO {_TABLE} VALUES ({p}, {p}, {p}) ON CONFLICT (projection_id) DO NOTHING",
                                (projection_id, offset, now)).rowcount
        if done != 1:
            row = conn.execute(f"SELECT current_offset FROM {_TABLE} WHERE projection_id = {p}",
                               (projection_id,)).fetchone()
            raise OffsetConflict(
                f"projection {projection_id}: the offset store {redact_url(self.url)} holds offset "
                f"{row[0] if row else 0}, not {expected}, the one this instance last committed: another instance "
                "of the projection committed meanwhile (two systems running it on one offset store?). This "
                f"transaction, the handler's writes up to offset {offset} with it, was rolled back; restarted, "
                "the projection goes on from the stored offset")


_SQLITE_HINT = "conn.commit() and `with conn:` are fine there"
_PG_HINT = "`with conn.transaction():` makes a savepoint"


def _pg_text(query: Any, context: Any) -> object:
    """The text of a query psycopg takes: a str as it is, bytes decoded, a psycopg.sql object rendered."""
    if isinstance(query, str):
        return query  # (a str subclass too: transaction_statement reads its text)
    if isinstance(query, bytes | bytearray | memoryview):
        return bytes(query).decode("utf-8", "replace")
    as_string = getattr(query, "as_string", None)  # (psycopg.sql.Composable: what its docs build queries with)
    return as_string(context) if callable(as_string) else query


_PLAIN: set[str] = set()
"""Statements checked and found to be no transaction statement: a handler runs the same few for every event, and
each then costs the connection's execute one set lookup (see _StoreConnection.execute)."""


def _handler_sql(sql: object, allow_rollback: bool, hint: str, several: bool = False) -> bool:
    """Check a statement an exactly-once handler executes (each statement of the text if `several`: PostgreSQL runs
    them all): True for ROLLBACK if `allow_rollback` (to run, then open the transaction again, as rollback() does);
    OffsetStoreError for one that would begin or end the projection's transaction."""
    what = transaction_statement(sql, several)
    if what is None:
        if type(sql) is str and len(_PLAIN) < 1024:
            _PLAIN.add(sql)
        return False
    if what == "ROLLBACK" and allow_rollback:
        return True
    raise OffsetStoreError(f"an exactly-once handler must not execute {what} ({sql!r}): the projection commits its "
                           "writes together with the offset, so that a failure after them applies the event again "
                           f"from nothing. Drop the statement ({hint}), or use SAVEPOINT / RELEASE / ROLLBACK TO for a "
                           "part of the handler's writes")


def _handed_to_the_handler(store: _SqlOffsetStore, conn: Any) -> Iterator[Any]:
    """Yield the store's connection to an exactly-once handler, its checks on (`in_projection`) meanwhile; a
    transaction statement it sent past them fails the transaction, also when the handler caught the driver's error."""
    conn.in_projection = True
    try:
        try:
            yield conn
        except Exception as e:
            refusal = store._refusal(conn, e)
            if refusal is not None:
                raise refusal from e
            raise
        refusal = store._refusal(conn, None)
        if refusal is not None:
            raise refusal
    finally:
        conn.in_projection = False


_execute = sqlite3.Connection.execute  # (called directly: super() is a call more per statement)


class _StoreCursor(sqlite3.Cursor):
    """A cursor of the store's connection: the same checks as the connection's execute and executescript."""

    def execute(self, sql: str, parameters: Any = (), /) -> _StoreCursor:
        conn = self.connection
        if type(conn) is _StoreConnection and conn.in_projection and sql not in _PLAIN \
                and _handler_sql(sql, True, _SQLITE_HINT):
            conn.own(super().execute, sql, parameters)
            conn.reopen()
            return self
        return super().execute(sql, parameters)

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        conn = self.connection
        if type(conn) is _StoreConnection and conn.in_projection:
            conn.executescript(sql_script)  # (refused, naming the fix)
        return super().executescript(sql_script)


class _StoreConnection(sqlite3.Connection):
    """The SQLite store's connection: inside `transaction`, what the handler calls on it cannot end it early."""

    # Ended early, the handler's writes would commit apart from the offset (and stay if the handler then fails): there
    # `with conn:` and commit() leave the commit to the transaction, with the offset; rollback() (or ROLLBACK)
    # discards the handler's writes and opens the transaction again, for the offset; executescript() (which commits
    # first) and the statements COMMIT, END and BEGIN are refused, naming what to do instead.
    # Past these methods (a cursor class of the handler's own, sqlite3.Connection's methods called on it), SQLite's
    # authorizer refuses a transaction statement as it is prepared, whatever sends it: see `authorize`.
    in_projection = False
    refused: str | None = None  # the transaction statement the authorizer refused (reset as the handler gets it)
    _own = False  # the store's own transaction statement is prepared (a rollback, and the BEGIN after it)

    def cursor(self, factory: Any = None) -> Any:
        return super().cursor(factory or _StoreCursor)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        if self.in_projection and sql not in _PLAIN and _handler_sql(sql, True, _SQLITE_HINT):
            cursor = self.own(_execute, self, sql, parameters)
            self.reopen()
            return cursor
        return _execute(self, sql, parameters)

    def own(self, run: Callable[..., _R], *args: Any) -> _R:
        """`run(*args)`, a transaction statement of the store's own (the authorizer lets it through)."""
        self._own = True
        try:
            return run(*args)
        finally:
            self._own = False

    def authorize(self, action: int, what: str | None, *_: object) -> int:
        """SQLite's authorizer while the handler has the connection: it refuses BEGIN, COMMIT and ROLLBACK (not
        savepoints) that are not the store's own, as they are prepared, before they run."""
        if action == sqlite3.SQLITE_TRANSACTION and not self._own:
            self.refused = self.refused or what or "a transaction statement"
            return sqlite3.SQLITE_DENY
        return sqlite3.SQLITE_OK

    def reopen(self) -> None:
        """Open the projection's transaction again after the handler rolled it back."""
        # (_advance's condition still sees another instance's commit meanwhile)
        self.own(super().execute, "BEGIN IMMEDIATE")

    def commit(self) -> None:
        if not self.in_projection:
            super().commit()

    def rollback(self) -> None:
        self.own(super().rollback)
        if self.in_projection:
            self.reopen()

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        if self.in_projection:
            raise OffsetStoreError("an exactly-once handler must not call executescript, which commits the "
                                   "projection's transaction before its offset: use execute or executemany")
        return super().executescript(sql_script)

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None, /) -> Literal[False]:
        if self.in_projection:
            return False  # (an exception goes on to the transaction, which rolls back the writes with the offset)
        return super().__exit__(exc_type, exc, tb)


class SqliteOffsetStore(_SqlOffsetStore):
    """Offsets in a SQLite file (WAL, synchronous=FULL); the handler gets its sqlite3.Connection."""

    _HINT = _SQLITE_HINT

    def _ended(self, conn: Any) -> str | None:
        return cast("str | None", conn.refused)

    def __init__(self, path: str, url: str = ""):
        self.url = url or f"sqlite://{path}"
        self.path = path
        try:
            create_private_file(path)  # a read model is as private as the journal it is built from
            # isolation_level=None: no implicit transactions; transaction() opens its own BEGIN IMMEDIATE.
            self._conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False, timeout=30.0,
                                         factory=_StoreConnection)
            # (several stores opening one new file at once: switching it to WAL is refused busy to all but one)
            retry_busy(lambda: self._conn.execute("PRAGMA journal_mode=WAL").fetchone(), 30.0)
            self._conn.execute("PRAGMA synchronous=FULL")
            retry_busy(lambda: self._conn.execute(
                f"CREATE TABLE IF NOT EXISTS {_TABLE} (projection_id TEXT PRIMARY KEY, "
                "current_offset INTEGER NOT NULL, last_updated INTEGER NOT NULL)"), 30.0)
        except (sqlite3.Error, OSError, JournalError) as e:  # (JournalError: create_private_file's)
            raise OffsetStoreError(f"cannot open the SQLite offset store {path!r}: {e}") from e
        self._lock = threading.Lock()

    @contextmanager
    def transaction(self, projection_id: str, offset: int,
                    expected: int | None = None) -> Iterator[sqlite3.Connection]:
        """Yield the sqlite3 connection inside BEGIN IMMEDIATE; the offset is written and committed with it."""
        with self._lock:
            conn = self._conn
            conn.execute("BEGIN IMMEDIATE")
            try:
                # (set for each transaction: setting it makes SQLite prepare again the statements it has cached, the
                # handler's COMMIT among them, which the authorizer then sees)
                conn.refused = None
                conn.set_authorizer(conn.authorize)
                try:
                    yield from _handed_to_the_handler(self, conn)
                finally:
                    conn.set_authorizer(None)
                self._advance(conn, projection_id, offset, expected)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


def postgres_conninfo(url: str) -> tuple[str, str]:
    """(libpq URL without our `schema` parameter, schema) of a postgresql:// store URL (the journal's convention)."""
    from journal.postgres import split_url

    try:
        parts = split_url(url)
    except InvalidUrl as e:
        raise OffsetStoreError(str(e)) from None
    return parts.conninfo, parts.schema


@functools.cache
def _pg_classes() -> tuple[type[Any], type[Any]]:
    """The PostgreSQL store's psycopg connection and cursor classes (made on first use: psycopg is imported only for
    them)."""
    import psycopg
    from psycopg.pq import TransactionStatus

    class _PgStoreConnection(psycopg.Connection[Any]):
        """Inside `transaction`, `with conn:` is refused as it is entered: psycopg's block commits at its end, which
        psycopg refuses inside the projection's transaction (every event failed with "Explicit commit() forbidden"),
        and closes the store's connection when the block raises. commit() and rollback() psycopg refuses itself."""

        in_projection = False

        def __enter__(self) -> Any:
            if self.in_projection:
                raise OffsetStoreError("an exactly-once handler must not use `with conn:` on the PostgreSQL offset "
                                       "store's connection (psycopg commits and closes the connection at its end): "
                                       "the projection commits the handler's writes together with the offset. Drop "
                                       "the with block, or use `with conn.transaction():` (a savepoint) for a part "
                                       "of the writes")
            return super().__enter__()

    class _PgStoreCursor(psycopg.Cursor[Any]):
        """Inside `transaction`, a statement that would end the projection's transaction (COMMIT, ROLLBACK, ...) is
        refused before it runs: psycopg does not see it, and the handler's writes committed before the offset.
        (Connection.execute runs through the connection's cursor_factory: this covers it too.) Every statement of a
        text is checked, and every method that sends one: executemany, stream and copy ran a COMMIT too."""

        def _check(self, query: Any) -> None:
            conn = self.connection
            if conn.in_projection:  # type: ignore[attr-defined]  # (_PgStoreConnection's)
                if conn.pgconn.transaction_status == TransactionStatus.IDLE:
                    # The handler ended the projection's transaction past these checks (the guard refused its COMMIT,
                    # or a ROLLBACK): what it sends now would commit on its own, before the offset.
                    raise OffsetStoreError("an exactly-once handler ended the projection's transaction (a COMMIT or "
                                           "ROLLBACK sent past the store's cursor): nothing more runs in it, and the "
                                           "projection fails instead of committing the handler's writes apart from "
                                           "the offset")
                if not (type(query) is str and query in _PLAIN):
                    _handler_sql(_pg_text(query, self), False, _PG_HINT, several=True)

        def execute(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            self._check(query)
            return super().execute(query, params, **kwargs)

        def executemany(self, query: Any, params_seq: Any, **kwargs: Any) -> None:
            self._check(query)
            return super().executemany(query, params_seq, **kwargs)

        def stream(self, query: Any, params: Any = None, **kwargs: Any) -> Any:
            self._check(query)  # (here, not at the first next(): a generator's body runs only then)
            return super().stream(query, params, **kwargs)

        def copy(self, statement: Any, params: Any = None, **kwargs: Any) -> Any:
            self._check(statement)
            return super().copy(statement, params, **kwargs)

    return _PgStoreConnection, _PgStoreCursor


_PG_GUARD = "reprise_projection_commits_for_its_handler"
"""The constraint that refuses a COMMIT an exactly-once handler sends past the store's cursor (a cursor class of its
own, psycopg.Cursor(conn), a cursor_factory set on the connection, the raw libpq connection conn.pgconn): each
transaction stores a row of a temporary table whose deferred foreign key names no row, and removes it just before the
projection's own COMMIT. A COMMIT before that fails the check, and PostgreSQL rolls the transaction back."""
_PG_GUARD_TABLES = (
    "CREATE TEMPORARY TABLE IF NOT EXISTS reprise_commit_guard_ok (id integer PRIMARY KEY)",
    f"CREATE TEMPORARY TABLE IF NOT EXISTS reprise_commit_guard (id integer CONSTRAINT {_PG_GUARD} REFERENCES "
    "pg_temp.reprise_commit_guard_ok DEFERRABLE INITIALLY DEFERRED)")


class PostgresOffsetStore(_SqlOffsetStore):
    """Offsets in PostgreSQL (table in the URL's `schema`); the handler gets the psycopg connection."""

    _P = "%s"
    _HINT = _PG_HINT

    def _ended(self, conn: Any) -> str | None:
        from psycopg.pq import TransactionStatus

        return "COMMIT or ROLLBACK" if conn.pgconn.transaction_status == TransactionStatus.IDLE else None

    def __init__(self, url: str):
        import psycopg
        from psycopg import sql

        from journal.postgres import lock_ddl

        self.url = url
        conninfo, self.schema = postgres_conninfo(url)
        try:
            connection, cursor = _pg_classes()
            self._conn = connection.connect(conninfo, autocommit=True, connect_timeout=10, cursor_factory=cursor)
            ident = sql.Identifier(self.schema)
            with self._conn.transaction():
                lock_ddl(self._conn)  # (two systems may start one projection on a new store at once)
                self._conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(ident))
                self._conn.execute(sql.SQL("SET search_path TO {}").format(ident))
                self._conn.execute(f"CREATE TABLE IF NOT EXISTS {_TABLE} (projection_id text PRIMARY KEY, "
                                   "current_offset bigint NOT NULL, last_updated bigint NOT NULL)")
                for guard in _PG_GUARD_TABLES:
                    self._conn.execute(guard)
        except psycopg.Error as e:
            raise OffsetStoreError(f"cannot open the PostgreSQL offset store {redact_url(url)!r}: {e}") from e
        self._lock = threading.Lock()


    @contextmanager
    def transaction(self, projection_id: str, offset: int, expected: int | None = None) -> Iterator[Any]:
        """Yield the psycopg connection inside a transaction; the offset is written and committed with it."""
        conn = self._conn
        conn.cursor_factory = _pg_classes()[1]  # (a handler that set its own last time: the checks are back)
        with self._lock, conn.transaction():
            conn.execute("INSERT INTO pg_temp.reprise_commit_guard VALUES (1)")  # (see _PG_GUARD)
            yield from _handed_to_the_handler(self, conn)
            conn.execute("DELETE FROM pg_temp.reprise_commit_guard")
            self._advance(conn, projection_id, offset, expected)

    def close(self) -> None:
        """Close the connection."""
        self._conn.close()


_memory: dict[str, dict[str, int]] = {}
_memory_lock = threading.Lock()


class MemoryOffsetStore(OffsetStore):
    """Offsets in this process's memory (`memory://name` is shared within the process); at-least-once only."""

    def __init__(self, name: str):
        self.url = f"memory://{name}"
        with _memory_lock:
            self._offsets = _memory.setdefault(name, {})

    def load(self, projection_id: str) -> int:
        """The offset stored for the projection (0 when none is)."""
        with _memory_lock:
            return self._offsets.get(projection_id, 0)

    def save(self, projection_id: str, offset: int) -> None:
        """Store `offset` for the projection."""
        with _memory_lock:
            self._offsets[projection_id] = offset

    def close(self) -> None:
        """Nothing to release: the offsets stay for the next store of the same name."""


def open_offset_store(url: str) -> OffsetStore:
    """Open the offset store at `url` (sqlite://, postgresql:// or memory://)."""
    scheme, sep, rest = url.partition("://") if isinstance(url, str) else ("", "", "")
    fix = file_path_fix(url, "offset store")
    if fix is not None:
        raise OffsetStoreError(f"{url!r} is a file path, not an offset store URL: {fix}")
    if not sep or scheme not in ("sqlite", "postgresql", "postgres", "memory"):
        raise OffsetStoreError(f"unsupported offset store URL {redact_url(url)!r}: use one of {_EXAMPLES}")
    if scheme == "sqlite":
        path = rest.partition("?")[0]
        if not path:
            raise OffsetStoreError(f"sqlite offset store URL {url!r} names no file: use sqlite:///abs/path.db")
        if path != ":memory:" and not os.path.isdir(os.path.dirname(os.path.abspath(path))):
            raise OffsetStoreError(f"sqlite offset store {url!r}: directory {os.path.dirname(path)!r} does not "
                                   "exist (create it, or give an absolute path: sqlite:///abs/path.db)")
        return SqliteOffsetStore(path, url)
    if scheme == "memory":
        return MemoryOffsetStore(rest)
    return PostgresOffsetStore(url)

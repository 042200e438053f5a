"""PostgreSQL journal and snapshot store (psycopg 3 + psycopg_pool): several machines sharing one journal.

URL: `postgresql://user@host:port/db?schema=reprise&pool_max=4` (`schema`, `pool_min`/`pool_max` and
`statement_timeout` are ours; every other query parameter goes to libpq as given). Tables are created in the
schema on first use. Every statement of the journal is cancelled after `statement_timeout` seconds (60 by
default, 0 for none), as Akka's journal circuit breaker fails a call after its call-timeout: a write that waits
behind a lock (a migration, VACUUM FULL, LOCK TABLE) fails with a JournalError naming it, and its actor stops
and restarts, instead of hanging its host without a word.
A reused (persistence id, sequence nr) hits the primary key and raises JournalError naming both.
Writers run concurrently, so offsets (`ordering`, drawn at INSERT) become visible in commit order, not
offset order: a reader could pass offset 11 before offset 10 commits and never see 10. events_by_tag
reads only up to an OrderingHorizon (journal.api), as akka-persistence-jdbc does, so it never skips one.

Dropped connections (server restart, pg_terminate_backend, idle_session_timeout):
- The pool checks a connection when it hands it out without a round trip (`_check_idle`): an idle
  connection whose socket is readable has been closed by the server, or is being closed (the FATAL
  notice comes first), so it is discarded and another one handed out.
- What that check cannot see (the server closes it a moment later, a silent network drop) fails the
  operation; it is run once more on a new connection when that is safe:
  - reads, always;
  - writes whose connection was lost before COMMIT was sent: the server rolled the transaction back;
  - a lost COMMIT (outcome unknown) only when the write can tell: snapshot saves and deletes are
    idempotent and simply run again; an event write first reads its rows back, and counts as stored
    if every row is there byte for byte (the record holds the writer uuid and the timestamp: this very
    write). Re-inserting instead would hit the primary key and the caller would be told "sequence nr
    N already exists (another writer?)" for events that it had stored itself. If the rows are absent
    the write runs again; if other bytes are there, another writer took the sequence numbers and the
    caller gets that duplicate error, correctly.
  - everything else (`execute`, a second loss, a second run failing after a lost COMMIT, which may still
    land) raises JournalError saying the outcome is unknown; a PersistentActor then stops and its recovery
    replays whatever was stored.

A process forked from one with a journal or snapshot store open may not use it (JournalError: start the child
with spawn/forkserver, or open its own): its pooled connections are the parent's sockets. Closing it there
sends nothing (psycopg's close sends libpq's Terminate, which would end the parent's sessions).
"""

from __future__ import annotations

import logging
import math
import os
import re
import select
import time
import weakref
from collections.abc import Callable, Iterable, Iterator, Sequence
from typing import Any, NamedTuple
from urllib.parse import SplitResult, parse_qsl, quote, urlencode, urlsplit

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.pq import TransactionStatus

from journal.api import (
    _XID_GRACE,
    Journal,
    OrderingBatch,
    OrderingHorizon,
    SnapshotStore,
    TaggedRow,
    paced_slices,
)
from journal.errors import InvalidUrl, JournalAccessDenied, JournalError
from journal.model import MAX_SEQUENCE_NR, PersistenceIdSummary, SnapshotMetadata, SnapshotSelectionCriteria
from journal.records import EncodedBatch, StoredRow
from journal.urls import redact_url

__all__ = ["PostgresJournal", "PostgresSnapshotStore", "PostgresUrl", "drop_schema", "lock_ddl", "missing_schema",
           "split_url"]

_DDL_LOCK = 0x7265707269736502

log = logging.getLogger("reprise.journal")


def lock_ddl(cur: psycopg.Cursor[Any] | psycopg.Connection[Any]) -> None:
    """Hold Reprise's DDL lock until this transaction ends (call it inside one, before CREATE ... IF NOT EXISTS).

    Two sessions creating one schema or table at once both see it missing, and the second fails on a unique
    violation in PostgreSQL's catalog: IF NOT EXISTS does not make concurrent creation safe.
    """
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))


_BASE = ("journal", "journal_ordering", "tags", "highest_sequence_nr", "snapshot")
"""What every journal schema has, of any version: a reader finds a journal where these exist."""
_RELATIONS = (*_BASE, "tags_ordering", "highest_sequence_nr_inserted_xid")
"""Everything _SCHEMA creates (tables and indexes): when all exist, opening runs no DDL. A schema made before
tags_ordering or highest_sequence_nr_inserted_xid (indexes added later) is upgraded when opened: _SCHEMA adds what it
lacks (with the column inserted_xid), and _UPGRADE runs."""


def _ready(relations: tuple[str, ...]) -> str:
    return "SELECT " + " AND ".join(["to_regclass(%s) IS NOT NULL"] * len(relations))


# A delete finds its events' tags by offset: without this index it read the whole tags table (26 ms per delete at
# 200k tags, growing with it; 0.5 ms with it).
_TAGS_ORDERING = "CREATE INDEX IF NOT EXISTS tags_ordering ON {s}.tags (ordering)"
# The (64-bit) id of the transaction that inserted the row, by default: so also in a row inserted by a writer of a
# version before the column, or by hand. A live persistence_ids poll reads the rows inserted since its previous poll
# by this index; by the tuples' xmin it read the whole table every poll (10 ms at 20k ids). Added to an older table
# with the upgrading transaction's id (a constant default: no rewrite), so a poll running meanwhile returns those ids
# once more, never fewer.
_INSERTED_XID = (
    "ALTER TABLE {s}.highest_sequence_nr ADD COLUMN IF NOT EXISTS inserted_xid BIGINT NOT NULL "
    "DEFAULT pg_current_xact_id()::text::bigint",
    "CREATE INDEX IF NOT EXISTS highest_sequence_nr_inserted_xid ON {s}.highest_sequence_nr "
    "(inserted_xid, persistence_id)",
)

_SCHEMA = (
    "CREATE SCHEMA IF NOT EXISTS {s}",
    """CREATE TABLE IF NOT EXISTS {s}.journal (
        ordering BIGINT GENERATED ALWAYS AS IDENTITY,
        persistence_id TEXT NOT NULL,
        sequence_nr BIGINT NOT NULL,
        record BYTEA NOT NULL,
        checksum BIGINT NOT NULL,
        PRIMARY KEY (persistence_id, sequence_nr))""",
    "CREATE UNIQUE INDEX IF NOT EXISTS journal_ordering ON {s}.journal (ordering)",
    """CREATE TABLE IF NOT EXISTS {s}.tags (
        tag TEXT NOT NULL,
        ordering BIGINT NOT NULL,
        PRIMARY KEY (tag, ordering))""",
    _TAGS_ORDERING,
    """CREATE TABLE IF NOT EXISTS {s}.highest_sequence_nr (
        persistence_id TEXT PRIMARY KEY,
        sequence_nr BIGINT NOT NULL)""",
    *_INSERTED_XID,
    """CREATE TABLE IF NOT EXISTS {s}.snapshot (
        persistence_id TEXT NOT NULL,
        sequence_nr BIGINT NOT NULL,
        timestamp BIGINT NOT NULL,
        snapshot BYTEA NOT NULL,
        checksum BIGINT NOT NULL,
        PRIMARY KEY (persistence_id, sequence_nr))""",
)

_UPGRADE = (
    # Tags orphaned by the delete race of schemas before tags_ordering (fixed by the one-statement delete): a tag
    # chunk holding one read short, and the query took that for its end and skipped the events after it.
    "DELETE FROM {s}.tags t WHERE NOT EXISTS (SELECT 1 FROM {s}.journal j WHERE j.ordering = t.ordering)",
)
"""Run once, with _SCHEMA, on a schema that lacked a relation of _RELATIONS (on a new one they find nothing)."""

_ADDED = {"tags_ordering": (_TAGS_ORDERING,), "highest_sequence_nr_inserted_xid": _INSERTED_XID}
"""The statements of _SCHEMA that add each relation an older schema lacks (see `upgrade_sql`)."""

def _failed(text: str, e: BaseException) -> JournalError:
    """The JournalError for `e`, a JournalAccessDenied when the server refused this role (insufficient_privilege,
    42501: a GRANT is missing), so callers tell the two apart by type, not by the server's wording."""
    return (JournalAccessDenied if isinstance(e, psycopg.errors.InsufficientPrivilege) else JournalError)(text)


_MAY_NOT_UPGRADE = (psycopg.errors.InsufficientPrivilege, psycopg.errors.ReadOnlySqlTransaction)
"""How an upgrade fails for a role that may only read (no ownership of the tables, or a read-only session/standby)."""

_QUERIES = {
    "lacking": "SELECT ARRAY(SELECT r FROM unnest(%s::text[]) r WHERE to_regclass(%s || '.' || r) IS NULL)",
    "size": "SELECT COALESCE(sum(pg_total_relation_size(c.oid)), 0) FROM pg_class c "
            "JOIN pg_namespace n ON n.oid = c.relnamespace WHERE n.nspname = %s AND c.relkind = 'r'",
    # The transaction takes its id (the one-time filter runs before the row, so before the identity draws its
    # offset): OrderingHorizon sees every write that drew an offset as running in the snapshot. Otherwise the id
    # came with the row's heap insert, after the offset (unless nextval wrote WAL, every 32 offsets): a write
    # held in between (a descheduled backend, a BEFORE trigger) was taken for rolled back and skipped by queries.
    "insert": "INSERT INTO {s}.journal (persistence_id, sequence_nr, record, checksum) "
              "SELECT %s, %s, %s, %s WHERE pg_current_xact_id() IS NOT NULL",
    "insert_tag": "INSERT INTO {s}.tags (tag, ordering) "
                  "SELECT %s, ordering FROM {s}.journal WHERE persistence_id = %s AND sequence_nr = %s",
    "replay": "SELECT sequence_nr, record, checksum FROM {s}.journal WHERE persistence_id = %s "
              "AND sequence_nr >= %s AND sequence_nr <= %s ORDER BY sequence_nr LIMIT %s",
    "highest": "SELECT greatest((SELECT max(sequence_nr) FROM {s}.journal WHERE persistence_id = %(p)s), "
               "(SELECT sequence_nr FROM {s}.highest_sequence_nr WHERE persistence_id = %(p)s), 0)",
    # One statement, so one snapshot: the events, their tags and the highest kept are the same rows. As four
    # statements (READ COMMITTED: a snapshot each), a write of the id committing in between was deleted after the
    # highest was read (the highest went down) or after the tags were (a tag without its event, which cut a tag
    # query's chunk short: the query took it for its end and skipped the events after it).
    "delete": "WITH d AS (DELETE FROM {s}.journal WHERE persistence_id = %(p)s AND sequence_nr <= %(to)s "
              "RETURNING sequence_nr, ordering), "
              "t AS (DELETE FROM {s}.tags WHERE ordering IN (SELECT ordering FROM d)) "
              "INSERT INTO {s}.highest_sequence_nr SELECT %(p)s, max(sequence_nr) FROM d HAVING count(*) > 0 "
              "ON CONFLICT (persistence_id) DO UPDATE SET sequence_nr = "
              "greatest({s}.highest_sequence_nr.sequence_nr, excluded.sequence_nr)",
    # The sequence nr up to which the next slice of a long delete goes: its `rows`-th event up to the bound.
    "delete_upto": "SELECT sequence_nr FROM {s}.journal WHERE persistence_id = %s AND sequence_nr <= %s "
                   "ORDER BY sequence_nr OFFSET %s LIMIT 1",
    "ids": "SELECT DISTINCT persistence_id FROM {s}.journal UNION "
           "SELECT persistence_id FROM {s}.highest_sequence_nr ORDER BY 1",
    # A live persistence_ids' poll: the ids of a chunk of events after an offset, by the ordering index (the greatest
    # offset and the number of events read, to go on from), and the ids whose events were deleted (delete_messages_to
    # keeps them in highest_sequence_nr: an id written and deleted between two polls is only there).
    "ids_after": "SELECT max(ordering), count(*), coalesce(array_agg(DISTINCT persistence_id), '{{}}') FROM "
                 "(SELECT ordering, persistence_id FROM {s}.journal WHERE ordering > %s ORDER BY ordering LIMIT %s) x",
    # Those of its rows inserted by a transaction no older than an xid, a chunk at a time by the index on
    # (inserted_xid, persistence_id): from the xid, then after the last row read. (The ORDER BY ... LIMIT makes the
    # generic plan walk that index: a bare `inserted_xid >= $1` is estimated at a third of the table, read whole.)
    "ids_deleted": "SELECT inserted_xid, persistence_id FROM {s}.highest_sequence_nr WHERE inserted_xid >= %s "
                   "ORDER BY inserted_xid, persistence_id LIMIT %s",
    "ids_deleted_after": "SELECT inserted_xid, persistence_id FROM {s}.highest_sequence_nr "
                         "WHERE (inserted_xid, persistence_id) > (%s, %s) "
                         "ORDER BY inserted_xid, persistence_id LIMIT %s",
    # The same on a schema without that column and index, opened by a role that may not add them (see
    # _Database.lacking): by the rows' xmin, over the whole table, compared by age() (the xid mod 2**32: a row whose
    # xmin was frozen is extra, never missing), in one read.
    "ids_deleted_by_xmin": "SELECT persistence_id FROM {s}.highest_sequence_nr WHERE age(xmin) <= age(%s::text::xid)",
    "newest_and_snapshot": "SELECT (SELECT coalesce(max(ordering), 0) FROM {s}.journal), "
                           "pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint FROM pg_current_snapshot() s",
    # The chunk's offsets first, then their events by the ordering index. Joined instead, a custom plan (the offsets
    # known, as on a connection that lost _configure's setting) merged the tags with the ordering index read from
    # its first entry: a chunk at offset N read N entries. The generic plan (a nested loop) is ~15% slower too.
    # A tag's event can be gone (deleted by SQL on the journal table, not by delete_messages_to): the chunk then
    # reads fewer events than tags, and a query took that for the tag's end. So a chunk that held `limit` tags ends
    # with one more row (offset 2**63 - 1, persistence_id NULL, and the offset of its last tag), where _read_tag
    # reads on. (In the statement: its tags are those whose events it read. ~5% more server time for a full chunk
    # of 1,000, none measurable for a short one; a second statement only for short chunks cost ~0.1 ms each.)
    "tagged": "WITH x AS MATERIALIZED (SELECT ARRAY(SELECT ordering FROM {s}.tags WHERE tag = %s "
              "AND ordering > %s AND ordering <= %s ORDER BY ordering LIMIT %s) a) "
              "SELECT ordering, persistence_id, sequence_nr, record, checksum FROM {s}.journal "
              "WHERE ordering = ANY((SELECT a FROM x)::bigint[]) "
              "UNION ALL SELECT 9223372036854775807, NULL, a[%s], NULL, NULL FROM x WHERE cardinality(a) = %s "
              "ORDER BY 1",
    "events": "SELECT ordering, persistence_id, sequence_nr, record, checksum FROM {s}.journal "
              "WHERE persistence_id = %s AND sequence_nr >= %s AND sequence_nr <= %s ORDER BY sequence_nr LIMIT %s",
    # The stored offsets after one, and the statement's own snapshot (the one those offsets were read in).
    "orderings": "SELECT pg_snapshot_xmin(s)::text::bigint, pg_snapshot_xmax(s)::text::bigint, "
                 "ARRAY(SELECT ordering FROM {s}.journal WHERE ordering > %s ORDER BY ordering LIMIT %s) "
                 "FROM pg_current_snapshot() s",
    "max_ordering": "SELECT coalesce(max(ordering), 0) FROM {s}.journal",
    # The identity's last value: every offset drawn, including those of writes still in flight and of events since
    # deleted. (A row stored with an explicit ordering, by hand, is above it: hence the greatest.) A role that may
    # not read the sequence (readers are granted SELECT on the tables only) gets 2**63 - 1: the range's own end.
    "max_drawn": "SELECT greatest(coalesce(max(ordering), 0), (SELECT CASE WHEN has_sequence_privilege(q, 'SELECT') "
                 "OR has_sequence_privilege(q, 'USAGE') THEN coalesce(pg_sequence_last_value(q), 0) "
                 "ELSE 9223372036854775807 END FROM CAST(pg_get_serial_sequence(%s, 'ordering') AS regclass) q)) "
                 "FROM {s}.journal",
    # (A tag whose event was deleted by hand names no offset: the newest with its event, by the key backwards.)
    "max_tag_ordering": "SELECT coalesce((SELECT t.ordering FROM {s}.tags t WHERE t.tag = %s AND EXISTS (SELECT 1 "
                        "FROM {s}.journal j WHERE j.ordering = t.ordering) ORDER BY t.ordering DESC LIMIT 1), 0)",
    "ordered": "SELECT ordering, persistence_id, sequence_nr, record, checksum FROM {s}.journal "
               "WHERE ordering > %s AND ordering <= %s ORDER BY ordering LIMIT %s",
    "tail": "SELECT ordering, persistence_id, sequence_nr, record, checksum "
            "FROM {s}.journal ORDER BY ordering DESC LIMIT %s",
    "ls": "SELECT p, max(h), sum(n)::bigint FROM ("
          " SELECT persistence_id p, max(sequence_nr) h, count(*) n FROM {s}.journal GROUP BY persistence_id"
          " UNION ALL SELECT persistence_id, sequence_nr, 0 FROM {s}.highest_sequence_nr) x"
          " GROUP BY p ORDER BY p",
    "all": "SELECT ordering, persistence_id, sequence_nr, record, checksum FROM {s}.journal "
           "WHERE ordering > %s ORDER BY ordering LIMIT 1000",
    "all_snapshots": "SELECT persistence_id, sequence_nr, timestamp, snapshot, checksum FROM {s}.snapshot "
                     "ORDER BY persistence_id, sequence_nr",
    "save_snapshot": "INSERT INTO {s}.snapshot VALUES (%s, %s, %s, %s, %s) "
                     "ON CONFLICT (persistence_id, sequence_nr) DO UPDATE SET timestamp = excluded.timestamp, "
                     "snapshot = excluded.snapshot, checksum = excluded.checksum",
    "load_snapshot": "SELECT sequence_nr, timestamp, snapshot, checksum FROM {s}.snapshot "
                     "WHERE persistence_id = %s AND sequence_nr BETWEEN %s AND %s "
                     "AND timestamp BETWEEN %s AND %s ORDER BY sequence_nr DESC, timestamp DESC LIMIT 1",
    "younger_snapshots": "SELECT sequence_nr, timestamp, snapshot, checksum FROM {s}.snapshot "
                         "WHERE persistence_id = %s AND sequence_nr > %s AND sequence_nr <= %s",
    "delete_snapshot": "DELETE FROM {s}.snapshot WHERE persistence_id = %s AND sequence_nr = %s "
                       "AND (%s = 0 OR timestamp = %s)",
    "delete_snapshots": "DELETE FROM {s}.snapshot WHERE persistence_id = %s AND sequence_nr BETWEEN %s AND %s",
}


class PostgresUrl(NamedTuple):
    """A postgresql:// journal URL taken apart: the libpq URL, and our parameters."""

    conninfo: str
    schema: str
    pool_min: int
    pool_max: int
    statement_timeout: float
    """Seconds (0: none)."""


_OURS = ("schema", "pool_min", "pool_max", "statement_timeout")
_MAX_IDENTIFIER = 63  # bytes: PostgreSQL truncates longer names (NAMEDATALEN - 1)


def _check_userinfo(url: str, parts: SplitResult) -> None:
    """InvalidUrl unless the URL's password (if any) is percent-encoded where it must be.

    Otherwise libpq and psycopg quote it in their errors, whole or in part ("invalid percent-encoded token:
    \"se%zzcret\"", a "/" in it making the rest host and path), and those errors reach logs and screens.
    """
    userinfo, at, host = parts.netloc.rpartition("@")
    _, colon, port = host.partition(":")
    # (an "@" after the host: a "/", "?" or "#" in the password ended the host there; a port "pa": the same)
    swallowed = not at and "@" in url.partition("://")[2] and (
        "@" in parts.path or (colon and not re.fullmatch(r"[0-9]*(,.*)?", port)))
    if swallowed or re.search(r"%(?![0-9A-Fa-f]{2})", userinfo):
        raise InvalidUrl(f"{redact_url(url)!r}: its user or password is not percent-encoded",
                         "encode the characters / ? # @ % in them as %2F %3F %23 %40 %25 (e.g. "
                         "urllib.parse.quote(password, safe=''))")


def split_url(url: str) -> PostgresUrl:
    """Our parameters of a postgresql:// URL (checked: InvalidUrl names a bad one) and the URL libpq gets."""
    parts = urlsplit(url)
    _check_userinfo(url, parts)
    ours: dict[str, str] = {}
    libpq: list[tuple[str, str]] = []
    for k, v in parse_qsl(parts.query, keep_blank_values=True):
        (ours.__setitem__(k, v) if k in _OURS else libpq.append((k, v)))
    # quote, not quote_plus: libpq reads "+" as a plus, so `options=-c%20x%3D1` must stay "%20", not become "+".
    query = urlencode(libpq, quote_via=quote)
    # Always with "//": urlunsplit drops it when the authority is empty (postgresql:///db?host=/run/postgresql,
    # the host given as a parameter, as libpq allows), and libpq took the "postgresql:/db?host" left for a
    # key=value string ("invalid connection option").
    conninfo = (f"postgresql://{parts.netloc}{parts.path}" + (f"?{query}" if query else "")
                + (f"#{parts.fragment}" if parts.fragment else ""))
    schema = ours.get("schema", "reprise")
    if not schema or len(schema.encode()) > _MAX_IDENTIFIER:
        raise InvalidUrl(f"schema={schema!r} in {redact_url(url)!r}: a schema name must be 1 to {_MAX_IDENTIFIER} bytes "
                         "(PostgreSQL cuts longer names, so two such schemas would be one)")
    pool_min = _number(url, ours, "pool_min", 1, int, 1)
    pool_max = _number(url, ours, "pool_max", 4, int, pool_min)
    return PostgresUrl(conninfo, schema, pool_min, pool_max, _number(url, ours, "statement_timeout", 60.0, float, 0))


def _where(conninfo: str) -> str:
    """"host/db" of a libpq URL, for messages: its host, else its ?host= (a socket directory, or several hosts)."""
    parts = urlsplit(conninfo)
    params = dict(parse_qsl(parts.query))
    host = parts.hostname or params.get("host") or params.get("hostaddr") or "localhost"
    return f"{host}/{parts.path.lstrip('/') or params.get('dbname', '')}"


def _number(url: str, ours: dict[str, str], key: str, default: float, kind: type, least: float) -> Any:
    if key not in ours:
        return default
    try:
        value = kind(ours[key])
    except ValueError:
        value = None
    if value is None or not math.isfinite(value) or value < least:
        what = "a whole number" if kind is int else "a number of seconds"
        raise InvalidUrl(f"{key}={ours[key]!r} in {redact_url(url)!r}: it must be {what} >= {least:g}")
    return value


def _configure_with(statement_timeout: float) -> Callable[[psycopg.Connection[Any]], None]:
    def configure(conn: psycopg.Connection[Any]) -> None:
        # Custom plans use the table statistics, which lag behind a journal that was just written: right
        # after 100k inserts PostgreSQL estimated 3 rows and chose bitmap scan + sort per replay chunk (15 ms
        # instead of 0.3 ms). The generic plan walks the primary key in order, whatever the statistics say.
        conn.execute("SET plan_cache_mode = force_generic_plan")
        # In whole milliseconds, and at least one: 0 is PostgreSQL's "no timeout" (0.0004 s cut to 0 was none).
        ms = max(1, round(statement_timeout * 1000)) if statement_timeout > 0 else 0
        conn.execute(f"SET statement_timeout = {ms}")
    return configure


def _check_idle(conn: psycopg.Connection[Any]) -> None:
    """Raise (and close `conn`) if the server closed this idle pooled connection; no round trip."""
    if not conn.closed and conn.pgconn.transaction_status == TransactionStatus.IDLE:
        poller = select.poll()
        poller.register(conn.fileno(), select.POLLIN)
        # Nothing is sent to an idle connection unless the server is closing it (FATAL notice, then EOF);
        # a rare harmless message (a ParameterStatus after a reload) costs one reconnect, nothing more.
        if not poller.poll(0):
            return
    # Closed, so that the pool replaces it instead of putting it back as idle.
    conn.close()
    raise psycopg.OperationalError("pooled connection closed by the server")


class _Pool(psycopg_pool.ConnectionPool[psycopg.Connection[Any]]):
    """A pool whose `check()` of the idle connections also costs no round trip."""

    @staticmethod
    def check_connection(conn: psycopg.Connection[Any]) -> None:
        """See `_check_idle`."""
        _check_idle(conn)


_open: weakref.WeakSet[_Database] = weakref.WeakSet()
_inherited: list[_Database] = []


def _forget_after_fork() -> None:
    # A forked child shares its parent's sockets: a statement sent on one mixes with the parent's, and the
    # replies go to whichever process reads first; psycopg's close() sends libpq's Terminate message, which
    # ends the parent's session. The parent's databases are refused here and never closed (kept referenced,
    # so that no pool finalizer runs either; psycopg itself does not finish a connection of another process
    # when it is collected). A journal the child opens itself gets its own connections and works.
    for db in list(_open):
        db.inherited = True
        _inherited.append(db)
    _open.clear()


os.register_at_fork(after_in_child=_forget_after_fork)


def _lost(error: BaseException, conn: psycopg.Connection[Any] | None) -> bool:
    return isinstance(error, psycopg.OperationalError) and conn is not None and conn.closed


class _Database:
    """A connection pool on one schema, with the schema created on first use."""

    def __init__(self, url: str):
        conninfo, schema, pool_min, pool_max, statement_timeout = split_url(url)
        self.inherited = False  # True in a forked child: its parent's connections, never used or closed there
        self.schema = schema
        self.statement_timeout = statement_timeout
        self.where = _where(conninfo)
        try:
            # One plain connection first: the pool would retry a refused server for its whole wait (10 s)
            # before saying so; a server that is down or unreachable is named at once.
            psycopg.connect(conninfo, autocommit=True, connect_timeout=10).close()
            self.pool = _Pool(
                conninfo, min_size=pool_min, max_size=pool_max, kwargs={"autocommit": True},
                configure=_configure_with(statement_timeout), open=True, name=f"reprise-journal-{schema}",
                check=self._check)
            self.pool.wait(timeout=10)
        except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
            raise _failed(f"cannot connect to PostgreSQL at {self.where}: {e}", e) from e
        _open.add(self)
        ident = sql.Identifier(schema)
        self.q = {name: sql.SQL(text).format(s=ident).as_string(None) for name, text in _QUERIES.items()}

        self.lacking: tuple[str, ...] = ()
        """Relations of _RELATIONS this older schema lacks and this role may not add: it reads (the old way where
        needed) and refuses writes, naming the upgrade (`upgrade_sql`), until another role has added them."""
        try:
            self.write("create or upgrade the schema (on a schema made before index tags_ordering or "
                       "highest_sequence_nr_inserted_xid: add what it lacks and remove orphaned tags, once)",
                       self._create, landed=_run_again)
        except JournalError as e:
            # A role that may only read (GRANT SELECT: a reporting user, a projection, `reprise journal ls`) or a
            # read-only session cannot upgrade an older schema: it reads it as it is, and refuses writes.
            if not isinstance(e.__cause__, _MAY_NOT_UPGRADE):
                raise
            lacking = self._lacking()
            if not lacking or any(name in _BASE for name in lacking):
                raise  # no journal to read there (or it was upgraded meanwhile: the error is another one)
            self.lacking = lacking

    def _relation_names(self, relations: tuple[str, ...]) -> list[str]:
        ident = sql.Identifier(self.schema).as_string(None)
        return [f"{ident}.{name}" for name in relations]

    def _complete(self, cur: psycopg.Cursor[Any]) -> bool:
        cur.execute(_ready(_RELATIONS), self._relation_names(_RELATIONS))
        row = cur.fetchone()
        return bool(row is not None and row[0])

    def _create(self, cur: psycopg.Cursor[Any]) -> None:
        # CREATE ... IF NOT EXISTS locks its table before it looks, and CREATE INDEX then waits for every
        # write in flight: a schema that is complete is left alone, so opening never waits on writers.
        if self._complete(cur):
            return
        lock_ddl(cur)
        if self._complete(cur):  # another session created or upgraded it while this one waited for the lock
            return
        cur.execute(_ready(_BASE), self._relation_names(_BASE))
        row = cur.fetchone()
        new = not (row is not None and row[0])
        for ddl in (*_SCHEMA, *_UPGRADE):
            cur.execute(sql.SQL(ddl).format(s=sql.Identifier(self.schema)))
        if new:  # (as a new SQLite file is: a misspelt ?schema= starts an empty journal, and this is where it shows)
            log.info("created the new journal schema %r in PostgreSQL at %s (there was none; if you meant an existing "
                     "journal, fix the URL's ?schema=)", self.schema, self.where)

    def _lacking(self) -> tuple[str, ...]:
        """The relations of _RELATIONS missing from the schema now."""
        ident = sql.Identifier(self.schema).as_string(None)
        missing = set(self.query("look for the journal's tables", "lacking", (list(_RELATIONS), ident))[0][0])
        return tuple(name for name in _RELATIONS if name in missing)

    def upgrade_sql(self) -> str:
        """The SQL that upgrades this schema as it is now (what opening it runs for a role that may)."""
        ident = sql.Identifier(self.schema)
        added = [ddl for name in _RELATIONS if name in self.lacking for ddl in _ADDED.get(name, ())]
        statements = [f"SELECT pg_advisory_xact_lock({_DDL_LOCK})", *added, *_UPGRADE]
        return "BEGIN; " + "; ".join(sql.SQL(t).format(s=ident).as_string(None) for t in statements) + "; COMMIT;"

    def _upgrade_needed(self, what: str) -> JournalError:
        return JournalError(
            f"{what} refused on PostgreSQL {self.where}: journal schema {self.schema!r} was made by an older Reprise "
            f"and lacks {', '.join(self.lacking)}, which this role may not add (it owns no table there, or its "
            "session is read-only); it can read, not write. Upgrade the schema once: open it with a role that "
            "owns its tables (e.g. `reprise journal ls` with that role in the URL), or run as that role: "
            f"{self.upgrade_sql()}")

    def writable(self, what: str) -> None:
        """Raise the upgrade error if this older schema still lacks what this role may not add (checked again
        here: another role may have upgraded it since)."""
        if self.lacking:
            lacking = self._lacking()
            if lacking:
                raise self._upgrade_needed(what)
            self.lacking = ()

    def _check(self, conn: psycopg.Connection[Any]) -> None:
        try:
            _check_idle(conn)
        except psycopg.OperationalError:
            # The server dropped one, so probably all (a restart): drop the other dead idle ones now, or
            # the pool would back off 1 s, 2 s, 4 s ... before trying each of them in turn.
            self.pool.check()
            raise

    def write(self, what: str, body: Callable[[psycopg.Cursor[Any]], object],
              landed: Callable[[], bool] | None = None) -> None:
        """Run `body` in one transaction, once more if its connection is lost (module doc); else JournalError.

        `landed` is asked after a lost COMMIT: True = it was stored, False = run `body` again;
        None = the outcome cannot be told, raise.
        """
        if self.inherited:
            raise self._forked_error()
        self.writable(what)
        lost_commit = False  # the first run's COMMIT was lost and read back as not (yet) stored: it may still land
        for attempt in (1, 2):
            conn: psycopg.Connection[Any] | None = None
            committing = False
            try:
                with self.pool.connection() as conn:
                    with conn.transaction():
                        with conn.cursor(binary=True) as cur:
                            body(cur)
                        committing = True  # leaving the block sends COMMIT
                    return
            except psycopg.errors.UniqueViolation:
                raise
            except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
                lost = _lost(e, conn)
                if attempt == 1 and lost and not committing:
                    continue
                if attempt == 1 and lost and landed is not None:
                    try:
                        if landed():
                            return
                    except JournalError as again:
                        raise JournalError(f"{what} on PostgreSQL {self.where}: the connection was lost at "
                                           f"COMMIT ({e}) and reading back whether it was stored failed: "
                                           f"{again}; outcome unknown") from e
                    lost_commit = True
                    continue
                unknown = ("; outcome unknown" if committing else
                           "; outcome unknown: the first run's COMMIT was lost, and it may still land" if lost_commit
                           else "")
                retried = " (on a new connection, after one lost)" if attempt == 2 else ""
                raise _failed(f"{what} failed on PostgreSQL {self.where}{retried}: {e}{unknown}"
                              f"{self._timed_out(e)}", e) from e

    def query(self, what: str, name: str, params: Sequence[Any] | dict[str, Any] = ()) -> list[Any]:
        """Run a read and fetch all rows (once more on a new connection if the first one was lost)."""
        if self.inherited:
            raise self._forked_error()
        for attempt in (1, 2):
            conn: psycopg.Connection[Any] | None = None
            try:
                with self.pool.connection() as conn, conn.cursor(binary=True) as cur:
                    cur.execute(self.q[name], params, prepare=True)
                    return cur.fetchall()
            except (psycopg.Error, psycopg_pool.PoolTimeout) as e:
                if attempt == 1 and _lost(e, conn):
                    continue
                retried = " (on a new connection, after one lost)" if attempt == 2 else ""
                raise _failed(f"{what} failed on PostgreSQL {self.where}{retried}: {e}{self._timed_out(e)}", e) from e
        raise AssertionError("unreachable")

    def _timed_out(self, e: BaseException) -> str:
        """What to say of a statement cancelled by the journal's statement_timeout (else nothing)."""
        if not isinstance(e, psycopg.errors.QueryCanceled):
            return ""
        return (f" (it ran into the journal's statement_timeout of {self.statement_timeout:g} s: another session "
                "holding a lock on the journal's tables, e.g. a migration or VACUUM FULL, or a server that stalls; "
                "for longer statements give the URL ?statement_timeout=SECONDS, 0 for none)")

    def _forked_error(self) -> JournalError:
        return JournalError(
            f"this PostgreSQL journal ({self.where}, schema {self.schema!r}) was opened in the process this one was "
            "forked from: its connections are that process's sockets, and statements sent on them here would mix "
            "with the parent's (replies read by the wrong process). Start the child with "
            "multiprocessing.get_context('spawn') or 'forkserver' (or as a new program), or open a journal of its "
            "own in the child (journal.open_journal(url) after the fork)")

    def close(self) -> None:
        """Close every pooled connection (in a forked child: none, they are the parent's)."""
        if self.inherited:
            return
        _open.discard(self)
        self.pool.close()


def _run_again() -> bool:
    """For idempotent writes (upserts, deletes, IF NOT EXISTS): after a lost COMMIT, running them again is safe."""
    return False


def missing_schema(url: str) -> str | None:
    """Why `url` names no existing journal schema (readers must not create one), or None if it exists."""
    conninfo, schema, *_ = split_url(url)
    at = _where(conninfo)
    try:
        with psycopg.connect(conninfo, autocommit=True, connect_timeout=10) as conn:
            ready = conn.execute(_ready(_BASE), [f"{sql.Identifier(schema).as_string(None)}.{name}" for name in _BASE])
            row = ready.fetchone()
            if row is not None and row[0]:
                return None
            found = [r[0] for r in conn.execute(
                "SELECT table_schema FROM information_schema.tables WHERE table_name = 'highest_sequence_nr' "
                "ORDER BY 1").fetchall()]
    except psycopg.Error as e:
        raise _failed(f"cannot connect to PostgreSQL at {at}: {e}", e) from e
    known = f"journal schemas in that database: {', '.join(found)}" if found else "that database has no journal"
    return f"there is no journal schema {schema!r} in PostgreSQL at {at} ({known})"


def drop_schema(url: str) -> None:
    """Drop the journal's schema with everything in it (for tests)."""
    conninfo, schema, *_ = split_url(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


class PostgresJournal(Journal):
    """A journal in PostgreSQL."""

    def __init__(self, url: str):
        self._db = _Database(url)
        self._q = self._db.q

    def _store(self, batch: EncodedBatch) -> None:
        def insert(cur: psycopg.Cursor[Any]) -> None:
            if len(batch.rows) == 1:
                cur.execute(self._q["insert"], batch.rows[0])
            else:
                cur.executemany(self._q["insert"], batch.rows)
            if batch.tag_rows:
                cur.executemany(self._q["insert_tag"], batch.tag_rows)
        lost_commit = False

        def landed() -> bool:
            nonlocal lost_commit
            lost_commit = True
            return self._stored(batch)
        try:
            self._db.write("write", insert, landed=landed)
        except psycopg.errors.UniqueViolation as e:
            # The lost COMMIT may still have been in progress when read back: running it again then waited
            # on the primary key for it, and found it committed.
            if lost_commit and self._stored(batch):
                return
            raise self._duplicate_error(batch, e) from e

    def _stored(self, batch: EncodedBatch) -> bool:
        """Whether every row of `batch` is stored byte for byte (after a COMMIT whose outcome is unknown)."""
        by_pid: dict[str, dict[int, tuple[bytes, int]]] = {}
        for pid, seq, record, checksum in batch.rows:
            by_pid.setdefault(pid, {})[seq] = (bytes(record), checksum)
        for pid, rows in by_pid.items():
            stored = {seq: (bytes(record), checksum)
                      for seq, record, checksum in self._read(pid, min(rows), max(rows), MAX_SEQUENCE_NR)}
            if any(stored.get(seq) != row for seq, row in rows.items()):
                return False
        return True

    def _read(self, persistence_id: str, start: int, end: int, limit: int) -> Sequence[StoredRow]:
        return self._db.query("replay", "replay", (persistence_id, start, end, limit))

    def _highest(self, persistence_id: str) -> int:
        highest: int = self._db.query("highest sequence nr", "highest", {"p": persistence_id})[0][0]
        return highest

    def storage_bytes(self) -> int | None:
        """Tables, indexes and TOAST of this journal's schema."""
        return int(self._db.query("journal size", "size", (self._db.schema,))[0][0])

    def delete_messages_to(self, persistence_id: str, to_sequence_nr: int) -> None:
        """Delete all events with seq nr <= to (2**63 - 1 deletes all) without lowering the highest."""
        # The highest kept is that of the events deleted: the highest ever stored is then still the greatest of
        # the events left and the highest kept.
        for pause in self.delete_in_steps(persistence_id, to_sequence_nr):
            time.sleep(pause)

    def delete_in_steps(self, persistence_id: str, to_sequence_nr: int) -> Iterator[float]:
        """delete_messages_to one transaction (slice) per step; the bound is the highest stored now, at most `to`.

        Each slice is the one-statement delete up to its last event (one snapshot: see the "delete" statement);
        a failure part-way leaves the events up to some sequence nr deleted, as a delete to that one would."""
        # Events the id's writer stores after this call are above the highest now: later slices keep them.
        bound = min(to_sequence_nr, self._highest(persistence_id))

        def delete_slice(rows: int) -> bool:
            more = False

            def body(cur: psycopg.Cursor[Any]) -> None:
                nonlocal more
                cur.execute(self._q["delete_upto"], (persistence_id, bound, rows - 1))
                found = cur.fetchone()
                upto = bound if found is None else min(bound, int(found[0]))
                more = upto < bound
                cur.execute(self._q["delete"], {"p": persistence_id, "to": upto})

            self._db.write("delete", body, landed=_run_again)
            return more

        began = time.perf_counter()
        if not delete_slice(256):
            return iter(())
        return paced_slices(delete_slice, 256, began)

    def current_persistence_ids(self) -> Iterator[str]:
        """Every persistence id that has ever been written (sorted)."""
        return (r[0] for r in self._db.query("persistence ids", "ids"))

    def _persistence_ids_poller(self) -> Callable[[], Iterable[str]]:
        """Each poll of a live persistence_ids reads the ids of the events written since about the poll before, not
        of every event: the SELECT DISTINCT over the whole journal that it ran took 22-33 ms a poll at 200k events.

        An id's first event can commit after events with later offsets (writers commit out of offset order), so a
        poll cannot read on from the greatest offset it saw. It reads from the greatest offset M seen by an earlier
        poll whose writes have all ended: every write that drew an offset <= M had its transaction id when M was
        seen (Reprise's writes take it before they draw; see OrderingHorizon's _XID_GRACE for others), so once a
        snapshot's xmin passed the xmax of a snapshot taken _XID_GRACE after M was seen, the offsets up to M are
        final. No timeout gives up on a write, so no id is missed however long its first write takes; while such a
        write, or any long transaction on the server, holds xmin back, polls read every event since M."""
        read_from = 0  # every id of an event at an offset <= this has been returned (0: none yet)
        xmin_before = 0  # the xmin of the previous poll's first snapshot (see below)
        listed = False  # a poll listed every id once the offsets seen by the first poll were final
        pending: list[list[Any]] = []  # [offset seen, when (monotonic), xmax taken _XID_GRACE later or None]

        def poll() -> set[str]:
            nonlocal read_from, xmin_before, listed
            newest, xmin, xmax = self._db.query("persistence ids (newest offset)", "newest_and_snapshot")[0]
            now = time.monotonic()
            if not pending or newest > pending[-1][0]:
                # (While a long transaction holds xmin back, one more a poll: past 64, the newest is moved on instead;
                # a later offset seen later is settled no earlier, so no offset is taken as final too soon.)
                if len(pending) < 64:
                    pending.append([newest, now, None])
                else:
                    pending[-1] = [newest, now, None]
            final = read_from  # the offsets up to it are final now: read them once more, from read_from, below
            settled = False
            while pending:
                seen, since, horizon = pending[0]
                if horizon is None or xmin < horizon:
                    break
                final = max(final, seen)
                pending.pop(0)
                settled = True
            for entry in pending:
                if entry[2] is None and now - entry[1] >= _XID_GRACE:
                    entry[2] = xmax
            if not listed:
                # The first poll (and those until its writes in flight have ended): every id, by the whole listing
                # in one statement; read in chunks by offset, it took 3 times as long. (Not while read_from == 0:
                # in a journal without events, all deleted, that was every poll.)
                every = set(self.current_persistence_ids())
                read_from, xmin_before, listed = final, xmin, settled
                return every
            ids: set[str] = set()
            after, chunk = read_from, self.replay_chunk * 10
            while True:  # (after the snapshot above: every offset up to `final` is visible to these reads)
                last, count, found = self._db.query("persistence ids", "ids_after", (after, chunk))[0]
                ids.update(found)
                if count < chunk:
                    break
                after = last
            # After the events: an id whose events were deleted before they were read is in highest_sequence_nr.
            # Only its rows inserted since the previous poll's first snapshot: by a transaction with an xid >= that
            # snapshot's xmin (one with a lower xid had ended by then, so its row was in that snapshot, and in every
            # later read of the previous poll, which returned its id: by induction, from the first poll's listing).
            # A later delete of the id updates its row and keeps inserted_xid: the id was returned for the insert.
            ids.update(self._ids_deleted_since(xmin_before, chunk))
            read_from, xmin_before = final, xmin  # (only once every read succeeded)
            return ids
        return poll

    def _ids_deleted_since(self, xid: int, chunk: int) -> list[str]:
        """The ids of highest_sequence_nr's rows inserted by transactions with an id >= `xid`, `chunk` rows a read.

        Each read is a new snapshot: a row committed meanwhile behind the last one read was not committed at the
        poll's first snapshot, so its transaction's id is >= that snapshot's xmin, and the next poll reads it."""
        if "highest_sequence_nr_inserted_xid" in self._db.lacking:
            return [r[0] for r in self._db.query("persistence ids", "ids_deleted_by_xmin", (xid % 2**32,))]
        rows: list[Any] = self._db.query("persistence ids", "ids_deleted", (xid, chunk))
        ids = [r[1] for r in rows]
        while len(rows) == chunk:
            rows = self._db.query("persistence ids", "ids_deleted_after", (*rows[-1], chunk))
            ids += [r[1] for r in rows]
        return ids

    def _read_tag(self, tag: str, offset: int, limit: int, upto: int) -> Sequence[TaggedRow]:
        rows: list[Any] = self._db.query("events by tag", "tagged", (tag, offset, upto, limit, limit, limit))
        if not rows or rows[-1][1] is not None:
            return rows  # the chunk held fewer than `limit` tags: none left up to `upto`
        end = rows.pop()[2]
        while len(rows) < limit:  # tags whose events were deleted by hand: read on after the chunk's last tag
            more: list[Any] = self._db.query("events by tag", "tagged", (tag, end, upto, limit, limit, limit))
            if more and more[-1][1] is None:
                end = more.pop()[2]
            else:
                end = None
            rows += more[:limit - len(rows)]
            if end is None:
                break
        return rows

    def _read_ordered(self, offset: int, limit: int, upto: int) -> Sequence[TaggedRow]:
        return self._db.query("events by offset", "ordered", (offset, upto, limit))

    def _newest(self, tag: str | None) -> int:
        if tag is None:
            return self._max_ordering()
        return int(self._db.query("newest offset of a tag", "max_tag_ordering", (tag,))[0][0])

    def _read_events(self, persistence_id: str, start: int, end: int, limit: int) -> Sequence[TaggedRow]:
        return self._db.query("events by persistence id", "events", (persistence_id, start, end, limit))

    def _ordering_horizon(self, offset: int, gap_timeout: float) -> OrderingHorizon:
        # The identity's sequence has CACHE 1 (the default): an offset is drawn by the INSERT that uses
        # it, so a gap below a visible offset was drawn by a transaction running when that one committed.
        def fetch(after: int, limit: int) -> OrderingBatch:
            xmin, xmax, orderings = self._db.query("events by tag (stored offsets)", "orderings",
                                                   (after, limit))[0]
            return orderings, (xmin, xmax)
        return OrderingHorizon(fetch, offset, gap_timeout)

    def _max_ordering(self) -> int:
        return int(self._db.query("events by tag (newest offset)", "max_ordering")[0][0])

    def _max_drawn(self) -> int:
        table = f"{sql.Identifier(self._db.schema).as_string(None)}.journal"
        return int(self._db.query("events between offsets (highest offset drawn)", "max_drawn", (table,))[0][0])

    def _read_tail(self, n: int) -> Sequence[TaggedRow]:
        return self._db.query("tail", "tail", (n,))

    def summaries(self) -> list[PersistenceIdSummary]:
        """`ls`: every persistence id with its highest sequence number and number of stored events."""
        return [PersistenceIdSummary(p, h, n) for p, h, n in self._db.query("ls", "ls")]

    def _read_all(self) -> Iterator[tuple[str, int, bytes, int]]:
        last = 0
        while True:
            rows = self._db.query("verify", "all", (last,))
            for _, pid, seq, blob, ck in rows:
                yield pid, seq, blob, ck
            if len(rows) < 1000:
                return
            last = rows[-1][0]

    def _read_all_snapshots(self) -> Iterator[tuple[str, int, int, bytes, int]]:
        yield from self._db.query("verify", "all_snapshots")

    def check_writable(self) -> None:
        """Raise JournalError if the schema is an older one this role may read but not upgrade (see _Database)."""
        self._db.writable("writing")

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        """Run a statement on the journal's schema (`{s}` stands for it); for tests and tooling."""
        self._db.write("execute", lambda cur: cur.execute(
            sql.SQL(statement).format(s=sql.Identifier(self._db.schema)), params))

    def close(self) -> None:
        """Close the connection pool."""
        self._db.close()


class PostgresSnapshotStore(SnapshotStore):
    """A snapshot store in PostgreSQL (same schema as the journal)."""

    def __init__(self, url: str):
        self._db = _Database(url)
        self._q = self._db.q

    def _write(self, what: str, name: str, params: Sequence[Any]) -> None:
        self._db.write(what, lambda cur: cur.execute(self._q[name], params), landed=_run_again)

    def _save(self, metadata: SnapshotMetadata, blob: bytes, ck: int) -> None:
        self._write("save snapshot", "save_snapshot",
                    (metadata.persistence_id, metadata.sequence_nr, metadata.timestamp, blob, ck))

    def _load(self, persistence_id: str,
              criteria: SnapshotSelectionCriteria) -> tuple[int, int, bytes, int] | None:
        rows = self._db.query("load snapshot", "load_snapshot",
                              (persistence_id, criteria.min_sequence_nr, criteria.max_sequence_nr,
                               criteria.min_timestamp, criteria.max_timestamp))
        return rows[0] if rows else None

    def _younger(self, persistence_id: str, after: int, to: int) -> Sequence[tuple[int, int, bytes, int]]:
        return self._db.query("load snapshot", "younger_snapshots", (persistence_id, after, to))

    def _delete_range(self, persistence_id: str, min_sequence_nr: int, max_sequence_nr: int) -> None:
        self._write("delete snapshots", "delete_snapshots", (persistence_id, min_sequence_nr, max_sequence_nr))

    def _delete_keys(self, what: str, persistence_id: str, keys: list[tuple[int, int]]) -> None:
        if keys:
            self._db.write(what, lambda cur: cur.executemany(
                self._q["delete_snapshot"], [(persistence_id, seq, ts, ts) for seq, ts in keys]), landed=_run_again)

    def check_writable(self) -> None:
        """Raise JournalError if the schema is an older one this role may read but not upgrade (see _Database)."""
        self._db.writable("writing")

    def execute(self, statement: str, params: Sequence[Any] = ()) -> None:
        """Run a statement on the store's schema (`{s}` stands for it); for tests and tooling."""
        self._db.write("execute", lambda cur: cur.execute(
            sql.SQL(statement).format(s=sql.Identifier(self._db.schema)), params))

    def close(self) -> None:
        """Close the connection pool."""
        self._db.close()

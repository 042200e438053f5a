"""The shipped TCK (journal.testing) against every backend: SQLite, in-memory, PostgreSQL."""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import uuid
from collections.abc import Callable, Iterator

import psycopg
import pytest
from psycopg import sql

from journal import Journal, SnapshotStore, open_journal, open_snapshot_store
from journal.memory import MemoryJournal, MemorySnapshotStore, drop_memory_store
from journal.postgres import PostgresJournal, PostgresSnapshotStore, split_url
from journal.sqlite import SqliteJournal
from journal.testing import JournalSpec, SnapshotStoreSpec
from tests.journal.postgres_server import postgres_url  # noqa: F401  (fixture)

# --- SQLite --------------------------------------------------------------------------------------


def _flip_stored_bytes(path: str, blob: bytes) -> None:
    """Flip a bit in the last byte of `blob` where it lies in the database file itself."""
    with open(path, "r+b") as f:
        data = f.read()
        at = data.find(blob)
        assert at >= 0 and data.find(blob, at + 1) == -1, "stored bytes not found exactly once in the file"
        f.seek(at + len(blob) - 1)
        f.write(bytes([data[at + len(blob) - 1] ^ 0x20]))


def _stored(path: str, sql: str, params: tuple) -> bytes:
    conn = sqlite3.connect(path)
    try:
        return conn.execute(sql, params).fetchone()[0]
    finally:
        conn.close()


class TestSqliteJournal(JournalSpec):
    supports_rejecting_non_serializable_objects = True
    supports_metadata = True
    supports_replay_only_last = True
    supports_multiple_processes = True

    @pytest.fixture
    def journal_url(self, tmp_path) -> str:
        return f"sqlite://{tmp_path}/journal.db"

    def corrupt_event(self, journal: Journal, journal_url: str, pid: str, sequence_nr: int) -> Journal:
        path = journal.path
        blob = _stored(path, "SELECT record FROM journal WHERE persistence_id = ? AND sequence_nr = ?",
                       (pid, sequence_nr))
        journal.close()  # the last connection checkpoints the WAL: the record is in the main file now
        _flip_stored_bytes(path, blob)
        return open_journal(journal_url)

    def remove_event_behind_the_journal(self, journal: Journal, journal_url: str, pid: str, sequence_nr: int) -> None:
        conn = sqlite3.connect(journal.path)
        try:
            conn.execute("DELETE FROM journal WHERE persistence_id = ? AND sequence_nr = ?", (pid, sequence_nr))
            conn.commit()
        finally:
            conn.close()

    def journal_files(self, journal: Journal) -> list[str]:
        assert isinstance(journal, SqliteJournal)
        files = [journal.path + suffix for suffix in ("", "-wal", "-shm")]
        assert all(os.path.exists(f) for f in files), "an open journal in WAL mode has all three files"
        return files


class TestSqliteSnapshotStore(SnapshotStoreSpec):
    supports_metadata = True
    supports_multiple_processes = True

    @pytest.fixture
    def snapshot_url(self, tmp_path) -> str:
        return f"sqlite://{tmp_path}/journal.db"

    def corrupt_snapshot(self, store: SnapshotStore, snapshot_url: str, pid: str, sequence_nr: int
                         ) -> SnapshotStore:
        path = store.path
        blob = _stored(path, "SELECT snapshot FROM snapshot WHERE persistence_id = ? AND sequence_nr = ?",
                       (pid, sequence_nr))
        store.close()
        _flip_stored_bytes(path, blob)
        return open_snapshot_store(snapshot_url)

    def corrupt_snapshot_timestamp(self, store: SnapshotStore, snapshot_url: str, pid: str, sequence_nr: int,
                                   bit: int) -> SnapshotStore:
        path = store.path
        store.close()  # (no second connection to a file this process has open)
        conn = sqlite3.connect(path)
        try:
            conn.execute("UPDATE snapshot SET timestamp = (timestamp | ?1) - (timestamp & ?1) "  # (xor: SQLite has none)
                         "WHERE persistence_id = ?2 AND sequence_nr = ?3", (1 << bit, pid, sequence_nr))
            conn.commit()
        finally:
            conn.close()
        return open_snapshot_store(snapshot_url)


# --- in-memory -----------------------------------------------------------------------------------


@pytest.fixture
def memory_url():
    name = f"tck-{uuid.uuid4().hex}"
    yield f"memory://{name}"
    drop_memory_store(name)


class TestMemoryJournal(JournalSpec):
    supports_rejecting_non_serializable_objects = True
    supports_metadata = True
    supports_replay_only_last = True

    @pytest.fixture
    def journal_url(self, memory_url) -> str:
        return memory_url

    def corrupt_event(self, journal: Journal, journal_url: str, pid: str, sequence_nr: int) -> Journal:
        assert isinstance(journal, MemoryJournal)
        journal.corrupt(pid, sequence_nr)
        return journal


class TestMemorySnapshotStore(SnapshotStoreSpec):
    supports_metadata = True

    @pytest.fixture
    def snapshot_url(self, memory_url) -> str:
        return memory_url

    def corrupt_snapshot(self, store: SnapshotStore, snapshot_url: str, pid: str, sequence_nr: int
                         ) -> SnapshotStore:
        assert isinstance(store, MemorySnapshotStore)
        store.corrupt(pid, sequence_nr)
        return store

    def corrupt_snapshot_timestamp(self, store: SnapshotStore, snapshot_url: str, pid: str, sequence_nr: int,
                                   bit: int) -> SnapshotStore:
        assert isinstance(store, MemorySnapshotStore)
        store.corrupt_timestamp(pid, sequence_nr, bit)
        return store


# --- PostgreSQL ----------------------------------------------------------------------------------

_FLIP_LAST_BYTE = ("UPDATE {s}.%s SET %s = set_byte(%s, length(%s) - 1, get_byte(%s, length(%s) - 1) # 32) "
                   "WHERE persistence_id = %%s AND sequence_nr = %%s")


@pytest.mark.postgres
class TestPostgresJournal(JournalSpec):
    supports_rejecting_non_serializable_objects = True
    supports_metadata = True
    supports_replay_only_last = True
    supports_multiple_processes = True

    @pytest.fixture
    def journal_url(self, postgres_url) -> str:  # noqa: F811
        return postgres_url

    def corrupt_event(self, journal: Journal, journal_url: str, pid: str, sequence_nr: int) -> Journal:
        assert isinstance(journal, PostgresJournal)
        journal.execute(_FLIP_LAST_BYTE % (("journal",) + ("record",) * 5), (pid, sequence_nr))
        return journal

    def remove_event_behind_the_journal(self, journal: Journal, journal_url: str, pid: str, sequence_nr: int) -> None:
        assert isinstance(journal, PostgresJournal)
        journal.execute("DELETE FROM {s}.journal WHERE persistence_id = %s AND sequence_nr = %s", (pid, sequence_nr))

    @contextlib.contextmanager
    def commits_held(self, journal: Journal, journal_url: str, persistence_id: str
                     ) -> Iterator[Callable[[], bool] | None]:
        """A deferred trigger makes a write of the id wait at its COMMIT (offsets drawn, rows inserted) for an
        advisory lock this test holds."""
        conninfo, schema, *_ = split_url(journal_url)
        key = secrets.randbits(62)  # (advisory locks are database-wide: other runs share the server)
        trigger = sql.Identifier(f"held_{uuid.uuid4().hex[:12]}")
        s = sql.Identifier(schema)
        with psycopg.connect(conninfo, autocommit=True) as admin:
            admin.execute(sql.SQL(
                "CREATE OR REPLACE FUNCTION {}.held_commit() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN "
                "IF NEW.persistence_id = TG_ARGV[0] THEN PERFORM pg_advisory_xact_lock_shared(TG_ARGV[1]::bigint); "
                "END IF; RETURN NULL; END'").format(s))
            admin.execute(sql.SQL("CREATE CONSTRAINT TRIGGER {} AFTER INSERT ON {}.journal DEFERRABLE INITIALLY "
                                  "DEFERRED FOR EACH ROW EXECUTE FUNCTION {}.held_commit({}, {})").format(
                trigger, s, s, sql.Literal(persistence_id), sql.Literal(str(key))))
            admin.execute("SELECT pg_advisory_lock(%s)", (key,))

            def waiting() -> bool:
                row = admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                                    "AND (classid::bigint << 32) | objid::bigint = %s", (key,)).fetchone()
                return bool(row and row[0])
            try:
                yield waiting
            finally:
                admin.execute("SELECT pg_advisory_unlock(%s)", (key,))
                admin.execute(sql.SQL("DROP TRIGGER {} ON {}.journal").format(trigger, s))


@pytest.mark.postgres
class TestPostgresSnapshotStore(SnapshotStoreSpec):
    supports_metadata = True
    supports_multiple_processes = True

    @pytest.fixture
    def snapshot_url(self, postgres_url) -> str:  # noqa: F811
        return postgres_url

    def corrupt_snapshot(self, store: SnapshotStore, snapshot_url: str, pid: str, sequence_nr: int
                         ) -> SnapshotStore:
        assert isinstance(store, PostgresSnapshotStore)
        store.execute(_FLIP_LAST_BYTE % (("snapshot",) + ("snapshot",) * 5), (pid, sequence_nr))
        return store

    def corrupt_snapshot_timestamp(self, store: SnapshotStore, snapshot_url: str, pid: str, sequence_nr: int,
                                   bit: int) -> SnapshotStore:
        assert isinstance(store, PostgresSnapshotStore)
        store.execute("UPDATE {s}.snapshot SET timestamp = timestamp # %s WHERE persistence_id = %s AND sequence_nr = %s",
                      (1 << bit, pid, sequence_nr))
        return store

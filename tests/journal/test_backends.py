"""The shipped TCK (journal.testing) against every backend: SQLite, in-memory, PostgreSQL."""

from __future__ import annotations

import contextlib
import os
import sqlite3
import uuid
from collections.abc import Callable

import pytest

from journal import Journal, SnapshotStore, open_journal, open_snapshot_store
from journal.memory import MemoryJournal, MemorySnapshotStore, drop_memory_store
from journal.postgres import PostgresJournal, PostgresSnapshotStore
from journal.sqlite import SqliteJournal
from journal.testing import JournalSpec, SnapshotStoreSpec
from tests.journal.held_commits import postgres_commits_held
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

    def commits_held(self, journal: Journal, journal_url: str, persistence_id: str
                     ) -> contextlib.AbstractContextManager[Callable[[], bool] | None]:
        return postgres_commits_held(journal_url, persistence_id)


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

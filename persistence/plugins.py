"""Journals and snapshot stores by URL, opened once per process; the shard layout of per-shard journals.

Backends are found by scheme in journal's one registry (`journal.register_scheme`, re-exported here as
`persistence.register_scheme`), so a scheme registered once serves persistence, `journal.open_journal`,
`reprise journal ...` and config validation alike. The `journal=` / `snapshot_store=` options themselves
are checked in persistence/store_options.py.
"""

from __future__ import annotations

import multiprocessing.util
import os
import threading
from typing import Any

from actors import local_resources
from actors.errors import RepriseError
from journal import SnapshotMetadata, SnapshotSelectionCriteria, open_journal, open_snapshot_store
from journal.api import Journal, SnapshotStore
from journal.model import AtomicWrite, PersistentRepr
from journal.registry import register_scheme
from journal.urls import redact_url

__all__ = ["NO_SNAPSHOT_STORE", "NoSnapshotStore", "SnapshotStoreNotConfigured", "check_shard_layout", "close_all",
           "journal_for", "register_scheme", "snapshot_store_for"]

_journals: dict[str, Journal] = {}
_stores: dict[str, SnapshotStore] = {}
_lock = threading.Lock()


_closed_at_exit_by: int | None = None  # the pid that registered close_all to run at its exit


def _close_at_exit() -> None:
    """Run close_all when this process exits, and when its last local system has shut down (the caller holds _lock).

    An actor process ends through multiprocessing's exit path, which runs its finalizers but not atexit: a
    Finalize serves both it and a client's interpreter exit. Closing is what lets the last process using a
    SQLite file checkpoint its WAL into it and remove it, so that a cleanly stopped system leaves its journal
    whole in the one .db file (left open, the events stay in the -wal until the next open).
    """
    global _closed_at_exit_by
    if _closed_at_exit_by != os.getpid():  # (a forked child starts with an empty finalizer registry)
        _closed_at_exit_by = os.getpid()
        multiprocessing.util.Finalize(None, close_all, exitpriority=0)
        local_resources.on_last_shutdown(close_all)  # (a local system's actors opened them in this process)


def journal_for(url: str | None) -> Journal:
    """The process-wide journal for `url` (opened on first use)."""
    if not url:
        raise RuntimeError("no journal configured: pass journal=URL to actors.start(...) or set journal_url "
                           "on the PersistentActor class")
    with _lock:
        j = _journals.get(url)
        if j is None:
            j = _journals[url] = open_journal(url)
            _close_at_exit()
        return j


def snapshot_store_for(url: str | None) -> SnapshotStore:
    """The process-wide snapshot store for `url`, or a NoSnapshotStore when none is configured."""
    if not url:
        return NO_SNAPSHOT_STORE
    with _lock:
        s = _stores.get(url)
        if s is None:
            s = _stores[url] = open_snapshot_store(url)
            _close_at_exit()
        return s


SHARD_LAYOUT_ID = "reprise-shard-layout:"
"""Persistence id prefix of the record a host with per-shard stores keeps in its journal (+ its path)."""


def check_shard_layout(url: str, path: str, shard: int, shards: int) -> None:
    """Record which shard of `path` owns the journal at `url`, or refuse if it belongs to another layout.

    With one journal per shard, an entity's events are in its shard's file: started with another shard
    count, entities would move to files without their events and recover empty.
    """
    journal = journal_for(url)
    pid = SHARD_LAYOUT_ID + path
    mine = {"path": path, "shard": shard, "shards": shards}
    highest = journal.highest_sequence_nr(pid)
    if highest:
        stored = next(iter(journal.replay_messages(pid, highest, highest, 1))).payload
        if stored != mine:
            raise ValueError(
                f"journal {redact_url(url)} belongs to shard {stored.get('shard')} of {stored.get('shards')} of "
                f"{stored.get('path')}, but this host is shard {shard} of {shards} of {path}: with per-shard "
                f"journals an entity's events stay in the file of the shard it had, so the shard count cannot "
                f"change. Start {path} with shards={stored.get('shards')}, or give it new journal files")
        return
    error = journal.write_messages([AtomicWrite((PersistentRepr(mine, 1, pid),))])[0]
    if error is not None:
        raise error


def close_all() -> None:
    """Close every journal and store opened by this process (at its exit, and in tests and benchmarks)."""
    with _lock:
        for x in list(_journals.values()) + list(_stores.values()):
            try:
                x.close()
            except Exception:
                pass
        _journals.clear()
        _stores.clear()


class SnapshotStoreNotConfigured(RepriseError, RuntimeError):
    """A snapshot was saved or deleted but no snapshot store is configured."""

    def __init__(self, message: str = "No snapshot store configured! Set snapshot_store=URL on actors.start(...) "
                 "(or on the spawn, or snapshot_store_url on the PersistentActor class), e.g. "
                 "snapshot_store=\"sqlite:///data/snapshots.db\"") -> None:
        super().__init__(message)


class NoSnapshotStore(SnapshotStore):
    """Akka's NoSnapshotStore: loads find nothing, saves and deletes fail naming the missing setting."""

    def load(self, persistence_id: str,
             criteria: SnapshotSelectionCriteria = SnapshotSelectionCriteria.LATEST) -> None:
        """Nothing is ever stored: no snapshot to offer."""
        return None

    def save(self, metadata: SnapshotMetadata, snapshot: Any) -> SnapshotMetadata:
        raise SnapshotStoreNotConfigured()

    def delete(self, metadata: SnapshotMetadata) -> None:
        raise SnapshotStoreNotConfigured()

    def delete_matching(self, persistence_id: str, criteria: SnapshotSelectionCriteria) -> None:
        raise SnapshotStoreNotConfigured()

    def close(self) -> None:
        """Nothing to release (it is shared by every actor without a snapshot store)."""

    def _save(self, metadata: SnapshotMetadata, blob: bytes, ck: int) -> None:
        raise SnapshotStoreNotConfigured()

    def _load(self, persistence_id: str, criteria: SnapshotSelectionCriteria) -> None:
        return None


NO_SNAPSHOT_STORE = NoSnapshotStore()

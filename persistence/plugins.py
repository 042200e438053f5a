"""Journals and snapshot stores by URL, opened once per process, plus test-double schemes."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from actors.errors import RepriseError
from journal import SnapshotMetadata, SnapshotSelectionCriteria, open_journal, open_snapshot_store
from journal.api import Journal, SnapshotStore
from journal.model import AtomicWrite, PersistentRepr
from journal.urls import redact_url

_journals: dict[str, Journal] = {}
_stores: dict[str, Any] = {}
_schemes: dict[str, tuple[Callable[[str], Journal] | None, Callable[[str], SnapshotStore] | None]] = {}
_lock = threading.Lock()


def register_scheme(scheme: str, journal: Callable[[str], Journal] | None = None,
                    snapshot_store: Callable[[str], SnapshotStore] | None = None) -> None:
    """Serve `scheme://...` URLs with these factories (plugin test doubles, third-party backends)."""
    _schemes[scheme] = (journal, snapshot_store)


def journal_for(url: str | None) -> Journal:
    """The process-wide journal for `url` (opened on first use)."""
    if not url:
        raise RuntimeError("no journal configured: pass journal=URL to actors.start(...) or set journal_url "
                           "on the PersistentActor class")
    with _lock:
        j = _journals.get(url)
        if j is None:
            scheme = url.partition("://")[0]
            factory = _schemes.get(scheme, (None, None))[0]
            j = factory(url) if factory else open_journal(url)
            _journals[url] = j
        return j


def snapshot_store_for(url: str | None) -> Any:
    """The process-wide snapshot store for `url`, or a NoSnapshotStore when none is configured."""
    if not url:
        return NO_SNAPSHOT_STORE
    with _lock:
        s = _stores.get(url)
        if s is None:
            scheme = url.partition("://")[0]
            factory = _schemes.get(scheme, (None, None))[1]
            s = factory(url) if factory else open_snapshot_store(url)
            _stores[url] = s
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
    """Close every journal and store opened by this process (tests and benchmarks)."""
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


class NoSnapshotStore:
    """Akka's NoSnapshotStore: loads find nothing, saves and deletes fail naming the missing setting."""

    def load(self, persistence_id: str, criteria: SnapshotSelectionCriteria) -> None:
        return None

    def save(self, metadata: SnapshotMetadata, snapshot: Any) -> SnapshotMetadata:
        raise SnapshotStoreNotConfigured()

    def delete(self, metadata: SnapshotMetadata) -> None:
        raise SnapshotStoreNotConfigured()

    def delete_matching(self, persistence_id: str, criteria: SnapshotSelectionCriteria) -> None:
        raise SnapshotStoreNotConfigured()


NO_SNAPSHOT_STORE = NoSnapshotStore()

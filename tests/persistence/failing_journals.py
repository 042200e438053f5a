"""Memory journals whose first write of a chosen event fails, once per process (a full disk, a lost connection),
and SQLite journals that reject chosen events (a journal that cannot store them), each under a URL scheme of its own:
for the tests of writes that fail or are rejected after a split or beside a snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from journal import JournalError, open_journal, open_snapshot_store, register_scheme
from journal.memory import MemoryJournal, MemorySnapshotStore


def register_failing_first_write(scheme: str, keys: Callable[[object], Iterable[str]], per_journal: bool = False) -> None:
    """Register `scheme`: a memory journal failing the first write of each key `keys(stored payload)` names (once per
    process, or with `per_journal` once per journal name: a key that is not unique to a test, e.g. a delivery id)."""
    failed: set[tuple[str, str]] = set()  # (per process: the host's)

    class FailingFirstWrite(MemoryJournal):
        def __init__(self, name: str) -> None:
            super().__init__(name)
            self._scope = name if per_journal else ""

        def write_messages(self, messages):  # type: ignore[no-untyped-def]
            for aw in messages:
                for r in aw.payload:
                    for key in keys(r.payload):
                        if (self._scope, key) not in failed:
                            failed.add((self._scope, key))
                            raise JournalError(f"simulated write failure: {key}")
            return super().write_messages(messages)

    register_scheme(scheme, journal=lambda url: FailingFirstWrite(url.partition("://")[2]),
                    snapshot_store=lambda url: MemorySnapshotStore(url.partition("://")[2]))


class _RejectingJournal:
    """A SQLite journal rejecting (storing nothing of, as for an event it cannot serialize) every AtomicWrite that holds
    a payload `rejects` is true of; the other writes of the call are stored."""

    def __init__(self, path: str, rejects: Callable[[object], bool]) -> None:
        self._inner = open_journal(f"sqlite://{path}")
        self._rejects = rejects

    def write_messages(self, messages):  # type: ignore[no-untyped-def]
        results: list[BaseException | None] = [
            JournalError(f"simulated rejection of {type(r.payload).__name__}") if self._rejects(r.payload) else None
            for aw in messages for r in aw.payload[:1]]
        stored = iter(self._inner.write_messages([aw for aw, r in zip(messages, results, strict=True) if r is None]))
        return [r if r is not None else next(stored) for r in results]

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


def register_rejecting_writes(scheme: str, rejects: Callable[[object], bool]) -> None:
    """Register `scheme:///path.db`: a SQLite journal rejecting every write whose first payload `rejects` is true of,
    every time (its snapshot store is SQLite at path.db.snapshots)."""
    register_scheme(scheme, journal=lambda url: _RejectingJournal(url.partition("://")[2], rejects),
                    snapshot_store=lambda url: open_snapshot_store(f"sqlite://{url.partition('://')[2]}.snapshots"))

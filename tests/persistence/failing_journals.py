"""Memory journals whose first write of a chosen event fails, once per process (a full disk, a lost connection),
each under a URL scheme of its own: for the tests of writes that fail after a split or beside a snapshot."""

from __future__ import annotations

from collections.abc import Callable, Iterable

from journal import JournalError, register_scheme
from journal.memory import MemoryJournal, MemorySnapshotStore


def register_failing_first_write(scheme: str, keys: Callable[[object], Iterable[str]]) -> None:
    """Register `scheme`: a memory journal failing the first write of each key `keys(stored payload)` names."""
    failed: set[str] = set()  # (per process: the host's)

    class FailingFirstWrite(MemoryJournal):
        def write_messages(self, messages):  # type: ignore[no-untyped-def]
            for aw in messages:
                for r in aw.payload:
                    for key in keys(r.payload):
                        if key not in failed:
                            failed.add(key)
                            raise JournalError(f"simulated write failure: {key}")
            return super().write_messages(messages)

    register_scheme(scheme, journal=lambda url: FailingFirstWrite(url.partition("://")[2]),
                    snapshot_store=lambda url: MemorySnapshotStore(url.partition("://")[2]))

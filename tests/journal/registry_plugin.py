"""A third-party backend, registered once by scheme with `journal.register_scheme` (imported by the tests).

relay:///abs/path.db serves the SQLite journal and snapshot store at /abs/path.db; `opened` counts the
URLs this process opened through it, so a test can tell the plugin (not a fallback) did the work.
"""

from __future__ import annotations

from journal import Journal, SnapshotStore, open_journal, open_snapshot_store, register_scheme

SCHEME = "relay"
opened: list[str] = []


def _as_sqlite(url: str) -> str:
    opened.append(url)
    return "sqlite://" + url.partition("://")[2]


def relay_journal(url: str) -> Journal:
    """The SQLite journal behind a relay:// URL."""
    return open_journal(_as_sqlite(url))


def relay_snapshot_store(url: str) -> SnapshotStore:
    """The SQLite snapshot store behind a relay:// URL."""
    return open_snapshot_store(_as_sqlite(url))


register_scheme(SCHEME, journal=relay_journal, snapshot_store=relay_snapshot_store)

"""`open_journal(url)` and `open_snapshot_store(url)`: pick a backend by URL scheme."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import parse_qsl

from journal.api import Journal, SnapshotStore

__all__ = ["open_journal", "open_snapshot_store", "parse_url", "SCHEMES"]

SCHEMES = ("sqlite", "memory", "postgresql")


@dataclass(frozen=True, slots=True)
class ParsedUrl:
    """A journal URL split into scheme, backend target (path, name or conninfo) and options."""

    scheme: str
    target: str
    options: dict[str, str]


def parse_url(url: str) -> ParsedUrl:
    """Split `url`; raise ValueError naming the supported schemes for anything else."""
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in SCHEMES and scheme != "postgres":
        raise ValueError(f"unsupported journal URL {url!r}: use one of "
                         f"{', '.join(s + '://' for s in SCHEMES)} "
                         f"(e.g. sqlite:///abs/path.db, sqlite://relative.db, memory://name, "
                         f"postgresql://user@host:port/db)")
    if scheme == "postgres":
        scheme = "postgresql"
    if scheme == "postgresql":
        return ParsedUrl(scheme, url, {})  # the postgres backend separates its own options
    target, _, query = rest.partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    if scheme == "sqlite" and not target:
        raise ValueError(f"sqlite journal URL {url!r} names no file: use sqlite:///abs/path.db or sqlite://rel.db")
    return ParsedUrl(scheme, target, options)


def open_journal(url: str) -> Journal:
    """Open the journal at `url` (sqlite://, memory://, postgresql://)."""
    p = parse_url(url)
    if p.scheme == "sqlite":
        from journal.sqlite import SqliteJournal
        return SqliteJournal(p.target, **p.options)
    if p.scheme == "memory":
        from journal.memory import MemoryJournal
        _no_options(url, p.options)
        return MemoryJournal(p.target)
    from journal.postgres import PostgresJournal
    return PostgresJournal(p.target)


def open_snapshot_store(url: str) -> SnapshotStore:
    """Open the snapshot store at `url`; it may be the journal's own URL."""
    p = parse_url(url)
    if p.scheme == "sqlite":
        from journal.sqlite import SqliteSnapshotStore
        return SqliteSnapshotStore(p.target, **p.options)
    if p.scheme == "memory":
        from journal.memory import MemorySnapshotStore
        _no_options(url, p.options)
        return MemorySnapshotStore(p.target)
    from journal.postgres import PostgresSnapshotStore
    return PostgresSnapshotStore(p.target)


def _no_options(url: str, options: dict[str, str]) -> None:
    if options:
        raise ValueError(f"{url!r}: memory journals take no options, got {sorted(options)}")

"""`open_journal(url)` and `open_snapshot_store(url)`: pick a backend by URL scheme."""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import parse_qsl

from journal.api import Journal, SnapshotStore

__all__ = ["open_journal", "open_snapshot_store", "parse_url", "redact_url", "SCHEMES"]

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
        raise ValueError(f"unsupported journal URL {redact_url(url)!r}: use one of "
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


# The user-info part of scheme://user:password@host: everything up to the last "@" before the path.
_USERINFO = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*):(?P<secret>[^/?#]*)@")
# password=... in a URL query or a libpq keyword string (host=x password=y).
_PASSWORD_PARAM = re.compile(r"(?i)(?P<key>\bpassword\s*=\s*)(?P<value>'(?:[^'\\]|\\.)*'|[^&\s#]*)")
REDACTED = "***"


def redact_url(url: str | None) -> str | None:
    """`url` with any password replaced by *** (postgresql://user:***@host/db, ?password=***), for display."""
    if not url or not isinstance(url, str):
        return url
    if not url.startswith(("sqlite:", "memory:")):  # their "user:x@" would be part of a file or store name
        url = _USERINFO.sub(lambda m: f"{m['head']}:{REDACTED}@", url, count=1)
    return _PASSWORD_PARAM.sub(lambda m: m["key"] + REDACTED, url)


# scheme -> (module, journal class, snapshot store class); imported on use so that e.g. psycopg is only
# needed by those who open a postgresql:// URL.
_BACKENDS = {
    "sqlite": ("journal.sqlite", "SqliteJournal", "SqliteSnapshotStore"),
    "memory": ("journal.memory", "MemoryJournal", "MemorySnapshotStore"),
    "postgresql": ("journal.postgres", "PostgresJournal", "PostgresSnapshotStore"),
}


def _open(url: str, kind: int) -> Any:
    p = parse_url(url)
    if p.scheme == "memory" and p.options:
        raise ValueError(f"{url!r}: memory journals take no options, got {sorted(p.options)}")
    module, *classes = _BACKENDS[p.scheme]
    return getattr(importlib.import_module(module), classes[kind])(p.target, **p.options)


def open_journal(url: str) -> Journal:
    """Open the journal at `url` (sqlite://, memory://, postgresql://)."""
    return cast(Journal, _open(url, 0))


def open_snapshot_store(url: str) -> SnapshotStore:
    """Open the snapshot store at `url`; it may be the journal's own URL."""
    return cast(SnapshotStore, _open(url, 1))

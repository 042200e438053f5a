"""`open_journal(url)` and `open_snapshot_store(url)`: open the backend registered for the URL's scheme."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from urllib.parse import parse_qsl

from journal.api import Journal, SnapshotStore
from journal.errors import InvalidUrl
from journal.registry import BUILTIN_SCHEMES, Backend, backend_for, registered_schemes, supported

__all__ = ["file_path_fix", "missing_journal", "open_journal", "open_snapshot_store", "parse_url", "redact_url", "SCHEMES"]

SCHEMES = ("sqlite", "memory", "postgresql")
"""The schemes of the shipped backends (postgres:// is accepted as postgresql://); see `registered_schemes()`."""

_EXAMPLES = "e.g. sqlite:///abs/path.db, sqlite://relative.db, memory://name, postgresql://user@host:port/db"
# A value that starts like a URL ("sqlite:/x.db", "user:pw@host") or names a server ("user@host:5432/db"): not
# taken for a file path.
_NOT_A_PATH = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*:|@")


@dataclass(frozen=True, slots=True)
class ParsedUrl:
    """A journal URL split into scheme, backend target (path, name or conninfo) and options."""

    scheme: str
    target: str
    options: dict[str, str]


def file_path_fix(value: object, what: str = "journal") -> str | None:
    """For a bare file path given where a `what` URL belongs (`bank.db`): the fix naming its sqlite:// URL; else None.

    A relative path stays relative: sqlite://relative.db means the same file wherever a path would.
    """
    if not isinstance(value, str) or not value.strip() or "://" in value or _NOT_A_PATH.search(value):
        return None
    path = os.path.expanduser(value)
    where = "that file"
    if os.path.isdir(path):
        path, where = os.path.join(path, f"{what.replace(' ', '-')}.db"), "a file in that directory"
    url = f"sqlite://{path}"
    shown = url if url.isprintable() else repr(url)  # (no control character reaches a terminal raw)
    return (f"for a SQLite {what} in {where} give {shown} ({what} URLs look like sqlite://relative.db, "
            "sqlite:///abs/path.db or postgresql://user@host:port/db)")


def parse_url(url: str) -> ParsedUrl:
    """Split `url`; raise InvalidUrl (a ValueError) naming the registered schemes for anything else.

    A registered (plugin) scheme's target is the whole URL: its factories parse their own URLs.
    """
    scheme, sep, rest = url.partition("://") if isinstance(url, str) else ("", "", "")
    fix = file_path_fix(url)
    if fix is not None:  # (`journal="bank.db"`: every entry point names the URL it likely means)
        raise InvalidUrl(f"{url!r} is a file path, not a journal URL", fix)
    if not sep or scheme not in registered_schemes():
        raise InvalidUrl(f"unsupported journal URL {redact_url(url)!r}", f"use one of {supported()} ({_EXAMPLES}; "
                         "other schemes: journal.register_scheme)")
    if scheme == "postgres":
        scheme = "postgresql"
    if scheme not in BUILTIN_SCHEMES or scheme == "postgresql":
        return ParsedUrl(scheme, url, {})  # the backend separates its own options
    target, _, query = rest.partition("?")
    options = dict(parse_qsl(query, keep_blank_values=True))
    if scheme == "sqlite" and not target:
        raise InvalidUrl(f"sqlite journal URL {url!r} names no file", "use sqlite:///abs/path.db or sqlite://rel.db")
    if scheme == "sqlite" and target == ":memory:":
        # (it became a file named ":memory:" in the working directory)
        raise InvalidUrl(f"{url!r}: a journal in SQLite's memory would be one connection's", "use memory://NAME for "
                         "a journal in this process's memory, or sqlite:///abs/path.db")
    if scheme == "sqlite":
        # Its options are checked with the URL (start, spawn, topology files), not once a host opens it: a
        # misspelt one started a system whose every persistent host then failed to start.
        from journal.sqlite import _options

        _options(**options)
    if scheme == "sqlite" and os.path.isdir(target):
        # (SQLite said only "unable to open database file", and the reading commands "no journal file")
        raise InvalidUrl(f"{redact_url(url)!r} names the directory {target!r}, not a file", "name the journal file "
                         f"in it, e.g. sqlite:///{os.path.join(os.path.abspath(target), 'journal.db').lstrip('/')}")
    return ParsedUrl(scheme, target, options)


# The user-info part of scheme://user:password@host: everything up to the last "@". (Up to the last "@" before the
# path, a password with an unencoded "/", "?" or "#" was shown whole, or from there on: over-redacting a URL with
# an "@" in its query is the lesser harm.)
_USERINFO = re.compile(r"^(?P<head>[A-Za-z][A-Za-z0-9+.-]*://[^:/?#@]*):(?P<secret>.*)@", re.DOTALL)
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


def _backend(url: str, kind: str) -> Backend:
    parse_url(url)  # refuses malformed URLs and unregistered schemes, naming the registered ones
    backend = backend_for(url.partition("://")[0])
    if getattr(backend, kind) is None:
        what = kind.replace("_", " ")
        raise InvalidUrl(f"{redact_url(url)!r}: scheme {backend.scheme!r} serves no {what} (it was registered "
                         f"without {kind}=); {what}s are served by {supported(kind)}")
    return backend


def open_journal(url: str) -> Journal:
    """Open the journal at `url` with the backend registered for its scheme (sqlite://, memory://, ...)."""
    factory = _backend(url, "journal").journal
    assert factory is not None  # _backend checked it
    return factory(url)


def open_snapshot_store(url: str) -> SnapshotStore:
    """Open the snapshot store at `url`; it may be the journal's own URL."""
    factory = _backend(url, "snapshot_store").snapshot_store
    assert factory is not None  # _backend checked it
    return factory(url)


def missing_journal(url: str) -> str | None:
    """Why `url` names no existing journal, or None; for readers, since opening one creates it.

    A misspelt SQLite path or PostgreSQL `?schema=` would otherwise read as an empty journal (and leave an
    empty one behind). Registered (plugin) and memory:// journals are taken as existing.
    """
    parsed = parse_url(url)
    if parsed.scheme == "sqlite" and not os.path.isfile(parsed.target):
        return f"there is no journal file {parsed.target!r}"
    if parsed.scheme == "postgresql":
        from journal.postgres import missing_schema  # (imports psycopg: only for PostgreSQL URLs)

        return missing_schema(url)
    return None

"""The one registry of journal / snapshot-store backends, by URL scheme.

Everything that opens a store by URL asks this registry: `open_journal`, `open_snapshot_store`,
`verify`, the `reprise journal` and `status` commands, config validation in actors and persistence's
stores. The built-in schemes (sqlite, memory, postgresql and its alias postgres) are registered here
like any plugin, so a scheme registered once is usable everywhere.

    from journal import register_scheme
    register_scheme("mystore", journal=lambda url: MyJournal(url), snapshot_store=lambda url: MyStore(url))
"""

from __future__ import annotations

import importlib
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from journal.errors import InvalidUrl

if TYPE_CHECKING:
    from journal.api import Journal, SnapshotStore

__all__ = ["Backend", "backend_for", "register_scheme", "registered_schemes", "unregister_scheme"]

JournalFactory = Callable[[str], "Journal"]
"""Opens the journal at a URL of its scheme; it is given the whole URL (scheme://...)."""
SnapshotStoreFactory = Callable[[str], "SnapshotStore"]
"""Opens the snapshot store at a URL of its scheme; it is given the whole URL (scheme://...)."""

BUILTIN_SCHEMES = ("sqlite", "memory", "postgresql", "postgres")
"""Schemes served by the backends shipped in journal/ (postgres is an alias of postgresql)."""

# RFC 3986's scheme syntax: a letter, then letters, digits, "+", "-" or ".".
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")


@dataclass(frozen=True, slots=True)
class Backend:
    """What serves one scheme: a journal factory and/or a snapshot-store factory (None: not served)."""

    scheme: str
    journal: JournalFactory | None = None
    snapshot_store: SnapshotStoreFactory | None = None


_backends: dict[str, Backend] = {}
_lock = threading.Lock()


def register_scheme(scheme: str, journal: JournalFactory | None = None,
                    snapshot_store: SnapshotStoreFactory | None = None) -> None:
    """Serve `scheme://...` URLs with these factories (third-party backends, test doubles).

    A factory left None keeps what the scheme had (so a plugin may replace only sqlite's journal).
    """
    if not isinstance(scheme, str) or not _SCHEME.fullmatch(scheme):
        raise InvalidUrl(f"register_scheme: scheme must be a name such as 'mystore' (a letter, then letters, digits, "
                         f"'+', '-' or '.'; no '://'), got {scheme!r}")
    for what, factory in (("journal", journal), ("snapshot_store", snapshot_store)):
        if factory is not None and not callable(factory):
            raise TypeError(f"register_scheme({scheme!r}): {what}= must be a callable taking the URL and returning "
                            f"the opened store, got {factory!r}")
    if journal is None and snapshot_store is None:
        raise TypeError(f"register_scheme({scheme!r}) needs journal= and/or snapshot_store=: callables that take a "
                        f"{scheme}:// URL and return the opened Journal / SnapshotStore")
    with _lock:
        old = _backends.get(scheme, Backend(scheme))
        _backends[scheme] = Backend(scheme, journal or old.journal, snapshot_store or old.snapshot_store)


def unregister_scheme(scheme: str) -> None:
    """Forget a registered scheme; a built-in scheme gets its shipped backend back (tests)."""
    with _lock:
        _backends.pop(scheme, None)
        if scheme in BUILTIN_SCHEMES:
            _backends[scheme] = _builtin(scheme)


def registered_schemes() -> tuple[str, ...]:
    """Every scheme served now: the built-in ones first, then the registered ones alphabetically."""
    with _lock:
        names = set(_backends)
    return tuple(s for s in BUILTIN_SCHEMES if s in names) + tuple(sorted(names.difference(BUILTIN_SCHEMES)))


def supported(kind: str | None = None) -> str:
    """The registered schemes as 'sqlite://, memory://, ...' (only those serving `kind`, if given)."""
    schemes = registered_schemes()
    if kind is not None:
        schemes = tuple(s for s in schemes if getattr(_backends.get(s), kind, None) is not None)
    return ", ".join(s + "://" for s in schemes)


def backend_for(scheme: str) -> Backend:
    """The backend registered for `scheme`; InvalidUrl listing the registered schemes if there is none."""
    backend = _backends.get(scheme)
    if backend is None:
        raise InvalidUrl(f"no backend is registered for scheme {scheme!r}: registered are {supported()} "
                         "(register others with journal.register_scheme)")
    return backend


# ---- the built-in backends, imported on use so that e.g. psycopg is only needed for postgresql:// -------

_MODULES = {
    "sqlite": ("journal.sqlite", "SqliteJournal", "SqliteSnapshotStore"),
    "memory": ("journal.memory", "MemoryJournal", "MemorySnapshotStore"),
    "postgresql": ("journal.postgres", "PostgresJournal", "PostgresSnapshotStore"),
    "postgres": ("journal.postgres", "PostgresJournal", "PostgresSnapshotStore"),
}


def _opener(module: str, cls: str) -> Callable[[str], Any]:
    def open_url(url: str) -> Any:
        from journal.urls import parse_url

        p = parse_url(url)
        if p.scheme == "memory" and p.options:
            raise InvalidUrl(f"{url!r}: memory journals take no options, got {sorted(p.options)}")
        return getattr(importlib.import_module(module), cls)(p.target, **p.options)

    open_url.__qualname__ = f"open_{cls}"
    return open_url


def _builtin(scheme: str) -> Backend:
    module, journal_cls, store_cls = _MODULES[scheme]
    return Backend(scheme, _opener(module, journal_cls), _opener(module, store_cls))


for _scheme in BUILTIN_SCHEMES:
    register_scheme(_scheme, _builtin(_scheme).journal, _builtin(_scheme).snapshot_store)

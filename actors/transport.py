"""Batched transport: routes paths to Thespian addresses and coalesces entries per destination."""

from __future__ import annotations

import dataclasses
import logging
import operator
import pickle
from collections.abc import Callable
from itertools import repeat
from typing import cast

from .errors import UnpicklableMessage
from .main_module import adopt_main_classes
from .messages import Batch, Scatter, ShardSet
from .paths import ancestors, shard_key, shard_of
from .pickling import dumps
from .thespian_fixes import note_client
from .thespian_types import Address

log = logging.getLogger("reprise.transport")

Entry = tuple[str | None, str, object]  # (sender path | None, target path, message)

_PLAIN_TYPES = {str, int, float, bool, bytes, type(None), tuple, list, dict, frozenset, set}
_checked_types: set[type] = set()


def check_message(message: object) -> None:
    """Raise UnpicklableMessage unless `message` can cross a process boundary (checked once per type)."""
    cls = type(message)
    if cls in _checked_types or cls in _PLAIN_TYPES:
        return
    if cls.__module__ == "__main__" and adopt_main_classes() is None:
        raise UnpicklableMessage(
            f"message type {cls.__qualname__} is defined in __main__, which other processes cannot import; "
            "move it into an importable module, or run your script as a file (`python script.py`)"
        )
    if dataclasses.is_dataclass(cls) and not cls.__dataclass_params__.frozen:  # type: ignore[attr-defined]
        raise UnpicklableMessage(
            f"message type {cls.__qualname__} is a mutable dataclass; declare it @dataclass(frozen=True) "
            "so that senders and receivers cannot share mutable state"
        )
    try:
        dumps(message)  # (what pack will do with it)
    except Exception as exc:
        raise UnpicklableMessage(
            f"message of type {cls.__qualname__} cannot be pickled ({exc}); messages must be frozen "
            "dataclasses or plain data importable by module path"
        ) from exc
    _checked_types.add(cls)


def address_key(address: Address) -> str:
    """A hashable key for a Thespian address (ActorAddress is not hashable)."""
    return str(address)


SHARDED = "<sharded>"
"""The key of a route to several shards: (SHARDED, ((key, address) of shard 0, ...))."""

ShardRoutes = tuple[tuple[str, Address], ...]
"""The (key, address) of each shard of a sharded host, shard 0 first."""
Route = tuple[str, "Address | ShardRoutes"]
"""(address key, address), or (SHARDED, ShardRoutes)."""


def _shard_routes(route: Route) -> ShardRoutes:
    """The shards of a route whose key is SHARDED (a str key cannot narrow the union for mypy)."""
    return cast(ShardRoutes, route[1])


def _route(address: Address | ShardSet) -> Route:
    if isinstance(address, ShardSet):
        return SHARDED, tuple((address_key(a), a) for a in address.addresses)
    return address_key(address), address


def route_keys(route: Route) -> tuple[str, ...]:
    """The address keys behind a route (one per shard for a sharded one)."""
    return tuple(k for k, _ in _shard_routes(route)) if route[0] is SHARDED else (route[0],)


_UNCACHED = object()
_TEMP_CACHED = 4096  # clients' reply paths a router remembers before it starts over
_MISSING_CACHED = 4096  # paths no route serves a router remembers before it starts over


class Router:
    """Maps paths to Thespian addresses by longest prefix, with a per-path cache."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.epoch = -1
        self._cache: dict[str, tuple[str, Address] | None] = {}
        self._temp: dict[str, tuple[str, Address] | None] = {}  # clients' reply paths (see resolve)
        self._missing: list[str] = []  # the paths cached as served by no route (see resolve)

    def replace(self, routes: dict[str, Address | ShardSet], epoch: int) -> None:
        """Install the directory's routes (prefix -> address or ShardSet) if newer than what we have."""
        if epoch < self.epoch:
            return
        self.epoch = epoch
        self.routes = {prefix: _route(a) for prefix, a in routes.items()}
        self._clear()

    def learn(self, prefix: str, address: Address) -> tuple[Route | None, Route] | None:
        """Remember how to reach `prefix` (a sender's origin) without waiting for the directory; the route it
        had and the one it has now if that changed, else None."""
        key = address_key(address)
        current = self.routes.get(prefix)
        if current is None or current[0] != key:
            route = self.routes[prefix] = (key, address)
            self._clear()
            return current, route
        return None

    def forget(self, prefix: str) -> None:
        """Drop the route for `prefix`."""
        if self.routes.pop(prefix, None) is not None:
            self._clear()

    def _clear(self) -> None:
        """Forget every cached resolution (the routes changed)."""
        self._cache.clear()
        self._temp.clear()
        self._missing.clear()

    def locate(self, path: str) -> str | None:
        """The name of the host serving `path` by the directory (its prefix, or prefix and shard), or None."""
        for prefix in ancestors(path):
            hit = self.routes.get(prefix)
            if hit is not None:
                if hit[0] is SHARDED:
                    shards = len(_shard_routes(hit))
                    return shard_key(prefix, shard_of(path, prefix, shards), shards)
                return prefix
        return None

    def resolve(self, path: str) -> tuple[str, Address] | None:
        """The (key, address) serving `path`, or None when no prefix of it is routed."""
        try:
            return self._cache[path]
        except KeyError:
            pass
        temp = path.startswith("/temp/")
        if temp:
            found = self._temp.get(path, _UNCACHED)
            if found is not _UNCACHED:
                return cast("tuple[str, Address] | None", found)
        hit: tuple[str, Address] | None = None
        for prefix in ancestors(path):
            route = self.routes.get(prefix)
            if route is not None:
                if route[0] is SHARDED:
                    shards = _shard_routes(route)
                    hit = shards[shard_of(path, prefix, len(shards))]
                else:
                    hit = cast("tuple[str, Address]", route)
                break
        if temp:
            # A client's reply paths (/temp/<client>/<name>): one per ask, looked up once. In the cache, every host
            # answering asks kept ~120 bytes per ask until it was full (500,000 paths), then lost the routes worth
            # keeping with them. Here a few thousand at most: a probe's path, replied to often, stays cached mostly.
            if len(self._temp) >= _TEMP_CACHED:
                self._temp.clear()
            self._temp[path] = hit
            if hit is not None:
                note_client(hit[1])  # (a client's endpoint: this process's exit does not wait for its ACK, fix 14)
            return hit
        cache = self._cache
        if len(cache) > 500_000:
            cache.clear()
            self._missing.clear()
        if hit is None:
            # A path no route serves (a misspelt one, one per request id): every process sent to it (the guardian
            # and each host) kept ~111 bytes per path until 500,000 paths were cached (~55 MB), then lost the
            # routes worth keeping with them. A few thousand at most now: they stay in the cache (a known path's
            # look-up and a cached unknown one's cost what they did), listed apart to be dropped without a scan.
            missing = self._missing
            if len(missing) >= _MISSING_CACHED:
                for p in missing:
                    del cache[p]
                missing.clear()
            missing.append(path)
        cache[path] = hit
        return hit


def pack(origin: str, entries: list[Entry], on_bad: Callable[[Entry, str], None]) -> Batch | None:
    """Pickle `entries` into a Batch; entries that cannot be pickled go to `on_bad` instead."""
    try:
        return Batch(origin, dumps(entries), entries=len(entries))
    except Exception:
        good = []
        for entry in entries:
            try:
                dumps(entry)
            except Exception as exc:
                on_bad(entry, f"cannot be pickled: {exc}")
            else:
                good.append(entry)
        return Batch(origin, dumps(good), entries=len(good)) if good else None


def unpack(batch: Batch, on_bad: Callable[[Entry, str], None], expand: bool = True) -> list[Entry]:
    """The entries of a Batch, with every Scatter expanded into the messages it carries (unless not `expand`:
    an entity table's host takes a Scatter's columns in bulk).

    An entry this process cannot unpickle (its message class is not importable here) goes to `on_bad`
    as (sender, target, description) with the reason, and the others are still returned, in order.
    """
    try:
        entries: list[Entry] = pickle.loads(batch.payload)
    except Exception as exc:
        # The fast path is one loads per batch; only a failing batch pays for finding the culprits.
        entries = _salvage(batch.origin, batch.payload, exc, on_bad)
    for payload in batch.more:
        try:
            entries += pickle.loads(payload)
        except Exception as exc:
            entries += _salvage(batch.origin, payload, exc, on_bad)
    if not expand:
        return entries
    # (the messages looked at in C: a call per message less than a loop here)
    if any(map(isinstance, map(_message_of, entries), repeat(Scatter))):
        return _expand(entries)
    return entries


_message_of = operator.itemgetter(2)


class _Unresolved:
    """Stands in for a class the receiving process cannot import, so the rest of a batch can be read."""

    _reprise_missing = ""  # "module.Class: why", set on each stand-in subclass

    def __init__(self, *args: object, **kwargs: object) -> None:
        pass

    def __setstate__(self, state: object) -> None:
        pass


class _LenientUnpickler(pickle.Unpickler):
    """Unpickles with a stand-in (an _Unresolved subclass) for every class that cannot be imported."""

    def find_class(self, module: str, name: str) -> object:  # a class, or a function pickled by name
        try:
            return super().find_class(module, name)
        except Exception as exc:
            return type(name, (_Unresolved,), {"_reprise_missing": f"{module}.{name} ({exc})"})


def _missing_in(obj: object, depth: int = 0) -> str | None:
    """The first stand-in class found in `obj` (walking containers and object attributes), if any."""
    if isinstance(obj, type):
        return obj._reprise_missing if issubclass(obj, _Unresolved) else None
    if isinstance(obj, _Unresolved):
        return type(obj)._reprise_missing
    if depth > 20 or isinstance(obj, (str, bytes, int, float, bool, type(None))):
        return None
    children: list[object]
    if isinstance(obj, dict):
        children = [*obj.keys(), *obj.values()]
    elif isinstance(obj, (tuple, list, set, frozenset)):
        children = list(obj)
    else:
        children = list(getattr(obj, "__dict__", {}).values())
        children += [getattr(obj, slot, None) for slot in getattr(type(obj), "__slots__", ())]
    for child in children:
        found = _missing_in(child, depth + 1)
        if found:
            return found
    return None


def _salvage(origin: str, payload: bytes, error: Exception, on_bad: Callable[[Entry, str], None]) -> list[Entry]:
    """The entries of a batch's payload whose strict unpickling failed; the unreadable ones go to `on_bad`."""
    import io

    try:
        entries = _LenientUnpickler(io.BytesIO(payload)).load()
    except Exception as exc:
        on_bad((None, f"<batch from {origin}>", None),
               f"a batch from {origin} could not be unpickled here and was discarded whole ({exc!r})")
        return []
    good, bad = [], 0
    for sender, target, message in entries:
        missing = _missing_in(message)
        if missing is None:
            good.append((sender, target, message))
        else:
            what = f"<{type(message).__qualname__} message that could not be unpickled here>"
            bad += 1
            on_bad((sender, target, what), f"cannot be unpickled by the receiving process: {missing}; make "
                   "the module importable there (installed, or on its PYTHONPATH)")
    if not bad:
        log.warning("a batch from %s failed to unpickle (%r) but every entry could be read leniently",
                    origin, error)
    return good


def _expand(entries: list[Entry]) -> list[Entry]:
    out: list[Entry] = []
    for sender, target, message in entries:
        if isinstance(message, Scatter):
            out.extend([(sender, t, m) for t, m in message.items()])
        else:
            out.append((sender, target, message))
    return out


class Outbox:
    """Entries waiting to go out, one list per destination address, flushed as one Batch each."""

    def __init__(self, origin: str, send: Callable[[Address, Batch], None], on_bad: Callable[[Entry, str], None],
                 cap: int = 2000) -> None:
        self.origin = origin
        self.cap = cap
        self._send = send
        self._on_bad = on_bad
        self._pending: dict[str, tuple[Address, list[Entry]]] = {}

    def add(self, key: str, address: Address, entry: Entry) -> None:
        """Queue `entry` for `address`; a full list goes out at once (the size cap)."""
        slot = self._pending.get(key)
        if slot is None:
            slot = self._pending[key] = (address, [])
        slot[1].append(entry)
        if len(slot[1]) >= self.cap:
            del self._pending[key]
            self._emit(slot[0], slot[1])

    def flush(self) -> None:
        """Send everything queued, one Batch per destination, in the order entries were added."""
        while self._pending:
            pending, self._pending = self._pending, {}
            for address, entries in pending.values():
                self._emit(address, entries)

    def __bool__(self) -> bool:
        return bool(self._pending)

    def _emit(self, address: Address, entries: list[Entry]) -> None:
        batch = pack(self.origin, entries, self._on_bad)
        if batch is not None:
            self._send(address, batch)

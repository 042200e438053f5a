"""`dumps`: the pickle of a batch's entries, byte for byte what `pickle.dumps` writes, with less CPU per object.

Messages are mostly frozen dataclasses. For each such object `pickle.dumps` falls back to
`object.__reduce_ex__`, which looks up `__getnewargs_ex__`, `__getnewargs__`, `__getstate__` and the slot
names in C for every object: about a third of the pickle of a FeedTable's follow-up (0.93 -> 0.61 µs a message,
bench/PROFILE.md §26). A class whose instances reduce the default way gets a reducer of its own here,
returning what that fallback returns, `(copyreg.__newobj__, (cls,), state)`, so the bytes (and what any
receiver unpickles) do not change; every other class keeps its own reduction.
"""

from __future__ import annotations

import copyreg
import io
import pickle
from collections.abc import Callable
from typing import Any

PROTOCOL = pickle.HIGHEST_PROTOCOL

_newobj = copyreg.__newobj__  # type: ignore[attr-defined]  # (not in typeshed's copyreg)
_object_getstate = getattr(object, "__getstate__", None)  # (Python 3.11+)


def _reduce_plain(obj: Any) -> tuple[Any, ...]:
    """What object.__reduce_ex__(2+) returns for an instance of a plain class: its non-empty __dict__, or None."""
    return _newobj, (type(obj),), obj.__dict__ or None


def _reduce_own(obj: Any) -> Any:
    """The class's own reduction, as pickle itself would ask for it."""
    return obj.__reduce_ex__(PROTOCOL)


def plain(cls: type) -> bool:
    """Whether instances of `cls` pickle by object.__reduce_ex__'s default: __dict__ state, no arguments to __new__."""
    return (
        not issubclass(cls, (type, list, dict, tuple, BaseException))  # (list/dict items; tuple args; exc args)
        and cls.__reduce_ex__ is object.__reduce_ex__
        and cls.__reduce__ is object.__reduce__
        and getattr(cls, "__getstate__", None) is _object_getstate
        and not hasattr(cls, "__getnewargs_ex__")
        and not hasattr(cls, "__getnewargs__")
        and "__dict__" in dir(cls)
        and not copyreg._slotnames(cls)  # type: ignore[attr-defined]  # (slots: the state is a pair)
    )


class _Reducers(dict):  # type: ignore[type-arg]
    """copyreg's dispatch table, completed on first sight of each class (pickle looks it up by type)."""

    def __missing__(self, cls: type) -> Callable[[Any], Any]:
        own = copyreg.dispatch_table.get(cls)
        if own is not None:
            reducer: Callable[[Any], Any] = own
        elif issubclass(cls, type):
            raise KeyError(cls)  # classes themselves: pickle saves them by name (rare in messages: not cached)
        else:
            reducer = _reduce_plain if plain(cls) else _reduce_own
        self[cls] = reducer
        return reducer


_reducers = _Reducers()
_copyreg_seen = dict(copyreg.dispatch_table)


def dumps(obj: object) -> bytes:
    """pickle.dumps(obj, PROTOCOL), the same bytes, faster for objects of plain classes."""
    global _copyreg_seen
    if copyreg.dispatch_table != _copyreg_seen:  # a reducer was registered, replaced or removed since
        _reducers.clear()
        _copyreg_seen = dict(copyreg.dispatch_table)
    buffer = io.BytesIO()
    pickler = pickle.Pickler(buffer, PROTOCOL)
    pickler.dispatch_table = _reducers
    pickler.dump(obj)
    return buffer.getvalue()

"""msgpack serialization of payloads and snapshots; registered frozen dataclasses, tuples and sets.

What round-trips exactly: None, bool, int (64-bit), float, str, bytes, list, dict (any msgpack-able keys),
tuple, set, frozenset, and frozen dataclasses registered with `register_type` (nested ones too).
Tuples come back as tuples (not lists) so registered types compare equal after a round trip.
Anything else (including subclasses of the built-in types, e.g. an IntEnum) is refused with a
`SerializationError` naming the type: pickle is never used. The one exception: msgpack writes a bytearray
or memoryview as bytes, which it is read back as (tests/journal/test_serialization.py).

Two formats, told apart by their bytes, are read; only the flat one is written:

* format 2 (flat, written since issue 16): one msgpack value packed by one Packer call. A tuple is the
  array `[T, *items]`, a set `[S, *items]`, a frozenset `[F, *items]`, a registered dataclass
  `[O, manifest, version, *field values]`, where T, S, F, O are empty msgpack ext values of type 2, 3, 4, 1
  (an empty ext is a marker no other value packs to). Decoding turns marked arrays back with a list hook.
* format 1 (nested, written before): a registered dataclass is the ext type 1 holding
  `[manifest, version, *field values]` packed on its own, a tuple/set/frozenset the ext type 2/3/4 holding
  the packed list of its items. Its ext values are never empty, which is how `deserialize` tells them apart.

Reading an older version of a registered dataclass runs the upcasters registered for its manifest, one
version step at a time (both formats). msgpack's own ExtType values are not supported payloads.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import itertools
import logging
import operator
import re
import threading
import types
import zlib
from collections.abc import Callable, Iterable, Sequence
from typing import Any, TypeVar, overload

import msgpack
from msgpack import ExtType

from journal.errors import JournalCorruption, SerializationError
from journal.main_module import importable_name

log = logging.getLogger("reprise.journal")

__all__ = [
    "register_type",
    "register_upcaster",
    "unregister_type",
    "serialize",
    "deserialize",
    "manifest_of",
    "is_registered",
    "check_storable",
]

_EXT_OBJECT = 1
_EXT_TUPLE = 2
_EXT_SET = 3
_EXT_FROZENSET = 4

T = TypeVar("T")


@dataclasses.dataclass(frozen=True, slots=True)
class _Registration:
    cls: type
    manifest: str
    version: int
    field_names: tuple[str, ...]
    # What a record packs for the field values: the values themselves, or (pack_values_with) the same with
    # nested tuples/objects already as format 2's marked arrays (the same bytes, fewer calls into _default).
    values: Callable[[object], Sequence[object]]
    make: Callable[[list[Any]], object]  # the object from its field values: cls(*values), only faster
    make_marked: Callable[[list[Any]], Any]  # ... from a format 2 marked array [O, manifest, version, *values]
    make_record: Callable[[list[Any]], Any]  # ... from a format 2 record [2, writer, ..., manifest, version, *values]
    # A type of one field stored as itself: that field's getter (run_encoded takes a column's values in C).
    only_field: Callable[[object], object] | None = None


_by_class: dict[type, _Registration] = {}
_by_manifest: dict[str, _Registration] = {}
_upcasters: dict[tuple[str, int], Callable[[list[Any]], list[Any]]] = {}
_registry_lock = threading.Lock()


def _values_getter(names: tuple[str, ...]) -> Callable[[object], tuple[object, ...]]:
    # attrgetter of several names returns a tuple in one C call; of one name, a bare value.
    if not names:
        return lambda obj: ()
    if len(names) == 1:
        get = operator.attrgetter(names[0])
        return lambda obj: (get(obj),)
    return operator.attrgetter(*names)


def _sets_fields_only(cls: type, names: tuple[str, ...]) -> bool:
    """True when cls(*values) only sets each field: the __init__ generated for a frozen dataclass."""
    init = cls.__init__  # type: ignore[misc]  # (this class's own __init__, inspected below)
    try:
        params = list(inspect.signature(init).parameters.values())[1:]
    except (TypeError, ValueError):
        return False
    return (getattr(getattr(init, "__code__", None), "co_filename", None) == "<string>"  # dataclasses' exec
            and cls.__dataclass_params__.init  # type: ignore[attr-defined]
            and not hasattr(cls, "__post_init__")
            and all(f.init for f in dataclasses.fields(cls))  # __init__ also sets init=False fields
            and [(p.name, p.kind) for p in params] == [(n, inspect.Parameter.POSITIONAL_OR_KEYWORD) for n in names]
            and cls.__new__ is object.__new__  # type: ignore[comparison-overlap]
            and type(cls).__call__ is type.__call__
            and cls.__getattribute__ is object.__getattribute__)  # type: ignore[comparison-overlap]


def _constructor(cls: type, names: tuple[str, ...]) -> Callable[[Sequence[Any]], Any]:
    """How stored field values build a `cls`: cls(*values), or by keyword where its __init__ takes a field only so
    (kw_only); TypeError now for a class that cannot be built from its fields alone (an InitVar or another
    __init__ parameter without a default: stored events of it could never be read back)."""
    try:
        params = list(inspect.signature(cls).parameters.values())
    except (TypeError, ValueError):
        return lambda values: cls(*values)
    needed = [p.name for p in params if p.name not in names and p.default is inspect.Parameter.empty
              and p.kind not in (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)]
    if needed:
        raise TypeError(f"register_type: {cls.__qualname__}() needs {', '.join(needed)}, which is not a field "
                        "(an InitVar, or a parameter of its own __init__): the journal stores the fields only, so it "
                        "could not build the events back; give it a default, or make it a field")
    positional = (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    if [p.name for p in params[:len(names)] if p.kind in positional] == list(names):
        return lambda values: cls(*values)
    return lambda values: cls(**dict(zip(names, values, strict=False)))  # (fewer values: the defaults)


def _maker(cls: type, names: tuple[str, ...], manifest_at: int | None = None,
           version: int = 1) -> Callable[[list[Any]], Any]:
    """cls(*values); for a plain frozen dataclass the same object built without its __init__.

    That __init__ sets each field with object.__setattr__ and was the largest part of decoding; filling
    the instance's __dict__ in field order gives an equal object (with the same key-sharing dict), and
    a slotted one's slots are set by their descriptors directly. With `manifest_at`, the values are the
    tail of a stored array `[..., manifest, version, *fields]` whose manifest is at that index: the
    object is built from the fields after it, and a version other than the registered one is upcast.
    """
    at = 0 if manifest_at is None else manifest_at + 2  # where the field values start
    construct = _constructor(cls, names)

    def call(values: Sequence[Any]) -> Any:
        try:
            return construct(values)
        except Exception as e:  # (the class changed since the values were stored, or its __post_init__ failed)
            raise SerializationError(
                f"cannot build {cls.__qualname__} from its {len(values)} stored field values: {e!r}; if the class "
                f"changed since they were written (fields {', '.join(names)} now), register it with a higher "
                "version and an upcaster (journal.register_upcaster)") from e

    namespace: dict[str, Any] = {"cls": cls, "new": object.__new__, "call": call,
                                 "build": lambda v: build(v[at - 2], v[at - 1], v[at:])}
    if manifest_at is None:
        check, fallback = f"len(values) != {len(names)}", "call(values)"
    else:
        check, fallback = f"len(values) != {at + len(names)} or values[{at - 1}] != {version}", "build(values)"
    plain = _sets_fields_only(cls, names)
    slots = [inspect.getattr_static(cls, name, None) for name in names]  # slots=True: the fields' descriptors
    in_slots = [type(d) is types.MemberDescriptorType for d in slots]
    if plain and cls.__dictoffset__ != 0 and not any(in_slots):
        body = "    obj = new(cls)\n    d = obj.__dict__\n" + "".join(
            f"    d[{name!r}] = values[{at + i}]\n" for i, name in enumerate(names))
    elif plain and all(in_slots):
        namespace.update({f"set{i}": d.__set__ for i, d in enumerate(slots)})
        body = "    obj = new(cls)\n" + "".join(f"    set{i}(obj, values[{at + i}])\n" for i in range(len(names)))
    elif manifest_at is None:
        return call
    else:
        body = f"    obj = call(values[{at}:])\n"
    source = f"def make(values):\n    if {check}:\n        return {fallback}\n{body}    return obj\n"
    exec(source, namespace)  # noqa: S102  (field names are identifiers; as dataclasses does for __init__)
    make: Callable[[list[Any]], Any] = namespace["make"]
    return make


@overload
def register_type(cls: type[T], manifest: str | None = None, version: int = 1) -> type[T]: ...


@overload
def register_type(cls: None = None, manifest: str | None = None,
                  version: int = 1) -> Callable[[type[T]], type[T]]: ...


def register_type(cls: type[T] | None = None, manifest: str | None = None,
                  version: int = 1) -> type[T] | Callable[[type[T]], type[T]]:
    """Register a frozen dataclass for storage under `manifest` (default: module.qualname); usable as a decorator."""

    def register(klass: type[T]) -> type[T]:
        if not (isinstance(klass, type) and dataclasses.is_dataclass(klass)):
            raise TypeError(f"register_type needs a dataclass, got {klass!r}")
        if not klass.__dataclass_params__.frozen:  # type: ignore[attr-defined]
            raise TypeError(f"register_type needs a frozen dataclass: decorate {klass.__qualname__} "
                            f"with @dataclass(frozen=True)")
        if not isinstance(version, int) or version < 1:
            raise ValueError(f"version must be an int >= 1, got {version!r}")
        module, alias = klass.__module__, None
        if module == "__main__" and manifest is None:
            # Another process imports the script by its module name (actors.main_module), so the stored name
            # must be that one; "__main__.X" stays readable, as earlier versions stored it.
            module = importable_name() or module
            alias = f"__main__.{klass.__qualname__}" if module != "__main__" else None
        name = manifest or f"{module}.{klass.__qualname__}"
        names = tuple(f.name for f in dataclasses.fields(klass) if f.init)
        reg = _Registration(klass, name, version, names, _values_getter(names), _maker(klass, names),
                            _maker(klass, names, 1, version), _maker(klass, names, 6, version),
                            operator.attrgetter(names[0]) if len(names) == 1 else None)
        with _registry_lock:
            other = _by_manifest.get(name)
            if other is not None and other.cls is not klass and not _importable_copy(other.cls, klass, manifest):
                raise ValueError(f"manifest {name!r} is already registered for {other.cls.__qualname__}; "
                                 f"call unregister_type first to replace it")
            old = _by_class.get(klass)
            if old is not None and old.manifest != name:
                _by_manifest.pop(old.manifest, None)
            _by_class[klass] = reg
            _by_manifest[name] = reg
            if alias is not None and alias not in _by_manifest:
                _by_manifest[alias] = reg
        return klass

    if cls is None:
        return register
    return register(cls)


def _importable_copy(main_class: type, klass: type, manifest: str | None) -> bool:
    """True if `klass` is the importable module's copy of a class of the script run as `__main__` (a script that
    imports itself, as `python -m bench.entities` does): both are stored under one name, and the copy, which the
    other processes use, is built when reading; the script's own class still writes."""
    return (manifest is None and main_class.__module__ == "__main__" and klass.__module__ != "__main__"
            and main_class.__qualname__ == klass.__qualname__)


def unregister_type(cls_or_manifest: type | str) -> None:
    """Forget a registration (by class or manifest), e.g. to register a newer class under the same manifest."""
    with _registry_lock:
        if isinstance(cls_or_manifest, str):
            reg = _by_manifest.pop(cls_or_manifest, None)
            if reg is not None:
                _by_class.pop(reg.cls, None)
        else:
            reg = _by_class.pop(cls_or_manifest, None)
        if reg is not None:
            for name in [name for name, other in _by_manifest.items() if other is reg]:  # (and its alias)
                del _by_manifest[name]
            STORABLE_TYPES.discard(reg.cls)


def register_upcaster(manifest: str, from_version: int, fn: Callable[[list[Any]], list[Any]]) -> None:
    """Register `fn` turning the field values of `manifest` at `from_version` into those of `from_version + 1`."""
    with _registry_lock:
        _upcasters[(manifest, from_version)] = fn


def is_registered(cls: type) -> bool:
    """True if `cls` is registered (register_type): its instances are stored under its manifest."""
    return cls in _by_class


STORABLE_TYPES: set[type] = {int, str, bytes, float, bool, type(None)}
"""Types whose every value `check_storable` lets through uncoded: scalars, and the registered classes found storable
(a registered class's fields are checked once, by its first instance; a container is checked every time)."""


def check_storable(value: object) -> None:
    """Raise SerializationError if the journal could not store `value`; cheap for a registered class seen before."""
    t = type(value)
    if t in STORABLE_TYPES:
        return
    serialize(value)
    if t in _by_class:
        STORABLE_TYPES.add(t)


def manifest_of(cls: type) -> str:
    """The manifest a registered class is stored under."""
    reg = _by_class.get(cls)
    if reg is None:
        raise KeyError(f"{cls.__qualname__} is not registered")
    return reg.manifest


def _unserializable(obj: object) -> SerializationError:
    t = type(obj)
    name = f"{t.__module__}.{t.__qualname__}"
    if dataclasses.is_dataclass(obj):
        how = (f"register it with journal.register_type({t.__name__}) "
               f"(or decorate the frozen dataclass with @register_type)")
    else:
        how = ("store primitives, bytes, lists, dicts, tuples, sets, or a frozen dataclass registered "
               "with journal.register_type(cls)")
    return SerializationError(f"cannot serialize an object of type {name}: {how}")


FORMAT_FLAT = 2
"""The format `serialize` and the journal's records are written in (see the module docstring); 1 is the nested one."""


class _Marker:
    """What an empty ext value decodes to: the first item of a marked array (a tuple, set, frozenset, object)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"<{self.name} marker>"


_OBJECT, _TUPLE, _SET, _FROZENSET = (_Marker(n) for n in ("object", "tuple", "set", "frozenset"))
_MARKERS: dict[int, _Marker] = {_EXT_OBJECT: _OBJECT, _EXT_TUPLE: _TUPLE, _EXT_SET: _SET,
                                _EXT_FROZENSET: _FROZENSET}
# The encoder's side of the markers, packed natively by msgpack (no hook): ExtType(code, b"").
_OBJECT_EXT, _TUPLE_EXT, _SET_EXT, _FROZENSET_EXT = (
    tuple.__new__(ExtType, (code, b"")) for code in (_EXT_OBJECT, _EXT_TUPLE, _EXT_SET, _EXT_FROZENSET))


def _default(obj: Any) -> list[Any]:  # Any: `type(obj) is tuple` (not isinstance) does not narrow
    """msgpack's hook for what it does not pack itself: the marked array standing for `obj` (format 2).

    The array is packed by the same Packer call, so a record is one call however deep its objects nest.
    """
    t = type(obj)
    if t is tuple:
        return [_TUPLE_EXT, *obj]
    reg = _by_class.get(t)
    if reg is not None:
        return [_OBJECT_EXT, reg.manifest, reg.version, *reg.values(obj)]
    if t is frozenset:
        return [_FROZENSET_EXT, *obj]
    if t is set:
        return [_SET_EXT, *obj]
    if t is int:
        raise SerializationError(f"cannot serialize the int {obj}: outside msgpack's 64-bit range")
    raise _unserializable(obj)


def new_packer() -> Callable[[Any], bytes]:
    """A Packer's pack writing format 2; not thread-safe (one per thread), reusable after an error."""
    # Reused rather than msgpack.packb per call: a new Packer's 256 KiB buffer comes from the OS and goes back
    # (brk) on every call, which cost several times the packing itself for small records.
    pack: Callable[[Any], bytes] = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    return pack


def _upcast(manifest: str, version: int, target: int, values: list[Any]) -> list[Any]:
    while version < target:
        fn = _upcasters.get((manifest, version))
        if fn is None:
            raise SerializationError(
                f"stored {manifest!r} is version {version} but the registered class is version {target} "
                f"and no upcaster is registered: call journal.register_upcaster({manifest!r}, {version}, fn)")
        try:
            upcast = fn(values)
        except Exception as e:
            raise SerializationError(f"the upcaster of {manifest!r} from version {version} to {version + 1} "
                                     f"failed on {values!r}: {e!r}") from e
        if not isinstance(upcast, list | tuple):  # (a dict would pass list() as its keys)
            raise SerializationError(f"the upcaster of {manifest!r} from version {version} returned "
                                     f"{type(upcast).__name__}, not a list: it must return the field values of "
                                     f"version {version + 1}, in order")
        values = list(upcast)
        version += 1
    return values


def flatten(obj: object) -> tuple[str, int, tuple[object, ...]] | None:
    """(manifest, version, field values) of a registered object, None for anything else."""
    reg = _by_class.get(type(obj))
    if reg is None:
        return None
    return reg.manifest, reg.version, tuple(getattr(obj, name) for name in reg.field_names)


TUPLE_MARK = _TUPLE_EXT
"""The first item of a tuple's marked array, `[TUPLE_MARK, *items]` (for pack_values_with functions)."""


def marked(value: Any) -> Any:
    """`value` as format 2 packs it, one level deep: a tuple or registered object as its marked array (its
    items as they are), anything else unchanged. For pack_values_with functions."""
    t = type(value)
    if t is tuple:
        return [_TUPLE_EXT, *value]
    reg = _by_class.get(t)
    if reg is not None:
        only = reg.only_field  # (a one-field object's value by its getter, in C: no call of a Python lambda)
        if only is not None:
            return [_OBJECT_EXT, reg.manifest, reg.version, only(value)]
        return [_OBJECT_EXT, reg.manifest, reg.version, *reg.values(value)]
    return value


def pack_values_with(cls: type, values: Callable[[Any], Sequence[object]]) -> None:
    """Have records pack the field values of registered `cls` as `values(obj)` returns them: its fields in
    order, where a tuple or object may already be its marked array (see `marked`), so that msgpack packs them
    without calling back into Python. The bytes must be those packing the plain values gives (tested); for
    the journal's hottest payloads (IdempotentReceiver's AppliedBatch)."""
    with _registry_lock:
        reg = _by_class.get(cls)
        if reg is None:
            raise KeyError(f"{cls.__qualname__} is not registered: register_type it before pack_values_with")
        _replace(reg, dataclasses.replace(reg, values=values, only_field=None))


def store_values_with(cls: type, pack: Callable[[Any], Sequence[object]],
                      unpack: Callable[[list[Any]], list[Any]]) -> None:
    """Store registered `cls` in a form of its own: `pack(obj)` gives the stored values (packed as any values
    are) and `unpack(stored)` the field values back. Unlike pack_values_with this changes the stored bytes, so
    it comes with a new version of `cls`, and an upcaster from the previous version that returns the stored
    form (unpack then runs on it as on anything stored). For TableCommit: columns packed as runs."""
    with _registry_lock:
        reg = _by_class.get(cls)
        if reg is None:
            raise KeyError(f"{cls.__qualname__} is not registered: register_type it before store_values_with")
        make, version = reg.make, reg.version

        def make_stored(stored: list[Any]) -> Any:
            return make(unpack(stored))

        def make_marked(items: list[Any]) -> Any:  # [O, manifest, version, *stored]
            if items[2] != version:
                return build(items[1], items[2], items[3:])
            return make(unpack(items[3:]))

        def make_record(fields: list[Any]) -> Any:  # [2, writer, ..., manifest at 6, version at 7, *stored]
            if fields[7] != version:
                return build(fields[6], fields[7], fields[8:])
            return make(unpack(fields[8:]))

        _replace(reg, dataclasses.replace(reg, values=pack, make=make_stored, make_marked=make_marked,
                                          make_record=make_record, only_field=None))


def _replace(old: _Registration, new: _Registration) -> None:
    """Put `new` wherever `old` is registered (its class, its manifest and an alias); the caller holds the lock."""
    _by_class[old.cls] = new
    for name in [name for name, reg in _by_manifest.items() if reg is old]:
        _by_manifest[name] = new


def run_encoded(values: Sequence[Any]) -> list[Any]:
    """`values` (a column of one commit: mostly runs of objects of one registered type) as runs:
    `[manifest, version, count, width, *the width fields of each]` for registered objects,
    `[None, 0, count, 1, *values]` for anything else: a manifest is stored once per run, not once per value.
    `run_decoded` reverses it."""
    out: list[Any] = []
    n = len(values)
    i = 0
    by_class = _by_class
    one_type = n > 0 and len(set(map(type, values))) == 1  # (the usual column: one run, found in C)
    while i < n:
        t = type(values[i])
        if one_type:
            j = n
        else:
            j = i + 1
            while j < n and type(values[j]) is t:
                j += 1
        reg = None if t is tuple else by_class.get(t)
        if reg is None:
            out += (None, 0, j - i, 1)
            out += values[i:j]
        else:
            out += (reg.manifest, reg.version, j - i, len(reg.field_names))
            only = reg.only_field
            if only is not None:
                out += map(only, values[i:j])
            else:
                out += itertools.chain.from_iterable(map(reg.values, values[i:j]))
        i = j
    return out


def run_decoded(runs: list[Any]) -> tuple[Any, ...]:
    """The values `run_encoded` stored, in order (those of an older version of their type upcast)."""
    out: list[Any] = []
    i, n = 0, len(runs)
    while i < n:
        manifest, version, count, width = runs[i:i + 4]
        i += 4
        end = i + count * width
        if manifest is None:
            out += runs[i:end]
        else:
            reg = _by_manifest.get(manifest) or _import_for(manifest)
            if reg is not None and version == reg.version:
                make = reg.make
            else:  # (build raises for an unknown manifest, and upcasts an older version)
                def make(fields: list[Any], m: str = manifest, v: int = version) -> Any:
                    return build(m, v, fields)
            if width == 1:
                out += map(make, ([v] for v in runs[i:end]))
            else:
                out += (make(runs[k:k + width]) for k in range(i, end, width))
        i = end
    return tuple(out)


def repeats_encoded(values: Iterable[Any]) -> list[Any]:
    """`values` as [value, count, value, count, ...], one pair per run of equal values of one type (a commit's
    origins or receivers: mostly one path repeated). `repeats_decoded` reverses it."""
    if type(values) is not list and type(values) is not tuple:
        values = list(values)
    if values and values.count(values[0]) == len(values) and len(set(map(type, values))) == 1:
        return [values[0], len(values)]  # (the usual column: one value repeated, found in C)
    out: list[Any] = []
    last: Any = None
    count = 0
    for value in values:
        if count and value == last and type(value) is type(last):  # (True == 1, but a run keeps one type)
            count += 1
        else:
            if count:
                out += (last, count)
            last, count = value, 1
    if count:
        out += (last, count)
    return out


def repeats_decoded(runs: list[Any]) -> tuple[Any, ...]:
    """The values `repeats_encoded` stored, in order."""
    out: list[Any] = []
    for k in range(0, len(runs), 2):
        out += [runs[k]] * runs[k + 1]
    return tuple(out)


_DELTAS, _PLAIN = 0, 1  # how `ints_encoded` stored its ints: the first item of the array
_DELTA_SAFE = 1 << 63


def ints_encoded(ints: Sequence[int]) -> list[int]:
    """Ids as [0, first, difference from the one before, ...] (mostly 1: a byte each) when they are all in
    [0, 2**63) (so that each difference fits in 64 bits), else [1, *ints]. `ints_decoded` reverses it."""
    if ints and 0 <= min(ints) and max(ints) < _DELTA_SAFE:
        return [_DELTAS, *map(operator.sub, ints, (0, *ints[:-1]))]
    return [_PLAIN, *ints]


def ints_decoded(stored: list[int]) -> tuple[int, ...]:
    """The ints `ints_encoded` stored."""
    if stored[0] == _DELTAS:
        return tuple(itertools.accumulate(stored[1:]))
    if stored[0] == _PLAIN:
        return tuple(stored[1:])
    raise SerializationError(f"unknown form {stored[0]!r} of stored ints (0: differences, 1: plain)")


_DOTTED = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)+")
_imported_for: set[str] = set()
# Reprise's own manifests that name no importable module, and the module (a layer above, imported by name as a
# user's module is) that registers them: without it a reader that never imported persistence (`reprise journal
# verify` of a DurableDelivery sender's journal) took every one of them for an unknown class.
_NAMESPACE_MODULES = {"reprise.persistence.": "persistence"}


def _import_for(manifest: str) -> _Registration | None:
    """The registration of a default-form manifest ("module.QualName") after importing its module, once.

    A process that replays events (a restarted bridge, a projection, `reprise journal show`) may never have
    imported the module that registers their type, which the process that wrote them had. Only a module that
    is importable here is imported, and only what it registers is used: no class is built from stored data.
    """
    if manifest in _imported_for or not _DOTTED.fullmatch(manifest):
        return _by_manifest.get(manifest)
    _imported_for.add(manifest)
    for prefix, module in _NAMESPACE_MODULES.items():
        if manifest.startswith(prefix):
            try:
                importlib.import_module(module)
            except ImportError:
                return None
            return _by_manifest.get(manifest)
    parts = manifest.split(".")
    for end in range(len(parts) - 1, 0, -1):  # "a.b.C" -> a.b; "a.b.Outer.Inner" -> a.b.Outer, then a.b
        try:
            importlib.import_module(".".join(parts[:end]))
        except ImportError:
            continue
        except Exception as e:  # the module exists but fails to import: that is worth seeing
            log.warning("importing %s for stored type %r failed: %r", ".".join(parts[:end]), manifest, e)
            return None
        break
    return _by_manifest.get(manifest)


def build(manifest: str, version: int, fields: list[Any]) -> Any:
    """The registered object for stored field values, upcast from `version` when it is older."""
    reg = _by_manifest.get(manifest) or _import_for(manifest)
    if reg is None:
        raise SerializationError(
            f"unknown manifest {manifest!r}: no class is registered for it "
            f"(register it with journal.register_type(cls, manifest={manifest!r}))", unknown_manifest=manifest)
    if version != reg.version:
        if version > reg.version:
            raise SerializationError(f"stored {manifest!r} is version {version}, newer than the "
                                     f"registered class {reg.cls.__qualname__} (version {reg.version})")
        fields = _upcast(manifest, version, reg.version, fields)
        if len(fields) > len(reg.field_names):
            raise SerializationError(f"the upcasters of {manifest!r} from version {version} returned "
                                     f"{len(fields)} values for the {len(reg.field_names)} fields of version "
                                     f"{reg.version} ({', '.join(reg.field_names)})")
    return reg.make(fields)


_unpackb = msgpack.unpackb


def list_hook(items: list[Any]) -> Any:
    """msgpack's list_hook for format 2: a marked array becomes its tuple, set, frozenset or object."""
    if items:
        kind = items[0]
        if kind is _TUPLE:
            del items[0]  # (cheaper than a slice for the few items of a tuple)
            return tuple(items)
        if kind is _OBJECT:
            reg = _by_manifest.get(items[1])
            if reg is not None:
                return reg.make_marked(items)  # (which upcasts an older version)
            return build(items[1], items[2], items[3:])
        if kind is _FROZENSET:
            del items[0]
            return frozenset(items)
        if kind is _SET:
            del items[0]
            return set(items)
    return items


flat_ext_hook = _MARKERS.get
"""msgpack's ext_hook for format 2 (a C call: the marker of an ext type code)."""


def ext_hook(code: int, data: bytes) -> Any:
    """msgpack's ext_hook for format 1: registered objects, tuples and sets packed inside ext values."""
    items = _unpackb(data, ext_hook=ext_hook, strict_map_key=False)
    if code == _EXT_OBJECT:
        reg = _by_manifest.get(items[0])
        if reg is not None and items[1] == reg.version:  # the usual case of build(), without the call
            return reg.make(items[2:])
        return build(items[0], items[1], items[2:])
    if code == _EXT_TUPLE:
        return tuple(items)
    if code == _EXT_FROZENSET:
        return frozenset(items)
    if code == _EXT_SET:
        return set(items)
    raise SerializationError(f"unknown msgpack extension type {code}")


def _either_ext_hook(code: int, data: bytes) -> Any:
    """ext_hook for a value of either format: format 2's markers are the only empty ext values."""
    if data:
        return ext_hook(code, data)
    marker = _MARKERS.get(code)
    if marker is None:
        raise SerializationError(f"unknown msgpack extension type {code}")
    return marker


class _ThreadPacker(threading.local):
    def __init__(self) -> None:
        self.pack = new_packer()


_packer = _ThreadPacker()


def thread_packer() -> Callable[[Any], bytes]:
    """This thread's format 2 pack (Packer.pack is neither thread-safe nor reentrant)."""
    return _packer.pack


def serialize(obj: object) -> bytes:
    """Encode `obj` with msgpack (format 2); raise SerializationError naming the type that cannot be stored."""
    try:
        return _packer.pack(obj)
    except SerializationError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise SerializationError(f"cannot serialize {type(obj).__qualname__}: {e}") from e


def deserialize(data: bytes) -> Any:
    """Decode bytes written by `serialize`, today's or format 1's; unknown manifests raise SerializationError."""
    try:
        return _unpackb(data, ext_hook=_either_ext_hook, list_hook=list_hook, strict_map_key=False)
    except SerializationError:
        raise
    except (ValueError, TypeError, msgpack.UnpackException) as e:
        raise SerializationError(f"cannot deserialize: {e}") from e


# --- stored records -------------------------------------------------------------------------------------

_crc32 = zlib.crc32


_seeds: dict[str, int] = {}
_SEEDS_KEPT = 1 << 16  # ids whose seed is cached (a host's entities); then the cache starts over


def key_seed(persistence_id: str) -> int:
    """The per-persistence-id part of a record checksum: crc32 of the id, cached (it is needed per write)."""
    seed = _seeds.get(persistence_id)
    if seed is None:
        if len(_seeds) >= _SEEDS_KEPT:
            _seeds.clear()  # (a dict's operations are atomic: another thread at worst computes a seed again)
        seed = _seeds[persistence_id] = _crc32(persistence_id.encode())
    return seed


SEED_STEP = 0x9E3779B1
HIGH_SEED_STEP = 0x85EBCA6B
"""The sequence nr's part of a checksum seed: `seq * SEED_STEP + (seq >> 32) * HIGH_SEED_STEP` (mod 2**32). The
first term alone repeats every 2**32 sequence nrs, so a stored sequence nr with one of its bits 32-62 flipped
passed the check (the event was replayed under the wrong number); the second term, 0 below 2**32, keeps every
record written before it valid (a record of a sequence nr from 2**32 on written before fails it). Both steps are odd,
so two sequence nrs one bit apart never share a seed, and a different seed always changes a crc32."""


def checksum(seed: int, sequence_nr: int, data: bytes) -> int:
    """crc32 of the stored bytes, seeded by the record's key so a record moved to another key fails too."""
    return _crc32(data, (seed + sequence_nr * SEED_STEP + (sequence_nr >> 32) * HIGH_SEED_STEP) & 0xFFFFFFFF)


def corruption(persistence_id: str, sequence_nr: int, what: str = "event", also: str = "") -> JournalCorruption:
    """The error for a stored record whose checksum does not match its bytes (`also`: " or timestamp")."""
    return JournalCorruption(
        f"corrupted {what}: persistence id {persistence_id!r}, sequence nr {sequence_nr} "
        f"(stored checksum does not match the stored bytes{also})", persistence_id, sequence_nr)

"""The journal as a Spark data source: `spark.read.format("reprise-journal")` and `spark.readStream`.

    import spark_bridge
    spark_bridge.register(spark)
    df = (spark.read.format("reprise-journal").option("url", "postgresql://u@h/db")
          .option("tag", "account").option("imports", "bank.events").load())

Columns: offset (the global offset), persistence_id, sequence_nr, timestamp (ms since the epoch), tags
(sorted) and event: the event as JSON (see `event_json`). Options:

- url (required): the journal, `sqlite:///abs/path.db` or `postgresql://...` (any registered scheme but
  memory://, which lives in one process while Spark reads in its executors' processes).
- tag: only the events carrying this tag.
- persistence_id: only this id's events; partitions are ranges of its sequence numbers.
  Without either, every event of every id. A tag's or all events' partitions are ranges of the global offset.
- partitions (default 4): how many ranges a read is split into, read in parallel; each partition opens
  the journal itself in its executor.
- imports: comma-separated modules the executors import before decoding, so that the types they
  register (journal.register_type) are known there; an unregistered type fails the task, naming it.
- gap_timeout: seconds a read on PostgreSQL waits on a write still in flight (journal.Journal.gap_timeout).

A schema given by the user (`.schema("offset long, persistence_id string, event struct<amount:int>")`)
picks columns (any of the six, in any order) and may make `event` a struct: each event is then decoded
to it, struct fields by name from the event's dataclass fields or dict keys, recursively (arrays from
lists, tuples and sets, maps from dicts). An event lacking a field, or a value of another type, fails
the task with JournalSourceError naming the field, the types and the event.

A batch read is a snapshot: every event with an offset (or, for one id, a sequence number) up to the
newest stored when the read is planned. A streaming read (`readStream`) of a tag or of all events has
the global offset as its Spark offset, and one of a persistence id its sequence number: each micro-batch
reads the range (start, end], so a query restarted from its checkpoint neither loses nor repeats an
event. On PostgreSQL, where writers commit out of offset order, the read of (start, end] waits on writes
still in flight below `end` (Journal.events_between), so an event that commits late with a smaller
offset is not skipped (unless its transaction outlasts gap_timeout). Every partition is a closed range
read the same way by any attempt: a retried or speculative task yields the same rows.
"""

from __future__ import annotations

import base64
import dataclasses
import datetime
import importlib
import json
import os
import struct
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import islice
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructType,
    TimestampType,
)

from journal import EventEnvelope, Journal, RepriseError, SerializationError, missing_journal, open_journal
from journal.serialization import manifest_of
from journal.urls import parse_url, redact_url

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["SCHEMA", "SOURCE_NAME", "JournalDataSource", "JournalSourceError", "SourceOptions", "event_json",
           "event_struct", "parse_options"]

SOURCE_NAME = "reprise-journal"
SCHEMA = ("offset long, persistence_id string, sequence_nr long, timestamp long, tags array<string>, "
          "event string")
DEFAULT_PARTITIONS = 4
_OPTIONS = ("url", "tag", "persistence_id", "partitions", "imports", "gap_timeout")
TYPE_KEY = "@type"
"""The key naming a registered dataclass's manifest in its JSON object (no field can be called that)."""

Row = tuple[Any, ...]


class JournalSourceError(RepriseError, ValueError):
    """A reprise-journal read was given a bad option, or read an event it could not decode."""


@dataclass(frozen=True)
class SourceOptions:
    """The checked options of one read."""

    url: str
    tag: str | None = None
    persistence_id: str | None = None
    partitions: int = DEFAULT_PARTITIONS
    imports: tuple[str, ...] = ()
    gap_timeout: float | None = None


def parse_options(options: Mapping[str, str]) -> SourceOptions:
    """Check a read's options; raise JournalSourceError naming the option and how to fix it."""
    # A misspelt option (persistenceId, tags) would otherwise be ignored and the read give every event.
    unknown = sorted(k for k in options if k.lower() not in _OPTIONS)
    if unknown:
        hint = ' (this source reads no path: give the journal as .option("url", ...))' if "path" in unknown else ""
        raise JournalSourceError(f"{SOURCE_NAME}: unknown option {unknown[0]!r}{hint}; the options are "
                                 f"{', '.join(_OPTIONS)}")
    url = options.get("url")
    if not url:
        raise JournalSourceError(f'{SOURCE_NAME}: option "url" is required, e.g. '
                                 f'.option("url", "sqlite:///abs/journal.db") or "postgresql://user@host/db"')
    try:
        parsed = parse_url(url)
    except ValueError as e:
        raise JournalSourceError(f'{SOURCE_NAME}: option "url": {e}') from e
    if parsed.scheme == "memory":
        raise JournalSourceError(f'{SOURCE_NAME}: option "url" {redact_url(url)!r}: a memory:// journal lives in '
                                 f'one process and Spark reads in its executors: use sqlite:// or postgresql://')
    # An empty value is refused, not taken as the option left out: .option("tag", name) with name "" would read
    # every event of every id (the journal's own queries refuse an empty tag too).
    for name in ("tag", "persistence_id", "gap_timeout"):
        if name in options and not options[name]:
            raise JournalSourceError(f'{SOURCE_NAME}: option "{name}" must not be empty (leave it out to read '
                                     f'{"every event" if name in ("tag", "persistence_id") else "without it"})')
    tag, pid = options.get("tag") or None, options.get("persistence_id") or None
    if tag is not None and pid is not None:
        raise JournalSourceError(f'{SOURCE_NAME}: options "tag" and "persistence_id" exclude each other: '
                                 f'give one (or neither, for every event)')
    raw = options.get("partitions", str(DEFAULT_PARTITIONS))
    try:
        partitions = int(raw)
    except ValueError:
        partitions = 0
    if partitions < 1:
        raise JournalSourceError(f'{SOURCE_NAME}: option "partitions" must be an integer >= 1, got {raw!r}')
    imports = tuple(m.strip() for m in options.get("imports", "").split(",") if m.strip())
    gap_timeout = None
    if options.get("gap_timeout"):
        try:
            gap_timeout = float(options["gap_timeout"])
        except ValueError:
            gap_timeout = -1.0
        if not 0 < gap_timeout <= 86400:
            raise JournalSourceError(f'{SOURCE_NAME}: option "gap_timeout" must be seconds > 0 and <= 86400, '
                                     f'got {options["gap_timeout"]!r}')
    if parsed.scheme == "sqlite":
        url = _absolute_sqlite_url(url, parsed.target)
    return SourceOptions(url, tag, pid, partitions, imports, gap_timeout)


def _absolute_sqlite_url(url: str, target: str) -> str:
    """`url` with its file made absolute: the executors open it, maybe in another directory."""
    query = url.partition("://")[2].partition("?")[2]
    return f"sqlite://{os.path.abspath(target)}" + (f"?{query}" if query else "")


def _check_journal_file(options: SourceOptions) -> None:
    """JournalSourceError if the url names no existing journal (checked once the schema is, before any task runs).

    Opening a journal creates it: a misspelt SQLite path or PostgreSQL `?schema=` would read as an empty
    journal, and leave an empty one behind wherever an executor opened it.
    """
    why = missing_journal(options.url)
    if why is not None:
        hint = ("check the path (a relative one is taken from the directory Spark was started in)"
                if options.url.startswith("sqlite") else "check the ?schema= of the url (default: reprise)")
        raise JournalSourceError(f'{SOURCE_NAME}: option "url" {redact_url(options.url)!r}: {why}; {hint}')


# --- events as JSON -------------------------------------------------------------------------------


_SHAPES: dict[type, tuple[str, tuple[str, ...]]] = {}
"""A dataclass's manifest and field names: dataclasses.fields() per event was a third of a JSON read's time."""


def _shape(t: type) -> tuple[str, tuple[str, ...]]:
    shape = _SHAPES.get(t)
    if shape is None:
        try:
            manifest = manifest_of(t)
        except KeyError:
            manifest = f"{t.__module__}.{t.__qualname__}"
        shape = _SHAPES[t] = (manifest, tuple(f.name for f in dataclasses.fields(t)))
    return shape


class _KeyClash(Exception):
    """A dict whose keys give one JSON key text twice (1 and "1", True and "true")."""

    def __init__(self, mapping: dict[Any, Any]):
        seen: dict[str, Any] = {}
        for k in mapping:
            text = k if type(k) is str else json.dumps(_jsonable(k))
            if text in seen:
                break
            seen[text] = k
        super().__init__(f"keys {seen[text]!r} and {k!r} are both {json.dumps(text)} in JSON, so one of their "
                         "values would be lost")


def _jsonable(obj: Any) -> Any:
    """`obj` as JSON values: a registered dataclass becomes {"@type": manifest, field: value, ...}."""
    t = type(obj)
    if obj is None or t is bool or t is int or t is float or t is str:
        return obj
    if t in _SHAPES or (dataclasses.is_dataclass(obj) and not isinstance(obj, type)):
        manifest, names = _shape(t)
        out: dict[str, Any] = {TYPE_KEY: manifest}
        for name in names:
            value = getattr(obj, name)
            v = type(value)  # (a str or int field, the usual, without a call)
            out[name] = value if v is str or v is int or value is None else _jsonable(value)
        return out
    if t is list or t is tuple:
        return [_jsonable(x) for x in obj]
    if t is set or t is frozenset:
        items = [_jsonable(x) for x in obj]
        try:  # a set has no order: sorted, so that equal sets give equal JSON
            return sorted(items)
        except TypeError:
            return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))
    if t is dict:
        out = {k if type(k) is str else json.dumps(_jsonable(k)): _jsonable(v) for k, v in obj.items()}
        if len(out) < len(obj):  # two keys with one JSON text ({1: .., "1": ..}): one value would be lost
            raise _KeyClash(obj)
        return out
    if t is bytes:
        return base64.b64encode(obj).decode("ascii")
    return str(obj)  # (the journal stores nothing else; kept total for safety)


_ENCODER = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)  # (json.dumps builds one per call)


def _c_encode() -> Callable[[Any], str]:
    """_ENCODER.encode through one C encoder made once: `encode` makes one per call, half of an event's 1.8 µs.
    (No cycle check: _jsonable builds a fresh tree. Where the C encoder is missing or differs: `encode`.)"""
    def default(value: object) -> Any:
        raise TypeError(f"{type(value).__name__} is not JSON serializable")

    make = json.encoder.c_make_encoder  # type: ignore[attr-defined]  # (CPython's _json.make_encoder, or None)
    sample = {"a": [1, 2.5, None, True, False, "é\n\"", float("nan"), float("-inf")], "b": {"c": {}}, "d": []}
    try:
        encoder = make(None, default, json.encoder.encode_basestring, None, ":", ",", False, False, True)
        if "".join(encoder(sample, 0)) == _ENCODER.encode(sample):
            return lambda value: "".join(encoder(value, 0))
    except Exception:  # noqa: BLE001  (make is None, or its signature changed)
        pass
    return _ENCODER.encode


_encode = _c_encode()


def event_json(event: object) -> str:
    """The event column: JSON where a registered dataclass is an object of its fields plus "@type" (its
    manifest), tuples, sets and frozensets are arrays (sets sorted), bytes are base64 strings, and dict
    keys that are not strings are their JSON text (JournalSourceError if two keys of a dict give one text)."""
    try:
        return _encode(_jsonable(event))
    except _KeyClash as e:
        raise JournalSourceError(f"{SOURCE_NAME}: cannot give an event as JSON: {e}") from None


def _envelope_json(e: EventEnvelope) -> str:
    """event_json of an envelope's event; a failure names the event (id, sequence nr, offset)."""
    try:
        return _encode(_jsonable(e.event))
    except _KeyClash as clash:
        raise JournalSourceError(f"{SOURCE_NAME}: cannot give an event as JSON: {clash}; in the event of persistence "
                                 f"id {e.persistence_id!r}, sequence nr {e.sequence_nr} (offset {e.offset}). Read it "
                                 f"with a schema whose event struct has a map for that dict") from None


# --- events as structs (a schema given by the user) -----------------------------------------------


class _Mismatch(Exception):
    """An event value that does not fit the schema: `path` (dotted field names), what was wrong."""

    def __init__(self, path: str, problem: str):
        super().__init__(path, problem)
        self.path, self.problem = path, problem


_MISSING = object()
_FLOAT32 = struct.Struct("<f")
_INT_RANGES = {"tinyint": 2 ** 7, "smallint": 2 ** 15, "int": 2 ** 31, "bigint": 2 ** 63}


def _type_name(value: object) -> str:
    t = type(value)
    if dataclasses.is_dataclass(value):
        try:
            return manifest_of(t)
        except KeyError:
            pass
    return t.__name__


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _converter(dtype: DataType, path: str, nullable: bool) -> Callable[[Any], Any]:
    """A function turning a decoded event value into what Spark takes for `dtype`, raising _Mismatch."""
    convert = _non_null_converter(dtype, path)
    name = dtype.simpleString()

    def checked(value: Any) -> Any:
        if value is None:
            if nullable:
                return None
            raise _Mismatch(path, f"is None, and the schema's {name} is not nullable")
        return convert(value)
    return checked


def _non_null_converter(dtype: DataType, path: str) -> Callable[[Any], Any]:
    name = dtype.simpleString()

    def wrong(value: Any) -> _Mismatch:
        return _Mismatch(path, f"the schema says {name}, the event has {_type_name(value)} {_shown(value)}")

    if isinstance(dtype, (LongType, IntegerType, ShortType, ByteType)):
        bound = _INT_RANGES[name]

        def integer(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, int):
                raise wrong(value)
            if not -bound <= value < bound:
                raise _Mismatch(path, f"{value} does not fit the schema's {name}")
            return value
        return integer
    if isinstance(dtype, (DoubleType, FloatType)):
        single = isinstance(dtype, FloatType)

        def floating(value: Any) -> Any:
            if isinstance(value, bool) or not isinstance(value, (int, float)):
                raise wrong(value)
            value = float(value)
            if single:
                try:  # a finite value beyond float32's range would silently become an infinity
                    _FLOAT32.pack(value)
                except OverflowError:
                    raise _Mismatch(path, f"{value!r} does not fit the schema's {name}") from None
            return value
        return floating
    simple: dict[type[DataType], tuple[type, ...]] = {
        StringType: (str,), BooleanType: (bool,), BinaryType: (bytes,),
        TimestampType: (datetime.datetime,), DateType: (datetime.date,)}
    for kind, accepted in simple.items():
        if isinstance(dtype, kind):
            # A datetime is a date to isinstance: Spark would keep its day and drop its time without a word.
            refused = datetime.datetime if kind is DateType else type(None)

            def plain(value: Any, accepted: tuple[type, ...] = accepted, refused: type = refused) -> Any:
                if not isinstance(value, accepted) or isinstance(value, refused):
                    raise wrong(value)
                return value
            return plain
    if isinstance(dtype, ArrayType):
        element = _converter(dtype.elementType, path + "[]", dtype.containsNull)

        def array(value: Any) -> Any:
            if isinstance(value, (set, frozenset)):  # no order: sorted, as in event_json
                try:
                    value = sorted(value)
                except TypeError:
                    value = sorted(value, key=repr)
            elif not isinstance(value, (list, tuple)):
                raise wrong(value)
            return [element(v) for v in value]
        return array
    if isinstance(dtype, MapType):
        key = _converter(dtype.keyType, path + "{key}", False)
        item = _converter(dtype.valueType, path + "{}", dtype.valueContainsNull)

        def mapping(value: Any) -> Any:
            if not isinstance(value, dict):
                raise wrong(value)
            return {key(k): item(v) for k, v in value.items()}
        return mapping
    if isinstance(dtype, StructType):
        fields = [(f.name, _converter(f.dataType, f"{path}.{f.name}" if path else f.name, f.nullable))
                  for f in dtype.fields]

        def struct(value: Any) -> Any:
            get: Callable[[str, object], Any]
            if isinstance(value, dict):
                get = value.get
            elif dataclasses.is_dataclass(value) and not isinstance(value, type):
                def get(name: str, default: object) -> Any:
                    return getattr(value, name, default)
            else:
                raise wrong(value)
            out = []
            for field_name, convert in fields:
                v = get(field_name, _MISSING)
                if v is _MISSING:
                    where = f"{path}.{field_name}" if path else field_name
                    have = sorted(value) if isinstance(value, dict) else [f.name for f in dataclasses.fields(value)]
                    raise _Mismatch(where, f"{_type_name(value)} has no field {field_name!r} "
                                           f"(it has {', '.join(map(str, have)) or 'none'})")
                out.append(convert(v))
            return tuple(out)
        return struct
    raise JournalSourceError(f"{SOURCE_NAME}: the schema's event field {path or 'event'!r} is {name}: not "
                             f"supported (use long, int, double, string, boolean, binary, timestamp, date, "
                             f"array, map or struct)")


def event_struct(event: object, schema: StructType | str) -> tuple[Any, ...]:
    """The event as a value of the struct `schema` (the event column's type), as the source decodes it.

    A DDL string ("amount long, memo string") is parsed by Spark: it needs an active SparkSession.
    """
    struct = schema if isinstance(schema, StructType) else StructType.fromDDL(schema)
    try:
        value = _converter(struct, "", False)(event)
    except _Mismatch as m:
        raise JournalSourceError(_mismatch_message(m, event, None)) from None
    assert isinstance(value, tuple)
    return value


def _mismatch_message(m: _Mismatch, event: object, envelope: EventEnvelope | None) -> str:
    at = (f" (persistence id {envelope.persistence_id!r}, sequence nr {envelope.sequence_nr}, offset "
          f"{envelope.offset})" if envelope is not None else "")
    return (f"{SOURCE_NAME}: event field {m.path or 'event'!r}: {m.problem}; in an event of type "
            f"{_type_name(event)}{at}. Fix the event struct of the schema given to .schema(...), or read the "
            f"event as JSON (event string)")


# --- columns ---------------------------------------------------------------------------------------

_COLUMNS: dict[str, DataType] = {"offset": LongType(), "persistence_id": StringType(), "sequence_nr": LongType(),
                                "timestamp": LongType(), "tags": ArrayType(StringType()), "event": StringType()}


def _check_schema(schema: StructType) -> None:
    """Refuse a user schema naming an unknown column or giving a column another type (event: string or struct)."""
    if not schema.fields:
        raise JournalSourceError(f"{SOURCE_NAME}: the schema has no columns: give some of {', '.join(_COLUMNS)}")
    for f in schema.fields:
        expected = _COLUMNS.get(f.name)
        if expected is None:
            raise JournalSourceError(f"{SOURCE_NAME}: schema column {f.name!r} is unknown: the columns are "
                                     f"{', '.join(_COLUMNS)}")
        if f.name == "event":
            if not isinstance(f.dataType, (StringType, StructType)):
                raise JournalSourceError(f"{SOURCE_NAME}: schema column 'event' is {f.dataType.simpleString()}: "
                                         f"give string (JSON) or a struct of the event's fields")
            if isinstance(f.dataType, StructType):
                _converter(f.dataType, "", False)  # refuses unsupported field types before any task runs
        elif f.dataType.simpleString() != expected.simpleString():
            raise JournalSourceError(f"{SOURCE_NAME}: schema column {f.name!r} is {f.dataType.simpleString()}, "
                                     f"it must be {expected.simpleString()}")


def _row_maker(schema: StructType) -> Callable[[EventEnvelope], Row]:
    """A function making the row of `schema`'s columns (checked by _check_schema) for one event: for the reads
    whose event struct holds a timestamp or a date (every other read goes as Arrow batches, _batch_maker)."""
    getters: list[Callable[[EventEnvelope], Any]] = []
    for f in schema.fields:
        if f.name == "offset":
            getters.append(lambda e: e.offset)
        elif f.name == "persistence_id":
            getters.append(lambda e: e.persistence_id)
        elif f.name == "sequence_nr":
            getters.append(lambda e: e.sequence_nr)
        elif f.name == "timestamp":
            getters.append(lambda e: e.timestamp)
        elif f.name == "tags":
            getters.append(lambda e: sorted(e.tags))
        elif isinstance(f.dataType, StructType):
            to_struct = _converter(f.dataType, "", False)

            def event(e: EventEnvelope, to_struct: Callable[[Any], Any] = to_struct) -> Any:
                try:
                    return to_struct(e.event)
                except _Mismatch as m:
                    raise JournalSourceError(_mismatch_message(m, e.event, e)) from None
            getters.append(event)
        else:
            getters.append(_envelope_json)
    return lambda e: tuple(g(e) for g in getters)


# --- Arrow batches ---------------------------------------------------------------------------------

_ARROW_ROWS = 10_000
"""Events per Arrow record batch handed to Spark (Spark's own spark.sql.execution.arrow.maxRecordsPerBatch)."""

_ARROW_NATIVE = (LongType, IntegerType, ShortType, ByteType, DoubleType, FloatType, StringType, BooleanType,
                 BinaryType)


def _arrow_native(dtype: DataType) -> bool:
    """Whether pyarrow takes the struct converter's values of `dtype` as they are (timestamps and dates are
    left to Spark's own conversion of rows, which knows its session's rules for them)."""
    if isinstance(dtype, ArrayType):
        return _arrow_native(dtype.elementType)
    if isinstance(dtype, MapType):
        return _arrow_native(dtype.keyType) and _arrow_native(dtype.valueType)
    if isinstance(dtype, StructType):
        return all(_arrow_native(f.dataType) for f in dtype.fields)
    return isinstance(dtype, _ARROW_NATIVE)


def _batch_maker(schema: StructType) -> Callable[[list[EventEnvelope]], pa.RecordBatch] | None:
    """A function making the Arrow record batch of `schema`'s columns (checked by _check_schema) for a list of
    events, or None when the event struct holds a timestamp or a date (those reads yield rows).

    Spark takes a batch as it is; a row costs it a check and a converter call per column in its worker
    (bench/PROFILE.md §39).
    """
    import pyarrow as pa
    from pyspark.sql.pandas.types import to_arrow_schema

    if not all(_arrow_native(f.dataType) for f in schema.fields):
        return None
    # The schema Spark checks a batch against (pyspark.sql.worker.plan_data_source_read).
    try:
        arrow_schema = to_arrow_schema(schema, timezone="UTC")
    except TypeError:  # (a PySpark whose to_arrow_schema takes no timezone)
        arrow_schema = to_arrow_schema(schema)
    columns: list[Callable[[list[EventEnvelope]], list[Any]]] = []
    for f in schema.fields:
        if f.name == "offset":
            columns.append(lambda events: [e.offset for e in events])
        elif f.name == "persistence_id":
            columns.append(lambda events: [e.persistence_id for e in events])
        elif f.name == "sequence_nr":
            columns.append(lambda events: [e.sequence_nr for e in events])
        elif f.name == "timestamp":
            columns.append(lambda events: [e.timestamp for e in events])
        elif f.name == "tags":
            columns.append(_tag_lists())
        elif isinstance(f.dataType, StructType):
            columns.append(_structs(_converter(f.dataType, "", False)))
        else:
            columns.append(lambda events: [_envelope_json(e) for e in events])
    types = [field.type for field in arrow_schema]

    def batch(events: list[EventEnvelope]) -> pa.RecordBatch:
        arrays = [pa.array(column(events), type=t) for column, t in zip(columns, types, strict=True)]
        return pa.RecordBatch.from_arrays(arrays, schema=arrow_schema)
    return batch


def _tag_lists() -> Callable[[list[EventEnvelope]], list[list[str]]]:
    """The tags column: each event's tags sorted, one list per distinct set of tags (a new list per event cost
    0.7 µs, most of it the collections that 10,000 more lists alive set off)."""
    seen: dict[frozenset[str], list[str]] = {}

    def tag_lists(events: list[EventEnvelope]) -> list[list[str]]:
        if len(seen) > 1024:
            seen.clear()
        out = []
        for e in events:
            tags = seen.get(e.tags)
            if tags is None:
                tags = seen[e.tags] = sorted(e.tags)
            out.append(tags)
        return out
    return tag_lists


def _structs(to_struct: Callable[[Any], Any]) -> Callable[[list[EventEnvelope]], list[Any]]:
    """The event column as structs: a mismatch fails naming the field, the types and the event."""
    def structs(events: list[EventEnvelope]) -> list[Any]:
        out = []
        for e in events:
            try:
                out.append(to_struct(e.event))
            except _Mismatch as m:
                raise JournalSourceError(_mismatch_message(m, e.event, e)) from None
        return out
    return structs


# --- reading ---------------------------------------------------------------------------------------


def _import(options: SourceOptions) -> None:
    for module in options.imports:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise JournalSourceError(f'{SOURCE_NAME}: option "imports": cannot import {module!r} in this Spark '
                                     f'worker ({e}); put it on the executors\' PYTHONPATH') from e


def _splits(lo: int, hi: int, n: int) -> list[tuple[int, int]]:
    """(lo, hi] cut into at most n contiguous non-empty ranges (a, b]."""
    if hi <= lo:
        return []
    n = min(n, hi - lo)
    bounds = [lo + (hi - lo) * i // n for i in range(n + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(n)]


@dataclass(frozen=True)
class _OffsetRange(InputPartition):
    """The events (of the read's tag, or all) with lo < offset <= hi."""

    lo: int
    hi: int


@dataclass(frozen=True)
class _SeqRange(InputPartition):
    """The read's persistence id's events with lo < seq nr <= hi."""

    lo: int
    hi: int


@contextmanager
def _decoding(options: SourceOptions) -> Iterator[None]:
    """Turn an event that cannot be decoded into an error pointing at option "imports"."""
    try:
        yield
    except SerializationError as e:
        raise JournalSourceError(
            f"{SOURCE_NAME}: cannot decode an event of {redact_url(options.url)!r}: {e}; if its type is "
            f'registered by a module, name that module in option "imports"') from e


def _read_partition(options: SourceOptions, schema: StructType,
                    partition: InputPartition) -> Iterator[Row | pa.RecordBatch]:
    if not isinstance(partition, (_OffsetRange, _SeqRange)):
        raise JournalSourceError(f"{SOURCE_NAME}: unknown partition {partition!r}")
    if partition.hi <= partition.lo:  # the one partition of a read with nothing to read
        return
    _import(options)
    make_batch = _batch_maker(schema)
    with open_journal(options.url) as j, _decoding(options):
        if isinstance(partition, _OffsetRange):
            # A bounded range: on PostgreSQL it first waits on writes in flight below `hi`, so every attempt
            # of this partition reads the same events.
            query = j.events_between(partition.lo, partition.hi, tag=options.tag, gap_timeout=options.gap_timeout)
        else:
            assert options.persistence_id is not None
            query = j.events_by_persistence_id(options.persistence_id, partition.lo + 1, partition.hi)
        with query:
            if make_batch is None:
                row = _row_maker(schema)
                for e in query:
                    yield row(e)
                return
            while events := list(islice(query, _ARROW_ROWS)):
                yield make_batch(events)


def _plan(options: SourceOptions, start: int, end: int) -> list[InputPartition]:
    """(start, end] as ranges of offsets, or of sequence numbers for one id; one empty range if nothing."""
    make = _SeqRange if options.persistence_id is not None else _OffsetRange
    parts: list[InputPartition] = [make(a, b) for a, b in _splits(start, end, options.partitions)]
    return parts or [_OffsetRange(0, 0)]


def _newest(j: Journal, options: SourceOptions) -> int:
    """The end of a read planned now: the newest offset (of the tag), or the id's highest sequence number."""
    if options.persistence_id is not None:
        return j.highest_sequence_nr(options.persistence_id)
    return j.newest_offset(options.tag)


class _BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions, schema: StructType):
        self.options = options
        self.schema = schema

    def partitions(self) -> Sequence[InputPartition]:
        """Plan the read on the driver: ranges of offsets, or of sequence numbers, up to the newest."""
        with open_journal(self.options.url) as j:
            return _plan(self.options, 0, _newest(j, self.options))

    def read(self, partition: InputPartition) -> Iterator[Row | pa.RecordBatch]:
        """Read one partition in an executor, opening the journal there."""
        return _read_partition(self.options, self.schema, partition)


class _StreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions, schema: StructType):
        self.options = options
        self.schema = schema
        self.key = "sequence_nr" if options.persistence_id is not None else "offset"

    def _position(self, offset: dict[str, int]) -> int:
        if self.key not in offset:
            what = (f"persistence id {self.options.persistence_id!r}" if self.options.persistence_id is not None
                    else "a tag or all events")
            raise JournalSourceError(f"{SOURCE_NAME}: the checkpoint's offset {offset} is not one of a stream of "
                                     f"{what}: it belongs to a query with other options; use a new checkpoint")
        return int(offset[self.key])

    def initialOffset(self) -> dict[str, int]:
        """A new query starts before the first event: global offset 0 (or sequence nr 0 for one id)."""
        return {self.key: 0}

    def latestOffset(self, start: dict[str, int], limit: object) -> dict[str, int]:
        """The newest offset (of the tag), or the id's highest sequence nr: the next micro-batch reads up to it."""
        # The read of (start, end] settles what is in flight below `end` itself (Journal.events_between), so
        # the newest visible offset is safe as the end on PostgreSQL too.
        with open_journal(self.options.url) as j:
            return {self.key: max(self._position(start), _newest(j, self.options))}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        """(start, end] cut into up to `partitions` ranges."""
        return _plan(self.options, self._position(start), self._position(end))

    def read(self, partition: InputPartition) -> Iterator[Row | pa.RecordBatch]:
        """Read one range in an executor."""
        return _read_partition(self.options, self.schema, partition)

    def commit(self, end: dict[str, int]) -> None:
        """Nothing to release: the journal keeps every event, and the checkpoint holds the offset."""


class JournalDataSource(DataSource):
    """The "reprise-journal" data source: a journal's events as a DataFrame, batch or streaming."""

    def __init__(self, options: dict[str, str]):
        super().__init__(options)
        self.source_options = parse_options(options)

    @classmethod
    def name(cls) -> str:
        """The format name: spark.read.format("reprise-journal")."""
        return SOURCE_NAME

    def schema(self) -> str:
        """offset, persistence_id, sequence_nr, timestamp, tags, event (JSON)."""
        return SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        """A batch read of the events stored when it is planned."""
        _check_schema(schema)
        _check_journal_file(self.source_options)
        return _BatchReader(self.source_options, schema)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A micro-batch stream of a tag's events or of all events (by global offset), or of one id's (by seq nr)."""
        _check_schema(schema)
        _check_journal_file(self.source_options)
        return _StreamReader(self.source_options, schema)

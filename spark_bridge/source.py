"""The journal as a Spark data source: `spark.read.format("reprise-journal")` and `spark.readStream`.

    import spark_bridge
    spark_bridge.register(spark)
    df = (spark.read.format("reprise-journal").option("url", "postgresql://u@h/db")
          .option("tag", "account").option("imports", "bank.events").load())

Columns: offset (the global offset), persistence_id, sequence_nr, timestamp (ms since the epoch), tags
(sorted) and event: the event as JSON (see `event_json`). Options:

- url (required): the journal, `sqlite:///abs/path.db` or `postgresql://...` (any registered scheme but
  memory://, which lives in one process while Spark reads in its executors' processes).
- tag: only the events carrying this tag; partitions are ranges of the global offset.
- persistence_id: only this id's events; partitions are ranges of its sequence numbers.
  Without either, every event of every id; partitions are ranges of the sorted persistence ids.
- partitions (default 4): how many ranges a read is split into, read in parallel; each partition opens
  the journal itself in its executor.
- imports: comma-separated modules the executors import before decoding, so that the types they
  register (journal.register_type) are known there; an unregistered type fails the task, naming it.
- gap_timeout: seconds a tag read on PostgreSQL waits on a write still in flight (journal.Journal.gap_timeout).

A batch read is a snapshot: every event with an offset up to the newest stored when the read is planned.
A streaming read (`readStream`, needs `tag`) has the global offset as its Spark offset: each micro-batch
reads the tag's events in (start, end], so a query restarted from its checkpoint neither loses nor
repeats an event. On PostgreSQL, where writers commit out of offset order, the read of (start, end]
waits on writes still in flight below `end` like `events_by_tag` does (OrderingHorizon), so an event
that commits late with a smaller offset is not skipped (unless its transaction outlasts gap_timeout).
"""

from __future__ import annotations

import base64
import dataclasses
import importlib
import json
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import DataSource, DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.types import StructType

from journal import EventEnvelope, Journal, RepriseError, SerializationError, open_journal
from journal.serialization import manifest_of
from journal.urls import parse_url, redact_url

__all__ = ["SCHEMA", "SOURCE_NAME", "JournalDataSource", "JournalSourceError", "SourceOptions", "event_json",
           "parse_options"]

SOURCE_NAME = "reprise-journal"
SCHEMA = ("offset long, persistence_id string, sequence_nr long, timestamp long, tags array<string>, "
          "event string")
DEFAULT_PARTITIONS = 4
TYPE_KEY = "@type"
"""The key naming a registered dataclass's manifest in its JSON object (no field can be called that)."""

Row = tuple[int, str, int, int, list[str], str]


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
    url = options.get("url")
    if not url:
        raise JournalSourceError(f'{SOURCE_NAME}: option "url" is required, e.g. '
                                 f'.option("url", "sqlite:///abs/journal.db") or "postgresql://user@host/db"')
    try:
        scheme = parse_url(url).scheme
    except ValueError as e:
        raise JournalSourceError(f'{SOURCE_NAME}: option "url": {e}') from e
    if scheme == "memory":
        raise JournalSourceError(f'{SOURCE_NAME}: option "url" {redact_url(url)!r}: a memory:// journal lives in '
                                 f'one process and Spark reads in its executors: use sqlite:// or postgresql://')
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
    return SourceOptions(url, tag, pid, partitions, imports, gap_timeout)


# --- events as JSON -------------------------------------------------------------------------------


def _jsonable(obj: Any) -> Any:
    """`obj` as JSON values: a registered dataclass becomes {"@type": manifest, field: value, ...}."""
    t = type(obj)
    if obj is None or t is bool or t is int or t is float or t is str:
        return obj
    if t is list or t is tuple:
        return [_jsonable(x) for x in obj]
    if t is set or t is frozenset:
        items = [_jsonable(x) for x in obj]
        try:  # a set has no order: sorted, so that equal sets give equal JSON
            return sorted(items)
        except TypeError:
            return sorted(items, key=lambda x: json.dumps(x, sort_keys=True))
    if t is dict:
        return {k if type(k) is str else json.dumps(_jsonable(k)): _jsonable(v) for k, v in obj.items()}
    if t is bytes:
        return base64.b64encode(obj).decode("ascii")
    if dataclasses.is_dataclass(obj):
        try:
            out: dict[str, Any] = {TYPE_KEY: manifest_of(t)}
        except KeyError:
            out = {TYPE_KEY: f"{t.__module__}.{t.__qualname__}"}
        for f in dataclasses.fields(obj):
            out[f.name] = _jsonable(getattr(obj, f.name))
        return out
    return str(obj)  # (the journal stores nothing else; kept total for safety)


def event_json(event: object) -> str:
    """The event column: JSON where a registered dataclass is an object of its fields plus "@type" (its
    manifest), tuples, sets and frozensets are arrays (sets sorted), bytes are base64 strings, and dict
    keys that are not strings are their JSON text."""
    return json.dumps(_jsonable(event), separators=(",", ":"), ensure_ascii=False)


def _row(e: EventEnvelope) -> Row:
    return e.offset, e.persistence_id, e.sequence_nr, e.timestamp, sorted(e.tags), event_json(e.event)


# --- reading ---------------------------------------------------------------------------------------


def _import(options: SourceOptions) -> None:
    for module in options.imports:
        try:
            importlib.import_module(module)
        except ImportError as e:
            raise JournalSourceError(f'{SOURCE_NAME}: option "imports": cannot import {module!r} in this Spark '
                                     f'worker ({e}); put it on the executors\' PYTHONPATH') from e


def _newest_offset(j: Journal) -> int:
    """The greatest offset stored now (0 for an empty journal)."""
    newest = j.tail(1)
    return newest[0].offset if newest else 0


def _splits(lo: int, hi: int, n: int) -> list[tuple[int, int]]:
    """(lo, hi] cut into at most n contiguous non-empty ranges (a, b]."""
    if hi <= lo:
        return []
    n = min(n, hi - lo)
    bounds = [lo + (hi - lo) * i // n for i in range(n + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(n)]


@dataclass(frozen=True)
class _TagRange(InputPartition):
    """The tag's events with lo < offset <= hi."""

    lo: int
    hi: int


@dataclass(frozen=True)
class _SeqRange(InputPartition):
    """The id's events with lo <= seq nr <= hi, offset <= top."""

    lo: int
    hi: int
    top: int


@dataclass(frozen=True)
class _IdRange(InputPartition):
    """The events of the ids first <= id <= last with offset <= top."""

    first: str
    last: str
    top: int


def _read_tag(j: Journal, options: SourceOptions, lo: int, hi: int) -> Iterator[Row]:
    assert options.tag is not None
    # A current query: on PostgreSQL it waits on the writes in flight below the newest offset, so it
    # yields every event up to `hi` with none skipped; it reads one chunk at most beyond `hi`.
    with j.events_by_tag(options.tag, lo, gap_timeout=options.gap_timeout) as q:
        for e in q:
            if e.offset > hi:
                return
            yield _row(e)


@contextmanager
def _decoding(options: SourceOptions) -> Iterator[None]:
    """Turn an event that cannot be decoded into an error pointing at option "imports"."""
    try:
        yield
    except SerializationError as e:
        raise JournalSourceError(
            f"{SOURCE_NAME}: cannot decode an event of {redact_url(options.url)!r}: {e}; if its type is "
            f'registered by a module, name that module in option "imports"') from e


def _read_partition(options: SourceOptions, partition: InputPartition) -> Iterator[Row]:
    _import(options)
    with open_journal(options.url) as j, _decoding(options):
        if isinstance(partition, _TagRange):
            if partition.hi <= partition.lo:  # the one partition of a read with nothing to read
                return
            yield from _read_tag(j, options, partition.lo, partition.hi)
        elif isinstance(partition, _SeqRange):
            assert options.persistence_id is not None
            with j.events_by_persistence_id(options.persistence_id, partition.lo, partition.hi) as q:
                yield from (_row(e) for e in q if e.offset <= partition.top)
        elif isinstance(partition, _IdRange):
            ids = [p for p in j.current_persistence_ids() if partition.first <= p <= partition.last]
            for pid in ids:
                with j.events_by_persistence_id(pid) as q:
                    yield from (_row(e) for e in q if e.offset <= partition.top)


class _BatchReader(DataSourceReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def partitions(self) -> Sequence[InputPartition]:
        """Plan the read on the driver: ranges of offsets, sequence numbers or ids, up to the newest offset."""
        o = self.options
        _import(o)
        with open_journal(o.url) as j, _decoding(o):
            top = _newest_offset(j)
            parts: list[InputPartition]
            if o.tag is not None:
                parts = [_TagRange(a, b) for a, b in _splits(0, top, o.partitions)]
            elif o.persistence_id is not None:
                highest = j.highest_sequence_nr(o.persistence_id)
                parts = [_SeqRange(a + 1, b, top) for a, b in _splits(0, highest, o.partitions)]
            else:
                ids = list(j.current_persistence_ids())
                parts = [_IdRange(ids[a], ids[b - 1], top) for a, b in _splits(0, len(ids), o.partitions)]
        return parts or [_TagRange(0, 0)]  # (nothing to read: one empty partition)

    def read(self, partition: InputPartition) -> Iterator[Row]:
        """Read one partition in an executor, opening the journal there."""
        return _read_partition(self.options, partition)


class _StreamReader(DataSourceStreamReader):
    def __init__(self, options: SourceOptions):
        self.options = options

    def initialOffset(self) -> dict[str, int]:
        """Offsets are global offsets; a new query starts before the first event."""
        return {"offset": 0}

    def latestOffset(self, start: dict[str, int], limit: object) -> dict[str, int]:
        """The newest offset stored now: the next micro-batch reads the tag's events up to it."""
        # The read of (start, end] settles what is in flight below `end` itself (see _read_tag), so the
        # newest visible offset is safe as the end on PostgreSQL too.
        _import(self.options)
        with open_journal(self.options.url) as j, _decoding(self.options):
            return {"offset": max(int(start["offset"]), _newest_offset(j))}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> Sequence[InputPartition]:
        """(start, end] cut into up to `partitions` offset ranges."""
        return [_TagRange(a, b) for a, b in _splits(int(start["offset"]), int(end["offset"]),
                                                     self.options.partitions)]

    def read(self, partition: InputPartition) -> Iterator[Row]:
        """Read one offset range in an executor."""
        return _read_partition(self.options, partition)

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
        return _BatchReader(self.source_options)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        """A micro-batch stream of one tag's events, by global offset."""
        if self.source_options.tag is None:
            raise JournalSourceError(f'{SOURCE_NAME}: readStream needs option "tag": a stream follows one tag '
                                     f"by its global offset (persistence_id and all-events streams are not "
                                     f"supported yet)")
        return _StreamReader(self.source_options)


"""feed(): push a Spark DataFrame's rows through the bridge to actors by path, with publisher confirms.

Each Spark task attaches to the actor system (`actors.connect`, cached per Python worker), cuts its
partition into batches and keeps up to `window` of them unconfirmed (RabbitMQ's asynchronous publisher
confirms). With ack="persisted" a batch is confirmed once it is durable in the bridge's journal; with
ack="processed" once every row of it, and every follow-up anchored to a row, was confirmed by its
destination (the bridge's XOR acker). When the rows are plain columns and the message is the row as a
dict (the default), tasks read Arrow record batches (`mapInArrow`) and send columns: no per-row Python
objects on the Spark side.
"""

from __future__ import annotations

import os
import sys
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, cast

import actors
from actors import AskTimeout, RepriseError
from journal.errors import SerializationError
from journal.serialization import serialize
from spark_bridge.bridge import BRIDGE_PATH
from spark_bridge.messages import (
    AwaitBatch,
    BatchAccepted,
    BatchProcessed,
    FeedProgress,
    GetFeedProgress,
    IngestBatch,
)
from spark_bridge.progress import Poller, ProgressBar, is_terminal

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Row
    from pyspark.sql.streaming.query import StreamingQuery

HOW_TO_START = ("start the bridge in the actor system first: "
                "`from spark_bridge import start_bridge; start_bridge(actors.connect(PORT))`")
ACK_MODES = ("persisted", "processed")
_RESULT_SCHEMA = "partition int, rows long, duplicates long, dead long, incomplete string"


@dataclass(frozen=True)
class FeedResult:
    """What a feed did: rows sent, rows skipped as duplicates, rows dead-lettered, wall time and rate."""

    rows: int
    duplicates_skipped: int
    dead_lettered: int
    seconds: float
    rows_per_second: float


class FeedError(RepriseError, RuntimeError):
    """A feed could not start, or a partition could not be confirmed in time."""


@dataclass(frozen=True)
class _Plan:
    """Everything a task needs (pickled to the executors)."""

    host: str
    port: int
    feed_id: str
    to: str | Callable[[Row], str]  # column name or callable Row -> path
    message: Callable[[Row], object] | None
    key: str | None
    batch_size: int
    window: int
    timeout: float
    resend_after: float
    processed: bool


def _address(system: object) -> tuple[str, int]:
    """(host, admin port) from a port, "host:port" or a System."""
    if isinstance(system, actors.System):
        return "127.0.0.1", int(cast(int, system.admin_port))
    if isinstance(system, int) and not isinstance(system, bool):
        return "127.0.0.1", system
    if isinstance(system, str) and ":" in system:
        host, port = system.rsplit(":", 1)
        if port.isdigit():
            return host, int(port)
    if isinstance(system, str) and system.isdigit():
        return "127.0.0.1", int(system)
    raise TypeError(f"system must be an admin port, 'host:port' or an actors.System, got {system!r}")


# One attachment per Python worker process: Spark reuses workers for many tasks, and attaching costs a
# round trip to the guardian. Keyed by pid because forked workers must not share the parent's sockets.
_connections: dict[tuple[int, str, int], actors.System] = {}


def _connection(host: str, port: int) -> actors.System:
    key = (os.getpid(), host, port)
    system = _connections.get(key)
    if system is None:
        system = _connections[key] = actors.connect(port, host=host)
    return system


# ---- the task side ----------------------------------------------------------------------------------


class _InFlight:
    __slots__ = ("message", "first", "last", "accepted", "processed")

    def __init__(self, message: IngestBatch, now: float) -> None:
        self.message = message
        self.first = now
        self.last = now
        self.accepted = False
        self.processed = False


class _Publisher:
    """One task's batches to the bridge: a window of unconfirmed ones, resends, timeouts."""

    def __init__(self, plan: _Plan, partition: int) -> None:
        self.plan = plan
        self.partition = partition
        self.system = _connection(plan.host, plan.port)
        self.probe = self.system.probe(f"spark-feed-{partition}-{uuid.uuid4().hex[:8]}")
        self.inflight: dict[int, _InFlight] = {}
        self.rows = self.duplicates = self.dead = 0
        self.incomplete: list[int] = []

    def send(self, batch_no: int, paths: list[str], values: list[Any], columns: tuple[str, ...] | None,
             keys: list[Hashable] | None) -> bool:
        """Send one batch once the window has room; False when the partition gave up (processed timeout)."""
        self.settle(self.plan.window - 1)
        if self.incomplete:
            return False
        message = IngestBatch(self.plan.feed_id, self.partition, batch_no, paths, values, self.probe.path, columns,
                              keys, self.plan.processed)
        self.inflight[batch_no] = _InFlight(message, time.monotonic())
        self.system.tell(BRIDGE_PATH, message)
        self.rows += len(paths)
        return True

    def settle(self, limit: int) -> None:
        """Wait for confirms until at most `limit` batches are open; resend the late, time out the hopeless."""
        plan, inflight = self.plan, self.inflight
        while len(inflight) > limit and not self.incomplete:
            oldest = min(e.last for e in inflight.values())
            wait = max(0.0, oldest + plan.resend_after - time.monotonic())
            try:
                reply = self.probe.receive(wait)
            except AskTimeout:
                self._late(time.monotonic())
                continue
            entry = inflight.get(getattr(reply, "batch_no", -1))
            if entry is None or getattr(reply, "feed_id", None) != plan.feed_id:
                continue
            if isinstance(reply, BatchAccepted) and not entry.accepted:
                entry.accepted = True
                self.duplicates += reply.duplicates
                self.dead += reply.dead_lettered
            elif isinstance(reply, BatchProcessed):
                entry.processed = True
            if entry.accepted and (entry.processed or not plan.processed):
                del inflight[entry.message.batch_no]

    def _late(self, now: float) -> None:
        plan = self.plan
        for batch_no, e in self.inflight.items():
            if now - e.first > plan.timeout:
                if not e.accepted:
                    raise FeedError(f"feed {plan.feed_id!r}: partition {self.partition} batch {batch_no} was not "
                                    f"confirmed by {BRIDGE_PATH} within {plan.timeout} s")
                # Stored but not processed in time: report it (a Spark retry would not help).
                self.incomplete = sorted(b for b, x in self.inflight.items() if now - x.first > plan.timeout)
                return
            if now - e.last >= plan.resend_after:
                m = e.message
                again = m if not e.accepted else AwaitBatch(m.feed_id, m.partition, m.batch_no, self.probe.path)
                self.system.tell(BRIDGE_PATH, again)
                e.last = now

    def finish(self) -> tuple[int, int, int, int, str | None]:
        """Wait for the last batches; (partition, rows, duplicates, dead-lettered, incomplete batches or None)."""
        self.settle(0)
        incomplete = None
        if self.incomplete:
            incomplete = ",".join(str(b) for b in self.incomplete)
        return self.partition, self.rows, self.duplicates, self.dead, incomplete


_valid_paths: set[str] = set()  # per worker process: most feeds send to the same paths again and again


def _check_paths(paths: list[str]) -> None:
    fresh: set[str] | list[str]
    try:
        fresh = set(paths).difference(_valid_paths)
    except TypeError:  # an unhashable value: validate_path names it
        fresh = paths
    for p in fresh:
        actors.validate_path(p, what="destination path")
    if len(_valid_paths) > 1_000_000:
        _valid_paths.clear()
    _valid_paths.update(fresh)


def _unserializable_column(bodies: list[object], exc: Exception) -> FeedError:
    """Find the first value msgpack cannot carry and name its column."""
    for message in bodies:
        try:
            serialize(message)
        except SerializationError as e:
            if isinstance(message, dict):
                for column, value in message.items():
                    try:
                        serialize(value)
                    except SerializationError:
                        return FeedError(f"column {column!r} holds a value of type {type(value).__name__} "
                                         f"that msgpack cannot carry ({e}); convert it (e.g. cast to string "
                                         "or double) or pass message=...")
            return FeedError(f"a message of type {type(message).__name__} cannot be carried by msgpack: {e}")
    return FeedError(f"a batch cannot be carried by msgpack: {exc}")


def _run_rows(plan: _Plan, partition: int, rows: Iterable[Row]) -> Iterator[tuple[int, int, int, int, str | None]]:
    """A task over Row objects (a `to` or `message` callable): convert each row, send batches."""
    pub = _Publisher(plan, partition)
    paths: list[str] = []
    bodies: list[object] = []
    keys: list[Hashable] | None = [] if plan.key is not None else None

    def flush(batch_no: int) -> bool:
        _check_paths(paths)
        try:
            serialize(bodies)
        except SerializationError as exc:
            raise _unserializable_column(bodies, exc) from None
        return pub.send(batch_no, paths, bodies, None, keys)

    batch_no = 0
    for row in rows:
        paths.append(row[plan.to] if isinstance(plan.to, str) else plan.to(row))
        bodies.append(row.asDict(recursive=True) if plan.message is None else plan.message(row))
        if keys is not None:
            keys.append(row[plan.key])
        if len(paths) >= plan.batch_size:
            if not flush(batch_no):
                break
            batch_no += 1
            paths, bodies = [], []
            keys = [] if keys is not None else None
    else:
        if paths:
            flush(batch_no)
    yield pub.finish()


def _run_arrow(plan: _Plan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """A task over Arrow record batches: columns to Python lists in C, cut into batches, no row objects."""
    import pyarrow as pa
    from pyspark import TaskContext

    pub = _Publisher(plan, cast(TaskContext, TaskContext.get()).partitionId())  # (inside a task: never None)
    columns: tuple[str, ...] | None = None
    pending: list[list[Any]] = []
    to = key = 0
    batch_no = 0
    going = True
    size = plan.batch_size
    for rb in batches:
        if columns is None:
            columns = tuple(rb.schema.names)
            to = columns.index(plan.to)
            key = columns.index(plan.key) if plan.key is not None else -1
            pending = [[] for _ in columns]
        for col, values in zip(pending, rb.columns, strict=True):
            col.extend(values.to_pylist())
        while going and len(pending[0]) >= size:
            values = [c[:size] for c in pending]
            pending = [c[size:] for c in pending]
            _check_paths(values[to])
            going = pub.send(batch_no, values[to], values, columns, values[key] if key >= 0 else None)
            batch_no += 1
        if not going:
            break
    if going and pending and pending[0]:
        _check_paths(pending[to])
        pub.send(batch_no, pending[to], pending, columns, pending[key] if key >= 0 else None)
    partition, rows, duplicates, dead, incomplete = pub.finish()
    yield pa.RecordBatch.from_pydict({"partition": [partition], "rows": [rows], "duplicates": [duplicates],
                                      "dead": [dead], "incomplete": [incomplete]},
                                     schema=pa.schema([("partition", pa.int32()), ("rows", pa.int64()),
                                                       ("duplicates", pa.int64()), ("dead", pa.int64()),
                                                       ("incomplete", pa.string())]))


# ---- the driver side --------------------------------------------------------------------------------

_PLAIN = {"BooleanType", "ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType",
          "StringType", "CharType", "VarcharType", "BinaryType", "NullType"}


def _unsupported(data_type: Any) -> str | None:
    """Why msgpack cannot carry values of this Spark type (None if it can)."""
    name = type(data_type).__name__
    if name in _PLAIN:
        return None
    if name == "ArrayType":
        return _unsupported(data_type.elementType)
    if name == "MapType":
        return _unsupported(data_type.keyType) or _unsupported(data_type.valueType)
    if name == "StructType":
        for f in data_type.fields:
            why = _unsupported(f.dataType)
            if why:
                return why
        return None
    return cast(str, data_type.simpleString())


def _has_map(data_type: Any) -> bool:
    name = type(data_type).__name__
    if name == "MapType":
        return True
    if name == "ArrayType":
        return _has_map(data_type.elementType)
    if name == "StructType":
        return any(_has_map(f.dataType) for f in data_type.fields)
    return False


def _check_columns(df: DataFrame) -> None:
    """Fail before the job when a column's values cannot travel as msgpack in the default row dict."""
    for f in df.schema.fields:
        why = _unsupported(f.dataType)
        if why:
            raise FeedError(f"column {f.name!r} has type {why}, which msgpack cannot carry; cast it (e.g. "
                            f"`df.withColumn({f.name!r}, col({f.name!r}).cast('string'))`) or pass message=... "
                            "to build the message yourself")


def _check_system(host: str, port: int) -> None:
    """Fail fast, before any Spark job, when the system or the bridge is not there."""
    try:
        system = actors.connect(port, host=host)
    except actors.SystemNotRunning as exc:
        raise FeedError(f"cannot feed: {exc}") from None
    try:
        info = system.status().hosts.get(BRIDGE_PATH)
    finally:
        system.close()
    # A bridge that is (re)starting or backing off comes back by itself, and the guardian holds what the
    # tasks send it meanwhile: only one that is gone for good fails the feed.
    if info is None or info.state not in ("running", "starting", "restarting", "backoff"):
        state = "not started" if info is None else info.state
        raise FeedError(f"cannot feed: the bridge {BRIDGE_PATH} is {state} in the actor system on {host}:{port}; "
                        + HOW_TO_START)


def _progress(df: DataFrame, host: str, port: int, feed_id: str, processed: bool, stream: TextIO) -> Poller | None:
    """A polling progress bar on `stream`, or None when it is not a terminal."""
    if not is_terminal(stream):
        return None
    total = df.count()
    label = "rows processed" if processed else "rows persisted"
    system = actors.connect(port, host=host)

    def fetch() -> int:
        p = system.ask(BRIDGE_PATH, GetFeedProgress(feed_id), timeout=5)
        return p.processed if processed and isinstance(p, FeedProgress) else p.accepted

    poller = Poller(ProgressBar(total, stream, label), fetch).start()
    poller.system = system  # type: ignore[attr-defined]  # closed with the poller
    return poller


def feed(df: DataFrame, system: object, to: str | Callable[[Row], str] = "destination",
         message: Callable[[Row], object] | None = None, key: str | None = None, feed_id: str | None = None,
         ack: str = "persisted", batch_size: int = 2_000, window: int = 8, timeout: float = 60.0,
         progress: bool | TextIO = True) -> FeedResult:
    """Send every row of `df` to the actor at its path through the bridge.

    Returns once every row is durable in the bridge (ack="persisted") or confirmed by its destination
    together with everything anchored to it (ack="processed"). `progress`: draw a bar on stderr (or on
    the given stream) when it is a terminal; False never does.
    """
    if ack not in ACK_MODES:
        raise ValueError(f"ack must be one of {ACK_MODES}, got {ack!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    if not isinstance(timeout, int | float) or timeout <= 0:
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")
    if not (isinstance(to, str) or callable(to)):
        raise TypeError(f"to must be a column name or a callable Row -> path, got {to!r}")
    if isinstance(to, str) and to not in df.columns:
        raise ValueError(f"to={to!r} is not a column of the DataFrame (columns: {df.columns})")
    if key is not None and key not in df.columns:
        raise ValueError(f"key={key!r} is not a column of the DataFrame (columns: {df.columns})")
    if message is not None and not callable(message):
        raise TypeError(f"message must be a callable Row -> message, got {message!r}")
    if feed_id is not None and (not isinstance(feed_id, str) or not feed_id):
        raise ValueError(f"feed_id must be a non-empty string, got {feed_id!r}")
    if message is None:
        _check_columns(df)
    host, port = _address(system)
    _check_system(host, port)
    # Executors run the driver's Python, so that actor and message classes import the same way there.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    feed_id = feed_id or f"feed-{uuid.uuid4().hex}"
    plan = _Plan(host, port, feed_id, to, message, key, batch_size, window, float(timeout),
                 resend_after=max(0.5, min(5.0, timeout / 6)), processed=ack == "processed")
    stream = sys.stderr if progress is True else progress
    poller = (_progress(df, host, port, feed_id, plan.processed, cast(TextIO, stream))  # (a stream: not False)
              if progress is not False else None)
    started = time.monotonic()
    parts: list[tuple[Any, ...]] = []
    try:
        if message is None and isinstance(to, str) and not any(_has_map(f.dataType) for f in df.schema.fields):
            parts = [tuple(r) for r in df.mapInArrow(lambda it: _run_arrow(plan, it), _RESULT_SCHEMA).collect()]
        else:
            parts = df.rdd.mapPartitionsWithIndex(lambda i, it: _run_rows(plan, i, it)).collect()
    finally:
        if poller is not None:
            poller.stop(sum(p[1] for p in parts))
            poller.system.close()  # type: ignore[attr-defined]
    seconds = time.monotonic() - started
    incomplete = sorted((p[0], p[4]) for p in parts if p[4])
    if incomplete:
        listed = "; ".join(f"partition {p} (batches {b})" for p, b in incomplete)
        raise FeedError(f"feed {feed_id!r}: not every row was processed within {timeout} s: {listed}. Their rows "
                        "are stored and still being delivered; feed the same feed_id again to wait for them")
    rows = sum(p[1] for p in parts)
    return FeedResult(rows, sum(p[2] for p in parts), sum(p[3] for p in parts), seconds,
                      rows / seconds if seconds > 0 else 0.0)


def feed_stream(stream_df: DataFrame, system: object, *, feed_id: str, checkpoint: str, to: str | Callable[[Row], str] = "destination",
                message: Callable[[Row], object] | None = None, key: str | None = None, ack: str = "persisted",
                batch_size: int = 2_000, window: int = 8, timeout: float = 60.0, trigger: dict[str, Any] | None = None) -> StreamingQuery:
    """Feed a streaming DataFrame through foreachBatch; returns the started StreamingQuery.

    Each micro-batch is fed as `f"{feed_id}/{batch_id}"`: Spark replays an uncommitted micro-batch with
    the same id and the same data after a restart from `checkpoint`, so the bridge skips what it
    already stored. `feed_id` must therefore stay the same across restarts of the query.
    """
    if ack not in ACK_MODES:
        raise ValueError(f"ack must be one of {ACK_MODES}, got {ack!r}")
    host, port = _address(system)
    _check_system(host, port)

    def each(batch_df: DataFrame, batch_id: int) -> None:
        feed(batch_df, f"{host}:{port}", to=to, message=message, key=key, feed_id=f"{feed_id}/{batch_id}",
             ack=ack, batch_size=batch_size, window=window, timeout=timeout, progress=False)

    writer = stream_df.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()

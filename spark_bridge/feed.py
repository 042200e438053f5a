"""feed(): push a Spark DataFrame's rows through the bridge to actors by path, with publisher confirms.

The machinery of both `feed()` and the `reprise` data source (spark_bridge.sink), which are thin
entry points over it. It follows Spark's commit protocol:

1. tasks (`stage_arrow`, `stage_rows`): each Spark task attempt attaches to the actor system
   (`actors.connect`, cached per Python worker), cuts its partition into batches and keeps up to
   `window` of them unconfirmed (RabbitMQ's asynchronous publisher confirms). The bridge *stages* each
   batch under the attempt: durable in its journal, not delivered. A task reports (partition, attempt,
   rows, duplicates, dead-lettered): Spark's commit message.
2. the driver (`commit_run`): once Spark has the winning attempt of every partition (the job's commit:
   `collect()`'s results, or `DataSourceWriter.commit`'s messages), it tells the bridge to release the
   winners; the rows of failed and speculative attempts are discarded, even when their content
   differed (nondeterministic input). ack="persisted" returns once the release is durable; ack="processed"
   once every released row, and every follow-up anchored to one, was confirmed by its destination (the
   bridge's XOR acker). `discard_run` forgets an aborted job's batches.

A feed's partitions are done once released: a rerun of the feed id (or a replayed streaming micro-batch)
stores and delivers nothing again, even at another node's bridge (the coordinator decides each release);
with `key`, rows are deduplicated by key instead: each key is delivered once per feed id, whether it comes
again in a batch, another partition, a rerun or a run going on at the same time (a keyed feed therefore
passes through the single bridge /system/spark-bridge even where every node has one). When the rows are
plain columns and the message is the row as a dict (the default), tasks read Arrow record batches and
send columns: no per-row Python objects on the Spark side.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import logging
import math
import os
import stat
import struct
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TextIO, cast

import actors
from actors import AskTimeout, RepriseError
from journal.errors import SerializationError
from journal.serialization import serialize
from spark_bridge.bridge import BRIDGE_PATH, BRIDGES_PATH, bridge_path
from spark_bridge.messages import (
    RERUN_REFUSALS,
    BatchAccepted,
    BatchRefused,
    Coordinate,
    Discard,
    Discarded,
    FeedProcessed,
    FeedProgress,
    FeedReleased,
    GetFeedProgress,
    GetOpenBatches,
    IngestBatch,
    OpenBatches,
    Release,
    ReleasePlan,
    ReleaseRefused,
    RerunRefusal,
)
from spark_bridge.progress import Poller, ProgressBar, is_terminal

if TYPE_CHECKING:
    import pyarrow as pa
    from pyspark.sql import DataFrame, Row
    from pyspark.sql.streaming.query import StreamingQuery

HOW_TO_START = ("start the bridge in the actor system first: "
                "`from spark_bridge import start_bridge; start_bridge(actors.connect(PORT))`")
ACK_MODES = ("persisted", "processed")
_RESULT_COLUMNS = (("partition", "int"), ("attempt", "string"), ("rows", "long"), ("duplicates", "long"),
                   ("dead", "long"), ("bridge", "string"))
"""A task's commit message, one row: its columns and their Spark types (result_batch builds it)."""
_RESULT_SCHEMA = ", ".join(f"{name} {kind}" for name, kind in _RESULT_COLUMNS)
HOST_ENV, PORT_ENV = "REPRISE_HOST", "REPRISE_PORT"
"""A worker's environment: the address of its node's actor system, where its executors attach (default host
127.0.0.1)."""
HOST_CONF, PORT_CONF = "spark.reprise.host", "spark.reprise.port"
"""Spark conf keys read by the driver: where every executor attaches, unless its environment says otherwise."""
KEPT_RESULTS = 1_000
"""How many committed writes `last_write_result` remembers per host (a stream commits one per micro-batch)."""
PARTIAL_STALE = 3600.0
"""Seconds after which a result file left half-written (its writer killed before the rename) is removed."""
RESULTS_DIR = "REPRISE_SPARK_RESULTS"
"""Environment variable: the directory keeping committed writes' results (default: one per user in the temp dir)."""

log = logging.getLogger("spark_bridge")


@dataclass(frozen=True)
class FeedResult:
    """What a feed did: rows sent, rows skipped as duplicates, rows dead-lettered, wall time and rate."""

    rows: int
    duplicates_skipped: int
    dead_lettered: int
    seconds: float
    rows_per_second: float
    discarded: int = 0
    """Rows staged by failed or speculative task attempts and dropped (never delivered)."""
    feed_id: str = ""
    """The feed (for a streaming write: `f"{feed_id or query id}/{batch id}"`)."""


class FeedError(RepriseError, RuntimeError):
    """A feed could not start, or a partition could not be confirmed in time."""


class FeedSystemDown(FeedError, actors.SystemNotRunning):
    """The feed's actor system went down while it ran: what became of its rows, and the rerun that is safe."""


@dataclass(frozen=True)
class PathTemplate:
    """A destination path with {column} placeholders, e.g. "/user/accounts/{account}"."""

    text: str
    literals: tuple[str, ...]  # one more than columns: literal, column, literal, ...
    columns: tuple[str, ...]

    @classmethod
    def parse(cls, text: str) -> PathTemplate:
        """Split `text` at its placeholders; ValueError naming the problem when it is malformed."""
        import string

        literals, columns = [""], []
        try:
            for literal, field_name, spec, conversion in string.Formatter().parse(text):
                literals[-1] += literal
                if field_name is not None:
                    if not field_name or spec or conversion:
                        raise ValueError(f"placeholder {{{field_name}}} must be a bare column name like {{account}}")
                    columns.append(field_name)
                    literals.append("")
        except ValueError as e:
            raise ValueError(f"path template {text!r}: {e}") from None
        return cls(text, tuple(literals), tuple(columns))

    def render(self, values: list[list[Any]], rows: int) -> list[str]:
        """The paths of a batch of `rows` rows, given each placeholder column's values (in `columns` order);
        InvalidPath naming the column for a null value or one holding '/' (it would name no row's entity, or
        another one)."""
        lits = self.literals
        if not self.columns:  # (every row to one actor: there are no values to count the rows by)
            return [lits[0]] * rows
        for column, column_values in zip(self.columns, values, strict=True):
            if None in column_values:  # (a scan in C; "None" would name an entity of its own)
                raise actors.InvalidPath(f"to={self.text!r}: column {column!r} is null in a row, so the row has no "
                                         "destination; fill it, or filter such rows out before the feed")
        if len(self.columns) == 1:
            a, b = lits
            paths = [f"{a}{v}{b}" for v in values[0]]
        else:
            paths = ["".join(p for pair in zip(lits, map(str, row), strict=False) for p in pair) + lits[-1]
                     for row in zip(*values, strict=True)]
        # A value holding "/" makes a deeper path: count the slashes of the whole batch in C, look closer if off.
        if "".join(paths).count("/") != len(paths) * sum(lit.count("/") for lit in lits):
            for column, column_values in zip(self.columns, values, strict=True):
                bad = next((v for v in column_values if "/" in str(v)), None)
                if bad is not None:
                    raise actors.InvalidPath(f"to={self.text!r}: column {column!r} holds {bad!r}, which has a '/': "
                                             "an entity id is one path segment; replace the '/' in such values")
        return paths


@dataclass(frozen=True)
class _Plan:
    """Everything a task needs (pickled to the executors)."""

    host: str
    port: int
    feed_id: str
    to: str | PathTemplate | Callable[[Row], str]  # column name, template or callable Row -> path
    message: Callable[[Row], object] | None
    key: str | None
    batch_size: int
    window: int
    timeout: float
    resend_after: float
    processed: bool
    run: str = ""
    """This run's id: task attempts stage under f"{run}/{task attempt id}"."""
    bridges: tuple[str, ...] = ()
    """The node bridges running when the feed started (BRIDGES_PATH/<node>): a task stages at its node's."""
    attach_host: str | None = None
    attach_port: int | None = None
    """From the Spark conf (HOST_CONF / PORT_CONF): where tasks attach instead of host/port."""


def _address(system: object) -> tuple[str, int]:
    """(host, admin port) from a port, "host:port" or a System."""
    if isinstance(system, actors.System):
        # (its own address: a system bound elsewhere was looked for at 127.0.0.1, and refused, or another system
        # listening on that port there was fed instead)
        return system.admin_host or "127.0.0.1", int(cast(int, system.admin_port))
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


def _attach_address(plan: _Plan) -> tuple[str, int]:
    """Where this task attaches: its worker's REPRISE_HOST/REPRISE_PORT, else the Spark conf's, else the feed's."""
    port_text = os.environ.get(PORT_ENV)
    if port_text:
        if not port_text.strip().isdigit() or not 0 < int(port_text) < 65536:
            raise FeedError(f"{PORT_ENV}={port_text!r} in this Spark worker's environment is not a TCP port; set it "
                            "to the admin port of this host's actor system, e.g. 1900")
        return os.environ.get(HOST_ENV) or "127.0.0.1", int(port_text)
    if plan.attach_port is not None:
        return plan.attach_host or plan.host, plan.attach_port
    return plan.host, plan.port


def _bridge_at(plan: _Plan, system: actors.System) -> str:
    """The bridge this task stages at: its node's if that was running when the feed started, else the single one.

    A keyed feed always stages at the single bridge (the coordinator): keys are checked against the keys one
    bridge released before, so through several bridges a key could be delivered once per bridge.
    """
    if not plan.bridges or plan.key is not None:
        return BRIDGE_PATH
    path = bridge_path(system.node)
    return path if path in plan.bridges else BRIDGE_PATH


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

    def __init__(self, plan: _Plan, feed_id: str, partition: int, attempt: str) -> None:
        self.plan = plan
        self.feed_id = feed_id
        self.partition = partition
        self.attempt = attempt
        self.system = _connection(*_attach_address(plan))
        self.bridge = _bridge_at(plan, self.system)
        self.probe = self.system.probe(f"spark-feed-{partition}-{uuid.uuid4().hex[:8]}")
        self.inflight: dict[int, _InFlight] = {}
        self.rows = self.duplicates = self.dead = 0

    def send(self, batch_no: int, paths: list[str], values: list[Any], columns: tuple[str, ...] | None,
             keys: list[Hashable] | None) -> None:
        """Send one batch (staged under this attempt) once the window has room."""
        if keys is not None and None in keys:  # (a scan in C) all nulls would be one key: all but one row skipped
            raise ValueError(f"key={self.plan.key!r}: the column is null in a row, so the row has no idempotency "
                             "key; fill it, or filter such rows out before the feed")
        # NaN equals nothing, itself included: the bridge would never see a NaN key as released, and a rerun
        # would deliver its row again. (A float column's keys are all floats or None: its first one tells.)
        if keys and type(keys[0]) is float and any(k != k for k in keys):
            raise ValueError(f"key={self.plan.key!r}: the column is NaN in a row, and NaN equals no key, not even "
                             "itself, so the row could be delivered twice; fill it, or filter such rows out")
        self.settle(self.plan.window - 1)
        message = IngestBatch(self.feed_id, self.partition, batch_no, paths, values, self.probe.path, columns,
                              keys, attempt=self.attempt)
        self.inflight[batch_no] = _InFlight(message, time.monotonic())
        self.system.tell(self.bridge, message)
        self.rows += len(paths)

    def settle(self, limit: int) -> None:
        """Wait for confirms until at most `limit` batches are open; resend the late, time out the hopeless."""
        plan, inflight = self.plan, self.inflight
        while len(inflight) > limit:
            oldest = min(e.last for e in inflight.values())
            wait = max(0.0, oldest + plan.resend_after - time.monotonic())
            try:
                reply = self.probe.receive(wait)
            except AskTimeout:
                self._late(time.monotonic())
                continue
            entry = inflight.get(getattr(reply, "batch_no", -1))
            if isinstance(reply, BatchRefused) and entry is not None and reply.feed_id == self.feed_id:
                raise FeedError(f"feed {self.feed_id!r}: partition {self.partition} batch {reply.batch_no} was "
                                f"refused by {self.bridge}: {reply.reason}")
            if entry is None or not isinstance(reply, BatchAccepted) or reply.feed_id != self.feed_id:
                continue
            self.duplicates += reply.duplicates
            self.dead += reply.dead_lettered
            del inflight[entry.message.batch_no]

    def _late(self, now: float) -> None:
        plan = self.plan
        for batch_no, e in self.inflight.items():
            if now - e.first > plan.timeout:
                raise FeedError(f"feed {self.feed_id!r}: partition {self.partition} batch {batch_no} was not "
                                f"confirmed by {self.bridge} within {plan.timeout} s")
            if now - e.last >= plan.resend_after:
                self.system.tell(self.bridge, e.message)
                e.last = now

    def finish(self) -> tuple[int, str, int, int, int, str]:
        """Wait for the last batches: Spark's commit message (partition, attempt, rows, duplicates, dead, bridge)."""
        try:
            self.settle(0)
        finally:
            self.close()
        return self.partition, self.attempt, self.rows, self.duplicates, self.dead, self.bridge

    def close(self) -> None:
        """Close the task's probe (idempotent): the worker's connection is kept for its next tasks, and an open
        probe kept its path and mailbox (answers to resends arriving late) for the worker's life, one per task."""
        self.probe.close()


def _attempt(plan: _Plan) -> tuple[int, str]:
    """(partition, attempt id) of the running Spark task."""
    from pyspark import TaskContext

    context = cast(TaskContext, TaskContext.get())  # (inside a task: never None)
    return context.partitionId(), f"{plan.run}/{context.taskAttemptId()}"


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


def stage_rows(plan: _Plan, rows: Iterable[Row]) -> Iterator[tuple[int, str, int, int, int, str]]:
    """A task over Row objects (a `to` or `message` callable): convert each row, stage batches."""
    pub = _Publisher(plan, plan.feed_id, *_attempt(plan))
    template = plan.to if isinstance(plan.to, PathTemplate) else None
    paths: list[str] = []
    bodies: list[object] = []
    keys: list[Hashable] | None = [] if plan.key is not None else None

    def flush(batch_no: int) -> None:
        _check_paths(paths)
        try:
            serialize(bodies)
        except SerializationError as exc:
            raise _unserializable_column(bodies, exc) from None
        pub.send(batch_no, paths, bodies, None, keys)

    try:  # (a task that fails closes its probe too: see _Publisher.close)
        batch_no = 0
        for row in rows:
            if template is not None:
                paths.extend(template.render([[row[c]] for c in template.columns], 1))
            else:
                paths.append(row[plan.to] if isinstance(plan.to, str) else plan.to(row))  # type: ignore[operator]
            bodies.append(row.asDict(recursive=True) if plan.message is None else plan.message(row))
            if keys is not None:
                keys.append(row[plan.key])
            if len(paths) >= plan.batch_size:
                flush(batch_no)
                batch_no += 1
                paths, bodies = [], []
                keys = [] if keys is not None else None
        if paths:
            flush(batch_no)
        result = pub.finish()
    finally:
        pub.close()
    yield result


def stage_arrow(plan: _Plan, batches: Iterable[pa.RecordBatch], feed_id: str | None = None,
                ) -> tuple[int, str, int, int, int, str]:
    """A task over Arrow record batches: columns to Python lists in C, cut into batches, no row objects.

    Stages them under this task attempt for `feed_id` (default the plan's); returns the commit message.
    """
    pub = _Publisher(plan, feed_id or plan.feed_id, *_attempt(plan))
    columns: tuple[str, ...] | None = None
    pending: list[list[Any]] = []
    to = key = 0
    template = plan.to if isinstance(plan.to, PathTemplate) else None
    placeholders: list[int] = []
    batch_no = 0
    size = plan.batch_size

    def paths_of(values: list[list[Any]]) -> list[str]:
        paths = (template.render([values[i] for i in placeholders], len(values[0])) if template is not None
                 else values[to])
        _check_paths(paths)
        return paths

    try:  # (a task that fails closes its probe too: see _Publisher.close)
        for rb in batches:
            if columns is None:
                columns = tuple(rb.schema.names)
                if template is not None:
                    placeholders = [columns.index(c) for c in template.columns]
                else:
                    to = columns.index(cast(str, plan.to))
                key = columns.index(plan.key) if plan.key is not None else -1
                pending = [[] for _ in columns]
            for col, values in zip(pending, rb.columns, strict=True):
                col.extend(values.to_pylist())
            while len(pending[0]) >= size:
                values = [c[:size] for c in pending]
                pending = [c[size:] for c in pending]
                pub.send(batch_no, paths_of(values), values, columns, values[key] if key >= 0 else None)
                batch_no += 1
        if pending and pending[0]:
            pub.send(batch_no, paths_of(pending), pending, columns, pending[key] if key >= 0 else None)
        return pub.finish()
    finally:
        pub.close()


def _stage_arrow_batches(plan: _Plan, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """stage_arrow for mapInArrow: the commit message as a one-row record batch."""
    yield result_batch(*stage_arrow(plan, batches))


def result_batch(partition: int, attempt: str, rows: int, duplicates: int, dead: int, bridge: str) -> pa.RecordBatch:
    """A task's commit message as a one-row record batch of _RESULT_COLUMNS, built from buffers.

    pyarrow's conversion of Python values (`pa.array`, `RecordBatch.from_pydict`) imports pandas on first use:
    0.22-0.23 s of CPU in every new Python worker, at the end of its first task, for a module nothing else in a
    task needs (bench/PROFILE.md §28). Arrow buffers are in the machine's byte order ("=").
    """
    import pyarrow as pa

    arrays = []
    for (_, kind), value in zip(_RESULT_COLUMNS, (partition, attempt, rows, duplicates, dead, bridge), strict=True):
        if kind == "string":
            data = cast(str, value).encode()
            offsets = pa.py_buffer(struct.pack("=ii", 0, len(data)))
            arrays.append(pa.Array.from_buffers(pa.string(), 1, [None, offsets, pa.py_buffer(data)]))
        else:  # int / long
            arrow, fmt = (pa.int32(), "=i") if kind == "int" else (pa.int64(), "=q")
            arrays.append(pa.Array.from_buffers(arrow, 1, [None, pa.py_buffer(struct.pack(fmt, value))]))
    return pa.RecordBatch.from_arrays(arrays, names=[name for name, _ in _RESULT_COLUMNS])


# ---- the driver side: the job's commit --------------------------------------------------------------


def commit_run(plan: _Plan, feed_id: str, staged: Iterable[tuple[Any, ...]], started: float,
               partitions: int | None = None) -> FeedResult:
    """Release the winning attempts and wait as `plan.processed` asks.

    `staged` holds one commit message per partition: (partition, attempt, rows, duplicates, dead[, bridge]).
    `partitions`: the job's partition count (default: one per commit message), which the bridge checks against
    the feed id's released runs. With node bridges, the coordinator decides first which partitions each bridge
    releases (ReleasePlan).
    """
    messages = sorted((m[0], m[1], m[2], m[3], m[4], m[5] if len(m) > 5 else BRIDGE_PATH) for m in staged)
    count = len(messages) if partitions is None else partitions
    keyed = plan.key is not None
    system = actors.connect(plan.port, host=plan.host)
    excluded: set[tuple[int, str]] = set()
    try:
        probe = system.probe(f"spark-commit-{uuid.uuid4().hex[:8]}")
        bridges = sorted({m[5] for m in messages})
        releases: dict[tuple[str, str], Release] = {}
        if not plan.bridges and bridges in ([], [BRIDGE_PATH]):  # one bridge: it checks everything itself
            winners = [[p, attempt] for p, attempt, *_ in messages]
            releases[BRIDGE_PATH, plan.run] = Release(feed_id, plan.run, winners, probe.path, plan.processed,
                                                      partitions=count, keyed=keyed)
        else:
            decision = _coordinate(system, probe, plan, feed_id, messages, count)
            excluded = {(p, attempt) for p, attempt, _ in decision.excluded}
            for bridge in bridges:  # (a bridge whose winners were all excluded drops what the run staged there)
                winners = [[p, attempt] for p, attempt, b in decision.winners if b == bridge]
                releases[bridge, plan.run] = Release(feed_id, plan.run, winners, probe.path, plan.processed, True,
                                                     count, keyed)
            for run, bridge, winners in decision.earlier:
                releases.setdefault((bridge, run), Release(feed_id, run, winners, probe.path, plan.processed, True))
        for other in sorted({BRIDGE_PATH, *plan.bridges}.difference(b for b, _ in releases)):
            system.tell(other, Discard(feed_id, plan.run, probe.path))  # losing attempts may have staged there
        discarded, skipped = _release(system, probe, plan, feed_id, releases)
    except _Mismatched as exc:
        mismatch: RerunRefusal | None = exc.reply
    else:
        mismatch = None
    finally:
        system.close()
    if mismatch is not None:
        discard_run(plan, feed_id)  # (nothing of the run was released: what it staged goes now, not after a day)
        raise FeedError(mismatch.explain())
    seconds = time.monotonic() - started
    rows = sum(m[2] for m in messages)
    duplicates, dead = skipped, 0  # (skipped: rows whose key another partition or run released first)
    for p, attempt, n, dup, d, _ in messages:
        if (p, attempt) in excluded:  # its partition was released before, at another bridge: all duplicates
            duplicates += n
            discarded -= n - dup  # (what its bridge staged and has now dropped)
        else:
            duplicates += dup
            dead += d
    result = FeedResult(rows, duplicates, dead, seconds, rows / seconds if seconds > 0 else 0.0, discarded, feed_id)
    _remember(result)
    return result


def _ask_bridge(system: actors.System, probe: actors.Probe, plan: _Plan, path: str, message: object,
                expect: Callable[[object], bool]) -> object | None:
    """Send `message` to `path` until a reply `expect` accepts arrives (resent as plan.resend_after says)."""
    deadline = time.monotonic() + plan.timeout
    system.tell(path, message)
    while (now := time.monotonic()) < deadline:
        try:
            reply: object = probe.receive(min(plan.resend_after, deadline - now))
        except AskTimeout:  # the bridge may have restarted and lost the question: ask again
            system.tell(path, message)
            continue
        if expect(reply):
            return reply
    return None


class _Mismatched(Exception):
    """A bridge refused the run (RERUN_REFUSALS): it could not skip what the feed id's released runs delivered."""

    def __init__(self, reply: RerunRefusal) -> None:
        super().__init__(reply.explain())
        self.reply = reply


def _coordinate(system: actors.System, probe: actors.Probe, plan: _Plan, feed_id: str,
                messages: list[tuple[int, str, int, int, int, str]], partitions: int) -> ReleasePlan:
    """The coordinator's durable decision on which bridge releases which partition."""
    ask = Coordinate(feed_id, plan.run, [[p, attempt, bridge] for p, attempt, _, _, _, bridge in messages],
                     plan.key is not None, probe.path, partitions)
    reply = _ask_bridge(system, probe, plan, BRIDGE_PATH, ask,
                        lambda r: isinstance(r, (ReleasePlan, ReleaseRefused, *RERUN_REFUSALS))
                        and r.feed_id == feed_id and r.run == plan.run)
    if reply is None:
        raise FeedError(f"feed {feed_id!r}: the coordinator {BRIDGE_PATH} did not answer within {plan.timeout} s; "
                        "nothing was delivered: run it again")
    if isinstance(reply, ReleaseRefused):  # a bridge discarded the run, undecided, before this Coordinate came
        raise FeedError(refused_message(reply, reply.bridge or BRIDGE_PATH, [], plan.run))
    if isinstance(reply, RERUN_REFUSALS):
        raise _Mismatched(reply)
    return cast(ReleasePlan, reply)


def _release(system: actors.System, probe: actors.Probe, plan: _Plan, feed_id: str,
             releases: dict[tuple[str, str], Release]) -> tuple[int, int]:
    """Send each bridge its Release, resending until it answers (and, with ack="processed", until each bridge
    reports the feed processed); the rows of other attempts the bridges discarded, and the released rows they
    skipped as duplicates of a key."""
    deadline = time.monotonic() + plan.timeout
    released: dict[tuple[str, str], tuple[int, int]] = {}
    processed: set[str] = set()
    involved = {bridge for bridge, _ in releases}
    resend = plan.resend_after
    for (bridge, _), release in releases.items():
        system.tell(bridge, release)
    progress = 0  # rows processed at the bridges when the deadline was last moved
    looked = time.monotonic()
    while len(released) < len(releases) or (plan.processed and processed != involved):
        now = time.monotonic()
        if plan.processed and len(released) == len(releases) and now - looked >= plan.resend_after:
            # Looked at every resend_after (not only at the deadline, which then moved a whole timeout on):
            # the feed fails `timeout` s (give or take resend_after) after its last row was processed.
            looked = now
            rows = _processed_rows(system, feed_id, involved - processed)
            if rows > progress:
                progress, deadline = rows, now + plan.timeout
        if now >= deadline:
            # Once released, a big feed may take longer than `timeout` to process: only `timeout` seconds
            # without one more row processed fails it (a slow machine is not a stalled destination).
            if len(released) == len(releases) and plan.processed:
                rows = _processed_rows(system, feed_id, involved - processed)
                if rows > progress:
                    progress, deadline = rows, now + plan.timeout
                    continue
            break
        try:
            reply = probe.receive(min(resend, deadline - now))
        except AskTimeout:  # a bridge may have restarted (or failed over) and lost the question: ask again
            for (bridge, run), release in releases.items():
                if (bridge, run) not in released or (plan.processed and bridge not in processed):
                    system.tell(bridge, release)
            resend = min(resend * 2, 5.0) if len(released) == len(releases) else resend
            continue
        bridge = getattr(reply, "bridge", "") or BRIDGE_PATH
        if isinstance(reply, FeedReleased) and reply.feed_id == feed_id and (bridge, reply.run) in releases:
            released.setdefault((bridge, reply.run), (reply.discarded, reply.duplicates))
        elif isinstance(reply, ReleaseRefused) and reply.feed_id == feed_id and (bridge, reply.run) in releases:
            partitions = [p for p, _ in releases[bridge, reply.run].winners]
            raise FeedError(refused_message(reply, bridge, [b for b, _ in released if b != bridge], plan.run,
                                            partitions))
        elif isinstance(reply, RERUN_REFUSALS) and reply.feed_id == feed_id and (bridge, reply.run) in releases:
            raise _Mismatched(reply)
        elif isinstance(reply, FeedProcessed) and reply.feed_id == feed_id and bridge in involved:
            processed.add(bridge)
    missing = sorted({b for b, run in releases if (b, run) not in released})
    if missing:
        done = "nothing was delivered" if len(missing) == len(involved) else "the other bridges released theirs"
        raise FeedError(f"feed {feed_id!r}: the release of its partitions was not confirmed by {', '.join(missing)} "
                        f"within {plan.timeout} s; {done}: run it again (released partitions are not delivered "
                        "twice, and a rerun resends the releases of this run)")
    if plan.processed and processed != involved:
        listed = []
        for bridge in sorted(involved - processed):
            open_ = system.ask(bridge, GetOpenBatches(feed_id), timeout=10)
            by_partition: dict[int, list[str]] = {}
            for p, b in cast(OpenBatches, open_).batches:
                by_partition.setdefault(p, []).append(str(b))
            listed += [f"partition {p} (batches {','.join(b)}) at {bridge}" for p, b in sorted(by_partition.items())]
        raise FeedError(f"feed {feed_id!r}: no more of its rows were processed within {plan.timeout} s: "
                        f"{'; '.join(listed)}. Their rows are stored and still being delivered; feed the same "
                        "feed_id again to wait for them. A destination that raises on a row (see "
                        "system.errors() or `reprise status`) gets it again until it applies it: fix that first")
    return sum(d for d, _ in released.values()), sum(k for _, k in released.values())


def _processed_rows(system: actors.System, feed_id: str, bridges: set[str]) -> int:
    """Rows of `feed_id` processed so far at `bridges` (a bridge that does not answer counts none)."""
    done = 0
    for bridge in sorted(bridges):
        try:
            reply = system.ask(bridge, GetFeedProgress(feed_id), timeout=10)
        except AskTimeout:
            continue
        if isinstance(reply, FeedProgress):
            done += reply.processed
    return done


def refused_message(reply: ReleaseRefused, bridge: str, others: list[str], run: str,
                    partitions: list[int] | None = None) -> str:
    """Why a Release was refused and what to do: the FeedError of a run discarded before its commit."""
    if reply.run != run:  # an earlier run's release, resent by this one (a bridge per node): it stays refused
        which = f"partitions {', '.join(map(str, sorted(partitions)))}" if partitions else "its partitions there"
        # Only those rows: the feed's other partitions were delivered, and a new feed_id for the whole feed would
        # deliver them twice.
        return (f"feed {reply.feed_id!r}: the earlier run {reply.run}, whose release this run resent, was "
                f"discarded by the bridge {bridge} {reply.explain()}: the coordinator had decided {which}, but "
                "their rows staged there are gone and were never delivered, and a rerun of this feed_id skips "
                f"them. The feed's other partitions were delivered: feed only the rows of {which} again, under a "
                "new feed_id (the whole feed under a new feed_id would deliver the others twice)")
    done = (f"{', '.join(sorted(set(others)))} released theirs" if others
            else "nothing of this run was delivered")
    return (f"feed {reply.feed_id!r}: run {reply.run} was discarded by the bridge {bridge} {reply.explain()} "
            f"before its release arrived: the rows it had staged there are gone and were not delivered "
            f"({done}). Run the feed again with the same feed_id: its released partitions are not delivered "
            "twice, the others are staged again (a rerun is a new run). If this driver was merely slow, raise the bridge's staged_ttl "
            "(start_bridge(..., staged_ttl=SECONDS))")


def _results_dir() -> str:
    """The directory of committed writes' results, created private to this user."""
    given = os.environ.get(RESULTS_DIR)
    where = given or os.path.join(tempfile.gettempdir(), f"reprise-spark-results-{os.getuid()}")
    os.makedirs(where, mode=0o700, exist_ok=True)
    # lstat, not stat: in a shared temp dir another user can put a symlink at this name, to any directory of ours,
    # and results would be written there, and that directory's oldest .json files pruned (security audit).
    st = os.lstat(where)
    if stat.S_ISLNK(st.st_mode) and not given:
        raise FeedError(f"{where} is a symbolic link (in a shared temp dir, anyone's): remove it, or set {RESULTS_DIR} "
                        "to a directory of yours")
    if os.stat(where).st_uid != os.getuid():  # a shared temp dir: never trust another user's directory
        raise FeedError(f"{where} belongs to another user: set {RESULTS_DIR} to a directory of yours")
    if not given and st.st_mode & 0o077:
        os.chmod(where, 0o700)  # (ours, made by an older version or by hand: others could plant results in it)
    return where


def _result_file(feed_id: str) -> str:
    return os.path.join(_results_dir(), hashlib.sha256(feed_id.encode()).hexdigest()[:32] + ".json")


def _remember(result: FeedResult) -> None:
    """Log a committed write at INFO and keep it for `last_write_result` (save() cannot return it)."""
    log.info("feed %r committed: %d rows, %d duplicates skipped, %d dead-lettered, %d of other attempts "
             "discarded, in %.2f s (%.0f rows/s)", result.feed_id, result.rows, result.duplicates_skipped,
             result.dead_lettered, result.discarded, result.seconds, result.rows_per_second)
    if result.dead_lettered:
        # Not an error of the write (the rows were released), but they reached no actor, and a rerun of this feed id
        # delivers nothing again: a mistyped `to`, or destinations not spawned yet, must not pass unseen.
        log.warning("feed %r: %d of its %d rows were dead-lettered (no actor serves their paths): see "
                    "system.dead_letters() or `reprise status` for the paths; spawn their destinations (or fix `to`) "
                    "and feed those rows under a new feed_id (a rerun of this one delivers nothing again)",
                    result.feed_id, result.dead_lettered, result.rows)
    try:
        _keep(result)
    except (OSError, FeedError) as e:  # the rows are released: failing the write now would only mislead
        log.warning("feed %r: its result cannot be kept for last_write_result: %s", result.feed_id, e)


def _keep(result: FeedResult) -> None:
    # Spark runs a data source's commit in a Python worker of the driver's host, not in the driver's own
    # process: a file on that host is what both see. Written whole, then renamed: readers never see half.
    path = _result_file(result.feed_id)
    fd, partial = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".partial")
    try:
        with os.fdopen(fd, "w") as f:
            json.dump(dataclasses.asdict(result), f)
        os.replace(partial, path)
    except BaseException:  # (a full disk: not one more file left behind for each commit)
        with contextlib.suppress(OSError):
            os.unlink(partial)
        raise
    entries = list(os.scandir(os.path.dirname(path)))
    # A .partial whose writer was killed mid-write is never renamed: removed once no writer can still be at it.
    now = time.time()
    for stale in [e for e in entries if e.name.endswith(".partial") and now - _mtime(e) > PARTIAL_STALE]:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(stale.path)
    # Files written within a clock tick share an mtime: the one just written is never a candidate.
    older = [e for e in entries if e.name.endswith(".json") and e.path != path]
    if len(older) >= KEPT_RESULTS:
        for old in sorted(older, key=_mtime)[:len(older) - KEPT_RESULTS + 1]:
            try:
                os.unlink(old.path)
            except FileNotFoundError:  # another commit pruned it first
                pass


def _mtime(entry: os.DirEntry[str]) -> float:
    try:
        return entry.stat().st_mtime
    except FileNotFoundError:
        return 0.0


def last_write_result(feed_id: str) -> FeedResult | None:
    """The FeedResult of the last committed write of `feed_id` on this host, or None if there is none.

    `df.write.format("reprise").save()` returns nothing: call this in the driver after it, with the write's
    `feed_id` option (for a stream's micro-batch: `f"{feed_id or query id}/{batch id}"`). `feed` and each
    micro-batch of `feed_stream` are kept too; the last KEPT_RESULTS per host, in $REPRISE_SPARK_RESULTS
    (set it before the SparkSession starts: Spark's workers inherit its environment) or a private directory
    in the temp dir. Each committed write is also logged at INFO on the `spark_bridge` logger, in the
    process that committed it.
    """
    try:
        with open(_result_file(feed_id)) as f:
            return FeedResult(**json.load(f))
    except FileNotFoundError:
        return None


def discard_run(plan: _Plan, feed_id: str) -> None:
    """Forget what the attempts of an aborted run staged (best effort: a run never released stays unseen)."""
    try:
        system = actors.connect(plan.port, host=plan.host)
    except actors.SystemNotRunning:
        return
    try:
        probe = system.probe(f"spark-abort-{uuid.uuid4().hex[:8]}")
        waiting = len({BRIDGE_PATH, *plan.bridges})
        for bridge in sorted({BRIDGE_PATH, *plan.bridges}):
            system.tell(bridge, Discard(feed_id, plan.run, probe.path))
        deadline = time.monotonic() + min(plan.timeout, 10.0)
        while time.monotonic() < deadline:
            if isinstance(probe.receive(deadline - time.monotonic()), Discarded):
                waiting -= 1  # (each bridge answers once)
                if not waiting:
                    return
    except AskTimeout:
        pass
    finally:
        system.close()


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


def has_map(data_type: Any) -> bool:
    name = type(data_type).__name__
    if name == "MapType":
        return True
    if name == "ArrayType":
        return has_map(data_type.elementType)
    if name == "StructType":
        return any(has_map(f.dataType) for f in data_type.fields)
    return False


def check_columns(schema: Any) -> None:
    """Fail before the job when a column's values (of a StructType) cannot travel as msgpack in the row dict."""
    for f in schema.fields:
        why = _unsupported(f.dataType)
        if why:
            raise FeedError(f"column {f.name!r} has type {why}, which msgpack cannot carry; cast it (e.g. "
                            f"`df.withColumn({f.name!r}, col({f.name!r}).cast('string'))`) or pass message=... "
                            "to build the message yourself")


def check_system(host: str, port: int) -> tuple[str, ...]:
    """Fail fast, before any Spark job, when the system or the bridge is not there; the node bridges' paths."""
    try:
        system = actors.connect(port, host=host)
    except actors.SystemNotRunning as exc:
        raise FeedError(f"cannot feed: {exc}") from None
    try:
        hosts = system.status().hosts
    finally:
        system.close()
    info = hosts.get(BRIDGE_PATH)
    # A bridge that is (re)starting or backing off comes back by itself, and the guardian holds what the
    # tasks send it meanwhile: only one that is gone for good fails the feed.
    if info is None or info.state not in ("running", "starting", "restarting", "backoff"):
        state = "not started" if info is None else info.state
        raise FeedError(f"cannot feed: the bridge {BRIDGE_PATH} is {state} in the actor system on {host}:{port}; "
                        + HOW_TO_START)
    # Node bridges that stopped for good are left out: their nodes' tasks stage at the coordinator.
    return tuple(sorted(path for path, h in hosts.items() if path.startswith(BRIDGES_PATH + "/")
                        and h.state in ("running", "starting", "restarting", "backoff")))


def _progress(df: DataFrame, plan: _Plan, stream: TextIO) -> Poller | None:
    """A polling progress bar on `stream`, or None when it is not a terminal."""
    if not is_terminal(stream):
        return None
    total = df.count()
    processed = plan.processed
    label = "rows processed" if processed else "rows persisted"
    system = actors.connect(plan.port, host=plan.host)

    def fetch() -> int:
        done = 0
        for bridge in (BRIDGE_PATH, *plan.bridges):
            p = system.ask(bridge, GetFeedProgress(plan.feed_id), timeout=5)
            done += p.processed if processed and isinstance(p, FeedProgress) else p.accepted
        return done

    poller = Poller(ProgressBar(total, stream, label), fetch).start()
    poller.system = system  # type: ignore[attr-defined]  # closed with the poller
    return poller


def feed(df: DataFrame, system: object, to: str | Callable[[Row], str] = "destination",
         message: Callable[[Row], object] | None = None, key: str | None = None, feed_id: str | None = None,
         ack: str = "persisted", batch_size: int = 2_000, window: int = 8, timeout: float = 60.0,
         progress: bool | TextIO = True, *, _micro_batch: bool = False) -> FeedResult:
    """Send every row of `df` to the actor at its path through the bridge.

    Returns once every row is durable in the bridge (ack="persisted") or confirmed by its destination
    together with everything anchored to it (ack="processed"). `timeout`: seconds a batch, a release or
    the coordinator may go unanswered, and, with ack="processed", seconds in which no more rows of the
    feed were processed (however long the whole feed takes). `progress`: draw a bar on stderr (or on the
    given stream) when it is a terminal; False never does.
    """
    _check_frame(df, streaming=False)
    target = _check_feed_args(df, to, message, key, feed_id, ack, batch_size, window, timeout)
    if feed_id is not None and "/" in feed_id and not _micro_batch:
        raise ValueError(check_batch_feed_id(feed_id))
    host, port = _address(system)
    bridges = check_system(host, port)
    # Executors run the driver's Python, so that actor and message classes import the same way there.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    feed_id = feed_id or f"feed-{uuid.uuid4().hex}"
    plan = make_plan(host, port, feed_id, target, message, key, batch_size, window, float(timeout), ack,
                     bridges=bridges, attach=spark_attach(df.sparkSession))
    stream = sys.stderr if progress is True else progress
    poller = (_progress(df, plan, cast(TextIO, stream))  # (a stream: not False)
              if progress is not False else None)
    started = time.monotonic()
    parts: list[tuple[Any, ...]] = []
    try:
        # collect() keeps one result per partition, from the attempt Spark accepted: the job's commit.
        try:
            if message is None and not callable(target) and not any(has_map(f.dataType) for f in df.schema.fields):
                parts = [tuple(r) for r in df.mapInArrow(lambda it: _stage_arrow_batches(plan, it),
                                                         _RESULT_SCHEMA).collect()]
            else:
                parts = df.rdd.mapPartitions(lambda it: stage_rows(plan, it)).collect()
        except BaseException as exc:
            discard_run(plan, feed_id)
            raise_if_gone(plan, feed_id, exc, released=False, micro_batch=_micro_batch)
            raise
        try:
            return commit_run(plan, feed_id, parts, started)
        except Exception as exc:
            raise_if_gone(plan, feed_id, exc, released=True, micro_batch=_micro_batch)
            raise
    finally:
        if poller is not None:
            poller.stop(sum(p[2] for p in parts))
            poller.system.close()  # type: ignore[attr-defined]


def raise_if_gone(plan: _Plan, feed_id: str, exc: BaseException, released: bool, micro_batch: bool,
                   rerun: str | None = None) -> None:
    """FeedSystemDown when the actor system went down while the feed ran: its tasks (or its commit) met
    MessageNotSent or SystemNotRunning inside Spark's own exception, which named neither the cause nor the fix.

    `rerun` says how to run it again with the same feed id (default: feed()'s feed_id= argument).
    """
    if not isinstance(exc, Exception) or isinstance(exc, FeedError):
        return  # (a Ctrl-C, or a FeedError that says what happened itself)
    try:
        actors.connect(plan.port, host=plan.host).close()
    except actors.SystemNotRunning:
        pass  # (gone: say so below)
    except Exception:  # noqa: BLE001 - (a secret or TLS problem: not this; the original error stands)
        return
    else:
        return  # (the system is there: the failure was something else)
    where = "releasing its rows" if released else "staging its rows"
    what = ("some of its partitions may have been released (a restarted system delivers them from its journal)"
            if released else "none of its rows were released, so none were delivered by this run")
    if micro_batch:
        rerun = "restart the query from its checkpoint"
    elif rerun is None:
        rerun = f"run the feed again with feed_id={feed_id!r}"
    raise FeedSystemDown(f"feed {feed_id!r}: the actor system on {plan.host}:{plan.port} went down while the feed "
                         f"was {where}; {what}. Start the system again (on the same journal) and {rerun}: what a feed "
                         "id released is never delivered twice") from None


def make_plan(host: str, port: int, feed_id: str, to: str | PathTemplate | Callable[[Row], str],
              message: Callable[[Row], object] | None, key: str | None, batch_size: int, window: int,
              timeout: float, ack: str, bridges: tuple[str, ...] = (),
              attach: tuple[str | None, int | None] = (None, None)) -> _Plan:
    """The plan of one run (a new run id: its task attempts stage under it)."""
    return _Plan(host, port, feed_id, to, message, key, batch_size, window, timeout,
                 resend_after=max(0.5, min(5.0, timeout / 6)), processed=ack == "processed",
                 run=uuid.uuid4().hex[:16], bridges=bridges, attach_host=attach[0], attach_port=attach[1])


def spark_attach(session: Any) -> tuple[str | None, int | None]:
    """(host, port) from the Spark conf keys spark.reprise.host / spark.reprise.port, (None, None) when unset."""
    if session is None:
        return None, None
    host = session.conf.get(HOST_CONF, None) or None
    raw = session.conf.get(PORT_CONF, None)
    if not raw:
        return host, None
    if not str(raw).strip().isdigit() or not 0 < int(raw) < 65536:
        raise FeedError(f"Spark conf {PORT_CONF}={raw!r} is not a TCP port; set it to the admin port of the actor "
                        f"system the executors attach to, e.g. .config({PORT_CONF!r}, '1900')")
    return host, int(raw)


def check_to(to: str, columns: list[str]) -> str | PathTemplate:
    """A column name, or (starting with "/") a path template whose placeholders are columns."""
    if not to.startswith("/"):
        if to not in columns:
            raise ValueError(f"to={to!r} is not a column of the DataFrame (columns: {columns}); give a column "
                             'holding each row\'s path or a path template like "/user/accounts/{account}"')
        return to
    template = PathTemplate.parse(to)
    missing = [c for c in template.columns if c not in columns]
    if missing:
        raise ValueError(f"to={to!r}: placeholder {{{missing[0]}}} is not a column of the DataFrame (columns: "
                         f"{columns})")
    try:  # (with "x" for each placeholder: a wildcard or an empty segment fails every row, so fail now)
        actors.validate_path(template.render([["x"] for _ in template.columns], 1)[0], what=f"to={to!r}")
    except actors.InvalidPath as e:
        raise ValueError(str(e)) from None
    return template


def check_path_column(schema: Any, to: object) -> None:
    """ValueError when `to` names a column that is not a string column (its values are the rows' paths)."""
    if isinstance(to, str):
        kind = schema[to].dataType
        if type(kind).__name__ not in ("StringType", "CharType", "VarcharType", "NullType"):
            raise ValueError(f"to={to!r} names a column of type {kind.simpleString()}, not string: a column given as "
                             f"`to` holds each row's destination path; to build paths from its values, give a path "
                             f"template, e.g. to=\"/user/accounts/{{{to}}}\"")


_KEY_TYPES = {"BooleanType", "ByteType", "ShortType", "IntegerType", "LongType", "FloatType", "DoubleType",
              "StringType", "CharType", "VarcharType", "BinaryType", "NullType"}
"""Spark types whose values (bool, int, float, str, bytes) the bridge can compare as idempotency keys."""


def check_key_column(schema: Any, key: str | None) -> None:
    """ValueError when `key` is not a column, or is one whose values cannot be idempotency keys (array, map, struct:
    lists and dicts, which the bridge cannot hash)."""
    if key is None:
        return
    if key not in schema.fieldNames():
        raise ValueError(f"key={key!r} is not a column of the DataFrame (columns: {schema.fieldNames()})")
    kind = schema[key].dataType
    if type(kind).__name__ not in _KEY_TYPES:
        raise ValueError(f"key={key!r} names a column of type {kind.simpleString()}: an idempotency key must be a "
                         f"string, number, boolean or binary value; derive one, e.g. "
                         f"`df.withColumn({key!r}, to_json(col({key!r})))`")


def check_batch_feed_id(feed_id: str) -> str:
    """Why a batch feed may not be named `feed_id` (one with a '/'), for the caller's error."""
    return (f"feed_id {feed_id!r} has a '/': the feeds of a stream's micro-batches are named '<feed id>/<batch id>' "
            "(feed_stream, writeStream), so a batch feed named so could be taken for one of them (its rows, or "
            f"theirs, skipped as already delivered); use another separator, e.g. {feed_id.replace('/', '-')!r}")


def _check_timeout(timeout: object) -> None:
    """ValueError unless `timeout` is a finite number of seconds above 0 (NaN never expires: a feed would wait on)."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not 0 < timeout < math.inf:
        raise ValueError(f"timeout must be a number of seconds > 0, got {timeout!r}")


def _check_frame(df: object, streaming: bool) -> None:
    """TypeError unless `df` is a DataFrame, ValueError unless it is (`streaming`) or is not a streaming one."""
    if not hasattr(df, "isStreaming") or not hasattr(df, "schema"):
        raise TypeError(f"df must be a pyspark DataFrame, got a {type(df).__name__}")
    if df.isStreaming and not streaming:
        raise ValueError("df is a streaming DataFrame: feed it with spark_bridge.feed_stream(df, system, feed_id=..., "
                         "checkpoint=..., to=...), or df.writeStream.format(\"reprise\")")
    if not df.isStreaming and streaming:
        raise ValueError("stream_df is not a streaming DataFrame: feed it with spark_bridge.feed(df, system, to=...), "
                         "or df.write.format(\"reprise\")")


def _check_feed_args(df: DataFrame, to: str | Callable[[Row], str], message: Callable[[Row], object] | None,
                     key: str | None, feed_id: str | None, ack: str, batch_size: int, window: int,
                     timeout: float) -> str | PathTemplate | Callable[[Row], str]:
    """feed()'s and feed_stream()'s arguments checked against `df` (ValueError or TypeError naming one); the
    destination as a task takes it."""
    if ack not in ACK_MODES:
        raise ValueError(f"ack must be one of {ACK_MODES}, got {ack!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
    if isinstance(window, bool) or not isinstance(window, int) or window < 1:
        raise ValueError(f"window must be an int >= 1, got {window!r}")
    _check_timeout(timeout)
    if not (isinstance(to, str) or callable(to)):
        raise TypeError(f"to must be a column name, a path template or a callable Row -> path, got {to!r}")
    target = check_to(to, df.columns) if isinstance(to, str) else to
    check_path_column(df.schema, target)
    check_key_column(df.schema, key)
    if message is not None and not callable(message):
        raise TypeError(f"message must be a callable Row -> message, got {message!r}")
    if feed_id is not None and (not isinstance(feed_id, str) or not feed_id):
        raise ValueError(f"feed_id must be a non-empty string, got {feed_id!r}")
    if message is None:
        check_columns(df.schema)
    return target


def feed_stream(stream_df: DataFrame, system: object, *, feed_id: str, checkpoint: str, to: str | Callable[[Row], str] = "destination",
                message: Callable[[Row], object] | None = None, key: str | None = None, ack: str = "persisted",
                batch_size: int = 2_000, window: int = 8, timeout: float = 60.0, trigger: dict[str, Any] | None = None) -> StreamingQuery:
    """Feed a streaming DataFrame through foreachBatch; returns the started StreamingQuery.

    Each micro-batch is fed as `f"{feed_id}/{batch_id}"`: Spark replays an uncommitted micro-batch with
    the same id and the same data after a restart from `checkpoint`, so the bridge skips what it
    already stored. `feed_id` must therefore stay the same across restarts of the query.
    """
    # Checked now, not in micro-batch 0 (after the query started and made its checkpoint): "" too, which would
    # name every micro-batch "/N", shared by every other query fed so.
    _check_frame(stream_df, streaming=True)
    if not isinstance(checkpoint, str | os.PathLike) or not str(checkpoint):
        raise ValueError(f"checkpoint must be the query's checkpoint location (a directory path or URI, kept across "
                         f"restarts: a query restarted without it numbers its micro-batches from 0 again), got "
                         f"{checkpoint!r}")
    _check_feed_args(stream_df, to, message, key, feed_id if feed_id is not None else "", ack, batch_size, window,
                     timeout)
    host, port = _address(system)
    check_system(host, port)

    def each(batch_df: DataFrame, batch_id: int) -> None:
        feed(batch_df, f"{host}:{port}", to=to, message=message, key=key, feed_id=f"{feed_id}/{batch_id}",
             ack=ack, batch_size=batch_size, window=window, timeout=timeout, progress=False, _micro_batch=True)

    writer = stream_df.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()

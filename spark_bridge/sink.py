"""The bridge as a Spark data sink: `df.write.format("reprise")` and `df.writeStream.format("reprise")`.

    import spark_bridge
    spark_bridge.register(spark)
    (df.write.format("reprise").option("port", admin_port).option("to", "/user/accounts/{account}")
       .option("feed_id", "deposits-2026-11-21").mode("append").save())

Every row goes to the actor at its path as a `Row` whose body is the row as a dict, with the guarantees
of `feed()` (spark_bridge.feed holds the one implementation both use). Spark's commit protocol: each
task attempt stages its batches in the bridge's journal under the attempt, and the driver's job commit
(`DataSourceWriter.commit`, which gets the commit messages of the winning attempts only) releases them;
rows of failed or speculative attempts, whatever their content, are never delivered. An aborted job's
batches are discarded. `save()` returns once the release is durable (ack="persisted") or once every row
and its follow-ups were confirmed (ack="processed"). It returns nothing: the job's commit (which Spark
runs in a Python worker on the driver's host) keeps the write's FeedResult for `spark_bridge.last_write_result(
feed_id)` in the driver, and logs it at INFO on the `spark_bridge` logger of that worker.

A streaming query (`writeStream...start()`) feeds micro-batch `b` as the feed `f"{feed_id}/{b}"`; without
a `feed_id` option, the query's id, which Spark keeps in the checkpoint. A micro-batch replayed after a
restart from the checkpoint is thus a duplicate of what was released: no loss, nothing twice.

Options (all strings, as Spark passes them):

- port (required): the admin port of the actor system running the bridge; host (default 127.0.0.1);
- to (default "destination"): a column holding each row's path, or a path template starting with "/"
  whose {column} placeholders are replaced by the row's values, e.g. "/user/accounts/{account}";
- ack: "persisted" (default) or "processed"; feed_id; key: a column of idempotency keys (rows are then
  deduplicated by key instead of by partition); batch_size (2000); window (8); timeout (60 seconds).
"""

from __future__ import annotations

import math
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    DataSourceStreamWriter,
    DataSourceWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import StructType

from spark_bridge.bridge import BRIDGE_PATH
from spark_bridge.feed import (
    ACK_MODES,
    FeedError,
    _Plan,
    check_batch_feed_id,
    check_columns,
    check_key_column,
    check_path_column,
    check_system,
    check_to,
    commit_run,
    discard_run,
    has_map,
    make_plan,
    raise_if_gone,
    spark_attach,
    stage_arrow,
    stage_rows,
)

__all__ = ["SINK_NAME", "RepriseSink", "SinkCommit", "SinkOptionError", "SinkOptions", "parse_options"]

SINK_NAME = "reprise"
_DEFAULTS = {"host": "127.0.0.1", "to": "destination", "ack": "persisted", "batch_size": "2000", "window": "8",
             "timeout": "60"}
_OPTIONS = ("port", "host", "to", "ack", "feed_id", "key", "batch_size", "window", "timeout")
_SPARK_OPTIONS = ("path", "checkpointlocation")  # Spark's own, passed along to every sink
BATCH_ID = "streaming.sql.batchId"
QUERY_ID = "sql.streaming.queryId"
"""Local properties Spark sets for the tasks of a micro-batch (the query's id is kept in its checkpoint)."""


class SinkOptionError(FeedError, ValueError):
    """A reprise sink was given a bad option: the message names it and how to fix it."""


@dataclass(frozen=True)
class SinkOptions:
    """The checked options of one write."""

    port: int
    host: str = "127.0.0.1"
    to: str = "destination"
    ack: str = "persisted"
    feed_id: str | None = None
    key: str | None = None
    batch_size: int = 2_000
    window: int = 8
    timeout: float = 60.0


def _number(options: Mapping[str, str], name: str, kind: type[int] | type[float], low: float) -> Any:
    raw = options.get(name, _DEFAULTS.get(name))
    try:
        value = kind(str(raw).strip())
    except ValueError:
        value = None
    if value is None or not low <= value < math.inf:  # (NaN and inf too: a timeout that never expires)
        what = "an integer" if kind is int else "a finite number of seconds"
        raise SinkOptionError(f'{SINK_NAME}: option "{name}" must be {what} >= {low:g}, got {raw!r}, e.g. '
                              f'.option("{name}", "{_DEFAULTS.get(name, 1)}")')
    return value


def parse_options(options: Mapping[str, str]) -> SinkOptions:
    """Check a write's options; raise SinkOptionError naming the option and how to fix it."""
    unknown = sorted(k for k in options if k.lower() not in _OPTIONS + _SPARK_OPTIONS)
    if unknown:
        raise SinkOptionError(f"{SINK_NAME}: unknown option {unknown[0]!r}; the options are {', '.join(_OPTIONS)}")
    if not options.get("port"):
        raise SinkOptionError(f'{SINK_NAME}: option "port" is required: the admin port of the actor system running '
                              f'the bridge, e.g. .option("port", 1900)')
    port = _number(options, "port", int, 1)
    if port > 65535:
        raise SinkOptionError(f'{SINK_NAME}: option "port" must be a TCP port (1..65535), got {options["port"]!r}')
    ack = options.get("ack", "persisted")
    if ack not in ACK_MODES:
        raise SinkOptionError(f'{SINK_NAME}: option "ack" must be one of {ACK_MODES}, got {ack!r}')
    for name in ("to", "feed_id", "key", "host"):
        if name in options and not options[name]:
            raise SinkOptionError(f'{SINK_NAME}: option "{name}" must not be empty (leave it out for the default)')
    return SinkOptions(port, options.get("host", "127.0.0.1"), options.get("to", "destination"), ack,
                       options.get("feed_id"), options.get("key"), _number(options, "batch_size", int, 1),
                       _number(options, "window", int, 1), _number(options, "timeout", float, 0.001))


def _plan(options: Mapping[str, str], schema: StructType, feed_id: str) -> tuple[_Plan, bool]:
    """The plan of a write after every check that can fail before the job; (plan, arrow?)."""
    o = parse_options(options)
    columns = schema.fieldNames()
    try:
        to = check_to(o.to, columns)
        check_path_column(schema, to)
    except ValueError as e:
        raise SinkOptionError(f'{SINK_NAME}: option "to": {e}') from None
    if o.key is not None and o.key not in columns:
        raise SinkOptionError(f'{SINK_NAME}: option "key": {o.key!r} is not a column (columns: {columns})')
    try:
        check_key_column(schema, o.key)
    except ValueError as e:
        raise SinkOptionError(f'{SINK_NAME}: option "key": {e}') from None
    try:
        check_columns(schema)
    except FeedError as e:
        raise SinkOptionError(f"{SINK_NAME}: {e}".replace(" or pass message=... to build the message yourself", "")
                              ) from None
    bridges = check_system(o.host, o.port)
    plan = make_plan(o.host, o.port, o.feed_id or feed_id, to, None, o.key, o.batch_size, o.window, o.timeout, o.ack,
                     bridges=bridges, attach=spark_attach(_active_session()))
    # Arrow gives a map as a list of pairs: rows with maps go through Row objects (asDict).
    return plan, not any(has_map(f.dataType) for f in schema.fields)


def _active_session() -> Any:
    """The SparkSession of this process if there is one (the writer may be built in a Python worker: none)."""
    from pyspark.sql import SparkSession

    return SparkSession.getActiveSession()


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """One task attempt's commit message: what it staged for `feed_id`, and at which bridge."""

    feed_id: str
    partition: int
    attempt: str
    rows: int
    duplicates: int
    dead: int
    bridge: str = BRIDGE_PATH

    def staged(self) -> tuple[int, str, int, int, int, str]:
        """(partition, attempt, rows, duplicates, dead, bridge), as commit_run takes them."""
        return self.partition, self.attempt, self.rows, self.duplicates, self.dead, self.bridge


def _commit(plan: _Plan, feed_id: str, messages: Sequence[WriterCommitMessage | None]) -> None:
    mine = [m.staged() for m in messages if isinstance(m, SinkCommit)]
    commit_run(plan, feed_id, mine, time.monotonic(), len(messages))


@contextmanager
def _saying_if_gone(plan: _Plan, feed_id: str, released: bool, micro_batch: bool = False) -> Iterator[None]:
    """Raise FeedSystemDown when the body failed because the actor system went down under the write.

    Spark wrapped the tasks' "no actor system listens ... start one first" and the commit's "stopped while this
    client waited" in its own error: nothing said the write was cut, what became of its rows, or to rerun it.
    """
    try:
        yield
    except Exception as exc:
        raise_if_gone(plan, feed_id, exc, released=released, micro_batch=micro_batch,
                      rerun=f'run the write again with .option("feed_id", {feed_id!r})')
        raise


class _BatchWriter(DataSourceWriter):
    """df.write: tasks stage, the job's commit releases (or its abort discards)."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        """Stage this task attempt's rows (Row objects)."""
        with _saying_if_gone(self.plan, self.plan.feed_id, released=False):
            return SinkCommit(self.plan.feed_id, *next(stage_rows(self.plan, iterator)))

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        """Release the winning attempts' batches; wait as ack asks."""
        with _saying_if_gone(self.plan, self.plan.feed_id, released=True):
            _commit(self.plan, self.plan.feed_id, messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        """Discard what the job's attempts staged."""
        discard_run(self.plan, self.plan.feed_id)


class _ArrowBatchWriter(_BatchWriter, DataSourceArrowWriter):
    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        """Stage this task attempt's rows (Arrow record batches: no row objects)."""
        with _saying_if_gone(self.plan, self.plan.feed_id, released=False):
            return SinkCommit(self.plan.feed_id, *stage_arrow(self.plan, iterator))


def _micro_batch_feed(plan: _Plan) -> str:
    """The feed id of the running task's micro-batch: f"{feed_id or query id}/{batch id}"."""
    from pyspark import TaskContext

    context = TaskContext.get()
    batch_id = context.getLocalProperty(BATCH_ID) if context is not None else None
    if batch_id is None:
        raise FeedError(f"{SINK_NAME}: a streaming write ran outside a micro-batch (no {BATCH_ID} property)")
    base = plan.feed_id or context.getLocalProperty(QUERY_ID)  # type: ignore[union-attr]
    return f"{base}/{batch_id}"


class _StreamWriter(DataSourceStreamWriter):
    """writeStream: each micro-batch is one feed, released by the batch's commit."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        """Stage this task attempt's rows of the micro-batch (Row objects)."""
        feed_id = _micro_batch_feed(self.plan)
        with _saying_if_gone(self.plan, feed_id, released=False, micro_batch=True):
            rows = next(stage_rows(_replace_feed(self.plan, feed_id), iterator))
        return SinkCommit(feed_id, *rows)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803 (Spark's name)
        """Release the micro-batch's winning attempts."""
        feeds = {m.feed_id for m in messages if isinstance(m, SinkCommit)}
        for feed_id in feeds:  # one, unless the query's id changed under it (it does not)
            if not feed_id.endswith(f"/{batchId}"):
                raise FeedError(f"{SINK_NAME}: micro-batch {batchId} committed tasks of {feed_id!r}")
            mine = _of_feed(messages, feed_id)
            with _saying_if_gone(self.plan, feed_id, released=True, micro_batch=True):
                _commit(_tasks_run(self.plan, mine), feed_id, mine)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        """Discard what the micro-batch's attempts staged (those that reported; the rest stays unseen)."""
        for feed_id in {m.feed_id for m in messages if isinstance(m, SinkCommit)}:
            discard_run(_tasks_run(self.plan, _of_feed(messages, feed_id)), feed_id)


def _of_feed(messages: list[WriterCommitMessage | None], feed_id: str) -> list[SinkCommit]:
    """The commit messages of the tasks that staged for `feed_id`."""
    return [m for m in messages if isinstance(m, SinkCommit) and m.feed_id == feed_id]


def _tasks_run(plan: _Plan, messages: list[SinkCommit]) -> _Plan:
    """`plan` with the run its tasks staged under (their attempts are f"{run}/{task attempt}").

    Spark makes a new stream writer, so a new plan and run id, for a micro-batch's commit and abort: a Release or
    Discard under that one named a run the bridge never saw (a discarded run's commit was answered "released",
    an aborted one's batches stayed staged).
    """
    from dataclasses import replace

    runs = {m.attempt.split("/", 1)[0] for m in messages}
    if len(runs) > 1:
        raise FeedError(f"{SINK_NAME}: the tasks of one micro-batch staged under several runs: {sorted(runs)}")
    return replace(plan, run=runs.pop()) if runs else plan


class _ArrowStreamWriter(_StreamWriter, DataSourceStreamArrowWriter):
    def write(self, iterator: Iterator[Any]) -> SinkCommit:
        """Stage this task attempt's rows of the micro-batch (Arrow record batches)."""
        feed_id = _micro_batch_feed(self.plan)
        with _saying_if_gone(self.plan, feed_id, released=False, micro_batch=True):
            return SinkCommit(feed_id, *stage_arrow(self.plan, iterator, feed_id))


def _replace_feed(plan: _Plan, feed_id: str) -> _Plan:
    from dataclasses import replace

    return replace(plan, feed_id=feed_id)


class RepriseSink(DataSource):
    """The data source "reprise": write-only (batch and streaming), into actors through the bridge."""

    @classmethod
    def name(cls) -> str:
        """The format name: `df.write.format("reprise")`."""
        return SINK_NAME

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        """A batch writer, after checking the options, the columns and that the bridge is there."""
        import uuid

        if overwrite:  # (actors cannot be "overwritten": taking it as append would say yes to what cannot be done)
            raise SinkOptionError(f'{SINK_NAME}: mode("overwrite") is not supported: each row is sent to its actor, '
                                  'nothing is replaced; use .mode("append")')
        plan, arrow = _plan(self.options, schema, f"feed-{uuid.uuid4().hex}")
        if "/" in plan.feed_id:
            raise SinkOptionError(f'{SINK_NAME}: option "feed_id": {check_batch_feed_id(plan.feed_id)}')
        return _ArrowBatchWriter(plan) if arrow else _BatchWriter(plan)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:  # noqa: N802
        """A streaming writer (feed id per micro-batch: see the module's docstring)."""
        if overwrite:  # (Spark's outputMode("complete"): every micro-batch would send the whole result table again)
            raise SinkOptionError(f'{SINK_NAME}: outputMode("complete") is not supported: each micro-batch would send '
                                  'every row of the result table to its actor again; use outputMode("append") or '
                                  '("update")')
        plan, arrow = _plan(self.options, schema, "")
        return _ArrowStreamWriter(plan) if arrow else _StreamWriter(plan)

"""feed(): push a Spark DataFrame's rows through the bridge to actors by path, with publisher confirms."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import actors
from actors import AskTimeout
from journal.errors import SerializationError
from journal.serialization import serialize
from spark_bridge.bridge import BRIDGE_PATH
from spark_bridge.messages import BatchAccepted, IngestBatch

HOW_TO_START = ("start the bridge in the actor system first: "
                "`from spark_bridge import start_bridge; start_bridge(actors.connect(PORT))`")


@dataclass(frozen=True)
class FeedResult:
    """What a feed did: rows sent, rows skipped as duplicates, rows dead-lettered, wall time and rate."""

    rows: int
    duplicates_skipped: int
    dead_lettered: int
    seconds: float
    rows_per_second: float


class FeedError(RuntimeError):
    """A feed could not start or a partition could not be confirmed."""


@dataclass(frozen=True)
class _Plan:
    """Everything a task needs (pickled to the executors)."""

    host: str
    port: int
    feed_id: str
    to: Any  # column name or callable Row -> path
    message: Callable | None
    key: str | None
    batch_size: int
    window: int
    timeout: float
    resend_after: float


def _address(system: Any) -> tuple[str, int]:
    """(host, admin port) from a port, "host:port" or a System."""
    if isinstance(system, actors.System):
        return "127.0.0.1", int(system.admin_port)
    if isinstance(system, int):
        return "127.0.0.1", system
    if isinstance(system, str) and ":" in system:
        host, port = system.rsplit(":", 1)
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


def _unserializable_column(rows: list[tuple[str, Any]], exc: Exception) -> FeedError:
    """Find the first value msgpack cannot carry and name its column."""
    for _, message in rows:
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


def _convert(plan: _Plan, row: Any) -> tuple[str, Any, Any]:
    path = row[plan.to] if isinstance(plan.to, str) else plan.to(row)
    message = row.asDict() if plan.message is None else plan.message(row)
    key = row[plan.key] if plan.key is not None else None
    return path, message, key


def _run_partition(plan: _Plan, partition: int, rows: Iterator[Any]) -> Iterator[tuple[int, int, int]]:
    """One Spark task: batches to the bridge with up to `window` unconfirmed; yields (rows, dups, dead)."""
    system = _connection(plan.host, plan.port)
    probe = system.probe(f"spark-feed-{partition}-{uuid.uuid4().hex[:8]}")
    inflight: dict[int, list] = {}  # batch_no -> [message, first sent, last sent]
    totals = [0, 0, 0]

    def settle(limit: int) -> None:
        # Wait for acks until at most `limit` batches are unconfirmed; resend the late, fail the hopeless.
        while len(inflight) > limit:
            now = time.monotonic()
            oldest = min(inflight.values(), key=lambda e: e[2])
            wait = max(0.0, oldest[2] + plan.resend_after - now)
            try:
                ack = probe.receive(wait)
            except AskTimeout:
                now = time.monotonic()
                for batch_no, entry in inflight.items():
                    if now - entry[1] > plan.timeout:
                        raise FeedError(f"feed {plan.feed_id!r}: partition {partition} batch {batch_no} was not "
                                        f"confirmed by {BRIDGE_PATH} within {plan.timeout} s") from None
                    if now - entry[2] >= plan.resend_after:
                        system.tell(BRIDGE_PATH, entry[0])
                        entry[2] = now
                continue
            if isinstance(ack, BatchAccepted) and inflight.pop(ack.batch_no, None) is not None:
                totals[1] += ack.duplicates
                totals[2] += ack.dead_lettered

    def send(batch_no: int, batch: list[tuple[str, Any, Any]]) -> None:
        pairs = [(p, m) for p, m, _ in batch]
        for p, _ in pairs:
            actors.validate_path(p, what="destination path")
        try:
            serialize(pairs)
        except SerializationError as exc:
            raise _unserializable_column(pairs, exc) from None
        keys = tuple(k for _, _, k in batch) if plan.key is not None else None
        message = IngestBatch(plan.feed_id, partition, batch_no, tuple(pairs), probe.path, keys)
        settle(plan.window - 1)
        now = time.monotonic()
        inflight[batch_no] = [message, now, now]
        system.tell(BRIDGE_PATH, message)
        totals[0] += len(batch)

    batch: list[tuple[str, Any, Any]] = []
    batch_no = 0
    for row in rows:
        batch.append(_convert(plan, row))
        if len(batch) >= plan.batch_size:
            send(batch_no, batch)
            batch_no += 1
            batch = []
    if batch:
        send(batch_no, batch)
    settle(0)
    yield tuple(totals)


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
    if info is None or info.state != "running":
        state = "not started" if info is None else info.state
        raise FeedError(f"cannot feed: the bridge {BRIDGE_PATH} is {state} in the actor system on {host}:{port}; "
                        + HOW_TO_START)


def feed(df: Any, system: Any, to: str | Callable[[Any], str] = "destination",
         message: Callable[[Any], Any] | None = None, key: str | None = None, feed_id: str | None = None,
         ack: str = "persisted", batch_size: int = 2_000, window: int = 8, timeout: float = 60.0) -> FeedResult:
    """Send every row of `df` to the actor at its path through the bridge; returns once all are durable."""
    if ack != "persisted":
        raise NotImplementedError(f"ack={ack!r} is not implemented yet; use ack='persisted'")
    if batch_size < 1 or window < 1 or timeout <= 0:
        raise ValueError("batch_size and window must be >= 1 and timeout > 0")
    if isinstance(to, str) and to not in df.columns:
        raise ValueError(f"to={to!r} is not a column of the DataFrame (columns: {df.columns})")
    if key is not None and key not in df.columns:
        raise ValueError(f"key={key!r} is not a column of the DataFrame (columns: {df.columns})")
    host, port = _address(system)
    _check_system(host, port)
    plan = _Plan(host, port, feed_id or f"feed-{uuid.uuid4().hex}", to, message, key, batch_size, window,
                 timeout, resend_after=max(1.0, min(10.0, timeout / 6)))
    started = time.monotonic()
    parts = df.rdd.mapPartitionsWithIndex(lambda i, it: _run_partition(plan, i, it)).collect()
    seconds = time.monotonic() - started
    rows = sum(p[0] for p in parts)
    return FeedResult(rows, sum(p[1] for p in parts), sum(p[2] for p in parts), seconds,
                      rows / seconds if seconds > 0 else 0.0)


def feed_stream(stream_df: Any, system: Any, *, feed_id: str, checkpoint: str, to: str | Callable[[Any], str] = "destination",
                message: Callable[[Any], Any] | None = None, key: str | None = None, ack: str = "persisted",
                batch_size: int = 2_000, window: int = 8, timeout: float = 60.0, trigger: dict | None = None) -> Any:
    """Feed a streaming DataFrame through foreachBatch; returns the started StreamingQuery.

    Each micro-batch is fed as `f"{feed_id}/{batch_id}"`: Spark replays an uncommitted micro-batch with
    the same id and the same data after a restart from `checkpoint`, so the bridge skips what it
    already stored. `feed_id` must therefore stay the same across restarts of the query.
    """
    host, port = _address(system)
    _check_system(host, port)

    def each(batch_df: Any, batch_id: int) -> None:
        feed(batch_df, f"{host}:{port}", to=to, message=message, key=key,
             feed_id=f"{feed_id}/{batch_id}", ack=ack, batch_size=batch_size, window=window, timeout=timeout)

    writer = stream_df.writeStream.foreachBatch(each).option("checkpointLocation", checkpoint)
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()

"""Messages between feeding Spark tasks, the bridge and destinations; the journal events of both sides.

Users meet only `Row` (what destinations receive), `GetFeedProgress`/`FeedProgress` and `StagedRun` (exported
by spark_bridge); the rest is the bridge's wire protocol and journal format, internal to spark_bridge.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from dataclasses import dataclass, field
from functools import partial
from itertools import repeat
from operator import itemgetter
from os.path import commonprefix
from typing import Any, NamedTuple

from actors import Scatter
from journal import register_type, register_upcaster
from journal.serialization import (
    ints_decoded,
    ints_encoded,
    repeats_decoded,
    repeats_encoded,
    run_decoded,
    run_encoded,
    store_values_with,
)

# ---- Spark task <-> bridge ------------------------------------------------------------------------


@dataclass(frozen=True)
class IngestBatch:
    """Task -> bridge: one batch of rows, identified by (feed_id, partition, batch_no).

    `paths[i]` is row i's destination. Its message is `values[i]` when `columns` is None, else the dict
    `{columns[c]: values[c][i]}` (columnar, as cut from an Arrow record batch: no per-row objects on the
    wire or in the journal). `keys` (one per row, or None) are the idempotency keys of `feed(key=...)`:
    then rows are deduplicated one by one instead of by batch id. `processed` asks for BatchProcessed.
    """

    feed_id: str
    partition: int
    batch_no: int
    paths: list[str]
    values: list[Any]  # Any: per row its message, or (columnar) per column its values, indexed by row
    reply_to: str
    columns: tuple[str, ...] | None = None
    keys: list[Hashable] | None = None
    processed: bool = False
    attempt: str | None = None
    """The Spark task attempt staging this batch (`f"{run}/{attempt id}"`): stored but not delivered until
    a Release names the attempt as its partition's winner. None: delivered once stored (journals of old)."""


@dataclass(frozen=True)
class Release:
    """Driver -> bridge: deliver the batches staged by `winners` ([partition, attempt] each: Spark's
    committed attempts) and discard those of every other attempt of these partitions in this run.

    Answered with FeedReleased once durable (and again for a repeat); with `processed`, also with
    FeedProcessed once every tree of the feed is complete.
    """

    feed_id: str
    run: str
    winners: list[list[Any]]
    reply_to: str
    processed: bool = False
    planned: bool = False
    """Sent as the coordinator's plan says (a multi-bridge feed): the coordinator already left out the
    partitions released by any bridge; this bridge checks only its own."""
    partitions: int = 0
    """The number of partitions of the run's Spark job (0: not said, by an older driver: not checked). A rerun of
    a batch feed id split into another number than the runs released before is refused (PartitionsMismatch)."""
    keyed: bool = False
    """The feed is keyed (`feed(key=...)`): its rows are deduplicated by key, so its partitioning may change."""


@dataclass(frozen=True)
class Coordinate:
    """Driver -> the coordinator (/system/spark-bridge): which of these winners may each bridge release?

    `winners` are [partition, attempt, bridge path] (Spark's committed attempts and where they staged).
    Answered with ReleasePlan, the same one for a repeat (the driver resends until answered); with
    ReleaseRefused if the run was abandoned before (a bridge discarded it, undecided, after its staged_ttl).
    """

    feed_id: str
    run: str
    winners: list[list[Any]]
    keyed: bool
    reply_to: str
    partitions: int = 0
    """As Release.partitions: the job's partition count, checked against the feed id's released runs."""


@dataclass(frozen=True)
class PlanOf:
    """Node bridge -> the coordinator: run `run` of `feed_id` staged at `bridge` is idle past its staged_ttl
    (reason "ttl") or an operator discards it ("operator"): was it decided? Answered with RunPlan (to `bridge`).
    An undecided run is first recorded abandoned (RunAbandoned, durably), so that its Coordinate is refused."""

    feed_id: str
    run: str
    bridge: str
    reason: str
    idle_seconds: float


@dataclass(frozen=True)
class RunPlan:
    """The coordinator -> a node bridge: what was decided for the run (PlanOf).

    `winners` ([partition, attempt]): decided, these are the bridge's (what its driver's planned Release
    names): the bridge releases them itself. None: not decided; `abandoned`: recorded so (durable), the
    bridge discards the run; not `abandoned`: the coordinator no longer keeps the run's plan (KEPT_PLANS
    later runs), the bridge keeps it staged for an operator.
    """

    feed_id: str
    run: str
    winners: list[list[Any]] | None
    abandoned: bool = False


@dataclass(frozen=True)
class ReleasePlan:
    """Coordinator -> driver: durable decision: release `winners` ([partition, attempt, bridge]), each at its
    bridge; `excluded` winners' partitions were released before (by any bridge): their rows are duplicates.

    `earlier` ([run, bridge, [[partition, attempt], ...]]) are the releases of earlier runs that decided the
    excluded partitions: sent again (a repeat is answered at once), in case their driver never sent them.
    """

    feed_id: str
    run: str
    winners: list[list[Any]]
    excluded: list[list[Any]]
    earlier: list[list[Any]] = field(default_factory=list)


@dataclass(frozen=True)
class Discard:
    """Driver -> bridge: the run failed (Spark aborted the job): forget what its attempts staged."""

    feed_id: str
    run: str
    reply_to: str


@dataclass(frozen=True)
class FeedReleased:
    """Bridge -> driver: the run's winners are durable as released; rows of losing attempts discarded."""

    feed_id: str
    run: str
    discarded: int
    bridge: str = field(default="", compare=False)
    """The bridge answering (its path)."""
    duplicates: int = 0
    """Released rows not delivered: their key was released before (by another partition or run of the feed)."""


@dataclass(frozen=True)
class FeedProcessed:
    """Bridge -> driver: every released row of the feed and everything anchored to it was confirmed."""

    feed_id: str
    bridge: str = field(default="", compare=False)
    """The bridge answering (its path)."""


@dataclass(frozen=True)
class Discarded:
    """Bridge -> driver: the run's staged batches are forgotten."""

    feed_id: str
    run: str


DISCARD_REASONS = {"": "because its Spark job was aborted (the driver's Discard)",
                   "ttl": "after {idle:.0f} s without staging activity (the bridge's staged_ttl)",
                   "operator": "by an operator ({idle:.0f} s after its last staging activity)",
                   "nothing staged": "by the driver's Discard, with nothing of it staged there"}
"""Why a run's staged batches were discarded (AttemptsDiscarded.reason), worded for messages."""


@dataclass(frozen=True)
class ReleaseRefused:
    """Bridge -> driver: the run's staged batches were discarded before this Release came: nothing of the run
    is delivered by this bridge (a real repeat of a released run is answered with FeedReleased instead)."""

    feed_id: str
    run: str
    reason: str
    """As AttemptsDiscarded.reason: "ttl", "operator", or "" (the driver's own Discard)."""
    idle_seconds: float
    bridge: str = field(default="", compare=False)

    def explain(self) -> str:
        """Why, in words: "after 3600 s without staging activity (the bridge's staged_ttl)"."""
        return DISCARD_REASONS.get(self.reason, self.reason).format(idle=self.idle_seconds)


@dataclass(frozen=True)
class PartitionsMismatch:
    """Bridge -> driver: the Release (or Coordinate) of a rerun of a batch feed id split into `partitions`, but
    its earlier runs released `released` partitions: partitions are what a rerun skips, by number, so rows would
    be skipped or delivered twice. Nothing of the run is released (its driver discards what it staged)."""

    feed_id: str
    run: str
    partitions: int
    released: int
    bridge: str = field(default="", compare=False)

    def explain(self) -> str:
        """The driver's FeedError: what is wrong, and how to run the feed again."""
        return (f"feed {self.feed_id!r}: this run splits its rows into {self.partitions} partitions, but the "
                f"earlier run(s) of this feed_id released {self.released} partitions (bridge "
                f"{self.bridge or 'unknown'}): a rerun skips the partitions released before by their numbers, so "
                "with another split rows would be skipped or delivered twice. Nothing of this run was delivered. "
                f"Split the rows into {self.released} partitions as before, each holding the same rows "
                f"(e.g. df.repartition({self.released}, <columns>) or the same input files and settings), and run "
                "it again with this feed_id (or, if its earlier runs gave key=, give the same key= again: a keyed "
                "run may split otherwise). A new feed_id delivers every row again: use one only if no partition of "
                f"{self.feed_id!r} was released before")


@dataclass(frozen=True)
class KeyingMismatch:
    """Bridge -> driver: the Release (or Coordinate) of a keyed rerun of a batch feed id whose earlier runs released
    rows without keys: the bridge knows no key of those rows, so every row would be delivered again. Nothing of the
    run is released (its driver discards what it staged)."""

    feed_id: str
    run: str
    bridge: str = field(default="", compare=False)

    def explain(self) -> str:
        """The driver's FeedError: what is wrong, and how to run the feed again."""
        return (f"feed {self.feed_id!r}: this run gives key=, but the earlier run(s) of this feed_id released rows "
                f"without key= (bridge {self.bridge or 'unknown'}): their keys are unknown to the bridge, so a keyed "
                "rerun would deliver every row again. Nothing of this run was delivered. Run it again without key=, "
                "split into the partitions of the earlier runs (its released partitions are skipped: nothing is "
                "delivered twice); or feed only rows that are new under a new feed_id")


@dataclass(frozen=True)
class FedBeforeStaging:
    """Bridge -> driver: the Release (or Coordinate) of an unkeyed rerun of a feed id fed by a version before staging
    (its batches delivered as they came, deduplicated by partition and batch number): the bridge cannot tell which
    rows of its partitions were delivered, so rows would be delivered twice. Nothing of the run is released."""

    feed_id: str
    run: str
    bridge: str = field(default="", compare=False)

    def explain(self) -> str:
        """The driver's FeedError: what is wrong, and how to feed the rows."""
        return (f"feed {self.feed_id!r}: its earlier run(s) were fed through a version of the bridge before staging "
                f"(bridge {self.bridge or 'unknown'}), which delivered each batch as it came and did not record which "
                "partitions were complete: a rerun could deliver their rows twice, or skip rows never delivered. "
                "Nothing of this run was delivered. Feed only the rows not delivered yet under a new feed_id (or, if "
                "the earlier runs gave key=, give the same key=: their keys are known)")


@dataclass(frozen=True)
class StreamRestarted:
    """Bridge -> driver: the Release (or Coordinate) of micro-batch `batch_id` of a stream whose micro-batch `newest`,
    a later one, was released before. Spark replays only a query's newest micro-batch, so this is another query under
    the same feed_id, or the query restarted from a new (deleted, reset) checkpoint, which numbers its micro-batches
    from 0 again: skipped as replays, its new rows would never be delivered. Nothing of the run is released."""

    feed_id: str
    run: str
    batch_id: int
    newest: int
    bridge: str = field(default="", compare=False)

    def explain(self) -> str:
        """The driver's FeedError: what is wrong, and how to feed the stream."""
        stream = self.feed_id.rpartition("/")[0]
        return (f"feed {self.feed_id!r}: micro-batch {self.batch_id} of stream {stream!r} comes after its micro-batch "
                f"{self.newest} was released (bridge {self.bridge or 'unknown'}): Spark replays only a query's newest "
                "micro-batch, so this query was started from another, a new or a reset checkpoint under the same "
                "feed_id, and numbers its micro-batches again from 0: the bridge would skip them as replays and "
                "their rows would never be delivered. Nothing of this micro-batch was delivered. Restart the query "
                f"from the checkpoint it used before, or give it a new feed_id (not {stream!r})")


RERUN_REFUSALS = (PartitionsMismatch, KeyingMismatch, FedBeforeStaging, StreamRestarted)
"""The bridge's answers to a Release or Coordinate of a rerun it refuses (nothing of the run is released)."""
RerunRefusal = PartitionsMismatch | KeyingMismatch | FedBeforeStaging | StreamRestarted
"""One of RERUN_REFUSALS, as a type."""


@dataclass(frozen=True)
class StagedRun:
    """A run of a feed with batches staged at a bridge, neither released nor discarded yet."""

    feed_id: str
    run: str
    batches: int
    rows: int
    """New rows of its batches (duplicates skipped when staged are not counted)."""
    partitions: int
    attempts: int
    idle_seconds: float
    """Since its last staging activity, or since the bridge recovered if that is later: the staged_ttl clock."""
    last_staged_at: float | None
    """Wall-clock time (time.time()) of its newest staged batch; None if it was staged by an older version."""
    bridge: str = ""


@dataclass(frozen=True)
class GetStagedRuns:
    """Anyone -> bridge: which runs have batches staged here? Answered with StagedRuns."""


@dataclass(frozen=True)
class StagedRuns:
    """Bridge -> asker: its staged runs, oldest activity first, and its staged_ttl (None: off)."""

    bridge: str
    runs: list[StagedRun]
    staged_ttl: float | None


@dataclass(frozen=True)
class DiscardStaged:
    """Operator -> bridge: discard the staged batches of the run (`feed_id`, `run`), or of every run idle for
    at least `idle_for` s (of `feed_id` only, if given). Answered with StagedDiscarded once durable."""

    feed_id: str | None = None
    run: str | None = None
    idle_for: float | None = None

    def __post_init__(self) -> None:
        if self.idle_for is None and (self.feed_id is None or self.run is None):
            raise ValueError("DiscardStaged needs a feed_id and a run, or idle_for (seconds): it never discards "
                             f"every staged run at once; got feed_id={self.feed_id!r}, run={self.run!r}")
        if self.idle_for is not None and (isinstance(self.idle_for, bool) or not isinstance(self.idle_for, int | float)
                                          or not self.idle_for >= 0):
            raise ValueError(f"idle_for must be a number of seconds >= 0, got {self.idle_for!r}")


@dataclass(frozen=True)
class StagedDiscarded:
    """Bridge -> operator: the runs whose staged batches it discarded (durably); empty when none matched."""

    bridge: str
    runs: list[StagedRun]
    released: list[StagedRun] = field(default_factory=list)
    """Runs asked for that the coordinator had decided (their driver died before releasing them here): the
    bridge released them, as planned, instead of discarding rows Spark had committed."""


@dataclass(frozen=True)
class GetOpenBatches:
    """Driver -> bridge: which released batches of `feed_id` are not processed yet? Answered with OpenBatches."""

    feed_id: str


@dataclass(frozen=True)
class OpenBatches:
    """Bridge -> driver: [partition, batch_no] of each batch of the feed whose tree is not complete."""

    feed_id: str
    batches: list[list[int]]


@dataclass(frozen=True)
class AwaitBatch:
    """Task -> bridge: reply BatchProcessed to `reply_to` once this stored batch's tree is complete."""

    feed_id: str
    partition: int
    batch_no: int
    reply_to: str


@dataclass(frozen=True)
class BatchAccepted:
    """Bridge -> task: the batch is durable in the bridge's journal (or was already); rows skipped as duplicates."""

    feed_id: str
    partition: int
    batch_no: int
    duplicates: int
    dead_lettered: int = 0


@dataclass(frozen=True)
class BatchRefused:
    """Bridge -> task: the batch is not stored, and never will be as it is: `reason` says what is wrong with it
    (e.g. a key that cannot be hashed); nothing of it was taken, the bridge goes on with other batches."""

    feed_id: str
    partition: int
    batch_no: int
    reason: str


@dataclass(frozen=True)
class BatchProcessed:
    """Bridge -> task: every row of the batch and everything anchored to it was confirmed (the XOR is 0)."""

    feed_id: str
    partition: int
    batch_no: int


@dataclass(frozen=True)
class GetFeedProgress:
    """Driver -> bridge: how far is `feed_id`? Answered with FeedProgress."""

    feed_id: str


@dataclass(frozen=True)
class FeedProgress:
    """Bridge -> driver: rows of `feed_id` durable in the bridge, and rows whose trees are complete."""

    feed_id: str
    accepted: int
    processed: int


# ---- bridge <-> destinations ---------------------------------------------------------------------


class Row(NamedTuple):
    """Bridge -> destination: one at-least-once delivery, a feed's row or a follow-up anchored to one.

    Redelivered until the destination confirms it (spark_bridge.ack, or FeedReceiver.apply_row).
    `anchor` names the row's tree: follow-ups sent with it are part of the tree. `body` is the message:
    `data` itself, or the dict of `columns` and `data` (built by the receiver, not by the busy bridge);
    `value(column)` reads one column without building that dict.

    Immutable, with fields by name: a NamedTuple, because one is built per row in every process a row passes
    (a frozen dataclass's __init__ cost several times as much; bench/PROFILE.md §20).
    """

    delivery_id: int
    data: Any
    anchor: int | None = None
    settled_below: int = 0
    """Every delivery id below it is settled at the bridge: receivers may forget them (bounded dedup)."""
    columns: tuple[str, ...] | None = None
    bridge: str | None = None
    """The path of the node bridge that delivered it (None: /system/spark-bridge): delivery ids are per bridge,
    and confirmations and follow-ups go back to it. For a FeedTable's follow-up: the table's own address."""

    @property
    def body(self) -> Any:
        """The message of this row (by default the Spark row as a dict)."""
        return self.data if self.columns is None else dict(zip(self.columns, self.data, strict=False))

    def value(self, column: str) -> Any:
        """The value of `column` of a Spark row (body[column], without building the dict); KeyError if none."""
        columns = self.columns
        if columns is None:
            raise KeyError(f"this row carries a message, not columns: read row.body (asked for {column!r})")
        try:
            return self.data[columns.index(column)]
        except ValueError:
            raise KeyError(f"the row has no column {column!r}; its columns: {list(columns)}") from None


_new_row = partial(tuple.__new__, Row)
"""Row from a tuple of all its fields, in C (RowChunk.items: one per row)."""


@dataclass(frozen=True)
class RowChunk(Scatter):
    """Bridge -> a destination host: many Rows in columns (one pickle for thousands of rows).

    Row k goes to `targets[k]` as Row(delivery_ids[k], values[k], anchors[k], settled_below, columns, bridge).
    """

    targets: list[str]
    delivery_ids: list[int]
    anchors: list[int | None]
    values: list[object]
    columns: tuple[str, ...] | None
    settled_below: int
    bridge: str | None = None

    def items(self) -> list[tuple[str, Row]]:
        """One Row per target, in order."""
        targets, rows = self.targets_and_messages()
        return list(zip(targets, rows, strict=True))

    def targets_and_messages(self) -> tuple[list[str], Iterator[Row]]:
        """The targets, and one Row per target, in order."""
        n = len(self.targets)
        return self.targets, map(_new_row, zip(self.delivery_ids, self.values, self.anchors,
                                               repeat(self.settled_below, n), repeat(self.columns, n),
                                               repeat(self.bridge, n), strict=True))


@dataclass(frozen=True)
class Confirmed:
    """Destination host -> bridge: these deliveries were confirmed (all confirms of one host round, batched)."""

    delivery_ids: list[int]


@dataclass(frozen=True)
class Forward:
    """Destination -> bridge: deliver `message` to `to` at least once, anchored to the tree `anchor`.

    `origin` and `forward_id` identify it for deduplication when a durable destination sends it again
    after a crash (`origin` None: sent once, not deduplicated).
    """

    origin: str | None
    forward_id: int
    anchor: int | None
    to: str
    message: object


@dataclass(frozen=True)
class ForwardAccepted:
    """Bridge -> destination: follow-ups `forward_id` and `more` are durable in the bridge (stop resending them)."""

    forward_id: int
    more: tuple[int, ...] = ()


@dataclass(frozen=True)
class Forwards:
    """Destination host -> bridge: the follow-ups its actors sent in one round, in columns.

    Entry k is Forward(origins[k], forward_ids[k], anchors[k], tos[k], messages[k]) from `senders[k]`.
    """

    senders: list[str]
    origins: list[str | None]
    forward_ids: list[int]
    anchors: list[int | None]
    tos: list[str]
    messages: list[object]


@dataclass(frozen=True)
class ForwardsAccepted(Scatter):
    """Bridge -> a destination host: follow-up `forward_ids[k]` of `targets[k]` accepted, in columns."""

    targets: list[str]
    forward_ids: list[int]

    def items(self) -> list[tuple[str, ForwardAccepted]]:
        """One ForwardAccepted per target, with every id of that target (in order)."""
        # One message per receiver, not per id: a redelivery pile's resends are accepted by the thousand.
        ids_of: dict[str, list[int]] = {}
        for target, forward_id in zip(self.targets, self.forward_ids, strict=True):
            ids = ids_of.get(target)
            if ids is None:
                ids_of[target] = [forward_id]
            else:
                ids.append(forward_id)
        return [(t, ForwardAccepted(ids[0], tuple(ids[1:]))) for t, ids in ids_of.items()]


# ---- the bridge's journal -------------------------------------------------------------------------


@register_type(manifest="spark_bridge.BatchStored", version=3)
@dataclass(frozen=True)
class BatchStored:
    """Bridge event: one accepted batch (its new rows only), the unit of dedup, fan-out and acking.

    Its rows are the deliveries `first_id .. first_id + len(paths) - 1`; the tree id is `first_id`.
    `dead` lists the indices of rows whose path nobody served (dead-lettered, never delivered).
    """

    feed_id: str
    partition: int
    batch_no: int
    paths: list[str]
    values: list[Any]
    columns: tuple[str, ...] | None
    keys: list[Hashable] | None
    first_id: int
    dead: list[int]
    duplicates: int
    attempt: str | None = None
    """Staged under this Spark task attempt (delivered once AttemptsReleased names it); None: delivered."""
    staged_at: float = 0.0
    """Wall-clock time a staged batch was stored (shown in the staged runs; 0: not staged, or stored by an
    older version)."""


def _batch_stored(b: BatchStored) -> list[object]:
    """BatchStored as stored (version 3): its fields in order, but the paths as their common prefix and the rest
    of each (`prefixed`), and a column of a columnar batch equal to the paths (the DataFrame's destination
    column, which rows carry too) as None: a batch of rows to one parent stores the parent once, not once a row,
    and a path once, not twice (the demo's rows: 51 bytes a row, 16 now). Version 2 stored the fields as they
    are; it is read through the upcaster."""
    values = b.values
    if b.columns is not None and b.paths in values:
        paths = b.paths
        values = [None if column == paths else column for column in values]
    return [b.feed_id, b.partition, b.batch_no, prefixed(b.paths), values, b.columns, b.keys, b.first_id, b.dead,
            b.duplicates, b.attempt, b.staged_at]


def _batch_from_stored(stored: list[Any]) -> list[Any]:
    paths, values = unprefixed(stored[3]), stored[4]
    if stored[5] is not None and None in values:
        values = [paths if column is None else column for column in values]
    return [*stored[:3], paths, values, *stored[5:]]


def prefixed(paths: list[str]) -> list[Any]:
    """`paths` as [their longest common prefix, [each path after it]]; `unprefixed` reverses it."""
    try:
        prefix = commonprefix((min(paths), max(paths))) if paths else ""  # (the extremes' prefix is everyone's)
    except TypeError:  # (not all strings: a bug upstream, stored as it is for the write to report or keep)
        prefix = ""
    if not prefix:
        return ["", paths]
    return [prefix, list(map(itemgetter(slice(len(prefix), None)), paths))]


def unprefixed(stored: list[Any]) -> list[str]:
    """The paths `prefixed` stored."""
    prefix, rests = stored
    return list(map(prefix.__add__, rests)) if prefix else list(rests)


store_values_with(BatchStored, _batch_stored, _batch_from_stored)
register_upcaster("spark_bridge.BatchStored", 2, lambda fields: _batch_stored(BatchStored(*fields)))


@register_type(manifest="spark_bridge.BatchRestaged")
@dataclass(frozen=True)
class BatchRestaged(BatchStored):
    """Bridge event: a staged batch's BatchStored written again, when the batch held the pruning of the bridge's
    journal back far (a run whose driver died, or a long job among many short ones). From then on the batch is
    read at this event's sequence nr, and the events before it can be pruned."""


def restaged(b: BatchStored) -> BatchRestaged:
    """A BatchRestaged of the same fields as `b`."""
    return BatchRestaged(b.feed_id, b.partition, b.batch_no, b.paths, b.values, b.columns, b.keys, b.first_id, b.dead,
                         b.duplicates, b.attempt, b.staged_at)


store_values_with(BatchRestaged, _batch_stored, _batch_from_stored)


@register_type(manifest="spark_bridge.AttemptsReleased")
@dataclass(frozen=True)
class AttemptsReleased:
    """Bridge event: the staged batches of `winners` ([partition, attempt]) are delivered, their feed's
    partitions are done (a later batch for one is a duplicate), other attempts of the run are discarded."""

    feed_id: str
    run: str
    winners: list[list[Any]]
    first_id: int
    """The winners' batches get the delivery ids first_id .. in the order of `winners`, then of batch_no."""
    planned: bool = False
    """Released as the coordinator's plan said (Release.planned)."""
    partitions: int = 0
    """The number of partitions of the run's job (Release.partitions; 0: not said, or written by an older
    version). The first one recorded for a batch feed id is what its reruns must match."""


@register_type(manifest="spark_bridge.ReleaseDecided")
@dataclass(frozen=True)
class ReleaseDecided:
    """Coordinator event: the plan of a multi-bridge run (ReleasePlan); its winners' partitions are released."""

    feed_id: str
    run: str
    winners: list[list[Any]]  # [partition, attempt, bridge]
    excluded: list[list[Any]]
    partitions: int = 0
    """As AttemptsReleased.partitions (Coordinate.partitions; 0: not said, or written by an older version)."""
    keyed: bool | None = None
    """Coordinate.keyed (None: written by an older version). The winners of an unkeyed run are rows released
    without keys: a keyed rerun of the feed id is refused (KeyingMismatch)."""


@register_type(manifest="spark_bridge.RunAbandoned")
@dataclass(frozen=True)
class RunAbandoned:
    """Coordinator event: a node bridge asked (PlanOf) about a run not decided: it is never decided now, and
    its Coordinate is refused (ReleaseRefused with this reason, bridge and idle time): the bridge discards it."""

    feed_id: str
    run: str
    bridge: str
    reason: str
    idle_seconds: float


@register_type(manifest="spark_bridge.AttemptsDiscarded")
@dataclass(frozen=True)
class AttemptsDiscarded:
    """Bridge event: the staged batches of the run are forgotten: its Spark job was aborted, or it was idle
    past the bridge's staged_ttl, or an operator discarded it. A later Release of the run is refused."""

    feed_id: str
    run: str
    reason: str = ""
    """"" (the driver's Discard), "ttl", "operator" or "nothing staged" (a driver's Discard that dropped nothing: a
    later Release of the run is not refused): see DISCARD_REASONS."""
    idle_seconds: float = 0.0
    """How long the run had been idle (its staged_ttl clock) when discarded by "ttl" or "operator"."""


@register_type(manifest="spark_bridge.Progress", version=2)
@dataclass(frozen=True)
class Progress:
    """Bridge event, one per round of confirmations: what was confirmed, forwarded or given up since the last.

    `forwards` holds `[origin, forward_id, anchor, delivery_id, to, message]` per follow-up registered.
    `abandoned` are deliveries given up because their path is no longer served (dead-lettered).
    """

    confirmed: list[int]
    forwards: list[list[Any]]
    abandoned: list[int]


def _progress_stored(p: Progress) -> list[object]:
    """Progress as stored (version 2): the confirmed and abandoned ids as differences (`ints_encoded`: confirmations
    arrive mostly in order, so about a byte an id instead of up to nine). Version 1 stored them as they are."""
    return [ints_encoded(p.confirmed), p.forwards, ints_encoded(p.abandoned)]


def _progress_from_stored(stored: list[Any]) -> list[Any]:
    confirmed, forwards, abandoned = stored
    return [list(ints_decoded(confirmed)), forwards, list(ints_decoded(abandoned))]


store_values_with(Progress, _progress_stored, _progress_from_stored)
register_upcaster("spark_bridge.Progress", 1, lambda fields: _progress_stored(Progress(*fields)))


@register_type(manifest="spark_bridge.BridgeSnapshot")
@dataclass(frozen=True)
class BridgeSnapshot:
    """The bridge's whole state, so that recovery replays only what came after it."""

    next_id: int
    batches: list[list[Any]]  # [feed_id, partition, watermark, [above...]]
    keys: dict[str, list[Any]]  # feed_id -> [key, ...]
    trees: list[list[Any]]  # [tree_id, xor, rows, feed_id, partition, batch_no]
    unconfirmed: list[list[Any]]  # [delivery_id, path, body, anchor]
    backlog: list[list[int]]  # [sequence_nr, next_index] of stored batches not fanned out completely
    confirmed_ahead: list[int]  # confirmed ids of rows not fanned out yet (after a recovery)
    forwarded: dict[str, list[Any]]  # origin -> [low, [[start, end], ...]]
    feeds: dict[str, list[int]]  # feed_id -> [accepted, processed]
    # (added later: snapshots written before have neither, and get the defaults)
    staged: list[list[Any]] = field(default_factory=list)  # [seq, feed, partition, attempt, batch_no, first_id, size, dup, dead, keys]
    released: dict[str, list[int]] = field(default_factory=dict)  # feed_id -> released partitions
    runs: list[str] = field(default_factory=list)  # f"{feed_id}/{run}" released (before `discarded`: or discarded)
    # (the coordinator's, added later)
    decided: dict[str, list[list[Any]]] = field(default_factory=dict)  # feed_id -> [[partition, deciding run]]
    plans: list[list[Any]] = field(default_factory=list)  # [feed_id, run, winners, excluded], oldest first
    # (added later) runs discarded, not released: a late Release of one is refused
    discarded: list[list[Any]] = field(default_factory=list)  # [f"{feed_id}/{run}", reason, idle_seconds], oldest first
    staged_at: list[list[Any]] = field(default_factory=list)  # [feed_id, run, wall time of its newest staged batch]
    # (the coordinator's, added later) runs a node bridge found idle before they were decided: never decided
    abandoned: list[list[Any]] = field(default_factory=list)  # [f"{feed_id}/{run}", bridge, reason, idle_seconds]
    # (added later) the partition count of each batch feed id's released or decided runs: reruns must match it
    partitions: dict[str, int] = field(default_factory=dict)
    # (added later) the counts of FeedReleased of the released `runs`, for a repeat's answer: [discarded, duplicates]
    run_counts: dict[str, list[int]] = field(default_factory=dict)  # f"{feed_id}/{run}" -> (only those not 0, 0)
    # (added later) batch feed ids with rows released or decided without keys (None: written before, inferred)
    unkeyed: list[str] | None = None


# ---- a durable destination's journal -----------------------------------------------------------------


@register_type(manifest="spark_bridge.RowApplied")
@dataclass(frozen=True)
class RowApplied:
    """FeedReceiver event (inside IdempotentReceiver's Applied): the user's event and the follow-ups it sent.

    The follow-ups are `first_forward ..` in order; every forward id below `forwarded_low` was accepted by
    the bridge when this was written; `bridge_low`: every bridge delivery id below it was confirmed.
    """

    event: object
    anchor: int | None
    follow_ups: list[list[Any]]  # [[to, message], ...]
    first_forward: int
    forwarded_low: int
    bridge_low: int


@register_type(manifest="spark_bridge.FollowUpColumns", version=2)
@dataclass(frozen=True, slots=True)
class FollowUpColumns:
    """FeedTable's part of one commit (TableCommit.columns): its follow-ups, forward ids `first`, `first + 1`,
    ..., follow-up k to `tos[k]` with `messages[k]`, holding the row `rows[k]` of bridge `bridges[k]` (-1: none);
    follow-ups relayed for its receivers, deduplicated by (relay_origins[j], relay_ids[j]); `low`: every forward
    id below it was confirmed before this commit."""

    first: int
    tos: tuple[str, ...]
    messages: tuple[object, ...]
    rows: tuple[int, ...]
    bridges: tuple[str | None, ...]
    relay_origins: tuple[str, ...]
    relay_ids: tuple[int, ...]
    low: int


def _follow_ups_stored(c: FollowUpColumns) -> list[object]:
    """FollowUpColumns as stored (version 2), its columns as runs as TableCommit's are (persistence/table.py): a
    receiver's path and a bridge's once per run, a message type's manifest once per run, the rows and relayed
    ids as differences. Version 1 stored each column as a tuple; it is read through the upcaster below."""
    return [c.first, repeats_encoded(c.tos), run_encoded(c.messages), ints_encoded(c.rows),
            repeats_encoded(c.bridges), repeats_encoded(c.relay_origins), ints_encoded(c.relay_ids), c.low]


def _follow_ups_from_stored(stored: list[Any]) -> list[Any]:
    first, tos, messages, rows, bridges, relay_origins, relay_ids, low = stored
    return [first, repeats_decoded(tos), run_decoded(messages), ints_decoded(rows), repeats_decoded(bridges),
            repeats_decoded(relay_origins), ints_decoded(relay_ids), low]


store_values_with(FollowUpColumns, _follow_ups_stored, _follow_ups_from_stored)
register_upcaster("spark_bridge.FollowUpColumns", 1, lambda fields: _follow_ups_stored(FollowUpColumns(*fields)))


@register_type(manifest="spark_bridge.FollowUpSnapshot")
@dataclass(frozen=True)
class FollowUpSnapshot:
    """FeedTable's part of a TableSnapshot: the next forward id, the follow-ups not yet confirmed
    ([forward_id, to, message, row, bridge]) and the relayed follow-ups' dedup {origin: SeenIds.state()}."""

    next_forward: int
    pending: list[list[Any]]
    relayed: dict[str, Any]


@register_type(manifest="spark_bridge.ReceiverSnapshot")
@dataclass(frozen=True)
class ReceiverSnapshot:
    """FeedReceiver's part of a snapshot: the next forward id and the follow-ups not yet accepted."""

    next_forward: int
    pending: list[list[Any]]  # [forward_id, anchor, to, message]
    state: object

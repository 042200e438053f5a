"""The bridge actor: durable, deduplicating ingest of Spark batches; at-least-once fan-out; the XOR acker.

Everything the bridge knows is rebuilt from its own journal (and its latest snapshot):

- `BatchStored`, one per new batch, holds the rows; its rows are the deliveries `first_id ..` (ids are
  allocated when the batch is accepted and stored in the event, so replay gives the same ids);
- `Progress` holds the delivery ids confirmed for the first time since the previous one (written at once
  when a tree completes, else within `lazy_flush` s: a confirmation lost in a crash comes back through
  redelivery), the follow-ups destinations forwarded (each a new delivery in its anchor's tree, sent
  only once recorded, with the (origin, forward id) that deduplicates it), and the deliveries given up
  because their path stopped being served;
- a `BridgeSnapshot` every `snapshot_every` stored batches, so recovery replays only what came after.
  After each, the events recovery needs no more are deleted (`prune_journal`): those up to the snapshot
  before it, but for the batches still staged or waiting for fan-out (read back from the journal); staged
  batches that hold that back far are written again first (`BatchRestaged`, see `_restage_held`). The
  snapshot before and the events after it stay, so an unreadable newest snapshot still recovers; a
  journal pruned so with no snapshot left to recover from fails recovery, naming it (never a silent
  restart from nothing: every released run would be delivered again); see _check_unpruned.

Spark's commit protocol (spark_bridge.sink): a batch sent by a task attempt is *staged*, a `BatchStored`
naming the attempt, durable but not delivered, and it gets no delivery ids. When the Spark job commits,
the driver sends `Release` with the winning attempt of each partition: one `AttemptsReleased` event
allocates the ids of the winners' batches (in the event's order, so replay allocates the same), makes
their trees and queues them for fan-out; the other attempts of those partitions are discarded, and the
feed's partitions are done: a later batch for one (a rerun, a zombie attempt) is a duplicate. An aborted
job's `Discard` forgets what its attempts staged (`AttemptsDiscarded`).

A run whose driver died between staging and release (SIGKILL, OOM, a lost cluster) sends neither: its
batches would stay staged forever. `GetStagedRuns` lists the staged runs (and `stats()` sums them); a run
with no staging activity for `staged_ttl` seconds is discarded (`AttemptsDiscarded`, reason "ttl"), and
`DiscardStaged` discards one run, or every run idle that long, for an operator (reason "operator"). The
bridge remembers a run as released (`_runs`) or discarded (`_discarded`), journaled and in snapshots: a late `Release` of a
discarded run (a driver that was merely slow) is answered with `ReleaseRefused`, which the driver turns into
a FeedError, never with FeedReleased: its rows are gone, and saying "released" would lose them silently.

With a bridge per node, only the coordinator knows whether a run was decided (ReleaseDecided): a node bridge
whose TTL (or an operator) finds a run idle asks it first (PlanOf, resent every _Expire tick until answered).
A decided run the node bridge releases itself, as its dead driver's planned Release would (AttemptsReleased,
planned); an undecided one the coordinator first records abandoned (RunAbandoned: its Coordinate is refused
with ReleaseRefused from then on), and only then the node bridge discards it. The coordinator releases its own
decided runs likewise, and refuses the Coordinate of a run it discarded. A driver's Discard of a run staged here
goes the same way (Spark aborts a job whose commit failed after the decision): a decided run is released.

The batches and the Progress of one incoming message share one commit. Rows are fanned out after their
batch is durable, at most `fan_out_window` unconfirmed at a time (the rest wait in a backlog, read back
from the journal when it is long), redelivered until confirmed. Each stored batch is a tree of Storm's
XOR acker (acker.py): ack="processed" feeds are told when theirs is complete.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any, cast

import actors
from actors import PathTaken
from journal import MAX_SEQUENCE_NR, SnapshotSelectionCriteria
from journal.serialization import serialize
from persistence import (
    AtLeastOnceDelivery,
    Confirm,
    ConfirmUpTo,
    DeleteMessagesFailure,
    DeleteMessagesSuccess,
    DeleteSnapshotsFailure,
    DeleteSnapshotsSuccess,
    RecoveryCompleted,
    SaveSnapshotSuccess,
    SeenIds,
    SnapshotOffer,
)
from spark_bridge.acker import Tree, edge, edge_list, edges
from spark_bridge.messages import (
    AttemptsDiscarded,
    AttemptsReleased,
    AwaitBatch,
    BatchAccepted,
    BatchProcessed,
    BatchRefused,
    BatchRestaged,
    BatchStored,
    BridgeSnapshot,
    Confirmed,
    Coordinate,
    Discard,
    Discarded,
    DiscardStaged,
    FedBeforeStaging,
    FeedProcessed,
    FeedProgress,
    FeedReleased,
    Forward,
    Forwards,
    ForwardsAccepted,
    GetFeedProgress,
    GetOpenBatches,
    GetStagedRuns,
    IngestBatch,
    KeyingMismatch,
    OpenBatches,
    PartitionsMismatch,
    PlanOf,
    Progress,
    Release,
    ReleaseDecided,
    ReleasePlan,
    ReleaseRefused,
    RerunRefusal,
    Row,
    RowChunk,
    RunAbandoned,
    RunPlan,
    StagedDiscarded,
    StagedRun,
    StagedRuns,
    StreamRestarted,
    _new_row,
    restaged,
)

BRIDGE_PATH = "/system/spark-bridge"
PERSISTENCE_ID = "spark-bridge"
BRIDGES_PATH = "/system/spark-bridges"
"""The bridge of node X is at f"{BRIDGES_PATH}/{X}" (bridge_path); its persistence id is its path."""
KEPT_PLANS = 10_000
"""Multi-bridge runs whose plan the coordinator keeps to answer a resent Coordinate with the same plan."""
KEPT_RUNS = 10_000
"""Released runs the bridge remembers (to answer a repeated Release, and to ignore a zombie's batches)."""
KEPT_DISCARDED = 100_000
"""Discarded runs it remembers, to refuse their late Release: more, since forgetting one would let a late
Release pass as a new run releasing nothing (rare, and small: a dead driver's run id)."""
KEPT_MICRO_BATCHES = 100
"""Released micro-batches the bridge remembers per stream (feed ids f"{feed id or query id}/{batch id}"), the
newest by batch id: Spark replays only a query's newest micro-batch (the one its commit log lacks), and keeps the
offsets of its last `spark.sql.streaming.minBatchesToRetain` (100) batches only."""
KEPT_STREAM_BATCHES = 100_000
"""Released micro-batches remembered over all streams besides each stream's newest: past it, the streams that
released least recently keep their newest only. A stream's newest is never forgotten: it is the one Spark replays
after a crash between the release and the query's commit, however long the query then stays down (a query that
gets a new query id each start, without a checkpoint, is a new stream each start: one feed id a start)."""
RESTAGE_RATIO = 8
"""A staged batch is written again (BatchRestaged) once its run holds the journal's pruning back by this many
events per batch of the run written again (see SparkBridge._restage_held)."""
NOTHING_STAGED = "nothing staged"
"""AttemptsDiscarded.reason of a driver's Discard that found nothing of its run staged at the bridge: it dropped
nothing, so a later Release of the run is not refused (see SparkBridge._discard)."""
STAGED_TTL = 24 * 3600.0
"""Default staged_ttl: a run idle (no batch staged) this long is discarded. Spark stages a run's batches while
its write tasks run and releases them as soon as the last one finishes: a live run is idle for seconds, or for
as long as its retried or pending tasks wait for executors. A day is far beyond that (a job stuck waiting for
resources that long has been given up), yet bounds what a dead driver leaves behind to a day's worth. Even when
a slow driver is discarded after all, its late Release is refused with a clear error, never lost silently."""


def check_staged_ttl(value: object) -> float | None:
    """`value` as a staged_ttl (seconds > 0, or None: off); ValueError naming it otherwise."""
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < float("inf"):
        raise ValueError(f"staged_ttl must be a number of seconds > 0 (default {STAGED_TTL:.0f}, a day), or None to "
                         f"keep staged runs until released or discarded by hand; got {value!r}")
    return float(value)


@dataclass(frozen=True)
class _Flush:
    """Self-message: persist the round's batches and Progress, and fan out more rows."""

    lazy: bool = False


@dataclass(frozen=True)
class _FanOut:
    """Self-message (through a timer, so that ingest gets its turn): fan out the next chunk."""


@dataclass(frozen=True)
class _Expire:
    """Self-message (a repeating timer): discard the staged runs idle for staged_ttl."""


_FLUSH = _Flush()
_EXPIRE = _Expire()
_LAZY_FLUSH = _Flush(lazy=True)
_FANOUT = _FanOut()


class _Pending:
    """A stored batch not fanned out completely: rows before `next_index` are registered deliveries."""

    __slots__ = ("seq", "event", "next_index", "first_id", "size")

    def __init__(self, seq: int, event: BatchStored | None, next_index: int, first_id: int, size: int) -> None:
        self.seq = seq
        self.event = event  # None when not kept in memory: read back from the journal
        self.next_index = next_index
        self.first_id = first_id
        self.size = size


class _Staged:
    """A batch staged by a Spark task attempt: durable at `seq` (-1 while its write is in flight)."""

    __slots__ = ("seq", "event", "partition", "batch_no", "size", "duplicates", "dead", "keys", "first_id", "moving",
                 "skipped")

    def __init__(self, seq: int, event: BatchStored | None, partition: int, batch_no: int, size: int,
                 duplicates: int, dead: list[int], keys: list[Hashable] | None) -> None:
        self.seq = seq
        self.event = event  # None when not kept in memory: read back from the journal
        self.partition = partition
        self.batch_no = batch_no
        self.size = size
        self.duplicates = duplicates
        self.dead = dead
        self.keys = keys
        self.first_id = 0  # allocated on release
        self.moving = False  # its BatchRestaged is being written (see SparkBridge._restage_held)
        self.skipped: list[int] = []  # on release: rows whose key an earlier row of the feed id holds

    def state(self, feed_id: str, partition: int, attempt: str) -> list[Any]:
        """What a snapshot keeps."""
        return [self.seq, feed_id, partition, attempt, self.batch_no, self.size, self.duplicates, self.dead,
                self.keys]


class _RowsOut:
    """Rows of one turn, sent as one RowChunk per destination host: a pickle per host, not per row.

    `rows` are the same deliveries as Row messages: what redelivery resends one by one.
    """

    __slots__ = ("targets", "ids", "anchors", "values", "rows", "columns", "bridge")

    def __init__(self, columns: tuple[str, ...] | None = None, bridge: str | None = None) -> None:
        self.targets: list[str] = []
        self.ids: list[int] = []
        self.anchors: list[int | None] = []
        self.values: list[object] = []
        self.rows: list[Row] = []
        self.columns = columns
        self.bridge = bridge

    def send(self, host: actors.ActorContext, sender: str, low: int) -> None:
        """Hand the rows to the host's transport (grouped by the host serving each target)."""
        if not self.targets:
            return
        t, i, a, v, columns, bridge = self.targets, self.ids, self.anchors, self.values, self.columns, self.bridge

        # (mypy cannot match the unpacked columns to RowChunk's fields)
        host.scatter(sender, t, lambda idx: RowChunk(*_pick(idx, t, i, a, v), columns, low, bridge))  # type: ignore[call-arg, arg-type]


class SparkBridge(AtLeastOnceDelivery):
    """Stores each new batch as one event, confirms it once durable, delivers every row at least once."""

    @property
    def persistence_id(self) -> str:
        """Fixed per path, so the bridge finds its journal again whatever host (or node) serves it."""
        return PERSISTENCE_ID if self.path == BRIDGE_PATH else self.path

    # Deliveries wait in destinations' queues behind up to a window of rows: resend late, and back off.
    redeliver_interval = 10.0
    redelivery_backoff = (10.0, 60.0, 2.0)
    redelivery_burst_limit = 100_000
    max_unconfirmed_messages = 1 << 62  # the fan-out window is the bound
    fan_out_window: int = 20_000
    """At most this many deliveries unconfirmed; stored rows beyond wait in the backlog. A delivery can wait
    behind the whole window in its destination's mailbox: at 50,000 a busy 2-core machine (3,000 rows/s)
    took longer than `redeliver_interval` to reach it, and the bridge resent rows that were on their way."""
    fan_out_chunk: int = 4_000
    """Rows registered per turn, so that ingest is not starved by a long backlog."""
    fan_out_chunk_busy: int = 1_000
    busy_pause: float = 0.05
    busy_for: float = 0.5
    """Until `busy_for` s after the last ack="persisted" or staged batch (or until the Release of a run), fan out at
    most `fan_out_chunk_busy` rows per `busy_pause` s: acceptance first, delivery catches up when the feed is done
    (the backlog is durable)."""
    progress_linger: float = 0.0
    """Batches and confirmations are gathered this long into one commit (0: those of one incoming message;
    a Thespian timer turn costs milliseconds, which tasks waiting for confirms feel)."""
    lazy_flush: float = 0.05
    confirms_per_event: int = 20_000
    """Confirmations completing no tree are persisted within `lazy_flush` s or by this many at once."""
    backlog_in_memory: int = 400_000
    """Rows of backlog kept in memory; later batches are read back from the journal when their turn comes."""
    snapshot_every: int = 500
    kept_micro_batches: int = KEPT_MICRO_BATCHES
    kept_stream_batches: int = KEPT_STREAM_BATCHES
    """Released micro-batches remembered per stream, and over all streams besides each one's newest (see
    KEPT_MICRO_BATCHES, KEPT_STREAM_BATCHES)."""
    kept_feed_ids: int | None = None
    """Batch feed ids whose released partitions (and keys) the bridge remembers, the first released longest ago
    forgotten first; None: every one, for good (a rerun of any feed id ever released delivers nothing again). Each
    costs a few hundred bytes of memory and ~70 bytes of every snapshot, and a keyed one its keys (~17 bytes each in
    a snapshot): a system fed under a new feed id every minute for months wants a bound, past which a rerun of a
    forgotten feed id delivers its rows again."""
    """Stored batches between snapshots."""
    prune_journal: bool = True
    """After each snapshot, delete the events recovery needs no more: every event up to the snapshot before it,
    except the batches still staged or waiting for fan-out. Without it the bridge's journal keeps every row
    ever fed (17 bytes a row for the demo's, with its confirmation). False keeps them all (an audit trail)."""

    def __init__(self, staged_ttl: float | None = STAGED_TTL) -> None:
        # (spawn kwargs: start_bridge(staged_ttl=...); checked there too, so a bad value fails in the caller)
        self.staged_ttl = check_staged_ttl(staged_ttl)
        """Seconds without staging activity after which a run's staged batches are discarded; None: never."""

    def pre_start(self) -> None:
        """Empty state; recovery fills it from the snapshot and the journal."""
        self._batches: dict[tuple[str, int], SeenIds] = {}  # batch numbers start at 0: low -1 when none
        self._keys: dict[str, set[Hashable]] = {}
        self._trees: dict[int | None, Tree] = {}  # looked up by anchor: None (no tree) finds none
        self._by_batch: dict[tuple[str, int, int], int] = {}
        self._backlog: list[_Pending] = []
        self._backlog_head = 0
        self._backlog_rows = 0
        # The backlog's head batch as read back from the journal, while the fan-out sends it over several turns
        # (a turn sends what the window has room for: with several destination hosts, often part of a batch).
        self._head_read: tuple[int, BatchStored] | None = None
        self._ahead: set[int] = set()
        self._forwarded: dict[str, SeenIds] = {}
        self._feeds: OrderedDict[str, list[int]] = OrderedDict()
        self._next_id = 1
        self._allocated: dict[int, int] = {}  # first id -> count: allocated, not registered (in flight)
        self._confirmed: list[int] = []
        self._forwards: list[list[Any]] = []
        self._forward_replies: list[tuple[str | None, int]] = []
        # id(Progress) -> its replies and completed trees, for the Progress events being written
        self._progress_in_flight: dict[int, tuple[list[tuple[str | None, int]], list[Tree]]] = {}
        # id(BatchStored) -> (reply_to, tree), for the batches being written
        self._stores_in_flight: dict[int, tuple[str, Tree | None]] = {}
        self._duplicates: list[tuple[str, int]] = []  # (sender, forward id) of follow-ups stored before
        self._abandoned: list[int] = []
        self._completed: list[Tree] = []
        self._flush_queued = False
        self._lazy_queued = False
        self._fanout_queued = False
        self._stores: list[tuple[BatchStored, str, Tree | None]] = []
        self._since_snapshot = 0
        self._low = 1
        self._low_at = 0.0
        self._persisted_ingest_at = 0.0
        self._valid_paths: set[str] = set()
        # (feed, partition) -> attempt -> batch_no -> staged batch (see "Spark's commit protocol" above)
        self._staged: dict[tuple[str, int], dict[str, dict[int, _Staged]]] = {}
        self._staged_rows = 0  # rows of staged batches kept in memory
        self._rows_in = 0  # new rows taken from feeds by this incarnation (the metrics' feed rows)
        self._released: dict[str, set[int]] = {}
        # batch feed id -> the partition count of its first released (or decided) run: its reruns must match it
        self._partitions: dict[str, int] = {}
        # batch feed ids with rows released (or decided) without keys: the bridge knows no keys of those rows, so a
        # keyed rerun would deliver them all again (refused: KeyingMismatch)
        self._unkeyed: set[str] = set()
        # feed ids released or decided by events or a snapshot of a version that did not record _unkeyed: settled
        # at the end of recovery (_settle_unkeyed)
        self._unkeyed_unknown: set[str] = set()
        # feed ids with batches delivered at once (no attempt: fed by a version before staging, or a client speaking
        # its protocol): no partition of theirs counts as released, so an unkeyed rerun is refused (FedBeforeStaging)
        self._unstaged: set[str] = set()
        # stream (a micro-batch feed id's part before its last "/") -> the batch ids of its micro-batches whose release
        # is remembered (in _released, _decided, _keys), ascending; streams in the order they last released one. Only
        # the newest kept_micro_batches of each, kept_stream_batches in all (_remember_feed): a stream's every
        # micro-batch is a feed id, so they grew the bridge (and each snapshot) by one per micro-batch for good.
        self._streams: dict[str, list[int]] = {}  # (in the order they were released: the last is the newest)
        self._stream_batches = 0  # kept besides each stream's newest
        self._trimmable: OrderedDict[str, None] = OrderedDict()  # streams keeping more than their newest, LRU first
        # batch feed ids released (or decided), first released first: only with kept_feed_ids (_remember_batch_feed)
        self._batch_feeds: OrderedDict[str, None] = OrderedDict()
        # f"{feed}/{run}" released -> (rows discarded, duplicates skipped): its FeedReleased's, for a repeat's answer
        self._runs: OrderedDict[str, tuple[int, int]] = OrderedDict()
        # f"{feed}/{run}" discarded -> (reason, idle seconds) as in AttemptsDiscarded: a late Release is refused
        self._discarded: OrderedDict[str, tuple[str, float]] = OrderedDict()
        # (feed, run) staged -> [monotonic, wall-clock time] of its last staging activity: the staged_ttl clock
        # runs on the monotonic one, restarted at recovery (a restarted bridge cannot know how long it was down)
        self._activity: dict[tuple[str, str], list[float]] = {}
        self._expired = 0  # runs discarded by staged_ttl in this incarnation
        self._open: dict[str, int] = {}  # feed -> trees not complete
        self._feed_waiters: dict[str, set[str]] = {}
        self._me: str | None = None if self.path == BRIDGE_PATH else self.path  # Row.bridge
        # The coordinator's (BRIDGE_PATH): partitions released by any bridge, and the plans of multi-bridge runs.
        self._decided: dict[str, dict[int, str]] = {}  # feed -> partition -> the run deciding it ("": released here)
        self._plans: OrderedDict[str, ReleaseDecided] = OrderedDict()
        # f"{feed}/{run}" a node bridge found idle, undecided -> [bridge, reason, idle s]: its Coordinate is refused
        self._abandoned_runs: OrderedDict[str, list[Any]] = OrderedDict()
        # A node bridge's: (feed, run) asked of the coordinator (PlanOf) -> [reason, idle s], resent every _Expire
        # tick until answered; the operators (and drivers' Discards) waiting, each [sender, {(feed, run) asked},
        # discarded, released, the reply to send (None: StagedDiscarded)].
        self._asking: dict[tuple[str, str], list[Any]] = {}
        self._discard_waits: list[list[Any]] = []
        self._plan_asks = 0  # PlanOf sent by this incarnation
        # Pruning (prune_journal): (sequence nr, the highest event recovery from it does not need) of the newest
        # snapshot taken or recovered from, and of the one being saved; the events to delete once the snapshots
        # older than the newest but one are.
        self._newest_snapshot: tuple[int, int] | None = None
        self._saving: tuple[int, int] | None = None
        self._prune_to = 0
        self._pruned_to = 0  # (stats)
        self._restaged_count = 0  # (stats)
        self._replayed = False  # an event was replayed (the first must be the journal's first, or follow a snapshot)

    # ---- recovery -------------------------------------------------------------------------------
    def receive_recover(self, event: Any) -> None:
        """Rebuild dedup state, trees, deliveries and backlog; fan out once recovered."""
        t = type(event)
        if not self._replayed and t is not SnapshotOffer and t is not RecoveryCompleted:
            self._replayed = True
            if self._newest_snapshot is None and self.last_sequence_nr > 1:
                self._check_unpruned()
        if t is BatchStored:
            if event.attempt is not None:
                self._stage_event(event, self.last_sequence_nr)
            else:
                self._accept(event)
                self._enqueue(self.last_sequence_nr, event, event.first_id)
            self._since_snapshot += 1
        elif t is BatchRestaged:
            self._restaged(event, self.last_sequence_nr)
        elif t is AttemptsReleased:
            for s in self._release_attempts(event)[0]:
                self._enqueue(s.seq, s.event, s.first_id, s.size, len(s.dead), len(s.skipped))
            self._since_snapshot += 1
        elif t is AttemptsDiscarded:
            self._discard_run(event.feed_id, event.run, event.reason, event.idle_seconds)
        elif t is ReleaseDecided:
            self._decide(event)
        elif t is RunAbandoned:
            self._abandon(event)
        elif t is Progress:
            self._replay_progress(event)
        elif t is SnapshotOffer:
            self._restore(event.snapshot)
            self._newest_snapshot = (event.metadata.sequence_nr, self._floor(event.metadata.sequence_nr))
        elif t is RecoveryCompleted:
            self._settle_unkeyed()
            if self.last_sequence_nr == 0 and self._newest_snapshot is None:
                # A new journal's first event, which the journal always stores (an empty Progress, which every version
                # reads): a rejected write uses its sequence numbers too, and a journal whose first write was rejected
                # would start past 1, which recovery takes for a pruned one with its snapshots gone (_check_unpruned).
                self.persist_async(Progress([], [], []), lambda e: None)
            if self.staged_ttl is not None:  # checked often enough to discard within a tenth of the TTL late
                self.schedule_repeatedly(min(60.0, max(0.05, self.staged_ttl / 10)), _EXPIRE)
            else:
                self.log.warning("spark bridge %s: staged_ttl is off: runs whose driver died before releasing "
                                 "them stay staged until discarded by hand (reprise spark discard)", self.path)
            self._fan_out()

    def _replay_progress(self, p: Progress) -> None:
        # Follow-ups first: in the live order they were registered before any confirm that could complete
        # their tree, and a follow-up is never confirmed in the round that registered it.
        if p.forwards:
            ids, tos, rows = [], [], []
            for origin, forward_id, anchor, delivery_id, to, message in p.forwards:
                if origin is not None:
                    self._forwarded.setdefault(origin, SeenIds()).add(forward_id)
                self._next_id = max(self._next_id, delivery_id + 1)
                tree = self._trees.get(anchor)
                if tree is not None:
                    tree.value ^= edge(delivery_id)
                ids.append(delivery_id)
                tos.append(to)
                rows.append(Row(delivery_id, message, anchor, bridge=self._me))
            self.restore_unconfirmed(ids, tos, rows)
        for ids in (p.confirmed, p.abandoned):  # disjoint: each id is settled once
            for delivery_id, row in zip(ids, self.confirm_deliveries(ids), strict=True):
                self._settle_found(delivery_id, row, replaying=True)

    def _restore(self, s: BridgeSnapshot) -> None:
        self._next_id = s.next_id
        self._batches = {(f, p): SeenIds.of(w - 1, above) for f, p, w, above in s.batches}
        self._unstaged = {f for f, _ in self._batches}
        self._keys = {f: set(keys) for f, keys in s.keys.items()}
        for tree_id, value, rows, feed_id, partition, batch_no in s.trees:
            self._trees[tree_id] = Tree(tree_id, value, rows, feed_id, partition, batch_no)
            self._by_batch[(feed_id, partition, batch_no)] = tree_id
            self._open[feed_id] = self._open.get(feed_id, 0) + 1
        wall = {(f, run): at for f, run, at in s.staged_at}
        now = time.monotonic()
        for seq, feed_id, partition, attempt, batch_no, size, duplicates, dead, keys in s.staged:
            batches = self._staged.setdefault((feed_id, partition), {}).setdefault(attempt, {})
            batches[batch_no] = _Staged(seq, None, partition, batch_no, size, duplicates, dead, keys)
            run = (feed_id, attempt.split("/", 1)[0])
            self._activity[run] = [now, wall.get(run, 0.0)]  # the idle clock restarts at recovery
        self._released = {f: set(p) for f, p in s.released.items()}
        self._partitions = dict(s.partitions)
        for feed_id in set(s.released).union(s.decided).difference(s.partitions):
            # Released by a version that recorded no count: the partitions released, when they are 0..n-1 (the
            # coordinator's decided ones hold every bridge's)
            parts = [[p] for p in {*s.released.get(feed_id, ()), *(p for p, _ in s.decided.get(feed_id, ()))}]
            self._record_partitions(feed_id, _count_of(parts))
        if s.unkeyed is None:  # (a snapshot of an older version: see _settle_unkeyed)
            self._unkeyed_unknown.update(s.released, s.decided)
        else:
            self._unkeyed = set(s.unkeyed)
        self._runs = OrderedDict((k, cast("tuple[int, int]", tuple(s.run_counts.get(k, (0, 0))))) for k in s.runs)
        self._discarded = OrderedDict((run_key, (reason, idle)) for run_key, reason, idle in s.discarded)
        self._decided = {f: {p: run for p, run in d} for f, d in s.decided.items()}
        for feed_id, run, winners, excluded in s.plans:
            self._plans[f"{feed_id}/{run}"] = ReleaseDecided(feed_id, run, winners, excluded)
        self._abandoned_runs = OrderedDict((run_key, list(why)) for run_key, *why in s.abandoned)
        self.restore_unconfirmed([u[0] for u in s.unconfirmed], [u[1] for u in s.unconfirmed],
                                 [Row(d, body, anchor, bridge=self._me) for d, _, body, anchor in s.unconfirmed])
        self._backlog = [_Pending(seq, None, i, first, size) for seq, i, first, size in s.backlog]
        self._ahead = set(s.confirmed_ahead)
        self._forwarded = {o: SeenIds(low, ranges) for o, (low, ranges) in s.forwarded.items()}
        self._feeds = OrderedDict((f, list(c)) for f, c in s.feeds.items())
        for feed_id in [*self._released, *self._decided]:  # (a snapshot of an older version may hold more: trimmed)
            self._remember_feed(feed_id)

    def _snapshot(self) -> BridgeSnapshot:
        return BridgeSnapshot(
            self._next_id,
            [[f, p, s.low + 1, s.above()] for (f, p), s in self._batches.items()],
            {f: list(keys) for f, keys in self._keys.items()},
            [t.state() for t in self._trees.values()],
            [[u.delivery_id, u.destination, u.message.body, u.message.anchor]
             for u in self.get_delivery_snapshot().unconfirmed_deliveries],
            [[b.seq, b.next_index, b.first_id, b.size] for b in self._backlog[self._backlog_head:]],
            sorted(self._ahead),
            {o: [s.low, [list(r) for r in s.state()[1]]] for o, s in self._forwarded.items()},
            {f: list(c) for f, c in self._feeds.items()},
            [b.state(f, p, attempt) for (f, p), attempts in self._staged.items() for attempt, batches in attempts.items()
             for b in batches.values()],
            {f: sorted(p) for f, p in self._released.items()},
            list(self._runs),
            {f: [[p, run] for p, run in sorted(d.items())] for f, d in self._decided.items()},
            [[d.feed_id, d.run, d.winners, d.excluded] for d in self._plans.values()],
            [[k, *why] for k, why in self._discarded.items()],
            [[f, run, a[1]] for (f, run), a in self._activity.items() if a[1]],
            [[k, *why] for k, why in self._abandoned_runs.items()],
            dict(self._partitions),
            {k: list(counts) for k, counts in self._runs.items() if counts != (0, 0)},
            sorted(self._unkeyed),
        )

    def stats(self) -> dict[str, int]:
        """The deliveries' counters, `feed_rows` (new rows taken from feeds since this incarnation began), and
        the staged runs: `staged_runs`, `staged_batches`, `staged_rows`, `staged_idle_seconds` (the longest
        idle), `staged_ttl_seconds` (0: off), `staged_expired` (runs discarded by the TTL since it began),
        `staged_plan_asks` (a node bridge's questions to the coordinator about idle runs since it began),
        `journal_pruned_to` (the sequence nr up to which this incarnation deleted the bridge's events; 0: none),
        `staged_restaged` (staged batches this incarnation wrote again because they held the pruning back),
        `feed_ids_remembered` (feed ids whose released partitions it keeps, to skip them in a rerun or replay),
        `feed_keys_remembered` (the keys of keyed feeds it keeps, to deliver each once) and
        `follow_up_origins_remembered` (the receivers whose accepted follow-up ids it keeps, for good: see _forward)."""
        runs = self.staged_runs()
        return {**super().stats(), "feed_rows": self._rows_in, "staged_runs": len(runs),
                "staged_batches": sum(r.batches for r in runs), "staged_rows": sum(r.rows for r in runs),
                "staged_idle_seconds": int(max((r.idle_seconds for r in runs), default=0)),
                "staged_ttl_seconds": int(self.staged_ttl or 0), "staged_expired": self._expired,
                "staged_plan_asks": self._plan_asks, "journal_pruned_to": self._pruned_to,
                "staged_restaged": self._restaged_count,
                "feed_ids_remembered": len(self._released.keys() | self._decided.keys()),
                "feed_keys_remembered": sum(map(len, self._keys.values())),
                "follow_up_origins_remembered": len(self._forwarded)}

    def staged_runs(self) -> list[StagedRun]:
        """The runs with staged batches (neither released nor discarded), the longest idle first."""
        per: dict[tuple[str, str], list[Any]] = {}  # [batches, rows, partitions, attempts]
        for (feed_id, partition), attempts in self._staged.items():
            for attempt, batches in attempts.items():
                e = per.setdefault((feed_id, attempt.split("/", 1)[0]), [0, 0, set(), 0])
                e[0] += len(batches)
                e[1] += sum(b.size for b in batches.values())
                e[2].add(partition)
                e[3] += 1
        now = time.monotonic()
        runs = []
        for (feed_id, run), (batches, rows, partitions, attempts) in per.items():
            mono, wall = self._activity.get((feed_id, run), (now, 0.0))
            runs.append(StagedRun(feed_id, run, batches, rows, len(partitions), attempts, round(now - mono, 3),
                                  wall or None, self.path))
        runs.sort(key=lambda r: (-r.idle_seconds, r.feed_id, r.run))
        return runs

    # ---- commands -------------------------------------------------------------------------------
    def receive_command(self, message: Any, sender: str | None) -> None:
        """Ingest batches, confirmations and follow-ups; answer progress questions."""
        t = type(message)
        if self._since_snapshot >= self.snapshot_every:
            self._maybe_snapshot()
        if t is Confirmed:
            self._confirm_many(message.delivery_ids)
        elif t is Confirm:
            self._confirm(message.delivery_id)
        elif t is IngestBatch:
            if not message.processed:
                self._persisted_ingest_at = time.monotonic()
            self._ingest(message)
        elif t is Forwards:
            for args in zip(message.origins, message.forward_ids, message.anchors, message.tos, message.messages,
                            message.senders, strict=True):
                self._forward(*args)
        elif t is Forward:
            self._forward(message.origin, message.forward_id, message.anchor, message.to, message.message, sender)
        elif t is _Flush:
            if message.lazy:
                self._lazy_queued = False
            else:
                self._flush_queued = False
            self._flush()
            self._queue_fan_out()
        elif t is _FanOut:
            self._fanout_queued = False
            self._fan_out()
        elif t is GetOpenBatches:
            open_ = sorted([t.partition, t.batch_no] for t in self._trees.values() if t.feed_id == message.feed_id)
            self.tell(cast(str, sender), OpenBatches(message.feed_id, open_))
        elif t is Release:
            self._release(message)
        elif t is Coordinate:
            self._coordinate(message)
        elif t is PlanOf:
            self._plan_of(message)
        elif t is RunPlan:
            self._run_plan(message)
        elif t is Discard:
            self._discard(message)
        elif t is GetStagedRuns:
            self.tell(cast(str, sender), StagedRuns(self.path, self.staged_runs(), self.staged_ttl))
        elif t is DiscardStaged:
            self._discard_staged(message, sender)
        elif t is _Expire:
            self._expire()
        elif t is AwaitBatch:
            self._await(message.feed_id, message.partition, message.batch_no, message.reply_to)
        elif t is GetFeedProgress:
            accepted, processed = self._feeds.get(message.feed_id, (0, 0))
            self.tell(cast(str, sender), FeedProgress(message.feed_id, accepted, processed))
        elif t is ConfirmUpTo:
            # A destination's cumulative confirm covers the rows delivered to it: ids are numbered across every
            # destination, and another's below it may not have arrived (they would never be resent).
            if sender is None:
                self.context.dead_letter(sender, self.path, message, "a ConfirmUpTo confirms the rows delivered to "
                                         "its sender's path, and this one has no sender: send it from the destination")
            else:
                for delivery_id in self.unconfirmed_up_to(message.delivery_id, sender):
                    self._confirm(delivery_id)
        elif t is SaveSnapshotSuccess:
            self.log.debug("spark bridge snapshot at %d", message.metadata.sequence_nr)
            self._snapshot_saved(message.metadata.sequence_nr)
        elif t is DeleteSnapshotsSuccess:
            if self._prune_to:
                self.delete_messages(self._prune_to)
                self._prune_to = 0
        elif t is DeleteSnapshotsFailure or t is DeleteMessagesFailure:
            self._prune_to = 0  # (the next snapshot tries again)
            self.log.warning("spark bridge %s: pruning its journal failed (it is tried again after the next "
                             "snapshot): %s", self.path, message.cause)
        elif t is DeleteMessagesSuccess:
            self._pruned_to = message.to_sequence_nr
            self.log.debug("spark bridge %s: events up to %d deleted", self.path, message.to_sequence_nr)
        else:
            self.log.debug("spark bridge ignored %r from %s", message, sender)

    def _ingest(self, m: IngestBatch) -> None:
        if m.attempt is not None:
            self._stage(m)
            return
        seen = self._batches.get((m.feed_id, m.partition))
        if seen is not None and m.batch_no in seen:
            # A resend, a retried task or a rerun: answer once the original is durable (it may be in flight).
            self._flush()
            accepted = BatchAccepted(m.feed_id, m.partition, m.batch_no, len(m.paths))
            self.defer_async(accepted, lambda ack: self.tell(m.reply_to, ack))
            if m.processed:
                self._await(m.feed_id, m.partition, m.batch_no, m.reply_to)
            return
        try:
            paths, values, keys, dead = self._new_rows(m)
        except _Refused as exc:
            self._refuse(m, str(exc))
            return
        event = BatchStored(m.feed_id, m.partition, m.batch_no, paths, values, m.columns, keys, self._next_id,
                            dead, len(m.paths) - len(paths))
        # State changes now, not in the handler: a copy arriving while this write is in flight is a
        # duplicate. If the write fails the actor stops and the state is rebuilt from the journal.
        tree = self._accept(event, m.reply_to if m.processed else None)
        self._allocated[event.first_id] = len(paths)
        # Written with the round's other batches and confirmations: one commit for all of them.
        self._stores.append((event, m.reply_to, tree))
        self._queue_flush()

    def _new_rows(self, m: IngestBatch) -> tuple[list[str], Any, list[Hashable] | None, list[int]]:
        """The rows of `m` whose key is new (all without keys), and which of them no host serves."""
        paths, values, keys = m.paths, m.values, m.keys
        if keys is not None:
            if len(keys) != len(paths):
                raise _Refused(f"it has {len(keys)} keys for {len(paths)} rows: give one key per row")
            known = self._keys.get(m.feed_id, ())
            fresh: list[int] = []
            taken: set[Hashable] = set()  # (a key twice in one batch: its first row goes)
            try:  # (free unless raised: no check per row)
                for i, k in enumerate(keys):
                    if k not in known and k not in taken:
                        taken.add(k)
                        fresh.append(i)
            except TypeError:
                raise _Refused(_unhashable(keys)) from None
            if len(fresh) < len(paths):
                paths = [paths[i] for i in fresh]
                keys = [keys[i] for i in fresh]
                values = ([[col[i] for i in fresh] for col in values] if m.columns is not None
                          else [values[i] for i in fresh])
        self._rows_in += len(paths)
        resolve = self.context.resolve
        # A path no host serves goes to dead letters once (the guardian records it), and is counted.
        unserved = {p for p in set(paths) if resolve(p) is None}
        return paths, values, keys, [i for i, p in enumerate(paths) if p in unserved] if unserved else []

    def _refuse(self, m: IngestBatch, reason: str) -> None:
        """Tell the sender its batch is refused (nothing of it taken): what is wrong with it."""
        self.log.error("spark bridge %s refused batch %d of partition %d of feed %r: %s", self.path, m.batch_no,
                       m.partition, m.feed_id, reason)
        self.tell(m.reply_to, BatchRefused(m.feed_id, m.partition, m.batch_no, reason))

    def _drop_attempt(self, feed_id: str, partition: int, attempt: str) -> None:
        """Forget an attempt that has no batch staged (its first one was refused)."""
        attempts = self._staged.get((feed_id, partition), {})
        if not attempts.get(attempt, True):
            del attempts[attempt]
        if not attempts:
            self._staged.pop((feed_id, partition), None)

    def _accept(self, event: BatchStored, reply_to: str | None = None) -> Tree | None:
        """Dedup marks, ids and the batch's tree (live before the write, or while replaying)."""
        key = (event.feed_id, event.partition)
        seen = self._batches.get(key)
        if seen is None:
            seen = self._batches[key] = SeenIds(-1)
            self._unstaged.add(event.feed_id)
        seen.add(event.batch_no)
        n = len(event.paths)
        if event.keys is not None:
            self._keys.setdefault(event.feed_id, set()).update(event.keys)
        elif n and "/" not in event.feed_id:
            self._unkeyed.add(event.feed_id)
        self._next_id = max(self._next_id, event.first_id + n)
        counts = self._feed(event.feed_id)
        counts[0] += n + event.duplicates
        if n - len(event.dead) <= 0:
            counts[1] += n + event.duplicates
            return None
        return self._plant(event.feed_id, event.partition, event.batch_no, event.first_id, n, event.dead,
                           event.duplicates, reply_to)

    def _plant(self, feed_id: str, partition: int, batch_no: int, first_id: int, n: int, dead: list[int],
               duplicates: int, reply_to: str | None = None) -> Tree:
        """A new tree for a batch whose rows are the deliveries first_id .. first_id + n - 1."""
        tree = Tree(first_id, edges(first_id, n, set(dead)), n + duplicates, feed_id, partition, batch_no, reply_to)
        self._trees[tree.tree_id] = tree
        self._by_batch[(feed_id, partition, batch_no)] = tree.tree_id
        self._open[feed_id] = self._open.get(feed_id, 0) + 1
        return tree

    def _feed(self, feed_id: str) -> list[int]:
        counts = self._feeds.get(feed_id)
        if counts is None:
            counts = self._feeds[feed_id] = [0, 0]
            while len(self._feeds) > 1_000:  # progress of old feeds is forgotten
                self._feeds.popitem(last=False)
        return counts

    def _stored(self, event: BatchStored, reply_to: str, tree: Tree | None) -> None:
        if event.attempt is not None:
            self._staged_stored(event, reply_to)
            return
        self._allocated.pop(event.first_id, None)
        self.tell(reply_to, BatchAccepted(event.feed_id, event.partition, event.batch_no, event.duplicates,
                                          len(event.dead)))
        for i in event.dead:
            body = event.values[i] if event.columns is None else _row_dict(event, i)
            self.tell(event.paths[i], body)
        if tree is None:  # nothing to deliver: processed at once
            self.tell(reply_to, BatchProcessed(event.feed_id, event.partition, event.batch_no))
        self._enqueue(self.last_sequence_nr, event, event.first_id)
        self._since_snapshot += 1
        self._queue_fan_out()

    # ---- staging and release (Spark's commit protocol) --------------------------------------------
    def _stage(self, m: IngestBatch) -> None:
        """Store a task attempt's batch without delivering it (a duplicate when its partition is done)."""
        attempt = cast(str, m.attempt)
        run = attempt.split("/", 1)[0]
        done = ((m.keys is None and (m.partition in self._released.get(m.feed_id, ())
                                     or m.partition in self._decided.get(m.feed_id, ())))
                or f"{m.feed_id}/{run}" in self._runs or f"{m.feed_id}/{run}" in self._discarded)
        batches = None if done else self._staged.setdefault((m.feed_id, m.partition), {}).setdefault(attempt, {})
        if batches is not None:  # (a resend too: its task is alive)
            self._touch(m.feed_id, run, time.time())
        if batches is None or m.batch_no in batches:
            # A rerun of a done partition, a zombie attempt of a finished run, or a resend: answer once the
            # original is durable (it may be in flight).
            self._flush()
            old = None if batches is None else batches[m.batch_no]
            accepted = BatchAccepted(m.feed_id, m.partition, m.batch_no, len(m.paths) if old is None else old.duplicates,
                                     0 if old is None else len(old.dead))
            self.defer_async(accepted, lambda ack: self.tell(m.reply_to, ack))
            return
        try:
            paths, values, keys, dead = self._new_rows(m)
        except _Refused as exc:
            if not batches:  # (nothing of the attempt staged: it is not a staged run)
                self._drop_attempt(m.feed_id, m.partition, attempt)
            self._refuse(m, str(exc))
            return
        event = BatchStored(m.feed_id, m.partition, m.batch_no, paths, values, m.columns, keys, 0, dead,
                            len(m.paths) - len(paths), attempt, round(time.time(), 3))
        batches[m.batch_no] = self._staged_batch(event, -1)
        self._feed(m.feed_id)[0] += len(m.paths)  # progress counts staged rows; discarded ones are taken back
        self._stores.append((event, m.reply_to, None))
        self._queue_flush()

    def _staged_batch(self, event: BatchStored, seq: int) -> _Staged:
        n = len(event.paths)
        keep = self._staged_rows + n <= self.backlog_in_memory
        if keep:
            self._staged_rows += n
        return _Staged(seq, event if keep else None, event.partition, event.batch_no, n, event.duplicates, event.dead, event.keys)

    def _stage_event(self, event: BatchStored, seq: int) -> None:
        """Replay of a staged batch."""
        run = cast(str, event.attempt).split("/", 1)[0]
        if f"{event.feed_id}/{run}" in self._runs or f"{event.feed_id}/{run}" in self._discarded:  # a zombie's
            return
        attempts = self._staged.setdefault((event.feed_id, event.partition), {})
        attempts.setdefault(cast(str, event.attempt), {})[event.batch_no] = self._staged_batch(event, seq)
        self._feed(event.feed_id)[0] += len(event.paths) + event.duplicates
        self._touch(event.feed_id, run, event.staged_at)  # (the idle clock restarts at recovery)

    def _touch(self, feed_id: str, run: str, wall: float) -> None:
        """Staging activity of the run now (its staged_ttl clock starts again)."""
        a = self._activity.get((feed_id, run))
        if a is None:
            self._activity[(feed_id, run)] = [time.monotonic(), wall]
        else:
            a[0] = time.monotonic()
            a[1] = max(a[1], wall)

    def _staged_stored(self, event: BatchStored, reply_to: str) -> None:
        staged = self._staged.get((event.feed_id, event.partition), {}).get(cast(str, event.attempt), {})
        b = staged.get(event.batch_no)
        if b is not None:
            b.seq = self.last_sequence_nr
        self._since_snapshot += 1
        self.tell(reply_to, BatchAccepted(event.feed_id, event.partition, event.batch_no, event.duplicates,
                                          len(event.dead)))

    def _release(self, m: Release) -> None:
        run_key = f"{m.feed_id}/{m.run}"
        why = self._discarded.get(run_key)
        if why is not None and why[0] == NOTHING_STAGED:
            why = None  # (its Discard dropped nothing here: releasing it loses nothing; _release_attempts forgets it)
        if why is not None or run_key in self._runs:
            self._flush()
            if why is not None:  # discarded (staged_ttl, an operator, its own Discard): its rows are gone
                self.log.warning("spark bridge %s: refused the Release of run %s of feed %r: it was discarded "
                                 "before (%s)", self.path, m.run, m.feed_id, why[0] or "the driver's Discard")
                refused = ReleaseRefused(m.feed_id, m.run, why[0], why[1], self.path)
                self.defer_async(refused, lambda r: self.tell(m.reply_to, r))
                return
            # a repeat (the driver resends until answered, and keeps the first answer it gets): the original's counts
            discarded, duplicates = self._runs[run_key]
            repeat = FeedReleased(m.feed_id, m.run, discarded, self.path, duplicates)
            self.defer_async(repeat, lambda r: self._released_reply(m, r))
            return
        if not m.planned and self._rerun_mismatch(m.feed_id, m.run, m.partitions, m.keyed, m.reply_to):
            return  # (its staged batches stay until its driver's Discard, or staged_ttl)
        self._flush()  # batches buffered before it are journaled before it
        # Its tasks are done staging: their batches' busy linger would throttle its own fan-out for busy_for s
        # (1,000 rows per 50 ms: ~0.4 s of a 1M-row processed feed). Another run still staging sets it again.
        self._persisted_ingest_at = 0.0
        event = AttemptsReleased(m.feed_id, m.run, m.winners, self._next_id, m.planned, m.partitions)
        batches, discarded = self._release_attempts(event)
        if batches:
            # Their ids are allocated (_next_id is past them) but reach the backlog only once the event is durable:
            # until then the settled watermark (_refresh_low) must stay below them, or rows sent meanwhile would
            # carry a settled_below above ids still to be delivered, and receivers would forget those as settled
            # and confirm each without applying it.
            self._allocated[batches[0].first_id] = sum(b.size for b in batches)
        reply = FeedReleased(m.feed_id, m.run, discarded, self.path, sum(len(b.skipped) for b in batches))
        self.persist_async(event, lambda e: self._released_now(batches, m, reply))

    def _release_attempts(self, event: AttemptsReleased) -> tuple[list[_Staged], int]:
        """Apply a release (live or replaying): ids, trees and keys of the winners' batches; drop the rest."""
        feed_id, run = event.feed_id, event.run
        self._discarded.pop(f"{feed_id}/{run}", None)  # (a Discard that found nothing staged: see _discard)
        # (An older driver's or version's release says no count: every partition of its job is among its winners.)
        self._record_partitions(feed_id, event.partitions or (0 if event.planned else _count_of(event.winners)))
        released = self._released.setdefault(feed_id, set())
        keys = self._keys.setdefault(feed_id, set())
        counts = self._feed(feed_id)
        next_id = event.first_id
        batches: list[_Staged] = []
        discarded = 0
        # The coordinator knows the partitions every bridge released; a planned release was checked against them.
        decided = self._decided.setdefault(feed_id, {}) if self.path == BRIDGE_PATH else None
        elsewhere: dict[int, str] = decided if decided is not None and not event.planned else {}
        # A micro-batch (its feed id has the "/" a batch feed's may not) released before is replayed: its rows are
        # the same, split maybe into other partitions (a restart on more cores), so every partition is done.
        replayed = "/" in feed_id and not event.planned and bool(released or elsewhere)
        for partition, winner in event.winners:
            # Done by another run of the feed id since this one staged it (two runs at once), here or (known
            # to the coordinator) at another bridge: only keyed batches still count, their keys were checked
            # when staged.
            done = replayed or partition in released or partition in elsewhere
            released.add(partition)
            if decided is not None:
                decided.setdefault(partition, "")
            attempts = self._staged.get((feed_id, partition), {})
            for attempt in [a for a in attempts if a == winner or a.split("/", 1)[0] == run]:
                for b in sorted(attempts.pop(attempt).values(), key=lambda b: b.batch_no):
                    if b.event is not None:
                        self._staged_rows -= b.size
                    if attempt != winner or (done and b.keys is None):
                        discarded += b.size + b.duplicates
                        counts[0] -= b.size + b.duplicates
                        continue
                    b.first_id = next_id
                    next_id += b.size
                    batches.append(b)
            if not attempts:
                self._staged.pop((feed_id, partition), None)
        discarded += self._drop_run(feed_id, run)  # the run's attempts of partitions whose winner staged elsewhere
        batches.sort(key=lambda b: b.first_id)
        unkeyed = False
        for b in batches:
            if b.keys is not None:
                # Keys were checked against the released ones when staged; the batches of this release (other
                # partitions, or another run staging at the same time) may hold them too: the first row wins.
                b.skipped = _claim_keys(b.keys, keys, b.dead)
            elif b.size:
                unkeyed = True
            if b.size - len(b.dead) - len(b.skipped) <= 0:
                counts[1] += b.size + b.duplicates
            else:
                self._plant(feed_id, b.partition, b.batch_no, b.first_id, b.size, b.dead + b.skipped, b.duplicates)
                # Settled without a delivery: the fan-out passes them over (and a snapshot keeps them so).
                self._ahead.update(b.first_id + i for i in b.skipped)
        if not keys:
            self._keys.pop(feed_id, None)
        if unkeyed and "/" not in feed_id:  # (a micro-batch replayed is done whole, keyed or not)
            self._unkeyed.add(feed_id)
        self._next_id = max(self._next_id, next_id)
        self._remember_run(f"{feed_id}/{run}", discarded, sum(len(b.skipped) for b in batches))
        self._remember_feed(feed_id)
        return batches, discarded

    def _released_now(self, batches: list[_Staged], m: Release, reply: FeedReleased) -> None:
        if batches:
            self._allocated.pop(batches[0].first_id, None)  # (in the backlog from here on: see _release)
        for b in batches:
            event = b.event
            if b.dead:  # dead-lettered once, when released (a losing attempt's rows are not)
                event = event if event is not None else self._load(b.seq)
                for i in b.dead:
                    self.tell(event.paths[i], event.values[i] if event.columns is None else _row_dict(event, i))
            self._enqueue(b.seq, b.event, b.first_id, b.size, len(b.dead), len(b.skipped))
        self._since_snapshot += 1  # (a release is replayed too: it allocates the ids and skips keys)
        self._queue_fan_out()
        self._released_reply(m, reply)

    def _released_reply(self, m: Release, reply: FeedReleased) -> None:
        self.tell(m.reply_to, reply)
        if m.processed:
            if m.feed_id in self._open:
                self._feed_waiters.setdefault(m.feed_id, set()).add(m.reply_to)
            else:
                self.tell(m.reply_to, FeedProcessed(m.feed_id, self.path))

    def _discard(self, m: Discard) -> None:
        if f"{m.feed_id}/{m.run}" not in self._runs and f"{m.feed_id}/{m.run}" not in self._discarded:
            # Spark aborts a job whose commit failed, also after the coordinator decided its run (a bridge slow to
            # confirm its Release): discarded here, rows the coordinator counts as released would be gone, and a
            # rerun skips their partitions. A decided run is released instead, as its planned Release would be.
            staged = [r for r in self.staged_runs() if (r.feed_id, r.run) == (m.feed_id, m.run)]
            if staged and self.path != BRIDGE_PATH:  # only the coordinator knows: ask it first (_run_plan)
                self._discard_waits.append([m.reply_to, {(m.feed_id, m.run)}, [], [], Discarded(m.feed_id, m.run)])
                self._ask_plans(staged, "")
                return
            if staged and self._release_decided(staged):
                self._answer_operator(m.reply_to, Discarded(m.feed_id, m.run))
                return
            # Nothing staged here: nothing is dropped (a winner's batches are all staged before its job commits),
            # and its Release may still come (a decided run whose winner here had an empty partition, its Release
            # lost): it is not refused then. Batches of the run that come later are still ignored (zombies').
            reason = "" if staged else NOTHING_STAGED
            self._flush()
            self._discard_run(m.feed_id, m.run, reason, 0.0)
            self.persist_async(AttemptsDiscarded(m.feed_id, m.run, reason), lambda e: None)
        self.defer_async(Discarded(m.feed_id, m.run), lambda d: self.tell(m.reply_to, d))

    def _discard_run(self, feed_id: str, run: str, reason: str, idle: float) -> None:
        self._discarded[f"{feed_id}/{run}"] = (reason, idle)
        while len(self._discarded) > KEPT_DISCARDED:
            self._discarded.popitem(last=False)
        self._drop_run(feed_id, run)

    def _discard_staged(self, m: DiscardStaged, sender: str | None) -> None:
        """An operator's discard: the run named, or every run (of the feed, if named) idle for `idle_for` s.

        A run the coordinator decided is released as planned instead (Spark committed its rows): the
        coordinator releases its own at once, a node bridge asks the coordinator first and answers the
        operator once every run asked about is settled (not at all while the coordinator does not answer).
        """
        chosen = [r for r in self.staged_runs()
                  if (m.feed_id is None or r.feed_id == m.feed_id) and (m.run is None or r.run == m.run)
                  and (m.idle_for is None or r.idle_seconds >= m.idle_for)]
        if self.path != BRIDGE_PATH and chosen:
            self._discard_waits.append([sender, {(r.feed_id, r.run) for r in chosen}, [], [], None])
            self._ask_plans(chosen, "operator")
            return
        released = self._release_decided(chosen)
        chosen = [r for r in chosen if r not in released]
        self._discard_runs(chosen, "operator")
        done = StagedDiscarded(self.path, chosen, released)
        self.defer_async(done, lambda d: self.tell(cast(str, sender), d))

    def _discard_runs(self, runs: list[StagedRun], reason: str) -> None:
        """Discard the staged batches of `runs`, durably (one AttemptsDiscarded each, in one write)."""
        if not runs:
            return
        self._flush()  # batches buffered before are journaled before the discard
        for r in runs:
            self.log.warning("spark bridge %s: discarded run %s of feed %r (%s): %d batches, %d rows staged, "
                             "never released, idle %.0f s", self.path, r.run, r.feed_id,
                             "staged_ttl" if reason == "ttl" else reason or "the driver's Discard", r.batches, r.rows,
                             r.idle_seconds)
            self._discard_run(r.feed_id, r.run, reason, r.idle_seconds)
        self.persist_all_async([AttemptsDiscarded(r.feed_id, r.run, reason, r.idle_seconds) for r in runs],
                               lambda e: None)

    def _expire(self) -> None:
        """Discard the runs idle for staged_ttl (their driver is presumably gone)."""
        ttl = self.staged_ttl
        if ttl is None or self.recovery_running:
            return
        now = time.monotonic()
        if not self._activity or all(now - a[0] < ttl for a in self._activity.values()):
            if self._asking:  # questions of an operator or a driver's Discard, unanswered (lost): asked again
                self._ask_plans([], "")
            return
        staged = self._staged_keys()
        for key in [k for k, a in self._activity.items() if now - a[0] >= ttl and k not in staged]:
            del self._activity[key]  # (nothing of it staged any more)
        idle = [r for r in self.staged_runs() if r.idle_seconds >= ttl]
        if self.path != BRIDGE_PATH:
            # Only the coordinator knows whether the run was decided (its driver may have died between its
            # Coordinate and its Release here): ask, and act on the answer (_run_plan); resent every tick.
            self._ask_plans(idle, "ttl")
            return
        released = self._release_decided(idle)
        idle = [r for r in idle if r not in released]
        self._expired += len(idle)
        self._discard_runs(idle, "ttl")

    def _release_decided(self, runs: list[StagedRun]) -> list[StagedRun]:
        """The coordinator's: release its share of the `runs` it decided, as their driver would have; those."""
        done = []
        for r in runs:
            plan = self._plans.get(f"{r.feed_id}/{r.run}")
            if plan is not None:
                self._release_planned(r, [[p, a] for p, a, b in plan.winners if b == self.path])
                done.append(r)
        return done

    def _release_planned(self, r: StagedRun, winners: list[list[Any]]) -> None:
        """Release the decided run `r` here as its (dead) driver's planned Release would: delivered once."""
        if not winners:  # (none of its partitions is released here: what it staged here were other attempts)
            self.log.info("spark bridge %s: dropped the other attempts of decided run %s of feed %r (%d rows)",
                          self.path, r.run, r.feed_id, r.rows)
        else:
            self._warn_planned(r)
        self._release(Release(r.feed_id, r.run, winners, self.path, planned=True))  # (its reply comes here)

    def _warn_planned(self, r: StagedRun) -> None:
        """Log that this bridge released the decided run `r` itself (its driver died after the decision)."""
        self.log.warning("spark bridge %s: released run %s of feed %r itself (%d batches, %d rows staged, idle "
                         "%.0f s): the coordinator had decided it, but its driver never sent the release here "
                         "(it died)", self.path, r.run, r.feed_id, r.batches, r.rows, r.idle_seconds)

    def _ask_plans(self, runs: list[StagedRun], reason: str) -> None:
        """A node bridge's: ask the coordinator whether `runs` (and those still unanswered) were decided."""
        for r in runs:
            asked = self._asking.setdefault((r.feed_id, r.run), [reason, r.idle_seconds])
            if reason == "operator":
                asked[0] = reason
            asked[1] = r.idle_seconds
        staged = self._staged_keys()
        for key in [k for k in self._asking if k not in staged]:  # released or discarded meanwhile
            self._asking.pop(key)
            self._settle_waits(key, None, "")
        for (feed_id, run), (why, idle) in self._asking.items():
            self._plan_asks += 1
            self.tell(BRIDGE_PATH, PlanOf(feed_id, run, self.path, why, idle))

    def _staged_keys(self) -> set[tuple[str, str]]:
        """(feed id, run) of every run with batches staged here."""
        return {(f, attempt.split("/", 1)[0]) for (f, _), attempts in self._staged.items() for attempt in attempts}

    def _run_plan(self, m: RunPlan) -> None:
        """A node bridge's: the coordinator answered a PlanOf: release the run as decided, or discard it."""
        key = (m.feed_id, m.run)
        asked = self._asking.pop(key, None)
        if asked is None:  # a second answer (the question was resent): settled by the first
            return
        r = next((r for r in self.staged_runs() if (r.feed_id, r.run) == key), None)
        outcome = ""
        if r is None:  # released or discarded meanwhile
            pass
        elif m.winners is not None:
            self._release_planned(r, m.winners)
            outcome = "released"
        elif m.abandoned:  # durable at the coordinator: never decided now, so nothing of it can be released
            if asked[0] == "ttl":
                self._expired += 1
            self._discard_runs([r], asked[0])
            outcome = "discarded"
        else:
            self.log.error("spark bridge %s: run %s of feed %r is idle (%.0f s), but the coordinator no longer "
                           "keeps its plan (it decided %d later runs since): it stays staged; check whether its "
                           "feed was delivered, then discard it by hand (reprise spark discard)", self.path, m.run,
                           m.feed_id, r.idle_seconds, KEPT_PLANS)
        self._settle_waits(key, r, outcome)

    def _settle_waits(self, key: tuple[str, str], r: StagedRun | None, outcome: str) -> None:
        """Answer the operators whose runs are all settled now (once what was done is durable)."""
        for wait in list(self._discard_waits):
            sender, keys, discarded, released, reply = wait
            if key not in keys:
                continue
            keys.discard(key)
            if outcome:
                (discarded if outcome == "discarded" else released).append(r)
            if not keys:
                self._discard_waits.remove(wait)
                # (a driver's Discard is answered Discarded: its run is settled here, released or discarded)
                self._answer_operator(sender, reply or StagedDiscarded(self.path, discarded, released))

    def _answer_operator(self, sender: str | None, done: StagedDiscarded | Discarded) -> None:
        """Tell the operator (a DiscardStaged's sender) what was done, once it is durable."""
        self.defer_async(done, lambda d: self.tell(cast(str, sender), d))

    def _drop_run(self, feed_id: str, run: str) -> int:
        """Forget every batch the attempts of `run` staged for `feed_id`; the rows dropped."""
        dropped = 0
        for key in [k for k in self._staged if k[0] == feed_id]:
            attempts = self._staged[key]
            for attempt in [a for a in attempts if a.split("/", 1)[0] == run]:
                for b in attempts.pop(attempt).values():
                    self._staged_rows -= b.size if b.event is not None else 0
                    self._feed(feed_id)[0] -= b.size + b.duplicates
                    dropped += b.size + b.duplicates
            if not attempts:
                del self._staged[key]
        self._activity.pop((feed_id, run), None)
        return dropped

    # ---- the coordinator of multi-bridge feeds ----------------------------------------------------
    def _coordinate(self, m: Coordinate) -> None:
        """Decide, durably and once per run, which winners their bridges release: none of a partition
        released before by any bridge (unless the feed is keyed: keys are checked by each bridge)."""
        known = self._plans.get(f"{m.feed_id}/{m.run}")
        if known is not None:  # a repeat: the same plan, once it is durable (it may be in flight)
            plan = ReleasePlan(known.feed_id, known.run, known.winners, known.excluded, self._earlier(known))
            self.defer_async(plan, lambda p: self.tell(m.reply_to, p))
            return
        abandoned = self._abandoned_runs.get(f"{m.feed_id}/{m.run}")
        why = self._discarded.get(f"{m.feed_id}/{m.run}")  # (what it staged here is gone)
        if why is not None and why[0] == NOTHING_STAGED:  # (nothing was: see _discard)
            why = None
        if abandoned is not None or why is not None:
            # A bridge found it idle and discarded it, undecided: deciding it now would have rows of it released
            # at the other bridges but not there, and a rerun would skip those partitions: refused.
            if abandoned is not None:
                bridge, reason, idle = cast(str, abandoned[0]), cast(str, abandoned[1]), cast(float, abandoned[2])
            else:
                bridge, (reason, idle) = self.path, cast(tuple[str, float], why)
            self.log.warning("spark bridge %s: refused the Coordinate of run %s of feed %r: %s discarded it "
                             "before (%s)", self.path, m.run, m.feed_id, bridge, reason or "the driver's Discard")
            self._flush()
            refused = ReleaseRefused(m.feed_id, m.run, reason, idle, bridge)
            self.defer_async(refused, lambda r: self.tell(m.reply_to, r))
            return
        if self._rerun_mismatch(m.feed_id, m.run, m.partitions, m.keyed, m.reply_to):
            return
        decided = self._decided.get(m.feed_id, {})
        winners: list[list[Any]] = []
        excluded: list[list[Any]] = []
        replayed = "/" in m.feed_id and bool(decided)  # (a micro-batch decided before: see _release_attempts)
        for partition, attempt, bridge in m.winners:
            done = not m.keyed and (replayed or partition in decided)
            (excluded if done else winners).append([partition, attempt, bridge])
        event = ReleaseDecided(m.feed_id, m.run, winners, excluded, m.partitions, m.keyed)
        reply = ReleasePlan(m.feed_id, m.run, winners, excluded, self._earlier(event))
        self._decide(event)  # now: a repeat or a direct release arriving meanwhile sees the decision
        self.persist_async(event, lambda e: self.tell(m.reply_to, reply))

    def _earlier(self, event: ReleaseDecided) -> list[list[Any]]:
        """The releases of the earlier runs that decided `event`'s excluded partitions (those still kept)."""
        decided = self._decided.get(event.feed_id, {})
        earlier: list[list[Any]] = []
        for run in dict.fromkeys(decided.get(p, "") for p, _, _ in event.excluded):
            plan = self._plans.get(f"{event.feed_id}/{run}") if run and run != event.run else None
            if plan is None:
                continue
            by_bridge: dict[str, list[list[Any]]] = {}
            for partition, attempt, bridge in plan.winners:
                by_bridge.setdefault(bridge, []).append([partition, attempt])
            earlier.extend([run, bridge, w] for bridge, w in by_bridge.items())
        return earlier

    def _plan_of(self, m: PlanOf) -> None:
        """A node bridge asks about its idle run: its share of the plan, or (undecided) abandoned, durably."""
        if self.path != BRIDGE_PATH:  # (node bridges ask the coordinator; they know no plans)
            self.log.error("spark bridge %s got %r: only the coordinator %s answers it", self.path, m, BRIDGE_PATH)
            return
        run_key = f"{m.feed_id}/{m.run}"
        plan = self._plans.get(run_key)
        if plan is not None:  # (durable once any write in flight is: the plan may be)
            reply = RunPlan(m.feed_id, m.run, [[p, a] for p, a, b in plan.winners if b == m.bridge])
        elif run_key in self._abandoned_runs:
            reply = RunPlan(m.feed_id, m.run, None, abandoned=True)
        elif m.run in self._decided.get(m.feed_id, {}).values():  # decided, but its plan is no longer kept
            reply = RunPlan(m.feed_id, m.run, None)
        else:
            event = RunAbandoned(m.feed_id, m.run, m.bridge, m.reason, m.idle_seconds)
            self._abandon(event)  # now: a Coordinate arriving meanwhile is refused
            self.log.warning("spark bridge: run %s of feed %r was never decided and is idle at %s (%s): abandoned, "
                             "its Coordinate will be refused", m.run, m.feed_id, m.bridge, m.reason)
            self.persist_async(event, lambda e: self.tell(m.bridge, RunPlan(m.feed_id, m.run, None, True)))
            return
        self._flush()
        self.defer_async(reply, lambda r: self.tell(m.bridge, r))

    def _abandon(self, event: RunAbandoned) -> None:
        self._abandoned_runs[f"{event.feed_id}/{event.run}"] = [event.bridge, event.reason, event.idle_seconds]
        while len(self._abandoned_runs) > KEPT_DISCARDED:
            self._abandoned_runs.popitem(last=False)

    def _decide(self, event: ReleaseDecided) -> None:
        self._record_partitions(event.feed_id, event.partitions or _count_of(event.winners + event.excluded))
        if event.winners and "/" not in event.feed_id:  # (rows of a keyed run are all staged here: _release_attempts)
            if event.keyed is None:  # written by an older version
                self._unkeyed_unknown.add(event.feed_id)
            elif not event.keyed:
                self._unkeyed.add(event.feed_id)
        decided = self._decided.setdefault(event.feed_id, {})
        for partition, _, _ in event.winners:
            decided.setdefault(partition, event.run)
        self._plans[f"{event.feed_id}/{event.run}"] = event
        while len(self._plans) > KEPT_PLANS:
            self._plans.popitem(last=False)
        self._remember_feed(event.feed_id)

    def _remember_feed(self, feed_id: str) -> None:
        """Note a stream's micro-batch released (or decided); forget the releases of its micro-batches released before
        its newest `kept_micro_batches`, and, past `kept_stream_batches` over all streams, all but the newest of the
        streams that released least recently.

        Spark replays only a query's newest micro-batch (after a crash between the release and its commit log), so
        what a forgotten one released is never asked again; were one replayed all the same, its rows would be
        delivered again (README: the Spark bridge). The newest of a stream is kept however long its query stays down.
        Newest means released last (batch ids start at 0 again for a query whose checkpoint was reset). The same on
        replay and live: the same events forget the same feed ids. A batch feed id (no "/") is kept, as documented,
        unless `kept_feed_ids` says how many to keep."""
        stream, _, tail = feed_id.rpartition("/")
        if not stream or not tail.isdigit() or tail != str(int(tail)):
            if self.kept_feed_ids is not None:  # (a batch feed id, or not Spark's f"{base}/{batch id}")
                self._remember_batch_feed(feed_id)
            return
        batch_id = int(tail)
        kept = self._streams.setdefault(stream, [])
        if batch_id in kept:  # (its other bridges', or a repeat: noted once; at most kept_micro_batches to look at)
            return
        kept.append(batch_id)
        if len(kept) > 1:
            self._stream_batches += 1
            self._trimmable[stream] = None
            self._trimmable.move_to_end(stream)
        while len(kept) > max(1, self.kept_micro_batches):  # (the newest always: see above)
            self._forget_feed(f"{stream}/{kept.pop(0)}")
            self._stream_batches -= 1
        trimmable = self._trimmable
        while self._stream_batches > self.kept_stream_batches and trimmable:
            oldest = trimmable.popitem(last=False)[0]
            batch_ids = self._streams[oldest]
            for b in batch_ids[:-1]:
                self._forget_feed(f"{oldest}/{b}")
            self._stream_batches -= len(batch_ids) - 1
            del batch_ids[:-1]

    def _remember_batch_feed(self, feed_id: str) -> None:
        """Note a batch feed id released (or decided); past `kept_feed_ids`, forget the one first released longest
        ago: a rerun of it is a new feed from then on, and delivers its rows again."""
        batch_feeds = self._batch_feeds
        if feed_id in batch_feeds:
            return
        batch_feeds[feed_id] = None
        while len(batch_feeds) > cast(int, self.kept_feed_ids):
            self._forget_feed(batch_feeds.popitem(last=False)[0])

    def _forget_feed(self, feed_id: str) -> None:
        """Forget which partitions and keys `feed_id` released: a run of it is a new one from now on."""
        self._released.pop(feed_id, None)
        self._decided.pop(feed_id, None)
        self._keys.pop(feed_id, None)
        self._partitions.pop(feed_id, None)
        self._unkeyed.discard(feed_id)

    def _record_partitions(self, feed_id: str, partitions: int) -> None:
        """Remember the partition count of a batch feed id's first run released (or decided) that said it."""
        if partitions > 0 and "/" not in feed_id:  # (a micro-batch replayed is done whole however it splits)
            self._partitions.setdefault(feed_id, partitions)

    def _settle_unkeyed(self) -> None:
        """At the end of recovery: a feed id released or decided by an older version, which did not record whether
        with keys, released rows without keys unless the bridge knows keys of it (a keyed feed's keys are all kept
        here). A keyed feed id that released no row is taken for unkeyed: its keyed rerun is refused, not doubled."""
        self._unkeyed.update(f for f in self._unkeyed_unknown if "/" not in f and f not in self._keys)
        self._unkeyed_unknown.clear()

    def _rerun_mismatch(self, feed_id: str, run: str, partitions: int, keyed: bool, reply_to: str) -> bool:
        """Refuse a rerun that cannot skip what the feed id's released runs delivered (answer the driver).

        An unkeyed rerun split into another partition count: a rerun skips released partitions by number, so its
        rows would be skipped or delivered twice (PartitionsMismatch). A keyed rerun of a feed id that released rows
        without keys: their keys are unknown, so they would all be delivered again (KeyingMismatch). An unkeyed
        rerun of a feed id fed before staging: no partition of it is known complete (FedBeforeStaging)."""
        refused: RerunRefusal
        known = self._partitions.get(feed_id)
        stream, _, tail = feed_id.rpartition("/")
        kept = self._streams.get(stream) if stream and tail.isdigit() and tail == str(int(tail)) else None
        if kept and int(tail) < kept[-1]:
            # Spark replays a query's newest micro-batch only: an earlier one is another query's (a new or reset
            # checkpoint under the same feed_id, numbering from 0 again), whose rows a "replay" would skip for good.
            self.log.warning("spark bridge %s: refused run %s of feed %r: micro-batch %s comes after micro-batch %d "
                             "was released (a query restarted from a new checkpoint under the same feed_id?)",
                             self.path, run, feed_id, tail, kept[-1])
            refused = StreamRestarted(feed_id, run, int(tail), kept[-1], self.path)
        elif not keyed and feed_id in self._unstaged:
            self.log.warning("spark bridge %s: refused run %s of feed %r: fed before staging, its partitions are not "
                             "known to be complete", self.path, run, feed_id)
            refused = FedBeforeStaging(feed_id, run, self.path)
        elif keyed:
            if feed_id not in self._unkeyed:
                return False
            self.log.warning("spark bridge %s: refused keyed run %s of feed %r: its released runs had no keys",
                             self.path, run, feed_id)
            refused = KeyingMismatch(feed_id, run, self.path)
        else:
            if not partitions or known is None or known == partitions:
                return False
            self.log.warning("spark bridge %s: refused run %s of feed %r: %d partitions, its released runs had %d",
                             self.path, run, feed_id, partitions, known)
            refused = PartitionsMismatch(feed_id, run, partitions, known, self.path)
        self._flush()
        self.defer_async(refused, lambda r: self.tell(reply_to, r))  # (once what it was checked against is durable)
        return True

    def _remember_run(self, run_key: str, discarded: int, duplicates: int) -> None:
        self._runs[run_key] = (discarded, duplicates)
        while len(self._runs) > KEPT_RUNS:  # runs older than that are not recognised as repeats
            self._runs.popitem(last=False)

    def _await(self, feed_id: str, partition: int, batch_no: int, reply_to: str) -> None:
        tree_id = self._by_batch.get((feed_id, partition, batch_no))
        if tree_id is not None:
            self._trees[tree_id].reply_to = reply_to
            return
        seen = self._batches.get((feed_id, partition))
        if seen is not None and batch_no in seen:  # stored and complete (or all rows dead or duplicates)
            done = BatchProcessed(feed_id, partition, batch_no)
            self.defer_async(done, lambda d: self.tell(reply_to, d))

    # ---- confirmations and follow-ups -----------------------------------------------------------
    def _confirm_many(self, delivery_ids: list[int]) -> None:
        """The hot path of _settle for a host's batch of confirmations."""
        trees, confirmed = self._trees, self._confirmed
        rows = self.confirm_deliveries(delivery_ids)
        for delivery_id, e, row in zip(delivery_ids, edge_list(delivery_ids), rows, strict=True):
            if row is None:
                if self._settle_found(delivery_id, None, replaying=False):
                    confirmed.append(delivery_id)
                continue
            confirmed.append(delivery_id)
            tree = trees.get(row.anchor)
            if tree is not None:
                tree.value ^= e
                if not tree.value:
                    self._complete(tree, replaying=False)
        if confirmed:
            self._queue_confirms()

    def _queue_confirms(self) -> None:
        # Confirmations that complete nothing need not be durable at once (lost ones come back through
        # redelivery): they wait for a completed tree, a full event or the lazy timer, saving commits.
        self._queue_flush(urgent=bool(self._completed) or len(self._confirmed) >= self.confirms_per_event)

    def _confirm(self, delivery_id: int) -> None:
        if self._settle(delivery_id, replaying=False):
            self._confirmed.append(delivery_id)
            self._queue_confirms()

    def _settle(self, delivery_id: int, replaying: bool) -> bool:
        """Apply the first confirmation (or abandonment) of `delivery_id` to its tree; False for a repeat."""
        return self._settle_found(delivery_id, self.confirm_deliveries((delivery_id,))[0], replaying)

    def _settle_found(self, delivery_id: int, row: Row | None, replaying: bool) -> bool:
        """_settle once `delivery_id` is confirmed: `row` was its unconfirmed delivery (None: it was not)."""
        if row is not None:
            anchor = row.anchor
        else:
            pending = self._pending_of(delivery_id)
            if pending is None or delivery_id in self._ahead:
                return False
            # A row not fanned out again yet after a restart, confirmed by its destination meanwhile.
            self._ahead.add(delivery_id)
            anchor = pending.first_id
        tree = self._trees.get(anchor)
        if tree is not None:
            tree.value ^= edge(delivery_id)
            if tree.value == 0:
                self._complete(tree, replaying)
        return True

    def _close_tree(self, feed_id: str) -> None:
        """One tree of `feed_id` fewer open (completed, or its batch rejected)."""
        left = self._open.get(feed_id, 1) - 1
        if left > 0:
            self._open[feed_id] = left
        else:
            self._open.pop(feed_id, None)

    def _complete(self, tree: Tree, replaying: bool) -> None:
        del self._trees[tree.tree_id]
        self._close_tree(tree.feed_id)
        self._by_batch.pop((tree.feed_id, tree.partition, tree.batch_no), None)
        if replaying:
            self._feed(tree.feed_id)[1] += tree.rows
        else:  # reported once the Progress event with its last confirmation is durable
            self._completed.append(tree)

    def _pending_of(self, delivery_id: int) -> _Pending | None:
        """The backlog batch holding row `delivery_id` if that row is not registered yet."""
        backlog, head = self._backlog, self._backlog_head
        lo, hi = head, len(backlog)
        while lo < hi:  # last entry with first_id <= delivery_id
            mid = (lo + hi) // 2
            if backlog[mid].first_id <= delivery_id:
                lo = mid + 1
            else:
                hi = mid
        if lo == head:
            return None
        b = backlog[lo - 1]
        i = delivery_id - b.first_id
        return b if b.next_index <= i < b.size else None

    def _forward(self, origin: str | None, forward_id: int, anchor: int | None, to: str, message: object,
                 sender: str | None) -> None:
        if origin is not None:
            # Kept for good, not even dropped when the receiver passivates: a receiver resends every follow-up it
            # has no acceptance of in its journal (it journals none: its next row's event records how far they were
            # accepted), with any row redelivered to it, however much later it recovers. Forgetting an origin would
            # deliver such a resend a second time. One entry per receiver (~280 bytes while its ids come in order).
            seen = self._forwarded.get(origin)
            if seen is None:
                seen = self._forwarded[origin] = SeenIds()
            if forward_id in seen:  # sent again (a crash, a redelivered row): accepted once the original is durable
                if sender is not None:
                    # Answered with the round's others (_flush): one message per receiving host, not one each.
                    self._duplicates.append((sender, forward_id))
                    self._queue_flush()
                return
            seen.add(forward_id)
        if to not in self._valid_paths:
            try:
                actors.validate_path(to, what="follow-up destination")
            except actors.InvalidPath as exc:
                self.log.error("spark bridge dropped a follow-up from %s: %s", sender, exc)
                self.context.dead_letter(sender, str(to), message, str(exc))
                if origin is not None:
                    self._forward_replies.append((sender, forward_id))
                    self._queue_flush()
                return
            if len(self._valid_paths) < 10_000:  # follow-ups go to a few paths (a ledger), checked once
                self._valid_paths.add(to)
        delivery_id = self._next_id
        self._next_id += 1
        self._allocated[delivery_id] = 1
        tree = self._trees.get(anchor)
        if tree is not None:  # a follow-up of a finished tree (or of none) is delivered but not waited for
            tree.value ^= edge(delivery_id)
        self._forwards.append([origin, forward_id, anchor, delivery_id, to, message])
        if origin is not None:
            self._forward_replies.append((sender, forward_id))
        self._queue_flush()

    def _queue_flush(self, urgent: bool = True) -> None:
        """Flush after the current message (urgent), or within `lazy_flush` s (confirmations alone)."""
        if urgent:
            if not self._flush_queued:
                self._flush_queued = True
                if self.progress_linger > 0:
                    self.schedule_once(self.progress_linger, _FLUSH)
                else:
                    self.tell(self.path, _FLUSH)
        elif not self._lazy_queued:
            self._lazy_queued = True
            self.schedule_once(self.lazy_flush, _LAZY_FLUSH)

    def _flush(self) -> None:
        """Persist the round's batches, and its confirmations and follow-ups as one event; act once durable."""
        if self._stores:
            stores, self._stores = self._stores, []
            for stored, reply_to, tree in stores:
                self._stores_in_flight[id(stored)] = (reply_to, tree)
            self.persist_all_async([s[0] for s in stores], self._store_written)
        duplicates = self._duplicates
        if duplicates:
            self._duplicates = []
        if not (self._confirmed or self._forwards or self._abandoned or self._forward_replies):
            if duplicates:  # their originals were written before: accepted once every write in flight is durable
                self.defer_async(duplicates, self._accept_forwards)
            return
        event = Progress(self._confirmed, self._forwards, self._abandoned)
        replies, completed = self._forward_replies, self._completed
        replies.extend(duplicates)  # (their originals are in this event or an earlier one: accepted with its own)
        self._confirmed, self._forwards, self._abandoned, self._forward_replies, self._completed = [], [], [], [], []
        self._persist_progress(event, replies, completed)

    def _persist_progress(self, event: Progress, replies: list[tuple[str | None, int]], completed: list[Tree]) -> None:
        """Write a round's Progress; once durable, deliver its follow-ups, answer, report (_progressed)."""
        self._progress_in_flight[id(event)] = (replies, completed)
        self.persist_async(event, self._progressed)

    def on_persist_rejected(self, cause: BaseException, event: Any, sequence_nr: int) -> None:
        """A rejected Progress goes again without the follow-ups the journal cannot store (each dead-lettered)."""
        super().on_persist_rejected(cause, event, sequence_nr)
        if type(event) is Progress:
            self._progress_rejected(event, cause)
        elif type(event) is BatchStored:
            self._batch_rejected(event)

    def _store_written(self, event: BatchStored) -> None:
        reply_to, tree = self._stores_in_flight.pop(id(event))
        self._stored(event, reply_to, tree)

    def _batch_rejected(self, event: BatchStored) -> None:
        """Undo what accepting `event` marked: nothing of it is stored, nor of the round's other batches.

        The batches of a round are one atomic write, so one the journal cannot store takes the others with it.
        Left marked, a task's resend of any of them was answered "accepted" as a duplicate (of nothing durable:
        a restart lost it, a release delivered it from memory with ids a restart gives to other rows). Unmarked,
        the resend is staged (or stored) again; the batch that cannot be stored is never accepted.
        """
        self._stores_in_flight.pop(id(event), None)
        feed_id, partition, batch_no = event.feed_id, event.partition, event.batch_no
        counts = self._feed(feed_id)
        if event.attempt is not None:
            attempts = self._staged.get((feed_id, partition), {})
            batches = attempts.get(event.attempt, {})
            b = batches.get(batch_no)
            if b is None or b.seq >= 0:  # released or discarded meanwhile (its run's driver did not wait for it)
                return
            del batches[batch_no]
            if b.event is not None:
                self._staged_rows -= b.size
            counts[0] -= b.size + b.duplicates
            if not batches:
                del attempts[event.attempt]
            if not attempts:
                self._staged.pop((feed_id, partition), None)
            return
        seen = self._batches.get((feed_id, partition))
        if seen is not None:
            seen.discard(batch_no)
        if event.keys is not None:  # (all new: _new_rows left out the keys known before)
            self._keys.get(feed_id, set()).difference_update(event.keys)
        self._allocated.pop(event.first_id, None)  # (its ids stay unused: the settled watermark passes them)
        n = len(event.paths) + event.duplicates
        counts[0] -= n
        tree_id = self._by_batch.pop((feed_id, partition, batch_no), None)
        if tree_id is None:
            counts[1] -= n
        else:
            self._trees.pop(tree_id, None)
            self._close_tree(feed_id)

    def _progress_rejected(self, event: Progress, cause: BaseException) -> None:
        # Nothing of it is stored, but what it records was acted on: its follow-ups are marked seen (a resend is
        # taken for a duplicate and accepted), their delivery ids allocated (no snapshot is taken while one is)
        # and awaited by their rows' trees. Left so, an accepted follow-up was never delivered and its feed never
        # completed. A follow-up the journal cannot store is refused as one to an invalid path is (_forward):
        # dead-lettered and accepted, no longer awaited; the rest goes again.
        replies, completed = self._progress_in_flight.pop(id(event))
        if not event.forwards:
            # Only ids, which always encode: rejected for something else. What it lost are confirmations, which
            # a restart redelivers (destinations dedup): go on as if it were stored.
            self._act_on_progress(event, replies, completed)
            return
        kept: list[list[Any]] = []
        refused: list[tuple[list[Any], BaseException]] = []
        for forward in event.forwards:
            try:
                serialize(Progress([], [forward], []))
                kept.append(forward)
            except Exception as exc:
                refused.append((forward, exc))
        if not refused:  # (the follow-ups encode, yet were rejected together: none is tried again)
            kept, refused = [], [(forward, cause) for forward in event.forwards]
        for (_, _, anchor, delivery_id, to, message), why in refused:
            self.log.error("spark bridge dropped a follow-up to %s: the journal cannot store it: %s", to, why)
            self.context.dead_letter(None, to, message, f"the spark bridge's journal cannot store this follow-up: {why}")
            self._allocated.pop(delivery_id, None)
            tree = self._trees.get(anchor)
            if tree is not None:
                tree.value ^= edge(delivery_id)
                if tree.value == 0:
                    self._complete(tree, replaying=False)  # (reported with the next Progress)
        if self._completed:
            self._queue_flush()
        self._persist_progress(Progress(event.confirmed, kept, event.abandoned), replies, completed)

    def _progressed(self, event: Progress) -> None:
        replies, completed = self._progress_in_flight.pop(id(event))
        self._act_on_progress(event, replies, completed)

    def _act_on_progress(self, event: Progress, replies: list[tuple[str | None, int]], completed: list[Tree]) -> None:
        """Once `event` is durable: deliver its follow-ups, accept them, report the trees it completed."""
        low = self._low
        if event.forwards:
            # Delivered together, sent as one RowChunk per host.
            out = _RowsOut(bridge=self._me)
            allocated = self._allocated
            for _, _, anchor, delivery_id, to, message in event.forwards:
                allocated.pop(delivery_id, None)
                out.rows.append(Row(delivery_id, message, anchor, low, bridge=self._me))
                out.targets.append(to)
                out.ids.append(delivery_id)
                out.anchors.append(anchor)
                out.values.append(message)
            self._deliver_rows(out, low)
        self._accept_forwards(cast("list[tuple[str, int]]", [r for r in replies if r[0] is not None]))
        for tree in completed:
            self._feed(tree.feed_id)[1] += tree.rows
            if tree.reply_to is not None:
                self.tell(tree.reply_to, BatchProcessed(tree.feed_id, tree.partition, tree.batch_no))
            if tree.feed_id in self._feed_waiters and tree.feed_id not in self._open:
                for waiter in self._feed_waiters.pop(tree.feed_id):
                    self.tell(waiter, FeedProcessed(tree.feed_id, self.path))

    def _accept_forwards(self, replies: list[tuple[str, int]]) -> None:
        """Tell each sender that its follow-ups in `replies` (sender, forward id) are durable: one message per host."""
        if replies:
            targets, ids = [r[0] for r in replies], [r[1] for r in replies]
            self.context.scatter(self.path, targets, lambda idx: ForwardsAccepted(*_pick(idx, targets, ids)))

    # ---- fan-out --------------------------------------------------------------------------------
    def _enqueue(self, seq: int, event: BatchStored | None, first_id: int, size: int = -1,
                 dead: int = 0, skipped: int = 0) -> None:
        """Queue a stored batch's rows `first_id ..` for fan-out (`event` None: read back when its turn comes)."""
        if event is not None:
            size, dead = len(event.paths), len(event.dead)
        if dead + skipped >= size:
            return
        keep = event is not None and self._backlog_rows + size <= self.backlog_in_memory
        self._backlog.append(_Pending(seq, event if keep else None, 0, first_id, size))
        if keep:
            self._backlog_rows += size

    def _fan_out(self) -> None:
        """Register (and send) the next rows of the backlog, up to the window and one chunk per turn."""
        if self.recovery_running:
            return
        now = time.monotonic()
        # While ack="persisted" batches keep coming, acceptance goes first: small, spaced turns of fan-out
        # (a processed feed waits for the fan-out, so it gets full turns).
        chunk = self.fan_out_chunk_busy if self._busy(now) else self.fan_out_chunk
        budget = min(self.fan_out_window - self.number_of_unconfirmed, chunk)
        backlog = self._backlog
        if now - self._low_at > 0.5:
            self._refresh_low(now)
        low = self._low
        ahead = self._ahead
        me = self._me
        out = _RowsOut(bridge=me)
        while budget > 0 and self._backlog_head < len(backlog):
            b = backlog[self._backlog_head]
            event = b.event
            if event is None:
                head = self._head_read
                if head is not None and head[0] == b.seq:
                    event = head[1]
                else:
                    event = self._load(b.seq)
                    self._head_read = (b.seq, event)
            start = b.next_index
            end = min(b.size, start + budget)
            dead = set(event.dead)
            first = b.first_id  # (a staged batch's ids are allocated on release, not stored in it)
            paths = event.paths
            columns = event.columns
            if columns is None:
                datas = event.values[start:end]
            else:  # the receiver builds the dict (Row.body): the bridge is the busier process
                datas = list(zip(*(c[start:end] for c in event.values), strict=True))
            if columns != out.columns:
                self._deliver_rows(out, low)
                out = _RowsOut(columns, me)
            targets, ids, anchors, values, rows = out.targets, out.ids, out.anchors, out.values, out.rows
            for i, data in enumerate(datas, start):
                if dead and i in dead:
                    continue
                delivery_id = first + i
                if ahead and delivery_id in ahead:
                    ahead.discard(delivery_id)
                    continue
                rows.append(_new_row((delivery_id, data, first, low, columns, me)))
                targets.append(paths[i])
                ids.append(delivery_id)
                anchors.append(first)
                values.append(data)
            budget -= end - start
            b.next_index = end
            if end >= b.size:
                if b.event is not None:
                    self._backlog_rows -= b.size
                else:
                    self._head_read = None
                backlog[self._backlog_head] = None  # type: ignore[call-overload]
                self._backlog_head += 1
                if self._backlog_head > 1024 and self._backlog_head * 2 > len(backlog):
                    del backlog[:self._backlog_head]
                    self._backlog_head = 0
        self._deliver_rows(out, low)
        if self.number_of_unconfirmed < self.fan_out_window:
            self._queue_fan_out()

    def _deliver_rows(self, out: _RowsOut, low: int) -> None:
        """Deliver the rows gathered in `out` at least once, sending them as one RowChunk per host."""
        if out.ids:
            host, me = self.context, self.path
            self.deliver_many(out.ids, out.targets, out.rows, lambda: out.send(host, me, low))

    def _busy(self, now: float) -> bool:
        return now - self._persisted_ingest_at < self.busy_for

    def _queue_fan_out(self) -> None:
        # Through a timer turn, so that the messages already waiting (ingest, confirms) go first.
        if self._backlog_head < len(self._backlog) and not self._fanout_queued:
            self._fanout_queued = True
            self.schedule_once(self.busy_pause if self._busy(time.monotonic()) else 0.0, _FANOUT)

    def _load(self, seq: int) -> BatchStored:
        for event in self.read_events(seq, seq, 1):
            return cast(BatchStored, event)
        raise RuntimeError(f"spark bridge: stored batch at sequence number {seq} is missing from the journal")

    def _refresh_low(self, now: float) -> None:
        """Every delivery id below `_low` is settled: destinations may forget them (Row.settled_below)."""
        candidates = [self._next_id]
        if self.number_of_unconfirmed:
            candidates.append(min(self.unconfirmed_ids()))
        if self._allocated:
            candidates.append(min(self._allocated))
        if self._backlog_head < len(self._backlog):
            b = self._backlog[self._backlog_head]
            candidates.append(b.first_id + b.next_index)
        self._low = min(candidates)
        self._low_at = now

    # ---- redelivery and snapshots -----------------------------------------------------------------
    def should_redeliver(self, delivery_id: int, destination: str, message: Row) -> bool:
        """Resend unless the path stopped being served: then dead-letter the row once instead of retrying forever."""
        if self.context.resolve(destination) is not None:
            return True
        self.context.dead_letter(self.path, destination, message.body, "no actor serves this path")
        if self._settle(delivery_id, replaying=False):
            self._abandoned.append(delivery_id)
            self._queue_flush()
        return False

    def _maybe_snapshot(self) -> None:
        # Only between rounds, when nothing is in flight: the state then is exactly the journal's.
        if self._stores or self._confirmed or self._forwards or self._abandoned or self._forward_replies:
            self._queue_flush()  # buffered changes first; the next message finds them durable
        elif self.pending_handlers == 0 and not self._allocated:
            self._since_snapshot = 0
            self._saving = (self.snapshot_sequence_nr, self._floor(self.snapshot_sequence_nr))
            self.save_snapshot(self._snapshot())

    def _floor(self, seq: int) -> int:
        """The highest event that recovery from a snapshot at `seq` of the current state does not need: the
        snapshot's own, or just below the oldest batch still staged or waiting for fan-out (read back by _load)."""
        needed = [b.seq for attempts in self._staged.values() for batches in attempts.values()
                  for b in batches.values()]
        needed += [b.seq for b in self._backlog[self._backlog_head:]]
        return min(seq, min(needed, default=seq + 1) - 1)

    def _snapshot_saved(self, seq: int) -> None:
        """Prune after the snapshot at `seq`: the snapshots before the one before it, then its unneeded events."""
        saving, self._saving = self._saving, None
        if saving is None or saving[0] != seq:
            return
        before, self._newest_snapshot = self._newest_snapshot, saving
        if self.prune_journal and before is not None and self.snapshots_outlast_events:
            if before[1] > 0:
                # Snapshots first: an older one left behind could be loaded (if the newer ones were unreadable) with
                # its events gone. Then the events, once that is done (DeleteSnapshotsSuccess).
                self._prune_to = before[1]
                self.delete_snapshots(SnapshotSelectionCriteria(max_sequence_nr=before[0] - 1))
            self._restage_held(before[0])  # (also when a staged batch holds back everything: floor 0)

    def _restage_held(self, upto: int) -> None:
        """Write again the staged batches at or below `upto` (the snapshot before the newest) of each run that holds
        the pruning back by RESTAGE_RATIO events or more per such batch: the next snapshots prune past the originals.

        A run whose driver died stays staged until `staged_ttl` (a day by default), and every batch fed after it
        would stay in the journal as long. The ratio bounds what the copies add: at most one event per
        RESTAGE_RATIO events pruned because of them."""
        held: dict[tuple[str, str], list[_Staged]] = {}
        for (feed_id, _), attempts in self._staged.items():
            for attempt, batches in attempts.items():
                for b in batches.values():
                    if 0 < b.seq <= upto and not b.moving:
                        held.setdefault((feed_id, attempt.split("/", 1)[0]), []).append(b)
        for (feed_id, run), olds in held.items():
            if upto - min(old.seq for old in olds) < RESTAGE_RATIO * len(olds):
                continue
            self.log.info("spark bridge %s: staged run %s of feed %s held back the pruning of its journal; its %d "
                          "batch(es) are written again", self.path, run, feed_id, len(olds))
            self._restaged_count += len(olds)
            for old in olds:
                old.moving = True
                event = old.event if old.event is not None else self._load(old.seq)
                self.persist_async(restaged(event), lambda _, old=old: self._restaged_now(old))  # type: ignore[misc]

    def _restaged_now(self, b: _Staged) -> None:
        """A batch's BatchRestaged is durable: it is read there from now on (also by a release under way: its
        AttemptsReleased was persisted after the copy, so its handler runs after this one and reads the same rows)."""
        if b.moving:
            b.moving = False
            b.seq = self.last_sequence_nr

    def _restaged(self, event: BatchStored, seq: int) -> None:
        """Replay of a BatchRestaged: the batch (staged by an earlier event or restored from a snapshot) is read
        at `seq` from now on; a batch of a run released or discarded since is not staged any more."""
        b = self._staged.get((event.feed_id, event.partition), {}).get(cast(str, event.attempt), {}).get(
            event.batch_no)
        if b is not None:
            b.seq = seq

    def _check_unpruned(self) -> None:
        """Recovery found no snapshot and its first event is not the journal's first: refuse to go on if pruned.

        Versions before the empty first event (see RecoveryCompleted) left a journal starting past 1 when its first
        write was rejected (a rejected write uses its sequence number), never pruned. A pruned journal keeps every
        event after the snapshot before the newest, among them the `snapshot_every` batches and releases stored
        between the two: one with fewer had no two snapshots, so nothing was pruned. (Read once, at recovery.)"""
        counted = 0
        for event in self.read_events(self.last_sequence_nr, MAX_SEQUENCE_NR):
            if isinstance(event, BatchStored | AttemptsReleased):
                counted += 1
                if counted >= self.snapshot_every:
                    break
        else:
            self.log.warning("spark bridge %s: its journal starts at sequence nr %d, with no snapshot, and holds fewer "
                             "batches than a pruned one would (%d < snapshot_every %d): taken for a journal whose "
                             "first write(s) were rejected, recovered whole", self.path, self.last_sequence_nr,
                             counted, self.snapshot_every)
            return
        raise RuntimeError(
            f"spark bridge {self.path}: no snapshot loaded, and its journal starts at sequence nr "
            f"{self.last_sequence_nr} (prune_journal deleted the events before): restore its snapshot store, then "
            "start it again (recovering from the rest would deliver every released run again)")


def _count_of(winners: list[list[Any]]) -> int:
    """The partition count of a job whose partitions are `winners`' first items, when they are 0..n-1 (else 0)."""
    parts = {w[0] for w in winners}
    return len(parts) if len(parts) == len(winners) and parts == set(range(len(parts))) else 0


def _pick(indices: list[int] | None, *columns: list[Any]) -> list[list[Any]]:  # Any: columns of several types
    """The entries at `indices` of each column (all of them for None): one destination host's share."""
    if indices is None:
        return list(columns)
    return [[column[k] for k in indices] for column in columns]


def _row_dict(event: BatchStored, i: int) -> dict[str, object]:
    columns = cast("tuple[str, ...]", event.columns)  # (called for columnar batches only)
    return {c: col[i] for c, col in zip(columns, event.values, strict=True)}


def bridge_path(node: str) -> str:
    """The path of node `node`'s bridge: /system/spark-bridges/<node>."""
    if not isinstance(node, str) or not node or "/" in node:
        raise ValueError(f"a node name is a non-empty string without '/', got {node!r}")
    return actors.validate_path(f"{BRIDGES_PATH}/{node}", what="bridge path")


def start_bridges(system: actors.System, nodes: list[str] | None = None, timeout: float = 60.0,
                  cls: type[SparkBridge] | None = None, staged_ttl: float | None = STAGED_TTL,
                  **options: Any) -> list[str]:
    """Spawn the coordinator (start_bridge) and one bridge per node, each placed on its node; their paths.

    `nodes` default: every live node (System.nodes()). A bridge already running is left alone. Each node's
    bridge fails over to the other nodes when the actors layer places with `nodes=`; its journal must then
    be one every node reaches (PostgreSQL). `cls`, `staged_ttl`: as for start_bridge (every bridge gets it).
    """
    if nodes is None:
        nodes = [n for n, state in system.nodes().items() if state == "up"]
    if isinstance(nodes, str) or not nodes or len(set(nodes)) != len(nodes):
        raise ValueError(f"start_bridges: nodes must be a non-empty list of distinct node names, got {nodes!r}")
    paths = [bridge_path(n) for n in nodes]
    cls = cls or SparkBridge
    start_bridge(system, timeout, cls, staged_ttl, **options)
    options = _with_ttl(options, staged_ttl)
    for node, path in zip(nodes, paths, strict=True):
        try:  # placed on its node, failing over to the others in order
            system.system_actor_of(cls, path=path, timeout=timeout, nodes=[node, *(n for n in nodes if n != node)], **options)
        except PathTaken:
            pass
    return paths


def start_bridge(system: actors.System, timeout: float = 60.0, cls: type[SparkBridge] | None = None,
                 staged_ttl: float | None = STAGED_TTL, **options: Any) -> str:
    """Spawn the bridge at /system/spark-bridge (no-op if it is already there); returns its path.

    `staged_ttl`: seconds after which a run with batches staged but no staging activity (its driver died
    before releasing or discarding them) is discarded, durably; a late Release of it fails its feed with a
    FeedError. Default STAGED_TTL (a day); None keeps staged runs until released or discarded by hand
    (`reprise spark discard`, spark_bridge.discard_staged).

    `options` are spawn options of its host, e.g. `backoff=(min, max, random_factor)`. `cls`: a SparkBridge
    subclass, e.g. one defined in the module that registers the types of the destinations' follow-up
    messages: the bridge's journal holds them, and a restarted bridge must know them to recover (a type
    registered under its default manifest, module.QualName, is imported on demand; a custom manifest is not).
    """
    options = _with_ttl(options, staged_ttl)
    try:
        return system.system_actor_of(cls or SparkBridge, path=BRIDGE_PATH, timeout=timeout, **options)
    except PathTaken:
        return BRIDGE_PATH


def _with_ttl(options: dict[str, Any], staged_ttl: float | None) -> dict[str, Any]:
    """Spawn options whose constructor kwargs carry `staged_ttl` (checked now: a bad one fails the caller)."""
    return {**options, "kwargs": {**(options.get("kwargs") or {}), "staged_ttl": check_staged_ttl(staged_ttl)}}


class _Refused(Exception):
    """A batch the bridge cannot take as it is (its message says why)."""


def _unhashable(keys: list[Any]) -> str:
    """Why a batch whose keys cannot all be hashed is refused: the first such key, and what a key may be."""
    for i, k in enumerate(keys):
        try:
            hash(k)
        except TypeError:
            return (f"the key of row {i} is {k!r:.100}, a {type(k).__name__}, which cannot be hashed: an idempotency "
                    "key is a str, int, float, bytes, bool or a tuple of them (feed()'s key column: not an array, "
                    "map or struct)")
    return "its keys cannot be hashed"


def _claim_keys(batch_keys: list[Hashable], released: set[Hashable], dead: list[int]) -> list[int]:
    """Add a released batch's keys to `released`; the rows (not dead-lettered) whose key was there already."""
    skipped = []
    dead_rows = set(dead)
    for i, k in enumerate(batch_keys):
        if k in released:
            if i not in dead_rows:
                skipped.append(i)
        else:
            released.add(k)
    return skipped

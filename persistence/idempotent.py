"""IdempotentReceiver: apply each (sender persistence id, delivery id) once, across restarts of either side."""

from __future__ import annotations

import logging
from bisect import bisect_right
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, cast

from journal import MAX_SEQUENCE_NR, SelectedSnapshot, SnapshotSelectionCriteria, SnapshotStore, register_type
from journal.serialization import TUPLE_MARK, marked, pack_values_with
from persistence.compact import expand, inherited_requeues, same_or_each, split_rejected
from persistence.coordinator import WriteResults
from persistence.delivery import AtLeastOnceDelivery
from persistence.durable import DeliveriesSent, DurableDelivery
from persistence.messages import Confirm, DeleteMessagesFailure, RecoveryCompleted, Settled, SnapshotOffer
from persistence.persistent_actor import IllegalStateError, PersistentActor, _Entry, _OneWrite

log = logging.getLogger("reprise.persistence")


@register_type(manifest="reprise.persistence.Applied")
@dataclass(frozen=True)
class Applied:
    """The receiver's event: `event` was applied for delivery `delivery_id` from `origin`."""

    origin: str
    delivery_id: int
    event: object


@register_type(manifest="reprise.persistence.AppliedBatch")
@dataclass(frozen=True, slots=True)  # slots: one object less per group commit and entity (same stored fields)
class AppliedBatch:
    """Applied events journaled together (one per group commit): `events[k]` for `delivery_ids[k]` from
    `origins[k]` (or from the only origin)."""

    origins: tuple[str, ...]
    delivery_ids: tuple[int, ...]
    events: tuple[object, ...]

    def __len__(self) -> int:
        return len(self.delivery_ids)

    def entries(self) -> list[tuple[str, int, object]]:
        """(origin, delivery id, event) of every application in the event."""
        ids = self.delivery_ids
        return list(zip(expand(self.origins, len(ids)), ids, self.events, strict=True))


def _applied_batch_values(batch: AppliedBatch) -> tuple[list[object], list[object], list[object]]:
    """AppliedBatch's fields as format 2 packs them, its tuples (and events) already marked: one record is
    packed without msgpack calling back into Python (a call per tuple and object, ~0.2 µs per event)."""
    return [TUPLE_MARK, *batch.origins], [TUPLE_MARK, *batch.delivery_ids], [TUPLE_MARK, *map(marked, batch.events)]


pack_values_with(AppliedBatch, _applied_batch_values)


@register_type(manifest="reprise.persistence.IdempotentSnapshot")
@dataclass(frozen=True)
class IdempotentSnapshot:
    """A user snapshot together with the dedup state {origin: (low watermark, ((start, end), ...))}."""

    dedup: dict[str, tuple[int, tuple[tuple[int, int], ...]]]  # SeenIds.state() per origin
    state: object


@register_type(manifest="reprise.persistence.IdempotentSnapshotInBatch")
@dataclass(frozen=True)
class IdempotentSnapshotInBatch:
    """An IdempotentSnapshot saved by the handler of one application of an AppliedBatch before those of the later
    ones ran: stored at the sequence number before the batch's, so that recovery replays the batch, whose first
    `handled` applications `state` (and `dedup`) hold already: those are not recovered again."""

    dedup: dict[str, tuple[int, tuple[tuple[int, int], ...]]]
    state: object
    handled: int


@register_type(manifest="reprise.persistence.DedupKept")
@dataclass(frozen=True)
class DedupKept:
    """The dedup state {origin: SeenIds.state()} journaled before a delete_messages up to `to_sequence_nr`, which
    deletes the applications it was replayed from; replay adds it to what the events left hold (IdempotentReceiver,
    EntityTable)."""

    dedup: dict[str, tuple[int, tuple[tuple[int, int], ...]]]
    to_sequence_nr: int


class SeenIds:
    """Ids seen from one origin: everything <= low, plus disjoint inclusive ranges above it.

    Memory is proportional to the number of gaps, not of ids: ids arriving mostly in order only move the
    low watermark. Used for delivery ids (IdempotentReceiver), and by the Spark bridge for batch numbers
    and follow-up ids.
    """

    __slots__ = ("_low", "_starts", "_ends")

    def __init__(self, low: int = 0, ranges: Iterable[Sequence[int]] = ()) -> None:
        self._low = low
        self._starts: list[int] = []
        self._ends: list[int] = []
        if ranges:
            ranges = tuple(ranges)
            self._starts = [r[0] for r in ranges]
            self._ends = [r[1] for r in ranges]
            self._check(ranges)

    def _check(self, ranges: Iterable[Sequence[int]]) -> None:
        starts, ends, prev = self._starts, self._ends, self._low + 1
        for start, end in zip(starts, ends, strict=True):
            if not prev < start <= end:
                raise ValueError(f"SeenIds ranges must be disjoint, ascending, non-adjacent and above low+1 = "
                                 f"{self._low + 1}, got low={self._low}, ranges={tuple(map(tuple, ranges))!r} "
                                 "(pass SeenIds.state() of an earlier SeenIds)")
            prev = end + 1

    @classmethod
    def of(cls, low: int, ids: Iterable[int]) -> SeenIds:
        """Everything <= `low`, and `ids` (in any order, duplicates allowed)."""
        seen = cls(low)
        for i in sorted(ids):
            seen.add(i)
        return seen

    @property
    def low(self) -> int:
        """The low watermark: every id <= low is seen."""
        return self._low

    def __contains__(self, i: int) -> bool:
        if i <= self._low:
            return True
        if not self._starts:
            return False
        k = bisect_right(self._starts, i) - 1
        return k >= 0 and self._ends[k] >= i

    def add(self, i: int) -> bool:
        """Mark `i` seen, merging ranges; False if it was seen already."""
        starts, ends, low = self._starts, self._ends, self._low
        if i == low + 1:  # the usual case, ids in order: only the watermark moves
            if starts and starts[0] == i + 1:
                self._low = ends[0]
                del starts[0], ends[0]
            else:
                self._low = i
            return True
        if i <= low:
            return False
        # Ids ascending with gaps (one shard's share of a bridge's ids) land above every range: no search.
        if not ends or i > ends[-1] + 1:
            starts.append(i)
            ends.append(i)
            return True
        if i == ends[-1] + 1:  # (the last range starts above low + 1: nothing to merge)
            ends[-1] = i
            return True
        # One search serves both the "seen already" test (as __contains__) and the insertion point.
        k = bisect_right(starts, i)
        if k > 0 and ends[k - 1] >= i:
            return False
        joins_left = k > 0 and ends[k - 1] == i - 1
        joins_right = k < len(starts) and starts[k] == i + 1
        if joins_left and joins_right:
            ends[k - 1] = ends[k]
            del starts[k], ends[k]
        elif joins_left:
            ends[k - 1] = i
        elif joins_right:
            starts[k] = i
        else:
            starts.insert(k, i)
            ends.insert(k, i)
        if starts and starts[0] == self._low + 1:
            self._low = ends[0]
            del starts[0], ends[0]
        return True

    def advance_to(self, low: int) -> None:
        """Mark every id <= `low` seen and drop the ranges below it (never moves the watermark back)."""
        if low <= self._low:
            return
        starts, ends = self._starts, self._ends
        # The ranges up to low + 1 join the watermark; the next one cannot touch the new watermark, since ranges
        # are never adjacent. (One search: a FeedTable shard drops thousands of ranges at once, its share of the
        # ids under the bridge's settled watermark, which moves every 0.5 s.)
        k = bisect_right(starts, low + 1)
        if k:
            low = max(low, ends[k - 1])
            del starts[:k], ends[:k]
        self._low = low

    def discard(self, i: int) -> None:
        """Forget `i` (its application was rejected by the journal, so a redelivery must apply it)."""
        if i not in self:
            return
        starts, ends = self._starts, self._ends
        if i <= self._low:
            # Split the watermark: ids below i stay under it, ids above it become the first range.
            if i < self._low:
                starts.insert(0, i + 1)
                ends.insert(0, self._low)
            self._low = i - 1
            return
        k = bisect_right(starts, i) - 1
        start, end = starts[k], ends[k]
        del starts[k], ends[k]
        if i < end:
            starts.insert(k, i + 1)
            ends.insert(k, end)
        if start < i:
            starts.insert(k, start)
            ends.insert(k, i - 1)

    def merge(self, low: int, ranges: Iterable[Sequence[int]]) -> None:
        """Also mark seen every id that `SeenIds(low, ranges)` holds (a union: nothing seen here is forgotten)."""
        self.advance_to(low)
        low = self._low
        # (once per DedupKept replayed: a sort of both range lists is simpler than a merge walk, and as cheap here)
        starts: list[int] = []
        ends: list[int] = []
        for start, end in sorted(chain(zip(self._starts, self._ends, strict=True), ((r[0], r[1]) for r in ranges))):
            if end <= low:
                continue
            if start <= low + 1 and not starts:  # (joins the watermark)
                low = end
            elif starts and start <= ends[-1] + 1:
                ends[-1] = max(ends[-1], end)
            else:
                starts.append(start)
                ends.append(end)
        self._low, self._starts, self._ends = low, starts, ends

    @property
    def range_count(self) -> int:
        """How many ranges are kept above the watermark (the gaps' count)."""
        return len(self._starts)

    def above(self) -> list[int]:
        """Every seen id above the watermark, ascending (for states that store them one by one)."""
        return [i for start, end in zip(self._starts, self._ends, strict=True) for i in range(start, end + 1)]

    def state(self) -> tuple[int, tuple[tuple[int, int], ...]]:
        """(low, ((start, end), ...)): `SeenIds(*state)` is an equal SeenIds (snapshots store this)."""
        return self._low, tuple(zip(self._starts, self._ends, strict=True))

    def __repr__(self) -> str:
        return f"SeenIds{self.state()!r}"


def mark_applied(seen: dict[str, SeenIds], origin: str, delivery_id: int) -> bool:
    """Mark delivery `delivery_id` from `origin` seen in `seen` (SeenIds per origin); False if it was already."""
    if type(delivery_id) is not int or delivery_id < 1:
        # 0 would sit under every fresh low watermark and be taken for a duplicate: silently never applied.
        raise ValueError(f"delivery ids start at 1 (deliver() numbers them so), got {delivery_id!r} from "
                         f"{origin!r}; number your own deliveries from 1")
    return seen_ids(seen, origin).add(delivery_id)


def seen_ids(seen: dict[str, SeenIds], origin: str) -> SeenIds:
    """The SeenIds of `origin` in `seen`, made on first use."""
    s = seen.get(origin)
    if s is None:
        s = seen[origin] = SeenIds()
    return s


def forget_up_to(seen: dict[str, SeenIds], origin: str, delivery_id: int) -> None:
    """Take every id <= `delivery_id` from `origin` as seen in `seen`, keeping no memory of each."""
    s = seen.get(origin)
    if s is not None:
        s.advance_to(delivery_id)


def ask_to_settle(seen: SeenIds, asked: dict[str, int], origin: str, limit: int) -> bool:
    """Whether a confirm to `origin`, whose ids `seen` holds, asks for its settled watermark: once `limit` gaps were
    added since the last ask (`asked`: origin -> its gaps then, updated), so an origin that never answers is asked
    once per `limit` gaps, not at every confirm."""
    gaps = seen.range_count
    if gaps < asked.get(origin, 0) + limit:
        return False
    asked[origin] = gaps
    return True


def settle(seen: dict[str, SeenIds], asked: dict[str, int] | None, settled: Settled) -> None:
    """Take every id <= settled.low from settled.origin as seen (its sender never delivers them again), dropping
    the gaps below it, and count the gaps left as asked about (the next ask comes once as many are new)."""
    forget_up_to(seen, settled.origin, settled.low)
    s = seen.get(settled.origin)
    if asked is not None and s is not None:
        asked[settled.origin] = s.range_count


def malformed_settled(settled: object) -> bool:
    """True if `settled` (a Settled) does not hold a str origin and an int low, as DurableDelivery sends it."""
    return type(getattr(settled, "low", None)) is not int or type(getattr(settled, "origin", None)) is not str


def merge_dedup(seen: dict[str, SeenIds], dedup: dict[str, tuple[int, tuple[tuple[int, int], ...]]]) -> None:
    """Add a DedupKept's (or a snapshot's) dedup state {origin: SeenIds.state()} to `seen` (a union)."""
    for origin, (low, ranges) in dedup.items():
        s = seen.get(origin)
        if s is None:  # (the usual case: an origin whose applications were all deleted)
            seen[origin] = SeenIds(low, ranges)
        else:
            s.merge(low, ranges)


def newest_snapshot_after(actor: PersistentActor, sequence_nr: int) -> SelectedSnapshot | None:
    """The newest snapshot of `actor` stored after `sequence_nr`, or None (also when it cannot be loaded: the caller
    then reads the events instead)."""
    try:
        return cast(SnapshotStore, actor._snapshots).load(  # (recovery opened it)
            actor.persistence_id, SnapshotSelectionCriteria(min_sequence_nr=sequence_nr + 1))
    except Exception as exc:
        log.warning("%s: its newest snapshot could not be loaded to recover its dedup state after a partial recovery "
                    "(the events are read instead): %s", actor.path, exc)
        return None


def _dedup_rejected(actor: str, to_sequence_nr: int) -> DeleteMessagesFailure:
    """The DeleteMessagesFailure of a delete whose DedupKept the journal rejected (nothing was deleted)."""
    return DeleteMessagesFailure(RuntimeError(
        f"the journal rejected the dedup state of {actor} journaled before deleting events up to {to_sequence_nr}: "
        "nothing was deleted (the deleted applications would have taken the ids they mark applied with them, and "
        "their redeliveries would have been applied again)"), to_sequence_nr)


class IdempotentReceiver(PersistentActor):
    """A destination mixin: `persist_applied(origin, delivery_id, event, handler)` applies each delivery once.

    `apply_and_confirm` also confirms it to its origin once durable (and a duplicate after its original's write);
    with `persist_applied`, confirm from the handler, and a duplicate with `confirm_duplicate`. A relay (also a
    DurableDelivery) forwards what it applies with `apply_and_forward`: application and forward in one write.

    The dedup state outlives `delete_messages` (journaled first, DedupKept) and is recovered whole by a partial
    recovery (Recovery.none(), to_sequence_nr): a delivery applied once is never applied again.
    """

    settle_after_gaps: int | None = 64
    """How many gaps (ranges above the low watermark) the dedup state of one origin may gain before
    apply_and_confirm's confirm asks that origin for its settled watermark (`Confirm.settle_for`): a DurableDelivery
    answers `Settled` once its confirms are durable, and the gaps below it are dropped. Gaps come from ids this
    receiver never sees: a sender delivering to several destinations numbers them all in one sequence, so each
    destination sees a share, and without this kept one range per delivery, for good (about 100 bytes of memory and
    14 of every snapshot each: 1,000,000 deliveries over 2 sinks kept 500,000 ranges in each,
    bench/profiling/memory_growth.py). None: never ask (the gaps grow with such a sender's deliveries)."""

    _settle_asked: dict[str, int] | None = None  # origin -> its gaps when last asked (a class default: most never ask)

    _held_deletes: tuple[int, ...] = ()  # delete_messages called from receive_recover, run once the replay ended

    _skip_at = 0  # recovery: the sequence number of the batch an IdempotentSnapshotInBatch holds some of (a class
    # default: set on the few instances that recover one, not one more attribute on every entity)

    def mixin_init(self) -> None:
        super().mixin_init()
        self._seen: dict[str, SeenIds] = {}
        # The persist_applied calls not queued for writing yet: journaled as one AppliedBatch per group
        # commit (see _journal_applied). Empty: a shared (); the first call of a round makes the list.
        self._unapplied: _Applications | tuple[()] = ()
        self._origin_only: tuple[str] = ("",)  # the origins field of the last single-application batch
        self._gathering: _OneWrite | None = None  # the fast path's write that gathers this round's (_gather)
        # While an AppliedBatch's handlers run: its applications, and the index of the one whose handler runs.
        self._handling: _Applications | None = None
        self._handling_at = 0
        self._skip_recovered = 0  # recovery: applications of the next AppliedBatch the snapshot holds already
        # While a write's handlers run: its entries whose events were not stored (see _on_write_results).
        self._unstored: list[_Entry] | tuple[()] = ()

    def already_applied(self, origin: str, delivery_id: int) -> bool:
        """True if delivery `delivery_id` from `origin` was applied (or is being persisted)."""
        s = self._seen.get(origin)
        return s is not None and delivery_id in s

    def persist_applied(self, origin: str, delivery_id: int, event: object, handler: Callable[[Any], object],
                        asynchronous: bool = True) -> bool:
        """Persist `event` for this delivery unless it was already applied; False for a duplicate.

        Confirm a delivery from `handler` (it runs once the event is durable), and a duplicate (False) with
        `confirm_duplicate`, or use `apply_and_confirm`, which does both: a duplicate is often a copy of a delivery
        whose write is still in flight, and a confirm sent at once (or from defer_async) tells its sender to stop
        redelivering before that write is known to be stored; if it then fails or is rejected, the delivery is lost.
        """
        # mark_applied(self._seen, origin, delivery_id) and seen_ids inlined (once per message)
        if type(delivery_id) is not int or delivery_id < 1:
            mark_applied(self._seen, origin, delivery_id)  # (raises its ValueError)
        seen = self._seen.get(origin)
        if seen is None:
            seen = self._seen[origin] = SeenIds()
        if not seen.add(delivery_id):
            return False
        if asynchronous and not self._recovery_running:
            # Its command wrote, even when the application joins a write queued earlier (a DurableDelivery refuses a
            # deliver() from a deferral queued behind it: it runs once the application is durable and confirmed).
            self._wrote = True
            unapplied = self._unapplied
            if unapplied:  # a later application of this round: the same AppliedBatch
                unapplied.append((origin, delivery_id, event, handler, self.sender))
                return True
            batch = self._batch
            if batch and type(last := batch[-1]) is _OneWrite:
                # The fast path's write of the round's first application, nothing queued after it: this one and
                # the next go into its AppliedBatch, as if all had been gathered from the start.
                applied = last.payload[0].payload
                if type(applied) is AppliedBatch and len(applied.delivery_ids) == 1:  # (not gathered already)
                    self._gather(last, applied).append((origin, delivery_id, event, handler, self.sender))
                    return True
            if self._contributors:
                # Contributions made earlier (DurableDelivery's deliveries) are journaled first, as called.
                unapplied = self._unapplied = _Applications(self)
                self._contribute(self._journal_applied)
                unapplied.append((origin, delivery_id, event, handler, self.sender))
                return True
            # The usual case in a host of many entities: one application per entity and group commit, queued
            # as one ready write (no _Applications, _Call or contribution; see PersistentActor._queue_one).
            origins = self._origin_only
            if origins[0] != origin:  # an entity mostly hears from one origin: its 1-tuple is reused
                origins = self._origin_only = (origin,)
            self._queue_one(AppliedBatch(origins, (delivery_id,), (event,)), event, handler)
            return True
        persist = self.persist_async if asynchronous else self.persist
        persist(Applied(origin, delivery_id, event), lambda a: handler(a.event))
        return True

    def persist_applied_many(self, origin: str, delivery_ids: Sequence[int], events: Sequence[Any],
                             handler: Callable[[Any], Any]) -> list[bool]:
        """persist_applied (asynchronous) of `events[k]` for `delivery_ids[k]` from `origin`, in order, with one
        dedup lookup and one queuing for all (for receive_batch); False at the duplicates (confirm those with
        confirm_duplicate, as for persist_applied). The handlers run with `self.sender` as it is at this call."""
        if len(delivery_ids) != len(events):
            raise ValueError(f"persist_applied_many got {len(delivery_ids)} delivery ids for {len(events)} events "
                             f"from {origin!r}: pass one delivery id per event")
        for delivery_id in delivery_ids:  # all checked before any is marked seen
            if type(delivery_id) is not int or delivery_id < 1:
                raise ValueError(f"delivery ids start at 1 (deliver() numbers them so), got {delivery_id!r} from "
                                 f"{origin!r}; number your own deliveries from 1")
        if self._recovery_running:
            raise IllegalStateError("Cannot persist during replay. Events can be persisted when receiving "
                                    "RecoveryCompleted or later.")
        add, sender = seen_ids(self._seen, origin).add, self.sender
        fresh = [add(i) for i in delivery_ids]
        applications = [(origin, i, e, handler, sender) for i, e, f in zip(delivery_ids, events, fresh, strict=True) if f]
        if not applications:
            return fresh
        self._wrote = True  # (as in persist_applied)
        unapplied = self._unapplied
        if not unapplied:  # as persist_applied: the round's AppliedBatch, at its first application's place
            batch = self._batch
            last = batch[-1] if batch else None
            applied = last.payload[0].payload if type(last) is _OneWrite else None
            if type(applied) is AppliedBatch and len(applied.delivery_ids) == 1:
                unapplied = self._gather(cast(_OneWrite, last), applied)
            elif len(applications) == 1 and not self._contributors:  # persist_applied's fast path
                _, delivery_id, event, _, _ = applications[0]
                origins = self._origin_only
                if origins[0] != origin:
                    origins = self._origin_only = (origin,)
                self._queue_one(AppliedBatch(origins, (delivery_id,), (event,)), event, handler)
                return fresh
            else:
                unapplied = self._unapplied = _Applications(self)
                self._contribute(self._journal_applied)
        unapplied.extend(applications)
        return fresh

    def apply_and_confirm(self, origin: str, delivery_id: int, event: object,
                          handler: Callable[[Any], object] | None = None) -> bool:
        """persist_applied, then Confirm(delivery_id) to `origin` once the event is durable; False for a duplicate.

        A duplicate is confirmed again (the first confirm may have been lost), but only after any write in
        flight, so a confirm never overtakes the event it acknowledges.

        Only the event is covered: what `handler` queues itself is journaled in a later group commit, after the
        confirm went out. A `deliver()` there would be lost for good if its write failed or the host died first (the
        application is stored, so the origin's redelivery is a duplicate): it raises IllegalStateError. To forward
        a delivery, use `apply_and_forward`.
        """
        if handler is not None and isinstance(self, AtLeastOnceDelivery):
            handler = self._refusing_deliver(origin, delivery_id, handler)

        def applied(e: object) -> None:
            if handler is not None:
                handler(e)
            self.tell(origin, self._confirm(origin, delivery_id))

        if self.persist_applied(origin, delivery_id, event, applied):
            return True
        self.confirm_duplicate(origin, delivery_id, lambda: self.tell(origin, self._confirm(origin, delivery_id)))
        return False

    def _confirm(self, origin: str, delivery_id: int) -> Confirm:
        """The Confirm of a delivery from `origin`, asking it for its settled watermark (settle_for) once its dedup
        state gained settle_after_gaps gaps since the last time it was asked."""
        limit = self.settle_after_gaps
        seen = self._seen.get(origin)
        if limit is None or seen is None or seen.range_count < limit:  # (the usual case: one comparison)
            return Confirm(delivery_id)
        if self._settle_asked is None:
            self._settle_asked = {}
        return Confirm(delivery_id, origin if ask_to_settle(seen, self._settle_asked, origin, limit) else "")

    def mixin_command(self, message: Any, sender: str | None) -> None:
        if type(message) is Settled:
            self._on_settled(message, sender)
            return
        super().mixin_command(message, sender)

    def _on_settled(self, settled: Settled, sender: str | None) -> None:
        """The origin will never deliver an id <= settled.low again: drop the gaps below it (forget_applied_up_to)."""
        if malformed_settled(settled):
            self.context.dead_letter(sender, self.path, settled, "a Settled needs origin (str) and low (int), as "
                                     "DurableDelivery sends it: nothing was forgotten")
            return
        settle(self._seen, self._settle_asked, settled)

    def apply_and_forward(self, origin: str, delivery_id: int, event: object,
                          destination: str | Sequence[tuple[str, Callable[[int], object]]],
                          id_to_message: Callable[[int], object] | None = None,
                          handler: Callable[[Any], object] | None = None) -> bool:
        """Apply `event` for this delivery once and forward it: deliver `id_to_message(forward_id)` to `destination`
        (as DurableDelivery's deliver), both in one atomic write; then `handler(event)`, and Confirm(delivery_id) to
        `origin` once both are durable. False for a duplicate: confirmed again after the writes in flight, not
        forwarded again. The relay's apply_and_confirm; for a DurableDelivery only.

        Several forwards of one delivery: `destination` a list of (destination, id_to_message) pairs (as
        persist_and_deliver's), without `id_to_message`; all of them go in the same write.

        One write: a failed write (the actor stops) or a crash before it stores neither, and nothing is confirmed, so
        the origin's redelivery applies and forwards it again; a journal that rejects the event or a forward stores
        none of them (the origin redelivers; both are reported).
        """
        if not isinstance(self, DurableDelivery):
            raise TypeError(f"apply_and_forward journals the forward with the application, so {type(self).__name__} "
                            "must also be a DurableDelivery (class ...(IdempotentReceiver, DurableDelivery)); "
                            "with AtLeastOnceDelivery, persist your own event of the forward")
        forwards = _forwards(destination, id_to_message)
        if type(delivery_id) is not int or delivery_id < 1:
            mark_applied(self._seen, origin, delivery_id)  # (raises its ValueError)
        if self._recovery_running:
            raise IllegalStateError("Cannot persist during replay. Events can be persisted when receiving "
                                    "RecoveryCompleted or later.")
        if self.already_applied(origin, delivery_id):
            self.confirm_duplicate(origin, delivery_id, lambda: self.tell(origin, self._confirm(origin, delivery_id)))
            return False
        sent = self._deliveries_to_journal(forwards)  # (raises before anything is marked)
        seen_ids(self._seen, origin).add(delivery_id)
        if handler is not None:
            handler = self._refusing_deliver(origin, delivery_id, handler)

        def stored(payload: object) -> None:
            # Once per event of the write, in order: the forwards first (sent now), then the application.
            if type(payload) is DeliveriesSent:
                cast(DurableDelivery, self)._on_sent(payload)
                return
            if handler is not None:
                handler(event)
            self.tell(origin, self._confirm(origin, delivery_id))

        origins = self._origin_only
        if origins[0] != origin:
            origins = self._origin_only = (origin,)
        self._queue_write((sent, AppliedBatch(origins, (delivery_id,), (event,))), stored, False)
        return True

    def _refusing_deliver(self, origin: str, delivery_id: int,
                          handler: Callable[[Any], object]) -> Callable[[Any], object]:
        """`handler`, during which deliver() raises: the confirm of (origin, delivery_id) follows it before a
        delivery of its would be journaled."""
        def guarded(event: object) -> object:
            outer, self._confirm_follows = self._confirm_follows, (origin, delivery_id)
            try:
                return handler(event)
            finally:
                self._confirm_follows = outer
        return guarded

    def confirm_duplicate(self, origin: str, delivery_id: int, confirm: Callable[[], object]) -> None:
        """Call `confirm()`, the confirmation of a duplicate of delivery `delivery_id` from `origin`, after the writes
        in flight, and only if the delivery is applied then.

        The write in flight that made it a duplicate may be rejected (its event cannot be stored): its mark is
        forgotten then, nothing is applied, and a confirm would tell the sender it was, so that it never sent the
        delivery again (e.g. once fixed to send a storable event): lost silently. Not confirmed, it is redelivered.
        Marked again meanwhile by a copy whose write is in flight, it is confirmed after that write.
        """
        def check(_: object) -> None:
            if not self.already_applied(origin, delivery_id):
                return
            if (origin, delivery_id) in self._applications_in_flight():
                self.defer_async(None, check)
                return
            confirm()

        self.defer_async(None, check)

    def forget_applied_up_to(self, origin: str, delivery_id: int) -> None:
        """Take every delivery id <= `delivery_id` from `origin` as applied, keeping no memory of each.

        For an origin that promised never to deliver them again (the Spark bridge's settled watermark):
        the dedup memory of that origin then holds only the gaps above it.

        Not journaled (no write per call): recovery restores the watermark a snapshot saved, and every application
        replayed after it, so no delivery applied here is applied again; the ids under a later watermark that were
        never applied here are taken as new again, and their gaps kept, until the next call (call it again after
        recovery, e.g. with a watermark your own events carry, as spark_bridge.FeedReceiver does).
        """
        forget_up_to(self._seen, origin, delivery_id)

    def dedup_size(self) -> int:
        """How many ranges are kept above the low watermarks (the gaps' count)."""
        return sum(s.range_count for s in self._seen.values())

    # ---- a partial recovery recovers the whole dedup state --------------------------------------------
    def _on_replay_success(self) -> None:
        # A partial recovery (Recovery.none(), to_sequence_nr, replay_max) stopped short of the journal's end: the
        # applications after it are the dedup state too. Without them their redeliveries were applied again, and the
        # journal held those deliveries twice (a full recovery later applies both).
        if self._replayed_to < self.last_sequence_nr:
            start, seen = self._replayed_to + 1, self._seen
            selected = newest_snapshot_after(self, self._replayed_to)
            snap = selected.snapshot if selected is not None else None
            if isinstance(snap, IdempotentSnapshot | IdempotentSnapshotInBatch):
                merge_dedup(seen, snap.dedup)  # (an InBatch's batch is read whole below: its ids are all applied)
                start = cast(SelectedSnapshot, selected).metadata.sequence_nr + 1
            for event in self.read_events(start, self.last_sequence_nr):
                t = type(event)
                if t is AppliedBatch:
                    for origin, delivery_id, _ in event.entries():
                        seen_ids(seen, origin).add(delivery_id)
                elif t is Applied:
                    seen_ids(seen, event.origin).add(event.delivery_id)
                elif t is DedupKept:
                    merge_dedup(seen, event.dedup)
        super()._on_replay_success()

    # ---- deletes: the applications deleted are the dedup state -------------------------------------
    def delete_messages(self, to_sequence_nr: int) -> None:
        """Delete events up to `to_sequence_nr` (PersistentActor.delete_messages; MAX_SEQUENCE_NR: up to
        last_sequence_nr), once the dedup state the deleted applications hold is journaled after them (DedupKept): a
        restart then takes their redeliveries for duplicates still. What your state makes of the deleted events is
        yours to keep (a snapshot); the dedup state is kept whatever you do. The reply arrives as a command; a journal
        that rejects that state deletes nothing (DeleteMessagesFailure)."""
        beyond = to_sequence_nr != MAX_SEQUENCE_NR and to_sequence_nr > self.last_sequence_nr
        if self._recovery_running and self._journal is not None and not beyond:
            # From receive_recover: the dedup state is whole, and can be journaled, only once the replay has ended.
            self._held_deletes = (*self._held_deletes, to_sequence_nr)
            return
        if self._recovery_running or not self._seen or beyond:
            super().delete_messages(to_sequence_nr)  # (nothing applied yet, or its error: as PersistentActor's)
            return
        # Bounded at the handled events: an application queued meanwhile keeps its own event (and is left out of the
        # state kept: its write may fail or be rejected, and a redelivery must apply it then).
        to = min(to_sequence_nr, self.last_sequence_nr)
        delete = super().delete_messages
        kept = DedupKept(self._durable_dedup(self._applications_in_flight()), to)
        wrote = self._wrote
        # (Deleted only once the state is durable: a crash or a failed write in between deletes nothing.)
        self._queue_write((kept,), lambda _: delete(to), False)
        self._wrote = wrote  # (not a write of the user's: a DurableDelivery's deferral behind it may deliver)

    def _durable_dedup(self, in_flight: list[tuple[str, int]]) -> dict[str, tuple[int, tuple[tuple[int, int], ...]]]:
        """The dedup state {origin: SeenIds.state()} without the applications `in_flight` (marked, not durable)."""
        seen = {o: s.state() for o, s in self._seen.items()}
        if not in_flight:
            return seen
        copies = {o: SeenIds(*state) for o, state in seen.items()}
        for origin, delivery_id in in_flight:
            copies[origin].discard(delivery_id)
        return {o: c.state() for o, c in copies.items()}

    # ---- journaling AppliedBatch ----------------------------------------------------------------
    def _journal_applied(self) -> None:
        """Queue the pending applications as one AppliedBatch; its handler runs theirs in call order."""
        # (called with some pending, so a list; an annotation, not typing.cast: a call per entity and commit)
        pending: _Applications = self._unapplied  # type: ignore[assignment]
        self._unapplied = ()
        if len(pending) == 1:  # the usual case in a host of many entities: one application per commit
            origin, delivery_id, event, _, _ = pending[0]
            origins = self._origin_only
            if origins[0] != origin:  # an entity mostly hears from one origin: its 1-tuple is reused
                origins = self._origin_only = (origin,)
            applied = AppliedBatch(origins, (delivery_id,), (event,))
        else:
            origins, delivery_ids, events, _, _ = zip(*pending, strict=True)
            applied = AppliedBatch(same_or_each(origins), delivery_ids, events)
        # A flush, maybe while another command runs (its deferral behind the batch may deliver): the applications
        # marked their own commands as having written when they were called.
        wrote = self._wrote
        self._queue_write((applied,), pending, False)
        self._wrote = wrote

    def _gather(self, write: _OneWrite, applied: AppliedBatch) -> _Applications:
        """Make `write`, the fast path's write of one application (`applied`), queued last, gather those that
        follow in this round: its sequence number and place stay, and its AppliedBatch is rewritten at the
        next flush (a contribution), when they would have been journaled together. Returns the gathering list."""
        unapplied = self._unapplied = _Applications(self)
        unapplied.append((applied.origins[0], applied.delivery_ids[0], write.event, write.handler, write.sender))
        # Its handler from now on runs theirs in call order (_Applications.__call__ ignores its argument).
        object.__setattr__(write, "handler", unapplied)
        self._gathering = write
        self._contribute(self._rewrite_gathered)
        return unapplied

    def _rewrite_gathered(self) -> None:
        """Store the gathered applications in the write of the first one, as one AppliedBatch."""
        write, self._gathering = self._gathering, None
        pending: _Applications = self._unapplied  # type: ignore[assignment]  # (non-empty: a list)
        self._unapplied = ()
        origins, delivery_ids, events, _, _ = zip(*pending, strict=True)
        # Its PersistentRepr is not taken yet (nobody else holds it): its payload is replaced in place.
        stored = AppliedBatch(same_or_each(origins), delivery_ids, events)
        repr_ = cast(_OneWrite, write).payload[0]
        object.__setattr__(repr_, "payload", stored)
        if self._tagging:  # the tags of every gathered event, not only of the first one's
            object.__setattr__(repr_, "tags", self.mixin_tags(stored))

    def _on_write_results(self, batch: list[_Entry], results: WriteResults) -> None:
        if results is None or (type(results) is list and results.count(None) == len(results)):
            super()._on_write_results(batch, results)  # (all stored, or nothing written: the usual case)
            return
        if isinstance(results, list):  # rejections are rare
            batch, results = split_rejected(self, batch, results, self._compact_requeues())
            writes = [e for e in batch if e.atomic is not None]
            unstored = [e for e, r in zip(writes, results, strict=True) if r is not None]
        else:  # the whole write failed
            unstored = [e for e in batch if e.atomic is not None]
        # The applications of this write that were not stored (rejected; or a failed write, outcome unknown) stay
        # marked seen until their entry's turn comes (_event_rejected), after the handlers of the entries before
        # them, and they are no longer queued: a snapshot saved by one of those handlers (Akka's pattern) would
        # store them as applied, and the recovered instance would confirm their redeliveries unapplied. The
        # snapshot leaves them out (see _applications_in_flight); one that was stored is replayed after it.
        self._unstored = unstored
        try:
            super()._on_write_results(batch, results)
        finally:
            self._unstored = ()

    def _compact_requeues(self) -> dict[type, Callable[[_Entry], None]]:
        """The requeue of each compact event type of this actor's mixins (see compact.split_rejected)."""
        requeues = inherited_requeues(super())
        requeues[AppliedBatch] = self._requeue_applications
        return requeues

    def _requeue_applications(self, entry: _Entry) -> None:
        # Only the applications whose event cannot be stored are rejected; the others are applied. (A name of its
        # own: in an actor that is also a DurableDelivery, a shared name resolved to that mixin's method for both.)
        queue, wrote = self._queue_write, self._wrote
        for origin, delivery_id, event, handler, sender in cast(_Applications, entry.handler):
            self.sender = sender
            queue((Applied(origin, delivery_id, event),), lambda a, h=handler: h(a.event), False)  # type: ignore[misc]  # (mypy infers no lambda with a default)
        self._wrote = wrote  # (written again for no command running now)

    def _event_rejected(self, event: object) -> None:
        # The id was marked when persist_applied was called; nothing was stored, so a redelivery must apply.
        # (An AppliedBatch rejected whole holds one application: split_rejected splits larger ones.)
        if type(event) is Applied:
            self._forget(event.origin, event.delivery_id)
        elif type(event) is AppliedBatch:
            for origin, delivery_id, _ in event.entries():
                self._forget(origin, delivery_id)
        elif type(event) is DedupKept:
            self._tell_failure(_dedup_rejected(type(self).__name__, event.to_sequence_nr))
        super()._event_rejected(event)

    def _forget(self, origin: str, delivery_id: int) -> None:
        seen = self._seen.get(origin)
        if seen is not None:
            seen.discard(delivery_id)

    def mixin_tags(self, stored: object) -> frozenset[str]:
        # Tags are asked of the user's events, not of the batch that journals them together.
        if type(stored) is AppliedBatch:
            tag = super().mixin_tags
            return frozenset().union(*[tag(e) for e in stored.events])
        if type(stored) is Applied:
            return super().mixin_tags(stored.event)
        if type(stored) is DedupKept:  # (Reprise's bookkeeping, not an event of the user's)
            return frozenset()
        return super().mixin_tags(stored)

    def mixin_recover_event(self, event: Any) -> None:
        if self._skip_recovered and type(event) is AppliedBatch:
            # (the snapshot holds its first applications: marked seen there, and in the state)
            skip = self.take_applications_recovered()
            recover = super().mixin_recover_event
            for origin, delivery_id, applied in event.entries()[skip:]:
                seen_ids(self._seen, origin).add(delivery_id)
                recover(applied)
                if self._stop_called:  # (stop() in receive_recover: as for a replayed event, no more after it)
                    return
            return
        self._skip_recovered = 0
        if type(event) is AppliedBatch:
            seen = self._seen
            recover = super().mixin_recover_event
            origins = event.origins
            if len(origins) == 1:  # (the usual batch: one origin for all, no tuple per application)
                add = seen_ids(seen, origins[0]).add
                for delivery_id, applied in zip(event.delivery_ids, event.events, strict=True):
                    add(delivery_id)
                    recover(applied)
                    if self._stop_called:  # (one attribute read per application: see PersistentActor's replay)
                        return
                return
            for origin, delivery_id, applied in event.entries():
                seen_ids(seen, origin).add(delivery_id)
                recover(applied)
                if self._stop_called:
                    return
            return
        if type(event) is Applied:
            seen_ids(self._seen, event.origin).add(event.delivery_id)
            event = event.event
        elif type(event) is DedupKept:
            merge_dedup(self._seen, event.dedup)
            return
        elif self._held_deletes and type(event) is RecoveryCompleted:
            held, self._held_deletes = self._held_deletes, ()
            for to_sequence_nr in held:  # (called from receive_recover: see delete_messages)
                self.delete_messages(to_sequence_nr)
        super().mixin_recover_event(event)

    def mixin_recover_snapshot(self, offer: SnapshotOffer) -> None:
        snap = offer.snapshot
        if isinstance(snap, IdempotentSnapshot | IdempotentSnapshotInBatch):
            self._seen = {o: SeenIds(low, tuple(ranges)) for o, (low, ranges) in snap.dedup.items()}
            if type(snap) is IdempotentSnapshotInBatch:
                self._skip_recovered = snap.handled
                # Only the event right after the snapshot is its batch: with that event deleted (delete_messages past
                # the snapshot's sequence number), the next AppliedBatch replayed is a later one, none of which the
                # snapshot holds (see take_applications_recovered).
                self._skip_at = offer.metadata.sequence_nr + 1
            else:
                self._skip_recovered = 0
            offer = SnapshotOffer(offer.metadata, snap.state)
        super().mixin_recover_snapshot(offer)

    @property
    def snapshot_sequence_nr(self) -> int:
        # A snapshot saved by a handler of an AppliedBatch whose later applications' handlers have not run yet
        # holds a state without them: stored at the batch's own sequence number, recovery would not replay the
        # batch, and they would be lost (marked applied, never applied). It is stored just before it instead
        # (IdempotentSnapshotInBatch), and recovery skips the applications it holds.
        seq = super().snapshot_sequence_nr
        handling = self._handling
        return seq - 1 if handling is not None and self._handling_at < len(handling) - 1 else seq

    def mixin_wrap_snapshot(self, snapshot: object) -> object:
        in_flight = self._applications_in_flight()
        handling = self._handling
        handled = 0
        if handling is not None and self._handling_at < len(handling) - 1:
            handled = self._handling_at + 1
            in_flight += [(origin, delivery_id) for origin, delivery_id, _, _, _ in handling[handled:]]
        # The snapshot is stored at last_sequence_nr, now, before the applications queued since are written: they
        # are marked seen (at the persist_applied call) but not applied. Kept in it, a write of theirs that failed
        # (the actor stops) or never happened (its host killed) would leave them marked applied by the recovered
        # instance, and their redelivery confirmed unapplied. Left out, a write that succeeds marks them again on
        # replay (the events after the snapshot).
        seen = self._durable_dedup(in_flight)
        if handled:
            return IdempotentSnapshotInBatch(seen, super().mixin_wrap_snapshot(snapshot), handled)
        return IdempotentSnapshot(seen, super().mixin_wrap_snapshot(snapshot))

    def take_applications_recovered(self) -> int:
        """Recovery, for a mixin that recovers an AppliedBatch's entries itself: how many of its first applications
        the snapshot holds already (see IdempotentSnapshotInBatch; only the event right after it has any: 0 for any other)."""
        skip, self._skip_recovered = self._skip_recovered, 0
        return skip if self.last_sequence_nr == self._skip_at else 0

    def _applications_in_flight(self) -> list[tuple[str, int]]:
        """(origin, delivery id) of the applications queued and not written yet (gathered, or in this round's
        batch: its writes and their handlers run together when the host settles), and, while a write's handlers
        run, those of its entries that were not stored."""
        found = [(origin, delivery_id) for origin, delivery_id, _, _, _ in self._unapplied]
        for entry in chain(self._batch or (), self._unstored):
            atomic = entry.atomic
            if atomic is None:
                continue
            for repr_ in atomic.payload:
                stored = repr_.payload
                if type(stored) is AppliedBatch:
                    found += [(origin, delivery_id) for origin, delivery_id, _ in stored.entries()]
                elif type(stored) is Applied:
                    found.append((stored.origin, stored.delivery_id))
        return found


class _Applications(list[tuple[str, int, object, Callable[[Any], object], str | None]]):
    """(origin, delivery id, event, handler, sender) of persist_applied calls, in call order; once they are
    journaled as one AppliedBatch, also its handler: each application's handler with its command's sender.

    Being both saves an object per entity and group commit, all alive until the commit's handlers ran
    (which is what the host's garbage collector pays for).
    """

    __slots__ = ("actor",)

    def __init__(self, actor: IdempotentReceiver) -> None:
        super().__init__()
        self.actor = actor

    def __call__(self, _: AppliedBatch) -> None:
        actor = self.actor
        actor._handling = self  # (for a snapshot a handler saves: see IdempotentReceiver.snapshot_sequence_nr)
        try:
            for k, (_origin, _delivery_id, event, handler, sender) in enumerate(self):
                if actor._stop_called:
                    # An earlier application's handler stopped the actor: as for separate events, the later handlers
                    # do not run (their applications are stored: the next instance recovers them).
                    break
                actor._handling_at = k
                actor.sender = sender
                handler(event)
        finally:
            actor._handling = None


def _forwards(destination: str | Sequence[tuple[str, Callable[[int], object]]],
              id_to_message: Callable[[int], object] | None) -> list[tuple[str, Callable[[int], object]]]:
    """apply_and_forward's forwards as (destination, id_to_message) pairs: its one destination, or its list of pairs."""
    if isinstance(destination, str):
        if id_to_message is None:
            raise TypeError(f"apply_and_forward to {destination!r} needs id_to_message, the message of the forward "
                            "(e.g. lambda forward_id: Forward(forward_id, payload))")
        return [(destination, id_to_message)]
    if not isinstance(destination, Iterable):
        raise TypeError("apply_and_forward's destination is a path (str) or a list of (destination, id_to_message) "
                        f"pairs, got {type(destination).__name__} {destination!r}")
    if id_to_message is not None:
        raise TypeError("apply_and_forward got a list of forwards and an id_to_message: pass each forward's own as "
                        "[(destination, id_to_message), ...] and no id_to_message (or one destination, a str)")
    forwards = list(destination)
    if not forwards:
        raise ValueError("apply_and_forward got no forward: pass [(destination, id_to_message), ...], or use "
                         "apply_and_confirm to apply a delivery that forwards nothing")
    return forwards

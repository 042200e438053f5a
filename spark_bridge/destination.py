"""What destinations of the bridge use: confirm a Row, and send follow-ups anchored to it.

    class Account(FeedReceiver):                      # durable: each row applied once, even under SIGKILL
        def receive_recover(self, event):
            if isinstance(event, Deposited):
                self.balance += event.amount

        def receive_command(self, message, sender):
            if isinstance(message, Row):
                amount = message.body["amount"]
                self.apply_row(message, Deposited(amount), self.deposited,
                               follow_ups=[("/user/ledger", Entry(self.entity_id, amount))])

A destination without a journal calls `ack(self, row, follow_ups)` instead. With ack="processed", a
feed waits for every row and for every follow-up anchored to it (a follow-up's receiver confirms its
Row the same way, and may anchor follow-ups of its own).

Follow-ups go through the bridge, which stores them and delivers each at least once as a new Row in the
row's tree (Storm's anchoring): the tree's XOR counts them before the row's confirmation, because a
destination's messages to the bridge arrive in the order they were sent.
"""

from __future__ import annotations

import collections
import itertools
import operator
import time
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, cast

import actors
from actors.paths import shard_of
from journal.serialization import check_storable, marked, pack_values_with
from persistence import EntityTable, IdempotentReceiver, RecoveryCompleted, SnapshotOffer
from persistence.idempotent import Applied, AppliedBatch, SeenIds
from spark_bridge.bridge import BRIDGE_PATH, PERSISTENCE_ID, _pick
from spark_bridge.messages import (
    Confirmed,
    FollowUpColumns,
    FollowUpSnapshot,
    Forward,
    ForwardAccepted,
    Forwards,
    ForwardsAccepted,
    ReceiverSnapshot,
    Row,
    RowApplied,
    RowChunk,
)


def _origin(bridge: str | None) -> str:
    """The persistence id of the bridge that sent a Row (Row.bridge): the origin receivers dedup it by."""
    return PERSISTENCE_ID if bridge is None else bridge


def _bridge_of(origin: str) -> str | None:
    """Row.bridge of a bridge's persistence id (_origin's inverse)."""
    return None if origin == PERSISTENCE_ID else origin


class _HostOut:
    """What the destinations of one host send one bridge in a round: their follow-ups, then their confirms.

    Sent as one Forwards and one Confirmed message when the host settles, instead of a message per row.
    Follow-ups go first, so a follow-up sent before its row's confirmation reaches the bridge first (the
    tree's XOR must count it before the confirmation could complete the tree).
    """

    __slots__ = ("senders", "origins", "forward_ids", "anchors", "tos", "messages", "confirmed")

    def __init__(self) -> None:
        self.senders: list[str] = []
        self.origins: list[str | None] = []
        self.forward_ids: list[int] = []
        self.anchors: list[int | None] = []
        self.tos: list[str] = []
        self.messages: list[object] = []
        self.confirmed: list[int] = []

    def send(self, host: actors.ActorContext, bridge: str) -> bool:
        if not (self.confirmed or self.senders):
            return False
        if self.senders:
            host.route(host.path, bridge, Forwards(self.senders, self.origins, self.forward_ids, self.anchors,
                                                   self.tos, self.messages))
        if self.confirmed:
            host.route(host.path, bridge, Confirmed(self.confirmed))
        return True


# Per host: the round's messages for each bridge (None: /system/spark-bridge).
_outgoing: weakref.WeakKeyDictionary[actors.ActorContext, dict[str | None, _HostOut]] = weakref.WeakKeyDictionary()


def _out(actor: actors.Actor, bridge: str | None) -> _HostOut:
    host = actor.context
    outs = _outgoing.get(host)
    if outs is None:
        outs = _outgoing[host] = {}
        ref = weakref.ref(host)
        host.on_settle(lambda: _send_out(ref))
    out = outs.get(bridge)
    if out is None:
        out = outs[bridge] = _HostOut()
    return out


def _send_out(ref: weakref.ref[actors.ActorContext]) -> bool:
    host = ref()
    if host is None:
        return False
    outs = _outgoing.get(host)
    if not outs:
        return False
    sent = False
    for bridge, out in list(outs.items()):
        if out.send(host, BRIDGE_PATH if bridge is None else bridge):
            sent = True
    outs.clear()
    return sent


def _confirm(actor: actors.Actor, delivery_id: int, bridge: str | None) -> None:
    _out(actor, bridge).confirmed.append(delivery_id)


def _confirm_many(actor: actors.Actor, rows: list[tuple[str | None, int]]) -> None:
    """_confirm for many (bridge, delivery id) pairs: one list per bridge."""
    ids: dict[str | None, list[int]] = {}
    for bridge, delivery_id in rows:
        per_bridge = ids.get(bridge)
        if per_bridge is None:
            ids[bridge] = [delivery_id]
        else:
            per_bridge.append(delivery_id)
    for bridge, delivery_ids in ids.items():
        _out(actor, bridge).confirmed.extend(delivery_ids)


def _forward(actor: actors.Actor, f: Forward, bridge: str | None) -> None:
    out = _out(actor, bridge)
    out.senders.append(actor.path)
    out.origins.append(f.origin)
    out.forward_ids.append(f.forward_id)
    out.anchors.append(f.anchor)
    out.tos.append(f.to)
    out.messages.append(f.message)


# Destinations checked once: a receiver posts to the same few paths (a ledger) for every row.
_valid_paths: set[str] = set()


def _follow_ups(follow_ups: Iterable[tuple[str, object]]) -> list[list[Any]]:
    pairs = []
    for item in follow_ups:
        try:
            to, message = item
        except (TypeError, ValueError):
            raise ValueError(f"follow_ups must be (path, message) pairs, got {item!r}") from None
        if to not in _valid_paths:
            actors.validate_path(to, what="follow-up destination")
            if len(_valid_paths) < 10_000:
                _valid_paths.add(to)
        pairs.append([to, message])
    return pairs


def ack(actor: actors.Actor, row: Row, follow_ups: Iterable[tuple[str, object]] = ()) -> None:
    """Confirm `row` to the bridge after sending `follow_ups` ((path, message) pairs) anchored to it.

    For destinations without a journal: what they did is lost with their process anyway. The bridge
    delivers each follow-up at least once from the moment it has it.
    """
    for to, message in _follow_ups(follow_ups) if follow_ups else ():
        _forward(actor, Forward(None, 0, row.anchor, to, message), row.bridge)
    _confirm(actor, row.delivery_id, row.bridge)


def _row_applied_values(e: RowApplied) -> tuple[object, ...]:
    """RowApplied's fields as records pack them, its event and follow-up messages already marked (the same
    bytes without msgpack calling back into Python for each)."""
    follow = e.follow_ups
    if follow:
        follow = [[pair[0], marked(pair[1])] if type(pair) is list and len(pair) == 2 else pair for pair in follow]
    return marked(e.event), e.anchor, follow, e.first_forward, e.forwarded_low, e.bridge_low


pack_values_with(RowApplied, _row_applied_values)


_TRIM_EVERY = 16
"""Rows an entity applies between two trims of its dedup memory (at most this many ranges more are kept)."""


class FeedReceiver(IdempotentReceiver):
    """A durable destination: `apply_row` persists each Row's event once, then confirms it to the bridge.

    Follow-ups are stored in the same event as the row's effect, so a crash after the write cannot lose
    them: they are sent again (the bridge deduplicates them by this actor's persistence id and a forward
    id) when the bridge redelivers a row this actor already applied (those of the row's tree with every copy,
    the others at most once per `follow_up_resend_interval`), until the bridge accepts them.
    Dedup memory stays bounded: rows carry the bridge's settled watermark, below which ids are forgotten.
    """

    follow_up_resend_interval: float = 10.0
    """Seconds between two resends of every follow-up the bridge has not accepted, on rows redelivered (the
    follow-ups of a redelivered row's own tree are sent again with each copy)."""

    def mixin_init(self) -> None:
        super().mixin_init()
        self._next_forward = 1
        # Forward ids below it were sent (or are of rows whose write failed); those from it on are of rows whose
        # write is in flight: not in _unaccepted yet, and not accepted either.
        self._sent_below = 1
        self._unaccepted: dict[int, tuple[Forward, str | None]] = {}  # forward id -> (follow-up, its bridge)
        self._bridge_low: dict[str, int] = {}  # per bridge (origin): every delivery id below it is settled
        self._rows_until_trim = 0
        self._resend_all_after = 0.0  # (monotonic) _reconfirm sends every unaccepted follow-up again from then on

    def apply_row(self, row: Row, event: object, handler: Callable[[Any], object] | None = None,
                  follow_ups: Iterable[tuple[str, object]] = ()) -> bool:
        """Persist `event` for `row` unless already applied, run `handler(event)`, send follow-ups, confirm.

        Returns False for a row applied before (it is confirmed again, after any write in flight, and the
        follow-ups of its tree the bridge has not accepted yet are sent again first; the other unaccepted ones
        too, at most once per `follow_up_resend_interval`).
        """
        if type(row) is not Row and not isinstance(row, Row):
            raise TypeError(f"apply_row needs the spark_bridge.Row the bridge delivered, got {type(row).__name__}")
        self._rows_until_trim -= 1
        if self._rows_until_trim <= 0:
            # Forgetting settled ids bounds memory; doing it every row cost ~5% of a busy host's CPU.
            self._rows_until_trim = _TRIM_EVERY
            self._trim(_origin(row.bridge), row.settled_below - 1)
        origin = _origin(row.bridge)
        if self.already_applied(origin, row.delivery_id):
            # After the pending handlers: the first copy's follow-ups must reach the bridge before this. Not at all
            # if the first copy's write was rejected (nothing applied: see confirm_duplicate).
            self.confirm_duplicate(origin, row.delivery_id, lambda: self._reconfirm(row))
            return False
        follow = _follow_ups(follow_ups) if follow_ups else []
        first = self._next_forward
        self._next_forward += len(follow)
        # (_unaccepted's ids are all below _sent_below: handlers run in the order their rows were persisted)
        low = min(self._unaccepted) if self._unaccepted else self._sent_below
        inner = RowApplied(event, row.anchor, follow, first, low, self._bridge_low.get(origin, 0))

        def applied(e: RowApplied) -> None:
            self._sent_below = e.first_forward + len(e.follow_ups)
            if e.follow_ups:
                # Unaccepted before the handler runs: a snapshot it saves (Akka's pattern) is stored at this row's
                # sequence number, which recovery from it does not replay, so it must hold them, or a recovered
                # receiver forgets them (one lost on the way would never be sent again). They go out when the
                # host settles, after the handler, as before.
                self._send_follow_ups(e, row.bridge)
            if handler is not None:
                handler(e.event)
            _confirm(self, row.delivery_id, row.bridge)

        return self.persist_applied(origin, row.delivery_id, inner, applied)

    @property
    def unaccepted_follow_ups(self) -> int:
        """Follow-ups sent but not yet accepted by the bridge."""
        return len(self._unaccepted)

    # ---- internals ------------------------------------------------------------------------------
    def _send_follow_ups(self, e: RowApplied, bridge: str | None) -> None:
        pid = self.persistence_id
        for k, (to, message) in enumerate(e.follow_ups):
            f = Forward(pid, e.first_forward + k, e.anchor, to, message)
            self._unaccepted[f.forward_id] = (f, bridge)
            _forward(self, f, bridge)

    def _reconfirm(self, row: Row) -> None:
        # The follow-ups of the row's tree go again before its confirmation: the tree's XOR must count them
        # first, and they may have died with an earlier process of this receiver (or never been sent). Every
        # other unaccepted one goes again only once per follow_up_resend_interval (one whose acceptance was
        # lost), not with each copy: when redeliveries piled up (this receiver's host restarted, the bridge
        # parked its messages to it, the guardian held more), each of tens of thousands of copies resent all of
        # them (40-120), the bridge's acceptances queued behind that flood, so they stayed unaccepted and the
        # next copies resent them all again: 5-7 million follow-ups resent for a 40,000-row feed, and on a slowed
        # machine no batch was processed for 90 s (test_feed.py's processed feed with the accounts' host killed).
        now = time.monotonic()
        if now >= self._resend_all_after:
            self._resend_all_after = now + self.follow_up_resend_interval
            for f, bridge in list(self._unaccepted.values()):
                _forward(self, f, bridge)
        else:
            anchor = row.anchor
            for f, bridge in self._unaccepted.values():
                if f.anchor == anchor:
                    _forward(self, f, bridge)
        _confirm(self, row.delivery_id, row.bridge)

    def _trim(self, origin: str, low: int) -> None:
        if low > self._bridge_low.get(origin, 0):
            self._bridge_low[origin] = low
            self.forget_applied_up_to(origin, low)  # the bridge never delivers them again

    def mixin_command(self, message: Any, sender: str | None) -> None:
        if type(message) is ForwardAccepted:
            unaccepted = self._unaccepted
            unaccepted.pop(message.forward_id, None)
            for forward_id in message.more:
                unaccepted.pop(forward_id, None)
        else:
            super().mixin_command(message, sender)

    def mixin_recover_event(self, event: Any) -> None:
        if type(event) is AppliedBatch:
            # Rows applied in one group commit: each entry recovers like a single Applied (below), but for those a
            # snapshot saved by a handler of a later one holds already (its state, dedup and unaccepted follow-ups).
            skip = self.take_applications_recovered()
            for origin, delivery_id, applied in event.entries()[skip:]:
                self.mixin_recover_event(Applied(origin, delivery_id, applied))
                if self.stop_requested:  # (stop() in receive_recover: no more applications after it)
                    return
            return
        if type(event) is Applied and type(event.event) is RowApplied:
            inner = event.event
            pid = self.persistence_id
            bridge = _bridge_of(event.origin)
            for k, (to, message) in enumerate(inner.follow_ups):
                fid = inner.first_forward + k
                self._unaccepted[fid] = (Forward(pid, fid, inner.anchor, to, message), bridge)
            self._next_forward = self._sent_below = max(self._next_forward, inner.first_forward + len(inner.follow_ups))
            for fid in [f for f in self._unaccepted if f < inner.forwarded_low]:
                del self._unaccepted[fid]
            super().mixin_recover_event(Applied(event.origin, event.delivery_id, inner.event))
            self._trim(event.origin, inner.bridge_low)
            return
        super().mixin_recover_event(event)

    def mixin_recover_snapshot(self, offer: SnapshotOffer) -> None:
        snap = offer.snapshot
        if isinstance(snap, ReceiverSnapshot):
            self._next_forward = self._sent_below = snap.next_forward
            pid = self.persistence_id
            # [forward_id, anchor, to, message] and, for a node bridge's row, its path
            self._unaccepted = {p[0]: (Forward(pid, p[0], p[1], p[2], p[3]), p[4] if len(p) > 4 else None)
                                for p in snap.pending}
            offer = SnapshotOffer(offer.metadata, snap.state)
        super().mixin_recover_snapshot(offer)

    def mixin_wrap_snapshot(self, snapshot: object) -> object:
        pending = [[f.forward_id, f.anchor, f.to, f.message, *([] if b is None else [b])]
                   for f, b in self._unaccepted.values()]
        return ReceiverSnapshot(self._next_forward, pending, super().mixin_wrap_snapshot(snapshot))


# Row.delivery_id and Row.bridge as item getters: map() calls them in C (a NamedTuple's fields are its items).
_ROW_ID = operator.itemgetter(Row._fields.index("delivery_id"))
_ROW_BRIDGE = operator.itemgetter(Row._fields.index("bridge"))


def _row_key(bridge: str | None, delivery_id: int) -> int | tuple[str, int]:
    """A row's key among the rows held: its id alone for the usual bridge (no tuple to build and hash per row)."""
    return delivery_id if bridge is None else (bridge, delivery_id)


class _Held:
    """A row whose confirmation waits for its follow-ups: confirmed to `bridge` once `pending` is 0."""

    __slots__ = ("bridge", "delivery_id", "pending", "key")

    def __init__(self, bridge: str | None, delivery_id: int) -> None:
        self.bridge = bridge
        self.delivery_id = delivery_id
        self.pending = 0
        self.key = _row_key(bridge, delivery_id)


@dataclass(frozen=True)
class _RedeliverFollowUps:
    """FeedTable -> itself: resend the follow-ups unconfirmed for longer than redeliver_interval."""


_REDELIVER = _RedeliverFollowUps()


def _reply_entity(table: str, shard: int, shards: int) -> str:
    """The entity id under `table` whose messages reach shard `shard` of it: where receivers confirm follow-ups."""
    for n in itertools.count():
        entity = FOLLOW_UPS_ENTITY if n == 0 else f"{FOLLOW_UPS_ENTITY}-{n}"
        if shard_of(f"{table}/{entity}", table, shards) == shard:
            return entity
    raise AssertionError("unreachable")  # pragma: no cover


FOLLOW_UPS_ENTITY = "~follow-ups"
"""The reserved entity id (with a suffix on some shards) of a FeedTable's own address: its follow-ups' receivers
confirm there."""


class FeedTable(EntityTable):
    """A durable destination whose entities are rows of one EntityTable per host (persistence.EntityTable).

    In `command_handler`, `apply_row(row, follow_ups)` says whether the row is new: return its events then.
    A new row's follow-ups ((path, message) pairs) are journaled in the same commit as its events, sent once
    it is durable, each at least once as a Row, straight to its receiver (a FeedReceiver, a FeedTable or an
    `ack`ing actor, which confirms it back to this table), and resent every `redeliver_interval` seconds until
    confirmed, across restarts. The row itself is confirmed to its bridge once it is durable and all its
    follow-ups are confirmed (a redelivered row again), so a feed with ack="processed" returns once every row
    and every follow-up is applied. A host's rows are journaled as one TableCommit per group commit
    (bench/PROFILE.md §18). Follow-ups a receiver anchors to a follow-up of this table are relayed by it.
    The entity ids starting with "~follow-ups" are this table's own address.
    """

    redeliver_interval: float = 5.0
    """Seconds after which a follow-up not confirmed yet is sent again."""

    mixin_table_messages = frozenset({Confirmed, Forwards})
    mixin_marks = True

    def mixin_init(self) -> None:
        super().mixin_init()
        self._rows_until_trim = 0
        self._to_confirm: list[Row] = []  # rows confirmed once the commit being gathered is durable
        self._reply_to = ""  # this shard's address (set on first use: the context is not there yet)
        self._next_forward = 1
        # The follow-ups gathered for the commit being built (columns of FollowUpColumns).
        self._first = 1
        self._tos: list[str] = []
        self._messages: list[object] = []
        self._rows: list[int] = []
        self._bridges: list[str | None] = []
        self._relay_origins: list[str] = []
        self._relay_ids: list[int] = []
        self._relay_replies: list[tuple[str, int]] = []
        # Follow-ups not confirmed yet: forward id -> (to, message, the row it holds or None), in id order.
        self._unconfirmed: dict[int, tuple[str, object, _Held | None]] = {}
        self._held: dict[int | tuple[str, int], _Held] = {}  # by _row_key
        self._relayed: dict[str, SeenIds] = {}
        self._durable_low = 1  # every forward id below it confirmed, as stored: what receivers may forget
        self._sent: collections.deque[tuple[float, int]] = collections.deque()  # (when, highest id) per send
        self._tick: actors.Timer | None = None

    def apply_row(self, row: Row, follow_ups: Iterable[tuple[str, object]] = ()) -> bool:
        """True the first time this table sees `row`; False for a redelivery. Confirmed either way, once durable
        and once the follow-ups of its first copy are confirmed. `follow_ups` ((path, message) pairs) are sent
        only for a new row."""
        if type(row) is not Row and not isinstance(row, Row):
            raise TypeError(f"apply_row needs the spark_bridge.Row the bridge delivered, got {type(row).__name__}")
        bridge = row.bridge
        origin = PERSISTENCE_ID if bridge is None else bridge  # (_origin, inlined: once per row)
        trim = self._rows_until_trim - 1
        if trim > 0:
            self._rows_until_trim = trim
        else:  # (the bridge never delivers ids below its settled watermark again)
            self._rows_until_trim = _TRIM_EVERY
            self.forget_applied_up_to(origin, row.settled_below - 1)
        if not self.apply_once(origin, row.delivery_id):
            self._to_confirm.append(row)
            return False
        if follow_ups:
            pairs = _follow_ups(follow_ups)
            for _, message in pairs:
                check_storable(message)  # (a follow-up the journal cannot store fails the command)
            if pairs:
                held = _Held(row.bridge, row.delivery_id)
                self._held[held.key] = held
                for to, message in pairs:
                    self._add_follow_up(to, message, held)
                return True
        self._to_confirm.append(row)
        return True

    @property
    def unconfirmed_follow_ups(self) -> int:
        """Follow-ups sent (or about to be) and not confirmed by their receivers yet."""
        return len(self._unconfirmed)

    # ---- internals ------------------------------------------------------------------------------
    def _add_follow_up(self, to: str, message: object, held: _Held | None) -> None:
        fid = self._next_forward
        if not self._tos:
            self._first = fid
        self._next_forward = fid + 1
        self._tos.append(to)
        self._messages.append(message)
        if held is None:
            self._rows.append(-1)
            self._bridges.append(None)
        else:
            held.pending += 1
            self._rows.append(held.delivery_id)
            self._bridges.append(held.bridge)
        self._unconfirmed[fid] = (to, message, held)

    def _confirm_rows(self, rows: list[Row]) -> None:
        """Confirm the rows of a commit now durable to their bridges (one list per bridge); a row whose first
        copy's follow-ups are still unconfirmed is confirmed when they are (_Held)."""
        held = self._held
        if not held:
            bridges = set(map(_ROW_BRIDGE, rows))
            if len(bridges) == 1:  # (the usual case: the rows of one bridge, confirmed in one list, in C)
                _out(self, bridges.pop()).confirmed.extend(map(_ROW_ID, rows))
                return
        _confirm_many(self, [(row.bridge, row.delivery_id) for row in rows
                             if not (held and _row_key(row.bridge, row.delivery_id) in held)])

    def mixin_mark(self) -> object:
        return len(self._tos), len(self._to_confirm)

    def mixin_undo(self, mark: object) -> None:
        n, confirms = cast("tuple[int, int]", mark)
        del self._to_confirm[confirms:]
        if len(self._tos) == n:
            return
        first = self._first + n
        for fid in range(first, self._next_forward):
            _, _, held = self._unconfirmed.pop(fid)
            if held is not None:
                self._held.pop(held.key, None)
        self._next_forward = first
        del self._tos[n:], self._messages[n:], self._rows[n:], self._bridges[n:]

    def mixin_commit_columns(self) -> object | None:
        if self._to_confirm:  # (one action per commit, not one per row)
            self.when_durable(self._confirm_rows, self._to_confirm)
            self._to_confirm = []
        if not (self._tos or self._relay_ids):
            return None
        low = next(iter(self._unconfirmed), self._next_forward)
        columns = FollowUpColumns(self._first, tuple(self._tos), tuple(self._messages), tuple(self._rows),
                                  tuple(self._bridges), tuple(self._relay_origins), tuple(self._relay_ids), low)
        self._tos, self._messages, self._rows, self._bridges = [], [], [], []
        self._relay_origins, self._relay_ids = [], []
        self.when_durable(self._committed_follow_ups, (columns, self._relay_replies))
        self._relay_replies = []
        return columns

    def _committed_follow_ups(self, done: tuple[FollowUpColumns, list[tuple[str, int]]]) -> None:
        columns, replies = done
        self._durable_low = max(self._durable_low, columns.low)
        if replies:
            targets, ids = [r[0] for r in replies], [r[1] for r in replies]
            self.context.scatter(self.path, targets, lambda idx: ForwardsAccepted(*_pick(idx, targets, ids)))
        self._send_follow_ups(range(columns.first, columns.first + len(columns.tos)))

    def _send_follow_ups(self, fids: Iterable[int]) -> None:
        """Send the follow-ups `fids` that are still unconfirmed, as one RowChunk per receiving host."""
        unconfirmed = self._unconfirmed
        targets: list[str] = []
        ids: list[int] = []
        values: list[object] = []
        for fid in fids:
            entry = unconfirmed.get(fid)
            if entry is not None:
                targets.append(entry[0])
                ids.append(fid)
                values.append(entry[1])
        if not ids:
            return
        me, low = self._reply_path(), self._durable_low
        # (mypy cannot match the unpacked columns to RowChunk's fields)
        self.context.scatter(me, targets, lambda idx: RowChunk(*_pick(idx, targets, ids, ids, values), None, low, me))  # type: ignore[call-arg, arg-type]
        self._sent.append((time.monotonic(), ids[-1]))
        if self._tick is None:
            self._tick = self.schedule_once(self.redeliver_interval / 2, _REDELIVER)

    def _reply_path(self) -> str:
        if not self._reply_to:
            context = self.context
            self._reply_to = f"{self.path}/{_reply_entity(self.path, context.shard, context.shards)}"
        return self._reply_to

    def _redeliver(self) -> None:
        self._tick = None
        due = time.monotonic() - self.redeliver_interval
        upto = 0
        while self._sent and self._sent[0][0] <= due:
            upto = max(upto, self._sent.popleft()[1])
        if upto:
            resend = []
            for fid, (to, message, _) in list(self._unconfirmed.items()):
                if fid > upto:
                    break
                if self.context.resolve(to) is None:  # nobody serves it any more: dead-lettered once, not retried
                    self.context.dead_letter(self._reply_path(), to, message, "no actor serves this path")
                    self._confirmed(fid)
                else:
                    resend.append(fid)
            self._send_follow_ups(resend)
        if self._unconfirmed and self._tick is None:
            self._tick = self.schedule_once(self.redeliver_interval / 2, _REDELIVER)

    def _confirmed(self, fid: int) -> None:
        entry = self._unconfirmed.pop(fid, None)
        if entry is None:
            return  # confirmed before (a redelivery confirmed again)
        held = entry[2]
        if held is not None:
            held.pending -= 1
            if held.pending == 0:
                del self._held[held.key]
                _confirm(self, held.delivery_id, held.bridge)

    def mixin_table_message(self, entity_id: str, message: Any, sender: str | None) -> None:
        if type(message) is not Confirmed:
            self._relay(cast(Forwards, message))
            return
        unconfirmed, held_rows = self._unconfirmed, self._held
        done: list[tuple[str | None, int]] = []  # the rows whose last follow-up this confirms
        for fid in message.delivery_ids:
            entry = unconfirmed.pop(fid, None)
            if entry is None or entry[2] is None:
                continue  # confirmed before (a redelivery confirmed again), or holding no row
            held = entry[2]
            held.pending -= 1
            if not held.pending:
                del held_rows[held.key]
                done.append((held.bridge, held.delivery_id))
        _confirm_many(self, done)

    def _relay(self, m: Forwards) -> None:
        """Follow-ups that receivers of this table's follow-ups anchored to them: journaled, then sent like
        this table's own, holding the same row; each accepted (ForwardAccepted) once durable."""
        again: list[tuple[str, int]] = []  # (sender, forward id) of those relayed before
        for sender, origin, forward_id, anchor, to, message in zip(m.senders, m.origins, m.forward_ids, m.anchors,
                                                                   m.tos, m.messages, strict=True):
            if origin is not None:
                seen = self._relayed.get(origin)
                if seen is None:
                    seen = self._relayed[origin] = SeenIds()
                if forward_id in seen:  # sent again (its sender restarted, its row redelivered): accepted once durable
                    again.append((sender, forward_id))
                    continue
                seen.add(forward_id)
                self._relay_origins.append(origin)
                self._relay_ids.append(forward_id)
                self._relay_replies.append((sender, forward_id))
            try:
                actors.validate_path(to, what="follow-up destination")
            except actors.InvalidPath as exc:
                self.context.dead_letter(sender, str(to), message, str(exc))
                continue
            parent = self._unconfirmed.get(anchor) if type(anchor) is int else None
            # A follow-up of a follow-up confirmed already (or of none) is delivered, but holds no row.
            self._add_follow_up(to, message, None if parent is None else parent[2])
        if again:  # (together: one message per receiving host, not one per follow-up sent again)
            self.when_durable(self._accept_again, again)

    def _accept_again(self, replies: list[tuple[str, int]]) -> None:
        targets, ids = [r[0] for r in replies], [r[1] for r in replies]
        self.context.scatter(self.path, targets, lambda idx: ForwardsAccepted(*_pick(idx, targets, ids)))

    def mixin_command(self, message: Any, sender: str | None) -> None:
        if type(message) is _RedeliverFollowUps:
            self._redeliver()
        else:
            super().mixin_command(message, sender)

    # ---- recovery ---------------------------------------------------------------------------------
    def mixin_recover_columns(self, columns: object) -> None:
        if type(columns) is not FollowUpColumns:
            return super().mixin_recover_columns(columns)
        unconfirmed = self._unconfirmed
        done = []
        for fid in unconfirmed:  # (in id order)
            if fid >= columns.low:
                break
            done.append(fid)
        for fid in done:
            self._confirmed_quietly(fid)
        held_rows = self._held
        for k, (to, message, row, bridge) in enumerate(zip(columns.tos, columns.messages, columns.rows,
                                                             columns.bridges, strict=True)):
            held = None
            if row >= 0:
                held = held_rows.get(_row_key(bridge, row))
                if held is None:
                    held = _Held(bridge, row)
                    held_rows[held.key] = held
                held.pending += 1
            unconfirmed[columns.first + k] = (to, message, held)
        self._next_forward = max(self._next_forward, columns.first + len(columns.tos))
        for origin, forward_id in zip(columns.relay_origins, columns.relay_ids, strict=True):
            seen = self._relayed.get(origin)
            if seen is None:
                seen = self._relayed[origin] = SeenIds()
            seen.add(forward_id)
        self._durable_low = max(self._durable_low, columns.low)
        return None

    def _confirmed_quietly(self, fid: int) -> None:
        """Recovery: a follow-up confirmed before the commit being replayed (its row was confirmed then)."""
        _, _, held = self._unconfirmed.pop(fid)
        if held is not None:
            held.pending -= 1
            if held.pending == 0:
                del self._held[held.key]

    def mixin_snapshot_columns(self) -> object | None:
        pending = [[fid, to, message, -1 if held is None else held.delivery_id, None if held is None else held.bridge]
                   for fid, (to, message, held) in self._unconfirmed.items()]
        return FollowUpSnapshot(self._next_forward, pending, {o: s.state() for o, s in self._relayed.items()})

    def mixin_recover_snapshot_columns(self, columns: object) -> None:
        if type(columns) is not FollowUpSnapshot:
            return super().mixin_recover_snapshot_columns(columns)
        self._next_forward = columns.next_forward
        self._relayed = {o: SeenIds(low, tuple(ranges)) for o, (low, ranges) in columns.relayed.items()}
        low = columns.next_forward
        for fid, to, message, row, bridge in columns.pending:
            held = None
            if row >= 0:
                held = self._held.get(_row_key(bridge, row))
                if held is None:
                    held = _Held(bridge, row)
                    self._held[held.key] = held
                held.pending += 1
            self._unconfirmed[fid] = (to, message, held)
            low = min(low, fid)
        self._durable_low = max(self._durable_low, low)
        return None

    def mixin_recover_event(self, event: Any) -> None:
        super().mixin_recover_event(event)
        if type(event) is RecoveryCompleted and self._unconfirmed:
            # What was journaled and not confirmed: the receivers may never have had it.
            self._send_follow_ups(list(self._unconfirmed))

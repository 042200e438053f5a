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

import weakref
from collections.abc import Callable, Iterable
from typing import Any

import actors
from journal.serialization import marked, pack_values_with
from persistence import EntityTable, IdempotentReceiver, SnapshotOffer
from persistence.idempotent import Applied, AppliedBatch
from spark_bridge.bridge import BRIDGE_PATH, PERSISTENCE_ID
from spark_bridge.messages import (
    Confirmed,
    Forward,
    ForwardAccepted,
    Forwards,
    ReceiverSnapshot,
    Row,
    RowApplied,
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
    id) whenever the bridge redelivers a row this actor already applied, until the bridge accepts them.
    Dedup memory stays bounded: rows carry the bridge's settled watermark, below which ids are forgotten.
    """

    def mixin_init(self) -> None:
        super().mixin_init()
        self._next_forward = 1
        self._unaccepted: dict[int, tuple[Forward, str | None]] = {}  # forward id -> (follow-up, its bridge)
        self._bridge_low: dict[str, int] = {}  # per bridge (origin): every delivery id below it is settled
        self._rows_until_trim = 0

    def apply_row(self, row: Row, event: object, handler: Callable[[Any], object] | None = None,
                  follow_ups: Iterable[tuple[str, object]] = ()) -> bool:
        """Persist `event` for `row` unless already applied, run `handler(event)`, send follow-ups, confirm.

        Returns False for a row applied before (it is confirmed again, after any write in flight, and
        follow-ups the bridge has not accepted yet are sent again first).
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
            # After the pending handlers: the first copy's follow-ups must reach the bridge before this.
            self.defer_async(row, self._reconfirm)
            return False
        follow = _follow_ups(follow_ups) if follow_ups else []
        first = self._next_forward
        self._next_forward += len(follow)
        low = min(self._unaccepted) if self._unaccepted else first
        inner = RowApplied(event, row.anchor, follow, first, low, self._bridge_low.get(origin, 0))

        def applied(e: RowApplied) -> None:
            if handler is not None:
                handler(e.event)
            if e.follow_ups:
                self._send_follow_ups(e, row.bridge)
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
        for f, bridge in list(self._unaccepted.values()):
            _forward(self, f, bridge)
        _confirm(self, row.delivery_id, row.bridge)

    def _trim(self, origin: str, low: int) -> None:
        if low > self._bridge_low.get(origin, 0):
            self._bridge_low[origin] = low
            self.forget_applied_up_to(origin, low)  # the bridge never delivers them again

    def mixin_command(self, message: Any, sender: str | None) -> None:
        if type(message) is ForwardAccepted:
            self._unaccepted.pop(message.forward_id, None)
        else:
            super().mixin_command(message, sender)

    def mixin_recover_event(self, event: Any) -> None:
        if type(event) is AppliedBatch:
            # Rows applied in one group commit: each entry recovers like a single Applied (below).
            for origin, delivery_id, applied in event.entries():
                self.mixin_recover_event(Applied(origin, delivery_id, applied))
            return
        if type(event) is Applied and type(event.event) is RowApplied:
            inner = event.event
            pid = self.persistence_id
            bridge = _bridge_of(event.origin)
            for k, (to, message) in enumerate(inner.follow_ups):
                fid = inner.first_forward + k
                self._unaccepted[fid] = (Forward(pid, fid, inner.anchor, to, message), bridge)
            self._next_forward = max(self._next_forward, inner.first_forward + len(inner.follow_ups))
            for fid in [f for f in self._unaccepted if f < inner.forwarded_low]:
                del self._unaccepted[fid]
            super().mixin_recover_event(Applied(event.origin, event.delivery_id, inner.event))
            self._trim(event.origin, inner.bridge_low)
            return
        super().mixin_recover_event(event)

    def mixin_recover_snapshot(self, offer: SnapshotOffer) -> None:
        snap = offer.snapshot
        if isinstance(snap, ReceiverSnapshot):
            self._next_forward = snap.next_forward
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


class FeedTable(EntityTable):
    """A durable destination whose entities are rows of one EntityTable per host (persistence.EntityTable).

    In `command_handler`, `apply_row(row)` says whether the row is new: return its events then. The row is
    confirmed to its bridge once every event persisted so far is durable, a redelivered row again, so a
    feed with ack="processed" returns once all its rows are durable. A host's rows are journaled as one
    TableCommit per group commit (bench/PROFILE.md §18). No follow-ups: a destination that sends some is
    a FeedReceiver.
    """

    def mixin_init(self) -> None:
        super().mixin_init()
        self._rows_until_trim = 0

    def apply_row(self, row: Row) -> bool:
        """True the first time this table sees `row`; False for a redelivery. Confirmed either way, once durable."""
        if type(row) is not Row and not isinstance(row, Row):
            raise TypeError(f"apply_row needs the spark_bridge.Row the bridge delivered, got {type(row).__name__}")
        origin = _origin(row.bridge)
        self._rows_until_trim -= 1
        if self._rows_until_trim <= 0:  # (the bridge never delivers ids below its settled watermark again)
            self._rows_until_trim = _TRIM_EVERY
            self.forget_applied_up_to(origin, row.settled_below - 1)
        self.when_durable(self._confirm_row, row)
        return self.apply_once(origin, row.delivery_id)

    def _confirm_row(self, row: Row) -> None:
        _confirm(self, row.delivery_id, row.bridge)

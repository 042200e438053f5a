"""Actors for the tests of a DurableDelivery that delivers what an event of its own decides (an order forwarded to a
sink), importable by module path as multiproc requires. The journals are relay_actors' fault-injecting schemes:
`failfwd://` fails, `killfwd://` SIGKILLs the host at, the first write of each DeliveriesSent of a "fault..." Forward.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence import Confirm, DurableDelivery
from tests.persistence.compact_fixtures import Parcel, Unstorable
from tests.persistence.relay_actors import Forward, _Relay


@register_type(manifest="tests.persistence.Ordered")
@dataclass(frozen=True)
class Ordered:
    """The sender's event: it accepted the order of `payload` (which it forwards to its sinks)."""

    payload: str


class _OrderSender(DurableDelivery):
    """("order", payload): accepts the order and forwards it to each sink as a Forward, replying ("ok", payload);
    "unconfirmed": how many forwards are unconfirmed; "ordered": the payloads of its events. Redelivers every 0.2 s."""

    redeliver_interval = 0.2

    def __init__(self, sinks: tuple[str, ...]) -> None:
        self.sinks = sinks
        self.ordered: list[str] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, Ordered):
            self.ordered.append(event.payload)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "unconfirmed":
            self.tell(sender, self.number_of_unconfirmed)
        elif message == "ordered":
            self.tell(sender, tuple(self.ordered))
        elif isinstance(message, tuple) and message[0] == "order":
            self.order(message[1], sender)

    def accepted(self, event: Ordered, sender: str | None) -> None:
        self.ordered.append(event.payload)
        self.tell(sender, ("ok", event.payload))

    def order(self, payload: str, sender: str | None) -> None:
        raise NotImplementedError


class NaturalSender(_OrderSender):
    """Akka's shape: persist the event, deliver from its handler (the delivery journaled in a later write)."""

    def order(self, payload: str, sender: str | None) -> None:
        def handler(event: Ordered) -> None:
            for sink in self.sinks:
                self.deliver(sink, lambda i: Forward(i, event.payload))
            self.accepted(event, sender)

        self.persist(Ordered(payload), handler)


class Sender(_OrderSender):
    """persist_and_deliver: the event and its deliveries in one write, the reply from its handler. A payload
    "bad-event..." is persisted as an Unstorable event, "bad-forward..." forwarded as an Unstorable message."""

    asynchronous = False

    def order(self, payload: str, sender: str | None) -> None:
        event = Unstorable(0, payload) if payload.startswith("bad-event") else Ordered(payload)
        make = Unstorable if payload.startswith("bad-forward") else Forward
        self.persist_and_deliver(event, [(sink, lambda i: make(i, payload)) for sink in self.sinks],
                                 lambda e: self.accepted(Ordered(payload), sender), self.asynchronous)


class AsyncSender(Sender):
    """Sender with persist_and_deliver(..., asynchronous=True): commands keep flowing meanwhile."""

    asynchronous = True


class DeliverThenReply(_OrderSender):
    """deliver() in the command; the reply `deferred` (after the delivery's write) or told at once. A payload
    "bad-forward..." is forwarded to the last sink as an Unstorable message (the journal rejects it)."""

    deferred = True

    def order(self, payload: str, sender: str | None) -> None:
        for sink in self.sinks:
            make = Unstorable if payload.startswith("bad-forward") and sink == self.sinks[-1] else Forward
            self.deliver(sink, lambda i, m=make: m(i, payload))
        if self.deferred:
            self.defer(Ordered(payload), lambda e: self.accepted(e, sender))
        else:
            self.accepted(Ordered(payload), sender)


class DeliverThenReplyAtOnce(DeliverThenReply):
    """DeliverThenReply replying at once, before the delivery's write."""

    deferred = False


class PersistThenDeferDeliver(_OrderSender):
    """persist the event (replying from its handler), then deliver from a deferral queued behind it: the deliveries
    are journaled in a later write than the acknowledged event. `persist_with` and `defer_with` name the calls."""

    persist_with = "persist"
    defer_with = "defer"

    def order(self, payload: str, sender: str | None) -> None:
        def deliver(_: object) -> None:
            for sink in self.sinks:
                self.deliver(sink, lambda i: Forward(i, payload))

        getattr(self, self.persist_with)(Ordered(payload), lambda e: self.accepted(e, sender))
        getattr(self, self.defer_with)(None, deliver)


class PersistAsyncThenDeferAsyncDeliver(PersistThenDeferDeliver):
    """PersistThenDeferDeliver with persist_async and defer_async."""

    persist_with, defer_with = "persist_async", "defer_async"


class PersistThenDeferAsyncDeliver(PersistThenDeferDeliver):
    """PersistThenDeferDeliver with persist and defer_async."""

    defer_with = "defer_async"


class PersistAsyncThenDeferDeliver(PersistThenDeferDeliver):
    """PersistThenDeferDeliver with persist_async and defer."""

    persist_with = "persist_async"


class PersistThenDeliverFromItsHandlersDeferral(_OrderSender):
    """persist the event; its handler defers the deliveries (queued behind that handler, after the event is durable)."""

    def order(self, payload: str, sender: str | None) -> None:
        def handler(event: Ordered) -> None:
            self.accepted(event, sender)
            self.defer(None, lambda _: [self.deliver(sink, lambda i: Forward(i, payload)) for sink in self.sinks])

        self.persist(Ordered(payload), handler)


class DeferDeliverAtOnce(_OrderSender):
    """defer() with nothing pending (it runs at once, as Akka's): delivers, then replies from a deferral behind the
    deliveries' write; ("chained", payload): delivers to the first sink, then to the others from a deferral queued
    behind that delivery only (no event of its own), then replies as above. Both may deliver, as a command does."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "chained":
            payload = message[1]
            self.deliver(self.sinks[0], lambda i: Forward(i, payload))
            self.defer(None, lambda _: self._deliver_and_reply(payload, self.sinks[1:], sender))
        else:
            super().receive_command(message, sender)

    def order(self, payload: str, sender: str | None) -> None:
        self.defer(None, lambda _: self._deliver_and_reply(payload, self.sinks, sender))

    def _deliver_and_reply(self, payload: str, sinks: tuple[str, ...], sender: str | None) -> None:
        for sink in sinks:
            self.deliver(sink, lambda i: Forward(i, payload))
        self.defer(Ordered(payload), lambda e: self.tell(sender, ("ok", e.payload)))


class DeliverThenCheckedReply(DeliverThenReply):
    """DeliverThenReply whose deferred reply says ("not stored", payload) when the journal rejected one of its
    deliveries: the deferral runs after a rejection too (Akka's defer), and a rejected delivery has left
    unconfirmed_ids() (a stashing defer runs before any Confirm of them is handled)."""

    def order(self, payload: str, sender: str | None) -> None:
        ids = []
        for sink in self.sinks:
            make = Unstorable if payload.startswith("bad-forward") and sink == self.sinks[-1] else Forward
            ids.append(self.deliver(sink, lambda i, m=make: m(i, payload)))

        def reply(_: object) -> None:
            stored = self.unconfirmed_ids()
            self.tell(sender, ("ok" if all(i in stored for i in ids) else "not stored", payload))

        self.defer(None, reply)


class TwoAskers(DeliverThenReply):
    """DeliverThenReply whose payloads holding "-now" are replied to at once (their deliveries journaled with the
    next command's write); ("as", ((asker, payload), ...)): each ("order", payload) routed to itself from that asker,
    all handled before the host's next group commit (one round: their deliveries journaled as one DeliveriesSent)."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "as":
            for asker, payload in message[1]:
                self.context.route(asker, self.path, ("order", payload))
        else:
            super().receive_command(message, sender)

    def order(self, payload: str, sender: str | None) -> None:
        self.deferred = "-now" not in payload
        super().order(payload, sender)


class DeferredForwardRelay(_Relay):
    """persist_applied each Parcel (confirming it from the handler), then, unless its payload starts "plain", deliver
    its Forward from a deferral queued behind that application (journaled after the confirm went out); a duplicate is
    not confirmed (an origin that got no confirm redelivers)."""

    def relay(self, origin: str, parcel: Parcel) -> None:
        i, payload = parcel.delivery_id, parcel.payload
        applied = self.persist_applied(origin, i, payload, lambda _: self.tell(origin, Confirm(i)))
        if applied and not payload.startswith("plain"):
            self.defer(None, lambda _: self.deliver(self.sink, lambda d: Forward(d, payload)))


class BatchedSender(DeferDeliverAtOnce):
    """DeferDeliverAtOnce (an entity) whose receive_batch handles some commands itself: ("persist", payload) persists
    the order's event (persist_async, replying from its handler); ("chained-inline", payload) delivers to the first
    sink, then to the others from a deferral (as "chained"); ("defer-deliver", payload) delivers to every sink from a
    deferral (behind whatever is pending). Everything else goes to receive."""

    def receive_batch(self, messages: Iterator[tuple[Any, str | None]]) -> None:
        for message, sender in messages:
            kind = message[0] if isinstance(message, tuple) else None
            if kind == "persist":
                self.persist_async(Ordered(message[1]), lambda e, s=sender: self.accepted(e, s))
            elif kind == "chained-inline":
                payload = message[1]
                self.deliver(self.sinks[0], lambda i, p=payload: Forward(i, p))
                self.defer(None, lambda _, p=payload, s=sender: self._deliver_and_reply(p, self.sinks[1:], s))
            elif kind == "defer-deliver":
                self.defer(None, lambda _, p=message[1], s=sender: self._deliver_and_reply(p, self.sinks, s))
            else:
                self.receive(message, sender)


class PersistAndDeliverThenDeferDeliver(_OrderSender):
    """persist_and_deliver the order (replying from its handler), then deliver it again from a deferral queued
    behind that write."""

    def order(self, payload: str, sender: str | None) -> None:
        self.persist_and_deliver(Ordered(payload), [(sink, lambda i: Forward(i, payload)) for sink in self.sinks],
                                 lambda e: self.accepted(e, sender))
        self.defer(None, lambda _: [self.deliver(sink, lambda i: Forward(i, "again")) for sink in self.sinks])

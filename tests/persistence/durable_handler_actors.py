"""Actors for the tests of a DurableDelivery that delivers what an event of its own decides (an order forwarded to a
sink), importable by module path as multiproc requires. The journals are relay_actors' fault-injecting schemes:
`failfwd://` fails, `killfwd://` SIGKILLs the host at, the first write of each DeliveriesSent of a "fault..." Forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence import DurableDelivery
from tests.persistence.compact_fixtures import Unstorable
from tests.persistence.relay_actors import Forward


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
    """deliver() in the command; the reply `deferred` (after the delivery's write) or told at once."""

    deferred = True

    def order(self, payload: str, sender: str | None) -> None:
        for sink in self.sinks:
            self.deliver(sink, lambda i: Forward(i, payload))
        if self.deferred:
            self.defer(Ordered(payload), lambda e: self.accepted(e, sender))
        else:
            self.accepted(Ordered(payload), sender)


class DeliverThenReplyAtOnce(DeliverThenReply):
    """DeliverThenReply replying at once, before the delivery's write."""

    deferred = False

"""Actors the torture histories run (importable by the actor processes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence import DurableDelivery, IdempotentReceiver, PersistentActor
from spark_bridge import FeedReceiver, Row

STORES, FEEDER, SINKS, FED = "/user/stores", "/user/feeder", "/user/sinks", "/user/fed"


@register_type(manifest="tests.torture.Stored")
@dataclass(frozen=True)
class Stored:
    """A Store's event: `value` was put."""

    value: int


@dataclass(frozen=True)
class Put:
    """Client -> Store: persist `value`; reply PutAck once durable when `reply`."""

    value: int
    reply: bool = True


@dataclass(frozen=True)
class PutAck:
    """Store -> client: `value` is durable."""

    value: int


@dataclass(frozen=True)
class GetValues:
    """Client -> Store/Sink/FedSink: reply Values with what the live actor has applied."""


@dataclass(frozen=True)
class Values:
    """What one live actor has applied, in order."""

    entity: str
    values: tuple


@register_type(manifest="tests.torture.Item")
@dataclass(frozen=True)
class Item:
    """Feeder -> Sink: item `n` of `stream`, as delivery `delivery_id` (resent until confirmed)."""

    delivery_id: int
    stream: str
    n: int


@register_type(manifest="tests.torture.Got")
@dataclass(frozen=True)
class Got:
    """A Sink's event: item `n` of `stream` applied."""

    stream: str
    n: int


@dataclass(frozen=True)
class Send:
    """Client -> Feeder: deliver items `start` .. `start + count - 1` of `stream` to `sinks` sinks."""

    stream: str
    start: int
    count: int
    sinks: int


@dataclass(frozen=True)
class SendAck:
    """Feeder -> client: every item of the Send is journaled (DeliveriesSent) and will be delivered."""

    stream: str
    start: int
    count: int


@dataclass(frozen=True)
class Unconfirmed:
    """Feeder -> client: deliveries not confirmed yet."""

    count: int


@register_type(manifest="tests.torture.Fed")
@dataclass(frozen=True)
class Fed:
    """A FedSink's event: the Spark row with `txid` applied."""

    txid: int


def sink_of(n: int, sinks: int) -> str:
    """The sink path item `n` goes to."""
    return f"{SINKS}/{n % sinks}"


class Store(PersistentActor):
    """Persists every Put as one event and acknowledges it once durable."""

    def __init__(self) -> None:
        self.values: list[int] = []

    def receive_recover(self, event: Any) -> None:
        """Replay a Stored."""
        if isinstance(event, Stored):
            self.values.append(event.value)

    def receive_command(self, message: Any, sender: str | None) -> None:
        """Put persists; GetValues replies."""
        if isinstance(message, Put):
            self.persist(Stored(message.value), lambda e, s=sender, r=message.reply: self._stored(e, s, r))
        elif isinstance(message, GetValues):
            self.tell(sender, Values(self.entity_id, tuple(self.values)))

    def _stored(self, event: Stored, sender: str | None, reply: bool) -> None:
        self.values.append(event.value)
        if reply and sender:
            self.tell(sender, PutAck(event.value))


class Feeder(DurableDelivery):
    """Journals every item it delivers and resends it until its sink confirms."""

    redeliver_interval = 0.5

    def receive_recover(self, event: Any) -> None:
        """Nothing of its own: DurableDelivery replays the deliveries."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        """Send delivers items and acknowledges once they are journaled; "unconfirmed" replies the count."""
        if isinstance(message, Send):
            for n in range(message.start, message.start + message.count):
                self.deliver(sink_of(n, message.sinks), lambda i, s=message.stream, n=n: Item(i, s, n))
            # After the DeliveriesSent events are durable: an acknowledged item is never forgotten.
            self.defer_async(SendAck(message.stream, message.start, message.count),
                             lambda ack, sender=sender: self.tell(sender, ack))
        elif message == "unconfirmed":
            self.tell(sender, Unconfirmed(self.number_of_unconfirmed))


class Sink(IdempotentReceiver):
    """Applies each (feeder, delivery id) once and confirms it once durable."""

    def __init__(self) -> None:
        self.got: list[tuple[str, int]] = []

    def receive_recover(self, event: Any) -> None:
        """Replay a Got."""
        if isinstance(event, Got):
            self.got.append((event.stream, event.n))

    def receive_command(self, message: Any, sender: str | None) -> None:
        """Item applies once; GetValues replies."""
        if isinstance(message, Item):
            self.apply_and_confirm(sender, message.delivery_id, Got(message.stream, message.n),
                                   lambda e: self.got.append((e.stream, e.n)))
        elif isinstance(message, GetValues):
            self.tell(sender, Values(self.entity_id, tuple(self.got)))


class FedSink(FeedReceiver):
    """A Spark feed destination applying each row once through its journal."""

    def __init__(self) -> None:
        self.txids: list[int] = []

    def receive_recover(self, event: Any) -> None:
        """Replay a Fed."""
        if isinstance(event, Fed):
            self.txids.append(event.txid)

    def receive_command(self, message: Any, sender: str | None) -> None:
        """Row applies once; GetValues replies."""
        if isinstance(message, Row):
            self.apply_row(message, Fed(message.body["txid"]), lambda e: self.txids.append(e.txid))
        elif isinstance(message, GetValues):
            self.tell(sender, Values(self.entity_id, tuple(self.txids)))

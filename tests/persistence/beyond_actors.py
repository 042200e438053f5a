"""Actors for the beyond-Akka delivery features: backoff, dead-lettering, nacks, cumulative confirms, dedup."""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import Any

import actors
from journal import MAX_SEQUENCE_NR, register_type
from persistence import (
    AtLeastOnceDelivery,
    Confirm,
    ConfirmUpTo,
    DeadLetteredDelivery,
    DurableDelivery,
    IdempotentReceiver,
    MaxUnconfirmedMessagesExceeded,
    SaveSnapshotSuccess,
    SnapshotOffer,
    UnconfirmedDelivery,
)


@register_type(manifest="tests.persistence.beyond.Payload")
@dataclass(frozen=True)
class Payload:
    delivery_id: int
    body: str


@dataclass(frozen=True)
class Nack:
    delivery_id: int


@dataclass(frozen=True)
class Send:
    destination: str
    body: str


@register_type(manifest="tests.persistence.beyond.Queued")
@dataclass(frozen=True)
class Queued:
    destination: str
    body: str


@register_type(manifest="tests.persistence.beyond.Confirmed")
@dataclass(frozen=True)
class Confirmed:
    delivery_id: int
    up_to: bool = False


@register_type(manifest="tests.persistence.beyond.Exhausted")
@dataclass(frozen=True)
class Exhausted:
    delivery_id: int
    destination: str
    message: Any
    attempts: int


class _Configured:
    """Per-host configuration from spawn kwargs; reports go to the probe named after the entity id."""

    def __init__(self, client: str, interval: float = 30.0, backoff: tuple | None = None,
                 max_attempts: int | None = None, dlq: str | None = None, max_unconfirmed: int = 100_000) -> None:
        self.client = client
        self.max_unconfirmed_messages = max_unconfirmed
        self.redeliver_interval = interval
        self.redelivery_backoff = tuple(backoff) if backoff else None
        self.max_delivery_attempts = max_attempts
        self.dead_letter_path = dlq

    @property
    def probe(self) -> str:
        return f"{self.client}/{self.entity_id}"

    def common(self, message: Any, sender: str | None) -> bool:
        if message == "unconfirmed":
            self.tell(sender, self.number_of_unconfirmed)
        elif message == "last-delivery-id":
            self.tell(sender, self.get_delivery_snapshot().current_delivery_id)
        elif message == "boom":
            raise RuntimeError("boom")
        elif message == "timer":
            t = self._redeliver_timer
            self.tell(sender, t is not None and t.active)
        elif isinstance(message, tuple) and message[0] == "direct":
            try:
                self.tell(sender, ("queued", self.deliver(message[1], lambda i: Payload(i, message[2]))))
            except MaxUnconfirmedMessagesExceeded as exc:
                self.tell(sender, ("max", str(exc), self.number_of_unconfirmed,
                                   self.get_delivery_snapshot().current_delivery_id))
        elif isinstance(message, Nack):
            self.tell(self.probe, ("nack", self.redeliver_now(message.delivery_id)))
        else:
            return False
        return True


class FeatureSender(_Configured, AtLeastOnceDelivery):
    """A plain AtLeastOnceDelivery sender: persists its intents, confirmations and exhausted deliveries."""

    def _deliver(self, event: Queued) -> int:
        return self.deliver(event.destination, lambda i: Payload(i, event.body))

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, Queued):
            self._deliver(event)
        elif isinstance(event, Confirmed):
            (self.confirm_deliveries_up_to if event.up_to else self.confirm_delivery)(event.delivery_id)
        elif isinstance(event, Exhausted):
            # The recipe of on_delivery_exhausted: ids stay the ones of the first run.
            delivery = UnconfirmedDelivery(event.delivery_id, event.destination, event.message)
            self.confirm_delivery(event.delivery_id)
            self.deliver_to_dead_letters(delivery, event.attempts)

    def on_delivery_exhausted(self, delivery: UnconfirmedDelivery, attempts: int) -> None:
        self.persist(Exhausted(delivery.delivery_id, delivery.destination, delivery.message, attempts),
                     lambda e: self.tell(self.probe, ("exhausted", e.delivery_id, e.attempts)))

    def receive_command(self, message: Any, sender: str | None) -> None:
        if self.common(message, sender):
            return
        if isinstance(message, Send):
            self.persist(Queued(message.destination, message.body),
                         lambda e: self.tell(sender, ("queued", self._deliver(e))))
        elif isinstance(message, Confirm):
            if self.confirm_delivery(message.delivery_id):
                self.persist(Confirmed(message.delivery_id), lambda e: None)
        elif isinstance(message, ConfirmUpTo):
            n = self.confirm_deliveries_up_to(message.delivery_id)
            self.persist(Confirmed(message.delivery_id, True), lambda e: self.tell(sender, ("confirmed", n)))


class DurableSender(_Configured, DurableDelivery):
    """A DurableDelivery sender: deliver() and the confirmations are journaled by the library."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if self.common(message, sender):
            return
        if isinstance(message, Send):
            self.tell(sender, ("queued", self.deliver(message.destination, lambda i: Payload(i, message.body))))


class Endpoint(actors.Actor):
    """A destination whose entity id names its behaviour; it forwards everything it gets to its probe.

    silent-*: never confirms; nack-*: answers the first copy of each id with Nack, confirms the second;
    dlq-*: confirms each DeadLetteredDelivery; cumul-*: confirms cumulatively at every 5th delivery id;
    fresh-*: like silent-*, and reports "started" whenever an instance starts.
    """

    def __init__(self, client: str) -> None:
        self.client = client

    def pre_start(self) -> None:
        self.seen: set = set()
        if self.entity_id.startswith("fresh-"):
            self.tell(f"{self.client}/{self.entity_id}", "started")

    def receive(self, message: Any, sender: str | None) -> None:
        self.tell(f"{self.client}/{self.entity_id}", message)
        kind = self.entity_id.split("-")[0]
        if isinstance(message, DeadLetteredDelivery) and kind == "dlq":
            self.tell(sender, Confirm(message.delivery_id))
        elif isinstance(message, Payload):
            if kind == "nack":
                first = message.delivery_id not in self.seen
                self.seen.add(message.delivery_id)
                self.tell(sender, Nack(message.delivery_id) if first else Confirm(message.delivery_id))
            elif kind == "cumul" and message.delivery_id % 5 == 0:
                self.tell(sender, ConfirmUpTo(message.delivery_id))


@dataclass(frozen=True)
class Item:
    delivery_id: int


class DedupReceiver(IdempotentReceiver):
    """Applies each Item once per (sender, delivery id); "snap" snapshots, "compact" deletes all events."""

    def pre_start(self) -> None:
        self.applied: list[int] = []
        self.asker: str | None = None

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.applied = list(event.snapshot)
        elif isinstance(event, int):
            self.applied.append(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Item):
            self.persist_applied(sender, message.delivery_id, message.delivery_id, self.applied.append)
        elif message == "status":
            self.tell(sender, (len(self.applied), len(set(self.applied)), self.dedup_size()))
        elif message == "snap":
            self.asker = sender
            self.save_snapshot(tuple(self.applied))
        elif isinstance(message, SaveSnapshotSuccess):
            self.delete_messages(MAX_SEQUENCE_NR)  # from now on only the snapshot knows what was applied
            self.tell(self.asker, "saved")
        elif message == "boom":
            raise RuntimeError("boom")


# ---- test-side helpers (the `fs` fixture in conftest.py serves Endpoint at /user/ep) -------------------

_ids = itertools.count(1)


def sender(fs, cls=FeatureSender, **kwargs):
    """A sender entity on its own host (configured by kwargs); returns (path, its report probe)."""
    n = next(_ids)
    fs.spawn(cls, path=f"/user/snd{n}", entities=True, kwargs={"client": fs.prefix, **kwargs})
    return f"/user/snd{n}/s{n}", fs.probe(f"s{n}")


def endpoint(fs, kind):
    name = f"{kind}-{next(_ids)}"
    return f"/user/ep/{name}", fs.probe(name)


def unconfirmed(fs, path):
    return fs.ask(path, "unconfirmed", 10)


class TooFast(AtLeastOnceDelivery):
    """An at-least-once sender whose redelivery period the RedeliveryTick timer cannot run at (1 ms: it ticks at
    half of it, under actors.actor.MIN_INTERVAL)."""

    redeliver_interval = 0.001

    def receive_recover(self, event: object) -> None:
        pass

    def receive_command(self, message: object, sender: str | None) -> None:
        pass


class NoBurst(TooFast):
    """An at-least-once sender whose bursts may resend nothing (redelivery_burst_limit = 0): "send" delivers to its
    sender, replying the delivery id."""

    redeliver_interval = 0.2
    redelivery_burst_limit = 0

    def receive_command(self, message: object, sender: str | None) -> None:
        if message == "send" and sender is not None:
            self.tell(sender, self.deliver(sender, lambda i: Payload(i, "x")))


class GivesUpAtOnce(NoBurst):
    """An at-least-once sender giving a delivery up after no transmission (max_delivery_attempts = 0)."""

    redelivery_burst_limit = 10
    max_delivery_attempts = 0


class NoRoom(TooFast):
    """A sender whose every deliver() would exceed max_unconfirmed_messages = 0."""

    redeliver_interval = 5.0
    max_unconfirmed_messages = 0


class WarnsBelowZero(TooFast):
    """A sender with a negative warn_after_number_of_unconfirmed_attempts (no attempt count ever equals it)."""

    redeliver_interval = 5.0
    warn_after_number_of_unconfirmed_attempts = -1


class BadStrategy(TooFast):
    """A persistent actor whose internal_stash_overflow_strategy is none of Akka's."""

    redeliver_interval = 5.0
    internal_stash_overflow_strategy = "bounce"


class NoStashRoom(TooFast):
    """A persistent actor with stash_capacity = 0: every command that came while it recovered or persisted overflowed."""

    redeliver_interval = 5.0
    stash_capacity = 0


class NoRecoveryTime(TooFast):
    """A persistent actor whose recovery_event_timeout (0) failed every recovery at once, after the spawn."""

    redeliver_interval = 5.0
    recovery_event_timeout = 0

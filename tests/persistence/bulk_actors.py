"""Actors for the public bulk-delivery API tests (importable by module path, as multiproc requires)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence import AtLeastOnceDelivery, Confirm, RecoveryCompleted, SnapshotOffer


@register_type(manifest="tests.persistence.bulk.Item")
@dataclass(frozen=True)
class Item:
    """One delivery of a Batch."""

    delivery_id: int
    payload: str


@register_type(manifest="tests.persistence.bulk.Numbered")
@dataclass(frozen=True)
class Numbered:
    """The sender's event: payloads[k] goes to destinations[k] as delivery first_id + k (ids in the event)."""

    first_id: int
    destinations: tuple[str, ...]
    payloads: tuple[str, ...]


@register_type(manifest="tests.persistence.bulk.Given")
@dataclass(frozen=True)
class Given:
    """The sender's event: these deliveries were given up by should_redeliver (confirmed)."""

    delivery_ids: tuple[int, ...]


@register_type(manifest="tests.persistence.bulk.BulkSnapshot")
@dataclass(frozen=True)
class BulkSnapshot:
    """The sender's snapshot: its next id and [delivery_id, destination, payload] of each unconfirmed one."""

    next_id: int
    unconfirmed: tuple


@dataclass(frozen=True)
class Batch:
    """Deliver each payload to its destination (one bulk deliver_many); `together`: one send() call."""

    destinations: tuple[str, ...]
    payloads: tuple[str, ...]
    together: bool = True


@dataclass(frozen=True)
class Bundle:
    """What the together-send transmits: every (destination, Item) of one deliver_many call, to the hub."""

    items: tuple


class BulkSender(AtLeastOnceDelivery):
    """Numbers its deliveries itself (ids stored in its events) and delivers them with deliver_many.

    Payloads starting with "skip" are given up on their first resend by should_redeliver (and the fact is
    persisted). `hub` (a probe) receives the Bundle of a together-send; the hub test code forwards nothing:
    it checks the bundle, and redelivery (one by one, with tell) must still reach the destinations.
    """

    redeliver_interval = 0.5
    max_unconfirmed_messages = 4

    def __init__(self, hub: str) -> None:
        self.hub = hub

    def pre_start(self) -> None:
        self.next_id = 1
        self.sends = 0
        self.given_up: list[int] = []

    def _deliver(self, event: Numbered, together: bool) -> None:
        ids = list(range(event.first_id, event.first_id + len(event.payloads)))
        self.next_id = ids[-1] + 1
        items = [Item(i, p) for i, p in zip(ids, event.payloads, strict=True)]
        send = None
        if together:
            def send() -> None:
                self.sends += 1
                self.tell(self.hub, Bundle(tuple(zip(event.destinations, items, strict=True))))
        self.deliver_many(ids, list(event.destinations), items, send)

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, Numbered):
            self._deliver(event, together=False)  # during recovery: registered, resent after replay
        elif isinstance(event, Given):
            self.confirm_deliveries(event.delivery_ids)
        elif isinstance(event, SnapshotOffer):
            s: BulkSnapshot = event.snapshot
            self.next_id = s.next_id
            self.restore_unconfirmed([u[0] for u in s.unconfirmed], [u[1] for u in s.unconfirmed],
                                     [Item(u[0], u[2]) for u in s.unconfirmed])
        elif isinstance(event, RecoveryCompleted):
            pass

    def should_redeliver(self, delivery_id: int, destination: str, message: Any) -> bool:
        if not message.payload.startswith("skip"):
            return True
        self.confirm_delivery(delivery_id)
        self.given_up.append(delivery_id)
        self.persist_async(Given((delivery_id,)), lambda e: None)
        return False

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Batch):
            event = Numbered(self.next_id, message.destinations, message.payloads)
            self.next_id += len(message.payloads)
            self.persist(event, lambda e: (self._deliver(e, message.together), self.tell(sender, "delivered")))
        elif isinstance(message, Confirm):
            self.confirm_delivery(message.delivery_id)
        elif isinstance(message, tuple) and message[0] == "confirm-many":
            found = self.confirm_deliveries(message[1])
            self.tell(sender, [None if m is None else m.payload for m in found])
        elif message == "status":
            self.tell(sender, (self.number_of_unconfirmed, sorted(self.unconfirmed_ids()), self.sends,
                               tuple(self.given_up)))
        elif message == "snap":
            snapshot = self.get_delivery_snapshot()
            self.save_snapshot(BulkSnapshot(self.next_id, tuple(
                (u.delivery_id, u.destination, u.message.payload) for u in snapshot.unconfirmed_deliveries)))
        elif isinstance(message, tuple) and message[0] == "read":
            self.tell(sender, [type(e).__name__ for e in self.read_events(message[1], message[2])])
        elif message == "pending":
            self.persist_async("mark", lambda e: None)
            self.tell(sender, self.pending_handlers)
        elif isinstance(message, tuple) and message[0] == "try":
            try:
                self.deliver_many(message[1], message[2], [Item(i, p) for i, p in zip(message[1], message[3], strict=False)])
            except Exception as exc:
                self.tell(sender, f"{type(exc).__name__}: {exc}")
            else:
                self.tell(sender, "ok")
        elif message == "boom":
            raise RuntimeError("boom")
        elif type(message).__name__ == "SaveSnapshotSuccess":
            self.tell(self.hub, "saved")

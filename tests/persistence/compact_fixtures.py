"""Actors for the compact delivery events tests (importable by module path, as multiproc requires)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence import (
    ConfirmDeliveries,
    DeleteMessagesSuccess,
    DurableDelivery,
    EntityTable,
    IdempotentReceiver,
    RecoveryCompleted,
    SaveSnapshotSuccess,
    SnapshotOffer,
)


@register_type(manifest="tests.persistence.Parcel")
@dataclass(frozen=True)
class Parcel:
    delivery_id: int
    payload: str


@dataclass(frozen=True)
class Unstorable:
    """Picklable (it crosses processes) but not registered with the journal: writing it is rejected."""

    delivery_id: int
    payload: str


@dataclass(frozen=True)
class Ship:
    """Deliver one message per payload to `destination` ("bad" makes an Unstorable); then persist `mark`."""

    destination: str
    payloads: tuple[str, ...]
    mark: str | None = None


def _message(delivery_id: int, payload: str) -> Any:
    return (Unstorable if payload == "bad" else Parcel)(delivery_id, payload)


class Shipper(DurableDelivery):
    """Replies ("shipped", ids) to Ship, ("marked", mark) once `mark` is durable, a status tuple to "status"."""

    redeliver_interval = 1.0

    def pre_start(self) -> None:
        self.recovered: list = []
        self.rejected: list = []

    def receive_recover(self, event: Any) -> None:
        if not isinstance(event, RecoveryCompleted):
            self.recovered.append(event)

    def on_persist_rejected(self, cause: BaseException, event: Any, sequence_nr: int) -> None:
        self.rejected.append(list(event.delivery_ids))

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Ship):
            ids = [self.deliver(message.destination, lambda i, p=p: _message(i, p)) for p in message.payloads]
            self.tell(sender, ("shipped", tuple(ids)))
            if message.mark is not None:
                self.persist_async(message.mark, lambda e: self.tell(self.sender, ("marked", e)))
        elif message == "status":
            self.tell(sender, (self.number_of_unconfirmed, self.get_delivery_snapshot().current_delivery_id,
                               tuple(self.recovered), tuple(map(tuple, self.rejected))))
        elif message == "boom":
            raise RuntimeError("boom")


class Receiver(IdempotentReceiver):
    """Applies each Parcel once ("bad" becomes an event the journal rejects); confirms in batches once durable."""

    def pre_start(self) -> None:
        self.applied: list = []
        self.rejected = 0
        self.to_confirm: dict[str, list[int]] = {}

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, str):
            self.applied.append(event)

    def on_persist_rejected(self, cause: BaseException, event: Any, sequence_nr: int) -> None:
        self.rejected += 1

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Parcel | Unstorable):
            event = Unstorable(0, "event") if message.payload == "bad" else message.payload
            if not self.persist_applied(sender, message.delivery_id, event,
                                        lambda e, i=message.delivery_id: self._applied(e, sender, i)):
                self.confirm_duplicate(sender, message.delivery_id,
                                       lambda i=message.delivery_id: self.tell(sender, ConfirmDeliveries((i,))))
        elif message == "status":
            self.tell(sender, (tuple(self.applied), self.rejected, self.dedup_size()))
        elif isinstance(message, tuple) and message[0] == "forget":
            self.forget_applied_up_to(message[1], message[2])
            self.tell(sender, (self.dedup_size(), [self.already_applied(message[1], i) for i in range(1, 8)]))
        elif message == "boom":
            raise RuntimeError("boom")

    def _applied(self, event: str, origin: str, delivery_id: int) -> None:
        self.applied.append(event)
        if origin not in self.to_confirm:
            self.to_confirm[origin] = []
            self.defer_async(None, self._confirm)  # after every handler of this write
        self.to_confirm[origin].append(delivery_id)

    def _confirm(self, _: Any) -> None:
        to_confirm, self.to_confirm = self.to_confirm, {}
        for origin, ids in to_confirm.items():
            self.tell(origin, ConfirmDeliveries(tuple(ids)))


class SnapshottingReceiver(Receiver):
    """Receiver that also answers "snap" (a snapshot of what it applied: ("snapped", sequence nr)), "delete"
    (deletes its events up to the last: ("deleted", sequence nr)) and ("applied?", origin, n): which of the ids 1..n
    it takes as applied, and its dedup_size."""

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.applied = list(event.snapshot)
        super().receive_recover(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message in ("snap", "delete"):
            self.asked = sender
            if message == "snap":
                self.save_snapshot(tuple(self.applied))
            else:
                self.delete_messages(self.last_sequence_nr)
        elif isinstance(message, SaveSnapshotSuccess):
            self.tell(self.asked, ("snapped", message.metadata.sequence_nr))
        elif isinstance(message, DeleteMessagesSuccess):
            self.tell(self.asked, ("deleted", message.to_sequence_nr))
        elif isinstance(message, tuple) and message[0] == "applied?":
            _, origin, n = message
            self.tell(sender, ([i for i in range(1, n + 1) if self.already_applied(origin, i)], self.dedup_size()))
        else:
            super().receive_command(message, sender)


class CountingShipper(Shipper):
    """Overrides confirm_delivery: batched confirmations must still go through it, once per delivery."""

    confirmed_here = 0

    def confirm_delivery(self, delivery_id: int) -> bool:
        first = super().confirm_delivery(delivery_id)
        self.confirmed_here += first
        return first

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "counted":
            self.tell(sender, self.confirmed_here)
        else:
            super().receive_command(message, sender)


@dataclass(frozen=True)
class Steps:
    """For Relay: ("apply", delivery id), ("deliver", payload) or ("mark", event), in this order, in one command."""

    steps: tuple


class Relay(DurableDelivery, IdempotentReceiver):
    """Both compact-event mixins in one actor: the journal must keep the order of its calls across both."""

    def __init__(self, destination: str) -> None:
        self.destination = destination

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Steps):
            for kind, arg in message.steps:
                if kind == "apply":
                    self.persist_applied("/user/origin", arg, f"applied-{arg}", lambda e: None)
                elif kind == "deliver":
                    self.deliver(self.destination, lambda i, p=arg: Parcel(i, p))
                else:
                    self.persist_async(arg, lambda e: None)
            self.defer_async("done", lambda e: self.tell(sender, e))


class FanOutShipper(Shipper):
    """Shipper that also takes ("round-robin", destinations, n): n Parcels, the k-th to destinations[k % len]
    (one sequence of delivery ids over all: each destination sees a share, with gaps), replying ("shipped", n)."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "round-robin":
            _, destinations, n = message
            for k in range(n):
                self.deliver(destinations[k % len(destinations)], lambda i: Parcel(i, f"p{i}"))
            self.defer_async(("shipped", n), lambda e: self.tell(sender, e))
        else:
            super().receive_command(message, sender)


class ConfirmingReceiver(IdempotentReceiver):
    """apply_and_confirm of each Parcel (from its sender), whose confirm asks the origin for its settled watermark
    every `settle_after_gaps` gaps; "status": (payloads applied, dedup_size()); closed, it drops every Parcel unseen
    (a lost message) until "open"."""

    def __init__(self, settle_after_gaps: int | None = 8, closed: bool = False) -> None:
        self.settle_after_gaps = settle_after_gaps
        self.closed = closed

    def pre_start(self) -> None:
        self.applied: list[str] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, str):
            self.applied.append(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Parcel) and sender is not None:
            if not self.closed:
                self.apply_and_confirm(sender, message.delivery_id, message.payload, self.applied.append)
        elif message == "status":
            self.tell(sender, (tuple(self.applied), self.dedup_size()))
        elif message == "open":
            self.closed = False
            self.tell(sender, "opened")


class ParcelTable(EntityTable):
    """Each entity applies a Parcel once per (sender, delivery id), its payload as the event, and confirms it with
    `confirm` (which asks the origin to settle every `settle_after_gaps` gaps); its own path answers "status" with
    (events applied, dedup_size())."""

    settle_after_gaps = 8

    def empty_state(self) -> int:
        return 0

    def command_handler(self, entity_id: str, state: int, command: Any) -> list[Any]:
        if isinstance(command, Parcel) and self.sender is not None:
            fresh = self.apply_once(self.sender, command.delivery_id)
            self.confirm(self.sender, command.delivery_id)
            return [command.payload] if fresh else []
        return []

    def event_handler(self, state: int, event: Any) -> int:
        return state + 1

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "status":
            self.tell(sender, (sum(self._states.values()), self.dedup_size()))
        else:
            super().receive_command(message, sender)

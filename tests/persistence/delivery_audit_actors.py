"""Actors for tests/persistence/test_delivery_audit.py (importable by module path, as multiproc requires)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from journal import MAX_SEQUENCE_NR
from persistence import (
    AtLeastOnceDelivery,
    AtLeastOnceDeliverySnapshot,
    DeadLetteredDelivery,
    DeleteMessagesFailure,
    DeleteMessagesSuccess,
    DurableDelivery,
    IllegalStateError,
    Recovery,
    UnconfirmedDelivery,
    UnconfirmedWarning,
)
from persistence.durable import DeliveriesKept, DeliveriesSent
from tests.persistence.beyond_actors import Payload
from tests.persistence.failing_journals import register_failing_first_write, register_rejecting_writes


def _failing_sent(payload: object) -> list[str]:
    """The first write of a DeliveriesSent holding a Payload whose body starts "fail-" fails (once per body)."""
    if type(payload) is DeliveriesSent:
        return [m.body for m in payload.messages if type(m) is Payload and m.body.startswith("fail-")]
    return []


register_failing_first_write("auditsent", _failing_sent)
# `rejectkept:///path.db`: a SQLite journal rejecting every DeliveriesKept (the delivery state a delete writes first).
register_rejecting_writes("rejectkept", lambda p: type(p) is DeliveriesKept)
# `rejectdead:///path.db`: a SQLite journal rejecting every DeliveriesSent that forwards a delivery given up.
register_rejecting_writes("rejectdead", lambda p: type(p) is DeliveriesSent
                          and any(type(m) is DeadLetteredDelivery for m in p.messages))


@dataclass(frozen=True)
class ShipAndSnap:
    """Deliver `body` to `destination`, then save a snapshot at once (the DeliveriesSent still in flight)."""

    destination: str
    body: str


class SnapshottingShipper(DurableDelivery):
    """A DurableDelivery entity that saves a snapshot while its deliveries' event is still being written."""

    journal_url = "auditsent://delivery-audit"
    snapshot_store_url = "auditsent://delivery-audit"
    redeliver_interval = 30.0  # (only the burst after recovery resends within a test)

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, ShipAndSnap):
            delivery_id = self.deliver(message.destination, lambda i: Payload(i, message.body))
            self.save_snapshot("state")
            # The client is told once the delivery is journaled (as the accounts example's Feeder does).
            self.defer_async(delivery_id, lambda i: self.tell(sender, ("shipped", i)))
        elif isinstance(message, tuple) and message[0] == "mark":
            self.persist(message[1], lambda e: self.tell(sender, ("marked", e)))
        elif message == "unconfirmed":
            self.tell(sender, ("unconfirmed", tuple(self.unconfirmed_ids())))
        elif message == "boom":
            raise RuntimeError("boom")


class HoldingSender(AtLeastOnceDelivery):
    """Never resends to a destination whose path holds "held"; burst limit 2; warns with the first resend."""

    # ("send", destination, body) delivers at once (no event: its tests need no restart); ("restore", id, destination,
    # body[, current id]) sets a delivery snapshot of that one delivery; "warned" replies the ids of the
    # UnconfirmedWarnings got; ("redeliver-now", id) replies ("redelivered", redeliver_now(id)).
    redeliver_interval = 0.2
    redelivery_burst_limit = 2
    warn_after_number_of_unconfirmed_attempts = 1

    def pre_start(self) -> None:
        self.warned: list[int] = []

    def should_redeliver(self, delivery_id: int, destination: str, message: Any) -> bool:
        return "held" not in destination

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "send":
            self.tell(sender, ("sent", self.deliver(message[1], lambda i: Payload(i, message[2]))))
        elif isinstance(message, tuple) and message[0] == "restore":
            # A delivery state restored outside recovery (e.g. one kept beside the journal, loaded on a command).
            # (a fifth element: the snapshot's current delivery id, else the delivery's)
            _, delivery_id, destination, body, *current = message
            self.set_delivery_snapshot(AtLeastOnceDeliverySnapshot(
                current[0] if current else delivery_id,
                (UnconfirmedDelivery(delivery_id, destination, Payload(delivery_id, body)),)))
            self.tell(sender, "restored")
        elif isinstance(message, tuple) and message[0] == "redeliver-now":
            self.tell(sender, ("redelivered", self.redeliver_now(message[1])))
        elif isinstance(message, UnconfirmedWarning):
            self.warned.extend(u.delivery_id for u in message.unconfirmed_deliveries)
        elif message == "warned":
            self.tell(sender, tuple(self.warned))


class PatientHoldingSender(HoldingSender):
    """HoldingSender whose tick resends nothing within a test (every resend there is a redeliver_now)."""

    redeliver_interval = 30.0


class _Shipping(DurableDelivery):
    """("ship", destination, body) delivers a Payload, replying ("shipped", id) once journaled; ("confirm", id)
    confirms, replying ("confirmed", result) once journaled; "unconfirmed": the unconfirmed ids; "boom" restarts it."""

    redeliver_interval = 30.0  # (only the burst after recovery resends within a test)

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "ship":
            i = self.deliver(message[1], lambda i: Payload(i, message[2]))
            self.defer(i, lambda e: self.tell(sender, ("shipped", e)))
        elif isinstance(message, tuple) and message[0] == "confirm":
            done = self.confirm_delivery(message[1])
            self.defer(done, lambda e: self.tell(sender, ("confirmed", e)))
        elif message == "unconfirmed":
            self.tell(sender, tuple(self.unconfirmed_ids()))
        elif message == "boom":
            raise RuntimeError("boom")
        else:
            self.other(message, sender)

    def other(self, message: Any, sender: str | None) -> None:
        """A command of a subclass."""


class DeletingShipper(_Shipping):
    """A _Shipping entity that deletes its events: ("delete", to) deletes the events up to `to` ("last":
    last_sequence_nr, "max": MAX_SEQUENCE_NR), replying ("deleted",) or ("delete failed", why);
    ("ship-and-delete", destination, body): both in one command."""

    def other(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "delete":
            self.asked = sender
            self.delete_messages(self.last_sequence_nr if message[1] == "last" else MAX_SEQUENCE_NR)
        elif isinstance(message, tuple) and message[0] == "ship-and-delete":  # (its sent event after the delete's call)
            self.asked = sender
            self.deliver(message[1], lambda i: Payload(i, message[2]))
            self.delete_messages(self.last_sequence_nr)
        elif isinstance(message, DeleteMessagesSuccess):
            self.tell(self.asked, ("deleted",))
        elif isinstance(message, DeleteMessagesFailure):
            self.tell(self.asked, ("delete failed", str(message.cause)))


class PartialShipper(_Shipping):
    """A _Shipping entity "<name>.<how>" whose persistence id is "partial-<name>" (entities of one name share their
    events) and whose recovery is `how`: "full", "none" (Recovery.none()) or "to<n>" (Recovery(to_sequence_nr=n))."""

    @property
    def persistence_id(self) -> str:  # type: ignore[override]
        return f"partial-{self.entity_id.partition('.')[0]}"

    @property
    def recovery(self) -> Recovery:  # type: ignore[override]
        how = self.entity_id.partition(".")[2]
        if how == "none":
            return Recovery.none()
        if how.startswith("to"):
            return Recovery(to_sequence_nr=int(how[2:]))
        return Recovery()


class GivingUpShipper(_Shipping):
    """A _Shipping entity giving a delivery up after its first transmission (once overdue: 1 s), forwarding it to
    /user/given-up."""

    redeliver_interval = 1.0
    max_delivery_attempts = 1
    dead_letter_path = "/user/given-up"


class NackedShipper(GivingUpShipper):
    """A GivingUpShipper whose tick gives nothing up within a test: ("nack", id) replies ("nacked", redeliver_now(id),
    settled_low()) (a nack past max_delivery_attempts gives it up there); "settled" replies settled_low()."""

    redeliver_interval = 30.0

    def other(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "nack":
            self.tell(sender, ("nacked", self.redeliver_now(message[1]), self.settled_low()))
        elif message == "settled":
            self.tell(sender, self.settled_low())


class LiveStateShipper(_Shipping):
    """A _Shipping entity that sets a delivery state outside recovery: ("set", destination) a delivery snapshot of
    delivery 7, ("restore", destination) restore_unconfirmed of it; replying "restored", or ("refused", why)."""

    def other(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] in ("set", "restore"):
            u = UnconfirmedDelivery(7, message[1], Payload(7, "restored"))
            try:
                if message[0] == "set":
                    self.set_delivery_snapshot(AtLeastOnceDeliverySnapshot(7, (u,)))
                else:
                    self.restore_unconfirmed([u.delivery_id], [u.destination], [u.message])
            except IllegalStateError as exc:
                self.tell(sender, ("refused", str(exc)))
            else:
                self.tell(sender, "restored")


class OrderSender(AtLeastOnceDelivery):
    """Resends every 0.2 s: ("many", destination, ids) deliver_many's a Payload per id, in that order; ("restore",
    destination, ids) restore_unconfirmed's them; "unconfirmed": the unconfirmed ids (each replies once done)."""

    redeliver_interval = 0.2

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] in ("many", "restore"):
            _, destination, ids = message
            call = self.deliver_many if message[0] == "many" else self.restore_unconfirmed
            call(ids, [destination] * len(ids), [Payload(i, "m") for i in ids])
            self.tell(sender, "done")
        elif message == "unconfirmed":
            self.tell(sender, tuple(self.unconfirmed_ids()))


class LimitedSender(AtLeastOnceDelivery):
    """Gives a delivery up after 1 transmission (its tick resends nothing within a test: every resend there is a
    redeliver_now): ("dlq", path) sets dead_letter_path; ("send", destination, body) delivers, replying ("sent", id);
    ("redeliver-now", id) replies ("redelivered", redeliver_now(id)); "unconfirmed": the unconfirmed ids."""

    redeliver_interval = 30.0
    max_delivery_attempts = 1

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "dlq":
            self.dead_letter_path = message[1]
            self.tell(sender, "set")
        elif isinstance(message, tuple) and message[0] == "send":
            self.tell(sender, ("sent", self.deliver(message[1], lambda i: Payload(i, message[2]))))
        elif isinstance(message, tuple) and message[0] == "redeliver-now":
            self.tell(sender, ("redelivered", self.redeliver_now(message[1])))
        elif message == "unconfirmed":
            self.tell(sender, tuple(self.unconfirmed_ids()))


class TaggingShipper(_Shipping):
    """A _Shipping entity whose tags_for reads its own events only: ("note", "tag:text") persists the string,
    tagged "tag", replying ("noted", text)."""

    def tags_for(self, event: Any) -> list[str]:
        return [event.split(":")[0]]

    def other(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "note":
            self.persist(message[1], lambda e: self.tell(sender, ("noted", e)))

"""Actors for tests/persistence/test_dedup_delete.py (importable by module path, as multiproc requires)."""

from __future__ import annotations

from typing import Any

from journal import MAX_SEQUENCE_NR
from persistence import (
    DeleteMessagesFailure,
    DeleteMessagesSuccess,
    DurableDelivery,
    IdempotentReceiver,
    Recovery,
    SaveSnapshotSuccess,
    SnapshotOffer,
)
from persistence.idempotent import DedupKept
from tests.persistence.beyond_actors import Payload
from tests.persistence.failing_journals import register_rejecting_writes
from tests.persistence.table_actors import Accounts

# `rejectdedup:///path.db`: a SQLite journal rejecting every DedupKept (the dedup state a delete writes first).
register_rejecting_writes("rejectdedup", lambda p: type(p) is DedupKept)


def _to(self: Any, which: str) -> int:
    return self.last_sequence_nr if which == "last" else MAX_SEQUENCE_NR


class DeletingReceiver(IdempotentReceiver):
    """An IdempotentReceiver entity that deletes its events: ("apply", origin, id, value) applies `value` once,
    replying ("applied", id) once durable or ("duplicate", id); ("delete", "last" | "max") deletes its events,
    replying ("deleted",) or ("delete failed", why); ("apply-and-delete", origin, id, value): both in one command
    (the application still in flight at the delete); "values": what its state holds; "boom" restarts it. Replaying
    the value "purge", it deletes its events up to it (from receive_recover)."""

    def pre_start(self) -> None:
        self.values: list[object] = []
        self.asked: str | None = None
        self.deletes = 0

    def receive_recover(self, event: Any) -> None:
        if event == "purge":  # (a delete from receive_recover: up to this event)
            self.delete_messages(self.last_sequence_nr)
        if isinstance(event, str):
            self.values.append(event)
        elif isinstance(event, SnapshotOffer):
            self.values = list(event.snapshot)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] in ("apply", "apply-and-delete"):
            _, origin, delivery_id, value = message
            if not self.persist_applied(origin, delivery_id, value,
                                        lambda e: (self.values.append(e), self.tell(sender, ("applied", delivery_id)))):
                self.tell(sender, ("duplicate", delivery_id))
            if message[0] == "apply-and-delete":
                self.asked = sender
                self.delete_messages(self.last_sequence_nr)
        elif isinstance(message, tuple) and message[0] == "delete":
            self.asked = sender
            self.delete_messages(_to(self, message[1]))
        elif isinstance(message, DeleteMessagesSuccess):
            self.deletes += 1
            if self.asked is not None:
                self.tell(self.asked, ("deleted",))
        elif isinstance(message, DeleteMessagesFailure):
            if self.asked is not None:
                self.tell(self.asked, ("delete failed", str(message.cause)))
        elif message == "deletes":  # how many deletes succeeded in this incarnation
            self.tell(sender, self.deletes)
        elif message == "snap":  # replies ("saved", its sequence nr)
            self.asked = sender
            self.save_snapshot(tuple(self.values))
        elif isinstance(message, SaveSnapshotSuccess):
            self.tell(self.asked, ("saved", message.metadata.sequence_nr))
        elif message == "values":
            self.tell(sender, tuple(self.values))
        elif message == "boom":
            raise RuntimeError("boom")


class NoneRecoveringReceiver(DeletingReceiver):
    """A DeletingReceiver that recovers nothing of its events (Recovery.none())."""

    recovery = Recovery.none()


class FirstEventRecoveringReceiver(DeletingReceiver):
    """A DeletingReceiver that recovers its first event only (Recovery(to_sequence_nr=1))."""

    recovery = Recovery(to_sequence_nr=1)


class DeletingAccounts(Accounts):
    """Accounts (no snapshots) whose own path takes ("delete", "last" | "max"), replying ("deleted",) or
    ("delete failed", why), and "boom", which restarts the table."""

    snapshot_every = None

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "delete":
            self.asked = sender
            self.delete_messages(_to(self, message[1]))
        elif isinstance(message, DeleteMessagesSuccess):
            self.tell(self.asked, ("deleted",))
        elif isinstance(message, DeleteMessagesFailure):
            self.tell(self.asked, ("delete failed", str(message.cause)))
        elif message == "boom":
            raise RuntimeError("boom")
        else:
            super().receive_command(message, sender)


class NoneRecoveringAccounts(DeletingAccounts):
    """DeletingAccounts that recover nothing of their events (Recovery.none())."""

    recovery = Recovery.none()


class _DeletingRelay(DeletingReceiver):
    """A DeletingReceiver that is also a DurableDelivery: ("forward", origin, id, value, destination) applies `value`
    once and forwards it to `destination` (apply_and_forward), replying ("forwarded", id) or ("duplicate", id);
    "unconfirmed": its unconfirmed forward ids."""

    redeliver_interval = 30.0  # (only the burst after recovery resends within a test)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "forward":
            _, origin, delivery_id, value, destination = message
            if self.apply_and_forward(origin, delivery_id, value, destination, lambda i: Payload(i, value),  # type: ignore[attr-defined]
                                      lambda e: (self.values.append(e), self.tell(sender, ("forwarded", delivery_id)))):
                return
            self.tell(sender, ("duplicate", delivery_id))
        elif message == "unconfirmed":
            self.tell(sender, tuple(self.unconfirmed_ids()))  # type: ignore[attr-defined]
        else:
            super().receive_command(message, sender)


class DeletingRelay(_DeletingRelay, DurableDelivery):
    """_DeletingRelay, IdempotentReceiver's hooks first."""


class ReversedDeletingRelay(_DeletingRelay, DurableDelivery, IdempotentReceiver):  # type: ignore[misc]
    """_DeletingRelay, DurableDelivery's hooks first."""


class TaggingReceiver(DeletingReceiver):
    """A DeletingReceiver whose tags_for reads its own events (str) only, as a user's does."""

    def tags_for(self, event: Any) -> tuple[str, ...]:
        return (event.split("-")[0],)


class TaggingAccounts(DeletingAccounts):
    """DeletingAccounts whose tags_for reads its own events (Deposited) only."""

    def tags_for(self, event: Any) -> tuple[str, ...]:
        return (f"amount-{event.amount}",)

"""Actors for the compact-event audit tests (importable by module path, as multiproc requires)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from persistence import (
    Confirm,
    DeleteMessagesSuccess,
    DurableDelivery,
    IdempotentReceiver,
    RecoveryCompleted,
    SnapshotOffer,
)
from persistence.durable import DeliveriesSent
from tests.persistence.compact_fixtures import Parcel, Unstorable
from tests.persistence.failing_journals import register_failing_first_write
from tests.persistence.table_actors import Accounts


class RecoversApplied:
    """`applied`: the payloads applied, in order, recovered from the str events and a snapshot of the list."""

    def pre_start(self) -> None:
        self.applied: list[str] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.applied = list(event.snapshot)
        elif isinstance(event, str):
            self.applied.append(event)


class UpToShipper(DurableDelivery):
    """("deliver", dest, payload): delivers one Parcel; ("up-to-then-deliver", n, dest, payload): a cumulative
    confirm of every id <= n, then one more delivery, in one command (one group commit); "unconfirmed": the ids
    unconfirmed. Replies once what the command journaled is durable."""

    redeliver_interval = 30.0  # (no redelivery meanwhile: the test reads the unconfirmed ids, not the traffic)

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "unconfirmed":
            self.tell(sender, sorted(u.delivery_id for u in self.get_delivery_snapshot().unconfirmed_deliveries))
            return
        if message[0] == "deliver":
            _, destination, payload = message
        else:
            _, n, destination, payload = message
            self.confirm_deliveries_up_to(n)
        delivery_id = self.deliver(destination, lambda i: Parcel(i, payload))
        self.defer_async(delivery_id, lambda i: self.tell(sender, ("delivered", i)))


__all__ = ["ForwardingRelay", "ModelRelay", "SafeForwarder", "ReversedForwardingRelay", "ModelAccounts", "ModelReceiver", "ModelShipper", "RecoveryCompleted", "UpToShipper"]


class ModelReceiver(RecoversApplied, IdempotentReceiver):
    """("batch", ((origin, delivery id, payload), ...), snap_at): persist_applied of each in one turn (one
    AppliedBatch per group commit; a payload "bad..." is applied as an Unstorable event, which the journal
    rejects); "many" instead of "batch": persist_applied_many of each run of items from one origin. The handler of
    the application that makes `len(applied)` one of `snap_at` saves a snapshot (Akka's pattern: from the persist
    handler); replies ("done", fresh flags) once all of the turn's writes are durable. "applied": the payloads
    applied, in order; "delete": delete_messages(last_sequence_nr), replying ("deleted", sequence nr)."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "applied":
            self.tell(sender, tuple(self.applied))
            return
        if message == "delete":  # (everything up to the newest event, past a snapshot saved inside a batch)
            self.asked = sender
            self.delete_messages(self.last_sequence_nr)
            return
        if isinstance(message, DeleteMessagesSuccess):
            self.tell(self.asked, ("deleted", message.to_sequence_nr))
            return
        if not isinstance(message, tuple):
            return  # (SaveSnapshotSuccess)
        how, items, snap_at = message

        def applied(event: str) -> None:
            self.applied.append(event)
            if len(self.applied) in snap_at:
                self.save_snapshot(tuple(self.applied))

        def event(delivery_id: int, payload: str) -> object:
            return Unstorable(delivery_id, payload) if payload.startswith("bad") else payload

        if how == "batch":
            fresh = [self.persist_applied(origin, delivery_id, event(delivery_id, payload), applied)
                     for origin, delivery_id, payload in items]
        else:
            fresh, start = [], 0
            while start < len(items):  # (one call per run of items from one origin)
                end = start
                while end < len(items) and items[end][0] == items[start][0]:
                    end += 1
                run = items[start:end]
                fresh += self.persist_applied_many(items[start][0], [i for _, i, _ in run],
                                                   [event(i, p) for _, i, p in run], applied)
                start = end
        self.defer_async(tuple(fresh), lambda f: self.tell(sender, ("done", f)))


class ModelShipper(DurableDelivery):
    """("ops", ops, destinations): runs `ops` in one turn, each ("deliver", destination index, payload ("bad...":
    an Unstorable message, rejected by the journal)), ("confirm", id), ("confirm_many", ids), ("up_to", n),
    ("up_to_dest", n, destination index) or ("snap",); replies ("done", ids delivered) once the turn's writes are
    durable. "unconfirmed": {id: (destination, message)} and the delivery id counter."""

    redeliver_interval = 30.0  # (no redelivery meanwhile: the tests compare states, not traffic)

    def pre_start(self) -> None:
        self.state: tuple = ()

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.state = event.snapshot

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "unconfirmed":
            snap = self.get_delivery_snapshot()
            self.tell(sender, ({u.delivery_id: (u.destination, u.message) for u in snap.unconfirmed_deliveries},
                               snap.current_delivery_id))
            return
        if not isinstance(message, tuple):
            return  # (SaveSnapshotSuccess/Failure)
        _, ops, destinations = message
        delivered = []
        for op in ops:
            if op[0] == "deliver":
                payload = op[2]
                make = Unstorable if payload.startswith("bad") else Parcel
                delivered.append(self.deliver(destinations[op[1]], lambda i, m=make, p=payload: m(i, p)))
            elif op[0] == "confirm":
                self.confirm_delivery(op[1])
            elif op[0] == "confirm_many":
                self.confirm_deliveries(op[1])
            elif op[0] == "up_to":
                self.confirm_deliveries_up_to(op[1])
            elif op[0] == "up_to_dest":
                self.confirm_deliveries_up_to(op[1], destinations[op[2]])
            else:
                self.save_snapshot(self.state)
        self.defer_async(tuple(delivered), lambda d: self.tell(sender, ("done", d)))


@dataclass(frozen=True)
class NotRegistered:
    """An event the journal cannot store (its class is not registered)."""


class ModelAccounts(Accounts):
    """Accounts snapshotting every 2 commits, with ("unstorable", origin, delivery id): apply_once, then an event
    the journal cannot store (the command is dropped, its mark forgotten); "state": every balance and the applied
    marks the table holds; "restart": stops (its next message recovers it)."""

    snapshot_every = 2

    def command_handler(self, entity_id: str, state: int, command: Any) -> list[Any] | None:
        if type(command) is tuple and command[0] == "unstorable":
            self.reply(self.sender, Confirm(command[2]))
            return [NotRegistered()] if self.apply_once(command[1], command[2]) else []
        return super().command_handler(entity_id, state, command)

    def event_handler(self, state: int, event: Any) -> int:
        return state + 1000 if type(event) is NotRegistered else super().event_handler(state, event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "state":
            self.tell(sender, (dict(self.entity_states()), {o: s.state() for o, s in self._seen.items()}))
        elif message == "restart":
            self.stop()  # (the table's next message starts it again from the journal)
        else:
            super().receive_command(message, sender)


class _Forwarding:
    """The body of ForwardingRelay: both compact-event mixins in one actor.

    ("turn", applications, deliveries, destination): persist_applied of each (delivery id, payload) from the sender
    ("bad...": an Unstorable event), then deliver() of each payload ("bad...": an Unstorable message) to
    `destination`, in one turn; then a defer_async replies ("done", applied flags, the payloads applied, the ids of
    the deliveries sent and unconfirmed): it runs after the handlers of the turn's writes, once they are durable.
    ("applied", origin): the payloads applied, and which delivery ids 1..9 of `origin` it takes as applied;
    "unconfirmed": the unconfirmed delivery ids."""

    redeliver_interval = 30.0

    def pre_start(self) -> None:
        self.applied: list[str] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, str):
            self.applied.append(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        assert sender is not None
        if isinstance(message, tuple) and message[0] == "applied":
            origin = message[1]
            self.tell(sender, (tuple(self.applied), [i for i in range(1, 10) if self.already_applied(origin, i)]))
        elif message == "unconfirmed":
            self.tell(sender, sorted(u.delivery_id for u in self.get_delivery_snapshot().unconfirmed_deliveries))
        elif isinstance(message, tuple) and message[0] == "turn":
            _, applications, deliveries, destination = message
            fresh = [self.persist_applied(sender, i, Unstorable(i, p) if p.startswith("bad") else p,
                                          self.applied.append) for i, p in applications]
            for payload in deliveries:
                make = Unstorable if payload.startswith("bad") else Parcel
                self.deliver(destination, lambda i, m=make, p=payload: m(i, p))
            self.defer_async(tuple(fresh), lambda f: self.tell(sender, ("done", f, tuple(self.applied), sorted(
                u.delivery_id for u in self.get_delivery_snapshot().unconfirmed_deliveries))))


class ForwardingRelay(_Forwarding, DurableDelivery, IdempotentReceiver):  # type: ignore[misc]
    """_Forwarding, DurableDelivery's hooks first."""


class ReversedForwardingRelay(_Forwarding, IdempotentReceiver, DurableDelivery):  # type: ignore[misc]
    """_Forwarding, IdempotentReceiver's hooks first."""


class ModelRelay(RecoversApplied, DurableDelivery, IdempotentReceiver):
    """Both compact-event mixins under a reference model. ("turn", items, snap_at, direct, sink): apply_and_forward of
    each (origin, delivery id, payload) ("bad...": an Unstorable event) with ("fwd", payload) to `sink`, whose handler
    appends the payload and saves a snapshot when `len(applied)` is in `snap_at`; then deliver() of each of
    `direct` ("bad...": an Unstorable message); replies ("done", fresh flags) from a defer_async. "state": the payloads
    applied and the unconfirmed deliveries {id: message}, once what is pending is durable."""

    redeliver_interval = 30.0  # (the sink never confirms: no redelivery meanwhile)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "state":
            # (after what is pending: the deliveries of the last turn's handlers are journaled in a round of their
            # own, and a delivery whose sent event is not durable yet is not in the delivery snapshot)
            self.defer_async(None, lambda _: self.tell(sender, (tuple(self.applied), {
                u.delivery_id: u.message for u in self.get_delivery_snapshot().unconfirmed_deliveries})))
            return
        if not isinstance(message, tuple):
            return  # (SaveSnapshotSuccess)
        _, items, snap_at, direct, sink = message

        def applied(event: str) -> None:
            self.applied.append(event)
            if len(self.applied) in snap_at:
                self.save_snapshot(tuple(self.applied))

        # (a deliver() from a persist_applied handler is refused: the application and its forward go in one write)
        fresh = [self.apply_and_forward(origin, i, e, sink, lambda d, e=e: ("fwd", d, e), applied)
                 for origin, i, p in items for e in [Unstorable(i, p) if p.startswith("bad") else p]]
        for payload in direct:
            make = Unstorable if payload.startswith("bad") else Parcel
            self.deliver(sink, lambda i, m=make, p=payload: m(i, p))
        self.defer_async(tuple(fresh), lambda f: self.tell(sender, ("done", f)))


def _flaky_deliveries(payload: object) -> list[str]:
    """The Parcel payloads starting with "flaky" of a DeliveriesSent: its first write fails (once per process)."""
    if type(payload) is DeliveriesSent:
        return [m.payload for m in payload.messages if isinstance(m, Parcel) and m.payload.startswith("flaky")]
    return []


register_failing_first_write("flakyaudit", _flaky_deliveries)


class SafeForwarder(DurableDelivery, IdempotentReceiver):
    """Forwards each Parcel once to `sink` (a new delivery) and confirms it to its origin only with the forward
    durable: deliver() and then persist_applied in the same command (one group commit), confirmed from the handler;
    a duplicate is confirmed (after the writes in flight) and not forwarded again. "unconfirmed": how many forwards
    are unconfirmed."""

    journal_url = "flakyaudit://safe-forwarder"
    snapshot_store_url = "flakyaudit://safe-forwarder"
    redeliver_interval = 30.0

    def __init__(self, sink: str) -> None:
        self.sink = sink

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "unconfirmed":
            self.tell(sender, self.number_of_unconfirmed)
        elif isinstance(message, Parcel) and sender is not None:
            i, payload = message.delivery_id, message.payload
            if self.already_applied(sender, i):
                self.confirm_duplicate(sender, i, lambda: self.tell(sender, Confirm(i)))
                return
            self.deliver(self.sink, lambda d: Parcel(d, payload))
            self.persist_applied(sender, i, payload, lambda _: self.tell(sender, Confirm(i)))

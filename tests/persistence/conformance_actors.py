"""Actors of tests/persistence/test_akka_conformance.py (importable by module path, as multiproc requires).

Each reports to the probe named after its entity id (`<client>/<entity id>`), which is also the sender of the
test's commands.
"""

from __future__ import annotations

from typing import Any

from persistence import (
    AtLeastOnceDelivery,
    IdempotentReceiver,
    PersistentActor,
    RecoveryCompleted,
    ReplyToStrategy,
    SaveSnapshotSuccess,
    SnapshotOffer,
    UnconfirmedWarning,
)


class TestError(RuntimeError):
    """An expected failure thrown by a test actor (Akka's TestException)."""


class ReportsToProbe:
    """Built with the client's prefix; `probe` is the probe named after the entity id (`<client>/<entity id>`)."""

    entity_id: str

    def __init__(self, client: str) -> None:
        self.client = client

    @property
    def probe(self) -> str:
        return f"{self.client}/{self.entity_id}"


class OfferRefuser(ReportsToProbe, PersistentActor):
    """Its receive_recover throws on a SnapshotOffer (once one was saved) and on the replayed event "bad"."""

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            raise TestError("snapshot offer refused")
        if event == "bad":
            raise TestError("bad event refused")

    def on_recovery_failure(self, cause: BaseException, event: Any | None) -> None:
        self.tell(self.probe, ("recovery failure", type(cause).__name__, str(cause), event))

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message in ("ok", "bad"):
            self.persist(message, lambda e: self.tell(sender, ("persisted", e, self.last_sequence_nr)))
        elif message == "snap":
            self.save_snapshot("state")
        elif isinstance(message, SaveSnapshotSuccess):
            self.tell(self.probe, ("saved", message.metadata.sequence_nr))
        elif message == "boom":
            raise TestError("boom")


class SnapshottingSender(AtLeastOnceDelivery):
    """Akka's AtLeastOnceDeliverySpec Sender with its delivery state in snapshots.

    ("deliver", destination, body) persists ("sent", destination, body), whose handler delivers (id, body);
    ("confirm", id) persists ("confirmed", id); "snap" saves get_delivery_snapshot(); "poison" persists an event
    whose replay throws; "close" persists an event whose replay calls stop(); "boom" restarts it; "unconfirmed" replies
    the unconfirmed ids. A SnapshotOffer goes to set_delivery_snapshot; a stop is reported "stopped". On RecoveryCompleted it tells ("completed", number_of_unconfirmed) to the destination
    named in its entity id's `~` suffix (after the post-replay burst, if Akka's order holds) and to its probe.
    """

    redeliver_interval = 30.0  # (within a test only the burst after replay resends)

    def __init__(self, client: str) -> None:
        self.client = client

    @property
    def probe(self) -> str:
        return f"{self.client}/{self.entity_id.split('~')[0]}"

    @property
    def persistence_id(self) -> str:
        return self.entity_id.split("~")[0]

    def _destination(self) -> str | None:
        name = self.entity_id.partition("~")[2]
        return f"{self.client}/{name}" if name else None

    def _apply(self, event: Any) -> int | bool | None:
        if event[0] == "sent":
            return self.deliver(event[1], lambda i: (i, event[2]))
        if event[0] == "confirmed":
            return self.confirm_delivery(event[1])
        return None

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.set_delivery_snapshot(event.snapshot)
        elif isinstance(event, RecoveryCompleted):
            destination = self._destination()
            if destination is not None:
                self.tell(destination, ("completed", self.number_of_unconfirmed))
            self.tell(self.probe, ("completed", self.number_of_unconfirmed))
        elif event == "poison":
            raise TestError("poison replayed")
        elif event == "close":
            self.stop()
        else:
            self._apply(event)

    def on_recovery_failure(self, cause: BaseException, event: Any | None) -> None:
        self.tell(self.probe, ("recovery failure", str(cause), self.number_of_unconfirmed))

    def pre_restart(self, error: BaseException, message: Any) -> None:
        pass  # (not post_stop: "stopped" reports a stop only)

    def post_stop(self) -> None:
        self.tell(self.probe, "stopped")

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "deliver":
            self.persist(("sent", message[1], message[2]), lambda e: self.tell(sender, ("delivered", self._apply(e))))
        elif isinstance(message, tuple) and message[0] == "confirm":
            self.persist(("confirmed", message[1]), lambda e: self.tell(sender, ("confirmed", self._apply(e))))
        elif message == "snap":
            self.save_snapshot(self.get_delivery_snapshot())
        elif isinstance(message, SaveSnapshotSuccess):
            self.tell(self.probe, ("saved", message.metadata.sequence_nr))
        elif message == "poison":
            self.persist("poison", lambda e: self.tell(sender, "poisoned"))
        elif message == "close":
            self.persist("close", lambda e: self.tell(sender, "closed"))
        elif message == "unconfirmed":
            self.tell(sender, ("unconfirmed", tuple(self.unconfirmed_ids())))
        elif message == "boom":
            raise TestError("boom")


class Ledger(ReportsToProbe, PersistentActor):
    """State = the added values, in order; snapshots hold it. ("add", x) persists x; "snap" saves the state;
    ("delete", n) deletes the events up to n; "state" replies it; "boom" restarts it. Recovery reports
    ("completed", state) or ("recovery failure", cause type, event) to its probe, and a stop "stopped"."""

    def pre_start(self) -> None:
        self.state: list[Any] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.state = list(event.snapshot)
        elif isinstance(event, RecoveryCompleted):
            self.tell(self.probe, ("completed", tuple(self.state)))
        else:
            self.state.append(event)

    def on_recovery_failure(self, cause: BaseException, event: Any | None) -> None:
        self.tell(self.probe, ("recovery failure", type(cause).__name__, event))

    def pre_restart(self, error: BaseException, message: Any) -> None:
        pass  # (not post_stop: "stopped" reports a stop only)

    def post_stop(self) -> None:
        self.tell(self.probe, "stopped")

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "add":
            self.persist(message[1], lambda e: (self.state.append(e), self.tell(sender, ("added", self.last_sequence_nr))))
        elif isinstance(message, tuple) and message[0] == "delete":
            self.delete_messages(message[1])
        elif message == "snap":
            self.save_snapshot(tuple(self.state))
        elif message == "state":
            self.tell(sender, ("state", tuple(self.state)))
        elif message == "boom":
            raise TestError("boom")
        else:  # SaveSnapshotSuccess, DeleteMessagesSuccess, ...
            self.tell(self.probe, message)


class PerfBench(ReportsToProbe, PersistentActor):
    """JournalPerfSpec's benchmark actor: it persists each command's int (persist or persist_async, as the
    command says) and checks that handlers and replay see them in exactly increasing order; at `reply_after` it
    tells its probe the last one, or what broke the order.

    Commands: ("expect", n) (reset the counter, reply at n), ("p", i) / ("pa", i). Recovery tells the probe
    ("recovered", counter, order broken or None) on RecoveryCompleted."""

    def pre_start(self) -> None:
        self.counter = 0
        self.reply_after = 0
        self.broken: str | None = None

    def _count(self, payload: int) -> None:
        # (Akka's require: a payload out of order is remembered and reported, not raised, so the test names it)
        if payload != self.counter + 1 and self.broken is None:
            self.broken = f"got {payload} after {self.counter}"
        self.counter = payload
        if self.counter == self.reply_after:
            self.tell(self.probe, ("done", self.counter, self.broken))

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, RecoveryCompleted):
            self.tell(self.probe, ("recovered", self.counter, self.broken))
        else:
            self._count(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        kind, n = message
        if kind == "expect":
            self.reply_after = self.counter + n
            self.tell(sender, ("expecting", self.reply_after))
        elif kind == "p":
            self.persist(n, self._count)
        else:
            self.persist_async(n, self._count)


class Warner(AtLeastOnceDelivery):
    """An AtLeastOnceDelivery whose entity id `w<N>-<k>` sets warn_after_number_of_unconfirmed_attempts = N.

    ("deliver", destination, body) persists ("sent", destination, body), whose handler delivers (id, body);
    ("confirm", id) persists ("confirmed", id); "boom" restarts it. An UnconfirmedWarning is passed on as
    ("warning", ids) to the destinations it names (so that they see it in order with the resends), and
    RecoveryCompleted as ("completed", number_of_unconfirmed) to the destinations of the unconfirmed."""

    redeliver_interval = 0.2

    @property
    def warn_after_number_of_unconfirmed_attempts(self) -> int:  # type: ignore[override]
        return int(self.entity_id.split("-")[0][1:])

    def _apply(self, event: Any) -> int | bool:
        if event[0] == "sent":
            return self.deliver(event[1], lambda i: (i, event[2]))
        return self.confirm_delivery(event[1])

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, RecoveryCompleted):
            for destination in {d.destination for d in self.get_delivery_snapshot().unconfirmed_deliveries}:
                self.tell(destination, ("completed", self.number_of_unconfirmed))
        else:
            self._apply(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, UnconfirmedWarning):
            for destination in {u.destination for u in message.unconfirmed_deliveries}:
                self.tell(destination, ("warning", tuple(u.delivery_id for u in message.unconfirmed_deliveries)))
        elif isinstance(message, tuple) and message[0] in ("deliver", "confirm"):
            event = ("sent", message[1], message[2]) if message[0] == "deliver" else ("confirmed", message[1])
            self.persist(event, lambda e: self.tell(sender, (message[0], self._apply(e))))
        elif message == "boom":
            raise TestError("boom")


class Unstorable:
    """An event no journal stores (its class is not registered): every persist of it is rejected."""

    def __init__(self, n: int) -> None:
        self.n = n


class RejectionHook(ReportsToProbe, PersistentActor):
    """("pall", n) persists n Unstorable events atomically (all rejected), then "ok" with persist; its
    on_persist_rejected reports ("rejected", seq nr) and stops the actor when its entity id starts "stop"."""

    def receive_recover(self, event: Any) -> None:
        pass

    def on_persist_rejected(self, cause: BaseException, event: Any, sequence_nr: int) -> None:
        self.tell(self.probe, ("rejected", sequence_nr))
        if self.entity_id.startswith("stop"):
            self.stop()

    def pre_restart(self, error: BaseException, message: Any) -> None:
        pass  # (not post_stop: "stopped" reports a stop only)

    def post_stop(self) -> None:
        self.tell(self.probe, "stopped")

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "pall":
            self.persist_all([Unstorable(i) for i in range(message[1])], lambda e: self.tell(sender, "handler ran"))
            self.persist("ok", lambda e: self.tell(sender, ("persisted", e, self.last_sequence_nr)))


class StopsOnRecovery(ReportsToProbe, PersistentActor):
    """Its RecoveryCompleted handler calls stop(), after persisting "rc" (whose handler tells the probe "handler
    ran") when its entity id starts "persist"; a command is answered ("handled", command)."""

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, RecoveryCompleted):
            if self.entity_id.startswith("persist"):
                self.persist("rc", lambda e: self.tell(self.probe, "handler ran"))
            self.stop()

    def post_stop(self) -> None:
        self.tell(self.probe, "stopped")

    def receive_command(self, message: Any, sender: str | None) -> None:
        self.tell(sender, ("handled", message))


class Stasher(PersistentActor):
    """"p" persists (a stashing barrier) and replies "persisted"; ("c", i) replies it. Stash settings: the system's."""

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "p":
            self.persist("e", lambda e: self.tell(sender, "persisted"))
        else:
            self.tell(sender, message)


class ReplyingStasher(Stasher):
    """A Stasher whose own overflow strategy wins over the system's."""

    internal_stash_overflow_strategy = ReplyToStrategy("full")


class OneAtATime(Warner):
    """A Warner whose bursts resend one delivery at most (redelivery_burst_limit = 1)."""

    redelivery_burst_limit = 1


class StopsWhileReplaying(ReportsToProbe, PersistentActor):
    """Entity `<k>-<n>`: its receive_recover counts the replayed events and calls stop() at the k-th; post_stop
    tells the probe ("stopped", events seen, whether RecoveryCompleted came, commands handled)."""

    def pre_start(self) -> None:
        self.seen, self.completed, self.commands = 0, False, 0
        self.stop_at = int(self.entity_id.split("-")[0])

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, RecoveryCompleted):
            self.completed = True
            return
        self.seen += 1
        if self.seen == self.stop_at:
            self.stop()

    def post_stop(self) -> None:
        self.tell(self.probe, ("stopped", self.seen, self.completed, self.commands))

    def receive_command(self, message: Any, sender: str | None) -> None:
        self.commands += 1
        self.tell(self.probe, ("command", message))


class StopsWhileReplayingApplications(StopsWhileReplaying, IdempotentReceiver):
    """A StopsWhileReplaying whose events are applications journaled together (AppliedBatch): it counts each."""

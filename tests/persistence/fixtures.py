"""Persistent test actors and messages (importable by module path, as multiproc requires)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import actors
from journal import JournalError, SerializationError, register_type
from journal.memory import MemoryJournal
from journal.serialization import store_values_with
from persistence import (
    AtLeastOnceDelivery,
    AtLeastOnceDeliverySnapshot,
    PersistentActor,
    Recovery,
    RecoveryCompleted,
    SaveSnapshotSuccess,
    SnapshotOffer,
    UnconfirmedWarning,
    register_scheme,
)

# ---- a scripted persistent actor (PersistentActorSpec) --------------------------------------------


@dataclass(frozen=True)
class Ops:
    """Run `ops` in order: "reply", "p:x", "pa:x", "pall:x,y", "paall:x,y", "d:x", "da:x", "raise", "snap"."""

    name: str
    ops: tuple[str, ...]


@dataclass(frozen=True)
class SetRecovery:
    recovery: Any


class Scripted(PersistentActor):
    """State = applied events; handlers reply f"{event}-{counter}" to the command's sender."""

    def pre_start(self) -> None:
        self.state: list = []
        self.counter = 0
        self.events_seen: list = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.state = list(event.snapshot)
            self.events_seen.append("offered")
        elif isinstance(event, RecoveryCompleted):
            self.events_seen.append("completed")
        elif event == "persist-in-replay":
            self.persist("nope", self._apply)
        elif event == "bad":
            raise RuntimeError("bad event in replay")
        else:
            self.state.append(event)

    def _apply(self, event: Any) -> None:
        self.state.append(event)
        self.counter += 1
        self.tell(self.sender, f"{event}-{self.counter}")

    def _deferred(self, event: Any) -> None:
        self.tell(self.sender, event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Ops):
            for op in message.ops:
                kind, _, arg = op.partition(":")
                ev = f"{message.name}-{arg}" if arg else None
                if kind == "reply":
                    self.tell(sender, message.name)
                elif kind == "p":
                    self.persist(ev, self._apply)
                elif kind == "pa":
                    self.persist_async(ev, self._apply)
                elif kind == "pall":
                    self.persist_all([f"{message.name}-{a}" for a in arg.split(",") if a], self._apply)
                elif kind == "paall":
                    self.persist_all_async([f"{message.name}-{a}" for a in arg.split(",") if a], self._apply)
                elif kind == "d":
                    self.defer(ev, self._deferred)
                elif kind == "da":
                    self.defer_async(ev, self._deferred)
                elif kind == "raw":
                    self.persist(arg, self._apply)
                elif kind == "nested":
                    self.persist(f"{ev}-outer", lambda e: (self._apply(e), self.persist(e.replace("outer", "inner"),
                                                                                          self._apply)))
                elif kind == "raise":
                    raise RuntimeError("boom")
                elif kind == "snap":
                    self.save_snapshot(tuple(self.state))
                elif kind == "delete":
                    self.delete_messages(int(arg))
                elif kind == "delsnap":
                    self.delete_snapshot(int(arg))
        elif message == "state":
            self.tell(sender, tuple(self.state))
        elif message == "seen":
            self.tell(sender, tuple(self.events_seen))
        elif message == "seq":
            self.tell(sender, self.last_sequence_nr)
        elif message == "boom":
            raise RuntimeError("boom")
        elif isinstance(message, SaveSnapshotSuccess):
            self.tell(self._snap_to, ("saved", message.metadata.sequence_nr)) if hasattr(self, "_snap_to") else None
        else:
            # Replies (SaveSnapshotSuccess, DeleteMessagesSuccess, ...) go to whoever asked last.
            probe = getattr(self, "_last_probe", None)
            if probe:
                self.tell(probe, message)

    def receive(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Ops) or message in ("state", "seen", "seq"):
            self._last_probe = sender
            self._snap_to = sender
        super().receive(message, sender)


class ToSeq3(Scripted):
    recovery = Recovery(to_sequence_nr=3)


class NoRecovery(Scripted):
    recovery = Recovery.none()


# ---- a journal test double (EventSourcedActorFailureSpec's journal) ----------------------------------

class FailingJournal(MemoryJournal):
    """Writes containing "wrong" fail, "not serializable" are rejected; replay of "corrupt" fails."""

    def write_messages(self, messages):
        for aw in messages:
            for r in aw.payload:
                if isinstance(r.payload, str) and "wrong" in r.payload:
                    raise JournalError(f"simulated write failure: {r.payload}")
        results = []
        ok = []
        for aw in messages:
            if any(isinstance(r.payload, str) and "not serializable" in r.payload for r in aw.payload):
                results.append(SerializationError("simulated rejection"))
            else:
                results.append(None)
                ok.append(aw)
        stored = super().write_messages(ok) if ok else []
        it = iter(stored)
        return [r if r is not None else next(it) for r in results]

    def replay_messages(self, persistence_id, from_sequence_nr=1, to_sequence_nr=2**63 - 1, max=2**63 - 1):  # noqa: A002
        for r in super().replay_messages(persistence_id, from_sequence_nr, to_sequence_nr, max):
            if isinstance(r.payload, str) and "corrupt" in r.payload:
                raise JournalError(f"blahonga {from_sequence_nr} {r.sequence_nr}")
            yield r


register_scheme("failing", journal=lambda url: FailingJournal(url.partition("://")[2]))


@dataclass(frozen=True)
class Failed:
    what: str
    detail: str


WATCHERS: dict = {}  # path -> probe, per process (survives restarts of the watched actor)


class FailureReporting(Scripted):
    journal_url = "failing://failure-spec"

    def receive(self, message, sender):
        if isinstance(message, tuple) and message and message[0] == "watch":
            WATCHERS[self.path] = message[1]
            return
        super().receive(message, sender)

    @property
    def _watcher(self):
        return WATCHERS.get(self.path)

    def pre_restart(self, error, message) -> None:
        pass

    def on_persist_failure(self, cause, event, sequence_nr):
        self.tell(self.sender, Failed("persist", f"{event}-{sequence_nr}"))

    def on_persist_rejected(self, cause, event, sequence_nr):
        self.tell(self.sender, Failed("rejected", f"{event}-{sequence_nr}"))

    def post_stop(self) -> None:
        if self._watcher:
            self.tell(self._watcher, Failed("stopped", self.path))


class RecoveryFailureReporting(FailureReporting):
    """Reports recovery failures to the path named by its entity id's prefix (the probe registers first)."""

    def on_recovery_failure(self, cause, event):
        if self._watcher:
            self.tell(self._watcher, Failed("recovery", str(cause)))


@dataclass(frozen=True)
class Unregistered:
    """Picklable (it crosses processes) but not registered with the journal: a persist of it is rejected."""

    name: str


@register_type(manifest="tests.persistence.Priced")
@dataclass(frozen=True)
class Priced:
    """A registered event stored in a form of its own (store_values_with), whose packing has a user's bug: a
    currency it does not know raises KeyError, which no serializer check of the journal foresees."""

    amount: int
    currency: str


_CURRENCIES = {"EUR": 1, "USD": 2}
store_values_with(Priced, lambda p: [p.amount, _CURRENCIES[p.currency]],
                  lambda stored: [stored[0], {v: k for k, v in _CURRENCIES.items()}[stored[1]]])


def _label(event: Any) -> str:
    """How Rejecting names an event in its replies."""
    return f"{event.amount} {event.currency}" if type(event) is Priced else str(event)


class Rejecting(Scripted):
    """Scripted on the system's (real) journal, with ops whose event the journal rejects: "bad:x" persists
    Unregistered(x), "abad:x" persist_asyncs it, "allbad:x,y" persist_alls [x, Unregistered, y], "price:n CUR" persists
    Priced(n, CUR); rejections and
    failures are replied as Failed("rejected" | "persist", f"{event}@{sequence nr}"); ("state of", name) is
    answered (name, state)."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Ops) and any(op.partition(":")[0] in ("bad", "abad", "allbad", "price") for op in message.ops):
            for op in message.ops:
                kind, _, arg = op.partition(":")
                if kind == "bad":
                    self.persist(Unregistered(f"{message.name}-{arg}"), self._apply)
                elif kind == "abad":
                    self.persist_async(Unregistered(f"{message.name}-{arg}"), self._apply)
                elif kind == "price":
                    self.persist(Priced(int(arg.split()[0]), arg.split()[1]), self._apply)
                elif kind == "allbad":
                    first, last = (f"{message.name}-{a}" for a in arg.split(","))
                    self.persist_all([first, Unregistered(message.name), last], self._apply)
                else:
                    super().receive_command(Ops(message.name, (op,)), sender)
            return
        if isinstance(message, tuple) and message[0] == "state of":  # ("state of", name): (name, state)
            self.tell(sender, (message[1], tuple(self.state)))
            return
        super().receive_command(message, sender)

    def on_persist_rejected(self, cause: BaseException, event: Any, sequence_nr: int) -> None:
        self.tell(self.sender, Failed("rejected", f"{_label(event)}@{sequence_nr}"))

    def on_persist_failure(self, cause: BaseException, event: Any, sequence_nr: int) -> None:
        self.tell(self.sender, Failed("persist", f"{_label(event)}@{sequence_nr}"))


# ---- at-least-once delivery (AtLeastOnceDeliverySpec) -----------------------------------------------

@register_type(manifest="tests.persistence.AcceptedReq")
@dataclass(frozen=True)
class AcceptedReq:
    payload: str
    destination: str


@register_type(manifest="tests.persistence.ReqDone")
@dataclass(frozen=True)
class ReqDone:
    delivery_id: int


@register_type(manifest="tests.persistence.Snap")
@dataclass(frozen=True)
class Snap:
    delivery: AtLeastOnceDeliverySnapshot
    cfg: Any = None


@dataclass(frozen=True)
class Req:
    payload: str


@register_type(manifest="tests.persistence.Action")
@dataclass(frozen=True)
class Action:
    delivery_id: int
    payload: str


@dataclass(frozen=True)
class ActionAck:
    delivery_id: int


@dataclass(frozen=True)
class SenderConfig:
    """Per-test configuration sent to a Sender before use (timings, destinations, probe)."""

    destinations: tuple[tuple[str, str], ...]
    probe: str
    interval: float = 1.0
    warn_after: int = 5
    burst: int = 1000
    use_async: bool = False


class Sender(AtLeastOnceDelivery):
    """The AtLeastOnceDeliverySpec Sender; its configuration is an event so that it survives restarts."""

    def pre_start(self) -> None:
        self.cfg: SenderConfig | None = None
        self.snap_asker = None

    def _configure(self, cfg: SenderConfig) -> None:
        self.cfg = cfg
        self.cfg_event = {"cfg": [list(map(list, cfg.destinations)), cfg.probe, cfg.interval, cfg.warn_after,
                                  cfg.burst, cfg.use_async]}
        self.redeliver_interval = cfg.interval
        self.warn_after_number_of_unconfirmed_attempts = cfg.warn_after
        self.redelivery_burst_limit = cfg.burst

    def receive_recover(self, event):
        if isinstance(event, SnapshotOffer) and isinstance(event.snapshot, Snap):
            self.receive_recover(event.snapshot.cfg)
            self.set_delivery_snapshot(event.snapshot.delivery)
        elif isinstance(event, dict) and "cfg" in event:
            self._configure(SenderConfig(tuple(tuple(x) for x in event["cfg"][0]), *event["cfg"][1:]))
        else:
            self._apply(event)

    def _apply(self, event):
        if isinstance(event, AcceptedReq):
            self.deliver(event.destination, lambda i: Action(i, event.payload))
        elif isinstance(event, ReqDone):
            self.confirm_delivery(event.delivery_id)

    def receive_command(self, message, sender):
        persist = self.persist_async if (self.cfg and self.cfg.use_async) else self.persist
        if isinstance(message, SenderConfig):
            c = message
            self.persist({"cfg": [list(map(list, c.destinations)), c.probe, c.interval, c.warn_after, c.burst,
                                  c.use_async]}, lambda e: (self._configure(c), self.tell(sender, "configured")))
        elif isinstance(message, Req):
            if not message.payload:
                self.tell(sender, "InvalidReq")
                return
            dest = dict(self.cfg.destinations)[message.payload[0].upper()]
            persist(AcceptedReq(message.payload, dest), lambda e: (self._apply(e), self.tell(sender, "ReqAck")))
        elif isinstance(message, ActionAck):
            if self.confirm_delivery(message.delivery_id):
                persist(ReqDone(message.delivery_id), self._apply)
        elif message == "boom":
            raise RuntimeError("boom")
        elif message == "snap":
            self.snap_asker = sender
            self.save_snapshot(Snap(self.get_delivery_snapshot(), self.cfg_event))
        elif isinstance(message, SaveSnapshotSuccess):
            self.tell(self.snap_asker, "saved")
        elif isinstance(message, UnconfirmedWarning):
            self.tell(self.cfg.probe, message)
        elif message == "wildcard":
            try:
                self.deliver("/user/*", lambda i: Action(i, "x"))
            except ValueError as exc:
                self.tell(sender, ("failure", str(exc), self._delivery_seq))


class Destination(actors.Actor):
    """Forwards each new Action id to its probe (configured by ("probe", path)) and always acks."""

    def pre_start(self) -> None:
        self.seen: set = set()
        self.probe = None

    def receive(self, message, sender):
        # Not persistent state: a plain actor would do; kept simple and in-memory like Akka's spec.
        if isinstance(message, tuple) and message[0] == "probe":
            self.probe = message[1]
            self.tell(sender, "ok")
        elif isinstance(message, Action):
            if message.delivery_id not in self.seen:
                self.seen.add(message.delivery_id)
                self.tell(self.probe, message)
            self.tell(sender, ActionAck(message.delivery_id))


class Unreliable(Destination):
    """Counts messages and drops every drop_mod-th; forwards the rest to `target` keeping the sender."""

    def receive(self, message, sender):
        if isinstance(message, tuple) and message[0] == "config":
            self.drop_mod, self.target, self.count = message[1], message[2], 0
            self.tell(sender, "ok")
            return
        self.count += 1
        if self.count % self.drop_mod:
            self.tell(self.target, message, sender=sender)


# ---- durable delivery into an idempotent receiver (the SIGKILL drill) --------------------------------

from persistence import DurableDelivery, IdempotentReceiver  # noqa: E402


@register_type(manifest="tests.persistence.Item")
@dataclass(frozen=True)
class Item:
    delivery_id: int
    n: int


@register_type(manifest="tests.persistence.Produced")
@dataclass(frozen=True)
class Produced:
    upto: int


@dataclass(frozen=True)
class Produce:
    """Produce items next..upto (idempotent: the producer remembers how far it got)."""

    upto: int
    destination: str


class Producer(DurableDelivery):
    redeliver_interval = 0.5
    chunk = 500

    def pre_start(self) -> None:
        self.next = 1

    def receive_recover(self, event):
        if isinstance(event, Produced):
            self.next = event.upto + 1

    def receive_command(self, message, sender):
        if isinstance(message, Produce):
            end = min(message.upto, self.next + self.chunk - 1)
            for n in range(self.next, end + 1):
                self.deliver(message.destination, lambda i, n=n: Item(i, n))
            if end >= self.next:
                self.next = end + 1
                self.persist_async(Produced(end), lambda e: None)
            if end < message.upto:
                self.tell(self.path, message)
        elif message == "status":
            self.tell(sender, (self.next - 1, self.number_of_unconfirmed))


class PatientProducer(Producer):
    """Redelivers only after a minute: a test finishing sooner saw the resend on the destination's death."""

    redeliver_interval = 60.0


class Consumer(IdempotentReceiver):
    def pre_start(self) -> None:
        self.applied: set = set()
        self.duplicates_applied = 0

    def _apply(self, n):
        if n in self.applied:
            self.duplicates_applied += 1
        self.applied.add(n)

    def receive_recover(self, event):
        if isinstance(event, int):
            self._apply(event)

    def receive_command(self, message, sender):
        if isinstance(message, Item):
            self.apply_and_confirm(sender, message.delivery_id, message.n, self._apply)
        elif message == "status":
            self.tell(sender, (len(self.applied), self.duplicates_applied, self.dedup_size()))

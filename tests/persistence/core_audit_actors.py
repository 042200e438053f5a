"""Persistent actors for the audit of persist ordering, restarts and stops (tests/persistence/test_core_audit.py)."""

from __future__ import annotations

from typing import Any

from journal import MAX_SEQUENCE_NR
from persistence import IdempotentReceiver, PersistentActor, RecoveryCompleted
from tests.persistence.event_log import EventLog


class Flaky(EventLog, PersistentActor):
    """("persist-then-fail", e): persist e, whose handler raises; "boom": raises; "state": its events;
    anything else is persisted and its handler tells the sender ("handled", e)."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "state":
            self.tell(sender, tuple(self.state))
        elif message == "boom":
            raise RuntimeError("boom")
        elif isinstance(message, tuple) and message[0] == "persist-then-fail":
            self.persist(message[1], self._fail)
        else:
            self.persist(message, lambda e: self._handled(e, sender))

    def _fail(self, event: Any) -> None:
        raise RuntimeError(f"handler of {event} failed")


class BadTags(EventLog, IdempotentReceiver):
    """("apply", origin, id, e): persist_applied e, its handler tells the sender ("applied", e); tags_for fails on
    "bad"; "state": its events; "journal": its stored events and pending handlers; "stop": stops; anything else is persisted asynchronously and answered ("handled", e)."""

    def tags_for(self, event: Any) -> tuple[str, ...]:
        if event == "bad":
            raise ValueError("no tags for bad")
        return ()

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "state":
            self.tell(sender, tuple(self.state))
        elif message == "stop":
            self.stop()
        elif message == "journal":
            self.tell(sender, (tuple(self.read_events(1, MAX_SEQUENCE_NR)), self.pending_handlers))
        elif isinstance(message, tuple) and message[0] == "apply":
            _, origin, delivery_id, event = message
            self.persist_applied(origin, delivery_id, event, lambda e: self._handled(e, sender, "applied"))
        else:
            self.persist_async(message, lambda e: self._handled(e, sender, "handled"))


class SharedId(EventLog, PersistentActor):
    """Entities "<x>-<n>" share the persistence id "shared-<n>" (two writers of one id in one host): "state": its
    events; "journal": its stored events; anything else is persisted and answered ("handled", e)."""

    @property
    def persistence_id(self) -> str:
        return "shared-" + self.path.rsplit("-", 1)[1]

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "state":
            self.tell(sender, tuple(self.state))
        elif message == "journal":
            self.tell(sender, tuple(self.read_events(1, MAX_SEQUENCE_NR)))
        else:
            self.persist(message, lambda e: self._handled(e, sender))


class RcFails(EventLog, PersistentActor):
    """After a restart ("boom" raises), its RecoveryCompleted handler persists "rc" and then raises, unless "rc" was
    replayed; the handler of "rc" tells the client's probe named after the entity ("rc handled", e). "state": its
    events."""

    restarted = False

    def __init__(self, client: str) -> None:
        self.client = client

    def post_restart(self, error: BaseException) -> None:
        self.restarted = True
        super().post_restart(error)

    def receive_recover(self, event: Any) -> None:
        super().receive_recover(event)
        if isinstance(event, RecoveryCompleted) and self.restarted and "rc" not in self.state:
            self.persist("rc", self._rc)
            raise RuntimeError("RecoveryCompleted handler failed after persisting rc")

    def _rc(self, event: Any) -> None:
        self.state.append(event)
        self.tell(f"{self.client}/{self.entity_id}", ("rc handled", event))

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "state":
            self.tell(sender, tuple(self.state))
        elif message == "boom":
            raise RuntimeError("boom")


class StopApplying(EventLog, IdempotentReceiver):
    """("apply", origin, id, e): persist_applied e, its handler tells the sender ("applied", e) and stops the actor if
    e starts with "stop"; "state": its events."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "state":
            self.tell(sender, tuple(self.state))
        elif isinstance(message, tuple) and message[0] == "apply":
            _, origin, delivery_id, event = message
            self.persist_applied(origin, delivery_id, event, self._applied)

    def _applied(self, event: Any) -> None:
        self._handled(event, self.sender, "applied")
        if event.startswith("stop"):
            self.stop()

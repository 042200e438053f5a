"""Actors of tests/persistence/test_delivery_entities.py: AtLeastOnceDelivery entities and their destinations."""

from __future__ import annotations

from typing import Any

import actors
from persistence import AtLeastOnceDelivery, UnconfirmedWarning


class Sending(AtLeastOnceDelivery):
    """("send", destination) persists the intent and delivers ("msg", its id, delivery id) there until confirmed
    by ("confirm", delivery id); replies "persisted"."""

    redeliver_interval = 0.3

    def _deliver(self, destination: str) -> None:
        self.deliver(destination, lambda delivery_id: ("msg", self.entity_id, delivery_id))

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, tuple) and event[0] == "sent":
            self._deliver(event[1])

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message[0] == "send":
            self.persist(("sent", message[1]), lambda e: (self._deliver(e[1]), self.tell(sender, "persisted")))
        elif message[0] == "confirm":
            self.confirm_delivery(message[1])


class Reporting(actors.Actor):
    """Tells `probe` (entity id, delivery id) of every ("msg", ...) it gets; confirms it when `confirm`."""

    def __init__(self, probe: str, confirm: bool) -> None:
        self.probe = probe
        self.confirm = confirm

    def receive(self, message: Any, sender: str | None) -> None:
        _, entity_id, delivery_id = message
        self.tell(self.probe, (entity_id, delivery_id))
        if self.confirm and sender is not None:
            self.tell(sender, ("confirm", delivery_id))


class FailingHook(Sending):
    """Sending whose should_redeliver raises (a user hook that fails)."""

    redeliver_interval = 30.0  # (no timer resend within a test: only a lost route resends)

    def should_redeliver(self, delivery_id: int, destination: str, message: object) -> bool:
        raise ValueError("should_redeliver blew up")


class Delivers(AtLeastOnceDelivery):
    """deliver(destination, message) as told: ("deliver", destination, message) replies the delivery id, or the
    error's type and text (message "unpicklable": one holding a lock); "unconfirmed" replies the unconfirmed ids
    and whether an UnconfirmedWarning came."""

    redeliver_interval = 0.2
    warn_after_number_of_unconfirmed_attempts = 2

    warned = False

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, UnconfirmedWarning):
            self.warned = True
            return
        if message == "unconfirmed":
            self.tell(sender, (sorted(self.unconfirmed_ids()), self.warned))
            return
        _, destination, body = message
        if body == "unpicklable":
            body = ("body", Unpicklable())
        try:
            self.tell(sender, self.deliver(destination, lambda _: body))
        except Exception as e:
            self.tell(sender, (type(e).__name__, str(e)))


class Unpicklable:
    """An object that cannot be pickled (a lock inside)."""

    def __init__(self) -> None:
        import threading

        self.lock = threading.Lock()

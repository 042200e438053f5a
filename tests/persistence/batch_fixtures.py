"""Persistent entities that opt into receive_batch (importable by module path, as multiproc requires)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from persistence import IdempotentReceiver, PersistentActor
from tests.persistence.compact_fixtures import Parcel


class StashingBatched(PersistentActor):
    """"p:x" persists x (stashing: later commands wait) and tells ("persisted", x); anything else is told
    back as ("cmd", message). Opts into receive_batch with the default handling."""

    def __init__(self, probe: str) -> None:
        self.probe = probe

    def receive_batch(self, messages: Iterator[tuple[Any, str | None]]) -> None:
        super().receive_batch(messages)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, str) and message.startswith("p:"):
            self.persist(message[2:], lambda e: self.tell(self.probe, ("persisted", e)))
        else:
            self.tell(self.probe, ("cmd", message))


class ManyReceiver(IdempotentReceiver):
    """Applies the Parcels of one batch with one persist_applied_many; "status" answers (applied, flags)."""

    def pre_start(self) -> None:
        self.applied: list = []
        self.flags: list = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, str):
            self.applied.append(event)

    def receive_batch(self, messages: Iterator[tuple[Any, str | None]]) -> None:
        parcels, origin = [], None
        for message, sender in messages:
            if type(message) is Parcel and (origin is None or origin == sender):
                parcels.append(message)
                origin = sender
                continue
            self._apply(parcels, origin)
            parcels, origin = [], None
            self.receive(message, sender)
        self._apply(parcels, origin)

    def _apply(self, parcels: list, origin: Any) -> None:
        if parcels:
            self.flags.append(self.persist_applied_many(origin, [p.delivery_id for p in parcels],
                                                        [p.payload for p in parcels], self.applied.append))

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "status":
            self.tell(sender, (tuple(self.applied), tuple(map(tuple, self.flags))))

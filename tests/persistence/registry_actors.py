"""A persistent actor whose host process learns the relay:// scheme by importing this module."""

from __future__ import annotations

from typing import Any

import tests.journal.registry_plugin  # noqa: F401 - registers relay:// in every process that runs Counter
from persistence import PersistentActor, RecoveryCompleted, SnapshotOffer


class Counter(PersistentActor):
    """Persists one event per "add" and replies the total."""

    def pre_start(self) -> None:
        self.total = 0

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.total = event.snapshot
        elif not isinstance(event, RecoveryCompleted):
            self.total += event

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "add":
            self.persist(1, lambda event: self._added(event, sender))
        elif message == "total":
            self.tell(sender, self.total)

    def _added(self, event: int, sender: str | None) -> None:
        self.total += event
        self.tell(sender, self.total)

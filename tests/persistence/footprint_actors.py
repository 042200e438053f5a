"""A persistent actor that reports the storage it holds for its stash and timers (tests/persistence/test_footprint.py)."""

from __future__ import annotations

from typing import Any

from persistence import PersistentActor


class Lean(PersistentActor):
    """A string command is persisted (its handler notes how many commands waited in the stash meanwhile);
    "timer" starts a 10 ms timer whose "tick" is counted; "storage" replies (the type of the stash's storage,
    the type of the timers' storage, the most commands seen stashed, events persisted, ticks)."""

    def pre_start(self) -> None:
        self.most_stashed = 0
        self.ticks = 0

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "storage":
            self.tell(sender, (type(self._stash).__name__, type(self._timers).__name__, self.most_stashed,
                               self.last_sequence_nr, self.ticks))
        elif message == "timer":
            self.schedule_once(0.01, "tick")
        elif message == "tick":
            self.ticks += 1
        else:
            self.persist(message, self._persisted)

    def _persisted(self, event: Any) -> None:
        self.most_stashed = max(self.most_stashed, len(self._stash))

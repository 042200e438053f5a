"""A mixin for test persistent actors that keep their str events in `state` and report each handled one."""

from __future__ import annotations

from typing import Any


class EventLog:
    """Put before the actor class: `state` holds the str events recovered and handled; `_handled` also tells the
    command's sender (what, event)."""

    state: list[Any]

    def pre_start(self) -> None:
        self.state = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, str):  # (not RecoveryCompleted)
            self.state.append(event)

    def _handled(self, event: Any, sender: str | None, what: str = "handled") -> None:
        self.state.append(event)
        self.tell(sender, (what, event))  # type: ignore[attr-defined]  # (the actor's)

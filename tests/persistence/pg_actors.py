"""A persistent counter for the PostgreSQL failure tests (importable by module path, as multiproc requires)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from persistence import PersistentActor


@dataclass(frozen=True)
class Add:
    """Persist `n`; the reply ("ack", n) means it is durable."""

    n: int


class Counter(PersistentActor):
    """Persists every Add and acknowledges it once written; "values" replies with what it recovered and applied."""

    def pre_start(self) -> None:
        self.values: list[int] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, int):
            self.values.append(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Add):
            self.persist(message.n, self._applied)
        elif message == "values":
            self.tell(sender, list(self.values))

    def _applied(self, n: int) -> None:
        self.values.append(n)
        self.tell(self.sender, ("ack", n))

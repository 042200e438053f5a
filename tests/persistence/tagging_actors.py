"""Actors for tests/persistence/test_tags.py: events tagged at persist time with tags_for."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence import IdempotentReceiver, PersistentActor


@register_type
@dataclass(frozen=True)
class Moved:
    """An event; tagged "big" when amount >= 100, and always "moves"."""

    amount: int


class Mover(PersistentActor):
    """Persists Moved(amount) for each int command (persist_all for a list); answers "done" to each."""

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, list):
            self.persist_all([Moved(a) for a in message], lambda e: None)
            self.defer(None, lambda _: self.tell(sender, "done"))
        elif isinstance(message, int):
            self.persist(Moved(message), lambda e: self.tell(sender, "done"))

    def tags_for(self, event: Any) -> Iterable[str]:
        if type(event) is Moved:
            return ("moves", "big") if event.amount >= 100 else ("moves",)
        return ()


class AppliedMover(IdempotentReceiver):
    """Applies (delivery id, amount) once with persist_applied; tags are asked of the Moved, not the batch."""

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple):
            delivery_id, amount = message
            self.persist_applied("/origin", delivery_id, Moved(amount), lambda e: None)
        elif message == "sync":
            self.defer_async(None, lambda _: self.tell(sender, "done"))

    def tags_for(self, event: Any) -> Iterable[str]:
        return ("big",) if type(event) is Moved and event.amount >= 100 else ()


class BadTags(PersistentActor):
    """tags_for returns a bare str: persist must refuse it with a TypeError naming tags_for."""

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        try:
            self.persist(Moved(1), lambda e: None)
        except TypeError as e:
            self.tell(sender, str(e))

    def tags_for(self, event: Any) -> Iterable[str]:
        return "moves"

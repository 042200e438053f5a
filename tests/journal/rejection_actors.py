"""Actors for tests/journal/test_rejected_writes.py: entities tagging events with the tag a command names."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence import PersistentActor


@register_type(manifest="tests.journal.Noted")
@dataclass(frozen=True)
class Noted:
    """An event tagged with `tag` (whatever the command gave: a tag some journals cannot store, too)."""

    text: str
    tag: str


class Notes(PersistentActor):
    """Persists Noted(text, tag) for a command (text, tag), answering "stored <text>"; "state" answers
    (texts applied, reasons of the rejected persists)."""

    def pre_start(self) -> None:
        self.notes: list[str] = []
        self.rejected: list[str] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, Noted):
            self.notes.append(event.text)

    def tags_for(self, event: Any) -> Iterable[str]:
        return (event.tag,) if isinstance(event, Noted) else ()

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "state":
            self.tell(sender, (self.notes, self.rejected))
        else:
            text, tag = message
            self.persist(Noted(text, tag), lambda e: self._stored(e, sender))

    def _stored(self, event: Noted, sender: str | None) -> None:
        self.notes.append(event.text)
        self.tell(sender, f"stored {event.text}")

    def on_persist_rejected(self, cause: BaseException, event: Any, sequence_nr: int) -> None:
        self.rejected.append(f"{type(cause).__name__}: {cause}")

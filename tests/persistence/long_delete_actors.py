"""Entities for the long-delete tests: one deletes many large events while its neighbour on the host answers pings."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from journal import MAX_SEQUENCE_NR
from persistence import DeleteMessagesFailure, DeleteMessagesSuccess, PersistentActor

EVENT_BYTES = 32 * 1024


@dataclass(frozen=True)
class Fill:
    """Persist `count` events of EVENT_BYTES random bytes each (incompressible, as PostgreSQL stores them) (in persist_all calls of 100), then reply ("filled", count)."""

    count: int


@dataclass(frozen=True)
class Delete:
    """delete_messages(to) (MAX_SEQUENCE_NR by default), then persist `then` events at once, while it runs; the
    replies: ("deleted", to) or ("delete failed", to, cause), and ("persisted", seq) per later event."""

    to: int = MAX_SEQUENCE_NR
    then: int = 0


@dataclass(frozen=True)
class Ping:
    """Answered with ("pong", n, the first sequence nr of `watched` left in the journal, or None)."""

    n: int
    watched: str


class Deleter(PersistentActor):
    """Fills its journal with large events and deletes them on request; answers Ping as a neighbour would; fails
    on "boom"."""

    _asker: str | None = None  # (who asked for the last Fill or Delete: a restarted instance knows no one)

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Fill):
            self._asker = sender
            for start in range(0, message.count, 100):
                size = min(100, message.count - start)
                self.persist_all([os.urandom(EVENT_BYTES) for _ in range(size)], lambda _: None)
            self.defer(None, lambda _: self.tell(sender, ("filled", self.last_sequence_nr)))
        elif isinstance(message, Delete):
            self._asker = sender
            self.delete_messages(message.to)
            for i in range(message.then):
                self.persist(f"after-{i}", lambda _: self.tell(sender, ("persisted", self.last_sequence_nr)))
        elif isinstance(message, DeleteMessagesSuccess):
            self.tell(self._asker, ("deleted", message.to_sequence_nr))
        elif isinstance(message, DeleteMessagesFailure):
            self.tell(self._asker, ("delete failed", message.to_sequence_nr, repr(message.cause)))
        elif isinstance(message, Ping):
            first = next(iter(self._journal.replay_messages(message.watched, 1, MAX_SEQUENCE_NR, 1)), None)
            self.tell(sender, ("pong", message.n, None if first is None else first.sequence_nr))
        elif message == "boom":
            raise RuntimeError("boom")
        elif message == "events":
            self.tell(sender, [r.sequence_nr for r in self._journal.replay_messages(self.persistence_id, 1,
                                                                                    MAX_SEQUENCE_NR)])

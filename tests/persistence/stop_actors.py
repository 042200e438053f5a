"""A persistent actor that stops itself around its persists (tests/persistence/test_stop.py)."""

from __future__ import annotations

from typing import Any

from persistence import PersistentActor
from tests.persistence.event_log import EventLog


class Stopping(EventLog, PersistentActor):
    """("persist-then-stop", e) / ("persist-async-then-stop", e): persist e and stop in the same command;
    ("stop-in-handler", e): persist e and stop in its handler; ("all-stop-in-first", (e, ...)): persist_all the events,
    the handler of the first stops; ("async-stop-in-first", (e, ...)): persist_async each, the first's handler stops;
    "state": its events; anything else is persisted.
    Every handler that runs tells the command's sender ("handled", e)."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "state":
            self.tell(sender, tuple(self.state))
            return
        kind, event = message if isinstance(message, tuple) else ("persist", message)
        if kind == "persist-then-stop":
            self.persist(event, lambda e: self._handled(e, sender))
            self.stop()
        elif kind == "persist-async-then-stop":
            self.persist_async(event, lambda e: self._handled(e, sender))
            self.stop()
        elif kind == "all-stop-in-first":
            self.persist_all(event, lambda e: (self._handled(e, sender), e == event[0] and self.stop()))
        elif kind == "async-stop-in-first":
            for e in event:
                self.persist_async(e, lambda e: (self._handled(e, sender), e == event[0] and self.stop()))
        elif kind == "stop-in-handler":
            self.persist(event, lambda e: (self._handled(e, sender), self.stop()))
        else:
            self.persist(event, lambda e: self._handled(e, sender))

    def _handled(self, event: Any, sender: str | None) -> None:
        self.state.append(event)
        if sender is not None:
            self.tell(sender, ("handled", event))

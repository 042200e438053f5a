"""Actors for the tests of a group-commit write that fails: every asker whose command wrote in it hears of it.

`failwrite://name`: a memory journal whose first write of each str event starting with "fault" fails (once per
process), importable by module path as multiproc requires.
"""

from __future__ import annotations

from typing import Any

from persistence import PersistentActor
from tests.persistence.failing_journals import register_failing_first_write


def _faulty(payload: object) -> list[str]:
    """A str event starting with "fault" is the key of its own failing write."""
    return [payload] if isinstance(payload, str) and payload.startswith("fault") else []


register_failing_first_write("failwrite", _faulty)


class RoundWriter(PersistentActor):
    """("as", ((asker, how, payload), ...)): each ("write", how, payload) routed to itself from that asker, all
    handled before the host's next group commit (one round, one journal write); ("write", how, payload) persists
    the payload (how: "async" persist_async, "all" persist_all_async of it twice) and replies ("ok", payload) from
    its handler; ("defer", _, payload) defers that reply behind the round's writes."""

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message[0] == "as":
            for asker, how, payload in message[1]:
                self.context.route(asker, self.path, ("write", how, payload))
            return
        _, how, payload = message
        reply = lambda e: self.tell(sender, ("ok", e))  # noqa: E731
        if how == "async":
            self.persist_async(payload, reply)
        elif how == "all":
            self.persist_all_async([payload, payload], reply)
        else:
            self.defer_async(payload, reply)

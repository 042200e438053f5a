"""A persistent entity that persists one event per command, each command told by the previous event's handler."""

from __future__ import annotations

import time
from typing import Any

from persistence import PersistentActor
from tests.actors.fairness_sample import Spin


class PersistLooper(PersistentActor):
    """On Spin: persists its count, and the handler tells itself the next Spin until `until` (then ("spun",
    count) to reply_to); answers ("pong", n) to ("ping", n) without persisting."""

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Spin):
            if message.count == 0:
                self.tell(message.reply_to, "spinning")
            self.persist(message.count, lambda _: self._next(message))
        elif isinstance(message, tuple) and message[0] == "ping":
            self.tell(sender, ("pong", message[1]))

    def _next(self, spin: Spin) -> None:
        if time.time() < spin.until:
            self.tell(self.path, Spin(spin.until, spin.reply_to, spin.count + 1))
        else:
            self.tell(spin.reply_to, ("spun", spin.count))

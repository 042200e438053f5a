"""Actors for tests/actors/test_exit_drain.py (importable by host processes)."""

from __future__ import annotations

from typing import Any

import actors
from actors.messages import Batch
from tests.thespian_retry import retry_first_send

RETRY_AFTER = 60.0
"""How long this process's held send waits for its retry: well past Thespian's 7 s exit drain."""


class HoldsItsReply(actors.Actor):
    """On ("reply late", path, marker): tells `path` the marker, its process's send of it held back for its retry,
    RETRY_AFTER s away (as after a reset: thespian_retry). "held" answers, for each send held, whether it is that one."""

    def pre_start(self) -> None:
        self.held: list[Any] = []
        self.marker = ""

    def receive(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "reply late":
            _, path, self.marker = message
            self.held = retry_first_send(Batch, after=RETRY_AFTER)
            self.tell(path, self.marker)
        elif message == "held":
            self.tell(sender, [self.marker.encode() in intent.message.payload for intent in self.held])

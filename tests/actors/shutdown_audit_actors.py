"""Actors for tests/actors/test_shutdown_audit.py (importable by host processes)."""

from __future__ import annotations

import threading
import time
from typing import Any

import actors
from persistence import PersistentActor


class Counter(PersistentActor):
    """Persists ("added", n) per ("add", n); the handler replies ("ok", entity id, n) to the sender, so a reply
    means the event is durable. "get" answers the list of n's it holds (recovered and new)."""

    def pre_start(self) -> None:
        self.added: list[int] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, tuple):
            self.added.append(event[1])

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "add":
            n = message[1]

            def handler(event: Any) -> None:
                self.added.append(n)
                self.tell(sender, ("ok", self.path, n))

            self.persist(("added", n), handler)
        elif message == "get":
            self.tell(sender, list(self.added))


class ShutsDownFromHandler(actors.Actor):
    """On "shutdown": calls actors.shutdown on its own system from inside a handler (it must be refused)."""

    def receive(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "shutdown":
            try:
                actors.shutdown(message[1], timeout=5.0)
                self.tell(sender, "returned")
            except BaseException as e:  # noqa: BLE001 - the test wants to see what happened
                self.tell(sender, f"{type(e).__name__}: {e}")


class Slow(actors.Actor):
    """Sleeps `seconds` on ("sleep", seconds) before answering "slept" (a handler still running at shutdown); never
    answers "ignore"; answers anything else with ("threads", count)."""

    def receive(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "sleep":
            time.sleep(message[1])
            self.tell(sender, "slept")
        elif message == "ignore":
            pass  # (an ask of it waits its whole timeout)
        else:
            self.tell(sender, ("threads", threading.active_count()))

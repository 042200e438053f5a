"""Entities that opt into receive_batch (importable by module path, as multiproc requires)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import actors


class Batched(actors.Actor):
    """Tells `probe` ("got", path, message, incarnation) per message and ("batch", path, messages) per call;
    raises on "boom", stops on "stop"."""

    def __init__(self, probe: str) -> None:
        self.probe = probe

    def receive_batch(self, messages: Iterator[tuple[Any, str | None]]) -> None:
        got = []
        for message, sender in messages:  # taken one at a time: failures and stops hit the right message
            got.append(message)
            self.receive(message, sender)
        self.tell(self.probe, ("batch", self.path, tuple(got)))

    def receive(self, message: Any, sender: str | None) -> None:
        if message == "boom":
            raise RuntimeError("boom requested")
        self.tell(self.probe, ("got", self.path, message, self._incarnation))
        if message == "stop":
            self.stop()

"""A persistence query run in a thread, for tests that write while it reads."""

from __future__ import annotations

import threading
from collections.abc import Iterator

from journal import EventEnvelope


class Reader(threading.Thread):
    """Runs a query in a thread, collecting what it yields; `done` once the query ended."""

    def __init__(self, query: Iterator[EventEnvelope]):
        super().__init__(daemon=True)
        self.query = query
        self.got: list[EventEnvelope] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        self.start()

    def run(self) -> None:
        """Collect the query's envelopes until it ends."""
        try:
            for e in self.query:
                self.got.append(e)
        except BaseException as e:  # noqa: BLE001  (reported by the test)
            self.error = e
        finally:
            self.done.set()

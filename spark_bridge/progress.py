"""The driver's progress bar for long feeds: rows confirmed / total, on a terminal only."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TextIO


def is_terminal(stream: object) -> bool:
    """True when `stream` is an interactive terminal (a bar elsewhere would only litter logs)."""
    isatty = getattr(stream, "isatty", None)
    try:
        return bool(isatty and isatty())
    except (ValueError, OSError):  # closed or detached
        return False


class ProgressBar:
    """A one-line bar redrawn in place: `label [#####.....] done / total (pct) rate`."""

    def __init__(self, total: int, stream: TextIO, label: str = "rows confirmed", width: int = 30) -> None:
        self.total = max(0, total)
        self.stream = stream
        self.label = label
        self.width = width
        self.started = time.monotonic()
        self.done = 0

    def render(self, done: int) -> str:
        """The bar's text for `done` rows."""
        done = min(max(done, self.done), self.total) if self.total else max(done, self.done)
        self.done = done
        fraction = done / self.total if self.total else 1.0
        filled = int(fraction * self.width)
        elapsed = time.monotonic() - self.started
        rate = done / elapsed if elapsed > 0 else 0.0
        return (f"{self.label} [{'#' * filled}{'.' * (self.width - filled)}] {done:,} / {self.total:,} "
                f"({fraction:.0%}) {rate:,.0f} rows/s")

    def update(self, done: int) -> None:
        """Redraw with `done` rows confirmed (never going backwards)."""
        self.stream.write("\r" + self.render(done))
        self.stream.flush()

    def close(self, done: int) -> None:
        """Draw the final state and end the line."""
        self.update(done)
        self.stream.write("\n")
        self.stream.flush()


class Poller:
    """Calls `fetch()` every `interval` seconds on a thread and draws what it returns, until stopped."""

    def __init__(self, bar: ProgressBar, fetch: Callable[[], int], interval: float = 0.5) -> None:
        self.bar = bar
        self.fetch = fetch
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="spark-feed-progress", daemon=True)

    def start(self) -> Poller:
        self._thread.start()
        return self

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            try:
                self.bar.update(self.fetch())
            except Exception:  # progress is best effort; the feed reports its own errors
                continue

    def stop(self, done: int) -> None:
        """Stop polling and draw the final count."""
        self._stop.set()
        self._thread.join(timeout=5 * self.interval + 10)
        self.bar.close(done)

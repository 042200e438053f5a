"""Process-wide resources that the actors of local systems open (journal files), released with the last of them.

A local system runs its actors in the caller's process, where persistence keeps one journal and snapshot store per
URL for every actor of the process. Kept until the process exited, each `actors.start("local", ...)` and shutdown
left its SQLite files open (four descriptors per store): a program or test suite starting local systems in turn ran
out of descriptors (`select()` refuses descriptors past 1024). The last local system's shutdown now releases them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

_lock = threading.Lock()
_running = 0
_releases: list[Callable[[], None]] = []


def on_last_shutdown(release: Callable[[], None]) -> None:
    """Call `release` whenever the last local system of this process has shut down (registered once per callable)."""
    with _lock:
        if release not in _releases:
            _releases.append(release)


def started() -> None:
    """Count a local system of this process as running."""
    global _running
    with _lock:
        _running += 1


def stopped() -> None:
    """Count one down; with none left, release what their actors opened."""
    global _running
    with _lock:
        _running = max(_running - 1, 0)
        releases = list(_releases) if _running == 0 else []
    for release in releases:
        release()

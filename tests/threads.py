"""A call run in a thread of its own, its outcome kept for the test to check."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any


def in_thread(call: Callable[..., Any], *args: Any, **kwargs: Any) -> tuple[threading.Thread, list[Any]]:
    """`call(*args, **kwargs)` started in a daemon thread; the list gets its result, or its exception, when it ends."""
    outcome: list[Any] = []

    def run() -> None:
        try:
            outcome.append(call(*args, **kwargs))
        except BaseException as exc:  # (the caller checks it)
            outcome.append(exc)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, outcome

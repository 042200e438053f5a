"""Bounded waits on conditions (instead of sleeps)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def wait_for(condition: Callable[[], T], timeout: float = 10.0, interval: float = 0.02) -> T:
    """Poll `condition` until it returns something truthy; fail the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError(f"condition not met within {timeout} s: {getattr(condition, '__name__', condition)}")
        time.sleep(interval)


def dead_letters_reach(system, count: int, timeout: float = 10.0):
    """Wait until the system has recorded at least `count` dead letters; return them."""
    return wait_for(lambda: (lambda d: d if d.count >= count else None)(system.dead_letters()), timeout)

"""Cancellable one-shot and fixed-delay timers, multiplexed on one Thespian wakeup per host."""

from __future__ import annotations

import heapq
import itertools
import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .actor import Actor


class Timer:
    """A handle to a scheduled message; `cancel()` it to stop further deliveries."""

    __slots__ = ("due", "interval", "message", "owner", "incarnation", "active", "seq")

    def __init__(self, due: float, interval: float | None, message: object, owner: Actor, incarnation: int, seq: int):
        self.due = due
        self.interval = interval
        self.message = message
        self.owner = owner
        self.incarnation = incarnation
        self.active = True
        self.seq = seq

    def cancel(self) -> None:
        """Stop this timer; a tick already due but not yet delivered is dropped too."""
        self.active = False
        timers = self.owner._timers
        if isinstance(timers, set):
            timers.discard(self)
            if not timers:
                self.owner._timers = ()  # an entity whose timers are done holds no set

    def __lt__(self, other: Timer) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)


class TimerQueue:
    """A heap of timers; the host arms one Thespian wakeup for the earliest due time."""

    def __init__(self) -> None:
        self._heap: list[Timer] = []
        self._seq = itertools.count()

    def schedule(self, delay: float, interval: float | None, message: object, owner: Actor) -> Timer:
        """Add a timer for `owner` (an actor) due `delay` seconds from now."""
        timer = Timer(time.monotonic() + max(0.0, delay), interval, message, owner, owner._incarnation, next(self._seq))
        heapq.heappush(self._heap, timer)
        timers = owner._timers
        if not isinstance(timers, set):  # an actor's first timer: the set is made now (an empty one is 216 bytes)
            timers = owner._timers = set()
        timers.add(timer)
        return timer

    def next_due(self) -> float | None:
        """The monotonic time of the earliest live timer, or None."""
        heap = self._heap
        while heap and not heap[0].active:
            heapq.heappop(heap)
        return heap[0].due if heap else None

    def pop_due(self, now: float) -> list[Timer]:
        """Remove and return the live timers due by `now`, earliest first (repeating ones re-armed)."""
        fired = []
        heap = self._heap
        while heap and heap[0].due <= now:
            timer = heapq.heappop(heap)
            if not timer.active:
                continue
            fired.append(timer)
            if timer.interval is not None:
                # Fixed delay, not fixed rate: a late tick does not cause a catch-up burst.
                timer.due = now + timer.interval
                timer.seq = next(self._seq)
                heapq.heappush(heap, timer)
            else:
                timer.active = False
                timer.cancel()
        return fired

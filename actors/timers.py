"""Cancellable one-shot and fixed-delay timers, multiplexed on one Thespian wakeup per host."""

from __future__ import annotations

import heapq
import itertools
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .actor import Actor

# Cancelled timers wait in the heap (a heap cannot remove from its middle) until they reach its top, or until
# they are more than half of it and this many: then the heap is rebuilt without them (amortized O(1) a cancel).
_COMPACT_AT = 64


class Timer:
    """A handle to a scheduled message; `cancel()` it to stop further deliveries."""

    __slots__ = ("due", "interval", "message", "owner", "incarnation", "active", "seq", "queue")

    def __init__(self, due: float, interval: float | None, message: object, owner: Actor, incarnation: int, seq: int,
                 queue: TimerQueue | None = None):
        self.due = due
        self.interval = interval
        self.message: object = message
        self.owner: Actor | None = owner  # None once cancelled
        self.incarnation = incarnation
        self.active = True
        self.seq = seq
        self.queue = queue  # the queue whose heap holds it (None once out of it): it counts the cancelled

    def cancel(self) -> None:
        """Stop this timer; a tick already due but not yet delivered is dropped too."""
        if not self.active:
            return
        self.active = False
        owner = self.owner
        # Until it leaves the heap, a cancelled timer must not keep its message or its entity (passivated meanwhile)
        # alive: a receive timeout (cancel and schedule again on every message) left one of each per message.
        self.owner = None
        self.message = None
        if owner is not None:
            _forget(owner, self)
        if self.queue is not None:
            self.queue._cancelled_one()

    def cancelled(self) -> Timer:
        """This timer, made inactive before it was queued (its owner has stopped)."""
        self.active = False
        self.owner = None
        self.message = None
        self.queue = None
        return self

    def __lt__(self, other: Timer) -> bool:
        return (self.due, self.seq) < (other.due, other.seq)


def _forget(owner: Actor, timer: Timer) -> None:
    timers = owner._timers
    if isinstance(timers, set):
        timers.discard(timer)
        if not timers:
            owner._timers = ()  # an entity whose timers are done holds no set


class TimerQueue:
    """A heap of timers; the host arms one Thespian wakeup for the earliest due time."""

    def __init__(self) -> None:
        self._heap: list[Timer] = []
        self._seq = itertools.count()
        self._cancelled = 0  # cancelled timers still in the heap

    def schedule(self, delay: float, interval: float | None, message: object, owner: Actor) -> Timer:
        """Add a timer for `owner` (an actor) due `delay` seconds from now."""
        timer = Timer(time.monotonic() + max(0.0, delay), interval, message, owner, owner._incarnation,
                      next(self._seq), self)
        heapq.heappush(self._heap, timer)
        timers = owner._timers
        if not isinstance(timers, set):  # an actor's first timer: the set is made now (an empty one is 216 bytes)
            timers = owner._timers = set()
        timers.add(timer)
        return timer

    def _cancelled_one(self) -> None:
        """A timer in the heap was cancelled: rebuild the heap without the cancelled once they are most of it."""
        self._cancelled += 1
        heap = self._heap
        if self._cancelled >= _COMPACT_AT and self._cancelled * 2 > len(heap):
            heap[:] = [timer for timer in heap if timer.active]  # (in place: pop_due may be walking it)
            heapq.heapify(heap)
            self._cancelled = 0

    def next_due(self) -> float | None:
        """The monotonic time of the earliest live timer, or None."""
        heap = self._heap
        while heap and not heap[0].active:
            heapq.heappop(heap)
            self._cancelled -= 1
        return heap[0].due if heap else None

    def pop_due(self, now: float) -> Iterator[Timer]:
        """The live timers due by `now`, earliest first, each taken off the heap as it is reached (repeating ones
        re-armed): one cancelled by the handler of an earlier one is not reached."""
        heap = self._heap
        while heap and heap[0].due <= now:
            timer = heapq.heappop(heap)
            if not timer.active:
                self._cancelled -= 1
                continue
            if timer.interval is not None:
                # Fixed delay, not fixed rate: a late tick does not cause a catch-up burst.
                timer.due = now + timer.interval
                timer.seq = next(self._seq)
                heapq.heappush(heap, timer)
            else:
                timer.active = False
                timer.queue = None
                if timer.owner is not None:
                    _forget(timer.owner, timer)
            yield timer

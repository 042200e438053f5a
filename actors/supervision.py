"""How the guardian restarts a host that died: exponential backoff in the style of Akka's BackoffSupervisor."""

from __future__ import annotations

import multiprocessing
import os
import random
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from .errors import ConfigError

DEFAULT_HOLD_LIMIT = 100_000
"""Messages held per host while it is down (backing off or restarting); past it they are dead letters."""


class InvalidBackoff(ConfigError):
    """A backoff or hold-limit option that is not valid (negative, min > max, wrong type)."""


@dataclass(frozen=True)
class Backoff:
    """Restart a dead host after min * 2**n seconds (capped at max), stretched by up to random_factor.

    n counts the restarts since the host last ran for `reset_after` seconds (default: `max`), so a host
    that crashes now and then restarts after `min`, and one that crashes in a loop slows down to one
    attempt per `max` seconds. `max_restarts` None (the default) never gives up; an int gives up (state
    "failed") after that many restarts in a row without a stable run.
    """

    min: float = 0.2
    max: float = 10.0
    random_factor: float = 0.2
    max_restarts: int | None = None
    reset_after: float | None = None

    def __post_init__(self) -> None:
        for name in ("min", "max", "random_factor"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int | float):
                raise InvalidBackoff(f"backoff {name} must be a number, got {value!r}")
        if not 0 < self.min <= self.max:
            raise InvalidBackoff(f"backoff needs 0 < min <= max (seconds), got min={self.min!r}, max={self.max!r}")
        if self.random_factor < 0:
            raise InvalidBackoff(f"backoff random_factor must be >= 0 (0.2 stretches delays by up to 20%), "
                                 f"got {self.random_factor!r}")
        if self.max_restarts is not None and (type(self.max_restarts) is not int or self.max_restarts < 0):
            raise InvalidBackoff(f"backoff max_restarts must be None (never give up) or an int >= 0, "
                                 f"got {self.max_restarts!r}")
        if self.reset_after is not None and (isinstance(self.reset_after, bool)
                                             or not isinstance(self.reset_after, int | float)
                                             or self.reset_after <= 0):
            raise InvalidBackoff(f"backoff reset_after must be a positive number of seconds, got {self.reset_after!r}")

    @property
    def stable_after(self) -> float:
        """Seconds a host must run before its restart count starts over."""
        return self.max if self.reset_after is None else self.reset_after

    def delay(self, restarts: int, rnd: float | None = None) -> float:
        """Seconds to wait before restart number `restarts` + 1 (Akka's formula: capped, then stretched)."""
        base = self.max if restarts >= 64 else min(self.max, self.min * 2 ** restarts)
        return base * (1.0 + (random.random() if rnd is None else rnd) * self.random_factor)

    @classmethod
    def of(cls, value: object) -> Backoff:
        """A Backoff from None (the defaults), a Backoff, (min, max, random_factor) or a dict of its fields."""
        if value is None:
            return cls()
        if isinstance(value, Backoff):
            return value
        if isinstance(value, dict):
            unknown = set(value) - {"min", "max", "random_factor", "max_restarts", "reset_after"}
            if unknown:
                raise InvalidBackoff(f"backoff has unknown key(s) {sorted(unknown)}; known: min, max, "
                                     "random_factor, max_restarts, reset_after")
            return cls(**value)
        if isinstance(value, tuple | list) and len(value) == 3:
            return cls(*value)
        raise InvalidBackoff(f"backoff must be (min, max, random_factor) in seconds, a dict of min/max/"
                             f"random_factor/max_restarts/reset_after, or an actors.Backoff; got {value!r}")


def check_hold_limit(value: object) -> int:
    """`value` if it is a valid number of messages to hold per host (an int >= 0)."""
    if type(value) is not int or value < 0:
        raise InvalidBackoff(f"hold_limit must be an int >= 0 (messages held per host while it is down), "
                             f"got {value!r}")
    return value


PARENT_WAKEUP = "reprise-parent-check"
WATCH_PARENT_ENV = "REPRISE_WATCH_PARENT"
"""Set (to "1") by actors.boot: every actor process of a multi-process system then watches its parent."""
PARENT_CHECK = 1.0


class ParentWatch:
    """Notices that the process which started this actor process died (the admin, or a host's guardian).

    Thespian's actor processes keep running when their admin is SIGKILLed, serving nobody (`reprise
    status` then failed with InvalidActorAddress). An orphan is re-parented, so its parent pid changes;
    a cheap check every PARENT_CHECK seconds lets it exit.
    """

    def __init__(self, actor: Any, interval: float = PARENT_CHECK) -> None:  # Any: a Thespian actor (untyped)
        self.actor = actor
        self.interval = interval
        self.parent = parent_pid()

    @classmethod
    def start(cls, actor: Any) -> ParentWatch | None:
        """Watch the parent of `actor`'s process if this is a multi-process system (None otherwise)."""
        if os.environ.get(WATCH_PARENT_ENV) != "1":
            return None
        watch = cls(actor)
        watch._arm()
        return watch

    def _arm(self) -> None:
        self.actor.wakeupAfter(timedelta(seconds=self.interval), PARENT_WAKEUP)

    def orphaned(self) -> bool:
        """True once the parent is gone; otherwise checks again later."""
        if os.getppid() != self.parent:
            return True
        self._arm()
        return False


def parent_pid() -> int:
    """The pid of the process that forked this one, as recorded at the fork.

    Not os.getppid() at the time of asking: a parent that died before this process got that far has left it
    re-parented already, and the watch would compare against the new parent forever.
    """
    parent = multiprocessing.parent_process()
    return parent.pid if parent is not None and parent.pid is not None else os.getppid()


def exit_if_orphaned_before(ready: Callable[[], bool]) -> None:
    """Exit this actor process if its parent dies before `ready()` turns true (then ParentWatch takes over).

    A host the guardian forks right as the system shuts down never gets its InitHost, so it has no timers
    and nothing wakes it: its connection to the dead guardian is retried for minutes, and `down` found it
    still running (the torture harness: 1 shutdown in ~20 that follows a host SIGKILL). Until it is
    initialised it holds nothing, so exiting at once loses nothing.
    """
    if os.environ.get(WATCH_PARENT_ENV) != "1":
        return
    parent = parent_pid()

    def watch() -> None:
        while not ready():
            if os.getppid() != parent:
                os._exit(0)  # (no logging: Thespian's log relay may be gone with the parent, and block)
            time.sleep(PARENT_CHECK / 4)

    threading.Thread(target=watch, name="reprise-startup-watch", daemon=True).start()


def exit_logger_when_orphaned() -> None:
    """Make Thespian's logger process (a child of the admin) exit when the admin dies.

    The logger blocks in its transport forever and has no timers, so it gets a thread that watches its
    parent. Patched in the boot process before the admin forks the logger from it.
    """
    from thespian.system import multiprocCommon

    original = multiprocCommon.startupASLogger
    if getattr(original, "reprise_watched", False):
        return

    def startup(*args: object, **kwargs: object) -> object:
        parent = os.getppid()

        def watch() -> None:
            while os.getppid() == parent:
                time.sleep(PARENT_CHECK)
            os._exit(0)  # records are flushed as they are written: nothing is lost

        threading.Thread(target=watch, name="reprise-parent-watch", daemon=True).start()
        return original(*args, **kwargs)

    startup.reprise_watched = True  # type: ignore[attr-defined]
    multiprocCommon.startupASLogger = startup

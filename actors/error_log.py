"""Errors inside actors, collected by the guardian like dead letters: counted, recent ones kept, published.

Hosts report every exception in `receive`, every failed restart, rejected or failed persist and failed
snapshot save as an `ActorError` to the guardian (`system.errors()`, `subscribe_errors(path)`, `reprise
status`); the actor's log keeps the traceback. An `ask` whose handler raised gets an `ActorFailure` back
at once, which `System.ask` raises as `ActorFailed`.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass

RECENT_ERRORS = 100
"""How many recent errors the guardian keeps (older ones are only counted)."""

ASK_SEGMENT = "/ask-"
"""What an `ask`'s reply path holds (`/temp/<client>/ask-<n>`): a failure on its message is sent back."""


@dataclass(frozen=True)
class ActorError:
    """One error inside an actor: when (Unix time), which host and actor path, and a one-line reason."""

    time: float
    host: str
    path: str
    reason: str
    repeats: int = 0
    """Errors of the same host that came before this one and were not reported one by one (ErrorThrottle)."""


@dataclass(frozen=True)
class Errors:
    """The error count and the most recent errors (oldest first)."""

    count: int
    recent: tuple[ActorError, ...]


@dataclass(frozen=True)
class GetErrors:
    """Client -> guardian: reply with Errors."""


@dataclass(frozen=True)
class SubscribeErrors:
    """Subscribe `path` to every ActorError from now on."""

    path: str


@dataclass(frozen=True)
class ActorFailure:
    """Host -> asking client: the actor at `path` raised `error_type: error` on the asked message."""

    path: str
    error_type: str
    error: str


@dataclass(frozen=True)
class AskUndelivered:
    """Guardian -> asking client: the asked message to `path` became a dead letter, for `reason`."""

    path: str
    reason: str


def is_ask(sender: str | None) -> bool:
    """True if `sender` is the reply path of a client's `ask`."""
    return sender is not None and sender.startswith("/temp/") and ASK_SEGMENT in sender


def ask_failure(path: str, error: BaseException) -> ActorFailure:
    """What an asking client is sent when `error` ends its ask to the actor at `path` (raised as ActorFailed)."""
    return ActorFailure(path, type(error).__name__, one_line(str(error)))


def one_line(error: BaseException | str) -> str:
    """`Type: message` of an exception (or the text given), on one line and at most 300 characters."""
    text = error if isinstance(error, str) else f"{type(error).__name__}: {error}"
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:297] + "..."


def make_error(host: str, path: str, reason: str, repeats: int = 0) -> ActorError:
    """An ActorError stamped now."""
    return ActorError(time.time(), host, path, one_line(reason), repeats)


ERROR_BURST = 100
"""Errors a host reports (and logs with a traceback) one by one per ERROR_WINDOW; the rest are counted."""
ERROR_WINDOW = 1.0


class ErrorThrottle:
    """Keeps a host that fails on every message from flooding the guardian and its log.

    Up to `burst` errors per `window` seconds are reported one by one; the ones past that are only
    counted, and the count rides on the next reported error (`ActorError.repeats`), so the guardian's
    total stays exact. A count left when the errors stop goes out with `flush` (the host calls it when
    it settles) once the window is over.
    """

    __slots__ = ("burst", "window", "_start", "_in_window", "suppressed")

    def __init__(self, burst: int = ERROR_BURST, window: float = ERROR_WINDOW) -> None:
        self.burst = burst
        self.window = window
        self._start = float("-inf")
        self._in_window = 0
        self.suppressed = 0

    def admit(self, now: float) -> bool:
        """True if the error happening `now` is reported one by one; False if it is only counted."""
        if now - self._start >= self.window:
            self._start, self._in_window = now, 0
        if self._in_window < self.burst:
            self._in_window += 1
            return True
        self.suppressed += 1
        return False

    def take_suppressed(self) -> int:
        """The count of errors not reported one by one since the last call (to send with the next one)."""
        n, self.suppressed = self.suppressed, 0
        return n

    def due(self, now: float) -> bool:
        """True when counted errors wait and the window that counted them is over."""
        return self.suppressed > 0 and now - self._start >= self.window


class ErrorLog:
    """The guardian's record of errors: a count, the last RECENT_ERRORS, and the subscribers' paths."""

    def __init__(self) -> None:
        self.count = 0
        self.recent: deque[ActorError] = deque(maxlen=RECENT_ERRORS)
        self.subscribers: dict[str, None] = {}  # (a path subscribed again is kept once, in its first place)

    def record(self, error: ActorError) -> list[str]:
        """Keep `error`; returns the paths to publish it to."""
        self.count += 1 + error.repeats
        self.recent.append(error)
        return list(self.subscribers)

    def subscribe(self, path: str) -> None:
        """Publish every future error to `path`."""
        self.subscribers.setdefault(path, None)

    def forget_under(self, prefix: str) -> None:
        """Drop the subscribers below `prefix` (a client's /temp route, gone with its client)."""
        forget_under(self.subscribers, prefix)

    def snapshot(self) -> Errors:
        """The count and the recent errors."""
        return Errors(self.count, tuple(self.recent))

    def handles(self, message: object) -> bool:
        """True for the messages the guardian passes to this log (see Guardian._control)."""
        return isinstance(message, (ActorError, SubscribeErrors))


def forget_under(paths: dict[str, None], prefix: str) -> None:
    """Drop the paths at or below `prefix` from `paths` (subscribers of a client that is gone)."""
    under = prefix + "/"
    for path in [p for p in paths if p == prefix or p.startswith(under)]:
        del paths[path]

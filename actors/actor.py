"""The actor API shared by top-level actors and lightweight entities."""

from __future__ import annotations

import logging
from typing import Any

from .timers import Timer
from .validation import check_number

log = logging.getLogger("reprise.actors")


class Actor:
    """Subclass this and implement `receive(message, sender)`.

    The same class works as a top-level actor (`system.spawn(cls, path="/user/ledger")`) and as an
    entity under a host (`system.spawn(cls, path="/user/accounts", entities=True)`, one instance per
    path below it, created on its first message). `sender` is the sender's path (or None); reply
    with `self.tell(sender, reply)`. Exceptions restart the actor: a new instance replaces this one.
    """

    path: str = ""
    _host: Any = None
    _incarnation: int = 0

    def receive(self, message: Any, sender: str | None) -> None:
        """Handle one message; override this."""
        raise NotImplementedError(f"{type(self).__name__} must implement receive(message, sender)")

    # Lifecycle hooks, named as in Akka.
    def pre_start(self) -> None:
        """Called once the instance is in place and before its first message."""

    def post_stop(self) -> None:
        """Called when the instance stops (stop(), passivation, host shutdown, too many restarts)."""

    def pre_restart(self, error: BaseException, message: Any) -> None:
        """Called on the failed instance before it is replaced."""
        self.post_stop()

    def post_restart(self, error: BaseException) -> None:
        """Called on the new instance after a restart."""
        self.pre_start()

    # What an actor can do.
    @property
    def entity_id(self) -> str:
        """The last segment of this actor's path (`/user/accounts/42` -> `42`)."""
        return self.path.rsplit("/", 1)[1]

    @property
    def config(self) -> dict:
        """The actor system's configuration (journal URLs and the like)."""
        return self._host.config

    def tell(self, path: str, message: Any, sender: str | None = None) -> None:
        """Send `message` to the actor at `path`; the receiver sees this actor's path as sender."""
        self._host.route(self.path if sender is None else sender, path, message)

    def schedule_once(self, delay: float, message: Any) -> Timer:
        """Deliver `message` to this actor after `delay` seconds; returns a cancellable Timer."""
        return self._host.timers_schedule(delay, None, message, self)

    def schedule_repeatedly(self, interval: float, message: Any, initial_delay: float | None = None) -> Timer:
        """Deliver `message` every `interval` seconds (fixed delay); returns a cancellable Timer."""
        # 0 would fire on every pass of the host's loop: one core at 100% for as long as the timer lives.
        check_number("interval", interval, hint="seconds between two deliveries of the message")
        check_number("initial_delay", initial_delay, allow_equal=True, allow_none=True)
        first = interval if initial_delay is None else initial_delay
        return self._host.timers_schedule(first, interval, message, self)

    def stop(self) -> None:
        """Stop this actor once the current message has been handled."""
        self._stopping = True

    def _routes_lost(self, prefixes: list[str]) -> None:
        """The hosts serving these path prefixes died (called only for actors in `Host.watch_routes`)."""

    def stats(self) -> dict[str, int]:
        """Counters this actor reports to `System.status()` / `reprise status` (summed per host)."""
        return {}

    @property
    def log(self) -> logging.Logger:
        """A logger for this actor."""
        return log

    # Internal state: set by the host before pre_start.
    _stopping: bool = False
    _timers: set
    _last_active: float = 0.0

    def _around_pre_start(self) -> None:
        """What the host calls to start an instance; a base class (persistence) wraps pre_start here."""
        self.pre_start()

    def _around_post_restart(self, error: BaseException) -> None:
        """What the host calls on a restarted instance; a base class (persistence) wraps post_restart here."""
        self.post_restart(error)

    def _restart_carryover(self) -> list[tuple[Any, str | None]]:
        """Messages the failed instance accepted but had not handled yet (see persistence)."""
        return []

    def _keep_alive(self) -> bool:
        """True while this entity must not be passivated (it has live timers)."""
        return bool(self._timers)

"""The actor API shared by top-level actors and lightweight entities."""

from __future__ import annotations

import logging
import math
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any, cast

from .context import DETACHED, ActorContext
from .errors import ConfigError
from .timers import Timer
from .validation import check_number

if TYPE_CHECKING:
    from .lifecycle import Lifecycle

log = logging.getLogger("reprise.actors")

MAX_DELAY = 1e9
"""The longest timer delay or interval, in seconds (about 31 years): Thespian took 2.5e11 (measured), and its
wakeups (a timedelta) overflow below 1e15."""

MIN_INTERVAL = 0.001
"""The shortest interval of a repeating timer, in seconds. Thespian handles a wakeup already due before it reads
its sockets: a tick due again before the host is back at its poll starved its mailbox for good (1e-6 s: asks
and status timed out, shutdown killed the processes). 3e-5 s was the shortest seen to work: 1 ms leaves a margin
for the handler."""


def _check_delay(name: str, value: object, hint: str) -> None:
    """ConfigError unless `value` is a finite number of seconds up to MAX_DELAY (one below 0 means at once)."""
    if (type(value) is float or type(value) is int) and -MAX_DELAY <= value <= MAX_DELAY:
        return  # (the common case, in two comparisons: schedule_once is on some hot paths)
    check_number(name, value, minimum=-math.inf, allow_equal=True, hint=hint)
    if cast(float, value) > MAX_DELAY:
        raise ConfigError(f"{name} must be <= {MAX_DELAY:g} seconds (about 31 years), got {value!r}; {hint}")


class Actor:
    """Subclass this and implement `receive(message, sender)`.

    The same class works as a top-level actor (`system.spawn(cls, path="/user/ledger")`) and as an
    entity under a host (`system.spawn(cls, path="/user/accounts", entities=True)`, one instance per
    path below it, created on its first message). `sender` is the sender's path (or None); reply
    with `self.tell(sender, reply)`. Exceptions restart the actor: a new instance replaces this one.

    Besides the Akka hooks, the host calls the lifecycle methods described in `actors.lifecycle`
    (`around_pre_start`, `restart_carryover`, `keep_alive`, ...): do not reuse those names for
    anything else.
    """

    path: str = ""
    context: ActorContext = DETACHED
    """The host running this actor (set before pre_start): what it may ask of it, see actors.context."""
    _incarnation: int = 0

    def receive(self, message: Any, sender: str | None) -> None:
        """Handle one message; override this."""
        raise NotImplementedError(f"{type(self).__name__} must implement receive(message, sender)")

    def receive_batch(self, messages: Iterator[tuple[Any, str | None]]) -> None:
        """Handle the (message, sender) pairs one incoming host batch carries for this entity, in order.

        Opt-in: an entity class that overrides this gets all its messages of a batch in one call (fewer
        calls per message); `receive` stays what everything else calls. The host ends `messages` early
        when the entity stopped or was replaced (the rest go to the next incarnation), and reports an
        exception on the last message taken, as it would from `receive`: take each message when handling
        it, as this default does. One that takes several first (to handle them together) handles them as
        one: a failure is reported on the last one taken, and none of them is handed over again.
        """
        receive = self.receive
        for message, sender in messages:
            receive(message, sender)

    def receive_entities(self, messages: list[tuple[str, Any, str | None]]) -> None:
        """Handle the (entity id, message, sender) triples of one incoming batch for *all* the entities below
        this host, in order: the host of a class that overrides this (spawned with entities=True) runs one
        instance, at the host's path, instead of one per entity (persistence.EntityTable).

        Opt-in, for entities kept as rows of one object: no instance, timers or passivation per entity.
        Messages to the host's own path still go to `receive`. An exception restarts the one instance.
        """
        raise NotImplementedError(f"{type(self).__name__} does not serve entities in one instance")

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
    def config(self) -> Mapping[str, object]:
        """The actor system's configuration (journal URLs and the like)."""
        return self.context.config

    def tell(self, path: str, message: object, sender: str | None = None) -> None:
        """Send `message` to the actor at `path`; the receiver sees this actor's path as sender."""
        self.context.route(self.path if sender is None else sender, path, message)

    def schedule_once(self, delay: float, message: object) -> Timer:
        """Deliver `message` to this actor after `delay` seconds (<= 0: at once); returns a cancellable Timer."""
        # inf or a huge delay failed the actor with an OverflowError from inside Thespian; NaN fired at once.
        _check_delay("delay", delay, "seconds until the message is delivered")
        return self.context.schedule(delay, None, message, self)

    def schedule_repeatedly(self, interval: float, message: object, initial_delay: float | None = None) -> Timer:
        """Deliver `message` every `interval` seconds (fixed delay); returns a cancellable Timer."""
        # 0 would fire on every pass of the host's loop: one core at 100% for as long as the timer lives.
        check_number("interval", interval, hint="seconds between two deliveries of the message")
        if interval < MIN_INTERVAL:
            raise ConfigError(f"interval must be >= {MIN_INTERVAL:g} seconds (actors.actor.MIN_INTERVAL), got "
                              f"{interval!r}: a shorter one keeps its host from reading its mailbox")
        _check_delay("interval", interval, "seconds between two deliveries of the message")
        check_number("initial_delay", initial_delay, allow_equal=True, allow_none=True)
        if initial_delay is not None:
            _check_delay("initial_delay", initial_delay, "seconds until the first delivery")
        first = interval if initial_delay is None else initial_delay
        return self.context.schedule(first, interval, message, self)

    def stop(self) -> None:
        """Stop this actor once the current message has been handled."""
        self._stopping = True

    @property
    def stop_requested(self) -> bool:
        """True once stop() was called: the host stops this actor when the current message is handled."""
        return self._stopping

    def stats(self) -> dict[str, int]:
        """Counters this actor reports to `System.status()` / `reprise status` (summed per host)."""
        return {}

    @property
    def log(self) -> logging.Logger:
        """A logger for this actor."""
        return log

    # Internal state the host keeps on each instance (set before pre_start, or by the timers themselves).
    _stopping: bool = False
    _timers: set[Timer] | tuple[()] = ()  # a set from its first timer on (timers.py): none for most entities
    _last_active: float = 0.0

    # The lifecycle the host drives (actors.lifecycle.Lifecycle says when and what each must do).
    @classmethod
    def open_resources(cls, config: Mapping[str, object]) -> None:
        """When the host starts: open what instances will need (see Lifecycle); nothing by default."""

    def around_pre_start(self) -> None:
        """How the host starts an instance: `pre_start()`; a layer (persistence) wraps it here."""
        self.pre_start()

    def around_post_restart(self, error: BaseException) -> None:
        """How the host starts a restarted instance: `post_restart(error)`; a layer wraps it here."""
        self.post_restart(error)

    def around_post_stop(self) -> None:
        """How the host stops an instance: `post_stop()`; a layer wraps it here."""
        self.post_stop()

    def restart_carryover(self) -> list[tuple[object, str | None]]:
        """Messages this failed instance accepted but had not handled (see persistence): none here."""
        return []

    def keep_alive(self) -> bool:
        """True while this entity must not be passivated: it has live timers."""
        return bool(self._timers)

    def routes_lost(self, prefixes: list[str]) -> None:
        """The hosts serving these path prefixes died (only for actors in `context.watch_routes`)."""


if TYPE_CHECKING:
    _implements_lifecycle: type[Lifecycle] = Actor

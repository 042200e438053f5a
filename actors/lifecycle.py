"""Lifecycle: the calls a host makes on the actors it runs, when it makes them, and what each must do."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol


class Lifecycle(Protocol):
    """What a host calls on its actors; `actors.Actor` implements every call with the default behaviour.

    The host calls nothing else on an actor. User code overrides Akka's hooks (`pre_start`,
    `post_stop`, `pre_restart`, `post_restart`) and `receive`; a layer that adds behaviour around the
    user's code (persistence) overrides the `around_*`, `restart_carryover`, `keep_alive`,
    `routes_lost` and `open_resources` calls below and calls `super()` where it extends them.
    """

    @classmethod
    def open_resources(cls, config: Mapping[str, object]) -> None:
        """Called once on the actor class when its host starts, before any instance exists.

        Open (or check) what the instances will need from `config`, so that a bad setting fails the
        spawn now rather than every message later: raise `actors.SpawnFailed` saying what to fix.
        Default: nothing.
        """

    def around_pre_start(self) -> None:
        """Called on a new instance (the first, or one replacing a stopped one) before its first message.

        Must call `self.pre_start()`; may do the layer's own setup around it (persistence: recovery
        after it). An exception fails the start: an entity's first message is dead-lettered, a
        top-level actor's spawn fails (or, restarting after a failure, its host backs off and tries
        again). Default: `self.pre_start()`.
        """

    def receive(self, message: Any, sender: str | None) -> None:
        """Called for each message and each due timer; an exception restarts the actor."""

    def restart_carryover(self) -> list[tuple[object, str | None]]:
        """Called on a failed instance, first thing when the host restarts it (before `pre_restart`).

        Returns the (message, sender) pairs it accepted but has not handled (persistence: its stash);
        the host hands them to the new instance, in order, right after `around_post_restart`. Must
        finish what must not be lost (persistence writes the events already queued). Default: [].
        """

    def pre_restart(self, error: BaseException, message: Any) -> None:
        """Called on a failed instance before it is replaced (after `restart_carryover`)."""

    def around_post_restart(self, error: BaseException) -> None:
        """Called on the new instance that replaces one which failed with `error`, before its first message.

        Must call `self.post_restart(error)`; may do the layer's own setup around it (persistence:
        recovery after it). An exception stops the actor. Default: `self.post_restart(error)`.
        """

    def keep_alive(self) -> bool:
        """Called on an idle entity when the host passivates idle entities (`passivate_after`).

        True keeps it running another period: it still has work in flight (timers, stashed
        commands, unwritten events). Must be cheap and must not send. Default: it has live timers.
        """

    def routes_lost(self, prefixes: list[str]) -> None:
        """Called (only on actors registered with `context.watch_routes`) when hosts serving these
        path prefixes died: what was sent to them and not handled died with them.

        May resend at once (AtLeastOnceDelivery does); what it sends goes out when the host settles.
        Default: nothing.
        """

    def around_post_stop(self) -> None:
        """How the host stops an instance (once removed from the host): `post_stop()`, which a layer wraps
        (persistence dead-letters the commands still stashed)."""

    def post_stop(self) -> None:
        """Called once when the instance stops (stop(), passivation, host shutdown, too many restarts)."""

    def stats(self) -> dict[str, int]:
        """Called for `System.status()`: counters summed over the host's actors; must not fail or send."""

"""ActorContext: everything an actor (and a layer built on actors) may ask of the host running it."""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from typing import TYPE_CHECKING, NoReturn, Protocol, TypeVar

if TYPE_CHECKING:
    from .actor import Actor
    from .messages import Scatter
    from .thespian_types import Address
    from .timers import Timer

_T = TypeVar("_T")


class ActorContext(Protocol):
    """What `Actor.context` offers: the host that runs the actor, seen through its public seam.

    One host runs a top-level actor or all the entities under one path, so one context is shared by
    all of them; calls that act on one actor take it (or its path) as an argument. Persistence and the
    Spark bridge use only this, never the host itself. The host implements it with plain methods and
    attributes: calling through the context costs what calling the host did.
    """

    @property
    def path(self) -> str:
        """The path the host was spawned at: the actor's own path, or the parent of its entities.

        The sender of messages the host sends for all its actors at once (per-round summaries).
        """

    @property
    def key(self) -> str:
        """What the system calls this host: its path, or the shard's name for one shard of a sharded host."""

    @property
    def shards(self) -> int:
        """How many shards serve the host's path (1 unless spawned with shards=N)."""

    @property
    def shard(self) -> int:
        """Which of the `shards` this host is (0 for a host that is not sharded)."""

    @property
    def config(self) -> Mapping[str, object]:
        """The actor system's configuration, with this host's own host options (actors.host_options)."""

    @property
    def entities(self) -> Mapping[str, Actor]:
        """The live actors of this host by path (read only): an instance not here was replaced or stopped."""

    def route(self, sender: str | None, target: str, message: object) -> None:
        """Send `message` to the actor at `target` as `sender` (what `Actor.tell` does, with any sender)."""

    def route_to_self(self, actor: Actor, message: object) -> None:
        """Queue `message` for `actor` itself: it stays in this process, so it is not checked for pickling (an
        actor's own notices, such as a warning that quotes a message, must not fail it)."""

    def scatter(self, sender: str | None, targets: list[str],
                chunk: Callable[[list[int] | None], Scatter]) -> None:
        """Send messages for many `targets` as one Scatter per host serving them (order kept per destination).

        `chunk(indices)` builds the Scatter for the targets at those indices (None: all of them).
        """

    def dead_letter(self, sender: str | None, target: str, message: object, reason: str) -> None:
        """Record `message` as undeliverable to `target` (counted and observable through the guardian)."""

    def schedule(self, delay: float, interval: float | None, message: object, owner: Actor) -> Timer:
        """Deliver `message` to `owner` after `delay` s, then every `interval` s unless None; cancellable."""

    def resolve(self, path: str) -> tuple[str, Address] | None:
        """The host serving `path` as (its key, its address), or None when no host serves it."""

    def watch_routes(self, actor: Actor) -> None:
        """Call `actor.routes_lost(prefixes)` whenever hosts it may have sent to die (actors.lifecycle)."""

    def on_settle(self, hook: Callable[[], bool]) -> None:
        """Call `hook()` whenever the host has drained its local work; it returns True if it did some.

        The host calls its hooks again until none did work, then sends what is queued: a hook can
        batch what the actors did during one round (one journal write, one message per destination).
        """

    def report_error(self, path: str, reason: str, asker: str | None = None,
                     error: BaseException | None = None) -> bool:
        """Record an error inside the actor at `path` (`system.errors()`, `reprise status`).

        With `error` and an asking client as `asker`, that ask fails at once with the error (ActorFailed).
        False when the error was only counted: past 100 errors a second, a host reports them as a count.
        """

    def report_failure(self, actor: Actor, error: BaseException, message: object, sender: str | None) -> None:
        """`actor` failed with `error` on `message` outside `receive` (a callback): as if receive raised it.

        The host records it and restarts the actor (or stops it after too many restarts).
        """

    def stop_entity(self, actor: Actor, reason: str) -> None:
        """Stop `actor` now (its post_stop runs); "stopped" is a clean stop, any other reason a failure."""

    def extension(self, key: Hashable, factory: Callable[[ActorContext], _T]) -> _T:
        """The object kept under `key` for this host, made by `factory(context)` on first use.

        How a layer keeps per-host shared state (persistence's group-commit coordinator) without
        reaching into the host: it lives as long as the host.
        """


class _Detached:
    """The context of an actor no host runs: every use says how to run it instead."""

    def __getattr__(self, name: str) -> NoReturn:
        raise RuntimeError(f"this actor is not running in an actor system, so it has no context (asked "
                           f"for {name!r}): spawn it with system.spawn(cls, path=...) instead of calling "
                           "the class; its host sets `context` before pre_start")

    def __repr__(self) -> str:
        return "<no context: not running in an actor system>"


DETACHED: ActorContext = _Detached()  # its __getattr__ fails every use, on purpose

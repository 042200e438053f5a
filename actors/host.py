"""Host actors: one Thespian actor (one OS process on multiproc) serving one actor or many entities."""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import sys
import time
import traceback
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, TypeVar, cast

from thespian.actors import (
    Actor as ThespianActor,
)
from thespian.actors import (
    ActorExitRequest,
    ChildActorExited,
    DeadEnvelope,
    PoisonMessage,
    WakeupMessage,
)

from . import thespian_fixes
from .actor import Actor
from .context import ActorContext
from .error_log import ErrorThrottle, ask_failure, is_ask, make_error, one_line
from .errors import RepriseError, SpawnFailed
from .handover import POKE, Handover
from .host_options import apply_host_options
from .inflight import BOUNCED, FAILED, InFlight, not_taken
from .messages import (
    GUARDIAN_PATH,
    ActorBackingOff,
    ActorRestarted,
    Barrier,
    Batch,
    DeadLetter,
    DirectoryUpdate,
    EntityStopped,
    GetHostStats,
    HostDone,
    HostReady,
    HostSpec,
    HostStats,
    InitHost,
    RoutesLost,
    Scatter,
    ShardSet,
    StopEntity,
)
from .metrics import host_histograms
from .paths import entity_shard, shard_of
from .supervision import PARENT_WAKEUP, ParentWatch, exit_if_orphaned_before
from .thespian_types import Address, Intent
from .timers import Timer, TimerQueue
from .transport import Entry, Outbox, Router, address_key, check_message, route_keys, unpack
from .validation import missing_class_hint

log = logging.getLogger("reprise.host")
_T = TypeVar("_T")

_SWEEP = "reprise-sweep"
_LINGER = "reprise-linger"
_ERRORS = "reprise-errors"  # the wakeup that reports errors counted in a flood (ErrorThrottle)
_DRAIN = "reprise-drain"  # the wakeup that resumes a settle that yielded (Host.settle)
_RESTART = "reprise-restart"
# Seconds one settle may run local deliveries and settle hooks (group commits) before it yields to the
# host's mailbox: an entity that keeps telling itself (or a handler loop persisting one event per command)
# must not hold back other senders' batches, timers, status requests or exit requests.
_SETTLE_SLICE = 0.05
# The slice of a settle that starts while an earlier one waits to resume (a message arrived in between):
# short, so that what that message caused (a reply) leaves soon, not after a whole slice of the loop.
_SHORT_SLICE = 0.005
# The yield's wakeup delay. Thespian (TCP) handles a wakeup already due before it polls its sockets again, so
# the delay must outlast the way back to its poll (tens of µs); the poll then waits at most this long when
# nothing else arrived: <= 1% of a busy host's time.
_YIELD_WAIT = 0.0005
# The clock is read once per this many local deliveries in a row (and once per round of settle hooks).
_CLOCK_EVERY = 256
# A table host remembers this many entity paths (path -> id) before it starts over: ~200 bytes each, 10 MB.
_TABLE_IDS_KEPT = 50_000
# A wakeup this late (s) is taken as lost (see Host._rearm_lost_wakeups); Thespian's are ~1 ms late.
_WAKEUP_GRACE = 1.0
# The attribute an exception may carry to name the message it failed on, when it is raised while handling a later
# one (persistence: a RecoveryCompleted handler's failure, raised by the restart that follows it).
FAILED_ON = "reprise_failed_on"
# Why a top-level actor stopped when it was not a failure (any other reason is one: its host restarts).
_CLEAN_STOPS = frozenset({"stopped", "stopped by request"})


def resolve_factory(factory: Any) -> Any:
    """Turn "package.module:Class" into the class; classes and callables pass through."""
    if not isinstance(factory, str):
        return factory
    module, _, attr = factory.partition(":")
    try:
        obj = importlib.import_module(module)
    except ModuleNotFoundError as e:
        # Only the named module (or a package of its name) missing says it all; a missing import *inside* the
        # user's module keeps its traceback, which points at the line to fix.
        if e.name is None or not (module == e.name or module.startswith(e.name + ".")):
            raise
        raise SpawnFailed(f"cannot import {factory!r}: no module named {e.name!r} in the host process (its "
                          f"sys.path starts {sys.path[:3]!r}); run from the directory that holds it or add "
                          "that directory to PYTHONPATH") from None
    for i, part in enumerate(attr.split(".")):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            owner = ".".join([module, *attr.split(".")[:i]])
            raise SpawnFailed(f"cannot import {factory!r}: {owner} has no attribute {part!r}"
                              f"{missing_class_hint(obj, part)}") from None
    return obj


class Host:
    """The runtime inside one host actor: entities, routing, outbox, timers, passivation, restarts.

    It is the `ActorContext` of its actors (actors/context.py), and drives them only through the
    calls of `actors.lifecycle.Lifecycle`.
    """

    def __init__(self, adapter: Any, init: InitHost, my_address: Address) -> None:
        spec: HostSpec = init.spec
        self.adapter = adapter
        self.spec = spec
        self.path = spec.path
        self.key = spec.key  # the path, or the path and shard number: what the guardian and peers call us
        self.shards = spec.shards
        self.shard = spec.shard
        self.config = init.config
        self.factory = resolve_factory(spec.factory)  # first: importing it registers its layer's host options
        # Entities whose class overrides Actor.receive_batch get their messages of a batch in one call.
        self.batching = (spec.entities and isinstance(self.factory, type) and issubclass(self.factory, Actor)
                         and self.factory.receive_batch is not Actor.receive_batch)
        # One that overrides Actor.receive_entities serves every entity below the path in one instance, at the
        # path (a table of entities, persistence.EntityTable): every delivery goes through _table_batch.
        self.table = (spec.entities and isinstance(self.factory, type) and issubclass(self.factory, Actor)
                      and self.factory.receive_entities is not Actor.receive_entities)
        self._table_stopped: str | None = None  # why the table last stopped (see start)
        if spec.options:
            self.config = self._own_options(spec)
        self.router = Router()
        self.router.replace(init.routes, init.epoch)
        self.my_key = address_key(my_address)
        self.router.learn(self.key, my_address)
        # ActorContext.resolve: the router's own bound method, so a lookup costs no extra call.
        self.resolve = self.router.resolve
        self.outbox = Outbox(self.key, adapter.send_in_order, self._unpicklable, spec.batch_cap)
        self.entities: OrderedDict[str, Actor] = OrderedDict()
        self.local: deque[Entry] = deque()
        self.timers = TimerQueue()
        self._armed: set[float] = set()  # due times of the timer wakeups asked of Thespian
        self._firing = False  # in on_wakeup's ticks and their settle: _arm waits until they are done
        self._sweep_armed = False
        self._sweep_due = 0.0
        self._linger_armed = False
        self._linger_due = 0.0
        self._drain_armed = False
        self._drain_due = 0.0
        self._restarts: dict[str, deque[float]] = {}
        self._incarnations = itertools.count(1)
        self._errors = ErrorThrottle()
        self._settle_hooks: list[Callable[[], bool]] = [self._flush_errors]
        self._extensions: dict[Any, Any] = {}
        self.now = time.monotonic()
        self.done = False
        self.failed = False  # the single top-level actor failed while starting: the guardian restarts this host
        self.started = False
        # A top-level actor that fails once running is restarted here, after its backoff delay, with
        # its messages held meanwhile: no process exit, so nothing sent to this process is lost.
        self.backing_off = False
        self.held: deque[Entry] = deque()
        self.in_a_row = 0
        self.running_since = time.monotonic()
        self.entity_prefix = self.path + "/"
        self._route_watchers: weakref.WeakSet[Actor] = weakref.WeakSet()
        guardian = self.router.routes.get(GUARDIAN_PATH)
        self._guardian_key = guardian[0] if guardian else None
        self.handover = Handover(self)
        # Messages received from / sent to other processes (metrics): one int add per message or batch.
        self.messages_in = 0
        self.messages_out = 0
        # A table host's entity id by the path of each entity it got a message for (_scattered_ids), bounded.
        self._table_ids: dict[str, str] = {}
        if self.table:
            # Local deliveries and held messages too (settle, the guardian's batches): one path for all.
            self.deliver = self._deliver_to_table  # type: ignore[method-assign]

    def stats(self, token: int) -> HostStats:
        """How many actors are alive here and the sums of their `stats()` counters."""
        counters: dict[str, int] = {}
        for entity in self.entities.values():
            try:
                for name, value in entity.stats().items():
                    counters[name] = counters.get(name, 0) + value
            except Exception:  # a broken stats() must not break the status of the whole system
                log.exception("stats() of %s failed", entity.path)
        return HostStats(token, self.key, len(self.entities), counters, self.messages_in, self.messages_out,
                         host_histograms(self._extensions), self.handover.parked())

    # ---- starting ------------------------------------------------------------------------------
    def start(self) -> None:
        """Create the single top-level actor now (entities are created on their first message)."""
        # A journal that cannot be opened fails the spawn now, not every message later (persistence's hook).
        # A factory that is not an Actor class (a function making one) has no such hook.
        open_resources = getattr(self.factory, "open_resources", None)
        if callable(open_resources):
            open_resources(self.config)
        if not self.spec.entities:
            if isinstance(self.factory, type) and issubclass(self.factory, Actor) \
                    and self.factory.receive_entities is not Actor.receive_entities:
                raise SpawnFailed(f"{self.factory.__qualname__} serves the entities below its path in one instance "
                                  f"(it overrides receive_entities): spawn it with entities=True")
            actor = self._new_instance(self.path)
            actor.around_pre_start()
            self.started = True
            self.settle()
        elif self.table:
            # Started (and recovered) now: a table that cannot start fails the spawn, not its first message.
            if self._table() is None:
                raise SpawnFailed(f"the entity table {self.key} ({self.spec.factory}) failed to start: "
                                  f"{self._table_stopped or 'system.errors() and the host log say why'}")
            self.settle()
        else:
            self._wake_remembered()

    def _wake_remembered(self) -> None:
        """Start now the entities the factory's `entities_to_wake(config, path)` names (ids), if it has that hook:
        an entity with work of its own to resume (deliveries to resend) must not wait for a message that may
        never come (persistence's AtLeastOnceDelivery; Akka's remember-entities)."""
        wake = getattr(self.factory, "entities_to_wake", None)
        if not callable(wake):
            return
        woken = 0
        for entity_id in wake(self.config, self.path):
            target = self.entity_prefix + entity_id
            if target in self.entities or "/" in entity_id or (
                    self.spec.shards > 1 and shard_of(target, self.path, self.spec.shards) != self.spec.shard):
                continue
            woken += isinstance(self._start_entity(target), Actor)
        if woken:
            log.info("host %s started %d entities to resume their own work", self.key, woken)
            self.settle()

    def _own_options(self, spec: HostSpec) -> dict[str, object]:
        """The config with this host's own options (per shard where they say {shard}), checked here.

        Here, not only in the caller: the caller may never have imported the layer that owns an option
        (a factory given as "module:Class"); this process just did, by importing the factory.
        """
        try:
            return apply_host_options(spec.path, spec.shard, spec.shards, self.config, spec.options)
        except ValueError as e:
            raise SpawnFailed(str(e)) from None

    def watch_routes(self, actor: Actor) -> None:
        """Call `actor.routes_lost(prefixes)` when hosts it may have sent to die (see `update_routes`)."""
        self._route_watchers.add(actor)

    def update_routes(self, routes: dict[str, Address | ShardSet], epoch: int, my_address: Address) -> None:
        """Install a directory update; tell watchers which hosts died since the last one.

        A prefix is lost when its host's address gives way to another (the guardian holding messages for
        it while it restarts, or its new process): what was sent to the old process and not handled died
        with it. Resenders (AtLeastOnceDelivery) resend at once instead of after their redeliver interval.
        """
        before = self.router.routes
        guardian = before.get(GUARDIAN_PATH)
        self.router.replace(routes, epoch)
        self.router.learn(self.key, my_address)
        if self.router.routes is not before:
            self.handover.routes_changed(before, self.router.routes, self._guardian_key)
        if not self._route_watchers or self.router.routes is before:
            return
        ignore = {self.my_key, guardian[0] if guardian else None}
        now = self.router.routes
        # (A prefix respawned with another shard count compares its common shards: strict=False.)
        lost = [prefix for prefix, old in before.items() if prefix in now and any(
            k not in ignore and k != new for k, new in zip(route_keys(old), route_keys(now[prefix]), strict=False))]
        if lost:
            for actor in list(self._route_watchers):
                if self.entities.get(actor.path) is actor:
                    try:
                        actor.routes_lost(lost)
                    except Exception as exc:  # (a user hook, e.g. should_redeliver: fails that actor only)
                        self.report_failure(actor, exc, RoutesLost(tuple(lost)), None)
            self.settle()

    def on_settle(self, hook: Callable[[], bool]) -> None:
        """Register `hook()`, called whenever local work is drained; it returns True if it did work."""
        self._settle_hooks.append(hook)

    def extension(self, key: Any, factory: Callable[[ActorContext], _T]) -> _T:
        """The object kept under `key` for this host, made by `factory(self)` on first use."""
        ext = self._extensions.get(key)
        if ext is None:
            ext = self._extensions[key] = factory(self)
        return ext

    # ---- sending -------------------------------------------------------------------------------
    def route_to_self(self, actor: Actor, message: object) -> None:
        """See ActorContext.route_to_self."""
        self.local.append((actor.path, actor.path, message))

    def route(self, sender: str | None, target: str | None, message: object) -> None:
        """Queue `message` for `target`: local entities directly, others in the batched outbox."""
        check_message(message)
        if target is None:
            self.dead_letter(sender, "<no sender>", message, "reply to a message that had no sender")
            return
        hit = self.router.resolve(target)
        if hit is None:
            # Unknown here: the guardian has the authoritative directory (or records a dead letter).
            hit = cast("tuple[str, Address]", self.router.resolve(GUARDIAN_PATH))
        if hit[0] == self.my_key:
            self.local.append((sender, target, message))
        else:
            entry = (sender, target, message)
            if self.handover.pending and self.handover.park(entry):
                return  # its destination restarted: earlier messages to it land first (actors/handover.py)
            if hit[0] == self._guardian_key:
                self.handover.note_guardian(target)
            self.messages_out += 1
            self.outbox.add(hit[0], hit[1], entry)

    def scatter(self, sender: str | None, targets: list[str], chunk: Callable[[list[int] | None], Scatter]) -> None:
        """Send messages for many `targets` as one Scatter per host serving them.

        `chunk(indices)` builds the Scatter for the targets at those indices (None: all of them, the
        common case of a single destination host). Order is kept per destination, as with `route`.
        """
        if self.handover.pending:  # a destination is being handed over: message by message, parked if need be
            for target, message in chunk(None).items():
                self.route(sender, target, message)
            return
        resolve = self.router.resolve
        groups: dict[str, tuple[Address, list[int]]] = {}
        for i, target in enumerate(targets):
            hit = resolve(target) or cast("tuple[str, Address]", resolve(GUARDIAN_PATH))  # unknown here: the guardian decides
            group = groups.get(hit[0])
            if group is None:
                group = groups[hit[0]] = (hit[1], [])
            group[1].append(i)
        for key, (address, indices) in groups.items():
            message = chunk(None if len(groups) == 1 else indices)
            if key == self.my_key:
                self.local.extend([(sender, t, m) for t, m in message.items()])
            else:
                if key == self._guardian_key:
                    # Every target: they may be of several hosts (restarting, or unknown here), and each of them needs
                    # its handover when its route changes. Only while hosts restart or first start: 7.5 ms for 10k
                    # targets of restarting hosts, 16 ms for 10k unknown here (bench: 1 ms to group them).
                    note = self.handover.note_guardian
                    for i in indices:
                        note(targets[i])
                self.messages_out += len(indices)
                self.outbox.add(key, address, (sender, targets[indices[0]], message))

    def dead_letter(self, sender: str | None, target: str, message: object, reason: str) -> None:
        """Report an undeliverable message to the guardian (counted, logged, observable)."""
        log.debug("dead letter to %s from %s: %s", target, sender, reason)
        self.route(self.path, GUARDIAN_PATH, DeadLetter(sender, target, message, reason))

    def report_error(self, path: str, reason: str, asker: str | None = None,
                     error: BaseException | None = None) -> bool:
        """Record an error inside the actor at `path` with the guardian (`system.errors()`, `reprise status`).

        With `error` and an asking client as `asker`, that ask fails at once with the error (ActorFailed).
        Returns False when the error was only counted (a flood of them: see ErrorThrottle).
        """
        errors = self._errors
        reported = errors.admit(time.monotonic())
        if reported:
            self.route(path, GUARDIAN_PATH, make_error(self.key, path, reason, self._suppressed(errors)))
        elif errors.suppressed == 1:  # the first one counted: report the count even if no error follows
            self.adapter.wakeup_after(errors.window, _ERRORS)
        if error is not None and is_ask(asker):  # an asker waits for its answer: never throttled
            self.route(path, asker, ask_failure(path, error))
        return reported

    def _suppressed(self, errors: ErrorThrottle) -> int:
        n = errors.take_suppressed()
        if n:
            log.error("host %s: %d more errors inside its actors were counted, not logged one by one "
                      "(over %d per %g s)", self.key, n, errors.burst, errors.window)
        return n

    def _flush_errors(self) -> bool:
        """Report the errors counted in a flood that has stopped (a settle hook)."""
        errors = self._errors
        if not errors.suppressed or not errors.due(time.monotonic()):  # (runs at every settle: no clock read)
            return False
        n = self._suppressed(errors)
        self.route(self.path, GUARDIAN_PATH, make_error(
            self.key, self.path, f"{n} more errors inside this host's actors, counted but not reported one by one "
                                 f"(over {errors.burst} per {errors.window:g} s; see the host's log)", n - 1))
        return True

    def _unpicklable(self, entry: Entry, why: str) -> None:
        sender, target, message = entry
        log.error("message %s from %s to %s %s", type(message).__name__, sender, target, why)
        self.dead_letter(sender, target, repr(message), f"message {why}")

    def _unreadable(self, entry: Entry, why: str) -> None:
        sender, target, description = entry
        log.error("message %s from %s to %s %s", description, sender, target, why)
        self.dead_letter(sender, target, description, f"message {why}")

    # ---- receiving -----------------------------------------------------------------------------
    def on_batch(self, batch: Batch, thespian_sender: Address) -> None:
        """Dispatch every entry of an incoming batch, in order, then settle."""
        if batch.origin != self.key:
            learned = self.router.learn(batch.origin, thespian_sender)
            if learned is not None:
                # Ahead of the directory: a host's first message after its (first) start may come before the
                # route update. What we sent it the longer way must still land first (actors/handover.py).
                self.handover.learned(batch.origin, *learned, self._guardian_key)
        self.now = time.monotonic()
        deliver = self.deliver
        # An entity table takes a Scatter's rows in bulk (_table_batch); everything else sees them expanded.
        bulk = self.table and batch.origin != GUARDIAN_PATH
        entries = unpack(batch, self._unreadable, expand=not bulk)
        self.messages_in += len(entries)
        if bulk:
            self._table_batch(entries)
        elif batch.origin == GUARDIAN_PATH:
            # Held and rerouted messages; a Barrier behind them goes back to its sender, to no actor.
            for sender, target, message in entries:
                if type(message) is not Barrier:
                    deliver(sender, target, message)
                else:
                    self.on_barrier(sender, target, message, passing=True)
        elif self.batching:
            groups: dict[str, list[tuple[Any, str | None]]] = {}
            for sender, target, message in entries:
                if type(message) is Barrier:  # (one of ours back: see on_barrier)
                    self.on_barrier(sender, target, message, passing=False)
                    continue
                group = groups.get(target)
                if group is None:
                    groups[target] = [(message, sender)]
                else:
                    group.append((message, sender))
            for target, messages in groups.items():
                self.deliver_batch(target, messages)
        else:
            # deliver and _invoke inlined for an entity that exists (once per message in a host of many entities)
            entities = self.entities
            get = entities.get
            move_to_end = entities.move_to_end if self.spec.passivate_after is not None else None
            now = self.now
            for sender, target, message in entries:
                if type(message) is Barrier:  # (one of ours back: see on_barrier)
                    self.on_barrier(sender, target, message, passing=False)
                    continue
                entity = get(target)
                if entity is None:
                    deliver(sender, target, message)  # (made on first use)
                    continue
                if move_to_end is not None:
                    move_to_end(target)
                entity._last_active = now
                try:
                    entity.receive(message, sender)
                except Exception as exc:
                    self.report_failure(entity, exc, message, sender)
                    continue
                if entity._stopping:
                    self.stop_entity(entity, "stopped")
        self.settle()

    def on_barrier(self, sender: str | None, target: str, barrier: Barrier, passing: bool) -> None:
        """A Barrier arrived: one of ours back (actors/handover.py), or, `passing` (from the guardian), one to
        send back to its sender. Never an actor's message: every path of on_batch looks for them."""
        # Ours back comes straight from the host it went to, or through the guardian (that host could not reach
        # us); its handover may have ended long ago (expired, restarted), and its token is forgotten then: what
        # recognises it is its origin, and a Barrier not recognised reached an actor as a user message.
        # (An earlier process's may come back through the guardian too, from a path on another host: sent on
        # there, it was dropped as "not ours" by that host.)
        if self.handover.barrier_back(barrier) or self.handover.earlier_process(barrier):
            return
        if passing:
            back = self.router.resolve(sender) if sender is not None else None
            if back is None or back[0] != self.my_key:  # (sent back to a path here, it would reach an actor)
                self.route(target, sender, barrier)
                return
        log.warning("host %s: dropped a Barrier for %s that is not ours", self.key, target)

    def deliver(self, sender: str | None, target: str, message: object) -> None:
        """Hand one message to the entity at `target`, creating it on first use."""
        entity = self.entities.get(target)
        if entity is None:
            entity = self._materialize(sender, target, message)
            if entity is None:
                return
        elif self.spec.passivate_after is not None:
            self.entities.move_to_end(target)
        entity._last_active = self.now
        self._invoke(entity, message, sender)

    def deliver_batch(self, target: str, messages: list[tuple[Any, str | None]]) -> None:
        """Hand (message, sender) pairs in order to the entity at `target` through its receive_batch, with
        what `deliver` does per message: a failure restarts it and the rest go to the new instance."""
        entities = self.entities
        n = len(messages)
        start = 0
        while start < n:
            entity = entities.get(target)
            if entity is None:
                message, sender = messages[start]
                entity = self._materialize(sender, target, message)
                if entity is None:  # dead-lettered or rerouted: the next message decides again
                    start += 1
                    continue
            elif self.spec.passivate_after is not None:
                entities.move_to_end(target)
            entity._last_active = self.now
            taken = [start]
            try:
                entity.receive_batch(_feed(messages, taken, entity, entities, target))
            except Exception as exc:
                at = max(taken[0], start + 1) - 1  # (a failure before taking any is the first message's)
                message, sender = messages[at]
                self.report_failure(entity, exc, message, sender)
                start = at + 1
                continue
            if entity._stopping:
                self.stop_entity(entity, "stopped")
            elif taken[0] < n and entities.get(target) is entity:
                # It returned without taking them all: they must not be lost, so receive gets them.
                log.warning("%s.receive_batch returned with %d of its messages not taken: delivered one by one",
                            type(entity).__name__, n - taken[0])
                for message, sender in messages[taken[0]:]:
                    self.deliver(sender, target, message)
                return
            start = taken[0]

    # ---- a table of entities (Actor.receive_entities) -------------------------------------------
    def _deliver_to_table(self, sender: str | None, target: str, message: object) -> None:
        """`deliver` of a table host: one message, the way a batch's are."""
        self._table_batch([(sender, target, message)])

    def _table_batch(self, entries: list[Entry]) -> None:
        """Hand the entities' messages of `entries` to the table in one call, in order; a message to the
        table's own path goes to its `receive` in between, and one for no entity of this host elsewhere."""
        prefix, n = self.entity_prefix, len(self.entity_prefix)
        shards, shard = self.spec.shards, self.spec.shard
        items: list[tuple[str, Any, str | None]] = []
        for sender, target, message in entries:
            if isinstance(message, Scatter):
                targets, messages = message.targets_and_messages()
                self.messages_in += len(targets) - 1
                # The bridge's chunks: every row for an entity of this host, in bulk (a tuple per row, no more).
                ids = self._scattered_ids(targets)
                if ids is not None:
                    items.extend(zip(ids, messages, itertools.repeat(sender)))
                else:  # one by one, as if expanded where it arrived
                    if items:
                        self._hand_to_table(items)
                        items = []
                    self._table_batch([(sender, t, m) for t, m in zip(targets, messages, strict=True)])
                continue
            if type(message) is Barrier:  # (one of ours back, in a batch taken in bulk: see on_barrier)
                self.on_barrier(sender, target, message, passing=False)
                continue
            if target.startswith(prefix):
                entity_id = target[n:]
                if not entity_id or "/" in entity_id:
                    self.dead_letter(sender, target, message,
                                     f"no entity at {target}: entity ids are one non-empty path segment")
                elif shards == 1 or entity_shard(entity_id, shards) == shard:
                    items.append((entity_id, message, sender))
                else:  # another shard's entity (a stale route): the guardian reroutes it
                    hit = cast("tuple[str, Address]", self.router.resolve(GUARDIAN_PATH))
                    self.outbox.add(hit[0], hit[1], (sender, target, message))
                continue
            if items:
                self._hand_to_table(items)
                items = []
            if target == self.path:
                table = self._table() if not self.done else None
                if self.done:  # (stopped: see _materialize)
                    self.dead_letter(sender, target, message, f"entity host {self.key} stopped")
                elif table is None:
                    self.dead_letter(sender, target, message, f"entity table {self.key} failed to start")
                else:
                    table._last_active = self.now
                    self._invoke(table, message, sender)
            else:
                self._materialize(sender, target, message)  # not ours: rerouted through the guardian
        if items:
            self._hand_to_table(items)

    def _scattered_ids(self, targets: Sequence[str]) -> list[str] | None:
        """The entity ids of `targets`, or None unless every one is an entity of this host (shard)."""
        known = self._table_ids
        try:
            # (a path seen before: one lookup in C, and an id whose hash is cached for the table's own lookups)
            return list(map(known.__getitem__, targets))
        except KeyError:
            pass
        prefix, n = self.entity_prefix, len(self.entity_prefix)
        shards, shard = self.spec.shards, self.spec.shard
        ids = [t[n:] for t in targets]
        if not (all(map(str.startswith, targets, itertools.repeat(prefix))) and "" not in ids
                and "/" not in "".join(ids)
                and (shards == 1 or set(map(entity_shard, ids, itertools.repeat(shards))) == {shard})):
            return None
        if len(known) > _TABLE_IDS_KEPT:
            known.clear()
        known.update(zip(targets, ids, strict=True))
        return ids

    def _hand_to_table(self, items: list[tuple[str, Any, str | None]]) -> None:
        if self.done:  # (stopped: see _materialize)
            for entity_id, message, sender in items:
                self.dead_letter(sender, self.entity_prefix + entity_id, message, f"entity host {self.key} stopped")
            return
        table = self._table()
        if table is None:
            for entity_id, message, sender in items:
                self.dead_letter(sender, self.entity_prefix + entity_id, message,
                                 f"entity table {self.key} failed to start (system.errors() says why)")
            return
        table._last_active = self.now
        try:
            table.receive_entities(items)
        except Exception as exc:
            _, message, sender = items[-1]
            self.report_failure(table, exc, message, sender)
            return
        if table._stopping:
            self.stop_entity(table, "stopped")

    def _table(self) -> Actor | None:
        """The table instance at the host's path, started (and recovered) if there is none; None if it fails."""
        table = self.entities.get(self.path)
        if table is not None:
            return table
        table = self._new_instance(self.path)
        try:
            table.around_pre_start()
        except Exception as exc:
            log.exception("entity table %s failed in pre_start", self.key)
            self._drop(table, "failed to start")
            self.report_error(self.path, f"failed to start: {one_line(exc)}")
            self._table_stopped = one_line(exc)
            return None
        return self.entities.get(self.path)  # (None if it stopped while starting: its recovery failed)

    def _materialize(self, sender: str | None, target: str, message: object) -> Actor | None:
        if self.done and self.spec.entities:
            # The host stopped (shutdown dropped every entity): what its entities' post_stop sent one another
            # started a new instance that no one stopped (its pre_start ran, a persistent one recovered, and
            # its post_stop never did).
            self.dead_letter(sender, target, message, f"entity host {self.key} stopped")
            return None
        if self.spec.entities and target.startswith(self.entity_prefix):
            if "/" in target[len(self.entity_prefix):]:
                self.dead_letter(sender, target, message, f"no entity at {target}: entity ids are one path segment")
                return None
            if self.spec.shards > 1 and shard_of(target, self.path, self.spec.shards) != self.spec.shard:
                # Another shard's entity (a stale route): one instance per entity, so the guardian reroutes it.
                hit = cast("tuple[str, Address]", self.router.resolve(GUARDIAN_PATH))
                self.outbox.add(hit[0], hit[1], (sender, target, message))
                return None
            started = self._start_entity(target, sender)
            if isinstance(started, Actor):
                return started
            self.dead_letter(sender, target, message, f"entity failed to start: {started!r}")
            return None
        if self.backing_off and target == self.path:
            if len(self.held) < self.spec.hold_limit:
                self.held.append((sender, target, message))
            else:
                self.dead_letter(sender, target, message,
                                 f"host {self.key} is backing off; hold limit {self.spec.hold_limit} reached")
            return None
        if self.failed and target == self.path:
            # Our actor failed and this host is about to be replaced: the guardian holds this for the next.
            hit = cast("tuple[str, Address]", self.router.resolve(GUARDIAN_PATH))
            self.outbox.add(hit[0], hit[1], (sender, target, message))
            return None
        if target == self.path or target.startswith(self.entity_prefix):
            # The single actor here has stopped, or the path is below a single actor.
            self.dead_letter(sender, target, message, f"no actor at {target}")
            return None
        # Not ours (a stale route, or a reused port): the guardian knows where it lives now.
        hit = cast("tuple[str, Address]", self.router.resolve(GUARDIAN_PATH))
        self.outbox.add(hit[0], hit[1], (sender, target, message))
        return None

    def _start_entity(self, target: str, sender: str | None = None) -> Actor | Exception:
        """Create the entity at `target` and run its pre_start; what it raised instead (reported)."""
        entity = self._new_instance(target)
        try:
            entity.around_pre_start()
        except Exception as exc:
            log.exception("entity %s failed in pre_start", target)
            self._drop(entity, "failed to start")
            self.report_error(target, f"failed to start: {one_line(exc)}", sender, exc)
            return exc
        self._arm_sweep()
        return entity

    def _new_instance(self, path: str) -> Actor:
        spec = self.spec
        entity = self.factory(*spec.args, **spec.kwargs)
        if not isinstance(entity, Actor):
            raise TypeError(f"{spec.factory!r} made a {type(entity).__name__}, not an actors.Actor")
        entity.path = path
        entity.context = self
        entity._incarnation = next(self._incarnations)
        entity._last_active = self.now
        self.entities[path] = entity
        return entity

    def _invoke(self, entity: Actor, message: Any, sender: str | None) -> None:
        # (on_batch's loop for a host of many entities has this and `deliver` inlined: change it with them)
        try:
            entity.receive(message, sender)
        except Exception as exc:
            self.report_failure(entity, exc, message, sender)
            return
        if entity._stopping:
            self.stop_entity(entity, "stopped")

    def report_failure(self, entity: Actor, exc: BaseException, message: object, sender: str | None) -> None:
        """`entity` failed with `exc` on `message`: record it, then restart it (or stop it after too many)."""
        path = entity.path
        # (a layer that raises a failure of an earlier message later names that message: FAILED_ON)
        on = getattr(exc, FAILED_ON, None) or type(message).__name__
        if self.report_error(path, f"failed on {on}: {one_line(exc)}", sender, exc):
            # The traceback of `exc` itself: a layer may report a failure outside any except block.
            log.error("actor %s failed on %s: %s\n%s", path, on, exc, "".join(traceback.format_exception(exc)))
        window = self._restarts.setdefault(path, deque())
        window.append(self.now)
        while window and window[0] < self.now - self.spec.restart_window:
            window.popleft()
        if len(window) > self.spec.max_restarts:
            log.error("actor %s restarted more than %d times in %.0f s: stopping it",
                      path, self.spec.max_restarts, self.spec.restart_window)
            self.report_error(path, f"stopped: restarted more than {self.spec.max_restarts} times in "
                                    f"{self.spec.restart_window:.0f} s")
            self.stop_entity(entity, "too many restarts")
            return
        carryover = entity.restart_carryover()
        try:
            entity.pre_restart(exc, message)
        except Exception:
            log.exception("pre_restart of %s failed", path)
        self._cancel_timers(entity)
        fresh = self._new_instance(path)
        if self.spec.passivate_after is not None:
            # (it took the old instance's place in the order, but is as recent as can be: last, for the sweep)
            self.entities.move_to_end(path)
        try:
            fresh.around_post_restart(exc)
        except Exception as exc2:
            log.exception("actor %s failed while restarting", path)
            self.report_error(path, f"stopped: failed while restarting: {one_line(exc2)}")
            self.stop_entity(fresh, f"failed to restart: {exc2!r}")
            return
        for i, (carried, carried_sender) in enumerate(carryover):
            # A carried message that fails the new instance too restarts it again: the rest go to the instance
            # after it (Akka loses only the failing message), and become dead letters if the actor stopped.
            current = self.entities.get(path)
            if current is None:
                for message_, sender_ in carryover[i:]:
                    self.dead_letter(sender_, path, message_, "actor stopped while restarting")
                break
            self._invoke(current, carried, carried_sender)

    # ---- stopping ------------------------------------------------------------------------------
    def stop_entity(self, entity: Actor, reason: str) -> None:
        """Remove `entity` (post_stop runs); a single top-level actor stopping ends its host."""
        if self.entities.get(entity.path) is not entity:
            return
        if self.table and entity.path == self.path:
            self._table_stopped = reason  # (why a table that stopped while starting failed its spawn)
        self._drop(entity, reason)
        self._post_stop(entity)
        if not self.spec.entities and not self.done:
            failed = reason not in _CLEAN_STOPS
            if failed and self.started:
                self._back_off(reason)
                return
            self.done = True
            self.failed = failed
            self.adapter.host_done(self.key, reason if failed else None)

    def _back_off(self, reason: str) -> None:
        """The top-level actor failed: restart it here after its backoff delay (or give up)."""
        backoff = self.spec.backoff
        if time.monotonic() - self.running_since >= backoff.stable_after:
            self.in_a_row = 0
        if backoff.max_restarts is not None and self.in_a_row >= backoff.max_restarts:
            log.error("actor %s failed (%s) after %d restarts in a row: giving up", self.path, reason, self.in_a_row)
            self.done = True
            self.adapter.host_done(self.key, f"{reason} (gave up after {self.in_a_row} restarts)", gave_up=True)
            self._release_held(f"actor at {self.path} failed: {reason}")
            return
        delay = backoff.delay(self.in_a_row)
        self.in_a_row += 1
        self.backing_off = True
        log.warning("actor %s failed (%s); restarting it in %.2f s", self.path, reason, delay)
        self.adapter.actor_backing_off(self.key, reason, delay)
        self.adapter.wakeup_after(delay, _RESTART)

    def _restart_actor(self) -> None:
        if not self.backing_off or self.done:
            return
        self.backing_off = False
        self.running_since = time.monotonic()
        actor = self._new_instance(self.path)
        try:
            actor.around_pre_start()
        except Exception as exc:
            log.exception("actor %s failed to restart", self.path)
            self._drop(actor, "failed to restart")
            self._back_off(f"failed to restart: {exc!r}")
            return
        if self.entities.get(self.path) is not actor:
            return  # it stopped again while starting (e.g. its recovery failed): backing off again
        self.adapter.actor_restarted(self.key)
        held, self.held = self.held, deque()
        self.local.extend(held)

    def _release_held(self, reason: str) -> None:
        held, self.held = self.held, deque()
        for sender, target, message in held:
            self.dead_letter(sender, target, message, reason)

    def _drop(self, entity: Actor, reason: str) -> None:
        log.debug("entity %s removed: %s", entity.path, reason)
        self.entities.pop(entity.path, None)
        self._cancel_timers(entity)
        if self._restarts and self.spec.entities:
            # An entity passivated or stopped starts afresh, restart count included; kept, the windows of every
            # entity that ever failed grew the host without bound (~900 bytes each). (A top-level actor keeps its
            # one window across its host's backoff restarts.)
            self._restarts.pop(entity.path, None)

    @staticmethod
    def _post_stop(entity: Actor) -> None:
        # A failing post_stop must not keep the host from stopping its other entities.
        try:
            entity.around_post_stop()
        except Exception:
            log.exception("post_stop of %s failed", entity.path)

    @staticmethod
    def _cancel_timers(entity: Actor) -> None:
        for timer in list(entity._timers):
            timer.cancel()

    def shutdown(self) -> None:
        """The host is exiting: stop every entity and send what is queued."""
        for entity in list(self.entities.values()):
            self._drop(entity, "host shutdown")
            self._post_stop(entity)
        self.handover.release_all()
        self.done = True
        self._release_held(f"actor at {self.path} stopped while backing off")
        self.settle(force_flush=True)

    # ---- timers ---------------------------------------------------------------------------------
    def schedule(self, delay: float, interval: float | None, message: object, owner: Actor) -> Timer:
        """Schedule `message` to `owner`; one Thespian wakeup serves the earliest timer."""
        check_message(message)
        if self.entities.get(owner.path) is not owner:
            # A stopped actor's (scheduled in post_stop, or by an instance a restart replaced): its timers were
            # cancelled when it stopped, and this one would be too. Queued, it was never delivered, but kept its
            # message and actor, and a repeating one woke the host every interval for the host's life.
            return Timer(0.0, interval, None, owner, owner._incarnation, -1).cancelled()
        timer = self.timers.schedule(delay, interval, message, owner)
        self._arm()
        return timer

    def _arm(self, floor: float = 0.0) -> None:
        if self._firing:
            return  # (on_wakeup arms once the work of its ticks is done)
        due = self.timers.next_due()
        if due is None or any(armed <= due for armed in self._armed):
            return
        self._armed.add(due)
        self.adapter.wakeup_after(max(floor, due - time.monotonic()), due)

    def _arm_sweep(self) -> None:
        if self.spec.passivate_after is not None and not self._sweep_armed:
            self._sweep_armed = True
            self._sweep_due = time.monotonic() + self.spec.passivate_after / 2
            self.adapter.wakeup_after(self.spec.passivate_after / 2, _SWEEP)

    def on_wakeup(self, payload: Any) -> None:
        """A Thespian wakeup: fire due timers, passivate idle entities, or flush lingering output."""
        self.now = time.monotonic()
        if payload == _SWEEP:
            self._sweep_armed = False
            self._passivate_idle()
        elif payload == _LINGER:
            self._linger_armed = False
            self.outbox.flush()
        elif payload == _RESTART:
            self._restart_actor()
        elif payload == _DRAIN:
            self._drain_armed = False  # settle() below resumes the local work that yielded
        elif payload == _ERRORS:
            pass  # settle() below runs _flush_errors
        elif isinstance(payload, tuple) and payload[0] == POKE:
            self.handover.expire(payload[1])
        else:
            self._armed.discard(payload)
            entities = self.entities
            lru = self.spec.passivate_after is not None
            self._firing = True
            try:
                for timer in self.timers.pop_due(self.now):
                    owner = timer.owner
                    if owner is not None and entities.get(owner.path) is owner \
                            and timer.incarnation == owner._incarnation:
                        owner._last_active = self.now
                        if lru:  # (the sweep stops at the first recent entity: keep them in order of activity)
                            entities.move_to_end(owner.path)
                        self._invoke(owner, timer.message, owner.path)
                self.settle()
            finally:
                self._firing = False
                # Armed after the work its ticks caused, never already due: Thespian handles a due wakeup before
                # it reads its sockets, so ticks whose work outlasted their interval kept the host from its mailbox.
                self._arm(_YIELD_WAIT)
            return
        self.settle()

    def _rearm_lost_wakeups(self) -> None:
        """Arm again the wakeups Thespian lost: long overdue, they will never come.

        Thespian 4.0.1 drops a wakeup that expires while it drains an excessive send queue ("tx-only
        mode"); a lost timer wakeup stopped every timer of the host for good (seen: the Spark bridge
        stopped fanning out). actors.thespian_fixes now keeps those wakeups; this stays as the safety
        net should a wakeup be lost another way (a timer that stops for good hangs a feed). Checked
        whenever the host works; it costs one comparison when nothing is overdue.
        """
        late = time.monotonic() - _WAKEUP_GRACE
        if self._armed and min(self._armed) < late:
            self._armed = {due for due in self._armed if due >= late}
            self._arm()
        if self._sweep_armed and self._sweep_due < late:
            self._sweep_armed = False
            self._arm_sweep()
        if self._linger_armed and self._linger_due < late:
            self._linger_armed = False
            self.outbox.flush()
        if self._drain_armed and self._drain_due < late:
            self._drain_armed = False  # settle() goes on with the local work now

    def _passivate_idle(self) -> None:
        """Stop the entities idle for `passivate_after`: `entities` is kept in order of last activity (every
        delivery, timer tick and restart moves its entity to the end), so the walk stops at the first recent one."""
        deadline = self.now - cast(float, self.spec.passivate_after)  # (a sweep is armed only with one)
        idle: list[Actor] = []
        busy: list[Actor] = []
        for entity in self.entities.values():
            if entity._last_active > deadline:
                break
            (busy if entity.keep_alive() else idle).append(entity)
        for entity in busy:
            entity._last_active = self.now
            self.entities.move_to_end(entity.path)
        for entity in idle:
            self.stop_entity(entity, "passivated")
        if self.entities:
            self._arm_sweep()

    # ---- settling -------------------------------------------------------------------------------
    def settle(self, force_flush: bool = False) -> None:
        """Run local deliveries and settle hooks until quiet (or for one time slice), then send (or linger)."""
        if self._armed or self._sweep_armed or self._linger_armed or self._drain_armed:
            self._rearm_lost_wakeups()
        clock = time.monotonic
        slice_end = clock() + (_SHORT_SLICE if self._drain_armed else _SETTLE_SLICE)
        local = self.local
        count = 0
        while True:
            while local:
                sender, target, message = local.popleft()
                self.deliver(sender, target, message)
                count += 1
                if not count % _CLOCK_EVERY and clock() >= slice_end:
                    break
            else:
                worked = False
                for hook in self._settle_hooks:
                    worked = bool(hook()) or worked
                if not worked and not local:
                    break
                if clock() < slice_end:
                    continue
            self._yield_to_mailbox()
            break
        if force_flush or self.spec.linger <= 0:
            self.outbox.flush()
        elif self.outbox and not self._linger_armed:
            self._linger_armed = True
            self._linger_due = time.monotonic() + self.spec.linger
            self.adapter.wakeup_after(self.spec.linger, _LINGER)

    def _yield_to_mailbox(self) -> None:
        """Resume this settle's work after what waits in the mailbox: a wakeup, not a message to self.

        Thespian's TCP transport handles a message to self, and a wakeup already due, before it reads its
        sockets again, so neither would let other senders in; a wakeup due shortly is delivered after the
        transport's next pass over its sockets (on the in-process base: behind what is already queued).
        """
        if not self._drain_armed:
            self._drain_armed = True
            self._drain_due = time.monotonic() + _YIELD_WAIT
            self.adapter.wakeup_after(_YIELD_WAIT, _DRAIN)


def _feed(messages: list[tuple[Any, str | None]], taken: list[int], entity: Actor, entities: dict[str, Actor],
          target: str) -> Iterator[tuple[Any, str | None]]:
    """The messages from `taken[0]` on, counting in `taken[0]` those handed out; ends once `entity` has
    stopped or is no longer the one at `target` (restarted by a failure it reported itself)."""
    i = taken[0]
    n = len(messages)
    while i < n:
        item = messages[i]
        i += 1
        taken[0] = i
        yield item
        if entity._stopping or entities.get(target) is not entity:
            return


class HostActor(ThespianActor):  # type: ignore[misc]  # (Thespian has no type information)
    """The Thespian side of a host: turns Thespian messages into Host calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        thespian_fixes.adopt_process_logging()
        super().__init__(*args, **kwargs)
        self.host: Host | None = None
        self._guardian: Address | None = None
        self._early: list[tuple[Batch, Address]] = []
        self._inflight = InFlight(self, self._settled)
        self._undelivered: list[Intent] = []  # batches no live receiver took (FAILED), to report as dead letters
        self._parent_watch: ParentWatch | None = None
        exit_if_orphaned_before(lambda: self._guardian is not None)

    @staticmethod
    def actorSystemCapabilityCheck(capabilities: dict[str, Any], requirements: dict[str, Any] | None) -> bool:
        """Place hosts on the node they ask for (multi-host), anywhere otherwise."""
        wanted = (requirements or {}).get("Reprise Node")
        return wanted is None or capabilities.get("Reprise Node") == wanted

    def receiveMessage(self, message: Any, sender: Any) -> None:
        host = self.host
        if isinstance(message, Batch):
            if host is None:
                self._early.append((message, sender))
            else:
                host.on_batch(message, sender)
        elif isinstance(message, WakeupMessage):
            if message.payload == PARENT_WAKEUP:
                if self._parent_watch is not None and self._parent_watch.orphaned():
                    log.error("host %s: its parent process is gone (the system's admin or guardian died); "
                              "exiting", host.key if host else "?")
                    self.send(self.myAddress, ActorExitRequest())
            elif host is not None:
                host.on_wakeup(message.payload)
        elif isinstance(message, str) and message == POKE:
            if host is not None:
                if self._undelivered:
                    self._report_undelivered(host)
                host.handover.poke()
                host.settle()
        elif isinstance(message, InitHost):
            self._init(message, sender)
        elif isinstance(message, DirectoryUpdate):
            if host is not None:
                host.update_routes(message.routes, message.epoch, self.myAddress)
        elif isinstance(message, StopEntity):
            if host is not None and message.path in host.entities:
                host.stop_entity(host.entities[message.path], "stopped by request")
                host.settle()
            self.send_in_order(sender, EntityStopped(message.path))  # (after the settle: its writes are committed)
        elif isinstance(message, GetHostStats):
            if host is not None:
                self.send_in_order(sender, host.stats(message.token))
        elif isinstance(message, ActorExitRequest):
            if host is not None:
                host.shutdown()
        elif isinstance(message, PoisonMessage):
            log.error("host %s: a message it sent could not be handled: %s",
                      host.path if host else "?", message.details)
        elif isinstance(message, ChildActorExited):
            pass
        else:
            log.warning("host %s ignored unexpected %r", host.path if host else "?", message)

    def _init(self, init: InitHost, sender: Address) -> None:
        # (its sends to healthy processes never queue behind those to 20 that take nothing, idle clients
        # among them: fix 11 of actors/thespian_fixes.py)
        thespian_fixes.lift_actor_pending_limit(self)
        self._guardian = init.guardian
        self._inflight.no_bounce = init.guardian  # (nothing to reroute a batch to the guardian to)
        self._parent_watch = ParentWatch.start(self)
        try:
            self.host = Host(self, init, self.myAddress)
            self.host.start()
        except SpawnFailed as e:  # a refusal that explains itself
            self.send(sender, HostReady(init.spec.key, str(e), cause=e.cause))
            return
        except RepriseError as e:  # says what to fix (a ProjectionError, ...): lead with it, the traceback after
            self.send(sender, HostReady(init.spec.key, f"{type(e).__name__}: {e}\n\n{traceback.format_exc()}"))
            return
        except Exception:
            self.send(sender, HostReady(init.spec.key, traceback.format_exc()))
            return
        self.send(sender, HostReady(init.spec.key, pid=os.getpid()))
        early, self._early = self._early, []
        for batch, batch_sender in early:
            self.host.on_batch(batch, batch_sender)

    # Callbacks used by Host.
    def send_in_order(self, address: Address, message: object) -> None:
        """Send one Thespian message behind those sent to `address` before, counted until it lands (see
        actors/handover.py): batches and the host's own reports alike, so none overtakes another."""
        if self.host is None or not self._inflight.tracking:
            self.send(address, message)
            return
        self.host.handover.sent(str(address))
        self._inflight.send(address, message)

    def _to_guardian(self, message: object) -> None:
        assert self._guardian is not None  # (set by InitHost, before there is a Host to report anything)
        self.send_in_order(self._guardian, message)

    def _settled(self, intent: Intent, how: str) -> None:
        """A batch ended (called in send order per address, inside a transport callback: no self.send)."""
        key = str(intent.targetAddr)
        if how == BOUNCED:
            # Its target is gone: to the guardian directly, rather than Thespian's relay through the admin,
            # which later sends to the guardian overtook; and tracked, in line behind and ahead of this host's
            # other sends to the guardian. Sent untracked, one that met a Thespian retry (a connection both ends
            # wrote on at once) waited for it while the Barrier behind it went on: the messages parked for the
            # restarted target were released ahead of the bounced one (tests/actors/test_errors.py::
            # test_a_bounced_batch_that_waits_for_a_retry_to_the_guardian_is_not_overtaken).
            # (Only tracked sends bounce, and only a Host sends tracked: send_in_order tracks, not self.send.)
            self._to_guardian(DeadEnvelope(intent.targetAddr, intent.message))
        elif how == FAILED:
            self._undelivered.append(intent)
            self._inflight.send_intent(self.myAddress, POKE)  # (reported from the mailbox: no sends in here)
        if self.host is not None:
            if how == BOUNCED:
                self.host.handover.note_rerouted(key)
            self.host.handover.settled(key)

    def _report_undelivered(self, host: Host) -> None:
        """Make every message of the batches no live receiver took a dead letter (Thespian drops them unsaid)."""
        failed, self._undelivered = self._undelivered, []
        for intent in failed:
            if str(intent.targetAddr) == str(self._guardian):
                # (dead letters go to the guardian: one it did not take cannot be reported there)
                log.error("host %s: a batch to the guardian at %s was not delivered", host.path, intent.targetAddr)
                continue
            entries, reason = not_taken(intent, host._unreadable, f"host {host.path}")
            for sender, target, message in entries:
                host.dead_letter(sender, target, message, reason)

    def send_self(self, message: Any) -> None:
        """Queue a message to this host's own mailbox."""
        self.send(self.myAddress, message)

    def wakeup_after(self, seconds: float, payload: Any) -> None:
        """Arm a Thespian wakeup."""
        self.wakeupAfter(timedelta(seconds=seconds), payload)

    def host_done(self, path: str, failure: str | None = None, gave_up: bool = False) -> None:
        """The single actor stopped: tell the guardian, then exit (if it failed starting: when told to)."""
        self._to_guardian(HostDone(path, failure, gave_up))
        if failure is None or gave_up:
            self.send(self.myAddress, ActorExitRequest())
        # A host whose actor failed while starting forwards what arrives to the guardian until the
        # guardian, having routed the path to itself (it holds messages for the next process), stops it.

    def actor_backing_off(self, path: str, reason: str, delay: float) -> None:
        """Tell the guardian (for status) that the top-level actor failed and restarts in `delay` s."""
        self._to_guardian(ActorBackingOff(path, reason, delay))

    def actor_restarted(self, path: str) -> None:
        """Tell the guardian (for status) that the top-level actor runs again."""
        self._to_guardian(ActorRestarted(path))


if TYPE_CHECKING:
    _implements_context: type[ActorContext] = Host

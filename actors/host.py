"""Host actors: one Thespian actor (one OS process on multiproc) serving one actor or many entities."""

from __future__ import annotations

import importlib
import itertools
import logging
import os
import time
import traceback
import weakref
from collections import OrderedDict, deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any

from thespian.actors import (
    Actor as ThespianActor,
)
from thespian.actors import (
    ActorExitRequest,
    ChildActorExited,
    PoisonMessage,
    WakeupMessage,
)

from .actor import Actor
from .errors import SpawnFailed
from .messages import (
    GUARDIAN_PATH,
    SHARD_PLACEHOLDER,
    Batch,
    DeadLetter,
    DirectoryUpdate,
    GetHostStats,
    HostDone,
    HostReady,
    HostSpec,
    HostStats,
    InitHost,
    Scatter,
    StopEntity,
)
from .paths import shard_of
from .timers import Timer, TimerQueue
from .transport import Outbox, Router, address_key, check_message, route_keys, unpack

log = logging.getLogger("reprise.host")

_SWEEP = "reprise-sweep"
_LINGER = "reprise-linger"
_DRAIN = "reprise-drain"
# Local deliveries handled per Thespian message before yielding, so a chatty entity cannot starve
# the host's own mailbox (exit requests, directory updates).
_LOCAL_BUDGET = 200_000
# A wakeup this late (s) is taken as lost (see Host._rearm_lost_wakeups); Thespian's are ~1 ms late.
_WAKEUP_GRACE = 1.0


def resolve_factory(factory: Any) -> Any:
    """Turn "package.module:Class" into the class; classes and callables pass through."""
    if isinstance(factory, str):
        module, _, attr = factory.partition(":")
        obj = importlib.import_module(module)
        for part in attr.split("."):
            obj = getattr(obj, part)
        return obj
    return factory


class Host:
    """The runtime inside one host actor: entities, routing, outbox, timers, passivation, restarts."""

    def __init__(self, adapter: Any, init: InitHost, my_address: Any) -> None:
        spec: HostSpec = init.spec
        self.adapter = adapter
        self.spec = spec
        self.path = spec.path
        self.key = spec.key  # the path, or the path and shard number: what the guardian and peers call us
        self.config = init.config
        if spec.journal or spec.snapshot_store:
            self.config = self._own_stores(spec)
        self.factory = resolve_factory(spec.factory)
        self.router = Router()
        self.router.replace(init.routes, init.epoch)
        self.my_key = address_key(my_address)
        self.router.learn(self.key, my_address)
        self.outbox = Outbox(self.key, adapter.send_batch, self._unpicklable, spec.batch_cap)
        self.entities: OrderedDict[str, Actor] = OrderedDict()
        self.local: deque = deque()
        self.timers = TimerQueue()
        self._armed: set[float] = set()  # due times of the timer wakeups asked of Thespian
        self._sweep_armed = False
        self._sweep_due = 0.0
        self._linger_armed = False
        self._linger_due = 0.0
        self._restarts: dict[str, deque] = {}
        self._incarnations = itertools.count(1)
        self._settle_hooks: list = []
        self.now = time.monotonic()
        self.done = False
        self.entity_prefix = self.path + "/"
        self._route_watchers: weakref.WeakSet = weakref.WeakSet()

    def stats(self, token: int) -> HostStats:
        """How many actors are alive here and the sums of their `stats()` counters."""
        counters: dict[str, int] = {}
        for entity in self.entities.values():
            try:
                for name, value in entity.stats().items():
                    counters[name] = counters.get(name, 0) + value
            except Exception:  # a broken stats() must not break the status of the whole system
                log.exception("stats() of %s failed", entity.path)
        return HostStats(token, self.key, len(self.entities), counters)

    # ---- starting ------------------------------------------------------------------------------
    def start(self) -> None:
        """Create the single top-level actor now (entities are created on their first message)."""
        if not self.spec.entities:
            actor = self._new_instance(self.path)
            actor._around_pre_start()
            self.settle()

    def _own_stores(self, spec: HostSpec) -> dict:
        """The config with this host's own journal / snapshot store URLs (per shard when they say {shard})."""
        config = dict(self.config)
        for name in ("journal", "snapshot_store"):
            template = getattr(spec, name)
            if template:
                config[name] = spec.store_url(template)
        if spec.journal and SHARD_PLACEHOLDER in spec.journal:
            from persistence.plugins import check_shard_layout  # actors itself does not need persistence

            try:
                check_shard_layout(config["journal"], spec.path, spec.shard, spec.shards)
            except ValueError as e:
                raise SpawnFailed(str(e)) from None
        return config

    def watch_routes(self, actor: Actor) -> None:
        """Call `actor._routes_lost(prefixes)` when hosts it may have sent to die (see `update_routes`)."""
        self._route_watchers.add(actor)

    def update_routes(self, routes: dict[str, Any], epoch: int, my_address: Any) -> None:
        """Install a directory update; tell watchers which hosts died since the last one.

        A prefix is lost when its host's address gives way to another (the guardian holding messages for
        it while it restarts, or its new process): what was sent to the old process and not handled died
        with it. Resenders (AtLeastOnceDelivery) resend at once instead of after their redeliver interval.
        """
        before = self.router.routes
        guardian = before.get(GUARDIAN_PATH)
        self.router.replace(routes, epoch)
        self.router.learn(self.key, my_address)
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
                    actor._routes_lost(lost)
            self.settle()

    def on_settle(self, hook) -> None:
        """Register `hook()`, called whenever local work is drained; it returns True if it did work."""
        self._settle_hooks.append(hook)

    # ---- sending -------------------------------------------------------------------------------
    def route(self, sender: str | None, target: str, message: Any) -> None:
        """Queue `message` for `target`: local entities directly, others in the batched outbox."""
        check_message(message)
        if target is None:
            self.dead_letter(sender, "<no sender>", message, "reply to a message that had no sender")
            return
        hit = self.router.resolve(target)
        if hit is None:
            # Unknown here: the guardian has the authoritative directory (or records a dead letter).
            hit = self.router.resolve(GUARDIAN_PATH)
        if hit[0] == self.my_key:
            self.local.append((sender, target, message))
        else:
            self.outbox.add(hit[0], hit[1], (sender, target, message))

    def scatter(self, sender: str | None, targets: list[str], chunk: Callable[[list[int] | None], Scatter]) -> None:
        """Send messages for many `targets` as one Scatter per host serving them.

        `chunk(indices)` builds the Scatter for the targets at those indices (None: all of them, the
        common case of a single destination host). Order is kept per destination, as with `route`.
        """
        resolve = self.router.resolve
        groups: dict[str, tuple[Any, list[int]]] = {}
        for i, target in enumerate(targets):
            hit = resolve(target) or resolve(GUARDIAN_PATH)  # unknown here: the guardian decides
            group = groups.get(hit[0])
            if group is None:
                group = groups[hit[0]] = (hit[1], [])
            group[1].append(i)
        for key, (address, indices) in groups.items():
            message = chunk(None if len(groups) == 1 else indices)
            if key == self.my_key:
                self.local.extend([(sender, t, m) for t, m in message.items()])
            else:
                self.outbox.add(key, address, (sender, targets[indices[0]], message))

    def dead_letter(self, sender: str | None, target: str, message: Any, reason: str) -> None:
        """Report an undeliverable message to the guardian (counted, logged, observable)."""
        log.debug("dead letter to %s from %s: %s", target, sender, reason)
        self.route(self.path, GUARDIAN_PATH, DeadLetter(sender, target, message, reason))

    def _unpicklable(self, entry: tuple, why: str) -> None:
        sender, target, message = entry
        log.error("message %s from %s to %s %s", type(message).__name__, sender, target, why)
        self.dead_letter(sender, target, repr(message), f"message {why}")

    # ---- receiving -----------------------------------------------------------------------------
    def on_batch(self, batch: Batch, thespian_sender: Any) -> None:
        """Dispatch every entry of an incoming batch, in order, then settle."""
        if batch.origin != self.key:
            self.router.learn(batch.origin, thespian_sender)
        self.now = time.monotonic()
        deliver = self.deliver
        for sender, target, message in unpack(batch):
            deliver(sender, target, message)
        self.settle()

    def deliver(self, sender: str | None, target: str, message: Any) -> None:
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

    def _materialize(self, sender: str | None, target: str, message: Any) -> Actor | None:
        if self.spec.entities and target.startswith(self.entity_prefix):
            if "/" in target[len(self.entity_prefix):]:
                self.dead_letter(sender, target, message, f"no entity at {target}: entity ids are one path segment")
                return None
            if self.spec.shards > 1 and shard_of(target, self.path, self.spec.shards) != self.spec.shard:
                # Another shard's entity (a stale route): one instance per entity, so the guardian reroutes it.
                hit = self.router.resolve(GUARDIAN_PATH)
                self.outbox.add(hit[0], hit[1], (sender, target, message))
                return None
            entity = self._new_instance(target)
            try:
                entity._around_pre_start()
            except Exception as exc:
                log.exception("entity %s failed in pre_start", target)
                self._drop(entity, "failed to start")
                self.dead_letter(sender, target, message, f"entity failed to start: {exc!r}")
                return None
            self._arm_sweep()
            return entity
        if target == self.path or target.startswith(self.entity_prefix):
            # The single actor here has stopped, or the path is below a single actor.
            self.dead_letter(sender, target, message, f"no actor at {target}")
            return None
        # Not ours (a stale route, or a reused port): the guardian knows where it lives now.
        hit = self.router.resolve(GUARDIAN_PATH)
        self.outbox.add(hit[0], hit[1], (sender, target, message))
        return None

    def _new_instance(self, path: str) -> Actor:
        spec = self.spec
        entity = self.factory(*spec.args, **spec.kwargs)
        if not isinstance(entity, Actor):
            raise TypeError(f"{spec.factory!r} made a {type(entity).__name__}, not an actors.Actor")
        entity.path = path
        entity._host = self
        entity._timers = set()
        entity._incarnation = next(self._incarnations)
        entity._last_active = self.now
        self.entities[path] = entity
        return entity

    def _invoke(self, entity: Actor, message: Any, sender: str | None) -> None:
        try:
            entity.receive(message, sender)
        except Exception as exc:
            self._failed(entity, exc, message, sender)
            return
        if entity._stopping:
            self.stop_entity(entity, "stopped")

    def _failed(self, entity: Actor, exc: BaseException, message: Any, sender: str | None) -> None:
        path = entity.path
        log.error("actor %s failed on %s: %s\n%s", path, type(message).__name__, exc, traceback.format_exc())
        window = self._restarts.setdefault(path, deque())
        window.append(self.now)
        while window and window[0] < self.now - self.spec.restart_window:
            window.popleft()
        if len(window) > self.spec.max_restarts:
            log.error("actor %s restarted more than %d times in %.0f s: stopping it",
                      path, self.spec.max_restarts, self.spec.restart_window)
            self.stop_entity(entity, "too many restarts")
            return
        carryover = entity._restart_carryover()
        try:
            entity.pre_restart(exc, message)
        except Exception:
            log.exception("pre_restart of %s failed", path)
        self._cancel_timers(entity)
        fresh = self._new_instance(path)
        try:
            fresh._around_post_restart(exc)
        except Exception as exc2:
            log.exception("actor %s failed while restarting", path)
            self.stop_entity(fresh, f"failed to restart: {exc2!r}")
            return
        for carried, carried_sender in carryover:
            if self.entities.get(path) is not fresh:
                break
            self._invoke(fresh, carried, carried_sender)

    # ---- stopping ------------------------------------------------------------------------------
    def stop_entity(self, entity: Actor, reason: str) -> None:
        """Remove `entity` (post_stop runs); a single top-level actor stopping ends its host."""
        if self.entities.get(entity.path) is not entity:
            return
        self._drop(entity, reason)
        self._post_stop(entity)
        if not self.spec.entities and not self.done:
            self.done = True
            self.adapter.host_done(self.key)

    def _drop(self, entity: Actor, reason: str) -> None:
        log.debug("entity %s removed: %s", entity.path, reason)
        self.entities.pop(entity.path, None)
        self._cancel_timers(entity)

    @staticmethod
    def _post_stop(entity: Actor) -> None:
        # A failing post_stop must not keep the host from stopping its other entities.
        try:
            entity.post_stop()
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
        self.done = True
        self.settle(force_flush=True)

    # ---- timers ---------------------------------------------------------------------------------
    def timers_schedule(self, delay: float, interval: float | None, message: Any, owner: Actor) -> Timer:
        """Schedule `message` to `owner`; one Thespian wakeup serves the earliest timer."""
        check_message(message)
        timer = self.timers.schedule(delay, interval, message, owner)
        self._arm()
        return timer

    def _arm(self) -> None:
        due = self.timers.next_due()
        if due is None or any(armed <= due for armed in self._armed):
            return
        self._armed.add(due)
        self.adapter.wakeup_after(max(0.0, due - time.monotonic()), due)

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
        else:
            self._armed.discard(payload)
            for timer in self.timers.pop_due(self.now):
                owner = timer.owner
                if self.entities.get(owner.path) is owner and timer.incarnation == owner._incarnation:
                    owner._last_active = self.now
                    self._invoke(owner, timer.message, owner.path)
            self._arm()
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

    def _passivate_idle(self) -> None:
        deadline = self.now - self.spec.passivate_after
        idle, busy = [], []
        for entity in self.entities.values():
            if entity._last_active > deadline:
                break
            (busy if entity._keep_alive() else idle).append(entity)
        for entity in busy:
            entity._last_active = self.now
            self.entities.move_to_end(entity.path)
        for entity in idle:
            self.stop_entity(entity, "passivated")
        if self.entities:
            self._arm_sweep()

    # ---- settling -------------------------------------------------------------------------------
    def settle(self, force_flush: bool = False) -> None:
        """Run local deliveries and settle hooks until quiet, then send (or linger)."""
        if self._armed or self._sweep_armed or self._linger_armed:
            self._rearm_lost_wakeups()
        budget = _LOCAL_BUDGET
        local = self.local
        while True:
            while local and budget:
                sender, target, message = local.popleft()
                self.deliver(sender, target, message)
                budget -= 1
            if not budget:
                self.adapter.send_self(_DRAIN)
                break
            worked = False
            for hook in self._settle_hooks:
                worked = bool(hook()) or worked
            if not worked and not local:
                break
        if force_flush or self.spec.linger <= 0:
            self.outbox.flush()
        elif self.outbox and not self._linger_armed:
            self._linger_armed = True
            self._linger_due = time.monotonic() + self.spec.linger
            self.adapter.wakeup_after(self.spec.linger, _LINGER)


class HostActor(ThespianActor):
    """The Thespian side of a host: turns Thespian messages into Host calls."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.host: Host | None = None
        self._guardian = None
        self._early: list = []

    @staticmethod
    def actorSystemCapabilityCheck(capabilities: dict, requirements: dict | None) -> bool:
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
            if host is not None:
                host.on_wakeup(message.payload)
        elif isinstance(message, str) and message == _DRAIN:
            if host is not None:
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
        elif isinstance(message, GetHostStats):
            if host is not None:
                self.send(sender, host.stats(message.token))
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

    def _init(self, init: InitHost, sender: Any) -> None:
        self._guardian = init.guardian
        try:
            self.host = Host(self, init, self.myAddress)
            self.host.start()
        except SpawnFailed as e:  # a refusal that explains itself
            self.send(sender, HostReady(init.spec.key, str(e)))
            return
        except Exception:
            self.send(sender, HostReady(init.spec.key, traceback.format_exc()))
            return
        self.send(sender, HostReady(init.spec.key, pid=os.getpid()))
        early, self._early = self._early, []
        for batch, batch_sender in early:
            self.host.on_batch(batch, batch_sender)

    # Callbacks used by Host.
    def send_batch(self, address: Any, batch: Batch) -> None:
        """Send one Thespian message."""
        self.send(address, batch)

    def send_self(self, message: Any) -> None:
        """Queue a message to this host's own mailbox."""
        self.send(self.myAddress, message)

    def wakeup_after(self, seconds: float, payload: Any) -> None:
        """Arm a Thespian wakeup."""
        self.wakeupAfter(timedelta(seconds=seconds), payload)

    def host_done(self, path: str) -> None:
        """The single actor stopped: tell the guardian not to restart us, then exit."""
        self.send(self._guardian, HostDone(path))
        self.send(self.myAddress, ActorExitRequest())

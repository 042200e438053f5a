"""Per sender -> receiver FIFO across a receiver's restart, for the messages a host sends.

When a host's route to another host changes (that host died: the guardian holds its messages, then its new
process serves), what this host sent before may still travel a longer way than what it sends next: batches
the dead process never acknowledged fail later and go to the guardian, and the guardian forwards what it
held. Both overtook direct sends to the new process. So for that destination this host parks what it sends
until its earlier batches are settled (acknowledged, or handed to the guardian), then sends a Barrier
through the guardian; the receiving host returns it after everything the guardian had from us, and the
parked messages go out behind it. A handover that does not finish within HANDOVER_WAIT ends anyway.
A host's first start is a change too: until its route appears, what we send it goes to the guardian.
A route learned from a batch's origin (Router.learn, ahead of the directory) is a change like the directory's.
"""

from __future__ import annotations

import itertools
import logging
import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, cast

from .messages import GUARDIAN_PATH, Barrier
from .paths import ancestors, shard_key, shard_of
from .transport import Entry, Route, route_keys
from .unrouted import Unrouted

if TYPE_CHECKING:
    from .host import Host
    from .thespian_types import Address

log = logging.getLogger("reprise.host")

HANDOVER_WAIT = 10.0
"""Seconds a destination's messages are parked at most (its old batches unsettled, or no Barrier back)."""

POKE = "reprise-handover"
"""The self-message and wakeup payload tag that moves handovers on outside transport callbacks."""


@dataclass
class _Pending:
    token: int
    via: str  # a path the destination serves (the Barrier's target)
    wait_keys: set[str]  # the old addresses whose batches must settle first
    entries: list[Entry] = field(default_factory=list)
    barrier_sent: bool = False


def sample_path(prefix: str, shard: int, shards: int) -> str:
    """A path served by shard `shard` of the host at `prefix` (the prefix itself for a single host)."""
    if shards == 1:
        return prefix
    for i in itertools.count():
        path = f"{prefix}/{i}"
        if shard_of(path, prefix, shards) == shard:
            return path
    raise AssertionError("unreachable")


class Handover:
    """The parked destinations of one host, and its batches in flight per Thespian address."""

    def __init__(self, host: Host) -> None:
        self.host = host
        self.inflight: dict[str | None, int] = {}
        self.pending: dict[str, _Pending] = {}  # destination host name -> its handover
        # token -> destination host name, while its handover waits for it. An expired or restarted handover's
        # token goes at once: if its Barrier still comes back, its origin says it is ours (barrier_back), and no
        # token is kept for a Barrier that never does (one kept, a table host took no batch in bulk again).
        self.barriers: dict[int, str] = {}
        self.via_guardian: set[str] = set()  # destination host names we sent to while the guardian held them
        # Paths we sent to the guardian while no route here named their host (a host's first start, or not known
        # here yet): the guardian holds or forwards them, so they too must land before direct sends to a route
        # that appears (bounded: see Unrouted).
        self.unrouted = Unrouted()
        self.rerouted: set[str] = set()  # addresses of dead processes whose batches we handed to the guardian
        self._tokens = itertools.count(1)
        # This process's own: a later process of the host may get the same address (the port reused), and must
        # not take a late Barrier of this one for its own (Barrier).
        self.nonce = os.urandom(8).hex()
        spec = host.spec
        self.reply_path = sample_path(spec.path, spec.shard, spec.shards) if spec.entities else spec.path

    # ---- called by the host ----------------------------------------------------------------------
    def parked(self) -> int:
        """How many messages are parked now, over every destination being handed over."""
        return sum(len(p.entries) for p in self.pending.values())

    def sent(self, key: str) -> None:
        """A batch left for the address `key`."""
        self.inflight[key] = self.inflight.get(key, 0) + 1

    def settled(self, key: str) -> None:
        """A batch for `key` was acknowledged or handed to the guardian (a transport callback: no sends)."""
        left = self.inflight.get(key, 0) - 1
        if left > 0:
            self.inflight[key] = left
            return
        self.inflight.pop(key, None)
        if any(key in p.wait_keys for p in self.pending.values()):
            self.host.adapter.send_self(POKE)

    def note_rerouted(self, key: str) -> None:
        """A batch for the address `key` (its process gone) was handed to the guardian."""
        self.rerouted.add(key)

    def note_guardian(self, target: str) -> None:
        """`target` was sent to the guardian (its host restarting, or unknown here)."""
        name = self.host.router.locate(target)
        if name is None:
            if not target.startswith(("/temp/", "/system/")):
                self.unrouted.add(target)
        elif not name.startswith(("/temp/", "/system/")):
            self.via_guardian.add(name)

    def park(self, entry: Entry) -> bool:
        """Hold `entry` back if its destination is being handed over; True if held."""
        name = self.host.router.locate(entry[1])
        if name is not None:
            pending = self.pending.get(name)
        else:  # (a send to the guardian: rare, and looked at only while some handover is pending)
            pending = self._unrouted_pending(entry[1]) if self.pending else None
        if pending is None:
            return False
        pending.entries.append(entry)
        return True

    def routes_changed(self, before: dict[str, Route], after: dict[str, Route],
                       guardian_key: str | None) -> None:
        """Start a handover for every destination whose address changed while we may have messages on the way."""
        for prefix, old in before.items():
            new = after.get(prefix)
            if new is None or new == old or prefix == GUARDIAN_PATH or prefix.startswith("/temp/"):
                continue
            old_keys = route_keys(old)
            new_keys = route_keys(new)
            if len(old_keys) != len(new_keys):
                continue  # respawned with another shard count: nothing to keep in order with
            shards = len(new_keys)
            for shard, (old_key, new_key) in enumerate(zip(old_keys, new_keys, strict=True)):
                name = shard_key(prefix, shard, shards)
                if old_key == new_key or self.host.my_key in (old_key, new_key):
                    continue  # (what we send ourselves is delivered here, never parked: nothing to keep in order)
                unsettled = self.inflight.get(old_key, 0) > 0
                # Held by the guardian: sent while it held them, or rerouted there from the dead process
                # before we learned of the death. The guardian's forwarding may land after our direct sends.
                held = (old_key == guardian_key and name in self.via_guardian) or old_key in self.rerouted
                if name in self.pending:
                    # It changed again mid-handover (died again?): our Barrier may have died with it, so
                    # start over with a new one, keeping what is parked.
                    self._restart(name, old_key if unsettled else None)
                elif unsettled or held:
                    self._start(name, sample_path(prefix, shard, shards), old_key if unsettled else None)
                if old_key == guardian_key:
                    self.via_guardian.discard(name)
                self.rerouted.discard(old_key)
        if self.unrouted:
            self._routes_appeared(before, after, guardian_key)

    def learned(self, prefix: str, old: Route | None, new: Route, guardian_key: str | None) -> None:
        """A route learned from a batch's origin (Router.learn), ahead of the directory: the same handover as
        the directory's change would start (a host's first message after its start may come before the route
        update, and what we sent it through the guardian, or to its dead process, must land first)."""
        if " " in prefix:
            return  # a shard's key (shard_key), not a path: no path resolves through it, nothing to hand over
        self.routes_changed({prefix: old} if old is not None else {}, {prefix: new}, guardian_key)

    def _routes_appeared(self, before: dict[str, Route], after: dict[str, Route], guardian_key: str | None) -> None:
        """Start a handover for every new route's host we sent to through the guardian while it had none."""
        for prefix, new in after.items():
            if prefix in before or prefix == GUARDIAN_PATH or prefix.startswith("/temp/"):
                continue
            new_keys = route_keys(new)
            shards = len(new_keys)
            for shard in sorted(self.unrouted.take(prefix, shards)):
                name, new_key = shard_key(prefix, shard, shards), new_keys[shard]
                if new_key == guardian_key:
                    self.via_guardian.add(name)  # (still held there: its handover starts when its process serves)
                elif new_key != self.host.my_key and name not in self.pending:
                    unsettled = guardian_key is not None and self.inflight.get(guardian_key, 0) > 0
                    self._start(name, sample_path(prefix, shard, shards), guardian_key if unsettled else None)

    def poke(self) -> None:
        """Send the Barriers of handovers whose old batches have all settled."""
        for name, pending in list(self.pending.items()):
            if not pending.barrier_sent and not self._unsettled(pending.wait_keys):
                self._send_barrier(name, pending)

    def barrier_back(self, barrier: Barrier) -> bool:
        """A Barrier of ours came back: release what its destination parked (nothing if its handover has
        ended: expired or restarted). False if it is not ours."""
        # The origin decides: a Barrier of another host's handover on its way through us may carry the token of
        # one of ours (every process counts from 1); taken for ours, it released our parked messages early and
        # never went back, so its host parked for HANDOVER_WAIT and then sent out of order.
        # The nonce too: a later process of a host may listen on the address of an earlier one (its port reused),
        # and a late Barrier of the earlier one carried a token of that one's numbering, which released the
        # later one's parked messages early.
        if barrier.nonce != self.nonce or barrier.origin != self.host.my_key:
            return False
        name = self.barriers.pop(barrier.token, None)
        if name is not None:
            self._release(name)
        else:
            log.debug("host %s: a Barrier of an ended handover came back (token %d): dropped",
                      self.host.key, barrier.token)
        return True

    def earlier_process(self, barrier: Barrier) -> bool:
        """True if `barrier` is of an earlier process of this host (come back after that process ended): its
        handover ended with that process, and what it parked there with it; nothing here waits for it."""
        if barrier.host != self.host.key or barrier.nonce == self.nonce:
            return False
        log.info("host %s: a Barrier of an earlier process of this host (at %s, handover %d) came back after that "
                 "process ended: dropped", self.host.key, barrier.origin, barrier.token)
        return True

    def expire(self, token: int) -> None:
        """A handover's time is up: release its destination's messages anyway (order may break)."""
        for name, pending in list(self.pending.items()):
            if pending.token == token:
                log.warning("host %s: messages to %s were parked %.0f s waiting for earlier ones to land; "
                            "sending them now (order may break)", self.host.key, name, HANDOVER_WAIT)
                self.barriers.pop(token, None)  # (if it still comes back, barrier_back drops it)
                self._release(name)

    def release_all(self) -> None:
        """Send every parked message now (the host is stopping)."""
        for name in list(self.pending):
            self._release(name)

    # ---- internals -------------------------------------------------------------------------------
    def _unrouted_pending(self, target: str) -> _Pending | None:
        """The handover of a host serving `target` that no route names now. A route learned ahead of the
        directory (learned) is dropped by an update the guardian published before it handled that host's
        HostReady; sent unparked to the guardian, what follows went behind the Barrier, and the parked messages
        were released ahead of it, out of order at the host. (Only while a handover is pending: no cost else.)"""
        for prefix in ancestors(target):
            pending = self.pending.get(prefix)
            if pending is not None:
                return pending
        return None

    def _unsettled(self, keys: set[str]) -> set[str]:
        return {k for k in keys if self.inflight.get(k, 0) > 0}

    def _start(self, name: str, via: str, wait_key: str | None) -> None:
        pending = self.pending[name] = _Pending(next(self._tokens), via, {wait_key} if wait_key else set())
        self.host.adapter.wakeup_after(HANDOVER_WAIT, (POKE, pending.token))
        if not pending.wait_keys:
            self._send_barrier(name, pending)

    def _restart(self, name: str, wait_key: str | None) -> None:
        pending = self.pending[name]
        self.barriers.pop(pending.token, None)  # (if it still comes back, barrier_back drops it)
        # Still waiting for the process before the last one too: when a destination's route went from its dead
        # process to the guardian (restarting) and then to its new process, the dead process's batches may
        # still be bouncing, one by one, to the guardian; the Barrier must go behind all of them.
        keys = self._unsettled(pending.wait_keys | ({wait_key} if wait_key else set()))
        restarted = _Pending(next(self._tokens), pending.via, keys, pending.entries)
        self.pending[name] = restarted
        self.host.adapter.wakeup_after(HANDOVER_WAIT, (POKE, restarted.token))
        if not keys:
            self._send_barrier(name, restarted)

    def _send_barrier(self, name: str, pending: _Pending) -> None:
        pending.barrier_sent = True
        self.barriers[pending.token] = name
        hit = cast("tuple[str, Address]", self.host.router.resolve(GUARDIAN_PATH))  # (always routed)
        barrier = Barrier(pending.token, self.host.my_key, self.nonce, self.host.key)
        self.host.outbox.add(hit[0], hit[1], (self.reply_path, pending.via, barrier))

    def _release(self, name: str) -> None:
        pending = self.pending.pop(name, None)
        if pending is not None:
            route = self.host.route
            for sender, target, message in pending.entries:
                route(sender, target, message)

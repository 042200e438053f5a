"""The guardian: directory of paths, supervisor of hosts, dead-letter office. One per actor system."""

from __future__ import annotations

import difflib
import itertools
import logging
import os
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import timedelta
from typing import Any, cast

from thespian.actors import (
    Actor as ThespianActor,
)
from thespian.actors import (
    ActorExitRequest,
    ActorSystemConventionUpdate,
    ChildActorExited,
    DeadEnvelope,
    PoisonMessage,
    WakeupMessage,
)

from . import thespian_fixes
from .error_log import ActorError, AskUndelivered, ErrorLog, GetErrors, SubscribeErrors, forget_under, is_ask
from .errors import SpawnCause
from .handover import HANDOVER_WAIT
from .inflight import BOUNCED, FAILED, InFlight, not_taken
from .messages import (
    GUARDIAN_PATH,
    ActorBackingOff,
    ActorRestarted,
    Barrier,
    Batch,
    CheckPids,
    DeadLetter,
    DeadLetters,
    DirectoryUpdate,
    EntityStopped,
    GetDeadLetters,
    GetDirectory,
    GetHostStats,
    GetNodes,
    GetStatus,
    GuardianIs,
    HostDone,
    HostInfo,
    HostReady,
    HostSpec,
    HostStats,
    InitHost,
    Move,
    NodeHello,
    NodeLogged,
    NodePing,
    NodePong,
    NodeRefused,
    Nodes,
    NodeWelcome,
    PidsGone,
    Rebalance,
    Rebalanced,
    RegisterRoute,
    ShardSet,
    Spawned,
    SpawnHost,
    StopEntity,
    StopPath,
    SubscribeDeadLetters,
    SystemStatus,
    UnregisterRoute,
    WhereIsGuardian,
    public_config,
)
from .paths import ancestors, shard_key, shard_of
from .process_identity import ProcessIdentity
from .superseding import Superseding
from .supervision import PARENT_WAKEUP, ParentWatch
from .thespian_types import Address, Intent
from .transport import Entry, Outbox, Router, address_key, unpack

log = logging.getLogger("reprise.guardian")

RESETTLE = "reprise-resettle"
"""The self-message that reroutes bounced batches outside transport callbacks."""

RECENT_DEAD_LETTERS = 100
CHILD_CHECK_DELAY = 1.0  # seconds after a host's exit to look for others that died unreported
_CLIENT_REQUESTS = frozenset({WhereIsGuardian, GetDirectory, RegisterRoute, UnregisterRoute, GetDeadLetters, GetErrors,
                              GetStatus, GetNodes})
"""What only clients ask the guardian (and the metrics server GetStatus: it takes nothing else from the guardian)."""
CLIENT_SWEEP = 5.0  # seconds between looks for clients on this machine whose process ended attached (_sweep_clients)
STATUS_WAIT = 2.0  # seconds a status request waits for busy hosts before answering without them
NODE_TIMEOUT = 5.0  # seconds without an answer to heartbeats after which a node is down (start(node_timeout=))
FENCE_AFTER = 0.8  # of the guardian's node_timeout: a member unpinged so long stops its hosts (NodeAgent._fence)
CLAIM_WAIT = 2.0  # seconds a node's agent has to answer before another agent registering its name replaces it
# A member's admin capability: its node agent's address. A leader started again learns its members' agents from
# their admins' convention registrations (Guardian._convention_update): the agents know only the dead guardian.
AGENT_CAPABILITY = "Reprise Agent"
AWAY_AFTER = 0.4  # of the guardian's node_timeout (two heartbeats missed): a member unpinged so long says the leader is
# unreachable, and tells the guardian that next pings it what it logged meanwhile (NodeAgent._away, _back)
LOG_SCAN_LIMIT = 16 << 20  # bytes of its log a member's agent reads to count what it logged while the leader was away
# A moving host keeps serving this long after its path was routed to the guardian, so that what senders with
# the old route still send it (hosts until their DirectoryUpdate lands, clients until their directory's 1 s TTL
# ends) is handled there instead of arriving after its exit, where Thespian drops it.
MOVE_GRACE = 1.2
LIVE = ("starting", "running", "restarting", "backoff", "moving")  # states of a host that should be served


@dataclass(frozen=True)
class GuardianInit:
    """Boot -> guardian: the system configuration."""

    config: Mapping[str, object]


@dataclass(frozen=True)
class SetGuardian:
    """Boot -> node agent: where this system's guardian lives; a member's agent registers its `node` there."""

    address: Address
    node: str | None = None  # None: the leader's agent (the guardian's own node is always up)
    node_timeout: float = NODE_TIMEOUT
    log_file: str | None = None  # this node's actors.log (NodeLogged points at it)


@dataclass
class HostRecord:
    """What the guardian knows about one host it supervises."""

    spec: HostSpec
    address: Address | None = None
    state: str = "starting"  # starting | running | backoff | restarting | stopping | stopped | failed
    pid: int = 0
    restarts: int = 0  # in all
    in_a_row: int = 0  # restarts since the host last ran stably (the backoff exponent)
    running_since: float | None = None
    failure: str | None = None  # why its actor failed, reported before its process exits
    failure_cause: SpawnCause | None = None  # what a failed restart failed on, when its host knew (HostReady.cause)
    last_exit: str | None = None
    last_cause: SpawnCause | None = None  # what the last exit failed on, when known (see exited)
    next_attempt: float | None = None  # time.time() of the next restart while backing off
    waiters: list[Address] = field(default_factory=list)  # Thespian addresses of those to tell when it is up
    # (client, entity path) of StopPath requests for one of its entities, answered once it stopped the entity
    # (EntityStopped), or once its process is gone.
    entity_stops: list[tuple[Address, str]] = field(default_factory=list)
    held: deque[Entry] = field(default_factory=deque)
    front: int = 0  # held entries that bounced off an earlier process: they go out before the rest
    past: dict[str, float] = field(default_factory=dict)  # address key of an earlier process -> until when to wait for it
    node: str | None = None  # where it runs (or last ran); set by _start_host
    awaiting_node: bool = False  # backing off until a node it may run on is up (no restart scheduled)

    def exited(self, why: str | None, cause: SpawnCause | None = None) -> None:
        """Record why the host last died or failed, and what on when known (the two always change together)."""
        self.last_exit, self.last_cause = why, cause


@dataclass
class NodeRecord:
    """A member node as the guardian sees it: its agent's address and when it last answered."""

    agent: Address
    state: str = "up"  # up | down
    last_seen: float = 0.0  # time.monotonic() of its last hello or pong
    stale: list[Address] = field(default_factory=list)  # host processes replaced elsewhere while it was down


@dataclass
class RebalanceJob:
    """A rebalance under way: the hosts still to look at, one moving at a time."""

    requester: Address
    queue: deque[str]
    moves: list[Move] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    current: str | None = None  # the key of the host moving now
    from_node: str = ""


@dataclass
class StatusRequest:
    """A status request waiting for the running hosts' HostStats."""

    requester: Address
    hosts: dict[str, HostInfo]
    waiting: set[str]


class Guardian(ThespianActor):  # type: ignore[misc]  # (Thespian has no type information)
    """Supervises hosts (restarting crashed ones), publishes routes, and records dead letters."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        thespian_fixes.adopt_process_logging()
        super().__init__(*args, **kwargs)
        self.config: dict[str, object] = {}
        self.hosts: dict[str, HostRecord] = {}
        self.temp_routes: dict[str, Address] = {}
        self.temp_owners: dict[str, ProcessIdentity] = {}  # prefix -> its client's process, where it said (_sweep_clients)
        self.swept = 0.0  # (monotonic) when _sweep_clients last looked
        self.epoch = 0
        self.router = Router()
        self.outbox: Outbox | None = None
        self.inflight: InFlight | None = None
        self.bounced: deque[Intent] = deque()  # batches that bounced off dead processes, in send order, not yet rerouted
        self.undelivered: deque[Intent] = deque()  # batches no live receiver took: dead letters, not yet recorded
        self.dead_count = 0
        self.recent: deque[DeadLetter] = deque(maxlen=RECENT_DEAD_LETTERS)
        self.dead_subscribers: dict[str, None] = {}  # (a path subscribed again is kept once)
        self.errors = ErrorLog()
        self.shutting_down = False
        self.status_requests: dict[int, StatusRequest] = {}
        self.status_tokens = itertools.count(1)
        self.shard_counts: dict[str, int] = {}  # path -> shards, for entity hosts of more than one
        self.parent_watch: ParentWatch | None = None
        self.my_node = "leader"
        self.nodes: dict[str, NodeRecord] = {}  # member nodes (the guardian's own node is always up)
        self.node_timeout = NODE_TIMEOUT
        self.ticking = False
        self.pings = itertools.count(1)
        self.claims: dict[str, Address] = {}  # node name -> the agent claiming it while another holds it (_node_hello)
        self.rebalancing: RebalanceJob | None = None
        self.directory_push = Superseding(self)

    def send(self, targetAddr: Address | None, msg: object) -> None:
        """Thespian's send, after the directory update waiting for `targetAddr` (if any): see Superseding.flush."""
        self.directory_push.flush(targetAddr)
        super().send(targetAddr, msg)

    @staticmethod
    def actorSystemCapabilityCheck(capabilities: Mapping[str, object], requirements: Mapping[str, object] | None) -> bool:
        """Only the leader's admin hosts the guardian (members find it through the leader)."""
        return bool(capabilities.get("Reprise Leader"))

    # ---- dispatch -------------------------------------------------------------------------------
    def receiveMessage(self, message: object, sender: Address) -> None:
        if type(message) in _CLIENT_REQUESTS:
            thespian_fixes.note_client(sender)  # (its exit does not wait for a stopped client's ACK: fix 14)
        handler = self._handlers.get(type(message))
        if handler is not None:
            handler(self, message, sender)
        elif isinstance(message, (ActorExitRequest, ChildActorExited, DeadEnvelope, PoisonMessage)):
            self._system_message(message, sender)
        else:
            log.warning("guardian ignored unexpected %r", message)
        if self.outbox is not None:
            self.outbox.flush()

    def _init(self, message: GuardianInit, sender: Address) -> None:
        # (its sends to healthy processes never queue behind those to hosts that take nothing: fix 11)
        thespian_fixes.lift_actor_pending_limit(self)
        self.config = dict(message.config)
        self.my_node = str(self.config.get("node") or "leader")
        timeout = self.config.get("node_timeout")
        self.node_timeout = float(timeout) if isinstance(timeout, int | float) else NODE_TIMEOUT
        self.inflight = InFlight(self, self._settled)
        self.inflight.no_bounce = self.myAddress
        self.outbox = Outbox(GUARDIAN_PATH, self.inflight.send, self._unpicklable)
        self.handleDeadLetters(True)
        self._publish()
        self.send(sender, Spawned(GUARDIAN_PATH))
        self.parent_watch = ParentWatch.start(self)
        self.notifyOnSystemRegistrationChanges(True)  # (members' admins: _convention_update; a no-op on local)

    def _where(self, message: WhereIsGuardian, sender: Address) -> None:
        self.send(sender, GuardianIs(self.myAddress))

    # ---- the directory ---------------------------------------------------------------------------
    def _routes(self) -> dict[str, Address | ShardSet]:
        routes: dict[str, Address | ShardSet] = {GUARDIAN_PATH: self.myAddress}
        routes.update(self.temp_routes)
        shards: dict[str, list[Address]] = {}
        for record in self.hosts.values():
            spec = record.spec
            if _serving(record):
                address = _address(record)
            elif record.state in ("restarting", "backoff", "moving") or (record.state == "starting" and spec.shards > 1):
                # Served again soon: senders route to the guardian, which holds the messages meanwhile.
                # (Without a route, a sender could not tell "restarting" from "nobody serves this path".)
                address = self.myAddress
            else:
                continue
            if spec.shards == 1:
                routes[spec.path] = address
            else:
                shards.setdefault(spec.path, [self.myAddress] * spec.shards)[spec.shard] = address
        for path, addresses in shards.items():
            routes[path] = ShardSet(tuple(addresses))
        return routes

    def _publish(self) -> None:
        """Install the routes locally and push them to every running host."""
        self.epoch += 1
        routes = self._routes()
        self.router.replace(routes, self.epoch)
        if self.shutting_down:
            # Every host is exiting too: a message to one already gone would hold this process in
            # Thespian's exit drain (retrying the dead socket for up to 7 s) after the system shut down.
            return
        update = DirectoryUpdate(routes, self.epoch)
        for record in self.hosts.values():
            if _serving(record):
                # (to a host that takes nothing, only the newest waits: actors/superseding.py)
                self.directory_push.send(_address(record), update)

    def _get_directory(self, message: GetDirectory, sender: Address) -> None:
        self.send(sender, DirectoryUpdate(self._routes(), self.epoch))

    def _register_route(self, message: RegisterRoute, sender: Address) -> None:
        self._sweep_clients(force=True)  # (routes of dead clients grow with registrations: bounded by them too)
        self.temp_routes[message.prefix] = sender
        if message.process is not None:
            self.temp_owners[message.prefix] = message.process
        self._publish()
        self.send(sender, Spawned(message.prefix))

    def _unregister_route(self, message: UnregisterRoute, sender: Address) -> None:
        if message.prefix in self.temp_routes:
            self._drop_temp_route(message.prefix)

    def _drop_temp_route(self, prefix: str, publish: bool = True) -> None:
        """A client's route is gone (closed, or its process died): so are its subscriptions."""
        gone = address_key(self.temp_routes.pop(prefix))
        if all(address_key(other) != gone for other in self.temp_routes.values()):
            thespian_fixes.forget_client(gone)  # (that client is gone: its port may be an actor's next, fix 14)
        self.temp_owners.pop(prefix, None)
        # Kept, each dead letter and error looked up every subscriber of every client that ever subscribed.
        forget_under(self.dead_subscribers, prefix)
        self.errors.forget_under(prefix)
        if publish:
            self._publish()

    def _sweep_clients(self, force: bool = False) -> None:
        """Drop the routes of clients on this machine whose process has ended without unregistering (a Spark Python
        worker ends with os._exit, or is killed when idle): kept, every route of every worker that ever attached
        stayed in the directory each host holds, until something sent to it bounced. At most every CLIENT_SWEEP
        seconds unless `force`d; a client elsewhere is known only by a bounce, as before (actors/process_identity.py)."""
        now = time.monotonic()
        if not self.temp_owners or (not force and now - self.swept < CLIENT_SWEEP):
            return
        self.swept = now
        gone = [prefix for prefix, process in self.temp_owners.items() if process.is_gone()]
        for prefix in gone:
            self._drop_temp_route(prefix, publish=False)
        if gone:
            log.info("guardian: dropped the routes of %d client(s) whose process ended attached", len(gone))
            self._publish()

    # ---- spawning and supervising hosts ----------------------------------------------------------
    def _spawn(self, message: SpawnHost, sender: Address) -> None:
        spec = message.spec
        clash = self._clash(spec.path)
        if clash:
            self.send(sender, Spawned(spec.path, f"path {spec.path} is already served by {clash}; stop that actor "
                                      "first or choose another path", SpawnCause("path_taken", clash)))
            return
        unplaced = self._unplaceable(spec)
        if unplaced:
            self.send(sender, Spawned(spec.path, unplaced))
            return
        for key in [k for k, r in self.hosts.items() if r.spec.path == spec.path]:
            del self.hosts[key]  # stopped or failed before (no clash): forget them
        if spec.shards > 1:
            self.shard_counts[spec.path] = spec.shards
        else:
            self.shard_counts.pop(spec.path, None)
        records = [HostRecord(replace(spec, shard=k)) for k in range(spec.shards)]
        records[0].waiters.append(sender)  # answered when every shard is up
        for record in records:
            self.hosts[record.spec.key] = record
            self._start_host(record)

    def _clash(self, path: str) -> str | None:
        """The served path that `path` is, is below or is above (a spawn there is refused), else None."""
        live = [r.spec.path for r in self.hosts.values() if r.state not in ("stopped", "failed")]
        for other in live + list(self.temp_routes) + [GUARDIAN_PATH]:
            if other == path or path.startswith(other + "/") or other.startswith(path + "/"):
                return other
        return None

    def _serving(self, prefix: str, target: str) -> HostRecord | None:
        """The record of the host serving `target` if `prefix` is a host's path (the right shard's)."""
        shards = self.shard_counts.get(prefix)
        if shards is None:
            return self.hosts.get(prefix)
        return self.hosts.get(shard_key(prefix, shard_of(target, prefix, shards), shards))

    def _shards(self, record: HostRecord) -> list[HostRecord]:
        """Every shard of `record`'s host, shard 0 (which holds the spawn's waiters) first."""
        spec = record.spec
        if spec.shards == 1:
            return [record]
        return [r for k in range(spec.shards) if (r := self.hosts.get(shard_key(spec.path, k, spec.shards)))]

    def _start_host(self, record: HostRecord, state: str = "starting") -> None:
        node = self._place(record)
        if node is None:
            # Nowhere to run now: wait (its messages held) until a node it may run on is up (_node_up).
            record.state, record.address, record.pid, record.next_attempt = "backoff", None, 0, None
            record.awaiting_node = True
            record.exited(self._why_waiting(record))
            log.warning("host %s waits: %s", record.spec.key, record.last_exit)
            return
        record.awaiting_node = False
        record.node = node
        spec = record.spec
        requirements = {"Reprise Node": node} if spec.node or spec.nodes else None
        record.address = self.createActor("actors.host.HostActor", targetActorRequirements=requirements)
        record.state = state
        record.pid = 0  # the old process's pid until HostReady (it must not pass for the new one's)
        self.send(record.address, InitHost(record.spec, self._routes(), self.epoch, self.config, self.myAddress))

    def _host_ready(self, message: HostReady, sender: Address) -> None:
        record = self.hosts.get(message.path)
        if record is None:
            return
        lead = self._shards(record)[0]
        path = record.spec.path
        if message.error and record.restarts and record.state == "restarting":
            # A restart that failed (e.g. its journal is unreachable): back off and try again.
            log.error("host %s failed to restart:\n%s", message.path, message.error)
            record.failure = f"failed to start: {message.error.strip().splitlines()[-1]}"
            record.failure_cause = message.cause  # (typed: `reprise status` gives the fix without parsing it)
            self._new_address(record, sender)  # (its exit is reported under this address, not createActor's)
            self.send(sender, ActorExitRequest())
            return
        if message.error:
            log.error("host %s failed to start:\n%s", message.path, message.error)
            self.send(sender, ActorExitRequest())
            self._spawn_failed(record, message.error, message.cause)
            return
        # The reply's sender is the host's real address (createActor returned a local placeholder).
        self._new_address(record, sender)
        record.pid = message.pid
        if record.state == "restarting" and record.failure is not None:
            # Its actor failed while starting (HostDone came first): the exit that follows restarts it.
            for waiter in lead.waiters:
                self.send(waiter, Spawned(path))
            lead.waiters.clear()
            return
        if record.state == "stopping":
            # Its actor stopped while starting (HostDone came first): the spawn itself succeeded, and
            # the exit that follows is a stop, not a crash. Held messages become dead letters then.
            for waiter in lead.waiters:
                self.send(waiter, Spawned(path))
            lead.waiters.clear()
            return
        record.state = "running"
        record.running_since = time.monotonic()
        record.next_attempt = None
        self._publish()
        node = self.nodes.get(record.node or "")
        if node is not None and node.state == "up":
            # Its agent learns of it now, not at the next heartbeat (node_timeout/5 away): were this guardian to die
            # meanwhile, the agent would not stop it (_fence), and a restarted leader would start a second copy.
            self._ping(record.node or "", node)
        if all(r.state == "running" for r in self._shards(record)):
            for waiter in lead.waiters:
                self.send(waiter, Spawned(path))
            lead.waiters.clear()
        if not self._blocked(record):
            self._release_to(record)
        job = self.rebalancing
        if job is not None and job.current == record.spec.key:
            job.moves.append(Move(record.spec.key, job.from_node, record.node or self.my_node))
            job.current = None
            self._next_move()

    def _spawn_failed(self, record: HostRecord, error: str, cause: SpawnCause | None = None) -> None:
        """The first start of `record`'s host failed (`error` says why, `cause` what on if known): its spawn
        fails, every shard with it."""
        record.state = "failed"
        for other in self._shards(record):  # a spawn succeeds whole or not at all
            if other is not record and other.state in ("starting", "running"):
                other.state = "stopping"
                if other.address is not None:
                    self.send(other.address, ActorExitRequest())
        self._release_held(record, f"actor at {record.spec.key} failed to start")
        lead = self._shards(record)[0]
        for waiter in lead.waiters:
            # The reason on the first line, unless all there is to say is a traceback.
            sep = "\n" if error.startswith("Traceback") else " "
            self.send(waiter, Spawned(record.spec.path, f"{record.spec.key} failed to start:{sep}{error}", cause))
        lead.waiters.clear()

    def _host_done(self, message: HostDone, sender: Address) -> None:
        record = self.hosts.get(message.path)
        if record is None or record.state not in ("running", "starting", "restarting", "backoff"):
            return
        if message.gave_up:
            record.state = "failed"
            record.exited(message.failure)
            self._publish()
            self._release_held(record, f"actor at {message.path} failed: {message.failure}")
            return
        if message.failure is not None and (record.state == "running" or record.restarts):
            # Its actor failed while its host (re)started (a running host restarts a failed actor itself,
            # see Host._back_off): the host is replaced after a backoff, its messages held meanwhile.
            # One that fails during the first start of its spawn stays stopped instead: the spawn reports
            # success, and restarting an actor that cannot even start once would loop.
            log.warning("actor %s failed (%s); its host will be restarted", message.path, message.failure)
            record.failure, record.failure_cause = message.failure, None
            record.state = "restarting"
        else:
            record.state = "stopping"
        self._publish()
        if message.failure is not None:
            self.send(sender, ActorExitRequest())  # after the new routes: the host forwards until then

    def _actor_backing_off(self, message: ActorBackingOff, sender: Address) -> None:
        # The host restarts its actor itself and holds its messages: only the status changes here.
        record = self.hosts.get(message.path)
        if record is not None and _serving(record):  # (backoff: its restart failed too)
            record.state = "backoff"
            record.restarts += 1
            record.exited(message.reason)
            record.next_attempt = time.time() + message.delay

    def _actor_restarted(self, message: ActorRestarted, sender: Address) -> None:
        record = self.hosts.get(message.path)
        if record is not None and record.state == "backoff" and record.address is not None:
            record.state = "running"
            record.next_attempt = None

    def _entity_stopped(self, message: EntityStopped, sender: Address) -> None:
        key = address_key(sender)
        for record in self.hosts.values():
            if record.address is not None and address_key(record.address) == key:
                for i, (client, path) in enumerate(record.entity_stops):
                    if path == message.path:
                        del record.entity_stops[i]
                        self.send(client, Spawned(path))
                        return

    def _child_exited(self, address: Address) -> None:
        key = address_key(address)
        found = [(p, r) for p, r in self.hosts.items() if r.address is not None and address_key(r.address) == key]
        if not found:
            # A process that died before its HostReady: its record still holds the placeholder createActor
            # returned, whose key is not the real address's (Thespian's own comparison knows them for one). Its
            # exit was ignored: the host stayed "starting" for good, and its spawn timed out after 60 s.
            found = [(p, r) for p, r in self.hosts.items()
                     if r.address is not None and not r.pid and r.address == address]
        if not found:
            return  # Thespian reports each exit twice on multiproc; the second finds nothing.
        path, record = found[0]
        self._process_gone(record)
        self._retire(record, key)
        record.address = None
        self._status_without(path)
        if record.state == "moving" and not self.shutting_down:
            # A rebalance stopped it (its work done, its group commit flushed): start it on its new node
            # (as a restart: should it fail to start there, it backs off and tries again).
            record.running_since = None
            record.restarts += 1
            self._start_host(record, "restarting")
            if record.awaiting_node:
                self._move_failed(record, record.last_exit or "no node to move to")
            return
        if self.shutting_down or record.state in ("stopping", "stopped", "failed"):
            record.state = "failed" if record.state == "failed" else "stopped"
            self._publish()
            self._release_held(record, f"actor at {path} stopped")
            self._stopped_waiters(record)
            return
        if not record.pid and record.state == "starting":
            # Its first start: a spawn succeeds whole or not at all, and restarting what cannot start once would
            # loop (as for a HostReady with an error).
            why = ("its process exited while starting, before it reported ready (killed, or the interpreter ended: "
                   "os._exit, a crash in native code)")
            record.exited(why)
            log.error("host %s failed to start: %s", record.spec.key, why)
            self._spawn_failed(record, why)
            return
        # (pid 0: its process had not reported ready; "pid 0" named no process)
        self._back_off(record, record.failure or (f"process exited unexpectedly (pid {record.pid})" if record.pid
                                                  else "process exited while restarting, before it reported ready"),
                       record.failure_cause if record.failure else None)

    def _stopped_waiters(self, record: HostRecord) -> None:
        """Answer those waiting for `record`'s host to stop, once the last of its shards has: shards need not
        exit in the order asked (one may flush longer), and the path must be free when System.stop returns."""
        still = [r for r in self.hosts.values() if r.spec.path == record.spec.path and r.state == "stopping"]
        if still:
            still[-1].waiters.extend(record.waiters)
        else:
            for waiter in record.waiters:
                self.send(waiter, Spawned(record.spec.path))
        record.waiters.clear()

    def _process_gone(self, record: HostRecord) -> None:
        """Answer the entity stops waiting on `record`'s process, which is gone (and its entities with it)."""
        stops, record.entity_stops = record.entity_stops, []
        for client, entity in stops:
            self.send(client, Spawned(entity))

    def _back_off(self, record: HostRecord, reason: str, cause: SpawnCause | None = None) -> None:
        """Schedule the restart of a host whose process is gone, after its backoff delay (or give up); `cause`
        is what its last start failed on, when known."""
        backoff = record.spec.backoff
        now = time.monotonic()
        if record.running_since is not None and now - record.running_since >= backoff.stable_after:
            record.in_a_row = 0
        record.running_since = None
        record.failure, record.failure_cause = None, None
        record.exited(reason, cause)
        key = record.spec.key
        if self.rebalancing is not None and self.rebalancing.current == key:
            self._move_failed(record, reason)
        if backoff.max_restarts is not None and record.in_a_row >= backoff.max_restarts:
            log.error("host %s died (%s) after %d restarts in a row: giving up (backoff max_restarts)",
                      key, reason, record.in_a_row)
            record.state = "failed"
            record.next_attempt = None
            self._publish()
            self._release_held(record, f"actor at {key} failed: {reason}")
            return
        delay = backoff.delay(record.in_a_row)
        record.in_a_row += 1
        record.restarts += 1
        record.state = "backoff"
        record.next_attempt = time.time() + delay
        log.warning("host %s died (%s); restarting it in %.2f s", key, reason, delay)
        self._publish()
        self.wakeupAfter(timedelta(seconds=delay), ("restart", key, record.restarts))

    def _restart_due(self, key: str, restarts: int) -> None:
        record = self.hosts.get(key)
        if record is None or record.state != "backoff" or record.restarts != restarts or self.shutting_down:
            return  # stopped, respawned or shut down meanwhile
        record.next_attempt = None
        self._start_host(record, "restarting")

    def _stop(self, message: StopPath, sender: Address) -> None:
        path = message.path
        live = LIVE
        group = [r for r in self.hosts.values() if r.spec.path == path and r.state in live]
        if group:
            for record in group:
                if record.address is None:  # backing off: no process to stop
                    record.state = "stopped"
                    record.next_attempt = None
                    self._release_held(record, f"actor at {record.spec.key} stopped")
                    continue
                record.state = "stopping"
                self.send(record.address, ActorExitRequest())
            stopping = [r for r in group if r.state == "stopping"]
            if stopping:
                stopping[-1].waiters.append(sender)  # answered when the last of them exits (_child_exited)
            else:
                self.send(sender, Spawned(path))
            self._publish()
            return
        for prefix in ancestors(path):
            host = self._serving(prefix, path)
            if host is not None and host.state == "running" and host.spec.entities:
                # Answered once the host has stopped it: a message sent after stop() returns finds a new instance.
                host.entity_stops.append((sender, path))
                self.send(host.address, StopEntity(path))
                return
        self.send(sender, Spawned(path, f"nothing runs at {path}"))

    # ---- nodes: membership, placement, failover, rebalance ------------------------------------------
    def _up(self, name: str) -> bool:
        node = self.nodes.get(name)
        return name == self.my_node or (node is not None and node.state == "up")

    def _node_states(self) -> dict[str, str]:
        states = {name: node.state for name, node in self.nodes.items()}
        states[self.my_node] = "up"
        return dict(sorted(states.items()))

    def _here(self, record: HostRecord) -> bool:
        """True if the host runs on the guardian's own node (its pid is this machine's)."""
        return record.node in (None, self.my_node)

    def _place(self, record: HostRecord) -> str | None:
        """The node `record` should run on now (None: none it may run on is up).

        `nodes=`: shard k on live[k % len(live)], live = the listed nodes that are up, in list order (a
        single host: the first live one). `node=`: that node unless it is known to be down. Else the
        guardian's own node.
        """
        spec = record.spec
        if spec.nodes:
            live = [name for name in spec.nodes if self._up(name)]
            return live[spec.shard % len(live)] if live else None
        if spec.node:
            node = self.nodes.get(spec.node)
            return None if node is not None and node.state == "down" and spec.node != self.my_node else spec.node
        return self.my_node

    def _why_waiting(self, record: HostRecord) -> str:
        spec = record.spec
        if spec.nodes:
            return f"none of its nodes {list(spec.nodes)} is up"
        return f"node {spec.node} is down"

    def _unplaceable(self, spec: HostSpec) -> str | None:
        """Why a spawn of `spec` cannot start now (its nodes all down, or its node= never joined), or None."""
        if spec.node and not spec.nodes and spec.node != self.my_node and spec.node not in self.nodes:
            # (Thespian would look for a system with that requirement, find none, and the spawn would time out.)
            known = [self.my_node, *self.nodes]
            close = difflib.get_close_matches(spec.node, known, n=1)
            return (f"cannot start {spec.path}: no node named {spec.node!r} has joined this system"
                    f"{f' (did you mean {close[0]!r}?)' if close else ''}; nodes now: "
                    f"{', '.join(f'{n} {s}' for n, s in self._node_states().items())}. A member joins with "
                    "actors.start(..., leader=..., node=NAME) or `reprise node`")
        if self._place(HostRecord(spec)) is not None:
            return None
        return (f"cannot start {spec.path}: {self._why_waiting(HostRecord(spec))} (nodes now: "
                f"{', '.join(f'{n} {s}' for n, s in self._node_states().items())})")

    def _node_hello(self, message: NodeHello, sender: Address) -> None:
        name = message.node
        if name == self.my_node:
            self._refuse_node(sender, name, "that is the leader's own node name")
            return
        node = self.nodes.get(name)
        if node is not None and node.state == "up" and address_key(node.agent) != address_key(sender):
            # Another agent under a node name that is up: the member restarted before we noticed it was gone,
            # or a second member was started under the same name while the first runs. Only the first agent
            # can tell: an answer from it (_node_pong) refuses the newcomer; none within CLAIM_WAIT admits it.
            if name not in self.claims:
                self.claims[name] = sender
                self._ping(name, node)
                self.wakeupAfter(timedelta(seconds=min(CLAIM_WAIT, self.node_timeout)), ("claim", name))
            return
        self._admit_node(name, sender)

    def _convention_update(self, message: ActorSystemConventionUpdate, sender: Address) -> None:
        """A member's admin registered with this leader's admin: if it names its node agent (AGENT_CAPABILITY), take
        it as that agent's hello. The agent of a node that joined this guardian says hello itself; this is for the
        members of a leader killed and started again, whose agents say hello to the dead guardian (and whose
        admins re-register when their agents hear no heartbeat, see NodeAgent)."""
        capabilities = message.remoteCapabilities or {}
        name, agent = capabilities.get("Reprise Node"), capabilities.get(AGENT_CAPABILITY)
        if message.remoteAdded and isinstance(name, str) and agent is not None and not self.shutting_down:
            node = self.nodes.get(name)
            if node is None or node.state != "up" or address_key(node.agent) != address_key(agent):
                log.warning("node %s registered with this leader's admin (agent %s): taking it as its hello",
                            name, agent)
                self._node_hello(NodeHello(name), agent)

    def _node_logged(self, message: NodeLogged, sender: Address) -> None:
        """A member heard no guardian for a while (this leader was down, or cut off from it): what it logged meanwhile
        reached neither this leader's log nor its errors, so say where it is (an error in `reprise status`)."""
        span = f"from {_clock(message.since)} to {_clock(message.until)}"
        if not message.lines:
            log.info("node %s heard no guardian %s; it logged no warning or error meanwhile", message.node, span)
            return
        reason = (f"node {message.node} heard no guardian {span} (the leader was down or cut off): it logged "
                  f"{message.lines} warning(s) or error(s) meanwhile, which may not have reached this leader's log "
                  f"or errors; see {message.log_file} on that node's machine")
        log.warning("%s", reason)
        self._control(None, ActorError(time.time(), f"node {message.node}", GUARDIAN_PATH, reason))

    def _admit_node(self, name: str, sender: Address) -> None:
        """Register node `name`'s agent at `sender` (welcomed), replacing a record of another agent of it."""
        self.send(sender, NodeWelcome(name))
        node = self.nodes.get(name)
        if node is not None and node.state == "up" and address_key(node.agent) != address_key(sender):
            # It restarted (a new agent) before we noticed it was gone: its hosts died with the old one.
            self._node_down(name, f"it registered again from {sender}")
            node = self.nodes[name]
        if node is None or node.state == "down":
            log.warning("node %s is up (agent %s)", name, sender)
            # Processes it kept running are stopped only if the same agent is back (a node that restarted has
            # none left, and a new process there might have reused an old address).
            same = node is not None and address_key(node.agent) == address_key(sender)
            self.nodes[name] = NodeRecord(sender, "up", time.monotonic(), node.stale if node is not None and same else [])
            self._node_up(name)
        else:
            node.last_seen = time.monotonic()
        if not self.ticking:
            self.ticking = True
            self.wakeupAfter(timedelta(seconds=self.node_timeout / 5), ("nodes",))

    def _claim_due(self, name: str) -> None:
        """The first agent of node `name` did not answer within CLAIM_WAIT: it is gone, the newcomer is the node."""
        claimant = self.claims.pop(name, None)
        if claimant is not None:
            self._admit_node(name, claimant)

    def _refuse_node(self, agent: Address, name: str, why: str) -> None:
        log.error("refused a member registering as node %r from %s: %s", name, agent, why)
        self._control(None, ActorError(time.time(), "guardian", GUARDIAN_PATH,
                                       f"a member registering as node {name!r} from {agent} was refused: {why}"))
        self.send(agent, NodeRefused(name, f"the leader refused node name {name!r}: {why}; start this member with "
                                           "another node name (--node), or stop the other one first"))

    def _node_pong(self, message: NodePong, sender: Address) -> None:
        node = self.nodes.get(message.node)
        if node is not None and address_key(node.agent) == address_key(sender):
            node.last_seen = time.monotonic()
            claimant = self.claims.pop(message.node, None)
            if claimant is not None:
                self._refuse_node(claimant, message.node, f"a live member already runs as that node (its agent "
                                                          f"at {sender} answers)")
            if node.state == "down":  # (a ping sent before we gave up on it) it was cut off, not dead
                log.warning("node %s answers again: it is up", message.node)
                node.state = "up"
                self._node_up(message.node)
            elif message.gone:
                self._pids_gone(PidsGone(message.node, message.gone), sender)

    def _get_nodes(self, message: GetNodes, sender: Address) -> None:
        self.send(sender, Nodes(self._node_states()))

    def _heartbeat(self) -> None:
        """Ping every up node; declare down those that have not answered for node_timeout."""
        now = time.monotonic()
        for name, node in list(self.nodes.items()):
            if node.state != "up" or self.shutting_down:
                continue  # a node declared down registers again (its agent says hello) when it is back
            if now - node.last_seen > self.node_timeout:
                self._node_down(name, f"no answer to heartbeats for {self.node_timeout:g} s")
            else:
                self._ping(name, node)
        if self.shutting_down or not any(node.state == "up" for node in self.nodes.values()):
            self.ticking = False
            return
        self.wakeupAfter(timedelta(seconds=self.node_timeout / 5), ("nodes",))

    def _ping(self, name: str, node: NodeRecord) -> None:
        """A heartbeat to node `name`, with the pids of its hosts (a host that died there unreported, see
        _check_children, is found within a heartbeat) and their addresses (the agent stops them if the
        heartbeats stop: NodeAgent._fence)."""
        serving = [r for r in self.hosts.values() if r.node == name and r.pid and _serving(r)]
        self.send(node.agent, NodePing(next(self.pings), tuple(r.pid for r in serving),
                                       tuple(_address(r) for r in serving), self.node_timeout))

    def _ask_nodes_about(self, dead_key: str) -> None:
        """Ask a member's agent whether the processes of its hosts at `dead_key` are gone (its /proc, not ours:
        a dead host's exit report can be lost, see _check_children)."""
        for record in self.hosts.values():
            node = self.nodes.get(record.node or "")
            if node is not None and node.state == "up" and _serving(record) and record.pid \
                    and address_key(_address(record)) == dead_key:
                self.send(node.agent, CheckPids((record.pid,)))

    def _pids_gone(self, message: PidsGone, sender: Address) -> None:
        for record in list(self.hosts.values()):
            if record.node == message.node and record.pid in message.pids and _serving(record):
                log.warning("host %s (pid %d on node %s) died unreported; handling its exit",
                            record.spec.key, record.pid, message.node)
                self._child_exited(_address(record))

    def _node_unreachable(self, agent_key: str) -> None:
        for name, node in list(self.nodes.items()):
            if node.state == "up" and address_key(node.agent) == agent_key:
                self._node_down(name, "its node agent is unreachable")

    def _node_down(self, name: str, why: str) -> None:
        """Restart every `nodes=` host of node `name` on another live node of its list; hold its pinned ones."""
        self.nodes[name].state = "down"
        log.error("node %s is down (%s)", name, why)
        for record in list(self.hosts.values()):
            if record.node != name or record.state not in LIVE + ("stopping",):
                continue
            if record.address is not None:
                # Whatever we sent its process may still bounce: the next process gets it first (_retire).
                self._retire(record, address_key(record.address))
                if record.state != "stopping" and record.pid:  # (pid: a real process, HostReady came)
                    # If the node was only cut off, that process still runs: stopped when the node is back.
                    self.nodes[name].stale.append(record.address)
                record.address = None
                self._process_gone(record)
            if record.state == "stopping":
                record.state = "stopped"
                self._release_held(record, f"actor at {record.spec.key} stopped")
                self._stopped_waiters(record)
                continue
            record.running_since, record.failure, record.failure_cause = None, None, None
            if record.state == "backoff" and not record.awaiting_node:
                continue  # a restart is scheduled (_restart_due): it will be placed on a live node then
            record.restarts += 1
            self._start_host(record, "restarting")
            if record.awaiting_node:
                if self.rebalancing is not None and self.rebalancing.current == record.spec.key:
                    self._move_failed(record, record.last_exit or why)
            else:
                record.exited(f"node {name} is down")
                log.warning("host %s: node %s is down; starting it on node %s", record.spec.key, name, record.node)
        self._publish()

    def _node_up(self, name: str) -> None:
        """Start the hosts waiting for a node (pinned to `name`, or with no live node in their list)."""
        node = self.nodes[name]
        stale, node.stale = node.stale, []
        for address in stale:
            # A node that was cut off, not dead, still runs the processes replaced elsewhere meanwhile: two of
            # them must not serve (and journal) the same entities. (Gone with a dead node: this bounces.)
            self.send(address, ActorExitRequest())
        for record in list(self.hosts.values()):
            if record.awaiting_node and record.state == "backoff" and record.address is None:
                self._start_host(record, "restarting")
        self._publish()

    def _rebalance(self, message: Rebalance, sender: Address) -> None:
        if self.rebalancing is not None:
            self.send(sender, Rebalanced((), "a rebalance is already under way; wait for it to finish"))
            return
        keys = [key for key, r in self.hosts.items()
                if r.spec.nodes and (message.path is None or r.spec.path == message.path)]
        if message.path is not None and not keys:
            self.send(sender, Rebalanced((), f"no host spawned with nodes= runs at {message.path}"))
            return
        self.rebalancing = RebalanceJob(sender, deque(keys))
        self._next_move()

    def _next_move(self) -> None:
        """Move the next misplaced host: stop it gracefully (messages held meanwhile), then start it elsewhere."""
        job = self.rebalancing
        if job is None or job.current is not None:
            return
        while job.queue:
            record = self.hosts.get(job.queue.popleft())
            if record is None or record.state != "running" or record.address is None:
                continue  # not running now: it is placed afresh when it starts
            target = self._place(record)
            if target is None or target == record.node:
                continue
            job.current, job.from_node = record.spec.key, record.node or self.my_node
            log.warning("rebalance: moving %s from node %s to node %s", record.spec.key, job.from_node, target)
            record.state = "moving"
            self._publish()  # new messages for it come here (held) before it is asked to exit
            self.wakeupAfter(timedelta(seconds=MOVE_GRACE), ("move", record.spec.key))
            return
        self.rebalancing = None
        self.send(job.requester, Rebalanced(tuple(job.moves), "; ".join(job.errors) or None))

    def _move_failed(self, record: HostRecord, reason: str) -> None:
        job = self.rebalancing
        if job is None or job.current != record.spec.key:
            return
        job.errors.append(f"{record.spec.key} did not move: {reason}")
        job.current = None
        self._next_move()

    # ---- routing on behalf of others --------------------------------------------------------------
    def _batch(self, batch: Batch, sender: Address) -> None:
        if batch.origin not in self.hosts and batch.origin != GUARDIAN_PATH:
            self.router.learn(batch.origin, sender)
        for entry in unpack(batch, self._unpicklable):
            self._reroute(entry, None)

    def _reroute(self, entry: Entry, dead_key: str | None, bounced: bool = False) -> None:
        """Deliver an entry someone could not: forward it, hold it for a restarting host, or dead-letter it.

        `bounced`: the entry is ours, back from a dead process; it was sent before anything held now.
        """
        sender, target, message = entry
        if target == GUARDIAN_PATH:
            self._control(sender, message)
            return
        for prefix in ancestors(target):
            record = self._serving(prefix, target)
            if record is not None:
                if _serving(record) and address_key(_address(record)) != dead_key and not self._blocked(record):
                    self._release_to(record)
                    self._queue(address_key(_address(record)), _address(record), entry)
                elif record.state in LIVE:
                    if bounced:
                        record.held.insert(record.front, entry)
                        record.front += 1
                    elif len(record.held) < record.spec.hold_limit or type(message) is Barrier:
                        # A Barrier past the limit too (one per handover or client drain): dropped, it was a dead
                        # letter among the user's, and its sender held back what it sends there until another
                        # came back, or its wait ran out and it sent them anyway (order may break).
                        record.held.append(entry)
                    else:
                        doing = "backing off" if record.state == "backoff" else record.state
                        self._dead(sender, target, message,
                                   f"host {record.spec.key} is {doing}; hold limit {record.spec.hold_limit} reached")
                else:
                    self._dead(sender, target, message, f"actor at {prefix} is {record.state}")
                return
        hit = self.router.resolve(target)
        if hit is not None and hit[0] != dead_key and hit[0] != address_key(self.myAddress):
            self._queue(hit[0], hit[1], entry)
            return
        self._dead(sender, target, message, f"no actor serves {target}")

    def _control(self, sender: str | None, message: object) -> None:
        if isinstance(message, DeadLetter):
            self._record_dead(message)
        elif isinstance(message, SubscribeDeadLetters):
            self.dead_subscribers.setdefault(message.path, None)
        elif isinstance(message, ActorError):
            log.info("error in %s (host %s): %s", message.path, message.host, message.reason)
            for path in self.errors.record(message):
                hit = self.router.resolve(path)
                if hit is not None:
                    self._queue(hit[0], hit[1], (GUARDIAN_PATH, path, message))
        elif isinstance(message, SubscribeErrors):
            self.errors.subscribe(message.path)
        else:
            log.warning("guardian ignored %r from %s", message, sender)

    # ---- dead letters ----------------------------------------------------------------------------
    def _dead(self, sender: str | None, target: str, message: object, reason: str) -> None:
        self._record_dead(DeadLetter(sender, target, message, reason))

    def _record_dead(self, letter: DeadLetter) -> None:
        self.dead_count += 1
        self.recent.append(letter)
        log.debug("dead letter to %s from %s: %s", letter.target, letter.sender, letter.reason)
        asker = letter.sender
        if asker is not None and is_ask(asker):  # no reply will come: the ask fails now rather than at its timeout
            hit = self.router.resolve(asker)
            if hit is not None:
                self._queue(hit[0], hit[1], (GUARDIAN_PATH, asker, AskUndelivered(letter.target, letter.reason)))
        for path in list(self.dead_subscribers):  # (a send may fail at once, and a gone client take its own)
            hit = self.router.resolve(path)
            if hit is not None:
                self._queue(hit[0], hit[1], (GUARDIAN_PATH, path, letter))

    def _release_held(self, record: HostRecord, reason: str) -> None:
        held, record.held, record.front = record.held, deque(), 0
        for sender, target, message in held:
            self._dead(sender, target, message, reason)

    def _queue(self, key: str, address: Address, entry: Entry) -> None:
        assert self.outbox is not None  # made by _init, which comes before any message to route
        self.outbox.add(key, address, entry)

    def _unpicklable(self, entry: Entry, why: str) -> None:
        sender, target, message = entry
        self._dead(sender, target, repr(message), f"message {why}")

    def _get_dead_letters(self, message: GetDeadLetters, sender: Address) -> None:
        self.send(sender, DeadLetters(self.dead_count, tuple(self.recent)))

    def _get_errors(self, message: GetErrors, sender: Address) -> None:
        self.send(sender, self.errors.snapshot())

    def _status(self, message: GetStatus, sender: Address) -> None:
        """Ask every running host for its stats; answer when all replied or after STATUS_WAIT."""
        for record in list(self.hosts.values()):
            # A host of this machine killed a moment ago is running here until its exit report comes (or
            # never, see _check_children): the answer must not show its dead process as serving.
            if _serving(record) and self._here(record) and record.pid and not _is_running_here(record.pid):
                self._unreported_exit(record)
        hosts = {path: HostInfo(r.state, r.restarts, _current_pid(r), r.spec.entities, last_exit=r.last_exit,
                                last_cause=r.last_cause, next_attempt=r.next_attempt, node=r.node or r.spec.node)
                 for path, r in self.hosts.items()}
        running = {path: r.address for path, r in self.hosts.items() if _serving(r)}
        token = next(self.status_tokens)
        self.status_requests[token] = StatusRequest(sender, hosts, set(running))
        if not running:
            self._answer_status(token)
            return
        for address in running.values():
            self.send(address, GetHostStats(token))
        self.wakeupAfter(timedelta(seconds=STATUS_WAIT), ("status", token))

    def _host_stats(self, message: HostStats, sender: Address) -> None:
        request = self.status_requests.get(message.token)
        if request is None or message.path not in request.waiting:
            return  # late: that request was already answered
        request.waiting.discard(message.path)
        info = request.hosts.get(message.path)
        if info is not None:
            request.hosts[message.path] = replace(info, alive=message.alive, counters=dict(message.counters),
                                                  messages_in=message.messages_in, messages_out=message.messages_out,
                                                  histograms=dict(message.histograms),
                                                  messages_parked=message.messages_parked)
        if not request.waiting:
            self._answer_status(message.token)

    def _status_without(self, path: str) -> None:
        """Status requests stop waiting for a host whose process exited: they answer now, not after STATUS_WAIT."""
        for token, request in list(self.status_requests.items()):
            if path in request.waiting:
                request.waiting.discard(path)
                if not request.waiting:
                    self._answer_status(token)

    def _answer_status(self, token: int) -> None:
        request = self.status_requests.pop(token, None)
        if request is not None:
            self.send(request.requester, SystemStatus(request.hosts, self.dead_count, public_config(self.config),
                                                         errors=tuple(self.errors.recent), nodes=self._node_states(),
                                                         guardian_pid=os.getpid()))

    def _wakeup(self, message: WakeupMessage, sender: Address) -> None:
        payload = message.payload
        if isinstance(payload, tuple) and payload[:1] == ("status",):
            self._answer_status(payload[1])
        elif payload == ("check-children",):
            self._check_children()
        elif isinstance(payload, tuple) and payload[:1] == ("restart",):
            self._restart_due(payload[1], payload[2])
        elif payload == ("resettle",):
            self._resettle(RESETTLE, None)
        elif payload == ("nodes",):
            self._heartbeat()
        elif isinstance(payload, tuple) and payload[:1] == ("claim",):
            self._claim_due(payload[1])
        elif isinstance(payload, tuple) and payload[:1] == ("move",):
            record = self.hosts.get(payload[1])
            if record is not None and record.state == "moving" and record.address is not None:
                self.send(record.address, ActorExitRequest())
        elif payload == PARENT_WAKEUP and self.parent_watch is not None:
            if self.parent_watch.orphaned():
                # The admin died: nobody can reach this system any more. Stop the hosts (Thespian sends
                # each child an ActorExitRequest when we exit) and exit.
                log.error("guardian: the admin process is gone; stopping every host and exiting")
                self.shutting_down = True
                self.send(self.myAddress, ActorExitRequest())
            else:
                self._sweep_clients()  # (the parent watch's tick: a multi-process system, where clients are processes)

    def _check_children(self) -> None:
        """Handle the exit of host processes that died without a ChildActorExited.

        Thespian 4.0.1 can drop the ChildActorExited of a child that dies together with another one
        (seen killing two shards at once: one was never restarted). A dead child of this process is a
        zombie until reaped, which /proc shows; hosts on other machines are not our children.
        """
        me = os.getpid()
        for record in list(self.hosts.values()):
            if record.state in LIVE and record.pid and record.address is not None:
                # A host on a member is no child of ours, and its pid is not this machine's: its node's
                # heartbeat or its admin's ChildActorExited tells of its death.
                if self._here(record) and _is_dead_child(record.pid, me):
                    self._unreported_exit(record)
                elif _serving(record):
                    # Thespian may have reaped it already: a message to a gone process comes back as a
                    # DeadEnvelope (handled in _dead_envelope).
                    self.send(record.address, GetHostStats(0))

    def _unreported_exit(self, record: HostRecord) -> None:
        """Handle the exit of a host of this machine whose process is gone without a ChildActorExited."""
        log.warning("host %s (pid %d) is gone without an exit report; handling its exit", record.spec.key, record.pid)
        address = _address(record)
        self._child_exited(address)
        # Thespian may still count it among this process's children, and would wait for it when it exits.
        thespian_fixes.forget_child(self, address)

    def _system_message(self, message: object, sender: Address) -> None:
        if isinstance(message, ActorExitRequest):
            self.shutting_down = True  # hosts exiting from now on are not crashes: do not restart them
        elif isinstance(message, ChildActorExited):
            self._child_exited(message.childAddress)
            if not self.shutting_down:
                self._check_children()
                self.wakeupAfter(timedelta(seconds=CHILD_CHECK_DELAY), ("check-children",))
        elif isinstance(message, DeadEnvelope):
            self._dead_envelope(message)
        elif isinstance(message, PoisonMessage):
            log.error("guardian: a message could not be handled: %s", message.details)

    def _dead_envelope(self, envelope: DeadEnvelope, bounced: bool = False) -> None:
        dead = envelope.deadMessage
        dead_key = address_key(envelope.deadAddress)
        self._ask_nodes_about(dead_key)
        for record in list(self.hosts.values()):
            # Undeliverable to a running host whose process is gone: its exit went unreported (see
            # _check_children). Restart it before rerouting, so that its messages are held, not bounced.
            if _serving(record) and address_key(_address(record)) == dead_key and self._here(record) \
                    and not _is_running_here(record.pid):
                self._unreported_exit(record)
        # Whoever lived there is gone: clients' routes die with them, hosts get restarted.
        for prefix, address in list(self.temp_routes.items()):
            if address_key(address) == dead_key:
                self._drop_temp_route(prefix)
        if isinstance(dead, Batch):
            for entry in unpack(dead, self._unpicklable):
                self._reroute(entry, dead_key, bounced)
        elif isinstance(dead, NodePing):
            self._node_unreachable(dead_key)
        elif not isinstance(dead, (DirectoryUpdate, InitHost, StopEntity, ActorExitRequest, GetHostStats, NodeWelcome)):
            self._dead(None, str(envelope.deadAddress), dead, "target actor process is gone")

    # ---- per sender FIFO across a host's restart (see actors/inflight.py) ---------------------------
    def _settled(self, intent: Intent, how: str) -> None:
        """A batch we sent ended (a transport callback: queue the work, poke ourselves)."""
        assert self.inflight is not None  # (it is what calls us)
        key = str(intent.targetAddr)
        if how == BOUNCED:
            self.bounced.append(intent)
        elif how == FAILED:
            self.undelivered.append(intent)
        elif self.inflight.pending(key) or not any(key in r.past for r in self.hosts.values()):
            return
        self.inflight.send_intent(self.myAddress, RESETTLE)

    def _undelivered(self, intent: Intent) -> None:
        """Record the messages of a batch no live receiver took as dead letters (Thespian drops them unsaid)."""
        entries, reason = not_taken(intent, self._unpicklable, "guardian")
        for sender, target, message in entries:
            if isinstance(message, DeadLetter):  # (to a subscriber: recorded again, it would go to it again)
                log.warning("guardian: a dead letter to subscriber %s was not delivered", target)
            else:
                self._dead(sender, target, message, reason)

    def _resettle(self, message: str, sender: Address | None) -> None:
        """Reroute what bounced, in send order and ahead of what was held since; then release the held
        messages of hosts whose earlier processes have nothing in flight any more."""
        if message != RESETTLE:
            log.warning("guardian ignored unexpected %r", message)
            return
        assert self.inflight is not None  # RESETTLE comes from _settled
        while self.bounced:
            intent = self.bounced.popleft()
            self._dead_envelope(DeadEnvelope(intent.targetAddr, intent.message), bounced=True)
        while self.undelivered:
            self._undelivered(self.undelivered.popleft())
        now = time.monotonic()
        for record in self.hosts.values():
            record.past = {k: t for k, t in record.past.items() if t > now and self.inflight.pending(k)}
            if record.held and _serving(record) and not self._blocked(record):
                self._release_to(record)

    def _blocked(self, record: HostRecord) -> bool:
        """True while batches we sent to an earlier process of the host may still bounce back: what is
        sent to it now must wait behind them (HANDOVER_WAIT at most: Thespian may retry for minutes)."""
        if not record.past:
            return False
        assert self.inflight is not None  # past is only filled by _retire, once the guardian runs
        now = time.monotonic()
        return any(t > now and self.inflight.pending(k) for k, t in record.past.items()) \
            or any(str(i.targetAddr) in record.past for i in self.bounced)

    def _retire(self, record: HostRecord, key: str) -> None:
        """Note that the process at `key` no longer serves `record` (what we sent it may bounce)."""
        if self.inflight is not None and (self.inflight.pending(key) or any(str(i.targetAddr) == key
                                                                            for i in self.bounced)):
            record.past[key] = time.monotonic() + HANDOVER_WAIT
            self.wakeupAfter(timedelta(seconds=HANDOVER_WAIT), ("resettle",))

    def _release_to(self, record: HostRecord) -> None:
        """Forward what is held for a serving host, in order."""
        held, record.held, record.front = record.held, deque(), 0
        for entry in held:
            self._queue(address_key(_address(record)), _address(record), entry)

    def _new_address(self, record: HostRecord, address: Address) -> None:
        if record.address is not None and address_key(record.address) != address_key(address):
            self._retire(record, address_key(record.address))
        record.address = address

    # Any: each handler takes the one message type it is registered under (a Callable cannot say that).
    _handlers: dict[type, Callable[[Guardian, Any, Address], None]] = {
        str: _resettle,
        GuardianInit: _init,
        WhereIsGuardian: _where,
        GetDirectory: _get_directory,
        RegisterRoute: _register_route,
        UnregisterRoute: _unregister_route,
        SpawnHost: _spawn,
        HostReady: _host_ready,
        HostDone: _host_done,
        ActorBackingOff: _actor_backing_off,
        ActorRestarted: _actor_restarted,
        StopPath: _stop,
        EntityStopped: _entity_stopped,
        Batch: _batch,
        GetDeadLetters: _get_dead_letters,
        GetErrors: _get_errors,
        GetStatus: _status,
        HostStats: _host_stats,
        WakeupMessage: _wakeup,
        NodeHello: _node_hello,
        NodePong: _node_pong,
        NodeLogged: _node_logged,
        ActorSystemConventionUpdate: _convention_update,
        GetNodes: _get_nodes,
        Rebalance: _rebalance,
        PidsGone: _pids_gone,
    }


def _serving(record: HostRecord) -> bool:
    """True if the host's process serves its path: running, or restarting its failed actor in-process."""
    return record.state == "running" or (record.state == "backoff" and record.address is not None)


def _current_pid(record: HostRecord) -> int | None:
    """The pid of the host's process as clients see it: None while it has none (exited, not yet started again)
    or its new process has not reported ready (record.pid is then 0)."""
    return record.pid if record.pid and record.address is not None else None


def _address(record: HostRecord) -> Address:
    """The address of a host that serves its path (see _serving: set from its HostReady until its exit)."""
    return cast(Address, record.address)


def _clock(when: float) -> str:
    """A Unix time as the logs show it (local time, to the second)."""
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(when))


def _size(path: str | None) -> int:
    """The size of file `path` (0 if there is none)."""
    try:
        return os.path.getsize(path) if path else 0
    except OSError:
        return 0


_LEVELS = (b"WARNING", b"ERROR", b"CRITICAL")


def _warnings_logged(path: str | None, offset: int) -> int:
    """How many warning, error and critical records log file `path` (boot.log_defs's format: "date time LEVEL
    name: message") has past byte `offset` (in its first LOG_SCAN_LIMIT bytes from there)."""
    if path is None:
        return 0
    try:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(LOG_SCAN_LIMIT)
    except OSError:
        return 0
    return sum(1 for line in data.splitlines() if line[:1].isdigit() and line.split(b" ", 3)[2:3] in
               [[level] for level in _LEVELS])


def _is_running_here(pid: int) -> bool:
    """True if a live (not zombie) process `pid` exists on this machine."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _is_dead_child(pid: int, parent: int) -> bool:
    """True if `pid` is a child of `parent` that has exited (a zombie not yet reaped)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return False  # no /proc, or already reaped (then Thespian reported it)
    return fields[0] == "Z" and int(fields[1]) == parent


class NodeAgent(ThespianActor):  # type: ignore[misc]  # (Thespian has no type information)
    """One per admin (leader and members): tells local clients where the guardian is.

    Thespian 4.0.1 hangs on the second globalName lookup forwarded through a member admin, so
    clients look up this local agent instead, which learned the guardian's address once at boot.
    It also forwards its admin's dead letters to the guardian. A member's agent registers its node with
    the guardian and answers its heartbeats; unpinged for node_timeout (declared down, or the guardian
    lost it), it says hello again. Unpinged for FENCE_AFTER of the guardian's node_timeout, it stops the hosts
    the guardian placed on its node (_fence): by node_timeout the guardian declares the node down and starts
    them elsewhere, and two processes must not serve (and journal) the same entities.
    """

    def __init__(self, *args: object, **kwargs: object) -> None:
        thespian_fixes.adopt_process_logging()
        super().__init__(*args, **kwargs)
        self.guardian: Address | None = None
        self.parent_watch: ParentWatch | None = None
        self.node: str | None = None
        self.node_timeout = NODE_TIMEOUT
        self.booting: Address | None = None  # who to tell GuardianIs once the guardian welcomed us
        self.last_ping = 0.0
        self.last_hello = 0.0
        self.leader_timeout = NODE_TIMEOUT  # the guardian's node_timeout (in its pings)
        self.hosts_here: tuple[Address, ...] = ()  # the hosts the guardian runs on this node (its last ping)
        self.log_file: str | None = None
        self.log_size = 0  # the size of its log at the last ping (what was logged after it may not have reached the leader)
        self.last_ping_time = 0.0  # (Unix time)
        # While no guardian pings: since when (Unix time), the size its log had then, and how many of the lines
        # logged since are this agent's own notice of it (see _away, _back).
        self.away: tuple[float, int, int] | None = None

    def receiveMessage(self, message: object, sender: Address) -> None:
        if isinstance(message, NodePing):
            self._pinged()
            self.hosts_here = message.hosts
            if self.away is not None and self.node is not None:
                self._back(sender)
            self.leader_timeout = message.node_timeout or self.leader_timeout
            if self.node is not None:
                gone = tuple(pid for pid in message.pids if not _is_running_here(pid))
                self.send(sender, NodePong(self.node, message.seq, gone))
        elif isinstance(message, WakeupMessage) and message.payload == PARENT_WAKEUP:
            if self.parent_watch is not None and self.parent_watch.orphaned():
                self.send(self.myAddress, ActorExitRequest())  # the admin died
        elif isinstance(message, WakeupMessage) and message.payload == ("hello",):
            if self.guardian is not None and self.node is not None:
                now = time.monotonic()
                silent = now - self.last_ping
                if self.away is None and silent > AWAY_AFTER * self.leader_timeout:
                    self._away(silent)
                if silent > FENCE_AFTER * self.leader_timeout and self.hosts_here:
                    self._fence(f"no heartbeat from the guardian for {silent:.1f} s")
                if silent > self.node_timeout and now - self.last_hello >= self.node_timeout / 2:
                    self.last_hello = now
                    self.send(self.guardian, NodeHello(self.node))
                    # A leader killed and started again has another guardian, which knows this node only once our
                    # admin registers with its admin (Thespian does so every 7 min 22 s): updating a capability,
                    # even to the same value, registers now (see Guardian._convention_update).
                    self.updateCapability(AGENT_CAPABILITY, self.myAddress)
                self.wakeupAfter(timedelta(seconds=min(self.node_timeout / 2, self.leader_timeout / 10)), ("hello",))
        elif isinstance(message, SetGuardian):
            self.guardian = message.address
            self.parent_watch = ParentWatch.start(self)
            self.node, self.node_timeout = message.node, message.node_timeout
            self.log_file = message.log_file
            if self.node is None:
                self.send(sender, GuardianIs(self.guardian))
            else:
                self.booting = sender  # answered on NodeWelcome: the node is known before boot returns
                self._pinged()
                self.updateCapability(AGENT_CAPABILITY, self.myAddress)  # (before the hello: the leader has it)
                self.send(self.guardian, NodeHello(self.node))
                self.wakeupAfter(timedelta(seconds=self.node_timeout / 2), ("hello",))
        elif isinstance(message, CheckPids):
            if self.node is not None:
                self.send(sender, PidsGone(self.node, tuple(p for p in message.pids if not _is_running_here(p))))
        elif isinstance(message, NodeWelcome):
            if self.away is None and self.guardian is not None and address_key(sender) != address_key(self.guardian):
                self.away = (self.last_ping_time, self.log_size, 0)  # (a leader started again before _away noticed)
            if self.away is not None and self.node is not None:
                self._back(sender)
            self._pinged()
            if self.guardian is not None and address_key(sender) != address_key(self.guardian) and self.hosts_here:
                # The leader was started again (a new guardian) before this node fenced: the new guardian knows
                # nothing of the hosts its predecessor placed here, and may start them again.
                self._fence(f"welcomed by another guardian ({sender}; the leader was started again)")
            self.guardian = sender  # (another guardian than the one boot named, if the leader was started again)
            if self.booting is not None:
                self.send(self.booting, GuardianIs(self.guardian))
                self.booting = None
        elif isinstance(message, NodeRefused):
            log.error("%s", message.why)
            if self.hosts_here:  # (an incarnation replaced while it was silent: its hosts run elsewhere now)
                self._fence(f"no heartbeat from the guardian for {time.monotonic() - self.last_ping:.1f} s")
            self.node = None  # (no more hellos: this member is not a node of the cluster)
            if self.booting is not None:
                self.send(self.booting, message)  # (boot fails with it; start() then kills what it booted)
                self.booting = None
            else:
                # Admitted once, then silent (frozen, cut off) while another member took the node's name: nothing
                # will ever place work here again, and its admin would run on outside the cluster for good.
                log.error("node %s: refused by the leader (another member is that node now): shutting this member's "
                          "actor system down (its admin and every actor process)", message.node)
                self.actorSystemShutdown()
        elif isinstance(message, WhereIsGuardian):
            thespian_fixes.note_client(sender)  # (only clients ask: the exit does not wait for a stopped one's ACK)
            self.send(sender, GuardianIs(self.guardian))
        elif isinstance(message, DeadEnvelope) and self.guardian is not None:
            self.send(self.guardian, message)
        elif message == "handle-dead-letters":
            self.handleDeadLetters(True)
            self.send(sender, GuardianIs(self.guardian))

    def _pinged(self) -> None:
        """A guardian pinged (or welcomed) this node: note when, and how far its log went (one stat per ping)."""
        self.last_ping = time.monotonic()
        self.last_ping_time = time.time()
        self.log_size = _size(self.log_file)

    def _away(self, silent: float) -> None:
        """No guardian has pinged for `silent` s: say so in this node's log, where what it logged since the last ping
        stays (Thespian's forwarding of warnings to the leader's log, and hosts' error reports, fail meanwhile)."""
        self.away = (self.last_ping_time, self.log_size, 1)
        log.warning("node %s: no heartbeat from the guardian for %.1f s, the leader is unreachable (down, or cut "
                    "off): until it is back, this node's warnings and errors are only in this log (%s)", self.node,
                    silent, self.log_file)

    def _back(self, guardian: Address) -> None:
        """A guardian pings or welcomes this node again: tell it how much was logged here meanwhile, and where."""
        assert self.away is not None and self.node is not None
        since, offset, own = self.away
        self.away = None
        lines = max(_warnings_logged(self.log_file, offset) - own, 0)  # (what the user has to look at: not our notice)
        self.send(guardian, NodeLogged(self.node, since, time.time(), lines, self.log_file or "actors.log"))

    def _fence(self, why: str) -> None:
        """Stop the hosts the guardian placed here: it has not pinged for a while, so it is about to declare
        this node down and start them elsewhere (or it is gone); it starts them again here once it pings."""
        log.error("node %s: %s: stopping the %d host(s) it placed here, so that they do not serve beside their "
                  "replacements elsewhere", self.node, why, len(self.hosts_here))
        for host in self.hosts_here:
            self.send(host, ActorExitRequest())
        self.hosts_here = ()

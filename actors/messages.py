"""Messages of Reprise's own protocol between clients, the guardian and hosts (all frozen dataclasses)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .paths import shard_key
from .process_identity import ProcessIdentity
from .supervision import DEFAULT_HOLD_LIMIT, Backoff

if TYPE_CHECKING:
    from .error_log import ActorError
    from .errors import SpawnCause
    from .thespian_types import Address

GUARDIAN_PATH = "/system/guardian"


@dataclass(frozen=True)
class RoutesLost:
    """Not sent: what an actor's `routes_lost(prefixes)` failure is reported on (the hosts of these died)."""

    prefixes: tuple[str, ...]


@dataclass(frozen=True)
class Batch:
    """Many (sender path, target path, message) entries carried as one Thespian message.

    `payload` is the pickled list of entries, pickled by Reprise on both bases so that an unpicklable
    entry can be found and dead-lettered instead of poisoning the whole batch. `origin` is the sending
    endpoint's route prefix, so the receiver learns how to reach senders that are not in the directory
    (clients' temporary paths).
    """

    origin: str
    # Thespian formats every message it sends or receives for its debug log, eagerly: the repr of a
    # large payload cost 5-8% of a busy process's CPU. Show its size instead.
    payload: bytes
    more: tuple[bytes, ...] = ()
    """The payloads of later batches of the same origin to the same address, sent with this one
    (actors/inflight.py merges the batches that waited behind one in flight); their entries follow in order."""
    entries: int = 0
    """How many entries the payloads hold (a Scatter counts as one)."""

    def __repr__(self) -> str:
        size = len(self.payload) + sum(map(len, self.more))
        return (f"Batch(origin={self.origin!r}, payload=<{self.entries} entries, {size} bytes in "
                f"{1 + len(self.more)} parts>)")


class Scatter:
    """Messages for many actors of one host carried as one entry, expanded where they arrive.

    Subclasses (frozen dataclasses) keep their messages in columns of plain values, which pickle many
    times faster than one object per message; `items()` builds the (target path, message) pairs on the
    receiving side (transport.unpack), so receivers see ordinary messages. Send with `Host.scatter`.
    """

    __slots__ = ()

    def items(self) -> Iterable[tuple[str, object]]:
        """The (target path, message) pairs, in the order they were sent."""
        raise NotImplementedError

    def targets_and_messages(self) -> tuple[Sequence[str], Iterable[object]]:
        """The targets and, in the same order, the messages: what an entity table's host takes in bulk."""
        pairs = list(self.items())
        return [t for t, _ in pairs], [m for _, m in pairs]


def public_config(config: Mapping[str, object]) -> dict[str, object]:
    """`config` as shown to clients (SystemStatus, `reprise status`): passwords in its URLs replaced by ***."""
    from journal.urls import redact_url

    return {k: redact_url(v) if isinstance(v, str) and "://" in v else v for k, v in config.items()}


@dataclass(frozen=True)
class HostSpec:
    """What a host actor serves: one actor at `path`, or entities at every path below it."""

    path: str
    factory: Any  # a class (importable by module path) or "module:Class"
    entities: bool = False
    args: tuple[object, ...] = ()
    kwargs: dict[str, object] = field(default_factory=dict)
    passivate_after: float | None = 120.0
    max_restarts: int = 10
    restart_window: float = 60.0
    linger: float = 0.0
    batch_cap: int = 2000
    node: str | None = None
    shards: int = 1
    """Entity hosts only: how many processes share the entities (each entity id lives in one, by hash)."""
    shard: int = 0
    options: Mapping[str, str] = field(default_factory=dict)
    """Upper layers' settings for this host instead of the system's (opaque here: actors.host_options);
    `{shard}` in a value becomes the shard number."""
    backoff: Backoff = Backoff()
    """How the guardian restarts this host when its process dies or its top-level actor fails."""
    hold_limit: int = DEFAULT_HOLD_LIMIT
    """Messages held for this host while it is down; past it they become dead letters."""
    nodes: tuple[str, ...] = ()
    """The nodes the host may run on, in order of preference (empty: `node`, or the leader's node); the guardian
    moves it to another of them when its node goes down (see Guardian._place)."""

    @property
    def key(self) -> str:
        """This host's name: its path, or the path and shard number for one of several shards."""
        return shard_key(self.path, self.shard, self.shards)


@dataclass(frozen=True)
class ShardSet:
    """A route to the shards of an entity host: `addresses[k]` serves the entities of shard k."""

    addresses: tuple[Address, ...]


@dataclass(frozen=True)
class InitHost:
    """Guardian -> new host: what to serve, the directory, and the system configuration."""

    spec: HostSpec
    routes: dict[str, Address | ShardSet]  # prefix -> route
    epoch: int
    config: dict[str, object]
    guardian: Address


@dataclass(frozen=True)
class HostReady:
    """Host -> guardian: initialised (its sender address is the route to publish)."""

    path: str
    error: str | None = None
    pid: int = 0
    cause: SpawnCause | None = None
    """What the start failed on, when the host knows (a SpawnFailed's cause): passed on to the client."""


@dataclass(frozen=True)
class HostDone:
    """Host -> guardian: the hosted top-level actor stopped; restart the host only if it `failure`."""

    path: str
    failure: str | None = None
    """Why the actor stopped if it failed (persist or recovery failure, too many restarts); None: stop()."""
    gave_up: bool = False
    """The actor failed more often in a row than its backoff's max_restarts allows: do not restart it."""


@dataclass(frozen=True)
class ActorBackingOff:
    """Host -> guardian: its top-level actor failed; the host restarts it in `delay` s, holding its messages."""

    path: str
    reason: str
    delay: float


@dataclass(frozen=True)
class ActorRestarted:
    """Host -> guardian: its top-level actor runs again after an ActorBackingOff."""

    path: str


@dataclass(frozen=True)
class DirectoryUpdate:
    """Guardian -> hosts: the current routes (prefix -> Thespian address)."""

    routes: dict[str, Address | ShardSet]  # prefix -> route
    epoch: int


@dataclass(frozen=True)
class SpawnHost:
    """Client -> guardian: start a host for `spec` (reply: Spawned)."""

    spec: HostSpec


@dataclass(frozen=True)
class Spawned:
    """Guardian -> client: the outcome of a SpawnHost or StopPath."""

    path: str
    error: str | None = None
    cause: SpawnCause | None = None
    """What the spawn failed on, when known (see HostReady.cause): the client's SpawnFailed carries it."""


@dataclass(frozen=True)
class StopPath:
    """Client -> guardian: stop the actor or host at `path`, or one entity below a host."""

    path: str


@dataclass(frozen=True)
class StopEntity:
    """Guardian -> host: stop (passivate) one entity now; the host answers EntityStopped once it has."""

    path: str


@dataclass(frozen=True)
class EntityStopped:
    """Host -> guardian: the entity at `path` is stopped (its post_stop ran, its pending writes committed), or
    was not running."""

    path: str


@dataclass(frozen=True)
class RegisterRoute:
    """Client -> guardian: route `prefix` to the sender's endpoint (clients' temporary paths); `process` is the
    client's (None: unknown), by which a guardian on its machine drops the route once that process has ended."""

    prefix: str
    process: ProcessIdentity | None = None


@dataclass(frozen=True)
class UnregisterRoute:
    """Client -> guardian: the endpoint behind `prefix` is going away."""

    prefix: str


@dataclass(frozen=True)
class GetDirectory:
    """Client -> guardian: reply with a DirectoryUpdate."""


@dataclass(frozen=True)
class Barrier:
    """Client -> guardian -> host -> client: everything the client sent through the guardian before it has
    been delivered (the guardian forwards in order); the host sends it back to its sender, to no actor.
    Hosts send them too (actors/handover.py), with a `token` naming the handover, their own process's address
    key as `origin`, a `nonce` of that process and their `host` key: each process numbers its handovers from 1,
    so a token alone is not one host's, and a later process of the host may listen on the same address (its
    port reused), so an origin alone is not one process's: the nonce is. `host` names whose a Barrier from an
    earlier process is, when it comes back to a later one."""

    token: int = 0
    origin: str = ""
    nonce: str = ""
    host: str = ""


@dataclass(frozen=True)
class DeadLetter:
    """A message that could not be delivered, and why."""

    sender: str | None
    target: str
    message: Any
    reason: str


@dataclass(frozen=True)
class DeadLetters:
    """The dead-letter count and the most recent ones."""

    count: int
    recent: tuple[DeadLetter, ...]


@dataclass(frozen=True)
class GetDeadLetters:
    """Client -> guardian: reply with DeadLetters."""


@dataclass(frozen=True)
class SubscribeDeadLetters:
    """Subscribe `path` to every DeadLetter from now on."""

    path: str


@dataclass(frozen=True)
class GetStatus:
    """Client -> guardian: reply with SystemStatus."""


@dataclass(frozen=True)
class SystemStatus:
    """Hosts (path -> HostInfo) and the dead-letter count."""

    hosts: dict[str, HostInfo]
    dead_letters: int
    config: dict[str, object]
    errors: tuple[ActorError, ...] = ()
    """The most recent errors inside actors (actors.error_log.ActorError), oldest first."""
    nodes: dict[str, str] = field(default_factory=dict)
    """Every known node's name -> "up" or "down" (the leader's own node is always up)."""
    guardian_pid: int | None = None
    """The process id of the guardian that answered (the client's own with the in-process base)."""


@dataclass(frozen=True)
class HostInfo:
    """One host as the guardian sees it, with what the host itself reported (when it answered in time)."""

    state: str
    """starting | running | backoff (waiting to restart it, or its failed actor) | restarting | stopping |
    stopped | failed (gave up: backoff max_restarts, or its spawn failed)."""
    restarts: int
    """Restarts of the host or of its top-level actor since the spawn."""
    pid: int | None
    """The process id of the host's current process (on the machine of its `node`), or None while it has none:
    from the exit of its process (then backoff, stopped or failed) until a new one has reported ready (starting,
    restarting). Never the pid of a process known to be gone, which the machine may give to another process."""
    entities: bool
    alive: int | None = None
    """Actors alive in the host (entities currently in memory); None when the host did not answer."""
    counters: dict[str, int] = field(default_factory=dict)
    """Sums of the hosted actors' `stats()` counters, e.g. {"unconfirmed": 3}."""
    last_exit: str | None = None
    """Why the host last died or failed (None if it never did)."""
    last_cause: SpawnCause | None = None
    """What it last failed on, when known: a restart that could not open its journal or snapshot store (then
    last_exit names it too). Typed, so `reprise status` gives the fix without parsing last_exit."""
    next_attempt: float | None = None
    """While backing off: when the next restart is due (seconds since the epoch, as time.time())."""
    node: str | None = None
    """The node the host runs on now (or last ran on, while it waits to be started again)."""
    messages_in: int = 0
    """Messages the host received from other processes since it started (as of its last answer)."""
    messages_out: int = 0
    """Messages the host sent to other processes since it started."""
    histograms: dict[str, tuple[tuple[float, ...], tuple[int, ...], float]] = field(default_factory=dict)
    """Latency histograms the host's layers keep (actors.metrics.Histogram), e.g. journal_write_seconds."""
    messages_parked: int = 0
    """Messages the host holds back for destinations whose process changed, until what it sent them before has
    landed (actors/handover.py: a few ms usually, HANDOVER_WAIT at most)."""


@dataclass(frozen=True)
class GetHostStats:
    """Guardian -> host: reply with HostStats (for `System.status()`)."""

    token: int


@dataclass(frozen=True)
class HostStats:
    """Host -> guardian: how many actors are alive in it and the sums of their `stats()` counters."""

    token: int
    path: str
    alive: int
    counters: dict[str, int]
    messages_in: int = 0
    messages_out: int = 0
    histograms: dict[str, tuple[tuple[float, ...], tuple[int, ...], float]] = field(default_factory=dict)
    messages_parked: int = 0


@dataclass(frozen=True)
class WhereIsGuardian:
    """Client -> node agent: reply with GuardianIs."""


@dataclass(frozen=True)
class GuardianIs:
    """Node agent -> client: the guardian's Thespian address (None while unknown)."""

    address: Address | None


@dataclass(frozen=True)
class NodeHello:
    """Node agent -> guardian: node `node` is up, its agent at the sender's address (reply: NodeWelcome)."""

    node: str


@dataclass(frozen=True)
class NodeLogged:
    """Node agent -> guardian: node `node` heard no guardian from `since` to `until` (Unix times) and logged `lines`
    warnings and errors meanwhile, in `log_file` on its machine: Thespian forwards a member's warnings to the
    leader's log, and hosts report errors to the guardian, but neither reaches a leader that is down."""

    node: str
    since: float
    until: float
    lines: int
    log_file: str


@dataclass(frozen=True)
class NodeWelcome:
    """Guardian -> node agent: registered."""

    node: str


@dataclass(frozen=True)
class NodeRefused:
    """Guardian -> node agent: not registered as `node` (another live member is that node), and why."""

    node: str
    why: str


@dataclass(frozen=True)
class NodePing:
    """Guardian -> node agent: a heartbeat (reply: NodePong), with the pids and addresses of the hosts running
    there, and the guardian's node_timeout (after which, unanswered, it declares the node down)."""

    seq: int
    pids: tuple[int, ...] = ()
    hosts: tuple[Any, ...] = ()  # (Thespian addresses, parallel to pids)
    node_timeout: float = 0.0


@dataclass(frozen=True)
class NodePong:
    """Node agent -> guardian: the answer to a NodePing, with those of its pids no live process has."""

    node: str
    seq: int
    gone: tuple[int, ...] = ()


@dataclass(frozen=True)
class CheckPids:
    """Guardian -> node agent: which of these host pids are gone on your machine? (reply: PidsGone)."""

    pids: tuple[int, ...]


@dataclass(frozen=True)
class PidsGone:
    """Node agent -> guardian: the pids of a CheckPids that no live process of its machine has."""

    node: str
    pids: tuple[int, ...]


@dataclass(frozen=True)
class GetNodes:
    """Client -> guardian: reply with Nodes."""


@dataclass(frozen=True)
class Nodes:
    """Guardian -> client: every known node's name -> "up" / "down"."""

    nodes: dict[str, str]


@dataclass(frozen=True)
class Move:
    """One host (or shard) moved by a rebalance: its key (path, or path#shard) and the nodes it went from/to."""

    key: str
    from_node: str
    to_node: str


@dataclass(frozen=True)
class Rebalance:
    """Client -> guardian: move every `nodes=` host (of `path`, or all) to where placement puts it (reply: Rebalanced)."""

    path: str | None = None


@dataclass(frozen=True)
class Rebalanced:
    """Guardian -> client: the moves made, in order; `error` if some could not be made."""

    moves: tuple[Move, ...]
    error: str | None = None

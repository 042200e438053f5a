"""Topology files for `reprise up`: a TOML `[system]` table plus `[[actor]]` and `[[entities]]` tables.

    [system]
    admin_port = 1900            # optional: a free port when omitted
    bind = "127.0.0.1"
    journal = "sqlite://journal.db"   # relative sqlite paths are relative to this file
    snapshot_store = "sqlite://journal.db"
    secret_file = "cluster.secret"    # optional, multi-host: the secret all machines share (mode 0600,
                                      # relative to this file; the leader creates it, members get a copy)
    tls_cert = "node.pem"             # optional: mutual TLS on every connection (all three, PEM files,
    tls_key = "node.key"              # relative to this file; the key mode 0600; every machine's
    tls_ca = "ca.pem"                 # certificate signed by this CA)
    metrics_port = 9464               # optional: Prometheus metrics of this node's hosts (off by default)
    metrics_host = "127.0.0.1"        # the interface it listens on (loopback by default)

    [[actor]]
    path = "/user/ledger"
    class = "myapp.ledger:Ledger"     # or "myapp.ledger.Ledger"
    args = [1]
    kwargs = { currency = "EUR" }     # a relative sqlite:// URL in args or kwargs (a Projection's
                                      # offset_store) is relative to this file too

    [[entities]]
    path = "/user/accounts"
    class = "myapp.accounts:Account"
    passivate_after = 60
    shards = 2                        # entities spread over 2 processes (cores)
    journal = "sqlite://accounts-{shard}.db"   # optional: this host's own journal, one file per shard
    backoff = [0.2, 10, 0.2]          # restart after min..max s (exponential, random factor); or a table
                                      # { min = 0.2, max = 10, random_factor = 0.2, max_restarts = 20 }
    hold_limit = 100000               # messages held while the host is down; past it, dead letters
    nodes = ["a", "b", "c"]           # cluster: the nodes it may run on (shards spread over the live ones)

A cluster file describes every node of a multi-host system instead of one `[system]`; each machine runs
`reprise up cluster.toml [--node NAME]` (NAME defaults to the node whose address is this machine's):

    [cluster]
    leader = "a"                      # the [[node]] that runs the guardian and spawns every actor
    journal = "postgresql://reprise@10.0.0.1:5432/reprise"   # one journal every node reaches
    secret_file = "cluster.secret"    # the leader creates it; copy it to every machine (mode 0600)
    node_timeout = 5.0                # a node silent this long is down: its nodes= hosts fail over
    join_timeout = 60.0               # the leader waits this long for every [[node]] before spawning
                                      # (and a member started first, for the leader)
    # also: snapshot_store, log_level, tls_cert/tls_key/tls_ca, peers (extra addresses, e.g. a
    # Spark driver elsewhere), metrics_host (the default of the nodes' metrics_host), and the actor
    # defaults [system] takes (stash_capacity, redeliver_interval, ...: registered host options)

    [[node]]
    name = "a"
    bind = "10.0.0.1"                 # its address (and advertise, when others reach it at another)
    admin_port = 1900
    metrics_port = 9464               # optional: this node's Prometheus endpoint

    [spark]
    bridges = true                    # the leader starts one spark_bridge bridge per node
    staged_ttl = 86400                # optional: seconds a run staged but never released is kept (false: kept
                                      # until discarded by hand); spark_bridge.start_bridge's staged_ttl
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import tomllib
from dataclasses import dataclass, field
from typing import Any

from .errors import ConfigError, InvalidPath
from .host_options import check_option, known_host_options
from .metrics import DEFAULT_HOST as DEFAULT_METRICS_HOST
from .metrics import check_options as check_metrics_options
from .paths import check_spawn_path
from .supervision import Backoff, check_hold_limit
from .tls import tls_config
from .validation import (
    check_ip,
    check_leader,
    check_log_level,
    check_nodes,
    check_number,
    check_peers,
    check_spawn_options,
    missing_class_hint,
)

__all__ = ["ActorEntry", "ClusterSection", "NodeSection", "SystemSection", "Topology", "TopologyError", "load",
           "loads", "resolve_class"]

# Upper layers' host options (persistence's store URLs), passed on to actors.start / System.spawn as given.
HOST_OPTIONS = ("journal", "snapshot_store")
SYSTEM_KEYS = {"admin_port", "bind", "advertise", "journal", "snapshot_store", "leader", "node", "peers",
               "log_level", "secret_file", "tls_cert", "tls_key", "tls_ca", "metrics_port", "metrics_host",
               "node_timeout"}
# Options passed straight to System.spawn; everything else in an entry is a mistake worth reporting.
SPAWN_OPTIONS = {"passivate_after", "max_restarts", "restart_window", "linger", "batch_cap", "node", "shards",
                 "journal", "snapshot_store", "backoff", "hold_limit", "nodes"}
ENTRY_KEYS = {"path", "class", "args", "kwargs"} | SPAWN_OPTIONS

# Cluster files (one file for every node).
CLUSTER_KEYS = {"leader", "journal", "snapshot_store", "secret_file", "node_timeout", "join_timeout", "log_level",
                "tls_cert", "tls_key", "tls_ca", "peers", "metrics_host"}
NODE_KEYS = {"name", "bind", "advertise", "admin_port", "metrics_port", "metrics_host"}
SPARK_KEYS = {"bridges", "staged_ttl"}
TOP_LEVEL = ("system", "cluster", "node", "spark", "actor", "entities")


class TopologyError(ConfigError):
    """A topology file that cannot be read or does not describe a valid system."""


@dataclass(frozen=True)
class SystemSection:
    """The `[system]` table: how to start the actor system."""

    admin_port: int | None = None
    bind: str = "127.0.0.1"
    advertise: str | None = None
    journal: str | None = None
    snapshot_store: str | None = None
    leader: str | None = None
    node: str | None = None
    peers: tuple[str, ...] = ()
    log_level: str = "WARNING"
    secret_file: str | None = None  # the secret every machine of a multi-host system shares
    tls_cert: str | None = None  # mutual TLS: this machine's certificate, its key, the system's CA (all or none)
    tls_key: str | None = None
    tls_ca: str | None = None
    metrics_port: int | None = None  # this node's Prometheus endpoint (None: none)
    metrics_host: str = DEFAULT_METRICS_HOST
    node_timeout: float = 5.0  # leader: seconds of silence after which a member node is down
    # Other registered host options given to start() (e.g. persistence's stash_capacity, redeliver_interval: the
    # system-wide defaults of actor settings), as (name, value) pairs, checked by their owner.
    host_defaults: tuple[tuple[str, Any], ...] = ()


@dataclass(frozen=True)
class NodeSection:
    """One `[[node]]` table of a cluster file: a machine (or network namespace) running part of the system."""

    name: str
    admin_port: int
    bind: str = "127.0.0.1"
    advertise: str | None = None
    metrics_port: int | None = None
    metrics_host: str = DEFAULT_METRICS_HOST

    @property
    def address(self) -> str:
        """The address the other nodes reach this one at."""
        return self.advertise or self.bind


@dataclass(frozen=True)
class ClusterSection:
    """The `[cluster]` table with its `[[node]]`s and `[spark]`: how to start every node of a cluster."""

    leader: str
    nodes: tuple[NodeSection, ...]
    secret_file: str
    journal: str | None = None
    snapshot_store: str | None = None
    node_timeout: float = 5.0
    join_timeout: float = 60.0
    log_level: str = "WARNING"
    tls_cert: str | None = None
    tls_key: str | None = None
    tls_ca: str | None = None
    peers: tuple[str, ...] = ()  # addresses allowed besides the nodes' own (a Spark driver elsewhere, ...)
    spark_bridges: bool = False
    spark_options: dict[str, Any] = field(default_factory=dict)  # start_bridge(s)'s keyword arguments ([spark])
    # The system-wide defaults of actor settings, as in [system] (SystemSection.host_defaults): every node's start()
    # takes them (hosts run with the leader's configuration, wherever they are placed).
    host_defaults: tuple[tuple[str, Any], ...] = ()

    def node(self, name: str) -> NodeSection:
        """The [[node]] called `name` (KeyError if none)."""
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    @property
    def leader_address(self) -> str:
        """The leader's admin address "ip:port", which members join."""
        leader = self.node(self.leader)
        return f"{leader.address}:{leader.admin_port}"

    def peers_of(self, name: str) -> tuple[str, ...]:
        """The addresses node `name` accepts connections from: the other nodes' and the extra peers."""
        own = self.node(name).address
        found = [n.address for n in self.nodes if n.address != own] + list(self.peers)
        return tuple(dict.fromkeys(found))


@dataclass(frozen=True)
class ActorEntry:
    """One `[[actor]]` or `[[entities]]` table: what to spawn where."""

    path: str
    factory: str
    entities: bool = False
    args: tuple[Any, ...] = ()
    kwargs: dict[str, Any] = field(default_factory=dict)
    options: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Topology:
    """A whole topology file."""

    system: SystemSection
    entries: tuple[ActorEntry, ...]
    source: str = "<string>"
    cluster: ClusterSection | None = None  # a cluster file: [cluster], [[node]]s, [spark] instead of [system]


def load(path: str) -> Topology:
    """Read and validate the topology file at `path`; raises TopologyError or FileNotFoundError."""
    with open(path, "rb") as f:
        data = f.read()
    try:
        text = data.decode()
    except UnicodeDecodeError as e:
        raise TopologyError(f"{path}: not a UTF-8 text file ({e})") from None
    return loads(text, source=path, base_dir=os.path.dirname(os.path.abspath(path)))


def loads(text: str, *, source: str = "<string>", base_dir: str | None = None) -> Topology:
    """Parse topology TOML text; relative sqlite journal paths are resolved against `base_dir`."""
    try:
        doc = tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise TopologyError(f"{source}: invalid TOML: {e}") from None
    unknown = set(doc) - set(TOP_LEVEL)
    if unknown:
        raise TopologyError(f"{source}: unknown top-level table(s) {sorted(unknown)}; "
                            "expected [system] (or [cluster], [[node]], [spark]), [[actor]] and [[entities]]")
    cluster = _cluster(doc, source, base_dir) if {"cluster", "node", "spark"} & set(doc) else None
    if cluster is not None and "system" in doc:
        raise TopologyError(f"{source}: a cluster file has no [system] table: [cluster] and each [[node]] say how "
                            "to start the nodes; move its keys there")
    system = _system(doc.get("system", {}), source, base_dir)
    tables: dict[str, list[Any]] = {}
    for kind in ("actor", "entities"):
        tables[kind] = doc.get(kind, [])
        if not isinstance(tables[kind], list):
            raise TopologyError(f"{source}: [{kind}] must be an array of tables: write [[{kind}]]")
    entries = []
    seen = {"actor": 0, "entities": 0}
    for kind in _declaration_order(text, tables):
        i = seen[kind]
        seen[kind] += 1
        entries.append(_entry(tables[kind][i], kind == "entities", f"{source}: [[{kind}]] #{i + 1}", base_dir))
    paths = [e.path for e in entries]
    dupes = sorted({p for p in paths if paths.count(p) > 1})
    if dupes:
        raise TopologyError(f"{source}: path(s) declared twice: {dupes}")
    for inner in paths:
        outer = next((p for p in paths if inner.startswith(p + "/")), None)
        if outer is not None:
            raise TopologyError(f"{source}: {inner} overlaps {outer}: a path below another entry's path is that "
                                "host's (an entity, or a child of its actor); give it a path of its own")
    if cluster is not None:
        _check_placement(entries, cluster, source)
    return Topology(system, tuple(entries), source, cluster)


_HEADER = re.compile(r"^[ \t]*\[\[[ \t]*(actor|entities)[ \t]*\]\][ \t]*(?:#.*)?$", re.MULTILINE)


def _declaration_order(text: str, tables: dict[str, list[Any]]) -> list[str]:
    """The kinds of the [[actor]] and [[entities]] tables in the order the file declares them, which is the order
    they are spawned in (an actor that tells entities from pre_start needs them spawned first: TOML's parser
    keeps the two arrays apart). Every actor first when the headers cannot be matched up (inline arrays)."""
    order = _HEADER.findall(text)
    if all(order.count(kind) == len(tables[kind]) for kind in tables):
        return order
    return ["actor"] * len(tables["actor"]) + ["entities"] * len(tables["entities"])


def resolve_class(spec: str) -> type:
    """Import "module:Class" or "module.Class" (nested classes allowed after the colon)."""
    if ":" in spec:
        module_name, _, qualname = spec.partition(":")
    else:
        module_name, _, qualname = spec.rpartition(".")
    if not module_name or not qualname:
        raise TopologyError(f"class {spec!r} must be written 'module:Class' or 'module.Class'")
    try:
        obj: Any = importlib.import_module(module_name)
    except ImportError as e:
        raise TopologyError(f"class {spec!r}: cannot import module {module_name!r} ({e})") from None
    for part in qualname.split("."):
        try:
            obj = getattr(obj, part)
        except AttributeError:
            raise TopologyError(f"class {spec!r}: module {module_name!r} has no {qualname!r}"
                                f"{missing_class_hint(obj, part)}") from None
    if not isinstance(obj, type):
        raise TopologyError(f"class {spec!r} is not a class")
    return obj


def _unknown_keys(unknown: set[str], known: set[str] | frozenset[str]) -> str:
    """"unknown key(s) [...]", with the known key each one is likely a typo of, then the known keys."""
    guesses = [f"{key!r} -> {close[0]!r}" for key in sorted(unknown)
               for close in [difflib.get_close_matches(key, sorted(known), n=1)] if close]
    hint = f" (did you mean {', '.join(guesses)}?)" if guesses else ""
    return f"unknown key(s) {sorted(unknown)}{hint}; known: {sorted(known)}"


def _check_table(table: Any, name: str, known: set[str], source: str) -> None:
    """TopologyError unless `table` is a TOML table whose keys are all `known`."""
    if not isinstance(table, dict):
        raise TopologyError(f"{source}: {name} must be a table")
    unknown = set(table) - known
    if unknown:
        raise TopologyError(f"{source}: {name} has {_unknown_keys(unknown, known)}")


def _other_host_options(table: Any, own: set[str]) -> set[str]:
    """The registered host options besides the store URLs (persistence's actor defaults: stash_capacity,
    redeliver_interval, ...), which a [system] or [cluster] table also takes; looked up only when the table has
    keys beyond its `own` (known_host_options loads the reprise.host_options entry points: `reprise up` never
    imported persistence)."""
    if not isinstance(table, dict) or not set(table) - own:
        return set()
    return set(known_host_options()) - set(HOST_OPTIONS)


def _system(table: Any, source: str, base_dir: str | None) -> SystemSection:
    extra = _other_host_options(table, SYSTEM_KEYS)
    _check_table(table, "[system]", SYSTEM_KEYS | extra, source)
    port = table.get("admin_port")
    if port is not None and (not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536):
        raise TopologyError(f"{source}: [system] admin_port must be an integer in 1..65535, got {port!r}")
    for key in ("bind", "advertise", "journal", "snapshot_store", "leader", "node", "log_level", "secret_file",
                "tls_cert", "tls_key", "tls_ca", "metrics_host"):
        if key in table and not isinstance(table[key], str):
            raise TopologyError(f"{source}: [system] {key} must be a string, got {table[key]!r}")
    peers = table.get("peers", [])
    if not isinstance(peers, list) or not all(isinstance(p, str) for p in peers):
        raise TopologyError(f"{source}: [system] peers must be a list of strings")
    try:
        check_peers(peers)
        check_ip("bind", table.get("bind", "127.0.0.1"))
        check_ip("advertise", table.get("advertise"), allow_none=True)
        check_leader(table.get("leader"))
        log_level = check_log_level(table.get("log_level", "WARNING"))
        check_metrics_options(table.get("metrics_port"), table.get("metrics_host", DEFAULT_METRICS_HOST))
        tls_config(tls_cert=table.get("tls_cert"), tls_key=table.get("tls_key"), tls_ca=table.get("tls_ca"))
        for key in (*HOST_OPTIONS, *sorted(extra)):  # checked by their owner (actors.host_options) where it is known
            if table.get(key) is not None:
                check_option(key, table[key], per_host=False)
        check_number("node_timeout", table.get("node_timeout", 5.0),
                     hint="seconds without heartbeat answers before a member node is down")
    except ConfigError as e:
        raise TopologyError(f"{source}: [system] {e}") from None
    return SystemSection(
        admin_port=port, bind=table.get("bind", "127.0.0.1"), advertise=table.get("advertise"),
        journal=_absolute_sqlite(table.get("journal"), base_dir),
        snapshot_store=_absolute_sqlite(table.get("snapshot_store"), base_dir),
        leader=table.get("leader"), node=table.get("node"), peers=tuple(peers),
        log_level=log_level,
        secret_file=_relative_to(table.get("secret_file"), base_dir),
        tls_cert=_relative_to(table.get("tls_cert"), base_dir), tls_key=_relative_to(table.get("tls_key"), base_dir),
        tls_ca=_relative_to(table.get("tls_ca"), base_dir), metrics_port=table.get("metrics_port"),
        metrics_host=table.get("metrics_host", DEFAULT_METRICS_HOST),
        node_timeout=float(table.get("node_timeout", 5.0)),
        host_defaults=tuple((key, table[key]) for key in sorted(extra) if key in table))


def _cluster(doc: dict[str, Any], source: str, base_dir: str | None) -> ClusterSection:
    table, nodes, spark = doc.get("cluster"), doc.get("node"), doc.get("spark", {})
    if table is None:
        raise TopologyError(f"{source}: [[node]] and [spark] belong to a cluster file, which needs a [cluster] "
                            "table (leader = the name of the leader's [[node]], journal, secret_file, ...)")
    extra = _other_host_options(table, CLUSTER_KEYS)
    _check_table(table, "[cluster]", CLUSTER_KEYS | extra, source)
    if not isinstance(nodes, list) or not nodes:
        raise TopologyError(f"{source}: a cluster file needs its nodes as [[node]] tables (name, bind, admin_port)")
    sections = tuple(_node(n, f"{source}: [[node]] #{i + 1}") for i, n in enumerate(nodes))
    names = [n.name for n in sections]
    addresses = [f"{n.address}:{n.admin_port}" for n in sections]
    for what, values in (("name", names), ("address and admin_port", addresses)):
        dupes = sorted({v for v in values if values.count(v) > 1})
        if dupes:
            raise TopologyError(f"{source}: [[node]] {what} declared twice: {dupes}")
    for key in ("leader", "journal", "snapshot_store", "secret_file", "log_level", "tls_cert", "tls_key", "tls_ca",
                "metrics_host"):
        if key in table and not isinstance(table[key], str):
            raise TopologyError(f"{source}: [cluster] {key} must be a string, got {table[key]!r}")
    leader = table.get("leader")
    if leader not in names:
        raise TopologyError(f"{source}: [cluster] leader must name one of the [[node]]s {names}, got {leader!r}")
    if "secret_file" not in table:
        raise TopologyError(f"{source}: [cluster] secret_file is required: the secret every node authenticates "
                            "with (the leader creates it; copy it to each machine), e.g. secret_file = \"cluster.secret\"")
    _check_table(spark, "[spark]", SPARK_KEYS, source)
    if not isinstance(spark.get("bridges", False), bool):
        raise TopologyError(f"{source}: [spark] bridges must be true or false, got {spark['bridges']!r}")
    spark_options = _spark_options(spark, source)
    peers = table.get("peers", [])
    try:
        check_peers(peers)
        for key, default in (("node_timeout", 5.0), ("join_timeout", 60.0)):
            check_number(key, table.get(key, default), hint="seconds")
        log_level = check_log_level(table.get("log_level", "WARNING"))
        tls_config(tls_cert=table.get("tls_cert"), tls_key=table.get("tls_key"), tls_ca=table.get("tls_ca"))
        for key in (*HOST_OPTIONS, *sorted(extra)):  # checked by their owner (actors.host_options)
            if table.get(key) is not None:
                check_option(key, table[key], per_host=False)
    except ConfigError as e:
        raise TopologyError(f"{source}: [cluster] {e}") from None
    # A node's metrics_host defaults to the cluster's, which defaults to loopback.
    metrics_host = table.get("metrics_host")
    if metrics_host is not None:
        sections = tuple(n if "metrics_host" in raw else _with_metrics_host(n, metrics_host, source)
                         for n, raw in zip(sections, nodes, strict=True))
    return ClusterSection(
        leader=leader, nodes=sections, secret_file=_relative_to(table["secret_file"], base_dir) or "",
        journal=_absolute_sqlite(table.get("journal"), base_dir),
        snapshot_store=_absolute_sqlite(table.get("snapshot_store"), base_dir),
        node_timeout=float(table.get("node_timeout", 5.0)), join_timeout=float(table.get("join_timeout", 60.0)),
        log_level=log_level, tls_cert=_relative_to(table.get("tls_cert"), base_dir),
        tls_key=_relative_to(table.get("tls_key"), base_dir), tls_ca=_relative_to(table.get("tls_ca"), base_dir),
        peers=tuple(peers), spark_bridges=spark.get("bridges", False), spark_options=spark_options,
        host_defaults=tuple((key, table[key]) for key in sorted(extra) if key in table))


def _spark_options(spark: dict[str, Any], source: str) -> dict[str, Any]:
    """[spark]'s options for start_bridge(s): `staged_ttl` seconds > 0, or false for None (kept until discarded)."""
    if "staged_ttl" not in spark:
        return {}
    if not spark.get("bridges", False):
        raise TopologyError(f"{source}: [spark] staged_ttl is for the bridges: add bridges = true, or remove it")
    ttl = spark["staged_ttl"]
    if ttl is False:
        return {"staged_ttl": None}
    if isinstance(ttl, bool) or not isinstance(ttl, int | float) or not 0 < ttl < float("inf"):
        raise TopologyError(f"{source}: [spark] staged_ttl must be a number of seconds > 0 (a run staged but never "
                            f"released is discarded after that long idle; default 86400, a day), or false to keep "
                            f"such runs until discarded by hand (reprise spark discard); got {ttl!r}")
    return {"staged_ttl": float(ttl)}


def _with_metrics_host(node: NodeSection, host: str, source: str) -> NodeSection:
    try:
        check_metrics_options(node.metrics_port, host)
    except ConfigError as e:
        raise TopologyError(f"{source}: [cluster] {e}") from None
    return NodeSection(node.name, node.admin_port, node.bind, node.advertise, node.metrics_port, host)


def _node(table: Any, where: str) -> NodeSection:
    if not isinstance(table, dict):
        raise TopologyError(f"{where} must be a table")
    name = table.get("name")
    if not isinstance(name, str) or not name.strip():
        raise TopologyError(f"{where} needs a non-empty string 'name' (the node name nodes = [...] refers to)")
    where = f"{where} ({name!r})"
    unknown = set(table) - NODE_KEYS
    if unknown:
        raise TopologyError(f"{where} has {_unknown_keys(unknown, NODE_KEYS)}")
    port = table.get("admin_port")
    if not isinstance(port, int) or isinstance(port, bool) or not 0 < port < 65536:
        raise TopologyError(f"{where} admin_port must be an integer in 1..65535 (the port its admin listens on), "
                            f"got {port!r}")
    for key in ("bind", "advertise", "metrics_host"):
        if key in table and not isinstance(table[key], str):
            raise TopologyError(f"{where} {key} must be a string, got {table[key]!r}")
    try:
        check_ip("bind", table.get("bind", "127.0.0.1"))
        check_ip("advertise", table.get("advertise"), allow_none=True)
        check_metrics_options(table.get("metrics_port"), table.get("metrics_host", DEFAULT_METRICS_HOST))
    except ConfigError as e:
        raise TopologyError(f"{where} {e}") from None
    if table.get("metrics_port") == port:
        raise TopologyError(f"{where} metrics_port and admin_port are both {port}: give them different ports")
    return NodeSection(name, port, table.get("bind", "127.0.0.1"), table.get("advertise"), table.get("metrics_port"),
                       table.get("metrics_host", DEFAULT_METRICS_HOST))


def _check_placement(entries: list[ActorEntry], cluster: ClusterSection, source: str) -> None:
    """Every node an entry names is a declared [[node]]."""
    declared = [n.name for n in cluster.nodes]
    for entry in entries:
        named = [entry.options["node"]] if "node" in entry.options else list(entry.options.get("nodes", ()))
        missing = [n for n in named if n not in declared]
        if missing:
            key = "node" if "node" in entry.options else "nodes"
            raise TopologyError(f"{source}: {_entry_name(entry)} {key} names {missing}, which no [[node]] "
                                f"declares (declared: {declared})")


def _entry_name(entry: ActorEntry) -> str:
    """How errors name an entry: `[[entities]] /user/accounts`."""
    return f"[[{'entities' if entry.entities else 'actor'}]] {entry.path}"


def _relative_to(path: str | None, base_dir: str | None) -> str | None:
    """`path` relative to the topology file's directory (like the SQLite URLs in it)."""
    if path is None or base_dir is None or os.path.isabs(path):
        return path
    return os.path.join(base_dir, path)


def _absolute_sqlite(url: str | None, base_dir: str | None) -> str | None:
    # Actor processes do not share the CLI's working directory, so a relative file would land elsewhere.
    if url is None or base_dir is None or not url.startswith("sqlite://") or url.startswith("sqlite:///"):
        return url
    target, sep, query = url[len("sqlite://"):].partition("?")
    if not target or target == ":memory:":
        return url
    return f"sqlite://{os.path.join(base_dir, target)}{sep}{query}"


def _absolute_sqlite_in(value: Any, base_dir: str | None) -> Any:
    """`value` (args, kwargs, nested tables and lists) with each relative sqlite:// URL made absolute."""
    if isinstance(value, str):
        return _absolute_sqlite(value, base_dir)
    if isinstance(value, dict):
        return {k: _absolute_sqlite_in(v, base_dir) for k, v in value.items()}
    if isinstance(value, list):
        return [_absolute_sqlite_in(v, base_dir) for v in value]
    return value


def _entry(table: Any, entities: bool, where: str, base_dir: str | None) -> ActorEntry:
    if not isinstance(table, dict):
        raise TopologyError(f"{where} must be a table")
    unknown = set(table) - ENTRY_KEYS
    if unknown:
        raise TopologyError(f"{where} has {_unknown_keys(unknown, ENTRY_KEYS)}")
    for key in ("path", "class"):
        if not isinstance(table.get(key), str):
            raise TopologyError(f"{where} needs a string {key!r}")
    try:
        check_spawn_path(table["path"])
    except InvalidPath as e:
        raise TopologyError(f"{where}: {e}") from None
    args, kwargs = table.get("args", []), table.get("kwargs", {})
    if not isinstance(args, list):
        raise TopologyError(f"{where}: args must be a list")
    if not isinstance(kwargs, dict):
        raise TopologyError(f"{where}: kwargs must be a table")
    args, kwargs = _absolute_sqlite_in(args, base_dir), _absolute_sqlite_in(kwargs, base_dir)
    options = {k: table[k] for k in SPAWN_OPTIONS if k in table}
    for key in ("passivate_after", "shards"):
        if key in options and not entities and not (key == "shards" and options[key] == 1):
            raise TopologyError(f"{where}: {key} only applies to [[entities]] (one [[actor]] is one process)")
    try:
        for key, value in options.items():
            if key == "node":
                if not isinstance(value, str):
                    raise ConfigError(f"node must be a string, got {value!r}")
            elif key == "nodes":
                options[key] = list(check_nodes(value, options.get("node")))
            elif key == "backoff":
                options[key] = Backoff.of(value)
            elif key == "hold_limit":
                options[key] = check_hold_limit(value)
            elif key in HOST_OPTIONS:
                check_option(key, value, per_host=True)
                options[key] = _absolute_sqlite(value, base_dir)
            elif key == "shards":
                check_number("shards", value, minimum=1, allow_equal=True, integer=True,
                             hint="how many host processes share the entities")
        check_spawn_options(**{k: v for k, v in options.items()
                                if k not in {"node", "nodes", "shards", "backoff", "hold_limit", *HOST_OPTIONS}})
    except ConfigError as e:
        raise TopologyError(f"{where}: {e}") from None
    return ActorEntry(table["path"], table["class"], entities, tuple(args), dict(kwargs), options)

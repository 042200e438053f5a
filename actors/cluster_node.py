"""`reprise up cluster.toml`: start this machine's node of a cluster file, the leader or a member.

The leader starts its system, waits (up to `[cluster] join_timeout`) for every declared node to join,
then spawns every `[[actor]]`/`[[entities]]` (placed with `node=`/`nodes=`) and, with `[spark] bridges =
true`, one Spark bridge per node. A member joins the leader and spawns nothing: the leader places hosts on it.
A member started before its leader waits for it (and, on the leader's machine, for the secret file the leader
creates) up to `join_timeout` too, so the nodes can be started in any order, or all at once.

A leader killed and started again (`reprise up` on the same file: same admin port, same secret) does the same:
its members rejoin it, and each stops the hosts the dead leader had placed on it (NodeAgent._fence, when unpinged
or at the new guardian's welcome) rather than the new guardian adopting them (their supervisor and routes died
with the old guardian), so every host runs once; persistent entities recover their events from the journal.
"""

from __future__ import annotations

import importlib
import os
import socket
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, cast

from journal.urls import redact_url

from .local_systems import listening
from .paths import printable
from .system import System, start
from .topology import ClusterSection, NodeSection, Topology, TopologyError, resolve_class

__all__ = ["BRIDGES", "choose_node", "local_address", "start_node"]

# Named, not imported: spark_bridge is a layer above actors, and a topology names its classes the same way.
BRIDGES = ("spark_bridge:start_bridge", "spark_bridge:start_bridges")
JOIN_POLL = 0.2


class _Membership(Protocol):
    """What the leader needs of its System to wait for members (issue 17's node membership)."""

    def nodes(self) -> dict[str, str]: ...


def local_address(address: str) -> bool:
    """Whether `address` is one of this machine's (binding a socket to it succeeds)."""
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    try:
        with socket.socket(family, socket.SOCK_STREAM) as s:
            s.bind((address, 0))
    except OSError:
        return False
    return True


def choose_node(cluster: ClusterSection, name: str | None, source: str) -> NodeSection:
    """The [[node]] called `name`, or (None) the only one whose address is this machine's."""
    names = [n.name for n in cluster.nodes]
    if name is not None:
        try:
            return cluster.node(name)
        except KeyError:
            raise TopologyError(f"{source}: --node {name!r} is not one of its [[node]]s {names}") from None
    mine = [n for n in cluster.nodes if local_address(n.address)]
    if len(mine) == 1:
        return mine[0]
    if not mine:
        raise TopologyError(f"{source}: no [[node]] has an address of this machine "
                            f"({', '.join(f'{n.name}={n.address}' for n in cluster.nodes)}); pass --node NAME")
    raise TopologyError(f"{source}: several [[node]]s have an address of this machine "
                        f"({', '.join(n.name for n in mine)}); pass --node NAME")


def start_node(topo: Topology, name: str | None = None, *, tag: str | None = None,
               run_dir: str | None = None, out: Callable[[str], None] = print) -> System:
    """Start node `name` of the cluster file `topo` (see the module docstring); returns its System."""
    cluster = topo.cluster
    if cluster is None:
        raise TopologyError(f"{topo.source}: not a cluster file (no [cluster] table)")
    node = choose_node(cluster, name, topo.source)
    classes = [resolve_class(e.factory) for e in topo.entries]  # fail before starting anything
    bridges = [_function(spec) for spec in BRIDGES] if cluster.spark_bridges else []
    leader = node.name == cluster.leader
    if not leader:
        _wait_for_leader(cluster, out)
    # Node liveness is the guardian's (issue 17): only the leader's system takes node_timeout.
    leader_options: dict[str, Any] = {"node_timeout": cluster.node_timeout} if leader else {}
    from .system_commands import new_journal_note

    new_journal = new_journal_note(cluster.journal)  # (sampled before the start: the hosts create it)
    system = start("multiproc", admin_port=node.admin_port, journal=cluster.journal,
                   snapshot_store=cluster.snapshot_store, bind=node.bind, advertise=node.advertise,
                   peers=cluster.peers_of(node.name), leader=None if leader else cluster.leader_address,
                   node=node.name, log_level=cluster.log_level, tag=tag, run_dir=run_dir,
                   secret_file=cluster.secret_file, tls_cert=cluster.tls_cert, tls_key=cluster.tls_key,
                   tls_ca=cluster.tls_ca, metrics_port=node.metrics_port, metrics_host=node.metrics_host,
                   **leader_options, **dict(cluster.host_defaults))
    try:
        role = "leader" if leader else f"member of {cluster.leader_address}"
        out(f"cluster node {node.name!r} ({role}) up on {node.address}:{system.admin_port} "
            f"(run dir {system.run_dir})")
        if node.metrics_port is not None:
            out(f"  metrics  http://{node.metrics_host}:{node.metrics_port}/metrics")
        if not leader:
            return system
        if cluster.journal:
            out(f"  journal  {redact_url(cluster.journal)}{new_journal}")
        missing = wait_for_nodes(system, [n.name for n in cluster.nodes], cluster.join_timeout)
        if missing:
            out(f"  WARNING: node(s) {missing} did not join within {cluster.join_timeout:g} s ([cluster] "
                f"join_timeout): what may run elsewhere starts on the nodes that are up; start them with "
                f"`reprise up {topo.source} --node NAME`, then `reprise rebalance`")
        for entry, cls in zip(topo.entries, classes, strict=True):
            system.spawn(cls, entry.path, entities=entry.entities, args=entry.args, kwargs=entry.kwargs,
                         **entry.options)
            kind = "entities" if entry.entities else "actor"
            where = entry.options.get("nodes") or [entry.options.get("node") or node.name]
            out(f"  {kind:<8} {printable(entry.path)}  {printable(entry.factory)}  on {printable(', '.join(where))}")
        for function in bridges:
            function(system, **cluster.spark_options)
        if bridges:
            ttl = cluster.spark_options.get("staged_ttl", "default")
            kept = ("kept until discarded by hand" if ttl is None else "discarded after the default idle time"
                    if ttl == "default" else f"discarded after {ttl:g} s idle")
            out(f"  spark    one bridge per node ({', '.join(n.name for n in cluster.nodes)}); runs staged but "
                f"never released {kept}")
    except BaseException:
        system.shutdown()
        raise
    finally:
        sys.stdout.flush()
    return system


def _wait_for_leader(cluster: ClusterSection, out: Callable[[str], None]) -> None:
    """Wait (bounded by join_timeout) until the leader's admin listens and the secret file exists (on the leader's
    machine the leader creates it): members started at once with the leader failed with 'start the leader first',
    and the leader then waited its whole join_timeout for them. Past the deadline, start() says what is missing."""
    host, port = cluster.node(cluster.leader).address, cluster.node(cluster.leader).admin_port
    deadline = time.monotonic() + cluster.join_timeout
    said = False
    while not (listening(host, port) and os.path.exists(cluster.secret_file)):
        if time.monotonic() >= deadline:
            return
        if not said:
            out(f"waiting up to {cluster.join_timeout:g} s ([cluster] join_timeout) for the leader "
                f"{cluster.leader!r} at {host}:{port}"
                + ("" if os.path.exists(cluster.secret_file) else f" and the secret file {cluster.secret_file}"))
            said = True
        time.sleep(JOIN_POLL)




def wait_for_nodes(system: System, names: list[str], timeout: float) -> list[str]:
    """Wait until every node in `names` is up (bounded by `timeout` s); the names still missing."""
    deadline = time.monotonic() + timeout
    while True:
        states = cast(_Membership, system).nodes()
        missing = [n for n in names if states.get(n) != "up"]
        if not missing or time.monotonic() >= deadline:
            return missing
        time.sleep(JOIN_POLL)


def _function(spec: str) -> Callable[[Any], object]:
    module_name, _, name = spec.partition(":")
    try:
        function = getattr(importlib.import_module(module_name), name)
    except (ImportError, AttributeError) as e:
        raise TopologyError(f"[spark] bridges = true needs {spec} ({e}): install the spark extra") from None
    return cast(Callable[[Any], object], function)

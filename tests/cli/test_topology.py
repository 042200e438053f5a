"""Topology files: parsing, validation messages, class resolution."""

from __future__ import annotations

import itertools
import os
import re
import subprocess
import sys
import uuid

import pytest

import actors
from actors.cluster_node import choose_node, local_address
from actors.system import kill_tagged, tagged_pids
from actors.topology import TopologyError, load, loads, resolve_class
from journal.postgres import drop_schema
from tests.actors.sample import Echo, Ping, Pong
from tests.conftest import SESSION_TOKEN
from tests.ports import free_ports
from tests.waiting import wait_for

GOOD = """
[system]
admin_port = 1900
journal = "sqlite://j.db?synchronous=full"
snapshot_store = "sqlite:///abs/s.db"
peers = ["10.0.0.2"]

[[actor]]
path = "/user/echo"
class = "tests.actors.sample:Echo"
args = [1]
kwargs = { a = "b" }
max_restarts = 3

[[entities]]
path = "/user/echoes"
class = "tests.actors.sample.Echo"
passivate_after = 5
node = "worker"
shards = 2
journal = "sqlite://accounts-{shard}.db"
"""


def test_a_full_topology_parses() -> None:
    topo = loads(GOOD, base_dir="/srv/app")
    assert topo.system.admin_port == 1900 and topo.system.peers == ("10.0.0.2",)
    # Relative sqlite files are relative to the topology file, absolute ones stay.
    assert topo.system.journal == "sqlite:///srv/app/j.db?synchronous=full"
    assert topo.system.snapshot_store == "sqlite:///abs/s.db"
    actor, host = topo.entries
    assert (actor.path, actor.entities, actor.args, actor.kwargs, actor.options) == (
        "/user/echo", False, (1,), {"a": "b"}, {"max_restarts": 3})
    assert host.entities and host.options == {"passivate_after": 5, "node": "worker", "shards": 2,
                                              "journal": "sqlite:///srv/app/accounts-{shard}.db"}


def test_relative_sqlite_urls_in_args_and_kwargs_are_relative_to_the_topology_file() -> None:
    topo = loads("""
        [[actor]]
        path = "/user/balances"
        class = "persistence:Projection"
        args = ["sqlite://a.db", "not a url"]
        [actor.kwargs]
        offset_store = "sqlite://read-model.db?timeout=5"
        source = { tag = "deposit", journal = "sqlite://other/journal.db" }
        mirrors = ["sqlite:///abs/m.db", "sqlite://m.db", "postgresql://u@h/db", 3]
        memory = "sqlite://:memory:"
    """, base_dir="/srv/app")
    (entry,) = topo.entries
    assert entry.args == ("sqlite:///srv/app/a.db", "not a url")
    assert entry.kwargs == {
        "offset_store": "sqlite:///srv/app/read-model.db?timeout=5",
        "source": {"tag": "deposit", "journal": "sqlite:///srv/app/other/journal.db"},
        "mirrors": ["sqlite:///abs/m.db", "sqlite:///srv/app/m.db", "postgresql://u@h/db", 3],
        "memory": "sqlite://:memory:"}


def test_the_shipped_example_parses() -> None:
    topo = load("examples/topologies/echo.toml")
    assert [e.path for e in topo.entries] == ["/user/echo", "/user/echoes"]


@pytest.mark.parametrize("text, needle", [
    ("[system]\nadmin_prot = 1", "unknown key(s) ['admin_prot'] (did you mean 'admin_prot' -> 'admin_port'?)"),
    ("[[entities]]\npath = '/user/a'\nclass = 'm:C'\npasivate_after = 1",
     "unknown key(s) ['pasivate_after'] (did you mean 'pasivate_after' -> 'passivate_after'?)"),
    ("[system]\nadmin_port = 'x'", "admin_port must be an integer"),
    ("[[actor]]\npath = '/user/a'", "needs a string 'class'"),
    ("[[actor]]\npath = 'user/a'\nclass = 'm:C'", "[[actor]] #1"),
    ("[[actor]]\npath = '/system/a'\nclass = 'm:C'", "[[actor]] #1: path '/system/a': /system is reserved"),
    ("[[entities]]\npath = '/temp/a'\nclass = 'm:C'", "[[entities]] #1: path '/temp/a': /temp is reserved"),
    ("[[actor]]\npath = '/user/a'\nclass = 'm:C'\npassivate_after = 1", "only applies to [[entities]]"),
    ("[[actor]]\npath = '/user/a'\nclass = 'm:C'\nshards = 2", "[[actor]] #1: shards only applies to [[entities]]"),
    ("[[entities]]\npath = '/user/a'\nclass = 'm:C'\n[[actor]]\npath = '/user/a/1'\nclass = 'm:C'",
     "overlaps"),
    ("[[actor]]\npath = '/user/a'\nclass = 'm:C'\n[[actor]]\npath = '/user/a'\nclass = 'm:C'", "declared twice"),
    ("[actor]\npath = '/user/a'", "write [[actor]]"),
    ("[sytem]", "unknown top-level"),
    ("[[entities]]\npath = '/user/a'\nclass = 'm:C'\njournal = 'sqlite:///x-{id}.db'", "the only placeholder"),
    ("[system\n", "invalid TOML"),
])
def test_mistakes_are_named(text, needle) -> None:
    with pytest.raises(TopologyError) as e:
        loads(text)
    assert needle in str(e.value)


def test_entries_keep_the_order_the_file_declares_them_in() -> None:
    text = ('[[entities]]\npath = "/user/e"\nclass = "m:E"\n\n[[actor]] # the greeter\npath = "/user/a"\n'
            'class = "m:A"\n\n  [[ entities ]]\npath = "/user/f"\nclass = "m:F"\n')
    assert [e.path for e in loads(text).entries] == ["/user/e", "/user/a", "/user/f"]
    inline = 'actor = [{ path = "/user/a", class = "m:A" }]\n[[entities]]\npath = "/user/e"\nclass = "m:E"\n'
    assert [e.path for e in loads(inline).entries] == ["/user/a", "/user/e"]  # (no headers to order by)


def test_resolve_class_both_spellings() -> None:
    assert resolve_class("tests.actors.sample:Echo") is Echo
    assert resolve_class("tests.actors.sample.Echo") is Echo
    for bad, needle in (("nosuchmodule:X", "cannot import"), ("tests.actors.sample:Nope", "has no"),
                        ("Echo", "module:Class"), ("tests.actors.sample:dataclass", "not a class")):
        with pytest.raises(TopologyError, match=needle):
            resolve_class(bad)


CLUSTER = """
[cluster]
leader = "a"
journal = "postgresql://reprise@10.0.0.1:5432/reprise"
secret_file = "cluster.secret"
node_timeout = 2
peers = ["10.0.0.9"]
metrics_host = "0.0.0.0"

[[node]]
name = "a"
bind = "10.0.0.1"
admin_port = 1900
metrics_port = 9464

[[node]]
name = "b"
bind = "0.0.0.0"
advertise = "10.0.0.2"
admin_port = 1901
metrics_port = 9465
metrics_host = "10.0.0.2"

[[node]]
name = "c"
bind = "10.0.0.3"
admin_port = 1900

[spark]
bridges = true

[[entities]]
path = "/user/accounts"
class = "tests.actors.sample:Echo"
shards = 6
nodes = ["a", "b", "c"]

[[actor]]
path = "/user/feeder"
class = "tests.actors.sample:Echo"
node = "b"
"""


def test_a_cluster_file_parses() -> None:
    topo = loads(CLUSTER, base_dir="/srv/app")
    c = topo.cluster
    assert c is not None and c.leader == "a" and c.node_timeout == 2.0 and c.join_timeout == 60.0
    assert c.secret_file == "/srv/app/cluster.secret" and c.spark_bridges
    assert [(n.name, n.address, n.admin_port, n.metrics_port, n.metrics_host) for n in c.nodes] == [
        ("a", "10.0.0.1", 1900, 9464, "0.0.0.0"), ("b", "10.0.0.2", 1901, 9465, "10.0.0.2"),
        ("c", "10.0.0.3", 1900, None, "0.0.0.0")]
    # Members join the leader's admin; each node accepts the others (by their advertised address) and the extras.
    assert c.leader_address == "10.0.0.1:1900"
    assert c.peers_of("a") == ("10.0.0.2", "10.0.0.3", "10.0.0.9")
    assert c.peers_of("b") == ("10.0.0.1", "10.0.0.3", "10.0.0.9")
    accounts, feeder = topo.entries  # (in the order the file declares them)
    assert accounts.options == {"shards": 6, "nodes": ["a", "b", "c"]} and feeder.options == {"node": "b"}


def test_spark_staged_ttl_is_passed_to_the_bridges_as_seconds_or_none() -> None:
    """[spark] staged_ttl: start_bridge(s)'s keyword (false: None, runs kept until discarded by hand)."""
    assert loads(CLUSTER).cluster.spark_options == {}
    hour = loads(_cluster("bridges = true => bridges = true\nstaged_ttl = 3600")).cluster
    assert hour.spark_options == {"staged_ttl": 3600.0}
    off = loads(_cluster("bridges = true => bridges = true\nstaged_ttl = false")).cluster
    assert off.spark_options == {"staged_ttl": None}


def test_the_shipped_cluster_example_parses() -> None:
    topo = load("examples/cluster/cluster.toml")
    c = topo.cluster
    assert c is not None and [n.name for n in c.nodes] == ["a", "b", "c"] and c.leader == "a"
    assert c.spark_bridges and (c.journal or "").startswith("postgresql://")
    (accounts,) = topo.entries
    assert accounts.entities and accounts.options["nodes"] == ["a", "b", "c"] and accounts.options["shards"] >= 3


def _cluster(edit: str) -> str:
    """CLUSTER with one line replaced ("old => new") or appended."""
    if " => " in edit:
        old, new = edit.split(" => ")
        assert old in CLUSTER, old
        return CLUSTER.replace(old, new, 1)
    return CLUSTER + edit


@pytest.mark.parametrize("edit, needle", [
    ('leader = "a" => leader = "z"', "[cluster] leader must name one of the [[node]]s ['a', 'b', 'c'], got 'z'"),
    ('secret_file = "cluster.secret" => ', "[cluster] secret_file is required"),
    ('node_timeout = 2 => node_timeout = 0', "[cluster] node_timeout must be > 0"),
    ('node_timeout = 2 => join_timeout = "x"', "[cluster] join_timeout must be a number"),
    ('node_timeout = 2 => nodes_timeout = 2', "[cluster] has unknown key(s) ['nodes_timeout']"),
    ('peers = ["10.0.0.9"] => peers = ["nowhere"]', "[cluster] peers entry 'nowhere'"),
    ('journal = "postgresql://reprise@10.0.0.1:5432/reprise" => journal = 5', "[cluster] journal must be a string"),
    ('name = "c" => name = "b"', "[[node]] name declared twice: ['b']"),
    ('name = "c" => name = ""', "[[node]] #3 needs a non-empty string 'name'"),
    ('admin_port = 1901 => admin_port = "1901"', "[[node]] #2 ('b') admin_port must be an integer"),
    ('bind = "10.0.0.3" => bind = "ten"', "[[node]] #3 ('c') bind"),
    ('bind = "10.0.0.3" => bind = "10.0.0.1"', "[[node]] address and admin_port declared twice"),
    ('metrics_port = 9464 => metrics_port = 1900', "[[node]] #1 ('a') metrics_port and admin_port are both 1900"),
    ('metrics_port = 9464 => metric_port = 9464',
     "[[node]] #1 ('a') has unknown key(s) ['metric_port'] (did you mean 'metric_port' -> 'metrics_port'?)"),
    ('bridges = true => bridges = "yes"', "[spark] bridges must be true or false"),
    ('bridges = true => bridge = true', "[spark] has unknown key(s) ['bridge']"),
    ('bridges = true => bridges = true\nstaged_ttl = "1h"', "[spark] staged_ttl must be a number of seconds > 0"),
    ('bridges = true => bridges = true\nstaged_ttl = 0', "[spark] staged_ttl must be a number of seconds > 0"),
    ('bridges = true => bridges = true\nstaged_ttl = true', "or false to keep such runs until discarded by hand"),
    ('bridges = true => bridges = false\nstaged_ttl = 60', "[spark] staged_ttl is for the bridges"),
    ('nodes = ["a", "b", "c"] => nodes = ["a", "d"]', "[[entities]] /user/accounts nodes names ['d'], which no"),
    ('node = "b" => node = "x"', "[[actor]] /user/feeder node names ['x']"),
    ('nodes = ["a", "b", "c"] => nodes = []', "[[entities]] #1: nodes must name at least one node"),
    ('nodes = ["a", "b", "c"] => nodes = ["a", "a"]', "nodes lists 'a' more than once"),
    ('nodes = ["a", "b", "c"] => nodes = "a"', "nodes must be a list of node names"),
    ('node = "b" => node = "b"\nnodes = ["b"]', "node='b' and nodes=['b'] were both given"),
    ("[system]\nbind = '127.0.0.1'\n", "a cluster file has no [system] table"),
    # The actor defaults [system] takes, checked by their owner (persistence), named with their table.
    ('node_timeout = 2 => node_timeout = 2\nredeliver_interval = 0', "[cluster] redeliver_interval must be a number of seconds"),
    ('node_timeout = 2 => node_timeout = 2\nstash_capacity = -1', "[cluster] stash_capacity must be"),
    ('node_timeout = 2 => node_timeout = 2\ninternal_stash_overflow_strategy = "fail"',
     "[cluster] internal_stash_overflow_strategy must be"),
    ('node_timeout = 2 => node_timeout = 2\nrecovery_event_timeout = "30"', "[cluster] recovery_event_timeout must be"),
    ('node_timeout = 2 => node_timeout = 2\nmax_unconfirmed_messages = true', "[cluster] max_unconfirmed_messages must"),
    ('node_timeout = 2 => node_timeout = 2\nredeliver_intervall = 1.0',
     "[cluster] has unknown key(s) ['redeliver_intervall'] (did you mean 'redeliver_intervall' -> 'redeliver_interval'?)"),
    ("[[nodes]]\nname = 'd'\n", "unknown top-level table(s) ['nodes']"),
])
def test_cluster_mistakes_are_named(edit, needle) -> None:
    with pytest.raises(TopologyError) as e:
        loads(_cluster(edit))
    assert needle in str(e.value) and "\n" not in str(e.value)


# The system-wide defaults of actor settings, as `[system]` takes them (tests/persistence/test_alod_config_defaults.py).
ACTOR_DEFAULTS = {"stash_capacity": 7, "internal_stash_overflow_strategy": "drop", "recovery_event_timeout": 12.5,
                  "redeliver_interval": 0.4, "redelivery_burst_limit": 2, "warn_after_number_of_unconfirmed_attempts": 2,
                  "max_unconfirmed_messages": 3}
ACTOR_DEFAULTS_TOML = "".join(f"{k} = {v!r}\n".replace("'", '"') for k, v in ACTOR_DEFAULTS.items())


def test_the_cluster_table_takes_the_actor_defaults_the_system_table_takes() -> None:
    # A cluster file has no [system] table, and [cluster] refused these keys: a multi-machine system could not set
    # any of them from its topology.
    topo = loads(_cluster(f"node_timeout = 2 => node_timeout = 2\n{ACTOR_DEFAULTS_TOML}"))
    assert topo.cluster is not None and dict(topo.cluster.host_defaults) == ACTOR_DEFAULTS
    assert dict(loads(f"[system]\n{ACTOR_DEFAULTS_TOML}").system.host_defaults) == ACTOR_DEFAULTS
    assert loads(CLUSTER).cluster.host_defaults == ()


@pytest.mark.parametrize("text, needle", [
    ("[[node]]\nname = 'a'\nadmin_port = 1900\n", "needs a [cluster] table"),
    ("[spark]\nbridges = true\n", "needs a [cluster] table"),
    ("[cluster]\nleader = 'a'\nsecret_file = 's'\n", "needs its nodes as [[node]] tables"),
])
def test_cluster_tables_need_each_other(text, needle) -> None:
    with pytest.raises(TopologyError, match=re.escape(needle)):
        loads(text)


def test_nodes_is_accepted_in_a_single_system_file() -> None:
    (entry,) = loads("[[entities]]\npath = '/user/a'\nclass = 'm:C'\nnodes = ['m1', 'm2']\nshards = 2").entries
    assert entry.options == {"nodes": ["m1", "m2"], "shards": 2}


def test_system_node_timeout_is_read_and_checked() -> None:
    assert loads('[system]\nnode_timeout = 2.5\n').system.node_timeout == 2.5
    assert loads('[system]\n').system.node_timeout == 5.0
    with pytest.raises(TopologyError, match=r"\[system\] node_timeout must be"):
        loads('[system]\nnode_timeout = 0\n')


def test_choose_node_by_name_or_by_this_machines_address() -> None:
    cluster = loads(CLUSTER.replace('bind = "10.0.0.3"', 'bind = "127.0.0.1"')).cluster
    assert cluster is not None
    assert choose_node(cluster, "b", "c.toml").name == "b"
    # 10.0.0.x are not this machine's; 127.0.0.1 is.
    assert choose_node(cluster, None, "c.toml").name == "c" or local_address("10.0.0.1")
    with pytest.raises(TopologyError, match=re.escape("--node 'x' is not one of its [[node]]s ['a', 'b', 'c']")):
        choose_node(cluster, "x", "c.toml")
    everywhere = loads(CLUSTER.replace('"10.0.0.', '"127.0.0.')).cluster
    assert everywhere is not None
    with pytest.raises(TopologyError, match="several .* pass --node NAME"):
        choose_node(everywhere, None, "c.toml")
    nowhere = loads(CLUSTER.replace('"10.0.0.', '"198.51.100.').replace('"0.0.0.0"', '"198.51.100.2"')).cluster
    assert nowhere is not None
    with pytest.raises(TopologyError, match=re.escape("no [[node]] has an address of this machine (a=198.51.100.1")):
        choose_node(nowhere, None, "c.toml")


# ---- `reprise up cluster.toml` on loopback (nodes on one address, told apart by --node and their ports) ----

REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def cluster_file(tmp_path, names: str, cluster: str, actors: str) -> tuple[str, dict[str, int]]:
    """A cluster file of nodes `names` on 127.0.0.1 (the first the leader), with `cluster`'s lines after the
    [cluster] table's leader and secret_file, then `actors`' tables; its admin ports by node."""
    ports = dict(zip(names, free_ports(len(names)), strict=True))
    nodes = "".join(f'[[node]]\nname = "{n}"\nadmin_port = {p}\n' for n, p in ports.items())
    path = tmp_path / "cluster.toml"
    path.write_text(f'[cluster]\nleader = "{names[0]}"\nsecret_file = "cluster.secret"\n{cluster}{nodes}{actors}')
    return str(path), ports


def loopback_cluster(tmp_path, journal: str, join_timeout: float) -> tuple[str, dict[str, int]]:
    """A cluster file of nodes a (leader), b, c on 127.0.0.1, /user/echoes sharded over them; its admin ports."""
    return cluster_file(tmp_path, "abc", f'journal = "{journal}"\nnode_timeout = 2.0\njoin_timeout = {join_timeout}\n',
                        '[[entities]]\npath = "/user/echoes"\nclass = "tests.actors.sample:Echo"\nshards = 3\n'
                        'nodes = ["a", "b", "c"]\n')


def up(path: str, node: str, tag: str, tmp_path, wait: bool = True) -> subprocess.Popen[str]:
    """`reprise up path --node node --detach` of this checkout (waited for unless `wait` is False): the installed
    script may import another checkout."""
    proc = subprocess.Popen([sys.executable, "-m", "actors.cli", "up", path, "--node", node, "--detach", "--tag", tag,
                             "--run-dir", str(tmp_path / f"run-{node}")], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)
    if wait:
        proc.wait(90)
    return proc


@pytest.fixture
def cluster_tags():
    tags = {name: f"{SESSION_TOKEN}-topo-{name}-{next(_n)}-" for name in "abc"}
    yield tags
    for tag in tags.values():
        assert kill_tagged(tag) == [], f"processes tagged {tag} were left behind"


_n = itertools.count(1)


@pytest.mark.multiproc
@pytest.mark.timeout(180)
def test_up_a_cluster_file_leader_waits_for_its_members_then_spreads_the_shards(tmp_path, postgres_url,
                                                                                   cluster_tags) -> None:
    path, ports = loopback_cluster(tmp_path, f"{postgres_url}?schema=topo_{uuid.uuid4().hex[:8]}", 60.0)
    leader = up(path, "a", cluster_tags["a"], tmp_path, wait=False)
    try:
        wait_for(lambda: (tmp_path / "cluster.secret").exists() or leader.poll() is not None, timeout=60)
        for name in "bc":
            member = up(path, name, cluster_tags[name], tmp_path)
            out = member.communicate()[0]
            assert member.returncode == 0, out
            assert f"cluster node '{name}' (member of 127.0.0.1:{ports['a']}) up on 127.0.0.1:{ports[name]}" in out
        out = leader.communicate(timeout=90)[0]
        assert leader.returncode == 0, out
        assert "cluster node 'a' (leader)" in out and "entities /user/echoes" in out and "WARNING" not in out, out
        system = actors.connect(ports["a"])
        try:
            assert system.nodes() == {"a": "up", "b": "up", "c": "up"}
            nodes = sorted(h.node for p, h in system.status().hosts.items() if p.startswith("/user/echoes"))
            assert nodes == ["a", "b", "c"]
            assert system.ask("/user/echoes/x", Ping(7), timeout=20) == Pong(7, "/user/echoes/x")
        finally:
            system.close()
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, 9)
            leader.wait(10)
        for name in "cba":
            subprocess.run([REPRISE, "down", "--port", str(ports[name])], capture_output=True, timeout=60)


def _bring_down(procs: dict[str, subprocess.Popen], ports: dict[str, int], names: str) -> None:
    """Kill what is left of the nodes' `reprise up` processes, then `reprise down` each node (members first)."""
    for proc in procs.values():
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait(10)
    for name in names:
        subprocess.run([REPRISE, "down", "--port", str(ports[name])], capture_output=True, timeout=60)


@pytest.mark.multiproc
@pytest.mark.timeout(180)
def test_members_started_before_their_leader_wait_for_it(tmp_path, postgres_url, cluster_tags) -> None:
    # The README's one-machine block starts a with `&` and b, c right after: b found no leader yet and failed
    # ("start the leader first"), and a then waited its whole join_timeout for b before starting without it.
    journal = f"{postgres_url}?schema=topo_{uuid.uuid4().hex[:8]}"
    path, ports = loopback_cluster(tmp_path, journal, 60.0)
    procs = {name: up(path, name, cluster_tags[name], tmp_path, wait=False) for name in "bca"}
    try:
        outs = {name: proc.communicate(timeout=90)[0] for name, proc in procs.items()}
        assert all(proc.returncode == 0 for proc in procs.values()), outs
        assert f"waiting up to 60 s ([cluster] join_timeout) for the leader 'a' at 127.0.0.1:{ports['a']}" in outs["b"]
        assert "WARNING" not in outs["a"], outs["a"]
        system = actors.connect(ports["a"])
        try:
            assert system.nodes() == {"a": "up", "b": "up", "c": "up"}
            nodes = sorted(h.node for p, h in system.status().hosts.items() if p.startswith("/user/echoes"))
            assert nodes == ["a", "b", "c"]
        finally:
            system.close()
    finally:
        _bring_down(procs, ports, "cba")
        drop_schema(journal)


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_a_leader_whose_members_do_not_come_says_so_and_starts_on_what_is_up(tmp_path, postgres_url,
                                                                             cluster_tags) -> None:
    path, ports = loopback_cluster(tmp_path, f"{postgres_url}?schema=topo_{uuid.uuid4().hex[:8]}", 1.0)
    leader = up(path, "a", cluster_tags["a"], tmp_path)
    try:
        out = leader.communicate()[0]
        assert leader.returncode == 0, out
        assert "WARNING: node(s) ['b', 'c'] did not join within 1 s ([cluster] join_timeout)" in out, out
        system = actors.connect(ports["a"])
        try:
            nodes = [h.node for p, h in system.status().hosts.items() if p.startswith("/user/echoes")]
            assert nodes == ["a", "a", "a"]
        finally:
            system.close()
    finally:
        subprocess.run([REPRISE, "down", "--port", str(ports["a"])], capture_output=True, timeout=60)


@pytest.mark.multiproc
@pytest.mark.timeout(240)
def test_a_leader_sigkilled_and_up_again_serves_the_topology_again_without_doubling_member_hosts(
        tmp_path, postgres_url, cluster_tags) -> None:
    # The leader's `reprise up` spawns the file's hosts once its members are up; members whose leader was killed
    # stop the hosts it had placed there (NodeAgent._fence: when unpinged, or at the new guardian's welcome), so
    # the leader started again spawns everything afresh, each shard once, and the entities recover their events.
    from examples.accounts.client import balances, expected_balances, feed, wait_confirmed

    ports = dict(zip("abc", free_ports(3), strict=True))
    nodes = "".join(f'[[node]]\nname = "{n}"\nadmin_port = {p}\n' for n, p in ports.items())
    path = tmp_path / "cluster.toml"
    journal = f"{postgres_url}?schema=topo_{uuid.uuid4().hex[:8]}"
    path.write_text(f'[cluster]\nleader = "a"\njournal = "{journal}"\n'
                    f'secret_file = "cluster.secret"\nnode_timeout = 2.0\njoin_timeout = 60.0\n{nodes}'
                    '[[entities]]\npath = "/user/accounts"\nclass = "examples.accounts.model:Account"\nshards = 3\n'
                    'nodes = ["a", "b", "c"]\n\n[[actor]]\npath = "/user/feeder"\n'
                    'class = "examples.accounts.model:Feeder"\n')

    def members_shards(system: actors.System) -> dict[str, tuple[str | None, int | None]]:
        return {key: (info.node, info.pid) for key, info in system.status().hosts.items()
                if key.startswith("/user/accounts") and info.state == "running"}

    leader = up(str(path), "a", cluster_tags["a"], tmp_path, wait=False)
    try:
        wait_for(lambda: (tmp_path / "cluster.secret").exists() or leader.poll() is not None, timeout=60)
        for name in "bc":
            member = up(str(path), name, cluster_tags[name], tmp_path)
            assert member.wait() == 0, member.communicate()[0]
        out = leader.communicate(timeout=90)[0]
        assert leader.returncode == 0, out
        system = actors.connect(ports["a"])
        try:
            feed(system, 0, 300, 30)
            assert wait_confirmed(system).unconfirmed == 0
            assert balances(system, [str(i) for i in range(30)]) == expected_balances(300, 30)
            before = members_shards(system)
        finally:
            system.close()
        assert sorted(node for node, _ in before.values()) == ["a", "b", "c"]
        on_members = {pid for node, pid in before.values() if node != "a"}
        for pid in tagged_pids(cluster_tags["a"]):
            try:
                os.killpg(os.getpgid(pid), 9)
            except ProcessLookupError:
                pass
        wait_for(lambda: not tagged_pids(cluster_tags["a"]), timeout=10)
        again = up(str(path), "a", cluster_tags["a"], tmp_path)
        out = again.communicate()[0]
        assert again.returncode == 0 and "WARNING" not in out, out
        system = actors.connect(ports["a"])
        try:
            after = members_shards(system)
            assert sorted(node for node, _ in after.values()) == ["a", "b", "c"], after
            member_pids = set(tagged_pids(cluster_tags["b"]) + tagged_pids(cluster_tags["c"]))
            # No doubling: what the first leader placed on the members was stopped there.
            wait_for(lambda: not on_members & set(tagged_pids(cluster_tags["b"])
                                                  + tagged_pids(cluster_tags["c"])), timeout=20)
            assert {pid for node, pid in after.values() if node != "a"} <= member_pids
            # The entities' state was persisted: the accounts recover it, and take more.
            assert balances(system, [str(i) for i in range(30)]) == expected_balances(300, 30)
            feed(system, 300, 100, 30)
            assert wait_confirmed(system).unconfirmed == 0
            assert balances(system, [str(i) for i in range(30)]) == expected_balances(400, 30)
        finally:
            system.close()
    finally:
        if leader.poll() is None:
            os.killpg(leader.pid, 9)
            leader.wait(10)
        for name in "cba":
            subprocess.run([REPRISE, "down", "--port", str(ports[name])], capture_output=True, timeout=60)
        drop_schema(journal)


@pytest.mark.parametrize("argv, needle", [
    (["--node", "a"], "--node applies to cluster files"),
    (["--port", "1900"], "--port does not apply to a cluster file"),
    (["--node", "x"], "--node 'x' is not one of its [[node]]s ['a', 'b', 'c']"),
])
def test_up_refuses_mixed_options_in_one_line(tmp_path, argv, needle) -> None:
    cluster = tmp_path / "cluster.toml"
    cluster.write_text(CLUSTER)
    target = "examples/topologies/echo.toml" if argv[:2] == ["--node", "a"] else str(cluster)
    done = subprocess.run([REPRISE, "up", target, *argv], capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stdout == "", done.stderr
    (line,) = done.stderr.splitlines()
    assert needle in line, line


@pytest.mark.multiproc
@pytest.mark.timeout(180)
def test_up_a_cluster_file_gives_the_cluster_tables_actor_defaults_to_hosts_on_every_node(tmp_path,
                                                                                         cluster_tags) -> None:
    # Hosts run with the leader's configuration wherever they are placed: the entities on the member b and on the
    # leader a both get [cluster]'s settings; an actor's own attributes still win (OwnSettings).
    path, ports = cluster_file(
        tmp_path, "ab", f'journal = "sqlite://{tmp_path}/j.db"\njoin_timeout = 60.0\n{ACTOR_DEFAULTS_TOML}',
        '[[entities]]\npath = "/user/on-b"\nclass = "tests.persistence.alod_config_actors:Reporter"\nnode = "b"\n\n'
        '[[entities]]\npath = "/user/on-a"\nclass = "tests.persistence.alod_config_actors:OwnSettings"\nnode = "a"\n')
    procs = {name: up(path, name, cluster_tags[name], tmp_path, wait=False) for name in "ab"}
    try:
        outs = {name: proc.communicate(timeout=90)[0] for name, proc in procs.items()}
        assert all(proc.returncode == 0 for proc in procs.values()), outs
        system = actors.connect(ports["a"])
        try:
            assert {p: h.node for p, h in system.status().hosts.items() if p.startswith("/user/on-")} == {
                "/user/on-b": "b", "/user/on-a": "a"}
            assert system.ask("/user/on-b/x", "settings", timeout=20) == (0.4, 2, 2, 3)
            assert system.ask("/user/on-b/x", "persistent-actor-settings", timeout=20) == (7, "drop", 12.5)
            assert system.ask("/user/on-a/x", "settings", timeout=20) == (0.3, 3, 3, 4)  # (its own)
            assert system.ask("/user/on-a/x", "persistent-actor-settings", timeout=20) == (7, "drop", 12.5)
        finally:
            system.close()
    finally:
        _bring_down(procs, ports, "ba")

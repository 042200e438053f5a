"""Nodes: membership by heartbeats, `nodes=` placement, failover when a member dies, rebalance (issue 17).

A leader and two members on 127.0.0.1 (different admin ports), entities journaled in PostgreSQL (a journal every
node reaches), fed by an at-least-once feeder: balances must be exact after a member is SIGKILLed mid-stream and
after a rebalance moves shards while deposits flow.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid

import pytest

import actors
from actors.messages import CheckPids, PidsGone
from actors.system import kill_tagged, tagged_pids
from examples.accounts.client import balances, expected_balances, feed, wait_confirmed
from examples.accounts.model import Account, Feeder
from journal.postgres import drop_schema
from tests.actors.sample import Echo, FailsLater, Ping, Pong
from tests.conftest import start_system, stop_system
from tests.waiting import wait_for

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(60)]

NODE_TIMEOUT = 1.5  # seconds: quick failover for the tests
REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
ACCOUNTS = "/user/accounts"
THREE = ["leader", "m1", "m2"]


class Cluster:
    """A leader and members on this machine; members can be SIGKILLed and started again."""

    def __init__(self, tmp_path, **leader_options) -> None:
        self.tmp_path = tmp_path
        leader_options.setdefault("node_timeout", NODE_TIMEOUT)
        self.leader = start_system("multiproc", tmp_path, **leader_options)
        self.members: dict[str, actors.System] = {}
        self.killed: list[str] = []  # tags of members killed (their processes must stay gone)

    def join(self, name: str, admin_port: int | None = None, **options) -> actors.System:
        """Start member `name` (optionally on a given admin port) and wait until the guardian sees it up."""
        member = start_system("multiproc", self.tmp_path, leader=f"127.0.0.1:{self.leader.admin_port}", node=name,
                              secret_file=os.path.join(self.leader.run_dir, "secret"), admin_port=admin_port,
                              node_timeout=NODE_TIMEOUT, **options)
        self.members[name] = member
        assert self.leader.nodes()[name] == "up"  # registered before start() returned
        return member

    def kill(self, name: str) -> int:
        """SIGKILL the whole process group(s) of member `name` (its admin, agent and hosts); returns its admin port."""
        member = self.members.pop(name)
        assert member.tag
        pids = tagged_pids(member.tag)
        groups = {os.getpgid(pid) for pid in pids} - {os.getpgid(0)}
        assert pids and groups
        for group in groups:
            os.killpg(group, signal.SIGKILL)
        wait_for(lambda: not tagged_pids(member.tag), timeout=10)
        self.killed.append(member.tag)
        member._closed = True  # its admin is gone: nothing to shut down or detach from
        assert member.admin_port is not None
        return member.admin_port

    def signal(self, name: str, sig: signal.Signals) -> None:
        """Send `sig` to every process group of member `name` (SIGSTOP: cut off but alive)."""
        member = self.members[name]
        assert member.tag
        for group in {os.getpgid(pid) for pid in tagged_pids(member.tag)} - {os.getpgid(0)}:
            os.killpg(group, sig)

    def stop(self) -> None:
        for member in reversed(list(self.members.values())):
            stop_system(member)
        stop_system(self.leader)
        for tag in self.killed:
            assert kill_tagged(tag) == [], f"processes of killed member {tag} came back"


@pytest.fixture
def cluster(tmp_path):
    made: list[Cluster] = []

    def make(*members: str, **leader_options) -> Cluster:
        c = Cluster(tmp_path, **leader_options)
        made.append(c)
        for name in members:
            c.join(name)
        return c

    yield make
    for c in made:
        c.stop()


@pytest.fixture
def pg_url(postgres_url):
    """A journal URL with a schema of its own (every node reaches it: the journal failover needs). Name it before
    `cluster` in a test's arguments: set up first, it is dropped after the nodes stopped (dropped while they ran,
    their writes made it again, and it was left)."""
    name = f"reprise_nodes_{uuid.uuid4().hex[:10]}"
    url = f"{postgres_url}?schema={name}"
    yield url
    drop_schema(url)


def shard_nodes(system: actors.System, path: str) -> dict[str, str | None]:
    """Shard key -> the node it runs on, for the running shards of `path`."""
    return {key: info.node for key, info in system.status().hosts.items()
            if key.startswith(path) and info.state == "running"}


def test_shards_spread_over_three_nodes_and_status_shows_them(cluster):
    c = cluster("m1", "m2")
    assert c.leader.nodes() == {"leader": "up", "m1": "up", "m2": "up"}
    c.leader.spawn(Echo, "/user/echo", entities=True, shards=3, nodes=THREE)
    hosts = c.leader.status().hosts
    placed = {hosts[f"/user/echo [shard {k}]"].node for k in range(3)}
    assert placed == set(THREE)
    # Each shard really runs in its node's processes.
    for k, name in enumerate(THREE):
        info = hosts[f"/user/echo [shard {k}]"]
        assert info.node == name
        owner = c.leader if name == "leader" else c.members[name]
        assert info.pid in tagged_pids(owner.tag)
    for i in range(12):
        assert c.leader.ask(f"/user/echo/{i}", Ping(i), timeout=10) == Pong(i, f"/user/echo/{i}")
    status = c.leader.status()
    assert status.nodes == {"leader": "up", "m1": "up", "m2": "up"}


def spawn_accounts(c: Cluster) -> None:
    c.leader.spawn(Feeder, "/user/feeder")
    c.leader.spawn(Account, ACCOUNTS, entities=True, shards=3, nodes=THREE)


def check_exact(system: actors.System, deposits: int, accounts: int) -> None:
    """Every deposit confirmed, and every balance exact (none lost, none applied twice)."""
    stats = wait_confirmed(system, timeout=30)
    assert stats.accepted == deposits and stats.unconfirmed == 0, stats
    expected = expected_balances(deposits, accounts)
    assert balances(system, list(expected), timeout=20) == expected


def test_a_dead_members_shards_restart_on_the_other_nodes_with_exact_sums(pg_url, cluster):
    c = cluster("m1", "m2", journal=pg_url)
    spawn_accounts(c)
    accounts = 30
    feed(c.leader, 0, 600, accounts)  # deliveries are on their way to all three nodes when m2 dies
    c.kill("m2")
    killed = time.monotonic()
    feed(c.leader, 600, 300, accounts)  # sent while m2 is down but not yet declared so: held or rerouted

    def failed_over() -> dict[str, str | None] | None:
        placed = shard_nodes(c.leader, ACCOUNTS)
        return placed if len(placed) == 3 and "m2" not in placed.values() else None

    placed = wait_for(failed_over, timeout=NODE_TIMEOUT + 15)
    took = time.monotonic() - killed
    assert set(placed.values()) == {"leader", "m1"}, placed
    assert c.leader.nodes()["m2"] == "down"
    status = c.leader.status()
    shard2 = status.hosts[f"{ACCOUNTS} [shard 2]"]
    assert shard2.last_exit == "node m2 is down" and shard2.restarts >= 1
    feed(c.leader, 900, 300, accounts)
    check_exact(c.leader, 1200, accounts)
    print(f"failover: shards of m2 running elsewhere {took:.1f} s after its SIGKILL (node_timeout {NODE_TIMEOUT} s)")


def test_a_pinned_host_waits_for_its_node_holding_its_messages(cluster):
    c = cluster("m1")
    c.leader.spawn(Echo, "/user/pinned", node="m1")
    c.leader.spawn(Echo, "/user/roaming", nodes=["m1", "leader"])
    assert c.leader.ask("/user/pinned", Ping(0), timeout=10) == Pong(0, "/user/pinned")
    port = c.kill("m1")

    def waiting() -> bool:
        hosts = c.leader.status().hosts
        return hosts["/user/pinned"].state == "backoff" and hosts["/user/roaming"].state == "running"

    wait_for(waiting, timeout=NODE_TIMEOUT + 15)
    hosts = c.leader.status().hosts
    assert hosts["/user/pinned"].last_exit == "node m1 is down" and hosts["/user/pinned"].next_attempt is None
    assert hosts["/user/roaming"].node == "leader"  # failed over; the pinned one did not
    probe = c.leader.probe()
    for n in range(1, 4):
        probe.tell("/user/pinned", Ping(n))  # held by the guardian until m1 is back
    probe.expect_no_message(NODE_TIMEOUT)
    member = c.join("m1", admin_port=port)
    assert probe.receive_many(3, timeout=20) == [Pong(n, "/user/pinned") for n in range(1, 4)]
    hosts = c.leader.status().hosts
    assert hosts["/user/pinned"].node == "m1" and hosts["/user/pinned"].pid in tagged_pids(member.tag)
    # A node that comes back takes nothing until a rebalance.
    assert hosts["/user/roaming"].node == "leader"
    moves = c.leader.rebalance()
    assert moves == [actors.Move("/user/roaming", "leader", "m1")]
    assert c.leader.status().hosts["/user/roaming"].node == "m1"
    assert c.leader.ask("/user/roaming", Ping(9), timeout=10) == Pong(9, "/user/roaming")
    assert c.leader.rebalance() == []  # already where placement puts it


@pytest.mark.parametrize("nodes, node, wrong", [
    ([], None, "at least one node"),
    ("m1", None, "must be a list of node names"),
    (["m1", 3], None, "non-empty node names"),
    (["m1", " "], None, "non-empty node names"),
    (["m1", "m1"], None, "more than once"),
    (["m1"], "m1", "both given"),
])
def test_bad_nodes_values_are_refused_naming_what_to_fix(nodes, node, wrong):
    with actors.start("local") as system:
        with pytest.raises(actors.ConfigError, match=wrong):
            system.spawn(Echo, "/user/x", nodes=nodes, node=node)
        with pytest.raises(actors.ConfigError, match="SQLite file on one machine"):
            system.spawn(Echo, "/user/y", nodes=["a", "b"], journal="sqlite:///tmp/x.db")
        # On one node (the local base's) it places and runs.
        system.spawn(Echo, "/user/z", nodes=["leader"])
        assert system.ask("/user/z", Ping(1)) == Pong(1, "/user/z")
        assert system.nodes() == {"leader": "up"}
        with pytest.raises(actors.SpawnFailed, match="none of its nodes"):
            system.spawn(Echo, "/user/w", nodes=["elsewhere"])


def reprise(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([REPRISE, *argv], cwd=ROOT, capture_output=True, text=True, timeout=50)


def test_rebalance_after_nodes_join_moves_shards_while_deposits_flow_with_exact_sums(pg_url, cluster):
    c = cluster(journal=pg_url)
    spawn_accounts(c)
    assert set(shard_nodes(c.leader, ACCOUNTS).values()) == {"leader"}  # the only live node of the three
    c.join("m1")
    c.join("m2")
    assert set(shard_nodes(c.leader, ACCOUNTS).values()) == {"leader"}  # nodes that join take nothing by themselves
    accounts, chunk = 40, 100
    fed = [0]
    stop = threading.Event()
    failure: list[BaseException] = []

    def stream() -> None:
        client = actors.connect(c.leader.admin_port)
        try:
            while not stop.wait(0.05):  # a steady stream, at most ~2,000 deposits/s: all confirmed in seconds
                feed(client, fed[0], chunk, accounts)
                fed[0] += chunk
        except BaseException as e:  # reported by the test below
            failure.append(e)
        finally:
            client.close()

    feeder = threading.Thread(target=stream, daemon=True)
    feeder.start()
    try:
        wait_for(lambda: fed[0] >= 3 * chunk, timeout=20)
        before = fed[0]
        moved = reprise("rebalance", "--port", str(c.leader.admin_port), "--json")
        assert moved.returncode == 0, moved.stderr
        assert fed[0] > before, "the stream must flow during the rebalance"
        wait_for(lambda: fed[0] >= before + 6 * chunk, timeout=20)
    finally:
        stop.set()
        feeder.join(30)
    assert not failure, failure
    moves = json.loads(moved.stdout)["moves"]
    assert sorted((m["key"], m["from"], m["to"]) for m in moves) == [
        (f"{ACCOUNTS} [shard 1]", "leader", "m1"), (f"{ACCOUNTS} [shard 2]", "leader", "m2")]
    assert shard_nodes(c.leader, ACCOUNTS) == {f"{ACCOUNTS} [shard {k}]": name for k, name in enumerate(THREE)}
    check_exact(c.leader, fed[0], accounts)
    # Status (text) shows the nodes and where each shard runs now.
    text = reprise("status", "--port", str(c.leader.admin_port))
    assert text.returncode == 0, text.stderr
    assert "nodes         leader up, m1 up, m2 up" in text.stdout
    row = next(line for line in text.stdout.splitlines() if f"{ACCOUNTS} [shard 2]" in line)
    assert row.split()[-1] == "m2"
    again = reprise("rebalance", "--port", str(c.leader.admin_port))
    assert again.returncode == 0 and "0 move(s)" in again.stdout, again.stdout + again.stderr
    print(f"rebalance: {len(moves)} moves while {fed[0]} deposits flowed; balances exact")


def test_rebalance_cli_errors_are_one_line_with_a_hint(cluster):
    c = cluster()
    wrong = reprise("rebalance", "--port", str(c.leader.admin_port), "--path", "/user/nothing")
    assert wrong.returncode == 1
    assert "no host spawned with nodes= runs at /user/nothing" in wrong.stderr and "hint:" in wrong.stderr
    assert c.leader.rebalance() == []


def test_topology_files_accept_nodes_on_actor_and_entities_tables():
    from actors.topology import TopologyError, loads

    topo = loads('''
[[entities]]
path = "/user/accounts"
class = "examples.accounts.model:Account"
shards = 3
nodes = ["a", "b", "c"]
''')
    assert topo.entries[0].options["nodes"] == ["a", "b", "c"]
    with pytest.raises(TopologyError, match="node=.* and nodes=.* were both given"):
        loads('[[actor]]\npath = "/user/x"\nclass = "tests.actors.sample:Echo"\nnode = "a"\nnodes = ["a"]\n')


def test_a_node_cut_off_but_alive_comes_back_up_and_its_replaced_processes_exit(cluster):
    c = cluster("m1")
    c.leader.spawn(Echo, "/user/roaming", nodes=["m1", "leader"])
    before = c.leader.status().hosts["/user/roaming"]
    assert before.node == "m1"
    c.signal("m1", signal.SIGSTOP)  # frozen: no answer to heartbeats, yet its processes live on
    try:
        wait_for(lambda: c.leader.nodes()["m1"] == "down", timeout=NODE_TIMEOUT + 10)
        wait_for(lambda: c.leader.status().hosts["/user/roaming"].state == "running", timeout=15)
        assert c.leader.status().hosts["/user/roaming"].node == "leader"
        assert c.leader.ask("/user/roaming", Ping(1), timeout=10) == Pong(1, "/user/roaming")
        assert before.pid in tagged_pids(c.members["m1"].tag)  # split brain: the old process still exists
    finally:
        c.signal("m1", signal.SIGCONT)
    wait_for(lambda: c.leader.nodes()["m1"] == "up", timeout=NODE_TIMEOUT + 10)
    # Back, it is told to stop the process that was replaced meanwhile; the host stays where it failed over to.
    wait_for(lambda: before.pid not in tagged_pids(c.members["m1"].tag), timeout=15)
    hosts = c.leader.status().hosts
    assert hosts["/user/roaming"].node == "leader" and hosts["/user/roaming"].state == "running"
    assert c.leader.ask("/user/roaming", Ping(2), timeout=10) == Pong(2, "/user/roaming")


def test_hosts_killed_together_on_a_member_restart_there(cluster):
    c = cluster("m1")
    c.leader.spawn(Echo, "/user/echo", entities=True, shards=4, nodes=["m1"])
    hosts = c.leader.status().hosts
    keys = [f"/user/echo [shard {k}]" for k in range(4)]
    old = {key: hosts[key].pid for key in keys}
    assert all(hosts[key].node == "m1" and old[key] in tagged_pids(c.members["m1"].tag) for key in keys)
    for key in keys[:2]:
        os.kill(old[key], signal.SIGKILL)  # two at once: Thespian may drop one of the exit reports
    # Whether a member's host process is gone is asked of that member's node agent (its /proc, not the leader's).
    member = c.members["m1"]
    killed = {old[key] for key in keys[:2]}
    wait_for(lambda: not killed & set(tagged_pids(member.tag)), timeout=10)  # (a kill takes effect asynchronously)
    agent = member._asys.createActor("actors.guardian.NodeAgent", globalName="reprise-node")
    expected = PidsGone("m1", tuple(old[key] for key in keys[:2]))
    answers: list[object] = []

    def agent_sees_them_gone() -> bool:  # (bounded: under load the agent's /proc may lag the kill's effect)
        answers.append(member._asys.ask(agent, CheckPids(tuple(old.values())), 10))
        return answers[-1] == expected

    try:
        wait_for(agent_sees_them_gone, timeout=10, interval=0.1)
    except AssertionError:
        raise AssertionError(f"the agent's last answers: {answers[-3:]}, expected {expected}") from None

    def restarted() -> bool:
        now = c.leader.status().hosts
        return all(now[k].state == "running" and now[k].pid != old[k] for k in keys[:2])

    wait_for(restarted, timeout=20)
    hosts = c.leader.status().hosts
    assert all(hosts[key].node == "m1" and hosts[key].pid in tagged_pids(c.members["m1"].tag) for key in keys)
    assert [hosts[key].pid == old[key] for key in keys] == [False, False, True, True]
    for i in range(8):
        assert c.leader.ask(f"/user/echo/{i}", Ping(i), timeout=10) == Pong(i, f"/user/echo/{i}")


def parent_of(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_a_host_dying_unreported_on_a_member_is_found_by_the_heartbeat(cluster):
    c = cluster("m1")
    c.leader.spawn(Echo, "/user/e", nodes=["m1"])
    pid = c.leader.status().hosts["/user/e"].pid
    tag = c.members["m1"].tag
    pids = set(tagged_pids(tag))
    admin = next(p for p in pids if parent_of(p) not in pids)  # the member's admin: the others' ancestor
    assert pid != admin
    quiet = c.leader.probe()  # (made now: registering its route later would push routes to the host)
    os.kill(admin, signal.SIGSTOP)  # it would report the host's exit (ChildActorExited): now it cannot
    try:
        os.kill(pid, signal.SIGKILL)
        # The member's node agent still answers heartbeats, which carry its hosts' pids: the exit is noticed
        # within a few heartbeats, with nothing sent to the host meanwhile (a status request would be: the
        # guardian would find it dead that way, asking the agent).
        quiet.expect_no_message(NODE_TIMEOUT)
        assert c.leader.status().hosts["/user/e"].last_exit == f"process exited unexpectedly (pid {pid})"
    finally:
        os.kill(admin, signal.SIGCONT)
    wait_for(lambda: c.leader.status().hosts["/user/e"].state == "running", timeout=20)
    assert c.leader.ask("/user/e", Ping(1), timeout=10) == Pong(1, "/user/e")
    assert c.leader.status().hosts["/user/e"].pid in tagged_pids(tag)


def test_a_second_member_under_a_live_nodes_name_is_refused_and_the_first_keeps_its_hosts(cluster):
    # It was admitted: the leader took it for a restart of the first, declared that one down and moved its hosts,
    # while the first still ran them (two writers); the first's next hello then took the name back, and so on.
    c = cluster("m1")
    c.leader.spawn(Echo, "/user/pinned", node="m1")
    before = c.leader.status().hosts["/user/pinned"]
    tag = f"{c.members['m1'].tag}dup-"
    for name, why in (("m1", "a live member already runs as that node"), ("leader", "that is the leader's own node name")):
        with pytest.raises(actors.SpawnFailed) as failed:
            c.join(name, tag=f"{tag}{name}-")
        assert f"the leader refused node name {name!r}: {why}" in str(failed.value), failed.value
        assert "start this member with another node name (--node)" in str(failed.value)
        assert tagged_pids(f"{tag}{name}-") == []  # nothing of it runs
    assert c.leader.nodes() == {"leader": "up", "m1": "up"}
    after = c.leader.status().hosts["/user/pinned"]
    assert (after.node, after.pid, after.state) == ("m1", before.pid, "running")
    assert c.leader.ask("/user/pinned", Ping(1), timeout=10) == Pong(1, "/user/pinned")
    reasons = [e.reason for e in c.leader.errors().recent]
    assert any("registering as node 'm1'" in r and "was refused" in r for r in reasons), reasons


@pytest.mark.timeout(90)
def test_a_member_whose_first_incarnation_does_not_answer_takes_its_name_and_the_first_is_refused_later(cluster):
    # The leader cannot tell a restart it has not noticed yet from a second member started under a live name:
    # it asks the first; silence (here SIGSTOP; a crash on another machine) admits the newcomer.
    c = cluster("m1", node_timeout=30.0)  # (heartbeats would notice the stopped one only after 30 s)
    first = c.members["m1"]
    groups = {os.getpgid(pid) for pid in tagged_pids(first.tag)} - {os.getpgid(0)}
    for group in groups:
        os.killpg(group, signal.SIGSTOP)
    try:
        c.join("m1")  # (it asserts the leader has m1 up when it returns)
    finally:
        for group in groups:
            os.killpg(group, signal.SIGCONT)
    log = os.path.join(c.leader.run_dir, "actors.log")
    assert "node m1 is down (it registered again from" in open(log).read()
    # Woken, the first says hello again: the newcomer answers for m1, so the first is refused, not admitted.
    wait_for(lambda: "refused a member registering as node 'm1'" in open(log).read(), timeout=NODE_TIMEOUT + 15)
    assert c.leader.nodes() == {"leader": "up", "m1": "up"}
    assert "node m1 is down" not in open(log).read().split("refused a member registering as node 'm1'")[-1]
    # Refused, the first shuts its whole system down (admin, logger, agent: nothing of it runs on outside the
    # cluster), saying why in its own log.
    first._closed = True  # (it shuts itself down: nothing for the test to shut down or detach from)
    try:
        wait_for(lambda: not tagged_pids(first.tag), timeout=20)
    except AssertionError:
        left = kill_tagged(first.tag)
        raise AssertionError(f"the refused first incarnation of m1 still runs: pids {left}") from None
    # Why, in its own log: the refusal, then the shutdown (the second line can be lost as the system's logger ends:
    # seen once in a fresh-clone CI, the processes gone and the refusal logged).
    said = open(os.path.join(first.run_dir, "actors.log")).read()
    assert "the leader refused node name 'm1'" in said or "shutting this member's actor system down" in said, said
    # Its leaving the convention does not touch the node m1 that the second incarnation is.
    assert c.leader.nodes() == {"leader": "up", "m1": "up"}
    c.leader.spawn(Echo, "/user/on-m1", node="m1")
    assert c.leader.ask("/user/on-m1", Ping(1)) == Pong(1, "/user/on-m1")
    assert c.leader.status().hosts["/user/on-m1"].pid in tagged_pids(c.members["m1"].tag)


def test_a_member_its_leader_stops_pinging_stops_the_hosts_the_leader_placed_there(cluster):
    # They served on beside the copies the leader started elsewhere (a partition, or a leader restarted): two
    # writers of the same entities. Frozen here (SIGSTOP); a partition or a killed leader reads the same.
    c = cluster("m1")
    c.leader.spawn(Echo, "/user/roaming", nodes=["m1", "leader"])
    c.leader.spawn(Echo, "/user/pinned", node="m1")
    member = c.members["m1"]
    hosts = c.leader.status().hosts
    placed = [hosts["/user/roaming"].pid, hosts["/user/pinned"].pid]
    assert set(placed) <= set(tagged_pids(member.tag))
    # (no condition shows that m1's agent has had a heartbeat naming both hosts: two heartbeat periods)
    time.sleep(2 * NODE_TIMEOUT / 5)
    log = os.path.join(member.run_dir, "actors.log")
    groups = {os.getpgid(pid) for pid in tagged_pids(c.leader.tag)} - {os.getpgid(0)}
    for group in groups:
        os.killpg(group, signal.SIGSTOP)
    try:
        # Within FENCE_AFTER (0.8) of node_timeout, before the leader could declare m1 down and start copies.
        wait_for(lambda: "stopping the 2 host(s) it placed here" in open(log).read(), timeout=NODE_TIMEOUT + 5)
    finally:
        for group in groups:
            os.killpg(group, signal.SIGCONT)
    # (their processes exit once they have told their parent, the guardian, which was frozen)
    wait_for(lambda: not set(placed) & set(tagged_pids(member.tag)), timeout=30)
    # The leader, back, finds m1 silent (down), then up again: both serve again.
    for n, path in enumerate(("/user/roaming", "/user/pinned")):
        wait_for(lambda path=path, n=n: _answers(c.leader, path, n), timeout=NODE_TIMEOUT * 4 + 20)


def _answers(system: actors.System, path: str, n: int) -> bool:
    try:
        return system.ask(path, Ping(n), timeout=2) == Pong(n, path)
    except (actors.AskTimeout, actors.MessageUndelivered, actors.ActorFailed):
        return False


@pytest.mark.timeout(90)
@pytest.mark.parametrize("leader_timeout", [NODE_TIMEOUT, 30.0], ids=["fenced-before", "welcomed-before-fencing"])
def test_a_leader_killed_and_started_again_gets_its_members_back(cluster, leader_timeout):
    # A member's agent knew only the first guardian's address, and its admin re-registers with the convention
    # every 7 min 22 s (Thespian): a leader restarted on the same port and secret never saw its members again.
    # With the leader's node_timeout 30 s the member fences only after 24 s, but says hello (its own node_timeout)
    # after 1.5 s: the new guardian's welcome must stop what the old one placed there.
    c = cluster("m1", node_timeout=leader_timeout)
    c.leader.spawn(Echo, "/user/pinned", node="m1")
    assert c.leader.ask("/user/pinned", Ping(1)) == Pong(1, "/user/pinned")
    first_host = c.leader.status().hosts["/user/pinned"].pid
    _kill_leader(c)
    _start_leader_again(c, leader_timeout)
    # Its agent, unpinged, fenced the host the first leader placed there; it registers with the new one.
    wait_for(lambda: c.leader.nodes().get("m1") == "up", timeout=NODE_TIMEOUT * 4 + 10)
    wait_for(lambda: first_host not in tagged_pids(c.members["m1"].tag), timeout=10)
    c.leader.spawn(Echo, "/user/pinned", node="m1")
    assert c.leader.ask("/user/pinned", Ping(2)) == Pong(2, "/user/pinned")
    assert c.leader.status().hosts["/user/pinned"].pid in tagged_pids(c.members["m1"].tag)
    # A client of the member finds the new guardian as well.
    assert c.members["m1"].ask("/user/pinned", Ping(3), timeout=10) == Pong(3, "/user/pinned")


def _kill_leader(c: Cluster) -> None:
    """SIGKILL every process of the leader's system (its admin, guardian and the hosts on its node)."""
    old = c.leader
    assert old.tag and old.admin_port
    for group in {os.getpgid(pid) for pid in tagged_pids(old.tag)} - {os.getpgid(0)}:
        os.killpg(group, signal.SIGKILL)
    wait_for(lambda: not tagged_pids(old.tag), timeout=10)
    old._closed = True
    c.killed.append(old.tag)


def _start_leader_again(c: Cluster, leader_timeout: float) -> None:
    """Start the killed leader again on its admin port, with its secret (as `reprise up` on its file does)."""
    old = c.leader
    assert old.admin_port and old.run_dir
    # (a killed process shows as a zombie once its main thread is dead; its other threads may hold the port a
    # little longer)
    wait_for(lambda: not _listening(old.admin_port), timeout=10)
    c.leader = start_system("multiproc", c.tmp_path, admin_port=old.admin_port, node_timeout=leader_timeout,
                            secret_file=os.path.join(old.run_dir, "secret"))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("leader_timeout", [10.0, 30.0], ids=["noticed", "restarted-before-noticed"])
def test_what_a_member_logged_while_its_leader_was_down_is_pointed_at_when_it_rejoins(cluster, leader_timeout):
    # Thespian forwards a member's warnings and errors to the leader's log, and hosts report their errors to the
    # guardian (system.errors(), reprise status): while the leader is down both are lost, and nothing on the
    # leader said that the member's own log holds them. With the leader's node_timeout 10 s the member keeps its
    # host for 8 s (then fences it), whose timer makes it fail while the leader is down; after 4 s (two heartbeats
    # missed) the member says the leader is unreachable. With 30 s, the leader is back before the member noticed
    # (12 s): the new guardian's welcome tells it.
    c = cluster("m1", node_timeout=leader_timeout)
    c.leader.spawn(FailsLater, "/user/fails", node="m1")
    assert c.leader.ask("/user/fails", ("fail-in", 1.0)) == "armed"
    _kill_leader(c)
    member_log = os.path.join(c.members["m1"].run_dir, "actors.log")
    wait_for(lambda: "actor /user/fails failed on str: failed on its timer" in _read(member_log), timeout=20)
    if leader_timeout == 10.0:
        wait_for(lambda: "the leader is unreachable" in _read(member_log), timeout=10)  # (said where the rest is)
    _start_leader_again(c, leader_timeout)
    wait_for(lambda: c.leader.nodes().get("m1") == "up", timeout=NODE_TIMEOUT * 4 + 10)

    def pointed() -> list[str]:
        return [e.reason for e in c.leader.errors().recent if e.host == "node m1"]

    wait_for(pointed, timeout=10)
    (reason,) = pointed()
    assert "heard no guardian from " in reason and member_log in reason, reason
    logged = re.search(r"it logged (\d+) warning\(s\) or error\(s\) meanwhile", reason)
    assert logged and int(logged.group(1)) >= 1, reason  # (the failure at least)
    assert reason in _read(os.path.join(c.leader.run_dir, "actors.log"))


def _read(path: str) -> str:
    try:
        with open(path) as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _listening(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1.0):
            return True
    except OSError:
        return False

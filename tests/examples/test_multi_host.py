"""examples/multi_host/: a leader and a member system, a feeder on the member reaching accounts on the leader.

Run on loopback of this machine, and (where `ip netns` works and we are root) in two network namespaces
joined by a veth pair, each system bound to its own address (10.77.0.1/.2): there without and with TLS,
while a packet sniffer in the member's namespace checks what crosses in clear.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from actors.system import kill_tagged, tagged_pids
from tests.actors.test_security import SEND_FRAME, attack_payload, listening_addresses
from tests.actors.test_tls import pki  # noqa: F401 - the session's test certificates (a fixture)
from tests.conftest import SESSION_TOKEN
from tests.netns import unavailable as netns_unavailable
from tests.ports import free_ports

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(180)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "multi_host")
REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
_n = itertools.count(1)


def configure(name: str, dest, tls=None, **values) -> str:
    """Copy examples/multi_host/`name` to `dest`, setting [system] keys (TOML values) as the README says,
    and the tls_* keys if `tls` (a TlsConfig) is given."""
    text = open(os.path.join(EXAMPLE, name)).read()
    for key, value in values.items():
        text, n = re.subn(rf"^{key} = .*$", f"{key} = {json.dumps(value)}", text, count=1, flags=re.M)
        assert n == 1, f"{name} has no '{key} = ' line"
    if tls is not None:
        keys = "".join(f"tls_{k} = {json.dumps(getattr(tls, k))}\n" for k in ("cert", "key", "ca"))
        text = text.replace("[system]\n", "[system]\n" + keys, 1)
    path = dest / name
    path.write_text(text)
    return str(path)


REACH = """
import socket, sys
for host in ("127.0.0.1", sys.argv[1]):
    try:
        socket.create_connection((host, int(sys.argv[2])), timeout=2).close()
        print(f"{host}:open")
    except OSError:
        print(f"{host}:closed")
"""


# Systems started in this pytest process (other tests) leave their bind settings in os.environ; a user's
# shell has none, so the commands run without them.
INHERITED = ("REPRISE_BIND", "REPRISE_PEERS", "THESPIAN_BASE_IPADDR")


def run(prefix: list[str], *argv: str, timeout: float = 100) -> subprocess.CompletedProcess:
    """Run a command (inside a namespace with `ip netns exec`); on timeout kill its whole process group,
    since `ip netns exec` forks and a hung Python under it would outlive the test."""
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    with subprocess.Popen([*prefix, *argv], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          env=env, start_new_session=True) as proc:
        try:
            out, err = proc.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            raise
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


@pytest.fixture
def tags():
    tags = (f"{SESSION_TOKEN}-leader-{next(_n)}-", f"{SESSION_TOKEN}-member-{next(_n)}-")
    yield tags
    for tag in tags:
        assert kill_tagged(tag) == [], f"processes tagged {tag} were left behind"


@contextmanager
def leader_and_member(tmp_path, tags, leader_ip: str, member_ip: str, in_leader: list[str], in_member: list[str],
                      tls=None) -> Iterator[tuple[int, int]]:
    """`reprise up` leader.toml, then member.toml (each the other's peer); yields their admin ports; `reprise down`
    both afterwards, and checks that no process of either is left."""
    leader_port, member_port = free_ports(2)
    peers = [] if leader_ip == member_ip else None
    leader_toml = configure("leader.toml", tmp_path, bind=leader_ip, tls=tls,
                            peers=peers if peers is not None else [member_ip])
    member_toml = configure("member.toml", tmp_path, bind=member_ip, tls=tls,
                            peers=peers if peers is not None else [leader_ip], leader=f"{leader_ip}:{leader_port}")
    up = run(in_leader, REPRISE, "up", leader_toml, "--detach", "--port", str(leader_port), "--tag", tags[0],
             "--run-dir", str(tmp_path / "run-leader"))
    assert up.returncode == 0, up.stdout + up.stderr
    try:
        up = run(in_member, REPRISE, "up", member_toml, "--detach", "--port", str(member_port), "--tag", tags[1],
                 "--run-dir", str(tmp_path / "run-member"))
        assert up.returncode == 0, up.stdout + up.stderr
        assert f"{member_ip}:{member_port}" in up.stdout and "/user/feeder" in up.stdout
        try:
            yield leader_port, member_port
        finally:
            down = run(in_member, REPRISE, "down", "--host", member_ip, "--port", str(member_port))
        assert down.returncode == 0, down.stderr
    finally:
        down = run(in_leader, REPRISE, "down", "--host", leader_ip, "--port", str(leader_port))
    assert down.returncode == 0, down.stderr
    assert tagged_pids(tags[0]) == [] and tagged_pids(tags[1]) == []


def scenario(tmp_path, tags, leader_ip: str, member_ip: str, in_leader: list[str], in_member: list[str],
             tls=None, sniff: list[str] | None = None) -> bytes | None:
    """up leader.toml, up member.toml, feed through the member's feeder, check balances, down both.

    With `sniff` (a namespace prefix), returns the TCP payload bytes a sniffer there saw during the feed.
    """
    wire = None
    with leader_and_member(tmp_path, tags, leader_ip, member_ip, in_leader, in_member, tls) as (leader_port,
                                                                                               member_port):
        if leader_ip != member_ip:
            # Proof of separation: from the member's namespace the leader is reachable only at its own address.
            reach = run(in_member, sys.executable, "-c", REACH, leader_ip, str(leader_port))
            assert reach.stdout.split() == ["127.0.0.1:closed", f"{leader_ip}:open"], reach.stdout + reach.stderr
        # From each machine, an unauthenticated pickle to every port of the other one runs nothing there.
        marker = tmp_path / "marker"
        for sender, target in ((in_member, tags[0]), (in_leader, tags[1])):
            addresses = listening_addresses(tagged_pids(target))
            assert len(addresses) >= 3, addresses
            for ip, port in addresses:
                if ip.startswith("127.") and leader_ip != member_ip:
                    continue  # loopback of the other namespace: not reachable from here
                sent = run(sender, sys.executable, "-c", SEND_FRAME, ip, str(port),
                           attack_payload(str(marker), target).hex(), timeout=30)
                assert sent.returncode == 0, sent.stderr
        assert not marker.exists(), f"an unauthenticated frame ran code: {marker.read_text()}"
        # A client on the member's machine attaches to its local admin; the feeder runs there too.
        client = [*in_member, sys.executable, "-m", "examples.accounts.client", "--host", member_ip,
                  "--port", str(member_port)]
        sniffer = Sniffing(sniff, tmp_path / "wire") if sniff else None
        try:
            fed = run(client, "feed", "--count", "600", "--accounts", "12")
        finally:
            wire = sniffer.stop() if sniffer else None
        assert fed.returncode == 0 and "feeder accepted 600" in fed.stdout, fed.stderr
        # Exact balances on the leader's accounts prove every Deposit went there and every Confirm came back.
        checked = run(client, "check", "--deposits", "600", "--accounts", "12")
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "OK: 12 balances exact after 600 deposits" in checked.stdout
        status = run(in_leader, REPRISE, "status", "--host", leader_ip, "--port", str(leader_port), "--json")
        assert status.returncode == 0, status.stderr
        hosts = json.loads(status.stdout)["hosts"]
        assert hosts["/user/feeder"]["pid"] in tagged_pids(tags[1]), "the feeder must run on the member"
        assert hosts["/user/accounts"]["pid"] in tagged_pids(tags[0]), "the accounts must run on the leader"
    return wire


# Captures every interface of its network namespace and writes the TCP payload of each IPv4 packet.
SNIFF = """
import signal, socket, sys
sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
sock.settimeout(0.1)
stop = []
signal.signal(signal.SIGTERM, lambda *_: stop.append(1))
with open(sys.argv[1], "wb") as out:
    print("ready", flush=True)
    while not stop:
        try:
            frame = sock.recv(262144)
        except (TimeoutError, InterruptedError):
            continue
        ip = frame[14:]
        if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != socket.IPPROTO_TCP:
            continue
        tcp = ip[(ip[0] & 0x0F) * 4:]
        out.write(tcp[(tcp[12] >> 4) * 4:])
"""


class Sniffing:
    """A packet sniffer running in a network namespace (prefix `where`) until stop()."""

    def __init__(self, where: list[str], path) -> None:
        self.path = path
        self.proc = subprocess.Popen([*where, sys.executable, "-c", SNIFF, str(path)], stdout=subprocess.PIPE,
                                     text=True, start_new_session=True)
        assert self.proc.stdout.readline().strip() == "ready"

    def stop(self) -> bytes:
        """Stop it; the payload bytes it captured."""
        time.sleep(0.2)  # the last packets of the feed are still in the socket's queue (not a wait for the system)
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait()
        return self.path.read_bytes()


def test_leader_and_member_on_this_machine(tmp_path, tags):
    scenario(tmp_path, tags, "127.0.0.1", "127.0.0.1", [], [])


@pytest.fixture
def namespaces():
    """Two network namespaces joined by a veth pair: 10.77.0.1/24 and 10.77.0.2/24; removed afterwards."""
    why = netns_unavailable()
    if why is not None:
        pytest.skip(f"MULTI-HOST IN NETWORK NAMESPACES NOT RUN: {why}")
    suffix = uuid.uuid4().hex[:6]
    ns = (f"rp-{suffix}-a", f"rp-{suffix}-b")
    veth = (f"rpa{suffix}", f"rpb{suffix}")  # interface names: at most 15 characters
    created: list[str] = []

    def ip(*argv: str) -> None:
        subprocess.run(["ip", *argv], check=True, capture_output=True, text=True)

    try:
        for name in ns:
            ip("netns", "add", name)
            created.append(name)
        ip("link", "add", veth[0], "type", "veth", "peer", "name", veth[1])
        for name, dev, addr in zip(ns, veth, ("10.77.0.1/24", "10.77.0.2/24"), strict=True):
            ip("link", "set", dev, "netns", name)
            ip("-n", name, "addr", "add", addr, "dev", dev)
            ip("-n", name, "link", "set", dev, "up")
            ip("-n", name, "link", "set", "lo", "up")
        yield ns
    finally:
        # Deleting a namespace also deletes the veth end inside it (and so the pair).
        for name in created:
            subprocess.run(["ip", "netns", "del", name], capture_output=True)
        subprocess.run(["ip", "link", "del", veth[0]], capture_output=True)


# Every Deposit pickles its class's module path: the sniffer's proof that message content is readable.
CLASS_ON_THE_WIRE = b"examples.accounts.model"


def test_leader_and_member_in_two_network_namespaces(tmp_path, tags, namespaces):
    in_a = ["ip", "netns", "exec", namespaces[0]]
    in_b = ["ip", "netns", "exec", namespaces[1]]
    # The member cannot reach the leader through loopback here: only over the veth pair.
    wire = scenario(tmp_path, tags, "10.77.0.1", "10.77.0.2", in_a, in_b, sniff=in_b)
    assert CLASS_ON_THE_WIRE in wire, "control: without TLS the sniffer must see message content"


def test_leader_and_member_in_two_network_namespaces_over_tls(tmp_path, tags, namespaces, pki):  # noqa: F811
    in_a = ["ip", "netns", "exec", namespaces[0]]
    in_b = ["ip", "netns", "exec", namespaces[1]]
    wire = scenario(tmp_path, tags, "10.77.0.1", "10.77.0.2", in_a, in_b, tls=pki["node"], sniff=in_b)
    assert len(wire) > 10_000, f"the sniffer saw only {len(wire)} bytes: it would prove nothing"
    assert CLASS_ON_THE_WIRE not in wire, "message content crossed between the hosts in clear"
    assert b"Deposit" not in wire and b"reprise" not in wire


# Run in the member's namespace by a client of the member: an actor on the leader forwards the client's ask to
# another one there, which has never heard from the client, so its reply comes over a new connection from the
# leader's machine to the client (which lists no peers of its own).
FORWARDED_ASK = """
import sys
import actors
from tests.actors.sample import Echo, Ping
system = actors.connect(int(sys.argv[2]), host=sys.argv[1])
try:
    system.spawn(Echo, "/user/first", node="leader")
    system.spawn(Echo, "/user/second", node="leader")
    print(system.ask("/user/first", ("fwd", "/user/second", Ping(7)), timeout=20))
finally:
    system.close()
"""


def test_a_client_hears_a_reply_another_node_sends_over_a_new_connection(tmp_path, tags, namespaces):
    in_a = ["ip", "netns", "exec", namespaces[0]]
    in_b = ["ip", "netns", "exec", namespaces[1]]
    with leader_and_member(tmp_path, tags, "10.77.0.1", "10.77.0.2", in_a, in_b) as (_, member_port):
        asked = run(in_b, sys.executable, "-c", FORWARDED_ASK, "10.77.0.2", str(member_port), timeout=60)
        assert asked.returncode == 0, asked.stdout + asked.stderr
        assert asked.stdout.strip() == "Pong(n=7, by='/user/second')", asked.stdout


# Run in the leader's namespace by a client of the leader. It fetches its directory before the member joins and
# keeps it for the whole run (DIRECTORY_TTL raised: the 1 s window a client's cached directory leaves after a
# node joins, held open), so the member's machine is unknown to it when the member's /user/second replies to
# an ask the leader's /user/first forwarded: that reply comes over a new connection from an address this client
# does not accept yet.
ASK_AFTER_A_JOIN = """
import sys
import actors
import actors.system
from tests.actors.sample import Echo, Ping
actors.system.DIRECTORY_TTL = 3600.0
system = actors.connect(int(sys.argv[2]), host=sys.argv[1])
try:
    system.spawn(Echo, "/user/first", node="leader")
    print(system.ask("/user/first", Ping(1), timeout=20), flush=True)
    assert sys.stdin.readline().strip() == "member is up"
    print(system.ask("/user/first", ("fwd", "/user/second", Ping(7)), timeout=20), flush=True)
finally:
    system.close()
"""

SECOND_ON_THE_MEMBER = """
[[actor]]
path = "/user/second"
class = "tests.actors.sample:Echo"
node = "member1"
"""


def test_a_client_hears_a_reply_from_a_node_that_joined_after_its_directory_was_fetched(tmp_path, tags, namespaces):
    in_a = ["ip", "netns", "exec", namespaces[0]]
    in_b = ["ip", "netns", "exec", namespaces[1]]
    leader_port, member_port = free_ports(2)
    leader_toml = configure("leader.toml", tmp_path, bind="10.77.0.1", peers=["10.77.0.2"])
    member_toml = configure("member.toml", tmp_path, bind="10.77.0.2", peers=["10.77.0.1"],
                            leader=f"10.77.0.1:{leader_port}")
    with open(member_toml, "a") as f:
        f.write(SECOND_ON_THE_MEMBER)
    up = run(in_a, REPRISE, "up", leader_toml, "--detach", "--port", str(leader_port), "--tag", tags[0],
             "--run-dir", str(tmp_path / "run-leader"))
    assert up.returncode == 0, up.stdout + up.stderr
    env = {k: v for k, v in os.environ.items() if k not in INHERITED}
    client = subprocess.Popen([*in_a, sys.executable, "-c", ASK_AFTER_A_JOIN, "10.77.0.1", str(leader_port)],
                              cwd=ROOT, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                              text=True, env=env, start_new_session=True)
    try:
        assert client.stdout.readline().strip() == "Pong(n=1, by='/user/first')", client.stderr.read()
        up = run(in_b, REPRISE, "up", member_toml, "--detach", "--port", str(member_port), "--tag", tags[1],
                 "--run-dir", str(tmp_path / "run-member"))
        assert up.returncode == 0, up.stdout + up.stderr
        client.stdin.write("member is up\n")
        client.stdin.flush()
        out, err = client.communicate(timeout=60)
        assert client.returncode == 0 and out.strip() == "Pong(n=7, by='/user/second')", out + err
    finally:
        if client.poll() is None:
            os.killpg(client.pid, signal.SIGKILL)
            client.communicate()
        downs = [run(prefix, REPRISE, "down", "--host", ip, "--port", str(port))
                 for prefix, ip, port in ((in_b, "10.77.0.2", member_port), (in_a, "10.77.0.1", leader_port))]
    assert all(down.returncode == 0 for down in downs), [down.stderr for down in downs]
    assert tagged_pids(tags[0]) == [] and tagged_pids(tags[1]) == []

"""The Prometheus endpoint (`metrics_port`): scraped over HTTP during real traffic, off by default, loopback."""

from __future__ import annotations

import contextlib
import http.client
import os
import re
import signal
import socket
import threading
import urllib.request

import pytest

import actors
from actors.system import free_port, tagged_pids
from actors.topology import TopologyError, loads
from tests.actors.refusal import start_refused
from tests.actors.sample import Echo, Ping, Pong
from tests.cli import test_lifecycle
from tests.cli.test_lifecycle import reprise
from tests.persistence.fixtures import Produce, Producer
from tests.ports import free_ports
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

cli_tag = test_lifecycle.tag  # a fixture: a tag whose leak check covers the system `reprise up` starts

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def scrape(port: int, host: str = "127.0.0.1", timeout: float = 10.0) -> Samples:
    """Every sample served on host:port, parsed by prometheus_client's parser: (name, labels) -> value."""
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"http://{host}:{port}/metrics", timeout=timeout) as response:
        assert response.status == 200
        text = response.read().decode()
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def sample(samples: Samples, name: str, node: str = "leader", **labels: str) -> float | None:
    """The value of `name` for the host of `labels` (None when absent)."""
    key = tuple(sorted({"node": node, **labels}.items())) if labels else ()
    return samples.get((name, key))


def listening(pids: set[int]) -> set[tuple[str, int]]:
    """(IPv4 address, port) of every TCP socket the processes `pids` listen on (read from /proc)."""
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                try:
                    target = os.readlink(f"/proc/{pid}/fd/{fd}")
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = set()
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # 0A: LISTEN
                address, port = fields[1].split(":")
                found.add((socket.inet_ntoa(bytes.fromhex(address)[::-1]), int(port, 16)))
    return found


def system_pids(system: actors.System) -> set[int]:
    """This process on the in-process base; every process of the system on the multi-process one."""
    return {os.getpid()} if system.tag is None else set(tagged_pids(system.tag))


def test_scrapes_follow_messages_writes_restarts_and_dead_letters(base, make_system, tmp_path):
    port = free_port()
    system = make_system(base, metrics_port=port, journal=f"sqlite:///{tmp_path}/journal.db",
                         snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Echo, "/user/echo", max_restarts=0)  # a failure stops it: its host restarts it (backoff)
    system.spawn(Producer, "/user/producer")
    before = scrape(port)
    assert sample(before, "reprise_status_ok") == 1
    assert sample(before, "reprise_host_up", host="/user/echo") == 1
    assert sample(before, "reprise_host_messages_in_total", host="/user/echo") == 0
    assert sample(before, "reprise_dead_letters_total") == 0
    assert sample(before, "reprise_journal_write_seconds_count", host="/user/producer") in (None, 0)

    for n in range(10):
        assert system.ask("/user/echo", Ping(n)) == Pong(n, "/user/echo")
    # Five deliveries nobody can confirm (each a dead letter), their journal writes, and a restart.
    system.tell("/user/producer", Produce(5, "/user/nobody-serves-this"))
    system.tell("/user/echo", "boom")

    def moved() -> Samples | None:
        s = scrape(port)
        ok = (sample(s, "reprise_host_restarts_total", host="/user/echo") == 1
              and sample(s, "reprise_unconfirmed_deliveries", host="/user/producer") == 5
              and (sample(s, "reprise_journal_write_seconds_count", host="/user/producer") or 0) >= 1
              and (sample(s, "reprise_dead_letters_total") or 0) >= 5)
        return s if ok else None

    after = wait_for(moved, 30, interval=0.2)
    assert sample(after, "reprise_host_messages_in_total", host="/user/echo") >= 11  # 10 pings and the boom
    assert sample(after, "reprise_host_messages_out_total", host="/user/echo") >= 10  # the pongs
    assert sample(after, "reprise_host_messages_out_total", host="/user/producer") >= 5
    assert sample(after, "reprise_deliveries_total", host="/user/producer") == 5
    assert sample(after, "reprise_host_messages_parked", host="/user/producer") == 0  # (a restart's handover is over)
    assert sample(after, "reprise_actor_stat", host="/user/producer", stat="unconfirmed") == 5
    writes = sample(after, "reprise_journal_write_seconds_count", host="/user/producer")
    inf = sample(after, "reprise_journal_write_seconds_bucket", host="/user/producer", le="+Inf")
    assert inf == writes and (sample(after, "reprise_journal_write_seconds_sum", host="/user/producer") or 0) > 0
    # The counters only grow between scrapes.
    again = scrape(port)
    for name in ("reprise_host_messages_in_total", "reprise_host_messages_out_total"):
        assert sample(again, name, host="/user/echo") >= sample(after, name, host="/user/echo")


def test_the_endpoint_binds_loopback_and_stops_with_the_system(base, make_system):
    port = free_port()
    system = make_system(base, metrics_port=port)
    assert ("127.0.0.1", port) in listening(system_pids(system))
    assert system.status().config["metrics_host"] == "127.0.0.1"
    system.shutdown()
    with pytest.raises(OSError):
        scrape(port)


def test_metrics_host_names_the_interface(base, make_system):
    port = free_port()
    system = make_system(base, metrics_port=port, metrics_host="127.0.0.2")  # another loopback address
    assert ("127.0.0.2", port) in listening(system_pids(system))
    assert sample(scrape(port, "127.0.0.2"), "reprise_status_ok") == 1
    with pytest.raises(OSError):
        scrape(port)  # not on 127.0.0.1


def test_metrics_are_off_by_default(base, make_system):
    ours = listening({os.getpid()})
    system = make_system(base)
    assert system.status().config["metrics_port"] is None
    if base == "local":
        assert listening({os.getpid()}) == ours  # the in-process base opened no port
        return
    # Every port the system listens on is Thespian's (the admin and one per actor process), none HTTP.
    ports = {port for _, port in listening(system_pids(system))}
    assert system.admin_port in ports
    for port in ports - {system.admin_port}:
        # A Thespian socket answers a request without a frame header with its data-error ACK and closes (it
        # read and waited before actors/thespian_fixes.py's fix 7: 1 s is plenty either way).
        with pytest.raises((OSError, http.client.HTTPException)):
            scrape(port, timeout=1.0)
    system.spawn(Echo, "/user/echo")  # probing its ports left the system working
    assert system.ask("/user/echo", Ping(1)) == Pong(1, "/user/echo")


def test_connect_refuses_bad_metrics_options_naming_them():
    with pytest.raises(actors.ConfigError, match="metrics_port"):
        actors.connect(1, metrics_port=-1)
    with pytest.raises(actors.ConfigError, match="metrics_host"):
        actors.connect(1, metrics_port=9464, metrics_host="::1:")


@pytest.mark.parametrize("options, named", [
    ({"metrics_port": "9100"}, "metrics_port"),
    ({"metrics_port": 0}, "metrics_port"),
    ({"metrics_port": 70_000}, "metrics_port"),
    ({"metrics_port": True}, "metrics_port"),
    ({"metrics_port": 9100, "metrics_host": "localhost"}, "metrics_host"),
    ({"metrics_port": 9100, "metrics_host": None}, "metrics_host"),
])
def test_bad_metrics_options_are_refused_naming_the_option(base, options, named):
    with pytest.raises(actors.ConfigError, match=named):
        start_refused(base, **options)


def test_a_port_in_use_is_refused_naming_the_option(base):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(actors.SpawnFailed, match=f"metrics_port {port} is already in use"):
            start_refused(base, metrics_port=port)


def test_topology_system_section_takes_metrics_options():
    topo = loads('[system]\nmetrics_port = 9464\nmetrics_host = "10.0.0.5"\n')
    assert (topo.system.metrics_port, topo.system.metrics_host) == (9464, "10.0.0.5")
    assert loads("[system]\n").system.metrics_port is None
    assert loads("[system]\n").system.metrics_host == "127.0.0.1"
    with pytest.raises(TopologyError, match="metrics_port"):
        loads('[system]\nmetrics_port = "9464"\n')
    with pytest.raises(TopologyError, match="metrics_host"):
        loads('[system]\nmetrics_port = 9464\nmetrics_host = "example.org"\n')


def test_reprise_node_takes_metrics_options():
    from actors.cli import build_parser

    node = ["node", "--leader", "127.0.0.1:1900", "--port", "1901", "--name", "m1", "--secret-file", "s"]
    args = build_parser().parse_args([*node, "--metrics-port", "9464"])
    assert (args.metrics_port, args.metrics_host) == (9464, "127.0.0.1")
    assert build_parser().parse_args(node).metrics_port is None


@pytest.mark.multiproc
def test_each_node_serves_its_own_hosts(make_system):
    leader_port, member_port = free_ports(2)
    leader = make_system("multiproc", metrics_port=leader_port)
    member = make_system("multiproc", leader=f"127.0.0.1:{leader.admin_port}", node="m1", metrics_port=member_port,
                secret_file=os.path.join(leader.run_dir, "secret"))
    leader.spawn(Echo, "/user/here")
    leader.spawn(Echo, "/user/there", node="m1")
    for n in range(3):
        assert leader.ask("/user/there", Ping(n)) == Pong(n, "/user/there")
    on_leader, on_member = scrape(leader_port), scrape(member_port)
    assert sample(on_leader, "reprise_host_up", host="/user/here") == 1
    assert sample(on_leader, "reprise_host_up", host="/user/there", node="m1") is None
    assert sample(on_member, "reprise_host_messages_in_total", host="/user/there", node="m1") == 3
    assert sample(on_member, "reprise_host_up", host="/user/here") is None
    # The dead letters are the whole system's: the leader's endpoint reports them, once.
    assert sample(on_leader, "reprise_dead_letters_total") == 0
    assert sample(on_member, "reprise_dead_letters_total") is None
    # A client's endpoint (connect(metrics_port=...)) serves the whole system, each host under its node.
    client_port = free_port()
    client = actors.connect(member.admin_port, metrics_port=client_port)
    try:
        whole = scrape(client_port)
        assert sample(whole, "reprise_host_up", host="/user/here") == 1
        assert sample(whole, "reprise_host_messages_in_total", host="/user/there", node="m1") == 3
        assert sample(whole, "reprise_dead_letters_total") == 0
    finally:
        client.close()
    with pytest.raises(OSError):
        scrape(client_port)


@pytest.mark.multiproc
def test_reprise_up_serves_the_topology_metrics_port(cli_tag, tmp_path):
    port, metrics_port = free_ports(2)
    topology = tmp_path / "topo.toml"
    topology.write_text(f'[system]\nmetrics_port = {metrics_port}\n\n[[actor]]\npath = "/user/echo"\n'
                        'class = "tests.actors.sample:Echo"\n')
    up = reprise("up", str(topology), "--detach", "--port", str(port), "--tag", cli_tag, "--run-dir", str(tmp_path / "run"))
    try:
        assert up.returncode == 0, up.stderr
        assert f"http://127.0.0.1:{metrics_port}/metrics" in up.stdout
        assert sample(scrape(metrics_port), "reprise_host_up", host="/user/echo") == 1
    finally:
        down = reprise("down", "--port", str(port))
    assert down.returncode == 0, down.stderr


@pytest.mark.multiproc
def test_a_port_a_running_system_serves_metrics_on_is_refused_naming_that_system(make_system):
    admin_port, metrics_port = free_ports(2)
    make_system("multiproc", admin_port=admin_port, metrics_port=metrics_port)
    with pytest.raises(actors.SpawnFailed, match=re.escape(
            f"metrics_port {metrics_port} is already in use on metrics_host 127.0.0.1 (by the actor system on "
            f"admin port {admin_port} (`reprise status --port {admin_port}` shows it, `reprise down --port "
            f"{admin_port}` stops it)); choose a free port")):
        start_refused("multiproc", metrics_port=metrics_port)


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_a_system_started_again_on_the_ports_of_one_whose_admin_was_sigkilled_waits_for_its_leftovers(make_system):
    # The dead admin's metrics server holds the metrics port until it notices (ParentWatch, within a second): a start
    # again at once (by hand, a supervisor's restart) failed with "metrics_port ... is already in use; choose a free
    # port". The server is SIGSTOPped here, so that it surely still holds the port when the start looks, and let go
    # on a timer: the start must wait for it, not fail.
    from tests.actors.test_supervision import _parent

    admin_port, metrics_port = free_ports(2)
    first = make_system("multiproc", admin_port=admin_port, metrics_port=metrics_port)
    first.spawn(Echo, "/user/echo")
    admin = _parent(_parent(first.status().hosts["/user/echo"].pid))
    (server,) = [p for p in tagged_pids(first.tag) if ("127.0.0.1", metrics_port) in listening({p})]
    os.kill(server, signal.SIGSTOP)
    resume = threading.Timer(1.0, os.kill, (server, signal.SIGCONT))
    try:
        os.kill(admin, signal.SIGKILL)
        wait_for(lambda: not os.path.exists(f"/proc/{admin}"), 10)
        first._closed = True  # (its admin is gone; the port is the second system's next)
        resume.start()
        second = make_system("multiproc", admin_port=admin_port, metrics_port=metrics_port)
    finally:
        resume.cancel()
        with contextlib.suppress(ProcessLookupError):  # (exited once resumed: the test's point)
            os.kill(server, signal.SIGCONT)
    second.spawn(Echo, "/user/echo")
    assert sample(scrape(metrics_port), "reprise_host_up", host="/user/echo") == 1
    assert server not in tagged_pids(first.tag)


@pytest.mark.multiproc
def test_the_endpoint_exits_with_a_sigkilled_admin(make_system):
    # Nobody can reach the system once its admin is dead: its metrics server must not outlive it, serving a
    # frozen picture and holding the port.
    from tests.actors.test_supervision import _parent

    port = free_port()
    system = make_system("multiproc", metrics_port=port)
    system.spawn(Echo, "/user/echo")
    assert sample(scrape(port), "reprise_host_up", host="/user/echo") == 1
    guardian = _parent(system.status().hosts["/user/echo"].pid)
    admin = _parent(guardian)
    assert ("127.0.0.1", port) in listening(set(tagged_pids(system.tag)) - {admin}), "served by another process"
    os.kill(admin, 9)
    wait_for(lambda: not tagged_pids(system.tag), 20)
    with pytest.raises(OSError):
        scrape(port)


def get_with_host(port: int, host_header: str | None, address: str = "127.0.0.1") -> tuple[int, str]:
    """(status, body) of GET /metrics on address:port sent with `host_header` as Host (None: no Host header)."""
    conn = http.client.HTTPConnection(address, port, timeout=10)
    try:
        conn.putrequest("GET", "/metrics", skip_host=True)
        if host_header is not None:
            conn.putheader("Host", host_header)
        conn.endheaders()
        response = conn.getresponse()
        return response.status, response.read().decode()
    finally:
        conn.close()


def test_a_host_header_naming_another_host_is_refused_against_dns_rebinding(base, make_system):
    # A page at http://rebound.example:PORT/ whose name its DNS turned to 127.0.0.1 read the metrics as its own
    # origin's: the browser sends the page's name as Host, which names no name of this endpoint.
    port = free_port()
    make_system(base, metrics_port=port)
    own_name = [] if socket.gethostname().lower() in ("localhost", "localhost.localdomain") else \
        [f"{socket.gethostname()}:{port}"]  # (not a loopback name, unless the machine is called so)
    for host in ("rebound.example", f"rebound.example:{port}", "localhost.evil.example", "127.0.0.1.nip.io",
                 "10.1.2.3", *own_name):
        status, body = get_with_host(port, host)
        assert status == 421, (host, status, body)
        assert f"Host {host!r} is not a name of this endpoint" in body and "DNS rebinding" in body, body
        assert "localhost" in body and "127.0.0.1" in body and "reprise_" not in body, body
    # What a Prometheus scrape sends (Host: its target), and the loopback names, with or without the port.
    for host in (f"127.0.0.1:{port}", "127.0.0.1", f"localhost:{port}", "LOCALHOST", "localhost.", f"[::1]:{port}",
                 "[::1]", None):
        status, body = get_with_host(port, host)
        assert status == 200 and "reprise_status_ok 1.0" in body, (host, status, body)
    assert sample(scrape(port), "reprise_status_ok") == 1  # (urllib, as a scraper: Host 127.0.0.1:PORT)


def test_an_endpoint_on_another_address_answers_to_that_address(base, make_system):
    port = free_port()
    make_system(base, metrics_port=port, metrics_host="127.0.0.2")
    assert get_with_host(port, f"127.0.0.2:{port}", "127.0.0.2")[0] == 200
    assert get_with_host(port, f"localhost:{port}", "127.0.0.2")[0] == 200  # (still a loopback address)
    status, body = get_with_host(port, f"rebound.example:{port}", "127.0.0.2")
    assert status == 421 and "127.0.0.2" in body, body


def test_an_endpoint_on_every_interface_answers_to_ip_addresses_and_this_machines_name_only():
    from actors.http_host import refusal

    name = socket.gethostname()
    for bound in ("0.0.0.0", "::"):
        for host in ("10.0.0.5:9464", "[fe80::1]:9464", "127.0.0.1", f"{name}:9464", name.upper(), "localhost"):
            assert refusal(host, bound) is None, (bound, host)
        why = refusal("rebound.example:9464", bound)
        assert why is not None and "any IP address or " in why and name.lower() in why, why
    assert refusal("10.0.0.5:9464", "10.0.0.5") is None and refusal(f"{name}:9464", "10.0.0.5") is None
    assert refusal("10.0.0.6:9464", "10.0.0.5") is not None  # (another address: not this endpoint's)
    assert refusal("rebound.example", "10.0.0.5") is not None

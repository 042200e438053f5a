"""Optional mutual TLS between an actor system's processes (actors/tls.py), with real processes and
certificates made by the `openssl` command line."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import signal
import socket
import ssl
import subprocess
import sys
import threading
import uuid

import pytest

import actors
from actors import tls
from actors.errors import ConfigError
from actors.system import tagged_pids
from actors.topology import TopologyError, loads
from tests.actors.refusal import start_refused
from tests.actors.sample import Echo, Ping, Pong
from tests.actors.test_security import _admin_of, listening_addresses

pytestmark = pytest.mark.timeout(120)


def _openssl(*argv: str) -> None:
    subprocess.run(["openssl", *argv], check=True, capture_output=True, text=True)


def make_ca(directory, name: str) -> tuple[str, str]:
    """A self-signed EC CA in `directory`: (certificate path, key path)."""
    cert, key = os.path.join(directory, f"{name}-ca.pem"), os.path.join(directory, f"{name}-ca.key")
    _openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
             "-keyout", key, "-out", cert, "-days", "2", "-subj", f"/CN={name} test CA",
             "-addext", "basicConstraints=critical,CA:TRUE", "-addext", "keyUsage=critical,keyCertSign,cRLSign")
    return cert, key


def make_cert(directory, ca: tuple[str, str], name: str, ips: tuple[str, ...] = ("127.0.0.1",)) -> tls.TlsConfig:
    """A node certificate for `ips` signed by `ca`, its private key (mode 0600), and the CA: a TlsConfig."""
    key, csr, cert = (os.path.join(directory, f"{name}.{ext}") for ext in ("key", "csr", "pem"))
    ext = os.path.join(directory, f"{name}.ext")
    _openssl("req", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes", "-keyout", key,
             "-out", csr, "-subj", f"/CN={name}")
    with open(ext, "w") as f:
        f.write("subjectAltName=" + ",".join(f"IP:{ip}" for ip in ips) + "\n"
                "extendedKeyUsage=serverAuth,clientAuth\n")
    _openssl("x509", "-req", "-in", csr, "-CA", ca[0], "-CAkey", ca[1], "-CAcreateserial", "-out", cert,
             "-days", "2", "-extfile", ext)
    os.chmod(key, 0o600)
    return tls.TlsConfig(cert=cert, key=key, ca=ca[0])


@pytest.fixture(scope="session")
def pki(tmp_path_factory) -> dict[str, tls.TlsConfig]:
    """"node": a certificate of the system's CA; "foreign": one of another CA (with that CA)."""
    if shutil.which("openssl") is None:
        pytest.skip("TLS TESTS NOT RUN: no `openssl` command to make test certificates")
    directory = tmp_path_factory.mktemp("pki")
    ca, other = make_ca(directory, "system"), make_ca(directory, "other")
    return {"node": make_cert(directory, ca, "node", ("127.0.0.1", "10.77.0.1", "10.77.0.2")),
            "client": make_cert(directory, ca, "client"),
            "foreign": make_cert(directory, other, "foreign")}


def options(config: tls.TlsConfig) -> dict[str, str]:
    """The tls_cert/tls_key/tls_ca keyword arguments for `config`."""
    return {"tls_cert": config.cert, "tls_key": config.key, "tls_ca": config.ca}


def tls_handshake(address: tuple[str, int], config: tls.TlsConfig) -> str:
    """Complete a mutual TLS handshake with `address` (blocking) and return the protocol version."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname = False
    ctx.load_cert_chain(config.cert, config.key)
    ctx.load_verify_locations(config.ca)
    with socket.create_connection(address, timeout=5) as raw, ctx.wrap_socket(raw) as conn:
        return conn.version() or ""


# ---- end to end ------------------------------------------------------------------------------------

@pytest.mark.multiproc
def test_a_tls_system_spawns_tells_and_asks_across_processes(make_system, pki):
    system = make_system("multiproc", tls=pki["node"])
    system.spawn(Echo, "/user/a")
    system.spawn(Echo, "/user/b", entities=True, shards=2)
    assert system.ask("/user/a", Ping(1)) == Pong(1, "/user/a")
    assert [system.ask(f"/user/b/{i}", Ping(i)) for i in range(6)] == [Pong(i, f"/user/b/{i}") for i in range(6)]
    # A reply routed host -> host -> client, carrying 3 MB: many TLS records, partial reads, chunked sends.
    probe = system.probe()
    big = os.urandom(3 * 1024 * 1024)
    system.tell("/user/a", ("fwd", "/user/b/1", ("fwd", probe.path, big)))
    assert probe.receive(timeout=30) == big
    for i in range(50):
        system.tell(f"/user/b/{i % 5}", ("fwd", probe.path, i))
    assert sorted(probe.receive_many(50, timeout=30)) == list(range(50))
    assert system.status().config["tls"] == {"cert": pki["node"].cert, "key": pki["node"].key, "ca": pki["node"].ca}
    # A second client on this machine finds the system's TLS files through its run dir.
    other = actors.connect(system.admin_port)
    try:
        assert other.ask("/user/b/2", Ping(7)) == Pong(7, "/user/b/2")
    finally:
        other.close()
    # And one given its own certificate of the same CA.
    other = actors.connect(system.admin_port, **options(pki["client"]))
    try:
        assert other.ask("/user/a", Ping(8)) == Pong(8, "/user/a")
    finally:
        other.close()


@pytest.mark.multiproc
def test_every_listening_port_of_a_tls_system_speaks_only_tls(make_system, pki):
    system = make_system("multiproc", **options(pki["node"]))
    system.spawn(Echo, "/user/a")
    system.spawn(Echo, "/user/b", entities=True)
    assert system.ask("/user/b/1", Ping(1)) == Pong(1, "/user/b/1")
    addresses = listening_addresses(tagged_pids(system.tag))
    assert len(addresses) >= 5, addresses  # admin, logger, guardian, node agent, two hosts
    # This client's endpoint (it answers while the client waits); earlier tests in this process may have
    # left endpoints of their own clients, which are not this system's: take the one this client uses.
    mine = system._asys._systemBase.transport.myAddress.addressDetails
    client = [a for a in listening_addresses([os.getpid()]) if a[1] == mine.sockname[1]]
    assert len(client) == 1, (client, mine)
    results: dict = {}

    def knock(address: tuple[str, int]) -> None:
        try:
            results[address] = tls_handshake(address, pki["client"])
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            results[address] = repr(e)
        # A plaintext Thespian frame gets no Thespian answer (an ACK would be b"N>..."), only a TLS alert or EOF.
        with socket.create_connection(address, timeout=5) as conn:
            body = pickle.dumps(("hello", "in clear"))
            conn.sendall(b"%d>" % len(body) + body)
            try:
                answer = conn.recv(100)
            except (ConnectionResetError, TimeoutError):
                answer = b""
            results[address, "clear"] = answer

    for address in addresses:
        knock(address)
    knocker = threading.Thread(target=knock, args=(client[0],))
    knocker.start()
    while knocker.is_alive():
        assert system.ask("/user/a", Ping(2)) == Pong(2, "/user/a")  # runs this client's transport meanwhile
    for address in addresses + client:
        assert results[address] in ("TLSv1.2", "TLSv1.3"), (address, results[address])
        assert b">" not in results[address, "clear"][:6], (address, results[address, "clear"])
    assert system.ask("/user/a", Ping(3)) == Pong(3, "/user/a")


class Sniffer:
    """Every packet on the loopback interface while it runs (an AF_PACKET socket: needs CAP_NET_RAW)."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
        self.sock.bind(("lo", 0))
        self.sock.settimeout(0.1)
        self.packets: list[bytes] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.packets.append(self.sock.recv(262144))
            except TimeoutError:
                continue

    def stop(self) -> None:
        """Stop capturing."""
        self._stop.set()
        self._thread.join(5)
        self.sock.close()

    def tcp_payload(self, ports: set[int]) -> bytes:
        """The TCP payload bytes of captured IPv4 packets from or to any of `ports` (other tests' systems
        share loopback: their traffic is left out)."""
        out = bytearray()
        for frame in self.packets:
            ip = frame[14:]  # loopback frames carry an all-zero Ethernet header
            if len(ip) < 20 or ip[0] >> 4 != 4 or ip[9] != socket.IPPROTO_TCP:
                continue
            tcp = ip[(ip[0] & 0x0F) * 4:]
            if int.from_bytes(tcp[0:2], "big") in ports or int.from_bytes(tcp[2:4], "big") in ports:
                out += tcp[(tcp[12] >> 4) * 4:]
        return bytes(out)


@pytest.fixture
def sniffer():
    try:
        probe = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.ntohs(0x0003))
        probe.close()
    except (PermissionError, AttributeError, OSError) as e:
        pytest.skip(f"SNIFFER TEST NOT RUN: cannot open a raw packet socket here ({e})")
    return Sniffer


@pytest.mark.multiproc
@pytest.mark.parametrize("use_tls", [True, False], ids=["tls", "plain-control"])
def test_a_sniffer_on_loopback_sees_no_message_content(make_system, pki, sniffer, use_tls):
    system = make_system("multiproc", **(options(pki["node"]) if use_tls else {}))
    system.spawn(Echo, "/user/a")
    system.spawn(Echo, "/user/b", entities=True)
    probe = system.probe()
    assert system.ask("/user/b/1", Ping(1)) == Pong(1, "/user/b/1")  # connections made before the capture too
    marker = f"MARKER-{uuid.uuid4().hex}"
    capture = sniffer()
    try:
        # client -> host a -> host b -> client: the marker crosses three connections.
        system.tell("/user/a", ("fwd", "/user/b/1", ("fwd", probe.path, marker)))
        assert probe.receive(timeout=10) == marker
        new = actors.connect(system.admin_port)  # a new client: its handshake happens during the capture
        try:
            new.tell("/user/a", ("fwd", probe.path, marker + "-again"))
            assert probe.receive(timeout=10) == marker + "-again"
            # Every connection of this system has one end at one of these listening ports.
            ports = {port for _, port in listening_addresses([*tagged_pids(system.tag), os.getpid()])}
        finally:
            new.close()
    finally:
        capture.stop()
    assert len(ports) >= 5, ports
    wire = capture.tcp_payload(ports)
    assert len(wire) > 1000, "the sniffer captured (almost) nothing: the test would prove nothing"
    if use_tls:
        assert marker.encode() not in wire, "a message crossed loopback in clear on a TLS system"
        assert b"tests.actors.sample" not in wire, "pickled class names crossed loopback in clear"
    else:
        assert marker.encode() in wire, "control: without TLS the sniffer must see the marker"


# ---- clients that do not match --------------------------------------------------------------------

@pytest.mark.multiproc
def test_a_plain_client_of_a_tls_system_gets_a_clear_error(make_system, pki):
    system = make_system("multiproc", **options(pki["node"]))
    system.spawn(Echo, "/user/a")
    with pytest.raises(actors.TlsError, match="uses TLS; pass tls_cert="):
        actors.connect(system.admin_port, _tls=None)  # what a client without the TLS files is
    assert system.ask("/user/a", Ping(1)) == Pong(1, "/user/a")


@pytest.mark.multiproc
def test_a_client_with_a_certificate_of_another_ca_is_refused(make_system, pki):
    system = make_system("multiproc", **options(pki["node"]))
    system.spawn(Echo, "/user/a")
    with pytest.raises(actors.TlsError, match="not signed by tls_ca"):
        actors.connect(system.admin_port, tls=pki["foreign"])
    # The system's port refuses that certificate even from a client that skips checking the server.
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
    ctx.load_cert_chain(pki["foreign"].cert, pki["foreign"].key)
    with socket.create_connection(("127.0.0.1", system.admin_port), timeout=5) as raw:
        with ctx.wrap_socket(raw) as conn, pytest.raises(ssl.SSLError, match="UNKNOWN_CA|unknown ca"):
            conn.recv(1)  # TLS 1.3: the server's verdict on our certificate arrives after the handshake
    assert system.ask("/user/a", Ping(1)) == Pong(1, "/user/a")


@pytest.mark.multiproc
def test_a_tls_client_of_a_plain_system_gets_a_clear_error(make_system, pki):
    system = make_system("multiproc")
    with pytest.raises(actors.TlsError, match="does not use TLS"):
        actors.connect(system.admin_port, **options(pki["client"]))


@pytest.mark.multiproc
def test_a_tls_client_of_a_stopped_tls_admin_is_told_it_may_be_busy_or_stopped(make_system, pki):
    """A TLS admin that does not answer the handshake (SIGSTOP) was reported as "does not use TLS"."""
    system = make_system("multiproc", tls=pki["node"])
    admin = _admin_of(system)
    os.kill(admin, signal.SIGSTOP)
    try:
        with pytest.raises(actors.TlsError, match="did not complete a TLS handshake within .*busy or stopped"):
            actors.connect(system.admin_port, **options(pki["client"]))
    finally:
        os.kill(admin, signal.SIGCONT)
    client = actors.connect(system.admin_port, **options(pki["client"]))  # thawed, it answers again
    client.close()


@pytest.mark.multiproc
def test_a_tls_member_that_cannot_speak_to_its_leader_is_refused_before_it_starts(make_system, pki):
    plain = make_system("multiproc")
    with pytest.raises(actors.TlsError, match="cannot join leader .*does not use TLS"):
        start_refused("multiproc", leader=f"127.0.0.1:{plain.admin_port}", node="m1", tls=pki["node"],
                      secret_file=os.path.join(plain.run_dir, "secret"))
    secure = make_system("multiproc", tls=pki["node"])
    with pytest.raises(actors.TlsError, match="cannot join leader .*not signed by tls_ca"):
        start_refused("multiproc", leader=f"127.0.0.1:{secure.admin_port}", node="m1", tls=pki["foreign"],
                      secret_file=os.path.join(secure.run_dir, "secret"))


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_a_member_without_tls_or_with_another_secret_is_refused_before_it_starts(make_system, pki, tmp_path):
    # Without TLS towards a TLS leader it failed after 50 s with Thespian's "No response received to PendingActor
    # request"; with another secret at once, but as "NoCompatibleSystemForActor ... actors.guardian.Guardian".
    secure = make_system("multiproc", tls=pki["node"])
    with pytest.raises(actors.TlsError, match="uses TLS"):
        start_refused("multiproc", leader=f"127.0.0.1:{secure.admin_port}", node="m1",
                      secret_file=os.path.join(secure.run_dir, "secret"))
    plain = make_system("multiproc")
    other = tmp_path / "other-secret"
    other.write_text("cd" * 32 + "\n")
    other.chmod(0o600)
    with pytest.raises(actors.AuthenticationFailed, match=f"this member's secret \\({other}\\) is not that system's"):
        start_refused("multiproc", leader=f"127.0.0.1:{plain.admin_port}", node="m1", secret_file=str(other))


# ---- configuration ----------------------------------------------------------------------------------

def test_all_three_files_or_none(pki):
    with pytest.raises(ConfigError, match="tls_ca missing"):
        start_refused("multiproc", tls_cert=pki["node"].cert, tls_key=pki["node"].key)
    with pytest.raises(ConfigError, match="either tls=TlsConfig"):
        start_refused("multiproc", tls=pki["node"], tls_ca=pki["node"].ca)
    with pytest.raises(ConfigError, match="multiproc"):
        start_refused("local", tls=pki["node"])


def test_bad_files_are_refused_before_anything_starts(pki, tmp_path):
    node, foreign = pki["node"], pki["foreign"]
    with pytest.raises(ConfigError, match="tls_cert .*missing.pem does not exist"):
        start_refused("multiproc", tls_cert=str(tmp_path / "missing.pem"), tls_key=node.key, tls_ca=node.ca)
    open_key = tmp_path / "open.key"
    shutil.copy(node.key, open_key)
    os.chmod(open_key, 0o644)
    with pytest.raises(ConfigError, match="chmod 600"):
        start_refused("multiproc", tls_cert=node.cert, tls_key=str(open_key), tls_ca=node.ca)
    with pytest.raises(ConfigError, match="is not the private key of tls_cert"):
        start_refused("multiproc", tls_cert=node.cert, tls_key=foreign.key, tls_ca=node.ca)
    with pytest.raises(ConfigError, match="is not accepted by tls_ca"):
        start_refused("multiproc", tls_cert=foreign.cert, tls_key=foreign.key, tls_ca=node.ca)
    with pytest.raises(ConfigError, match="holds no PEM CA certificate"):
        start_refused("multiproc", tls_cert=node.cert, tls_key=node.key, tls_ca=node.key)
    with pytest.raises(ConfigError, match="tls_key .*missing.key does not exist"):
        actors.connect(1, tls_cert=node.cert, tls_key=str(tmp_path / "missing.key"), tls_ca=node.ca)


def test_topology_tls_keys_are_relative_to_the_file(tmp_path):
    topo = loads('[system]\ntls_cert = "n.pem"\ntls_key = "/abs/n.key"\ntls_ca = "ca.pem"\n', base_dir=str(tmp_path))
    assert (topo.system.tls_cert, topo.system.tls_key, topo.system.tls_ca) == (
        str(tmp_path / "n.pem"), "/abs/n.key", str(tmp_path / "ca.pem"))
    with pytest.raises(TopologyError, match="tls_ca, tls_key missing"):
        loads('[system]\ntls_cert = "n.pem"\n')
    with pytest.raises(TopologyError, match="tls_ca must be a string"):
        loads('[system]\ntls_cert = "a"\ntls_key = "b"\ntls_ca = 3\n')


# ---- the command line -------------------------------------------------------------------------------

def reprise(*argv: str) -> subprocess.CompletedProcess:
    """Run the `reprise` command (of this checkout) and capture its output."""
    return subprocess.run([sys.executable, "-m", "actors.cli", *argv], capture_output=True, text=True, timeout=90)


@pytest.mark.multiproc
def test_reprise_status_on_a_tls_system_with_its_own_or_given_files(make_system, pki):
    system = make_system("multiproc", tls=pki["node"])
    system.spawn(Echo, "/user/a")
    port = str(system.admin_port)
    found = reprise("status", "--port", port, "--json")  # the files the system was started with
    assert found.returncode == 0, found.stderr
    assert "/user/a" in json.loads(found.stdout)["hosts"]
    given = reprise("status", "--port", port, "--json", *cli_options(pki["client"]))
    assert given.returncode == 0, given.stderr
    foreign = reprise("status", "--port", port, *cli_options(pki["foreign"]))
    assert foreign.returncode == 1
    assert "TlsError" in foreign.stderr and "not signed by tls_ca" in foreign.stderr, foreign.stderr
    assert "hint: give --tls-cert/--tls-key/--tls-ca" in foreign.stderr
    partial = reprise("node", "--leader", f"127.0.0.1:{port}", "--port", "1", "--name", "m", "--secret-file",
                      os.path.join(system.run_dir, "secret"), "--tls-cert", pki["node"].cert)
    assert partial.returncode == 2 and "tls_ca, tls_key missing" in partial.stderr, partial.stderr


def cli_options(config: tls.TlsConfig) -> list[str]:
    """--tls-cert/--tls-key/--tls-ca for `config`."""
    return ["--tls-cert", config.cert, "--tls-key", config.key, "--tls-ca", config.ca]


def test_the_addresses_whose_failed_handshakes_were_logged_are_bounded(monkeypatch):
    """A server remembers when it last logged a failed handshake of each address, to log one a minute each: it kept
    every address that ever failed (a scan of many addresses grew it for the process's life)."""
    monkeypatch.setattr(tls, "_logged", {})
    server = socket.create_server(("127.0.0.1", 0))
    try:
        for n in range(tls._LOGGED_KEPT + 40):
            client = socket.socket()
            client.bind((f"127.0.{1 + n // 250}.{1 + n % 250}", 0))  # (all of 127/8 is this machine's)
            client.connect(server.getsockname())
            accepted, _ = server.accept()
            wrapped = tls.TlsSocket(fileno=accepted.detach(), contexts=None, server_side=True)  # type: ignore[arg-type]
            wrapped._heard = True  # (it said something that failed the handshake)
            wrapped._fail(ssl.SSLError(1, "wrong version number"))
            wrapped.close()
            client.close()
            assert len(tls._logged) <= tls._LOGGED_KEPT
    finally:
        server.close()
    assert tls._logged  # (the newest failures are still remembered)

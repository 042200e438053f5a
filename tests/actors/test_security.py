"""Loopback by default, the peer allowlist, authenticated frames, no inherited sockets, no secrets on
command lines (multi-process systems only), private logs."""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import select
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid

import pytest
from thespian.actors import ActorSystem

import actors
from actors import admin_probe, auth, client_log, netsec, thespian_fixes
from actors.system import tagged_pids
from journal.urls import redact_url
from tests.actors.refusal import start_refused
from tests.actors.sample import Echo, Ping, Pong
from tests.actors.test_metrics import sample, scrape
from tests.conftest import SESSION_TOKEN
from tests.forking import in_forked_child
from tests.sockets import socket_inodes
from tests.waiting import wait_for


def non_loopback_ipv4() -> str | None:
    """An IPv4 address of this machine other than loopback, or None."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        address = line.split()[3].split("/")[0]
        if not address.startswith("127."):
            return address
    return None


def listening_sockets(pids: list[int]) -> dict[str, tuple[tuple[str, int], set[int]]]:
    """inode -> ((ip, port), pids holding it) for every listening TCP socket of `pids`, read from /proc.

    Each pid's own /proc/PID/net/tcp is read, so processes in other network namespaces are seen too.
    """
    holders: dict[str, set[int]] = {}
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    holders.setdefault(target[8:-1], set()).add(pid)
        except OSError:
            continue
    found: dict[str, tuple[tuple[str, int], set[int]]] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/net/tcp") as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in holders:
                hex_ip, hex_port = local.split(":")
                ip = ".".join(str(int(hex_ip[i:i + 2], 16)) for i in (6, 4, 2, 0))
                found[inode] = ((ip, int(hex_port, 16)), holders[inode])
    return found


def listening_addresses(pids: list[int]) -> list[tuple[str, int]]:
    """(ip, port) of every listening TCP socket owned by `pids`."""
    return [address for address, _ in listening_sockets(pids).values()]


@pytest.fixture
def outside_ip():
    ip = non_loopback_ipv4()
    if ip is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    return ip


def two_hosts(make_system):
    """A multiproc system with an actor at /user/a and an entity host at /user/b, both answering."""
    system = make_system("multiproc")
    system.spawn(Echo, "/user/a")
    system.spawn(Echo, "/user/b", entities=True)
    assert system.ask("/user/b/1", Ping(1)) == Pong(1, "/user/b/1")
    return system


def test_every_listening_socket_is_bound_to_loopback(make_system):
    system = two_hosts(make_system)
    addresses = listening_addresses(tagged_pids(system.tag))
    assert len(addresses) >= 4  # admin, logger, guardian, node agent, hosts
    assert {ip for ip, _ in addresses} == {"127.0.0.1"}, addresses


def test_connection_from_a_non_loopback_address_is_refused(make_system, outside_ip):
    system = make_system("multiproc")
    system.spawn(Echo, "/user/a")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((outside_ip, system.admin_port), timeout=3)
    # Every actor port refuses too.
    for _, port in listening_addresses(tagged_pids(system.tag)):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((outside_ip, port), timeout=3)


def test_peer_allowlist_drops_connections_from_unlisted_addresses(make_system, outside_ip):
    system = make_system("multiproc", bind="0.0.0.0", advertise="127.0.0.1", peers=("10.255.255.1",))
    system.spawn(Echo, "/user/a")
    assert system.ask("/user/a", Ping(2)) == Pong(2, "/user/a")  # loopback is always allowed
    with socket.create_connection((outside_ip, system.admin_port), timeout=3,
                                  source_address=(outside_ip, 0)) as conn:
        conn.settimeout(5)
        try:
            data = conn.recv(1)
        except ConnectionResetError:
            data = b""
        assert data == b"", "the admin kept a connection from an address that is not an allowed peer"


@pytest.mark.timeout(60)
def test_a_stranger_connecting_to_a_client_over_and_over_costs_at_most_four_directory_fetches_a_second(
        make_system, outside_ip, caplog):
    # A client fetches its directory again after it refused a connection (it may be a node that joined since the
    # last fetch, replying): a stranger connecting in a loop must not turn that into a flood on the guardian,
    # nor into a warning per attempt in the client's log.
    caplog.set_level(logging.WARNING, logger="reprise.netsec")
    netsec._warned.clear()  # (an earlier test in this process may have been warned of the same address)
    system = make_system("multiproc", bind="0.0.0.0", advertise="127.0.0.1", peers=("10.255.255.1",))
    system.spawn(Echo, "/user/a")
    assert system.ask("/user/a", Ping(1)) == Pong(1, "/user/a")
    own_port = system._asys._systemBase.transport.myAddress.addressDetails.sockname[1]
    fetches: list[float] = []
    refresh = system._refresh

    def counted(*args, **kwargs):
        fetches.append(time.monotonic())
        return refresh(*args, **kwargs)

    system._refresh = counted
    stop = threading.Event()
    connected = [0]

    def stranger() -> None:
        while not stop.is_set():
            try:
                with socket.create_connection(("127.0.0.1", own_port), timeout=1, source_address=(outside_ip, 0)):
                    connected[0] += 1
            except OSError:
                pass
            time.sleep(0.01)

    thread = threading.Thread(target=stranger, daemon=True)
    thread.start()
    began = time.monotonic()
    probe = system.probe()
    try:
        # The client waits (and refuses) meanwhile: one long wait, then many short ones (each may recheck).
        with pytest.raises(actors.AskTimeout):
            probe.receive(timeout=1.5)
        while time.monotonic() - began < 3.0:
            with pytest.raises(actors.AskTimeout):
                probe.receive(timeout=0.01)
    finally:
        stop.set()
        thread.join(5)
    waited = time.monotonic() - began
    assert connected[0] >= 50, f"the stranger connected only {connected[0]} times: it tested nothing"
    assert 1 <= len(fetches) <= waited * 4 + 1, f"{len(fetches)} directory fetches in {waited:.1f} s"
    warned = [r.getMessage() for r in caplog.records if r.name == "reprise.netsec"]
    assert warned and all(outside_ip in m and "not an allowed peer" in m for m in warned), warned
    assert len(warned) == 1, f"{len(warned)} warnings for {connected[0]} refused connections in {waited:.1f} s"
    assert system.ask("/user/a", Ping(2)) == Pong(2, "/user/a")


def test_refusals_of_one_address_are_logged_once_a_minute_with_the_count_of_those_not_logged(caplog):
    caplog.set_level(logging.WARNING, logger="reprise.netsec")
    netsec._warned.clear()
    for now in (1000.0, 1001.0, 1002.0, 1000.0 + netsec.WARN_EVERY, 1000.0 + netsec.WARN_EVERY + 1):
        netsec._warn_refused("192.0.2.7", now)
    netsec._warn_refused("192.0.2.8", 1003.0)
    warned = [r.getMessage() for r in caplog.records if r.name == "reprise.netsec"]
    assert warned == [
        "refused a connection from 192.0.2.7: not an allowed peer (REPRISE_PEERS)",
        "refused a connection from 192.0.2.7: not an allowed peer (REPRISE_PEERS)"
        " (2 more refused since the last warning)",
        "refused a connection from 192.0.2.8: not an allowed peer (REPRISE_PEERS)",
    ]


# ---- authentication (issue 13, item 1) -------------------------------------------------------------

class _RunCode:
    """Unpickling this runs `code`: what an attacker sends to an actor port."""

    def __init__(self, code: str) -> None:
        self.code = code

    def __reduce__(self):
        return exec, (self.code,)


def attack_payload(marker: str, who: str) -> bytes:
    """A pickle that appends `who` to `marker` when unpickled (as Thespian's receive path would)."""
    return pickle.dumps(_RunCode(f"open({marker!r}, 'a').write({who!r} + chr(10))"))


# Sends one Thespian frame and waits (bounded) for the receiver's answer: once it answered, it has read
# the frame. A socket nobody serves answers nothing; the timeout bounds that case.
SEND_FRAME = """
import socket, sys
payload = bytes.fromhex(sys.argv[3])
with socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=3) as conn:
    conn.sendall(b"%d>" % len(payload) + payload)
    try:
        print(repr(conn.recv(100)))
    except OSError as exc:
        print("no answer:", exc)
"""


def nobody_python() -> list[str] | None:
    """argv prefix running the system Python as user `nobody`, or None where that is impossible."""
    if os.geteuid() != 0 or shutil.which("runuser") is None:
        return None
    for python in ("/usr/bin/python3", "/usr/local/bin/python3"):
        probe = subprocess.run(["runuser", "-u", "nobody", "--", python, "-c", "pass"], capture_output=True)
        if probe.returncode == 0:
            return ["runuser", "-u", "nobody", "--", python]
    return None


@pytest.mark.timeout(120)
@pytest.mark.parametrize("sender", ["root", "nobody"])
def test_unauthenticated_pickle_frames_to_every_port_run_nothing(make_system, tmp_path, sender):
    prefix = [sys.executable] if sender == "root" else nobody_python()
    if prefix is None:
        pytest.skip("NOT RUN: cannot run a Python as user nobody here (needs root, runuser, a system python3)")
    system = two_hosts(make_system)
    marker = tmp_path / "marker"
    addresses = listening_addresses(tagged_pids(system.tag))
    assert len(addresses) >= 5, addresses  # admin, logger, guardian, node agent, two hosts
    clients = listening_addresses([os.getpid()])  # a client's endpoint unpickles what it receives too
    assert clients
    addresses += clients
    payload = attack_payload(str(marker), sender).hex()
    for ip, port in addresses:
        sent = subprocess.run([*prefix, "-c", SEND_FRAME, ip, str(port), payload], capture_output=True, text=True,
                              timeout=30, cwd="/")
        assert sent.returncode == 0, sent.stderr
    assert not marker.exists(), f"a frame sent by {sender} ran code in the actor system: {marker.read_text()}"
    # Everything still works, for this client and for a new one.
    assert system.ask("/user/a", Ping(2)) == Pong(2, "/user/a")
    assert system.ask("/user/b/2", Ping(3)) == Pong(3, "/user/b/2")
    other = actors.connect(system.admin_port)
    try:
        assert other.ask("/user/b/1", Ping(4)) == Pong(4, "/user/b/1")
    finally:
        other.close()
    assert not marker.exists()


BAD_HEADERS = [b"-5>" + b"A" * 100, b"A" * 100]  # a negative size; no size at all


@pytest.mark.timeout(120)
def test_frames_with_a_negative_or_missing_size_close_their_connection_and_kill_nothing(make_system):
    # One such frame from any local user killed the admin (and the system with it) or a host, and raised a
    # raw ValueError from a client's ask: recv() was asked for a negative number of bytes.
    system = two_hosts(make_system)
    pids = sorted(tagged_pids(system.tag))
    addresses = listening_addresses(pids)
    assert len(addresses) >= 5, addresses  # admin, logger, guardian, node agent, two hosts
    clients = listening_addresses([os.getpid()])
    assert clients
    for header in BAD_HEADERS:
        for ip, port in addresses + clients:
            with socket.create_connection((ip, port), timeout=5) as conn:
                conn.sendall(header)
                if (ip, port) in clients:
                    continue  # this client reads its port only while it waits: the asks below read it
                conn.settimeout(10)
                try:
                    while conn.recv(100):  # whatever it answers, the receiver closes the connection
                        pass
                except OSError:
                    pass
        assert system.ask("/user/a", Ping(2)) == Pong(2, "/user/a")
        assert system.ask("/user/b/2", Ping(3)) == Pong(3, "/user/b/2")
    assert sorted(tagged_pids(system.tag)) == pids, "a process of the system died or was restarted"
    assert system.status().hosts["/user/a"].restarts == 0


def resident_mib(pid: int) -> int:
    """The resident memory of process `pid`, in MiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    raise AssertionError(f"no VmRSS for pid {pid}")


def bytes_taken_before_refusal(ip: str, port: int, claimed: int, limit: int, seconds: float) -> int:
    """Send a frame claiming `claimed` bytes with no valid tag, up to `limit` bytes of it within `seconds`;
    how many bytes went out before the receiver closed the connection (`limit` if it never did)."""
    chunk = b"\0" * (1 << 20)
    sent = 0
    deadline = time.monotonic() + seconds
    with socket.create_connection((ip, port), timeout=5) as conn:
        try:
            conn.sendall(b"%d>" % claimed + b"\0" * 64)
            while sent < limit and time.monotonic() < deadline:
                conn.sendall(chunk)
                sent += len(chunk)
        except OSError:  # (reset, broken pipe: the receiver closed it; a timeout: it stopped reading)
            return sent
    return sent


@pytest.mark.timeout(120)
def test_an_unsigned_frame_is_dropped_before_the_receiver_buffers_it(make_system):
    # Thespian buffered a whole frame, of whatever size its header claimed, before the HMAC check: any local
    # process could make the admin or a host hold gigabytes (300 MB took 40 s here) until the OOM killer came.
    system = two_hosts(make_system)
    pids = sorted(tagged_pids(system.tag))
    sockets = listening_sockets(pids)
    assert len(sockets) >= 5, sockets  # admin, logger, guardian, node agent, two hosts
    limit = 32 << 20
    for (ip, port), holders in sockets.values():
        (pid,) = holders
        before = resident_mib(pid)
        sent = bytes_taken_before_refusal(ip, port, 1 << 30, limit, seconds=20)
        assert sent < 8 << 20, f"{ip}:{port} (pid {pid}) took {sent >> 20} MiB of an unsigned frame"
        assert resident_mib(pid) - before < 8, f"pid {pid} grew from {before} MiB to {resident_mib(pid)} MiB"
    # Signed traffic still flows, small and large (a 2 MiB message spans many reads).
    assert system.ask("/user/a", Ping(2)) == Pong(2, "/user/a")
    assert system.ask("/user/b/2", Ping(3)) == Pong(3, "/user/b/2")
    big = "x" * (2 << 20)
    assert system.ask("/user/a", Ping(big)) == Pong(big, "/user/a")  # type: ignore[arg-type]  # (any payload)
    assert sorted(tagged_pids(system.tag)) == pids, "a process of the system died or was restarted"


def open_fds(pid: int) -> int:
    """How many file descriptors process `pid` holds."""
    return len(os.listdir(f"/proc/{pid}/fd"))


@pytest.mark.timeout(180)
def test_idle_connections_without_the_secret_cannot_pile_up_in_a_process(make_system):
    # Thespian kept every accepted connection up to 7 minutes waiting for a frame: any local process could hold
    # thousands open, each a descriptor and a share of every loop pass (2,800 on a host cost 70% of a core while
    # idle and made an ask 100 times slower), until the host ran out of descriptors.
    system = two_hosts(make_system)
    pids = sorted(tagged_pids(system.tag))
    sockets = {address: next(iter(holders)) for address, holders in listening_sockets(pids).values()}
    host = system.status().hosts["/user/a"].pid
    targets = [(address, pid) for address, pid in sockets.items()
               if address[1] == system.admin_port or pid == host]
    assert len(targets) == 2, targets
    for (ip, port), pid in targets:
        before = open_fds(pid)
        held = []
        try:
            deadline = time.monotonic() + 60
            for _ in range(600):
                assert time.monotonic() < deadline, f"opening connections to {ip}:{port} took over 60 s"
                conn = socket.create_connection((ip, port), timeout=5)
                conn.sendall(b"1")  # the start of a size header, never finished
                held.append(conn)
            # (at most 100 of them are kept: netsec.MAX_UNAUTHENTICATED; a few more descriptors come and go)
            wait_for(lambda pid=pid, before=before: open_fds(pid) < before + 150, timeout=10)
            assert system.ask("/user/a", Ping(2), timeout=10) == Pong(2, "/user/a")
        finally:
            for conn in held:
                conn.close()
    assert sorted(tagged_pids(system.tag)) == pids, "a process of the system died or was restarted"


def closed_within(conn: socket.socket, seconds: float) -> bool:
    """Whether the other end closes `conn` within `seconds` (whatever it answers first)."""
    conn.settimeout(seconds)
    try:
        while conn.recv(4096):
            pass
    except TimeoutError:
        return False
    except ConnectionResetError:
        pass
    return True


def scrape_or_none(port: int) -> dict | None:
    """The endpoint's samples, or None when it closed the connection (all its slots taken)."""
    try:
        return scrape(port)
    except OSError:
        return None


def metrics_connection_threads() -> int:
    """Threads of this process serving a metrics endpoint's connections (socketserver names them so)."""
    return sum("process_request_thread" in t.name for t in threading.enumerate())


@pytest.mark.timeout(90)
def test_a_flood_of_connections_to_the_metrics_port_costs_a_bounded_number_of_threads(make_system):
    # The endpoint started a thread per connection, kept while the client sent nothing: any local process
    # could start thousands in the process serving it, which on the in-process base is the user's own.
    port = actors.free_port()
    system = make_system("local", metrics_port=port)
    assert sample(scrape(port), "reprise_status_ok") == 1
    flood = []
    try:
        for _ in range(64):  # (four times the slots, within the listen backlog: no handshake waits for a retry)
            conn = socket.create_connection(("127.0.0.1", port), timeout=5)
            conn.sendall(b"GET /met")  # a request line never finished
            flood.append(conn)
        assert closed_within(flood[-1], 30), "a connection beyond the limit was kept"
        assert metrics_connection_threads() <= 16  # (metrics.MAX_CONNECTIONS are served at once)
        # A client that never finishes its request is closed (after metrics.REQUEST_TIMEOUT, 10 s).
        assert closed_within(flood[0], 20), "a silent client kept its connection and its thread"
    finally:
        for conn in flood:
            conn.close()
    assert sample(wait_for(lambda: scrape_or_none(port)), "reprise_status_ok") == 1  # (once the flood's slots are free)
    assert system.status().config["metrics_port"] == port


def test_secret_is_in_a_private_file_of_the_run_dir(make_system):
    system = make_system("multiproc")
    path = os.path.join(system.run_dir, auth.SECRET_NAME)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(system.run_dir).st_mode) == 0o700
    assert len(auth.read_secret(path)) == auth.SECRET_BYTES
    assert auth.find_secret_file(system.admin_port) == path


def test_a_client_with_the_wrong_secret_is_refused_with_a_clear_error(make_system, tmp_path):
    system = make_system("multiproc")
    wrong = auth.write_secret(str(tmp_path / "wrong.secret"), auth.new_secret())
    with pytest.raises(auth.AuthenticationFailed, match="not that system's secret") as refused:
        actors.connect(system.admin_port, secret_file=wrong, timeout=5)
    assert "accepted" not in str(refused.value)  # (refused at once: not told as an admin that went silent)
    # A client of another Reprise version is refused the same way (its frames differ; checked by hand with a
    # client of 6665163^ against this system's admin): the error says that is a cause too.
    assert "another version of Reprise" in str(refused.value)
    # The right one, named explicitly, works.
    right = actors.connect(system.admin_port, secret_file=os.path.join(system.run_dir, "secret"))
    try:
        assert right.status().config["run_dir"] == system.run_dir
    finally:
        right.close()


def test_secret_files_readable_by_others_are_refused(tmp_path):
    path = auth.write_secret(str(tmp_path / "s"), auth.new_secret())
    os.chmod(path, 0o644)
    with pytest.raises(auth.SecretUnavailable, match="chmod 600"):
        auth.read_secret(path)
    with pytest.raises(auth.SecretUnavailable, match="does not exist"):
        auth.read_secret(str(tmp_path / "missing"))
    with pytest.raises(auth.SecretUnavailable, match="is not a file"):
        auth.read_secret(str(tmp_path))
    (tmp_path / "junk").write_text("not hex")
    os.chmod(tmp_path / "junk", 0o600)
    with pytest.raises(auth.SecretUnavailable, match="does not hold a secret"):
        auth.read_secret(str(tmp_path / "junk"))


@pytest.mark.timeout(60)
def test_a_fifo_another_user_put_where_the_secret_file_should_be_is_refused_at_once(tmp_path):
    # Opening it blocked until someone wrote to it: a `reprise node --secret-file /tmp/...` hung for good,
    # before the owner check could refuse the file.
    fifo = str(tmp_path / "cluster.secret")
    os.mkfifo(fifo, 0o600)
    if os.geteuid() == 0:
        os.chown(fifo, 65534, 65534)  # (made by user nobody)
    outcome: list[BaseException | bytes] = []

    def read() -> None:
        try:
            outcome.append(auth.read_secret(fifo))
        except BaseException as e:  # (reported to the test)
            outcome.append(e)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # let the blocked open go, so that the thread ends with the test
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        reader.join(10)
        pytest.fail("reading the secret from a FIFO blocked")
    assert len(outcome) == 1 and isinstance(outcome[0], auth.SecretUnavailable), outcome
    assert "not a file" in str(outcome[0]) or "belongs to uid" in str(outcome[0]), outcome


def test_a_member_without_the_leaders_secret_is_refused_before_anything_starts():
    with pytest.raises(auth.MissingSecret, match="secret_file="):
        start_refused("multiproc", leader="127.0.0.1:1", node="m1")


def test_without_a_local_admin_on_the_port_the_error_names_secret_file():
    with pytest.raises(auth.SecretUnavailable, match="secret_file="):
        auth.find_secret_file(actors.free_port())


# ---- inherited sockets (issue 13, item 4) ----------------------------------------------------------

def test_every_listening_socket_is_held_by_exactly_one_process(make_system):
    system = two_hosts(make_system)
    shared = {address: sorted(pids) for address, pids in listening_sockets(tagged_pids(system.tag)).values()
              if len(pids) > 1}
    assert shared == {}, f"listening sockets inherited by other processes: {shared}"


def parent_of(pid: int) -> int:
    """The parent pid of `pid`."""
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


@pytest.mark.timeout(60)
def test_admin_port_closes_when_the_admin_dies(make_system):
    system = make_system("multiproc")
    system.spawn(Echo, "/user/a")
    pids = tagged_pids(system.tag)
    # The admin is the one process of the system whose parent is not (it double-forked away from boot).
    admins = [pid for pid in pids if parent_of(pid) not in pids]
    assert len(admins) == 1, admins
    os.kill(admins[0], signal.SIGKILL)

    def admin_port_closed() -> bool:
        # Only a refusal means closed: a socket nobody accepts on times out once its backlog is full.
        try:
            socket.create_connection(("127.0.0.1", system.admin_port), timeout=1).close()
        except ConnectionRefusedError:
            return True
        except OSError:
            pass
        return False

    wait_for(admin_port_closed, timeout=10)


# ---- secrets on command lines (issue 13, item 2a) --------------------------------------------------

def decoded_views(raw: bytes) -> list[bytes]:
    """`raw` plus every NUL- or newline-separated field of it that decodes as hex."""
    views = [raw]
    for field in raw.replace(b"\n", b"\0").split(b"\0"):
        value = field.split(b"=", 1)[-1]
        if len(value) >= 8 and len(value) % 2 == 0:
            try:
                views.append(bytes.fromhex(value.decode()))
            except ValueError:
                pass
    return views


def test_journal_password_is_on_no_command_line_or_environment(make_system, postgres_url):
    password = f"pw-{uuid.uuid4().hex}"
    user, rest = postgres_url.split("://", 1)[1].split("@", 1)
    url = f"postgresql://{user}:{password}@{rest}"  # the test server trusts local connections: any password
    system = make_system("multiproc", journal=url)
    system.spawn(Echo, "/user/a")
    assert system.ask("/user/a", Ping(1)) == Pong(1, "/user/a")
    pids = tagged_pids(system.tag)
    assert len(pids) >= 4
    for pid in pids:
        for what in ("cmdline", "environ"):
            with open(f"/proc/{pid}/{what}", "rb") as f:
                raw = f.read()
            for view in decoded_views(raw):
                assert password.encode() not in view, f"the journal password is in /proc/{pid}/{what}"
    # It did reach the system, through the pipe (status shows it redacted).
    assert system.status().config["journal"] == redact_url(url) != url


def test_another_user_cannot_read_the_secret_and_is_told_why(make_system):
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: needs root to act as user nobody")
    system = make_system("multiproc")
    path = auth.find_secret_file(system.admin_port)

    def as_nobody() -> str:  # what actors.connect would do, as user nobody
        os.setgid(65534)
        os.setuid(65534)
        auth.read_secret(path)
        return "read it"

    message = in_forked_child(as_nobody)
    assert message.startswith("SecretUnavailable: cannot read the secret file"), message
    assert "permission denied" in message and "secret_file=" in message


# ---- another user's process that claims to be a system's admin --------------------------------------

# Run as user nobody with `actors.boot --port P --run-dir D MARKER` on its command line: it writes its own
# secret to D/secret and listens on P; it acknowledges the first frame (a client's signed probe) and answers
# every later one with a pickle signed with its secret that appends to MARKER when unpickled.
FAKE_ADMIN = """
import hmac, os, pickle, socket, sys, threading
args = sys.argv[1:]
port, run_dir, marker = int(args[args.index("--port") + 1]), args[args.index("--run-dir") + 1], args[-1]
key = os.urandom(32)
fd = os.open(os.path.join(run_dir, "secret"), os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
os.write(fd, key.hex().encode() + b"\\n")
os.close(fd)

class RunCode:
    def __reduce__(self):
        return exec, (f"open({marker!r}, 'a').write('ran' + chr(10))",)

ack, body = pickle.dumps("ACK"), pickle.dumps(RunCode())
size = 64 + len(body)  # a frame as actors.auth signs it: size tag, pickle tag, pickle
signed = hmac.digest(key, b"reprise-frame %d" % size, "sha256") + hmac.digest(key, body, "sha256") + body
answers = [b"%d>" % len(ack) + ack, b"%d>" % size + signed]

def frames(conn):
    data = b""
    while True:
        while b">" not in data:
            more = conn.recv(65536)
            if not more:
                return
            data += more
        head, _, data = data.partition(b">")
        while len(data) < int(head):
            more = conn.recv(65536)
            if not more:
                return
            data += more
        data = data[int(head):]
        yield

def serve(conn):
    with conn:
        try:
            for n, _ in enumerate(frames(conn)):
                conn.sendall(answers[min(n, 1)])
        except OSError:
            pass

listener = socket.create_server(("127.0.0.1", port))
print("listening", flush=True)
while True:
    threading.Thread(target=serve, args=(listener.accept()[0],), daemon=True).start()
"""


def nobody_popen(argv: list[str]) -> subprocess.Popen | None:
    """`argv[1:]` run by the system Python as user nobody (no wrapper process), or None where impossible."""
    prefix = nobody_python()
    if prefix is None:
        return None
    return subprocess.Popen([prefix[-1], *argv], user=65534, group=65534, extra_groups=[], cwd="/",
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def nobodys_dir() -> str:
    """A new directory in the temp dir that belongs to nobody."""
    path = tempfile.mkdtemp(prefix="reprise-test-nobody-")
    os.chown(path, 65534, 65534)
    return path


@pytest.mark.timeout(120)
def test_another_users_process_claiming_an_admin_port_is_not_trusted_with_its_secret(tmp_path):
    # A client found a system's secret through the command line of any process on the machine, and root can
    # read any user's 0600 file: `reprise status` run as root signed with nobody's secret and unpickled
    # nobody's answer, which ran code as root.
    run_dir, marker, port = nobodys_dir(), tmp_path / "marker", actors.free_port()
    fake = nobody_popen(["-c", FAKE_ADMIN, "actors.boot", "--port", str(port), "--run-dir", run_dir, str(marker)])
    if fake is None:
        pytest.skip("NOT RUN: cannot run a Python as user nobody here (needs root, runuser, a system python3)")
    try:
        assert fake.stdout is not None and fake.stdout.readline() == b"listening\n"
        with pytest.raises(auth.SecretUnavailable, match="runs as uid 65534, not as this user"):
            actors.connect(port, timeout=5)
        with pytest.raises(auth.SecretUnavailable, match="belongs to uid 65534, not to this user"):
            actors.connect(port, secret_file=os.path.join(run_dir, auth.SECRET_NAME), timeout=5)
        for command in ("status", "down"):
            done = subprocess.run([sys.executable, "-m", "actors.cli", command, "--port", str(port)],
                                  capture_output=True, text=True, timeout=60)
            assert done.returncode != 0 and "runs as uid 65534" in done.stderr, (command, done.stdout, done.stderr)
        assert not marker.exists(), f"nobody's process ran code in root's client: {marker.read_text()}"
        assert fake.poll() is None  # (and it was still there to answer)
    finally:
        fake.kill()
        fake.wait()
        shutil.rmtree(run_dir, ignore_errors=True)


@pytest.mark.timeout(120)
def test_a_decoy_of_another_user_claiming_the_port_first_does_not_lock_the_owner_out(make_system):
    port, decoy_dir = actors.free_port(), nobodys_dir()
    decoy = nobody_popen(["-c", "import time; time.sleep(600)", "actors.boot", "--port", str(port),
                          "--tag", "decoy", "--run-dir", decoy_dir])
    if decoy is None:
        pytest.skip("NOT RUN: cannot run a Python as user nobody here (needs root, runuser, a system python3)")
    try:
        system = make_system("multiproc", admin_port=port)  # its processes come after the decoy in /proc
        system.spawn(Echo, "/user/a")
        assert auth.find_secret_file(port) == os.path.join(system.run_dir, auth.SECRET_NAME)
        other = actors.connect(port, timeout=10)
        try:
            assert other.ask("/user/a", Ping(1)) == Pong(1, "/user/a")
        finally:
            other.close()
        status = subprocess.run([sys.executable, "-m", "actors.cli", "status", "--port", str(port)],
                                capture_output=True, text=True, timeout=60)
        assert status.returncode == 0 and "/user/a" in status.stdout, status.stderr
        down = subprocess.run([sys.executable, "-m", "actors.cli", "down", "--port", str(port)],
                              capture_output=True, text=True, timeout=60)
        assert down.returncode == 0, down.stderr
        assert wait_for(lambda: not tagged_pids(system.tag), 20)
        assert decoy.poll() is None, "down killed another user's process"
    finally:
        decoy.kill()
        decoy.wait()
        shutil.rmtree(decoy_dir, ignore_errors=True)


def test_a_secret_file_of_another_user_is_refused_naming_its_owner(tmp_path):
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: needs root to give a file to user nobody")
    path = auth.write_secret(str(tmp_path / "s"), auth.new_secret())
    os.chown(path, 65534, 65534)
    with pytest.raises(auth.SecretUnavailable, match="belongs to uid 65534.*secret_file="):
        auth.read_secret(path)
    os.chown(path, 0, 0)
    assert len(auth.read_secret(path)) == auth.SECRET_BYTES


# ---- connect(): an admin port that does not answer the signed probe at once ------------------------

def _admin_of(system) -> int:
    pids = tagged_pids(system.tag)
    admins = [pid for pid in pids if parent_of(pid) not in pids]
    assert len(admins) == 1, admins
    return admins[0]


@pytest.mark.timeout(90)
def test_connect_to_a_stopped_admin_fails_within_its_timeout_and_says_why(make_system):
    """A frozen admin (SIGSTOP: the kernel still accepts connections) used to cost ~22 s whatever the timeout,
    then blamed the secret: Thespian's attach retried after the probe had no verdict."""
    system = make_system("multiproc")
    admin = _admin_of(system)
    os.kill(admin, signal.SIGSTOP)
    try:
        started = time.monotonic()
        with pytest.raises(actors.AskTimeout, match=r"accepted a connection but did not answer within 2 s: its "
                                                    r"admin is busy, or stopped"):
            actors.connect(system.admin_port, timeout=2)
        assert time.monotonic() - started < 5
    finally:
        os.kill(admin, signal.SIGCONT)
    client = actors.connect(system.admin_port, timeout=10)  # thawed, it answers again
    client.close()


@pytest.mark.timeout(90)
def test_an_admin_stopped_after_it_read_our_secret_is_not_blamed_on_the_secret(make_system, monkeypatch):
    """An admin that read the probe's signed frame (so the secret is right), then stopped (SIGSTOP; or went busy)
    before Thespian's attach: measured ~17.6 s, then AuthenticationFailed "not that system's secret". The SIGSTOP is
    placed in that window by wrapping the real probe (it still runs against the real admin)."""
    system = make_system("multiproc")
    admin = _admin_of(system)
    _stop_after_the_probe(admin, monkeypatch)
    try:
        with pytest.raises(actors.AskTimeout, match=r"accepted this client's secret .* but did not answer the attach "
                                                    r"that followed") as silent:
            actors.connect(system.admin_port, timeout=3)
        assert "not that system's secret" not in str(silent.value)
    finally:
        os.kill(admin, signal.SIGCONT)
    monkeypatch.undo()
    client = actors.connect(system.admin_port, timeout=10)  # thawed, it answers again
    client.close()


def _stop_after_the_probe(admin: int, monkeypatch: pytest.MonkeyPatch) -> None:
    """SIGSTOP the admin right after connect's probe (the real one, against it) saw it read our secret."""
    real = admin_probe.signed_probe

    def probe_then_stop(*args, **kwargs):  # type: ignore[no-untyped-def]
        verdict = real(*args, **kwargs)
        os.kill(admin, signal.SIGSTOP)
        return verdict

    monkeypatch.setattr(admin_probe, "signed_probe", probe_then_stop)


@pytest.mark.timeout(90)
def test_an_attach_to_an_admin_stopped_after_the_probe_ends_by_the_timeout_and_leaves_no_socket(make_system,
                                                                                                 monkeypatch):
    """Thespian's attach queries an admin for ~15 s whatever connect's timeout: `connect(port, timeout=3)` to one
    stopped right after the probe took ~17.6 s. It ends by the timeout now (bounded here by timeout + 5 s: a bound on
    a hang), and closes what it opened: its endpoint, and its connections to the admin."""
    system = make_system("multiproc")
    admin = _admin_of(system)
    before = socket_inodes()
    _stop_after_the_probe(admin, monkeypatch)
    try:
        started = time.monotonic()
        with pytest.raises(actors.AskTimeout, match=r"did not answer the attach that followed within 3 s"):
            actors.connect(system.admin_port, timeout=3)
        took = time.monotonic() - started
        left = socket_inodes() - before
    finally:
        os.kill(admin, signal.SIGCONT)
    monkeypatch.undo()
    assert took < 3 + 5, f"connect(timeout=3) took {took:.1f} s"
    assert left == set(), f"sockets left open by the failed connect: {left}"


@pytest.mark.timeout(90)
def test_an_admin_stopped_after_the_attach_is_named_stopped_within_the_timeout_not_guardianless(make_system,
                                                                                                 monkeypatch):
    """An admin stopped between Thespian's attach and connect's lookup of its node agent: `connect(timeout=3)` took
    50 s (Thespian's createActor wait) and raised Thespian's "Could not request new Actor from Admin (-SENDSTS_FAILED)".
    It ends by the timeout now (bounded here by timeout + 5 s), saying the admin stopped answering after the attach,
    and leaves no socket open."""
    system = make_system("multiproc")
    admin = _admin_of(system)
    before = socket_inodes()
    real = thespian_fixes.attach_within

    @contextlib.contextmanager
    def attach_then_stop(seconds: float):  # type: ignore[no-untyped-def]
        with real(seconds):
            yield
        if not stopped:  # (the first block is the attach; the lookup's comes next)
            stopped.append(os.kill(admin, signal.SIGSTOP))

    stopped: list[None] = []
    monkeypatch.setattr(thespian_fixes, "attach_within", attach_then_stop)
    try:
        started = time.monotonic()
        with pytest.raises(actors.AskTimeout, match=r"answered the attach, then stopped answering") as silent:
            actors.connect(system.admin_port, timeout=3)
        took = time.monotonic() - started
        left = socket_inodes() - before
    finally:
        os.kill(admin, signal.SIGCONT)
    monkeypatch.undo()
    assert stopped, "the admin was never stopped: the test missed its window"
    assert "knows no Reprise guardian" not in str(silent.value)
    assert took < 3 + 5, f"connect(timeout=3) took {took:.1f} s"
    assert left == set(), f"sockets left open by the failed connect: {left}"
    client = actors.connect(system.admin_port, timeout=10)  # thawed, it answers again
    client.close()


@pytest.mark.timeout(90)
def test_a_node_agent_that_does_not_answer_is_named_silent_not_guardianless(make_system, monkeypatch):
    """The admin answers the attach and the lookup, and then the system's other processes (the node agent among
    them) are stopped: connect said "knows no Reprise guardian: it was not started by Reprise", sending the user
    after the wrong cause. It says the node agent did not answer within the timeout now."""
    system = make_system("multiproc")
    admin = _admin_of(system)
    others = [pid for pid in tagged_pids(system.tag) if pid != admin]
    real = ActorSystem.createActor

    def look_up_then_stop(*args, **kwargs):  # type: ignore[no-untyped-def]
        agent = real(*args, **kwargs)  # (connect's lookup of the node agent, by its global name)
        for pid in others:
            os.kill(pid, signal.SIGSTOP)
        return agent

    monkeypatch.setattr(ActorSystem, "createActor", look_up_then_stop)
    try:
        with pytest.raises(actors.AskTimeout, match=r"its node agent .* did not answer within 2 s") as silent:
            actors.connect(system.admin_port, timeout=2)
    finally:
        for pid in others:
            os.kill(pid, signal.SIGCONT)
    monkeypatch.undo()
    assert "knows no Reprise guardian" not in str(silent.value)
    client = actors.connect(system.admin_port, timeout=10)  # thawed, it answers again
    client.close()


@pytest.mark.timeout(90)
def test_connect_waits_for_a_busy_admin_up_to_its_timeout(make_system):
    """An admin that answers only after several seconds (here: stopped, resumed 6 s later, past the probe's
    old 5 s limit) is attached to as soon as it answers, within connect's timeout."""
    system = make_system("multiproc")
    system.spawn(Echo, "/user/a")
    admin = _admin_of(system)
    os.kill(admin, signal.SIGSTOP)
    resume = threading.Timer(6.0, os.kill, (admin, signal.SIGCONT))
    resume.start()
    try:
        started = time.monotonic()
        client = actors.connect(system.admin_port, timeout=30)
        took = time.monotonic() - started
    finally:
        resume.join()
    try:
        assert 5.5 < took < 15, took
        assert client.ask("/user/a", Ping(1)) == Pong(1, "/user/a")
    finally:
        client.close()


@pytest.mark.timeout(60)
@pytest.mark.parametrize("answer", [b"HTTP/1.1 400 Bad Request\r\n\r\n", b""])
def test_connect_to_a_port_of_another_program_fails_at_once(tmp_path, answer):
    """A program that is no Thespian admin (it answers something else, or hangs up) is told at once, not after
    Thespian's ~14 s of retried queries."""
    secret = auth.write_secret(str(tmp_path / "secret"), auth.new_secret())
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(8)
        port = server.getsockname()[1]
        stop = threading.Event()

        def serve() -> None:
            while not stop.is_set():
                try:
                    conn, _ = server.accept()
                except OSError:
                    return
                with conn:
                    if answer:
                        conn.recv(64)
                        conn.sendall(answer)

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        started = time.monotonic()
        try:
            with pytest.raises(auth.AuthenticationFailed, match=f"the process on 127.0.0.1:{port} did not answer as "
                                                                "a Reprise admin"):
                actors.connect(port, secret_file=secret, timeout=10)
        finally:
            stop.set()
            server.shutdown(socket.SHUT_RDWR)
        assert time.monotonic() - started < 5
        thread.join(5)


# ---- Thespian's own log of a client process --------------------------------------------------------------

def test_thespian_logs_of_a_client_process_go_to_a_file_only_its_user_can_read(base, make_system, monkeypatch):
    # Thespian's default, $TMPDIR/thespian.log, is created 0644 in a directory every user shares.
    monkeypatch.delenv("THESPLOG_FILE", raising=False)
    system = make_system(base)
    probe = system.probe()
    system.spawn(Echo, "/user/echo")
    marker = f"client-log-{uuid.uuid4().hex}"
    from thespian.system import utilis

    utilis.thesplog("%s", marker, level=40)  # (what Thespian's client transport does on a failed send)
    log = utilis._thesplog_file
    assert os.path.dirname(log) == os.path.join(tempfile.gettempdir(), f"reprise-{os.getuid()}")
    directory = os.lstat(os.path.dirname(log))
    assert stat.S_ISDIR(directory.st_mode) and directory.st_uid == os.getuid()
    assert stat.S_IMODE(directory.st_mode) == 0o700 and stat.S_IMODE(os.stat(log).st_mode) == 0o600
    with open(log) as f:
        assert marker in f.read()
    shared = os.path.join(tempfile.gettempdir(), "thespian.log")
    if os.path.exists(shared):
        with open(shared, errors="replace") as f:
            assert marker not in f.read()
    # Thespian moves a log over 50 KB to .old and starts a new one: that one is this user's only too.
    old_umask = os.umask(0o022)
    try:
        size = os.stat(log).st_size
        for _ in range(1000):
            utilis.thesplog("%s", "x" * 200, level=40)
            if os.stat(log).st_size < size:
                break
            size = os.stat(log).st_size
        else:
            pytest.fail("Thespian never moved its log to .old")
        utilis.thesplog("%s", marker, level=40)
    finally:
        os.umask(old_umask)
    assert {stat.S_IMODE(os.stat(p).st_mode) for p in (log, log + ".old")} == {0o600}
    probe.tell("/user/echo", Ping(1))  # the system still answers
    assert probe.receive(timeout=30) == Pong(1, "/user/echo")


def test_a_client_log_directory_another_user_made_first_is_not_used(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    squatted = tmp_path / f"reprise-{os.getuid()}"
    squatted.mkdir()
    os.chmod(squatted, 0o777)  # open to every user
    chosen = client_log.private_dir()
    assert chosen != str(squatted) and stat.S_IMODE(os.stat(chosen).st_mode) == 0o700
    os.rmdir(squatted)
    os.symlink(tmp_path, squatted)  # a link to somewhere else
    assert client_log.private_dir() not in (str(squatted), str(tmp_path))
    os.unlink(squatted)
    if os.geteuid() == 0:
        squatted.mkdir(mode=0o700)
        os.chown(squatted, 65534, 65534)  # private, but nobody's
        assert client_log.private_dir() != str(squatted)
        os.rmdir(squatted)
    assert client_log.private_dir() == str(squatted)  # made here: this user's own, 0700


def test_every_file_of_a_run_dir_the_system_made_itself_is_private() -> None:
    # Its `.temporary` mark was 0644 (the umask's); the others were already 0600.
    system = actors.start("multiproc", tag=f"{SESSION_TOKEN}-own-run-dir-")
    try:
        files = [os.path.join(system.run_dir, name) for name in os.listdir(system.run_dir)]
        modes = {os.path.basename(f): stat.S_IMODE(os.stat(f).st_mode) for f in files if os.path.isfile(f)}
        assert ".temporary" in modes and set(modes.values()) == {0o600}, modes
    finally:
        system.shutdown()


def test_a_squatter_claiming_a_huge_frame_gets_a_probe_verdict_not_an_allocation() -> None:
    # The client's probe of an admin port read an answer of the size its header claimed in one recv(): a process
    # of another user squatting the port could make every client allocate gigabytes (MemoryError, not a verdict).
    from actors.admin_probe import Verdict, signed_probe

    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(1)

        def squat() -> None:
            conn, _ = server.accept()
            with conn:
                conn.recv(65536)
                conn.sendall(b"1000000000000>")
                conn.recv(1)  # (holds the connection until the probe gives up)

        threading.Thread(target=squat, daemon=True).start()
        assert signed_probe("127.0.0.1", server.getsockname()[1], b"s" * 32, None, 5.0) is Verdict.FOREIGN


def trickle(conns: list[socket.socket], stop: threading.Event) -> None:
    """Send each of `conns` one more byte of a request head every second until `stop` (a slowloris)."""
    while not stop.wait(1.0):
        for conn in conns:
            try:
                conn.sendall(b"X")
            except OSError:
                pass  # (closed by the endpoint: what the fix does)


@pytest.mark.timeout(120)
def test_clients_trickling_their_request_head_cannot_keep_the_metrics_port_from_scrapes(base, make_system):
    # The endpoint's 10 s limit was per read: MAX_CONNECTIONS clients sending a byte a second of a request line that
    # never ends held every slot for good, and each scrape was closed unanswered (RemoteDisconnected, 16 s on).
    from actors import metrics

    port = actors.free_port()
    make_system(base, metrics_port=port)
    assert sample(scrape(port), "reprise_status_ok") == 1
    slow = [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(metrics.MAX_CONNECTIONS)]
    stop = threading.Event()
    trickler = threading.Thread(target=trickle, args=(slow, stop), daemon=True)
    try:
        for conn in slow:
            conn.sendall(b"GET /")
        trickler.start()
        # A scrape is served while they trickle on, well past the per-read timeout.
        deadline = time.monotonic() + 2 * metrics.REQUEST_TIMEOUT
        while time.monotonic() < deadline:
            assert sample(scrape(port), "reprise_status_ok") == 1
            time.sleep(1.0)  # (a scrape interval)
    finally:
        stop.set()
        trickler.join(5)
        for conn in slow:
            conn.close()


@pytest.mark.timeout(120)
def test_a_huge_request_head_to_the_metrics_port_is_refused_before_it_is_buffered(base, make_system):
    # The endpoint buffered up to 100 header lines of 64 KiB each per connection, held while the client sent
    # no end of the head: MAX_CONNECTIONS such clients grew the process serving it by ~100 MiB (the user's own
    # process on the in-process base), and more with a trickle.
    from actors import metrics

    port = actors.free_port()
    make_system(base, metrics_port=port)
    line = b"X-Padding: " + b"a" * 60_000 + b"\r\n"
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        sent = 0
        try:
            conn.sendall(b"GET /metrics HTTP/1.1\r\n")
            # (line by line until the endpoint answers: a close with our bytes unread would reset its answer)
            while sent < 99 * len(line) and not select.select([conn], [], [], 0.05)[0]:
                conn.sendall(line)
                sent += len(line)
        except OSError:
            pass
        conn.settimeout(10)
        try:
            answer = conn.recv(4096)
        except OSError as e:
            answer = repr(e).encode()
    assert answer.startswith(b"HTTP/1.0 431 "), f"after {sent >> 10} KiB of request head: {answer[:200]!r}"
    assert str(metrics.HEAD_LIMIT).encode() in answer  # (says what the limit is)
    assert sample(scrape(port), "reprise_status_ok") == 1  # (a proper scrape still is)


def collect_one_frame(server: socket.socket, frames: list[bytes]) -> None:
    """Accept connections on `server` and keep the first whole frame sent on one (a squatter's catch)."""
    from thespian.system.transport.streamBuffer import ackMsg

    while not frames:
        try:
            conn, _ = server.accept()
        except OSError:
            return  # (closed by the test)
        with conn:
            conn.settimeout(10)
            data = b""
            try:
                while b">" not in data:
                    data += conn.recv(1) or b"!>"
                head = data[:-1]
                if not head.isdigit():
                    continue
                while len(data) < len(head) + 1 + int(head):
                    more = conn.recv(65536)
                    if not more:
                        break
                    data += more
                else:
                    frames.append(data)
                    conn.sendall(ackMsg)  # (as Thespian does: the sender's tell returns)
            except OSError:
                continue


def answer_to(ip: str, port: int, frame: bytes) -> bytes:
    """What the process on ip:port answers a frame with: Thespian's ACK, its ACK+DATAERR, or b"" (it hung up)."""
    with socket.create_connection((ip, port), timeout=10) as conn:
        conn.sendall(frame)
        try:
            return conn.recv(100)
        except OSError:
            return b""


@pytest.mark.timeout(120)
def test_a_frame_collected_on_a_dead_hosts_port_is_refused_by_every_process_of_the_system(make_system):
    # Any local user could listen on the port of a SIGKILLed host, take what was still sent there (signed with the
    # system's secret), and replay it to any process of the system, which took it (the restarted host ACKed it).
    from thespian.system.transport.streamBuffer import ackMsg

    system = make_system("multiproc")
    system.spawn(Echo, "/user/a")
    assert system.ask("/user/a", Ping(1)) == Pong(1, "/user/a")
    dead = system.status().hosts["/user/a"].pid
    ((ip, port), _), = listening_sockets([dead]).values()
    frames: list[bytes] = []
    with socket.socket() as squatter:
        squatter.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (its connections' TIME_WAIT)
        os.kill(dead, signal.SIGKILL)

        def squat() -> bool:
            try:
                squatter.bind((ip, port))
            except OSError:
                return False  # (until the dead host's socket is gone)
            return True

        wait_for(squat, timeout=10, interval=0.001)
        squatter.listen(8)
        threading.Thread(target=collect_one_frame, args=(squatter, frames), daemon=True).start()

        def caught() -> bool:
            system.tell("/user/a", Ping(2))  # (the client still knows the dead host's address: sent there)
            return bool(frames)

        wait_for(caught, timeout=20, interval=0.2)
    wait_for(lambda: system.status().hosts["/user/a"].pid not in (None, dead), timeout=30)
    assert system.ask("/user/a", Ping(3)) == Pong(3, "/user/a")
    answers = {address: answer_to(*address, frames[0]) for address in listening_addresses(tagged_pids(system.tag))}
    assert len(answers) >= 4, answers  # admin, logger, guardian, the restarted host
    assert not [address for address, answer in answers.items() if answer == ackMsg], answers


@pytest.mark.timeout(120)
def test_a_client_holding_descriptors_past_1024_connects(make_system):
    # connect()'s signed probe waited on select.select, which refuses descriptors past 1024: a client process
    # holding many files or sockets (a server; a test worker that had leaked some) failed "filedescriptor out of
    # range in select()" (a CI worker, once). Multiproc only: the local base has no admin to probe.
    import resource

    system = make_system("multiproc")
    system.spawn(Echo, "/user/echo")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 2048:
        resource.setrlimit(resource.RLIMIT_NOFILE, (min(2048, hard), hard))
    held: list[int] = []
    try:
        with open(os.devnull) as null:
            while len(held) < 1100:
                held.append(os.dup(null.fileno()))  # (the probe's sockets come after them: past 1024)
        with actors.connect(system.admin_port, timeout=10) as client:
            assert client.ask("/user/echo", Ping(7), timeout=10) == Pong(7, "/user/echo")
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))

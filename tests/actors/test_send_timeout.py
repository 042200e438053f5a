"""A client's send its host never takes: SendTimeout after the send's limit, and the client's other calls go on."""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from thespian.actors import ActorAddress
from thespian.system.messages.admin import QueryExists
from thespian.system.transport.IPBase import TCPv4ActorAddress
from thespian.system.transport.TCPTransport import LISTEN_DEPTH

import actors
from actors import auth
from actors.admin_probe import _read_frame
from actors.system import tagged_pids
from tests.actors.sample import CountsDirectories, Echo, Ping, Pong
from tests.actors.shutdown_audit_actors import Slow
from tests.waiting import dead_letters_reach, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.timeout(120)
def test_a_tell_its_host_never_takes_raises_send_timeout_and_the_client_s_other_calls_go_on(make_system):
    # System._transmit took a run of the transport that ended with its time up for "sent": such a tell returned
    # after its limit as if sent (no SendTimeout, as README promises), and, the send still pending, every later call
    # of the client waited its whole limit for it (asks and directory fetches timed out from then on).
    system = make_system("multiproc")
    system.spawn(Slow, "/user/busy")
    system.spawn(Echo, "/user/echo")
    system.tell("/user/busy", ("sleep", 600.0))  # (taken, then its host reads nothing more)
    started = time.monotonic()
    # (it names the path told, not "Batch to ActorAddr-(T|:port)")
    with pytest.raises(actors.SendTimeout,
                       match=r"str to /user/busy \(host at ActorAddr-.*\) was handed over but not acknowledged within 2 s"):
        system.tell_many([("/user/busy", "ignore")], limit=2.0)
    assert time.monotonic() - started < 10.0
    started = time.monotonic()
    assert system.ask("/user/echo", Ping(1), timeout=10) == Pong(1, "/user/echo")
    assert "/user/echo" in system.directory(timeout=10).routes
    assert time.monotonic() - started < 5.0
    system.shutdown(timeout=2.0)  # (the busy host's handler does not end: killed after 2 s, not the default 20)



def _timed_out_tells(system, path: str, count: int, limit: float) -> list[actors.SendTimeout]:
    """`count` tells to `path`, each of which must raise SendTimeout after `limit` s."""
    raised = []
    for n in range(count):
        with pytest.raises(actors.SendTimeout) as info:
            system.tell_many([(path, f"m{n}")], limit=limit)  # (Echo counts it and does not answer)
        raised.append(info.value)
    return raised


def _clean_shutdown(system, caplog) -> None:
    """Shut `system` down: within 10 s, raising nothing, with nothing left to kill."""
    tag = system.tag
    caplog.set_level(logging.WARNING, logger="reprise.system")
    started = time.monotonic()
    system.shutdown(timeout=20.0)  # (raised before: Thespian's close failed on the queued sends, and it killed)
    took = time.monotonic() - started
    assert tagged_pids(tag) == []
    assert not [r for r in caplog.records if "kill" in r.getMessage()], caplog.text  # a clean stop: nothing killed
    assert took < 10.0, f"shutdown took {took:.1f} s"


def _calls_go_on(system) -> None:
    """An ask and a tell to a healthy actor and a directory fetch answer within 5 s."""
    started = time.monotonic()
    assert system.ask("/user/echo", Ping(1), timeout=10) == Pong(1, "/user/echo")
    system.tell("/user/echo", Ping(2))
    assert "/user/echo" in system.directory(timeout=10).routes
    assert time.monotonic() - started < 5.0


@pytest.mark.timeout(180)
def test_sends_timed_out_to_a_stopped_host_hold_neither_the_client_s_other_sends_nor_its_shutdown(make_system, caplog):
    # Thespian lets a process have 20 transmits under way (MAX_PENDING_TRANSMITS) and queues the rest behind them.
    # Each tell that raised SendTimeout left its transmit under way: after 20 to a host that takes nothing, every
    # later send of the client queued behind them, to healthy actors, to the guardian (directory fetches), and the
    # shutdown's SystemShutdown to the admin; the shutdown then could only kill the system.
    system = make_system("multiproc")
    system.spawn(Echo, "/user/stuck")
    system.spawn(Echo, "/user/echo")
    assert system.ask("/user/stuck", Ping(0), timeout=10) == Pong(0, "/user/stuck")
    pid = system.status().hosts["/user/stuck"].pid
    os.kill(pid, signal.SIGSTOP)  # (the kernel still accepts its connections and data: nothing is acknowledged)
    try:
        raised = _timed_out_tells(system, "/user/stuck", 25, limit=0.2)
        assert all("m" in str(e) and "to /user/stuck" in str(e) for e in raised), raised  # not "Batch to ActorAddr"
        # The first was handed to the host's connection; the others waited behind it, and were withdrawn.
        assert [e.may_be_delivered for e in raised] == [True] + [False] * 24
        assert "may still be delivered" in str(raised[0]) and "retrying is safe" in str(raised[1]), raised[:2]
        _calls_go_on(system)
    finally:
        os.kill(pid, signal.SIGCONT)
    # What was said not sent was not: the host saw the first ask, the one it was handed, and this one.
    assert system.ask("/user/stuck", "count", timeout=10) == 3
    _clean_shutdown(system, caplog)


@pytest.mark.timeout(240)
def test_more_stopped_hosts_than_thespian_has_transmits_under_way_hold_neither_the_client_the_guardian_nor_a_host(
        make_system, caplog):
    # One transmit under way per host that takes nothing: 21 such hosts are more than Thespian's 20 a process, after
    # which every other send of that process queued behind them. The client's (a tell to each) did unless its
    # transport has no such limit; the guardian's did at its first publish (a DirectoryUpdate to each: its replies
    # to clients queued, a directory fetch or a status timed out); a host's did after a batch to each (its reply
    # to the client queued: the ask timed out).
    system = make_system("multiproc")
    stuck = [f"/user/s{n}" for n in range(21)]
    for path in stuck:
        system.spawn(Echo, path)
    system.spawn(Echo, "/user/echo")
    assert system.ask("/user/echo", Ping(0), timeout=10) == Pong(0, "/user/echo")
    hosts = system.status().hosts
    pids = [hosts[path].pid for path in stuck]
    for pid in pids:
        os.kill(pid, signal.SIGSTOP)
    try:
        for path in stuck:
            with pytest.raises(actors.SendTimeout, match=f"to {path} "):
                system.tell_many([(path, "m")], limit=0.2)
        _calls_go_on(system)
        started = time.monotonic()
        system._publish_directory(1, timeout=10)  # (a route of this client registered and dropped: 2 publishes)
        assert len(system.status(timeout=10).hosts) == 22
        system.tell_many([("/user/echo", ("fwd", path, "from echo")) for path in stuck])
        assert system.ask("/user/echo", Ping(3), timeout=10) == Pong(3, "/user/echo")
        assert time.monotonic() - started < 10.0  # (the status waits 2 s for the hosts that do not answer)
    finally:
        for pid in pids:
            os.kill(pid, signal.SIGCONT)
    # Nothing was lost meanwhile: each stopped host has the client's tell and echo's.
    assert system.ask("/user/s20", "count", timeout=10) == 3
    _clean_shutdown(system, caplog)


@pytest.mark.timeout(180)
def test_the_guardian_goes_on_answering_after_20_publishes_while_one_host_takes_nothing(make_system, caplog):
    # The guardian sends each running host a DirectoryUpdate at every publish (a client's reply route registered or
    # dropped, a spawn, a stop) and a GetHostStats at every status: a host stopped (or busy in one long handler)
    # took none of them, and after 20 every send of the guardian queued behind them, for every process: after 6
    # actors.connect()s (a status and 2 publishes each) it answered no request of any client until that host
    # took them or Thespian's transmits timed out (5 minutes).
    system = make_system("multiproc")
    system.spawn(Echo, "/user/stuck")
    system.spawn(Echo, "/user/echo")
    assert system.ask("/user/echo", Ping(0), timeout=10) == Pong(0, "/user/echo")
    pid = system.status().hosts["/user/stuck"].pid
    os.kill(pid, signal.SIGSTOP)
    try:
        started = time.monotonic()
        system._publish_directory(12, timeout=10)  # 24 publishes
        assert time.monotonic() - started < 10.0
        _calls_go_on(system)
        assert system.status(timeout=10).hosts["/user/echo"].state == "running"
        system.tell("/user/nobody", Ping(4))  # (through the guardian: a dead letter)
        dead_letters_reach(system, 1)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert system.ask("/user/stuck", Ping(5), timeout=10) == Pong(5, "/user/stuck")
    _clean_shutdown(system, caplog)


@pytest.mark.timeout(180)
def test_a_host_that_took_nothing_during_60_publishes_installs_only_the_newest_directory_after_them(
        base, make_system):
    # Each publish sent every host a DirectoryUpdate (a full snapshot of the routes); one that took nothing had them
    # all queued at the guardian, pickled, until it read again (or for 5 minutes), and then installed every stale
    # one, in order, before the current one (1,000 publishes: 14 s of them; the guardian's 1,000 took 16 s instead
    # of 2.6). Now one is under way to it and the newest waits (actors/superseding.py). The in-process base has
    # nothing under way: its host installs each.
    system = make_system(base)
    system.spawn(CountsDirectories, "/user/stuck")
    system.spawn(Echo, "/user/echo")
    assert system.ask("/user/stuck", Ping(0), timeout=10) == Pong(0, "/user/stuck")
    before = system.ask("/user/stuck", "epochs", timeout=10)
    pid = _stop(system, "/user/stuck") if base == "multiproc" else None
    try:
        system._publish_directory(30, timeout=30)  # 60 publishes
        _calls_go_on(system)
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGCONT)
    newest = system.directory(timeout=10).epoch

    def caught_up():
        epochs = system.ask("/user/stuck", "epochs", timeout=10)[len(before):]
        return epochs if epochs and epochs[-1] == newest else None

    installed = wait_for(caught_up, timeout=30)
    assert installed == sorted(installed), installed  # (never an older one after a newer)
    if base == "multiproc":
        # The one handed over before it stopped, and the newest: none of the 58 in between.
        assert len(installed) <= 2, f"{len(installed)} directories installed after the publishes: {installed}"
    else:
        assert len(installed) >= 60, installed


@pytest.mark.timeout(180)
def test_what_the_guardian_sends_a_host_after_publishes_comes_after_the_newest_directory_it_published(make_system):
    # Only the newest DirectoryUpdate waits behind the one under way to a host that takes nothing; a message the
    # guardian sent the host afterwards (a status request here; an ActorExitRequest sent "after the new routes" in
    # the guardian) went ahead of it, and the host handled it on the routes of before the publishes.
    system = make_system("multiproc")
    system.spawn(CountsDirectories, "/user/stuck")
    system.spawn(Echo, "/user/echo")
    assert system.ask("/user/stuck", Ping(0), timeout=10) == Pong(0, "/user/stuck")
    answered_before = len(system.ask("/user/stuck", "stats epochs", timeout=10)) + 1  # (+ _stop's own status)
    pid = _stop(system, "/user/stuck")
    try:
        system._publish_directory(10, timeout=30)
        newest = system.directory(timeout=10).epoch
        system.status()  # (its GetHostStats to the stopped host waits; the status gives up on that host)
    finally:
        os.kill(pid, signal.SIGCONT)
    answered = wait_for(lambda: system.ask("/user/stuck", "stats epochs", timeout=10)[answered_before:], timeout=30)
    assert answered == [newest], f"the host answered the status on the directory of epoch {answered}, not {newest}"


@pytest.mark.timeout(180)
def test_a_shutdown_while_a_host_still_takes_nothing_raises_nothing_and_stops_the_other_processes(make_system, caplog):
    # With more than 20 sends of the client under way to the stopped host (the rest queued), Thespian's close of
    # the client's transport raised "dictionary changed size during iteration": shutdown took it for an
    # interruption, raised it, and killed every process of the system (its SystemShutdown had never left either).
    system = make_system("multiproc")
    system.spawn(Echo, "/user/stuck")
    system.spawn(Echo, "/user/echo")
    hosts = system.status().hosts
    stuck, echo = hosts["/user/stuck"].pid, hosts["/user/echo"].pid
    os.kill(stuck, signal.SIGSTOP)
    try:
        for n in range(22):  # (what each raises is the test above's business: here, that shutdown comes after)
            with pytest.raises(actors.RepriseError):
                system.tell_many([("/user/stuck", f"m{n}")], limit=0.2)
        tag = system.tag
        caplog.set_level(logging.WARNING, logger="reprise.system")
        started = time.monotonic()
        system.shutdown(timeout=5.0)
        took = time.monotonic() - started
    finally:
        os.kill(stuck, signal.SIGCONT)  # (killed by then: SIGKILL ends a stopped process too)
    assert tagged_pids(tag) == []
    assert took < 12.0, f"shutdown took {took:.1f} s"
    assert not [r for r in caplog.records if "interrupted" in r.getMessage()], caplog.text
    # The admin had the SystemShutdown: the other host stopped by itself; only what waits for the stopped one is left.
    killed = [pid for r in caplog.records if "left processes" in r.getMessage() for pid in r.args[1]]
    assert stuck in killed and echo not in killed, caplog.text


def _attached_without_answering(admin_port: int) -> list[socket.socket]:
    """What a client stopped mid-attach leaves the admin: its QueryExists read, the QueryAck to its (listening)
    address unacknowledged for good. The sockets to keep open meanwhile."""
    secret = auth.read_secret(auth.find_secret_file(admin_port))
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)  # (never accepted, never read)
    conn = socket.create_connection(("127.0.0.1", admin_port), timeout=10)
    me = ActorAddress(TCPv4ActorAddress("127.0.0.1", listener.getsockname()[1], external=True))
    body = auth.sign(secret, (me, QueryExists()), admin_port)
    conn.sendall(b"%d>" % len(body) + body)
    assert _read_frame(conn, time.monotonic() + 10) is not None  # (the admin's ACK: the QueryAck follows)
    return [listener, conn]


@pytest.mark.timeout(180)
def test_21_clients_stopped_mid_attach_hold_neither_another_client_s_attach_nor_the_shutdown(make_system, caplog):
    # The admin keeps Thespian's 20 transmits under way: its QueryAck to each client that stopped reading mid-attach
    # (SIGSTOPped, or its machine gone) stayed under way, and after 20 it answered nothing more: another process's
    # connect() failed after 17 s, said AuthenticationFailed ("not that system's secret"), and the shutdown's
    # SystemShutdown queued too: it killed the system after 20 s.
    system = make_system("multiproc")
    system.spawn(Echo, "/user/echo")
    held = []
    try:
        for _ in range(21):
            held += _attached_without_answering(system.admin_port)
        code = "import actors, sys; actors.connect(int(sys.argv[1]), timeout=20).close(); print('attached')"
        done = subprocess.run([sys.executable, "-c", code, str(system.admin_port)], cwd=ROOT, capture_output=True,
                              text=True, timeout=90)
        assert done.stdout.strip() == "attached", done.stdout + done.stderr
        _calls_go_on(system)
        _clean_shutdown(system, caplog)
    finally:
        for each in held:
            each.close()


def _stop(system, path: str) -> int:
    """SIGSTOP the process of the host at `path` (the kernel still accepts its connections and data); its pid."""
    pid = system.status().hosts[path].pid
    os.kill(pid, signal.SIGSTOP)
    return pid


@pytest.mark.timeout(120)
def test_a_message_its_stopped_host_took_only_part_of_is_withdrawn_and_said_not_sent(make_system):
    # SendTimeout said may_be_delivered=True for a message still being written when its limit came (more than the
    # socket buffers of both ends hold), and left it under way: written whole once the host read again, and
    # delivered. It is now withdrawn (the host drops the part it has: a frame cut short) and said not sent.
    system = make_system("multiproc")
    system.spawn(Echo, "/user/stuck")
    system.spawn(Echo, "/user/echo")
    assert system.ask("/user/stuck", Ping(0), timeout=10) == Pong(0, "/user/stuck")  # (a connection to it open)
    pid = _stop(system, "/user/stuck")
    try:
        with pytest.raises(actors.SendTimeout) as info:
            system.tell_many([("/user/stuck", b"x" * (64 << 20))], limit=2.0)
        assert info.value.may_be_delivered is False, info.value
        assert "retrying is safe" in str(info.value) and "withdrawn" in str(info.value), info.value
        # Nothing of this client is under way to that host any more: the next message is handed over at once.
        with pytest.raises(actors.SendTimeout) as info:
            system.tell_many([("/user/stuck", "small")], limit=0.5)
        assert info.value.may_be_delivered is True, info.value
        _calls_go_on(system)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert system.ask("/user/stuck", "count", timeout=10) == 3  # Ping(0), "small" and this one: not the big one


@pytest.mark.timeout(120)
def test_a_message_whose_connection_never_completed_is_withdrawn_and_said_not_sent(make_system):
    # A stopped host whose listen queue is full: the kernel drops new connections' SYNs, so nothing of the message
    # was sent when its limit came; SendTimeout said may_be_delivered=True, and left it connecting.
    system = make_system("multiproc")
    system.spawn(Echo, "/user/stuck")
    system.spawn(Echo, "/user/echo")
    host, port = system.directory().routes["/user/stuck"].addressDetails.connectArgs[0]
    pid = _stop(system, "/user/stuck")
    fillers = []
    try:
        for _ in range(LISTEN_DEPTH + 20):  # (Thespian's listen depth; the kernel queues one more)
            filler = socket.socket()
            filler.setblocking(False)
            filler.connect_ex((host, port))
            fillers.append(filler)
        with pytest.raises(actors.SendTimeout) as info:
            system.tell_many([("/user/stuck", "never sent")], limit=1.0)
        assert info.value.may_be_delivered is False, info.value
        assert "did not complete" in str(info.value), info.value
        _calls_go_on(system)
    finally:
        for filler in fillers:
            filler.close()
        os.kill(pid, signal.SIGCONT)
    assert system.ask("/user/stuck", "count", timeout=10) == 1  # this one alone


@pytest.mark.timeout(120)
def test_a_message_whose_tell_timed_out_reaches_its_host_s_next_process_when_the_stopped_one_is_killed(
        make_system, caplog):
    # Its tell raised SendTimeout (may_be_delivered=True); the host was then killed: its transmit failed later, in
    # another call, and nobody heard of it (the message lost, silently). It is now rerouted through the guardian,
    # as a tell that finds the host's process gone is: the host's next process has it.
    caplog.set_level(logging.INFO, logger="reprise.system")
    system = make_system("multiproc")
    system.spawn(Echo, "/user/stuck")
    probe = system.probe()
    pid = _stop(system, "/user/stuck")
    with pytest.raises(actors.SendTimeout) as info:
        system.tell_many([("/user/stuck", Ping(7))], sender=probe.path, limit=0.5)
    assert info.value.may_be_delivered is True, info.value
    os.kill(pid, signal.SIGKILL)
    assert probe.receive(timeout=20) == Pong(7, "/user/stuck")
    assert system.status().hosts["/user/stuck"].pid != pid
    assert any("Ping to /user/stuck" in r.getMessage() and "rerouted through the guardian" in r.getMessage()
               for r in caplog.records), caplog.text


@pytest.mark.timeout(120)
def test_a_message_whose_tell_timed_out_and_that_the_transport_then_gives_up_is_logged_as_a_warning(make_system):
    # Thespian gives a transmit up when no acknowledgement came within its transmit period (5 minutes; 3 s here): a
    # message whose tell had raised SendTimeout ended so, and nobody heard of it. The client now logs a warning that
    # names it, its path and its earlier SendTimeout (its host has it only if it reads it yet: it was written whole).
    system = make_system("multiproc")
    system.spawn(Echo, "/user/stuck")
    system.spawn(Echo, "/user/echo")
    pid = _stop(system, "/user/stuck")
    try:
        done = subprocess.run([sys.executable, "-m", "tests.actors.late_failure_script", str(system.admin_port)],
                              cwd=ROOT, env={**os.environ, "THESPIAN_TRANSMIT_TIMEOUT_PERIOD": "0:03"},
                              capture_output=True, text=True, timeout=90)
    finally:
        os.kill(pid, signal.SIGCONT)
    lines = done.stdout.splitlines()
    assert lines[:1] == ["timed out True"], done.stdout + done.stderr
    assert len(lines) == 2 and lines[1].startswith("warned Ping to /user/stuck"), done.stdout + done.stderr
    assert "raised SendTimeout" in lines[1] and "given up" in lines[1], lines[1]

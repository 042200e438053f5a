"""System.status(): hosts as the guardian sees them, plus what each host reports about its actors."""

from __future__ import annotations

import os
import signal
import time

import pytest

import actors
from actors.guardian import _is_running_here
from tests.actors.sample import Counting, Echo, Ping, Pong
from tests.waiting import wait_for


def test_status_reports_alive_actors_and_summed_counters(system):
    system.spawn(Counting, path="/user/counters", entities=True)
    system.spawn(Echo, path="/user/echo")
    for i, n in enumerate((2, 3, 0)):
        assert system.ask(f"/user/counters/{i}", ("pending", n)) == "ok"

    hosts = system.status().hosts

    assert hosts["/user/counters"].alive == 3
    assert hosts["/user/counters"].counters == {"pending": 5}
    assert hosts["/user/echo"].alive == 1
    assert hosts["/user/echo"].counters == {}
    assert all(h.state == "running" for h in hosts.values())


def test_status_of_a_system_without_hosts_answers_at_once(system):
    status = system.status(timeout=5)
    assert status.hosts == {}
    assert status.dead_letters == 0


def test_connected_client_sees_the_same_status(make_system):
    system = make_system("multiproc")  # only a multi-process system can be attached to
    system.spawn(Counting, path="/user/counters", entities=True)
    system.ask("/user/counters/a", ("pending", 7))
    client = actors.connect(system.admin_port)
    try:
        assert client.status().hosts["/user/counters"].counters == {"pending": 7}
    finally:
        client.close()


def test_guardian_pid_directory_and_forced_publishes(system):
    """status() names the guardian's process; directory() is the guardian's routes; _publish_directory(n)
    (bench.cluster's, not public) makes 2 n publishes (the epoch counts them) and leaves the routes as they
    were (both bases)."""
    system.spawn(Echo, path="/user/echo")
    status = system.status()
    if system.base == "local":
        assert status.guardian_pid == os.getpid()
    else:
        assert status.guardian_pid not in (os.getpid(), status.hosts["/user/echo"].pid)
        assert os.path.exists(f"/proc/{status.guardian_pid}")
    before = system.directory()
    assert "/user/echo" in before.routes

    system._publish_directory(3)

    after = system.directory()
    assert after.epoch == before.epoch + 6
    assert after.routes.keys() == before.routes.keys()
    assert system.ask("/user/echo", Ping(1)) == Pong(1, "/user/echo")  # the host took them and still answers


def _dead(pid: int) -> bool:
    """True once `pid` has exited (gone from /proc, or a zombie its parent has not reaped yet)."""
    return not _is_running_here(pid)


def test_a_stopped_host_has_no_pid(system):
    """A host whose process is gone shows pid None, not the pid it had (both bases)."""
    system.spawn(Echo, path="/user/echo")
    pid = system.status().hosts["/user/echo"].pid
    assert pid == os.getpid() if system.base == "local" else pid not in (None, os.getpid())
    system.stop("/user/echo")
    host = system.status().hosts["/user/echo"]
    assert (host.state, host.pid) == ("stopped", None)


@pytest.mark.multiproc
@pytest.mark.timeout(60)
def test_status_never_shows_a_sigkilled_host_process_again(make_system):
    """From the moment a host's process has died, status() shows it restarting with no pid (or its new
    process's), never the dead one's: that pid may already be another process's."""
    system = make_system("multiproc")
    system.spawn(Echo, path="/user/echo", backoff=(1.0, 1.0, 0))
    old = wait_for(lambda: (h := system.status().hosts["/user/echo"]).state == "running" and h.pid, 30)

    os.kill(old, signal.SIGKILL)
    wait_for(lambda: _dead(old), 10)
    seen = []
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        host = system.status().hosts["/user/echo"]
        seen.append((host.state, host.pid))
        assert host.pid != old, seen
        if host.state == "running":
            break
        assert host.pid is None, seen  # backoff, then restarting until its new process is ready
    else:
        raise AssertionError(f"the host did not run again within 30 s: {seen}")
    assert host.pid is not None and not _dead(host.pid)
    assert ("backoff", None) in seen  # the backoff of 1 s is long enough to be seen
    assert system.ask("/user/echo", Ping(1)) == Pong(1, "/user/echo")

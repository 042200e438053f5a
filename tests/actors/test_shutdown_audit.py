"""Shutdown paths a user takes (`with` block, `shutdown()`, Ctrl-C, other threads) and what they must guarantee:
bounded in time, no process left, nothing acknowledged lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time

import pytest

import actors
from actors.system import kill_tagged, tagged_pids
from tests.actors.sample import After, Ticker
from tests.actors.shutdown_audit_actors import Counter, Slow
from tests.conftest import SESSION_TOKEN
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.timeout(120)
def test_a_second_ctrl_c_during_a_with_block_s_shutdown_leaves_no_process_running(tmp_path):
    # The first Ctrl-C ends the `with` block, whose shutdown waits for a host busy in a long handler; a second
    # Ctrl-C interrupted that wait and left the whole system running (admin, guardian, hosts), holding its port
    # and journal with nobody to stop it, and the System's shutdown() had become a no-op.
    tag = f"{SESSION_TOKEN}-ctrl-c-{os.getpid()}"
    script = subprocess.Popen([sys.executable, "-m", "tests.actors.shutdown_audit_script", tag, str(tmp_path / "run")],
                              cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        idle_pid = int(script.stdout.readline())
        assert script.stdout.readline().strip() == "ready"
        script.send_signal(signal.SIGINT)
        # The shutdown has begun once the idle host has exited; the busy one is still in its handler.
        wait_for(lambda: idle_pid not in tagged_pids(tag), timeout=30)
        assert tagged_pids(tag), "the busy host should still be running when the second Ctrl-C comes"
        script.send_signal(signal.SIGINT)
        output = script.communicate(timeout=30)[0]
        assert "KeyboardInterrupt" in output
        assert tagged_pids(tag) == [], output
    finally:
        script.kill()
        script.wait()
        kill_tagged(tag)


@pytest.mark.timeout(120)
def test_shutdown_returns_within_its_timeout_when_a_handler_does_not_end(make_system):
    # shutdown(timeout=1) first waited Thespian's own 10 s for the admin's answer, then `timeout` more, then killed.
    system = make_system("multiproc")
    system.spawn(Slow, "/user/busy")
    system.tell("/user/busy", ("sleep", 600.0))
    tag = system.tag
    started = time.monotonic()
    system.shutdown(timeout=1.0)
    took = time.monotonic() - started
    assert tagged_pids(tag) == []
    assert took < 9.0, f"shutdown(timeout=1) took {took:.1f} s"  # (~1 s, then the kill; 11 s and more before)


def test_a_second_thread_s_shutdown_returns_only_once_the_system_is_down(base, make_system):
    # A shutdown called while another thread's shutdown was under way returned at once: its caller went on (to
    # start the system again on the same port and journal, say) while the first was still stopping it.
    system = make_system(base)
    system.spawn(Slow, "/user/busy")
    system.tell("/user/busy", ("sleep", 2.0))
    first = threading.Thread(target=system.shutdown)
    first.start()
    wait_for(lambda: system._closed, timeout=10, interval=0.001)
    system.shutdown()
    still_running = first.is_alive()
    first.join(60)
    assert not still_running, "the second shutdown returned while the first was still stopping the system"
    if system.tag:
        assert tagged_pids(system.tag) == []


def test_a_shutdown_from_another_thread_ends_an_ask_waiting_in_this_one(base, make_system):
    # The shutdown waited for the ask's whole timeout (the ask held the client's lock while waiting).
    system = make_system(base)
    system.spawn(Slow, "/user/silent")
    outcome: list[BaseException] = []

    def ask() -> None:
        try:
            system.ask("/user/silent", "ignore", timeout=600.0)
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            outcome.append(e)

    asking = threading.Thread(target=ask, daemon=True)
    asking.start()
    wait_for(lambda: any("/ask-" in p for p in system._listening_paths), timeout=10)
    stopping = threading.Thread(target=system.shutdown, daemon=True)
    stopping.start()
    stopping.join(60)
    asking.join(10)
    assert not stopping.is_alive(), "shutdown waited for the other thread's ask"
    assert len(outcome) == 1 and isinstance(outcome[0], actors.SystemNotRunning), outcome
    assert "shut down" in str(outcome[0])
    if system.tag:
        assert tagged_pids(system.tag) == []


def test_a_send_that_a_shutdown_in_another_thread_overtakes_after_its_check_raises_system_not_running(make_system):
    # Under load the asking thread passed its running check, then the other thread's shutdown stopped the
    # transport before its transmit: AttributeError ('NoneType' object has no attribute 'transport') instead of
    # SystemNotRunning (2 of 7 loaded runs of the test above). The transmit is what the two threads race to.
    system = make_system("multiproc")
    guardian = system._guardian
    system.shutdown()
    with pytest.raises(actors.SystemNotRunning, match="shut down"):
        system._transmit(guardian, "hello")


@pytest.mark.timeout(180)
def test_a_shutdown_from_another_thread_ends_a_tell_held_by_a_host_that_takes_nothing(make_system):
    # A tell to a host that takes nothing (busy in a long handler; or stopped) waits for the host's acknowledgement,
    # holding the client's lock: a shutdown from another thread waited behind it for the tell's whole SEND_LIMIT
    # (60 s), and the tell then raised SendTimeout. (Multiproc only: on the in-process base a tell runs the
    # receiver's handler in the telling thread, and nothing can be held back or ended from another.)
    system = make_system("multiproc")
    system.spawn(Slow, "/user/busy")
    system.tell("/user/busy", ("sleep", 600.0))  # (taken, then its host reads nothing more)
    tag = system.tag
    outcome: list[BaseException] = []
    told = [time.monotonic()]

    def tell() -> None:
        try:
            while True:
                told[0] = time.monotonic()
                system.tell("/user/busy", "ignore")
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            outcome.append(e)

    telling = threading.Thread(target=tell, daemon=True)
    telling.start()
    wait_for(lambda: time.monotonic() - told[0] > 1.0, timeout=30)  # a tell is held
    started = time.monotonic()
    failed: list[BaseException] = []

    def shutdown() -> None:
        try:
            system.shutdown(timeout=2.0)
        except BaseException as e:  # noqa: BLE001 - the test looks at it
            failed.append(e)

    stopping = threading.Thread(target=shutdown, daemon=True)
    stopping.start()
    telling.join(90)
    stopping.join(90)
    took = time.monotonic() - started
    assert not telling.is_alive() and not stopping.is_alive()
    assert took < 15.0, f"the shutdown took {took:.1f} s (it waited behind the held tell)"
    # (Thespian's close of a transport with that send pending raised: the shutdown failed, its system killed)
    assert failed == []
    assert len(outcome) == 1 and isinstance(outcome[0], actors.SystemNotRunning), outcome
    assert "shut down" in str(outcome[0]) and "not sent" in str(outcome[0]), outcome[0]
    assert tagged_pids(tag) == []


@pytest.mark.timeout(180)
def test_a_shutdown_right_after_a_burst_of_persists_keeps_every_acknowledged_event_and_no_hole(make_system, tmp_path):
    # What was examined and found sound: the hosts drop the messages still queued at the shutdown (never handled,
    # never acknowledged), but write every event whose handler ran, and each entity's events are a prefix of what
    # was sent to it (nothing half-applied).
    journal = f"sqlite:///{tmp_path / 'j.db'}"
    system = make_system("multiproc", journal=journal)
    system.spawn(Counter, "/user/c", entities=True, shards=2)
    acks = system.probe("acks")
    entities, per_entity = 10, 200
    system.tell_many([(f"/user/c/{e}", ("add", n)) for n in range(per_entity) for e in range(entities)],
                     sender=acks.path)
    acked: dict[str, int] = {}
    for _ in range(entities * per_entity // 4):
        _, path, n = acks.receive(60)
        acked[path] = max(acked.get(path, -1), n)
    system.shutdown()

    again = make_system("multiproc", journal=journal)
    again.spawn(Counter, "/user/c", entities=True, shards=2)
    for e in range(entities):
        path = f"/user/c/{e}"
        recovered = again.ask(path, "get", timeout=60)
        assert recovered == list(range(len(recovered))), path
        assert acked.get(path, -1) < len(recovered), path


BUSY_TOPOLOGY = """
[[actor]]
path = "/user/busy"
class = "tests.actors.shutdown_audit_actors:Slow"

[[actor]]
path = "/user/idle"
class = "tests.actors.shutdown_audit_actors:Slow"
"""


@pytest.mark.timeout(120)
def test_a_second_sigterm_during_reprise_up_s_shutdown_leaves_no_process_running(tmp_path):
    # `reprise up` in the foreground (under systemd, say) shuts down on SIGTERM; a second SIGTERM while that
    # shutdown waited for a busy host left the system running after `up` had exited.
    topology = tmp_path / "busy.toml"
    topology.write_text(BUSY_TOPOLOGY)
    tag = f"{SESSION_TOKEN}-up-sigterm-{os.getpid()}"
    port = actors.free_port()
    # (the CLI of this checkout: the installed console script imports the one it was installed from)
    reprise = [sys.executable, "-m", "actors.cli"]
    up = subprocess.Popen([*reprise, "up", str(topology), "--port", str(port), "--tag", tag], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        for line in up.stdout:
            if line.startswith("running"):
                break
        with actors.connect(port) as client:
            idle_pid = client.status().hosts["/user/idle"].pid
            client.tell("/user/busy", ("sleep", 600.0))
            assert client.ask("/user/idle", "threads", timeout=30)[0] == "threads"
        up.send_signal(signal.SIGTERM)
        wait_for(lambda: idle_pid not in tagged_pids(tag), timeout=30)
        assert tagged_pids(tag), "the busy host should still be running when the second SIGTERM comes"
        up.send_signal(signal.SIGTERM)
        output = up.communicate(timeout=30)[0]
        assert up.returncode != 0, output
        assert tagged_pids(tag) == [], output
    finally:
        up.kill()
        up.wait()
        kill_tagged(tag)


def test_a_second_start_in_the_run_dir_of_a_running_system_is_refused_and_leaves_it_reachable(make_system):
    # The second system started, overwrote the first's secret in the shared run dir, and from then on no client
    # could reach the first one: `reprise down --port N` and connect(N) failed with AuthenticationFailed.
    first = make_system("multiproc")
    run_dir = first.run_dir
    with open(os.path.join(run_dir, "secret"), "rb") as f:
        secret = f.read()
    second = None
    try:
        with pytest.raises(actors.SpawnFailed, match=f"run dir of the actor system running on admin port "
                                                     f"{first.admin_port}.*choose another run_dir"):
            # (the same directory by another spelling)
            second = actors.start("multiproc", run_dir=os.path.join(run_dir, "..", os.path.basename(run_dir)),
                                  tag=f"{SESSION_TOKEN}-second-{os.getpid()}")
    finally:
        if second is not None:
            second.shutdown()
    with open(os.path.join(run_dir, "secret"), "rb") as f:
        assert f.read() == secret
    with actors.connect(first.admin_port, timeout=10) as client:
        assert client.status().hosts == {}


@pytest.mark.parametrize("entity", [True, False], ids=["entity", "top-level"])
def test_a_stopped_actor_s_repeating_timer_never_ticks_into_the_next_instance_at_its_path(system, entity):
    # Examined and sound: a stop cancels the actor's timers (an entity's in its host, a top-level actor's with its
    # process), and a tick already due is dropped by its incarnation; the new instance gets only its own.
    path = "/user/t/1" if entity else "/user/t"
    system.spawn(Ticker, "/user/t", entities=entity)
    old = system.probe("old")
    system.tell(path, After(0.01, old.path, repeat=True))
    assert old.receive_many(3, timeout=10) == [("tick", 1), ("tick", 2), ("tick", 3)]
    system.stop(path if entity else "/user/t")
    if not entity:
        system.spawn(Ticker, "/user/t")
    new = system.probe("new")
    system.tell(path, After(3600.0, new.path))  # (it reports every tick it gets to `new`; its own is far off)
    assert system.ask(path, "cancel", timeout=10) == "cancelled"
    new.expect_no_message(0.5)

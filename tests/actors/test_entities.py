"""Entity hosts: created on first message, passivated when idle, restarted on failure, stopped after too many."""

from __future__ import annotations

import os
import signal
import threading

import pytest

import actors
from actors.host import Host
from actors.messages import GUARDIAN_PATH, HostSpec, InitHost
from tests.actors.sample import Echo, Lifecycle, MarksItsStop
from tests.waiting import dead_letters_reach, wait_for


def test_each_entity_path_gets_its_own_instance(system):
    system.spawn(Echo, "/user/e", entities=True)
    for _ in range(3):
        system.tell("/user/e/1", "x")
    assert system.ask("/user/e/1", "count") == 4
    assert system.ask("/user/e/2", "count") == 1


def test_entity_ids_are_one_segment(system):
    system.spawn(Echo, "/user/e", entities=True)
    system.tell("/user/e/1/deeper", "x")
    letters = dead_letters_reach(system, 1)
    assert letters.count == 1 and "one path segment" in letters.recent[0].reason


def test_idle_entities_are_passivated_and_recreated_on_demand(system):
    probe = system.probe()
    system.spawn(Lifecycle, "/user/l", entities=True, args=(probe.path,), passivate_after=0.2)
    probe.tell("/user/l/1", "hello")
    assert probe.receive() == ("started", "/user/l/1")
    assert probe.receive() == ("got", "hello")
    # Nothing is sent to it: within about passivate_after (+ half of it for the sweep) it stops.
    assert probe.receive(timeout=3) == ("stopped", "/user/l/1")
    probe.tell("/user/l/1", "again")
    assert probe.receive() == ("started", "/user/l/1")
    assert probe.receive() == ("got", "again")


def test_failing_entity_is_restarted_as_a_new_instance(system):
    system.spawn(Echo, "/user/e", entities=True)
    system.tell("/user/e/1", "x")
    assert system.ask("/user/e/1", "count") == 2
    system.tell("/user/e/1", "boom")
    # A fresh instance: its counter starts again (the failing message is not redelivered).
    assert system.ask("/user/e/1", "count") == 1
    # Its neighbour was not affected.
    system.tell("/user/e/2", "x")
    assert system.ask("/user/e/2", "count") == 2


def test_too_many_restarts_stop_the_entity(system):
    probe = system.probe()
    system.spawn(Lifecycle, "/user/l", entities=True, args=(probe.path,), max_restarts=2)
    probe.tell("/user/l/1", "hi")
    assert probe.receive_many(2) == [("started", "/user/l/1"), ("got", "hi")]
    for _ in range(3):
        probe.tell("/user/l/1", "boom")
    # Each restart: pre_restart -> post_stop ("stopped"), post_restart -> pre_start ("started").
    events = probe.receive_many(5)
    assert events == [("stopped", "/user/l/1"), ("started", "/user/l/1")] * 2 + [("stopped", "/user/l/1")]
    probe.expect_no_message(0.3)


def test_top_level_actor_stopping_itself_frees_its_path(system):
    probe = system.probe()
    system.spawn(Lifecycle, "/user/solo", args=(probe.path,))
    assert probe.receive() == ("started", "/user/solo")
    probe.tell("/user/solo", "stop")
    assert probe.receive_many(2) == [("got", "stop"), ("stopped", "/user/solo")]
    assert wait_for(lambda: system.status().hosts["/user/solo"].state == "stopped")


def test_stop_of_one_entity_runs_post_stop(system):
    probe = system.probe()
    system.spawn(Lifecycle, "/user/l", entities=True, args=(probe.path,))
    probe.tell("/user/l/9", "hi")
    assert probe.receive_many(2) == [("started", "/user/l/9"), ("got", "hi")]
    system.stop("/user/l/9")
    assert probe.receive() == ("stopped", "/user/l/9")


def test_stop_of_one_entity_returns_once_it_has_stopped(system, tmp_path):
    """system.stop(entity) returns after the entity's post_stop ran (here a second long), so a message
    sent after it finds a new instance; stopping an entity that is not running returns too."""
    system.spawn(MarksItsStop, "/user/m", entities=True, args=(str(tmp_path),))
    assert system.ask("/user/m/7", "count") == 1
    system.stop("/user/m/7")
    assert (tmp_path / "7").exists(), "stop() returned before the entity's post_stop ran"
    assert system.ask("/user/m/7", "count") == 1, "a new instance answers"
    system.stop("/user/m/never-started")
    assert not (tmp_path / "never-started").exists()


@pytest.mark.parametrize("base", ["multiproc"])
def test_stop_of_an_entity_whose_host_is_killed_meanwhile_returns(system, tmp_path):
    """The host dies during the entity's post_stop: stop() returns once the guardian sees the process gone
    (the entity is gone with it), not after its timeout."""
    system.spawn(MarksItsStop, "/user/m", entities=True, args=(str(tmp_path),))
    assert system.ask("/user/m/7", "count") == 1
    pid = system.status().hosts["/user/m"].pid
    killer = threading.Timer(0.2, os.kill, (pid, signal.SIGKILL))  # during the one-second post_stop
    killer.start()
    try:
        system.stop("/user/m/7", timeout=20)  # raises AskTimeout if nobody answers
    finally:
        killer.join()
    assert not (tmp_path / "7").exists(), "the host was killed before its post_stop ended"
    assert wait_for(lambda: system.status().hosts["/user/m"].pid not in (None, pid), 30)
    assert system.ask("/user/m/7", "count") == 1


@pytest.mark.timeout(120)
def test_many_entities_in_one_host(system):
    n = 5_000
    system.spawn(Echo, "/user/many", entities=True)
    probe = system.probe()
    system.tell_many([(f"/user/many/{i}", ("fwd", probe.path, i)) for i in range(n)])
    got = sorted(probe.receive_many(n, timeout=60))
    assert got == list(range(n))



# ---- the host's own bookkeeping, without processes (what no public view shows) ----------------------------

class _Adapter:
    """The HostActor side a Host calls, recording instead of sending."""

    def __init__(self) -> None:
        self.sent: list[tuple[object, object]] = []
        self.wakeups: list[tuple[float, object]] = []

    def send_in_order(self, address: object, message: object) -> None:
        self.sent.append((address, message))

    def wakeup_after(self, seconds: float, payload: object) -> None:
        self.wakeups.append((seconds, payload))


class Fails(actors.Actor):
    """Raises on "boom"."""

    def receive(self, message, sender):
        if message == "boom":
            raise ValueError("boom")


def bare_host(**spec: object) -> Host:
    """An entity Host for /user/f (entities of Fails), driven by direct calls; its clock is `host.now`."""
    host = Host(_Adapter(), InitHost(HostSpec("/user/f", Fails, entities=True, **spec), {GUARDIAN_PATH: "guardian"},
                                     1, {}, "guardian"), "me")
    host.start()
    return host


def test_an_entity_restarted_outside_a_delivery_is_not_taken_for_the_least_recent():
    """A layer reports a failure outside any delivery (persistence, after a group commit): the new instance is
    as recent as can be, so it goes last in the sweep's order; first, it stopped the sweep before the idle ones."""
    host = bare_host(passivate_after=1.0)
    host.now = 100.0
    for name in ("a", "b", "c"):
        host.deliver(None, f"/user/f/{name}", "hi")
    host.now = 105.0
    host.report_failure(host.entities["/user/f/a"], ValueError("late"), "hi", None)
    host.now = 105.5
    host._passivate_idle()
    assert list(host.entities) == ["/user/f/a"]


def test_entities_that_failed_leave_no_restart_window_once_passivated_or_stopped():
    """max_restarts within restart_window counts the restarts of an entity while it lives: one passivated or
    stopped starts afresh, so its window goes with it (kept, every entity that ever failed grew the host)."""
    host = bare_host(passivate_after=1.0)
    host.now = 100.0
    for i in range(5):
        host.deliver(None, f"/user/f/{i}", "boom")  # each fails once and is restarted
    assert len(host.entities) == 5 and set(host._restarts) == {f"/user/f/{i}" for i in range(5)}
    host.stop_entity(host.entities["/user/f/0"], "stopped by request")
    assert "/user/f/0" not in host._restarts
    host.now = 102.0
    host._passivate_idle()
    assert host.entities == {} and host._restarts == {}


def test_restarts_are_still_counted_across_the_restarts_of_a_live_entity():
    host = bare_host(max_restarts=2)
    for _ in range(2):
        host.deliver(None, "/user/f/1", "boom")
    assert "/user/f/1" in host.entities
    host.deliver(None, "/user/f/1", "boom")  # the third within the window: stopped
    assert "/user/f/1" not in host.entities

"""Timers: one-shot, repeating, cancellation, and ticks of an earlier incarnation ignored."""

from __future__ import annotations

import gc
import math
import time
import weakref

import pytest

import actors
from actors.timers import TimerQueue
from tests.actors.sample import After, ForgetfulTicker, SchedulesOnStop, Ticker
from tests.waiting import wait_for


class Metronome(actors.Actor):
    """Ticks every `interval` s on "start" (forever, silently); answers anything else with "pong"."""

    def receive(self, message, sender):
        if isinstance(message, tuple) and message[0] == "start":
            self.schedule_repeatedly(message[1], "tick")
            self.tell(sender, "started")
        elif message != "tick":
            self.tell(sender, "pong")


class CancelsItsTwin(actors.Actor):
    """On ("start", report): two timers due together; the first to fire cancels the other and reports."""

    def receive(self, message, sender):
        if isinstance(message, tuple) and message[0] == "start":
            self.report = message[1]
            self.timers = {name: self.schedule_once(0.05, name) for name in ("a", "b")}
        elif message in ("a", "b"):
            self.timers["b" if message == "a" else "a"].cancel()
            self.tell(self.report, message)


class Schedules(actors.Actor):
    """Schedules what it is asked to: ("once", delay) or ("every", interval, initial_delay); answers "scheduled"."""

    def receive(self, message, sender):
        if message[0] == "once":
            self.schedule_once(message[1], "tick")
        elif message[0] == "every":
            self.schedule_repeatedly(message[1], "tick", initial_delay=message[2])
        if message != "tick":
            self.tell(sender, "scheduled")


class Payload:
    """A message that can be watched with a weakref."""


def alive(system, path: str) -> int:
    """How many actors the host at `path` runs (System.status)."""
    return system.status().hosts[path].alive


def test_schedule_once_fires_once(system):
    system.spawn(Ticker, "/user/t", entities=True)
    probe = system.probe()
    system.tell("/user/t/1", After(0.05, probe.path))
    assert probe.receive(timeout=3) == ("tick", 1)
    probe.expect_no_message(0.2)


def test_repeating_timer_fires_until_cancelled(system):
    system.spawn(Ticker, "/user/t", entities=True)
    probe = system.probe()
    system.tell("/user/t/1", After(0.02, probe.path, repeat=True, cancel_after=3))
    assert probe.receive_many(3, timeout=5) == [("tick", 1), ("tick", 2), ("tick", 3)]
    probe.expect_no_message(0.2)


def test_cancelled_timer_never_fires(system):
    system.spawn(Ticker, "/user/t", entities=True)
    probe = system.probe()
    system.tell("/user/t/1", After(0.3, probe.path))
    assert system.ask("/user/t/1", "cancel") == "cancelled"
    probe.expect_no_message(0.6)


def test_tick_of_an_earlier_incarnation_is_ignored(system):
    system.spawn(Ticker, "/user/t", entities=True)
    probe = system.probe()
    system.tell("/user/t/1", After(0.3, probe.path))
    system.tell("/user/t/1", "boom")  # restart: the new instance never scheduled anything
    probe.expect_no_message(0.6)


def test_entity_with_a_live_timer_is_not_passivated(system):
    system.spawn(Ticker, "/user/t", entities=True, passivate_after=0.1)
    probe = system.probe()
    system.tell("/user/t/1", After(0.05, probe.path, repeat=True))
    # Ticks keep counting up well past the idle timeout: the same instance stays alive.
    ticks = probe.receive_many(8, timeout=5)
    assert ticks == [("tick", i) for i in range(1, 9)]


def test_a_ticking_entity_does_not_keep_the_idle_ones_behind_it_from_passivating(system):
    """The sweep walks entities from the least recently active and stops at the first recent one: a tick must move
    its entity to the end of that order (it stayed first, and no entity created after it was ever passivated)."""
    system.spawn(Metronome, "/user/m", entities=True, passivate_after=0.3)
    assert system.ask("/user/m/ticker", ("start", 0.05)) == "started"  # the first entity, ticking 6x per timeout
    probe = system.probe()
    for i in range(20):
        probe.tell(f"/user/m/idle-{i}", "ping")
    assert probe.receive_many(20, timeout=10) == ["pong"] * 20
    wait_for(lambda: alive(system, "/user/m") == 1, timeout=10)  # the idle ones are gone, the ticker stays
    assert system.ask("/user/m/ticker", "ping") == "pong"


def test_timers_survive_a_wakeup_thespian_lost(system):
    """Thespian drops a wakeup expiring during its tx-only drain; the host re-arms instead of waiting forever."""
    probe = system.probe()
    system.spawn(ForgetfulTicker, "/user/t")
    assert system.ask("/user/t", "lose-a-wakeup") == "lost"
    probe.tell("/user/t", After(0.2, probe.path))
    assert probe.receive(timeout=10) == ("tick", 1)


def test_a_cancelled_timer_lets_go_of_its_message_and_entity_at_once():
    """It waits in the heap until its due time (an hour here): it must not keep its entity (passivated
    meanwhile) or its message alive until then."""
    queue = TimerQueue()
    first = actors.Actor()
    queue.schedule(10.0, None, "earlier", first)  # an earlier live timer: the cancelled one is not at the top
    owner, message = actors.Actor(), Payload()
    timer = queue.schedule(3600.0, None, message, owner)
    gone = weakref.ref(owner), weakref.ref(message)
    timer.cancel()
    del owner, message
    gc.collect()
    assert gone[0]() is None and gone[1]() is None
    assert not timer.active


def test_cancelled_timers_do_not_pile_up_in_the_heap():
    """A receive timeout (cancel the pending timer, schedule a new one, on every message) behind an earlier live
    timer: the heap is rebuilt without the cancelled ones once they are most of it, not kept for an hour."""
    queue = TimerQueue()
    queue.schedule(10.0, None, "earlier", actors.Actor())
    owner = actors.Actor()
    timeout = queue.schedule(3600.0, None, "idle", owner)
    for _ in range(10_000):
        timeout.cancel()
        timeout = queue.schedule(3600.0, None, "idle", owner)
        assert len(queue._heap) <= 2 + 64  # (the two live ones, and cancelled ones up to the rebuild)
    assert owner._timers == {timeout}
    assert queue.next_due() is not None and len(list(queue.pop_due(float("inf")))) == 2


def test_a_due_timer_cancelled_by_the_handler_of_another_due_with_it_is_dropped(system):
    """Timer.cancel: a tick already due but not yet delivered is dropped too (it was delivered when both
    were taken off the heap in one wakeup)."""
    system.spawn(CancelsItsTwin, "/user/twins", entities=True)
    probe = system.probe()
    probe.tell("/user/twins/1", ("start", probe.path))
    assert probe.receive(timeout=5) == "a"
    probe.expect_no_message(0.3)


@pytest.mark.parametrize("request_, words", [
    (("once", math.inf), "ConfigError: delay must be a number, got inf"),
    (("once", math.nan), "ConfigError: delay must be a number, got nan"),
    (("once", 1e15), "ConfigError: delay must be <= 1e+09 seconds"),
    (("every", 1e15, None), "ConfigError: interval must be <= 1e+09 seconds"),
    (("every", 1e-6, None), "ConfigError: interval must be >= 0.001 seconds (actors.actor.MIN_INTERVAL)"),
    (("every", 0.000999, 0.0), "ConfigError: interval must be >= 0.001 seconds"),
    (("every", 1.0, 1e15), "ConfigError: initial_delay must be <= 1e+09 seconds"),
])
def test_a_delay_thespian_cannot_take_is_refused_naming_it(system, request_, words):
    """inf and 1e15 failed the actor with an OverflowError from inside Thespian, naming no delay; NaN fired at once;
    an interval of 1e-6 s starved its host's mailbox (asks and status timed out)."""
    system.spawn(Schedules, "/user/s", entities=True)
    with pytest.raises(actors.ActorFailed) as failed:
        system.ask("/user/s/1", request_)
    assert words in str(failed.value)
    assert system.ask("/user/s/1", ("once", 1e9)) == "scheduled"  # the longest there is, and one below 0: at once
    assert system.ask("/user/s/1", ("once", -1.0)) == "scheduled"


class SlowTicks(actors.Actor):
    """Ticks every 5 ms once asked ("start"), each tick's work taking 20 ms: longer than its interval."""

    def receive(self, message, sender):
        if message == "start":
            self.schedule_repeatedly(0.005, "tick")
            self.tell(sender, "started")
        elif message == "tick":
            end = time.monotonic() + 0.02
            while time.monotonic() < end:
                pass


def test_ticks_whose_work_outlasts_their_interval_leave_the_host_its_mailbox(system):
    # The next tick was armed before its work was done, so it was already due when the host got back to Thespian,
    # which handles a due wakeup before it reads its sockets: the host never read its mailbox again.
    system.spawn(SlowTicks, "/user/slow", entities=True)
    system.spawn(Schedules, "/user/s", entities=True)
    assert system.ask("/user/slow/1", "start", timeout=5) == "started"
    for _ in range(5):
        assert system.ask("/user/slow/2", "start", timeout=5) == "started"  # (an entity of the ticking host)
        assert system.ask("/user/s/other", ("once", 3600.0), timeout=5) == "scheduled"
    system.stop("/user/slow")


def test_a_repeating_timer_at_the_shortest_interval_leaves_its_host_responsive(system):
    """1 ms (MIN_INTERVAL): the host still reads its mailbox between ticks (1e-6 s: every ask timed out)."""
    system.spawn(Schedules, "/user/s", entities=True)
    assert system.ask("/user/s/fast", ("every", 0.001, None)) == "scheduled"
    for _ in range(5):
        assert system.ask("/user/s/other", ("once", 3600.0), timeout=5) == "scheduled"
    assert system.status(timeout=5).hosts["/user/s"].alive == 2


def test_a_timer_a_stopped_actor_schedules_is_cancelled_not_kept(system):
    # A timer scheduled in post_stop (after the stop cancelled the actor's timers) went into the host's queue: never
    # delivered, it kept its message and actor, and a repeating one woke the host every interval for good (a
    # multiproc host idle but for it used 4% of a core at 10 ms).
    probe = system.probe()
    system.spawn(SchedulesOnStop, "/user/s", entities=True, args=(probe.path,))
    system.tell("/user/s/a", "stop")
    assert probe.receive(timeout=10) == ("scheduled in post_stop", [False, False])
    system.tell("/user/s/b", "still there")  # (the host goes on)
    assert probe.receive(timeout=10) == ("got", "/user/s/b", "still there")

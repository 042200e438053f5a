"""AtLeastOnceDelivery entities resume their deliveries when their host starts, without a message of their own."""

from __future__ import annotations

import os
import signal

import pytest

from tests.persistence.wake_actors import Delivers, FailingHook, Reporting, Sending
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def sent_once_to_a_sink(system, sender_class):
    """`system` with a never-confirming /user/sink and `sender_class` entities at /user/senders, entity 1 of which
    delivered once to the sink; (system, the probe the sink reports to)."""
    probe = system.probe()
    system.spawn(Reporting, "/user/sink", args=(probe.path, False))
    system.spawn(sender_class, "/user/senders", entities=True)
    assert system.ask("/user/senders/1", ("send", "/user/sink"), timeout=30) == "persisted"
    assert probe.receive(10) == ("1", 1)
    return system, probe


def test_unconfirmed_deliveries_of_entities_are_resent_when_the_system_starts_again(base, make_system, tmp_path):
    # An entity comes back on its first message: one whose destination never confirmed (it was down, or the
    # message was lost with a process) waited for a message that need not come, and its deliveries stalled.
    journal = f"sqlite:///{tmp_path}/journal.db"
    first = make_system(base, journal=journal)
    probe = first.probe()
    first.spawn(Reporting, "/user/sink", args=(probe.path, False))
    first.spawn(Sending, "/user/senders", entities=True)
    for entity_id in ("a", "b", "c"):
        assert first.ask(f"/user/senders/{entity_id}", ("send", "/user/sink"), timeout=30) == "persisted"
    assert {probe.receive(10)[0] for _ in range(3)} == {"a", "b", "c"}, "each delivered once before the stop"
    first.shutdown()

    second = make_system(base, journal=journal)
    probe = second.probe()
    second.spawn(Reporting, "/user/sink", args=(probe.path, True))
    second.spawn(Sending, "/user/senders", entities=True)  # (and nothing is sent to the senders)
    got: set[tuple[str, int]] = set()
    while got != {("a", 1), ("b", 1), ("c", 1)}:  # (each receive bounded; a resend may come twice)
        got.add(probe.receive(10))
    wait_for(lambda: second.status().hosts["/user/senders"].counters.get("unconfirmed") == 0, timeout=30)


@pytest.mark.parametrize("base", ["multiproc"])
def test_an_entity_host_killed_resends_its_entities_unconfirmed_deliveries_when_restarted(base, make_system,
                                                                                        tmp_path):
    system, probe = sent_once_to_a_sink(make_system(base, journal=f"sqlite:///{tmp_path}/journal.db"), Sending)
    pid = system.status().hosts["/user/senders"].pid
    os.kill(pid, signal.SIGKILL)
    # (pid None: restarting, not started yet; the status then has no counters, which a CI run met under load)
    wait_for(lambda: system.status().hosts["/user/senders"].pid not in (pid, 0, None), timeout=30)
    while probe.receive(10) != ("1", 1):  # (copies the old process sent before it died may come first)
        pass
    wait_for(lambda: system.status().hosts["/user/senders"].counters.get("unconfirmed") == 1, timeout=30)


def test_a_malformed_destination_is_refused_by_deliver_naming_it(base, make_system, tmp_path):
    # deliver() checked only for a wildcard: a path system.tell refuses got a delivery id and was dead-lettered
    # on every resend, forever, with no error.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db")
    system.spawn(Delivers, "/user/d", entities=True)
    kind, text = system.ask("/user/d/1", ("deliver", "user/dst", "x"), timeout=30)
    assert kind == "InvalidPath" and "deliver's destination 'user/dst' must look like '/user/<name>" in text
    assert system.ask("/user/d/1", ("deliver", "/user/*", "x"), timeout=30)[0] == "ValueError"
    assert system.ask("/user/d/1", "unconfirmed", timeout=30) == ([], False)


def test_an_unpicklable_delivery_does_not_fail_its_sender_when_warned_about(base, make_system, tmp_path):
    # The UnconfirmedWarning quoting it could not be pickled for the sender's own mailbox: the sender failed on
    # a RedeliveryTick, and restarted without its deliveries.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db")
    system.spawn(Delivers, "/user/d", entities=True)
    assert system.ask("/user/d/1", ("deliver", "/user/nobody", "unpicklable"), timeout=30) == 1
    wait_for(lambda: system.ask("/user/d/1", "unconfirmed", timeout=30) == ([1], True), timeout=30)
    assert not [e.reason for e in system.errors().recent if e.path == "/user/d/1"]


@pytest.mark.parametrize("base", ["multiproc"])
def test_a_failing_should_redeliver_on_a_lost_route_is_reported_and_restarts_that_actor(base, make_system,
                                                                                       tmp_path):
    # routes_lost ran outside the host's failure handling: the exception went into Thespian's log only, the
    # actor was not restarted, and system.errors() said nothing.
    system, _ = sent_once_to_a_sink(make_system(base, journal=f"sqlite:///{tmp_path}/journal.db"), FailingHook)
    os.kill(system.status().hosts["/user/sink"].pid, signal.SIGKILL)
    wait_for(lambda: any("failed on RoutesLost: ValueError: should_redeliver blew up" in e.reason
                         for e in system.errors().recent if e.path == "/user/senders/1"), timeout=60)

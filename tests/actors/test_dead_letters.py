"""Dead letters: counted, recent ones kept, and published to subscribers."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from actors import ActorError, DeadLetter
from actors.messages import GUARDIAN_PATH
from tests.actors.sample import Echo, Ping, Pong, TellsOnStop, TellsOnStopTable
from tests.waiting import dead_letters_reach, wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def test_message_to_unserved_path_is_a_dead_letter(system):
    system.tell("/user/nobody", Ping(1))
    letters = dead_letters_reach(system, 1)
    assert letters.count == 1
    assert letters.recent[0] == DeadLetter(None, "/user/nobody", Ping(1), "no actor serves /user/nobody")


def test_subscribers_receive_dead_letters(system):
    probe = system.probe()
    system.subscribe_dead_letters(probe.path)
    system.spawn(Echo, "/user/echo")
    # An actor sends to a path nobody serves: the letter reaches the subscriber.
    system.tell("/user/echo", ("fwd", "/user/ghost", Ping(2)), sender="/user/echo")
    letter = probe.receive(timeout=5)
    assert isinstance(letter, DeadLetter) and letter.target == "/user/ghost" and letter.message == Ping(2)


def test_unpicklable_content_sent_by_an_actor_is_dead_lettered_and_the_rest_delivered(system):
    system.spawn(Echo, "/user/a")
    system.spawn(Echo, "/user/b")
    probe = system.probe()
    system.subscribe_dead_letters(probe.path)
    system.tell("/user/a", ("send-unpicklable", "/user/b"))
    letter = probe.receive(timeout=5)
    assert letter.target == "/user/b" and "cannot be pickled" in letter.reason
    # The picklable message of the same batch still arrives at /user/b (after the dead letter, maybe:
    # they travel different ways). "count" counts every message, itself included: k asks + the Ping.
    asks = 0

    def ping_arrived() -> bool:
        nonlocal asks
        asks += 1
        return system.ask("/user/b", "count") == asks + 1

    wait_for(ping_arrived, 10)


# A client that registers a probe, prints its path, and stops (SIGSTOP): its port still accepts connections
# (the kernel's backlog) but it never reads or acknowledges a message sent to it.
STOPPED_CLIENT = """
import os, signal, sys
import actors
system = actors.connect(int(sys.argv[1]))
probe = system.probe("stopped")
if sys.argv[2:] == ["dead-letters"]:
    system.subscribe_dead_letters(probe.path)
else:
    system.subscribe_errors(probe.path)
system.dead_letters()  # (the subscription has reached the guardian)
print(probe.path, flush=True)
os.kill(os.getpid(), signal.SIGSTOP)
"""


@pytest.mark.timeout(120)
def test_a_message_a_live_receiver_never_takes_is_a_dead_letter_not_dropped(make_system, monkeypatch):
    # Thespian gives up on a send after its transmit timeout: 3 s here instead of 5 minutes. Thespian reports
    # such a failure to nobody; the multi-process base is the only one with a transport to fail.
    monkeypatch.setenv("THESPIAN_TRANSMIT_TIMEOUT_PERIOD", "0:03")
    system = make_system("multiproc")
    system.spawn(Echo, "/user/echo")
    client = subprocess.Popen([sys.executable, "-c", STOPPED_CLIENT, str(system.admin_port)], stdout=subprocess.PIPE,
                              text=True, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        probe = client.stdout.readline().strip()
        assert probe.endswith("/stopped"), probe
        # A host's reply to the stopped client: a dead letter once the transmit times out.
        system.tell("/user/echo", Ping(5), sender=probe)
        letters = dead_letters_reach(system, 1, timeout=30)
        assert letters.recent[0].target == probe and letters.recent[0].message == Pong(5, "/user/echo"), letters
        assert letters.recent[0].sender == "/user/echo" and "not delivered" in letters.recent[0].reason, letters
        # The guardian's publication of an error to the stopped subscriber: a dead letter too.
        system.tell("/user/echo", "boom")
        letters = dead_letters_reach(system, 2, timeout=30)
        assert letters.recent[1].target == probe and isinstance(letters.recent[1].message, ActorError), letters
        assert letters.recent[1].sender == GUARDIAN_PATH and "not delivered" in letters.recent[1].reason, letters
        assert system.ask("/user/echo", Ping(6)) == Pong(6, "/user/echo")  # the host goes on
    finally:
        client.kill()
        client.wait(10)


@pytest.mark.timeout(120)
def test_a_dead_letter_its_stopped_subscriber_never_takes_is_logged_not_recorded_again(make_system, monkeypatch):
    # Recorded again, it would be published to that subscriber again, fail again, and so on for ever.
    monkeypatch.setenv("THESPIAN_TRANSMIT_TIMEOUT_PERIOD", "0:02")
    system = make_system("multiproc")
    client = subprocess.Popen([sys.executable, "-c", STOPPED_CLIENT, str(system.admin_port), "dead-letters"],
                              stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    try:
        probe = client.stdout.readline().strip()
        assert probe.endswith("/stopped"), probe
        system.tell("/user/nobody", Ping(1))
        assert dead_letters_reach(system, 1, timeout=30).recent[0].target == "/user/nobody"
        log = os.path.join(system.run_dir, "actors.log")
        wait_for(lambda: f"a dead letter to subscriber {probe} was not delivered" in open(log).read(), 30)
        letters = system.dead_letters()
        assert letters.count == 1, letters  # the one to /user/nobody; its failed publication is not a second
    finally:
        client.kill()
        client.wait(10)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("cls", [TellsOnStop, TellsOnStopTable])
def test_what_a_stopping_entity_host_sends_its_own_entities_is_a_dead_letter_not_a_new_instance(system, cls):
    # Host.shutdown stops every entity, then delivers what they sent: a message to an entity of the host (from a
    # post_stop here) started a new instance (a table, for a table host) after the host had stopped, whose
    # pre_start ran (a persistent one recovered) and whose post_stop never did; nothing said it was lost.
    probe = system.probe()
    system.spawn(cls, "/user/h", entities=True, args=(probe.path, "/user/h/b"))
    system.tell("/user/h/a", "hello")
    first = "/user/h/a" if cls is TellsOnStop else "/user/h"  # (a table starts once, at the host's path)
    assert probe.receive_many(2, timeout=10) == [("start", first), ("got", "/user/h/a", "hello")]
    system.stop("/user/h")
    assert probe.receive(timeout=10) == ("stop", first)
    letters = dead_letters_reach(system, 1).recent
    assert [(d.sender, d.target, d.message, d.reason) for d in letters] == [
        (first, "/user/h/b", "from post_stop", "entity host /user/h stopped")]
    probe.expect_no_message(0.3)  # (no new instance started, nor took it)

"""Dead letters: counted, recent ones kept, and published to subscribers."""

from __future__ import annotations

from actors import DeadLetter
from tests.actors.sample import Echo, Ping
from tests.waiting import dead_letters_reach, wait_for


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

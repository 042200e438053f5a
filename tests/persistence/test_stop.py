"""Stopping a persistent actor (Akka semantics): what it persisted before the stop is written, its handlers do
not run on the stopped instance, and commands stashed behind a persist become dead letters (both bases)."""

from __future__ import annotations

from tests.persistence.stop_actors import Stopping
from tests.waiting import dead_letters_reach


def test_events_persisted_just_before_a_stop_are_written_and_their_handlers_do_not_run(psystem):
    psystem.spawn(Stopping, "/user/s", entities=True)
    probe = psystem.probe()
    probe.tell("/user/s/1", ("persist-then-stop", "a"))
    probe.tell("/user/s/2", ("persist-async-then-stop", "b"))
    # A new instance answers each (the old one stopped) and has recovered the event from the journal.
    assert psystem.ask("/user/s/1", "state") == ("a",)
    assert psystem.ask("/user/s/2", "state") == ("b",)
    probe.expect_no_message(0.3)  # no handler ran on the stopped instances
    assert psystem.errors().count == 0


def test_commands_stashed_when_a_persistent_actor_stops_become_dead_letters(psystem):
    psystem.spawn(Stopping, "/user/s", entities=True)
    probe = psystem.probe()
    before = psystem.dead_letters().count
    # One batch: "x" and "y" wait in the stash behind the persist of "a", whose handler stops the actor.
    psystem.tell_many([("/user/s/3", ("stop-in-handler", "a")), ("/user/s/3", "x"), ("/user/s/3", "y")],
                      sender=probe.path)
    assert probe.receive() == ("handled", "a")
    letters = dead_letters_reach(psystem, before + 2)
    stashed = [d for d in letters.recent if d.target == "/user/s/3"]
    assert [d.message for d in stashed] == ["x", "y"]
    assert all("stashed behind a persist" in d.reason for d in stashed)
    assert psystem.ask("/user/s/3", "state") == ("a",)  # x and y were neither persisted nor handled
    probe.expect_no_message(0.3)


def test_a_new_instance_started_right_after_a_stop_recovers_the_events_the_old_one_persisted(psystem):
    psystem.spawn(Stopping, "/user/s", entities=True)
    probe = psystem.probe()
    # One batch: the new instance that takes "state" and "b" starts before the host's next group commit, and must
    # still recover "a" (the journal has it before any later incarnation reads it, as Akka's journal orders them).
    psystem.tell_many([("/user/s/4", ("persist-then-stop", "a")), ("/user/s/4", "state"), ("/user/s/4", "b")],
                      sender=probe.path)
    assert probe.receive() == ("a",)
    assert probe.receive() == ("handled", "b")
    assert psystem.ask("/user/s/4", "state") == ("a", "b")
    assert psystem.errors().count == 0


def test_a_handler_that_stops_the_actor_is_the_last_handler_that_runs_on_it(psystem):
    psystem.spawn(Stopping, "/user/s", entities=True)
    probe = psystem.probe()
    # The first event's handler stops the actor, in one atomic persist_all and in separate persist_async writes of
    # one group commit: as in Akka (where each handler is a message of its own, and a stopped actor takes no more),
    # the later events are written but their handlers do not run on the stopped instance. Before, they all ran.
    probe.tell("/user/s/5", ("all-stop-in-first", ("a", "b", "c")))
    probe.tell("/user/s/6", ("async-stop-in-first", ("d", "e", "f")))
    assert sorted([probe.receive(), probe.receive()]) == [("handled", "a"), ("handled", "d")]
    probe.expect_no_message(0.3)
    # The next instances replay every event: they were written.
    assert psystem.ask("/user/s/5", "state") == ("a", "b", "c")
    assert psystem.ask("/user/s/6", "state") == ("d", "e", "f")
    assert psystem.errors().count == 0

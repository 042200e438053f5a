"""Persist ordering across failures, restarts and stops of a persistent actor (both bases, SQLite journal)."""

from __future__ import annotations

import pytest

from tests.persistence.core_audit_actors import BadTags, Flaky, RcFails, SharedId, StopApplying

pytestmark = pytest.mark.timeout(60)


def test_commands_stashed_before_a_restart_survive_a_second_failure_on_the_first_of_them(psystem):
    psystem.spawn(Flaky, "/user/f", entities=True)
    probe = psystem.probe()
    # "boom", "x" and "y" wait behind the persist of "a", whose handler fails: the new instance gets them in
    # order, and "boom" fails it again. As in Akka only the failing command is lost: "x" and "y" are handled.
    psystem.tell_many([("/user/f/1", ("persist-then-fail", "a")), ("/user/f/1", "boom"), ("/user/f/1", "x"),
                       ("/user/f/1", "y")], sender=probe.path)
    assert probe.receive() == ("handled", "x")
    assert probe.receive() == ("handled", "y")
    assert psystem.ask("/user/f/1", "state") == ("a", "x", "y")


def test_an_entity_whose_tags_fail_at_the_group_commit_does_not_hold_up_the_others_of_its_round(psystem):
    psystem.spawn(BadTags, "/user/t", entities=True)
    probe = psystem.probe()
    # One round: "x" of entity a, then two applications of entity b gathered into one write whose tags are taken
    # at the group commit, where tags_for fails on "bad". Entity a's write goes on and its handler runs.
    psystem.tell_many([("/user/t/a", "x"), ("/user/t/b", ("apply", "o", 1, "ok")),
                       ("/user/t/b", ("apply", "o", 2, "bad"))], sender=probe.path)
    assert probe.receive() == ("handled", "x")
    # Stored once, its handler done: the failure neither lost a's write nor had the dispatch run twice.
    assert psystem.ask("/user/t/a", "journal") == (("x",), 0)
    # Entity b failed (restarted) as if tags_for had failed in its command: it applied neither event.
    assert psystem.ask("/user/t/b", "journal") == ((), 0)
    probe.expect_no_message(0.3)


def test_an_entity_whose_tags_fail_as_it_stops_writes_nothing_behind_its_next_instance(psystem):
    psystem.spawn(BadTags, "/user/t", entities=True)
    probe = psystem.probe()
    # The two applications are gathered into one write whose tags are taken when the stop writes it: tags_for
    # fails, so nothing is written, neither then nor at the next group commit (after the new instance recovered).
    psystem.tell_many([("/user/t/c", ("apply", "o", 1, "ok")), ("/user/t/c", ("apply", "o", 2, "bad")),
                       ("/user/t/c", "stop"), ("/user/t/c", "z")], sender=probe.path)
    assert probe.receive() == ("handled", "z")
    assert psystem.ask("/user/t/c", "journal") == (("z",), 0)
    probe.expect_no_message(0.3)


def test_two_writers_of_one_persistence_id_in_one_round_the_first_keeps_its_write_the_second_fails(psystem):
    psystem.spawn(SharedId, "/user/s", entities=True)
    probe = psystem.probe()
    # Both recovered (nothing stored), then one round where each persists sequence nr 1 of "shared-1". As in Akka,
    # where each actor's write is a call of its own, the first writer's event is stored and handled, and only the
    # second fails (on_persist_failure, stopped): before, both failed and the first's event was lost.
    assert psystem.ask("/user/s/a-1", "state") == ()
    assert psystem.ask("/user/s/b-1", "state") == ()
    psystem.tell_many([("/user/s/a-1", "x"), ("/user/s/b-1", "y")], sender=probe.path)
    assert probe.receive() == ("handled", "x")
    probe.expect_no_message(0.3)
    assert psystem.ask("/user/s/a-1", "state") == ("x",)
    assert psystem.ask("/user/s/a-1", "journal") == ("x",)
    # The second writer was stopped: a new instance of it (and any other) replays the first's event.
    assert psystem.ask("/user/s/b-1", "state") == ("x",)
    assert psystem.ask("/user/s/c-1", "state") == ("x",)
    assert any("b-1" in e.path and "persist of str (sequence nr 1) failed" in e.reason
               for e in psystem.errors().recent)


def test_a_recovery_completed_handler_that_persists_then_fails_runs_no_handler_on_the_failed_instance(psystem):
    psystem.spawn(RcFails, "/user/rc", entities=True, kwargs={"client": psystem.prefix})
    probe = psystem.probe("rc-1")
    replies = psystem.probe()
    assert psystem.ask("/user/rc/rc-1", "state") == ()
    # "boom" restarts it; the new instance persists "rc" in its RecoveryCompleted handler, then raises: it fails
    # again (Akka: it fails and its supervisor acts). Its event is written, as events persisted before any failure,
    # but its handler must not run on the failed instance (it did, at the group commit of that dispatch, before the
    # restart): the next instance replays "rc" instead (and persists nothing again).
    replies.tell("/user/rc/rc-1", "boom")  # (alone: that dispatch's group commit comes before the next command)
    probe.expect_no_message(0.5)
    replies.tell("/user/rc/rc-1", "state")
    assert replies.receive() == ("rc",)
    psystem.stop("/user/rc/rc-1")
    assert psystem.ask("/user/rc/rc-1", "state") == ("rc",)  # stored once


def test_an_application_handler_that_stops_the_receiver_is_the_last_that_runs_of_its_applied_batch(psystem):
    psystem.spawn(StopApplying, "/user/i", entities=True)
    probe = psystem.probe()
    # One round: three applications journaled as one AppliedBatch, whose handlers ran all on the stopping instance
    # (as persist_all's did). As for separate events (Akka), the handler that stops the actor is the last to run;
    # the later applications are stored, and the next instance recovers them (marked applied: a redelivery of them
    # is a duplicate).
    psystem.tell_many([("/user/i/1", ("apply", "o", 1, "a")), ("/user/i/1", ("apply", "o", 2, "stop")),
                       ("/user/i/1", ("apply", "o", 3, "c"))], sender=probe.path)
    assert probe.receive() == ("applied", "a")
    assert probe.receive() == ("applied", "stop")
    probe.expect_no_message(0.3)
    assert psystem.ask("/user/i/1", "state") == ("a", "stop", "c")
    probe.tell("/user/i/1", ("apply", "o", 3, "c"))  # a duplicate now: not applied again
    assert psystem.ask("/user/i/1", "state") == ("a", "stop", "c")
    probe.expect_no_message(0.2)

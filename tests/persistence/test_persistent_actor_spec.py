"""The rest of Akka's PersistentActorSpec (reference §4.5), case by case, on both bases.

Every case starts as Akka's does: an actor with the case's persistence id (Behavior1) handles Cmd("a") and
persists a-1, a-2; the case's actor then recovers those two events first. Cases where restarts, recovery or
stashing matter also run with the actor as a top-level actor (its own host) besides a hosted entity.
Not ported: #8 (Akka's internal FilteredPayload marker has no counterpart here).
"""

from __future__ import annotations

import random
import time

import pytest

from journal import MAX_SEQUENCE_NR
from persistence import DeleteMessagesFailure, DeleteMessagesSuccess, RecoveryCompleted
from tests.persistence.spec_actors import (
    Cmd,
    Delete,
    Report,
    Spec,
    Stacked,
    new_name,
    prepared,
    state,
    together,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


where = pytest.mark.parametrize("top", [False, True], ids=["entity", "top"])


# ---- 1-2: identity ------------------------------------------------------------------------------------

@pytest.mark.parametrize("kind,text", [("nullpid", "requirement failed: persistenceId is [None] for PersistentActor"),
                                       ("emptypid", "persistenceId cannot be empty for PersistentActor"),
                                       ("intpid", "persistence_id must be a str, got int 42 for PersistentActor")])
def test_fail_fast_if_persistence_id_is_none_or_blank(ps, kind, text):
    name = new_name(kind)
    probe = ps.probe(name)
    path = f"/user/spec/{name}~watch"
    probe.tell(path, Cmd("x"))
    failure = probe.receive(10)
    assert failure.what == "recovery failure" and text in failure.detail[1]
    assert probe.receive(10) == Report("stopped", path)
    probe.expect_no_message(0.1)


def test_a_write_that_fails_on_a_taken_sequence_nr_stops_only_the_actors_of_that_persistence_id(ps):
    # One host commits the writes of all its actors in one transaction: a second incarnation of a persistence id
    # (split brain) failing on a taken sequence nr failed every actor of that round, and another actor's valid
    # event was lost with it. Akka writes each actor's events in a call of its own.
    name, other = new_name("taken"), new_name("innocent")
    probe = ps.probe(name)
    first, second, innocent = f"/user/spec/{name}~one", f"/user/spec/{name}~two~watch", f"/user/spec/{other}~watch"
    for path in (first, second, innocent):
        assert state(probe, path) == []  # recovered: both incarnations of `name` see nothing stored
    probe.tell(first, Cmd("a"))
    assert state(probe, first) == ["a-1", "a-2"]
    # One dispatch, one group commit: `second` takes sequence nrs 1-2 again, `innocent` writes its own.
    ps.tell_many([(second, Cmd("b")), (innocent, Cmd("c"))], sender=probe.path)
    assert probe.receive(10) == Report("stopped", second)  # its persist failed: it stops (Akka)
    assert state(probe, innocent) == ["c-1", "c-2"]
    probe.tell(innocent, "seq")
    assert probe.receive(10) == 2
    ps.stop(innocent)  # recovered from the journal: its events were written
    assert state(probe, f"/user/spec/{other}") == ["c-1", "c-2"]
    assert any("sequence nr 1 of persistence id" in e.reason and name in e.reason and "already exists" in e.reason
               for e in ps.errors().recent), [e.reason for e in ps.errors().recent]
    probe.expect_no_message(0.2)


# ---- 3-7: emitting and recovering ---------------------------------------------------------------------

@where
def test_recover_from_persisted_events(ps, top):
    path, probe = prepared(ps, "b1", top=top)
    assert state(probe, path) == ["a-1", "a-2"]


def test_multiple_emitted_events_in_order_single_persist_call(ps):
    path, probe = prepared(ps, "b1")
    probe.tell(path, Cmd("b"))
    assert state(probe, path) == ["a-1", "a-2", "b-1", "b-2"]


def test_receive_emitted_events_immediately_after_command(ps):
    path, probe = prepared(ps, "b3")
    probe.tell(path, Cmd("b"))
    probe.tell(path, Cmd("c"))
    assert state(probe, path) == ["a-1", "a-2", "b-10", "b-11", "b-12", "c-10", "c-11", "c-12"]


@where
def test_recover_on_command_failure(ps, top):
    path, probe = prepared(ps, "b3", top=top)
    together(ps, probe, path, Cmd("b"), "boom", Cmd("c"))
    # b-10 was applied but never persisted: the restart loses it; Cmd c, sent meanwhile, is kept.
    assert state(probe, path) == ["a-1", "a-2", "b-11", "b-12", "c-10", "c-11", "c-12"]


# ---- 9-12: behaviour changes ---------------------------------------------------------------------------

@pytest.mark.parametrize("kind,expected", [
    ("cbfirst", ["b-0", "c-21", "c-22", "d-0", "e-21", "e-22"]),
    ("cblast", ["b-0", "c-21", "c-22", "d-0", "e-21", "e-22"]),
    ("cmfirst", ["b-0", "c-30", "c-31", "c-32", "d-0", "e-30", "e-31", "e-32"]),
    ("cmlast", ["b-0", "c-30", "c-31", "c-32", "d-0", "e-30", "e-31", "e-32"]),
], ids=["in-first-event-handler", "in-last-event-handler", "command-handler-first", "command-handler-last"])
def test_allow_behavior_changes(ps, kind, expected):
    path, probe = prepared(ps, kind)
    together(ps, probe, path, *(Cmd(d) for d in "bcde"))
    assert state(probe, path) == ["a-1", "a-2", *expected]


# ---- 13-14, 32: snapshots and recovery ---------------------------------------------------------------------

def snapshotted(ps, kind: str, top: bool = False):
    """Akka's SnapshottingPersistentActor persists b-41, b-42, snapshots, persists c-41, c-42 and stops;
    returns the path of a fresh `kind` actor with the same persistence id."""
    path, probe = prepared(ps, kind, "snap")
    probe.tell(path, Cmd("b"))
    probe.tell(path, "snap")
    probe.tell(path, Cmd("c"))
    assert probe.receive(10) == "saved"
    assert state(probe, path) == ["a-1", "a-2", "b-41", "b-42", "c-41", "c-42"]
    ps.stop(path)
    path = path.removesuffix("~snap")
    if top:
        path = "/user/" + path.rsplit("/", 1)[1]
        ps.spawn(Spec, path=path, kwargs={"client": ps.prefix})
    return path, probe


@where
def test_support_snapshotting(ps, top):
    path, probe = snapshotted(ps, "snap", top)
    probe.tell(path, "wake")
    assert probe.receive(10) == "offered"
    assert state(probe, path) == ["a-1", "a-2", "b-41", "b-42", "c-41", "c-42"]


def test_support_become_during_recovery(ps):
    path, probe = snapshotted(ps, "becoming")
    probe.tell(path, "wake")
    assert probe.receive_many(2, 10) == ["offered", "I am becoming"]
    assert state(probe, path) == ["a-1", "a-2", "b-41", "b-42", "c-41", "c-42"]


@where
def test_receive_recovery_completed_after_all_events_were_replayed(ps, top):
    path, probe = snapshotted(ps, "rcfinished", top)
    probe.tell(path, "wake")
    assert probe.receive_many(4, 10) == ["offered", RecoveryCompleted(), "I am the stashed", "I am the recovered"]
    assert state(probe, path) == ["a-1", "a-2", "b-41", "b-42", "c-41", "c-42", "RecoveryCompleted"]


# ---- 15-20: replies and persist_async -------------------------------------------------------------------

def test_reply_within_an_event_handler(ps):
    path, probe = prepared(ps, "reply")
    probe.tell(path, Cmd("a"))
    assert probe.receive(10) == "a"


def test_persist_primitive_events(ps):
    path, probe = prepared(ps, "anyval")
    probe.tell(path, Cmd("a"))
    assert probe.receive(10) == 5


def test_opt_out_from_stashing_until_events_are_processed(ps):
    path, probe = prepared(ps, "async")
    together(ps, probe, path, Cmd("x"), Cmd("y"))
    # "y" is handled before the event of "x" is persisted: persist_async does not stash.
    assert probe.receive_many(4, 10) == ["x", "y", "x-1", "y-2"]


def test_multiple_persist_async_calls_per_command_run_when_possible(ps):
    path, probe = prepared(ps, "async3")
    for i in range(1, 11):
        probe.tell(path, Cmd(f"c-{i}"))
        time.sleep(random.randrange(10) / 1000)
    got = probe.receive_many(40, 10)
    assert [x for x in got if x.count("-") == 1] == [f"c-{i}" for i in range(1, 11)]
    assert [x for x in got if x.count("-") == 2] == [f"a-{i}-{3 * (i - 1) + k}" for i in range(1, 11) for k in (1, 2, 3)]


def test_reply_to_the_original_sender_even_with_persist_async(ps):
    path, _ = prepared(ps, "async3")
    probes = [ps.probe() for _ in range(10)]
    for i, p in enumerate(probes):
        p.tell(path, Cmd(f"p{i}"))
    for i, p in enumerate(probes):
        got = p.receive_many(4, 10)
        assert got[0] == f"p{i}" and all(x.startswith("a") for x in got[1:])


def test_same_event_persisted_async_twice(ps):
    path, probe = prepared(ps, "sametwice")
    probe.tell(path, Cmd("x"))
    assert probe.receive_many(3, 10) == ["x", "x-a-1", "x-b-2"]
    probe.expect_no_message(0.1)


def test_persist_all_with_an_empty_list(ps):
    path, probe = prepared(ps, "nil")
    probe.tell(path, Cmd("defer-x"))
    assert probe.receive_many(3, 10) == ["before-nil", "after-nil", "defer-x"]
    probe.tell(path, Cmd("persist-x"))
    assert probe.receive_many(3, 10) == ["persist-x", "before-nil", "after-nil"]
    probe.expect_no_message(0.1)


@where
def test_correlate_persist_async_handlers_after_restart(ps, top):
    path, probe = prepared(ps, "correlate", top=top)
    together(ps, probe, path, *(Cmd(i) for i in range(100)), "boom", *(Cmd(i) for i in range(20)), Cmd("done"))
    assert probe.receive(10) == "done"
    probe.expect_no_message(0.1)


# ---- 25-31: defer ----------------------------------------------------------------------------------------

defer_kinds = pytest.mark.parametrize("flag", ["sync", "async"], ids=["defer", "defer_async"])


@defer_kinds
def test_defer_orders_handlers_with_persist(ps, flag):
    path, probe = prepared(ps, "deferp", flag)
    probe.tell(path, Cmd("a"))
    assert probe.receive_many(4, 10) == ["d-1", "a-2", "d-3", "d-4"]
    probe.expect_no_message(0.1)


@defer_kinds
def test_defer_orders_handlers_with_persist_async(ps, flag):
    path, probe = prepared(ps, "deferpa", flag)
    probe.tell(path, Cmd("a"))
    assert probe.receive_many(4, 10) == ["d-a-1", "pa-a-2", "d-a-3", "d-a-4"]


@defer_kinds
def test_defer_in_a_long_mixed_series_with_each_sender(ps, flag):
    path, _ = prepared(ps, "mixed", flag)
    p1, p2 = ps.probe(), ps.probe()
    p1.tell(path, Cmd("a"))
    p2.tell(path, Cmd("b"))
    for p, d in ((p1, "a"), (p2, "b")):
        assert p.receive_many(6, 10) == [f"p-{d}-1", f"pa-{d}-2", f"d-{d}-3", f"d-{d}-4", f"pa-{d}-5", f"d-{d}-6"]


@defer_kinds
def test_defer_runs_at_once_without_pending_persists(ps, flag):
    path, probe = prepared(ps, "nopersist", flag)
    probe.tell(path, Cmd("a"))
    assert probe.receive_many(3, 10) == ["d-1", "d-2", "d-3"]


@defer_kinds
def test_deferred_handlers_keep_their_senders(ps, flag):
    path, _ = prepared(ps, "deferpa", flag)
    p1, p2 = ps.probe(), ps.probe()
    p1.tell(path, Cmd("a"))
    p2.tell(path, Cmd("b"))
    for p, d in ((p1, "a"), (p2, "b")):
        assert p.receive_many(4, 10) == [f"d-{d}-1", f"pa-{d}-2", f"d-{d}-3", f"d-{d}-4"]


def test_handle_new_messages_before_defer_async_handler_is_called(ps):
    path, probe = prepared(ps, "deferx", "async")
    together(ps, probe, path, Cmd("x"), Cmd("y"))
    assert probe.receive_many(4, 10) == ["x", "y", "x-defer", "y-defer"]


def test_handle_defer_sequentially(ps):
    path, probe = prepared(ps, "deferx", "sync")
    together(ps, probe, path, Cmd("x"), Cmd("y"))
    assert probe.receive_many(4, 10) == ["x", "x-defer", "y", "y-defer"]


# ---- 33-34: ordering and stacking ---------------------------------------------------------------------------

def test_preserve_order_of_incoming_messages(ps):
    path, probe = prepared(ps, "order")
    together(ps, probe, path, Cmd("a"), ("latch", "b"), "c")
    assert probe.receive_many(2, 10) == ["a", "b"]
    probe.tell(path, "d")
    assert probe.receive_many(2, 10) == ["c", "d"]


@where
def test_be_used_as_a_stackable_modification(ps, top):
    name = new_name("stacked")
    probe = ps.probe(name)
    if top:
        path = f"/user/{name}"
        ps.spawn(Stacked, path=path, kwargs={"client": ps.prefix})
    else:
        ps.spawn(Stacked, path=f"/user/stack-{name}", entities=True, kwargs={"client": ps.prefix})
        path = f"/user/stack-{name}/{name}"
        probe.tell(path, "state")
    assert probe.receive_many(2, 10) == ["mixin pre_start", ("pre_start", True)]
    if not top:
        assert probe.receive(10) == ()
    probe.tell(path, "x")
    probe.tell(path, "boom")
    assert probe.receive_many(7, 10) == ["mixin pre_restart", "pre_restart", "mixin post_stop", "post_stop",
                                         "mixin post_restart", "post_restart", "mixin pre_start"]
    assert probe.receive(10) == ("pre_start", True)
    assert state(probe, path) == ["x"]
    probe.tell(path, "stop")
    assert probe.receive_many(2, 10) == ["mixin post_stop", "post_stop"]


# ---- 35-41: nesting --------------------------------------------------------------------------------------------

def test_multiple_persists_with_nested_persist_calls(ps):
    path, probe = prepared(ps, "nested")
    together(ps, probe, path, Cmd("a"), Cmd("b"))
    assert probe.receive_many(10, 10) == [f"{s}{x}" for s in "ab" for x in
                                          ("", "-outer-1", "-outer-2", "-inner-1", "-inner-2")]


def test_multiple_persist_asyncs_with_nested_persist_async_calls(ps):
    path, probe = prepared(ps, "nested", "async")
    together(ps, probe, path, Cmd("a"), Cmd("b"))
    got = probe.receive_many(10, 10)
    for s in "ab":
        assert [x for x in got if x.startswith(s)] == [f"{s}{x}" for x in
                                                       ("", "-outer-1", "-outer-2", "-inner-1", "-inner-2")]


def test_deeply_nested_persist_calls(ps):
    path, probe = prepared(ps, "deep")
    together(ps, probe, path, Cmd("a"), Cmd("b"))
    assert probe.receive_many(14, 10) == [f"{s}{x}" for s in "ab" for x in ["", *(f"-{n}" for n in range(1, 7))]]


def test_deeply_nested_persist_async_calls(ps):
    path, probe = prepared(ps, "deep", "async")
    probe.tell(path, Cmd("a"))
    assert probe.receive_many(7, 10) == ["a", *(f"a-{n}" for n in range(1, 7))]
    together(ps, probe, path, Cmd("b"), Cmd("c"))
    got = probe.receive_many(14, 10)
    for s in "bc":
        assert [x for x in got if x.startswith(s)] == [s, *(f"{s}-{n}" for n in range(1, 7))]


def test_mixed_nesting_of_persist_async_in_persist(ps):
    path, probe = prepared(ps, "mixnest")
    probe.tell(path, Cmd("a"))
    assert probe.receive_many(5, 10) == ["a", "a-outer-1", "a-outer-2", "a-inner-async-1", "a-inner-async-2"]


def test_mixed_nesting_of_persist_in_persist_async(ps):
    path, probe = prepared(ps, "mixnest2")
    probe.tell(path, Cmd("a"))
    assert probe.receive_many(5, 10) == ["a", "a-outer-async-1", "a-outer-async-2", "a-inner-1", "a-inner-2"]


def test_persist_nested_in_persist_async_keeps_stashing(ps):
    path, probe = prepared(ps, "enforce")
    probe.tell(path, Cmd("a"))
    assert probe.receive_many(2, 10) == ["a", "a-outer-async"]
    probe.tell(path, Cmd("b"))  # arrives while the nested persist is pending (or after): "done" either way
    assert probe.receive_many(2, 10) == ["a-inner", "done"]


# ---- 42-44: deleting ---------------------------------------------------------------------------------------------

@where
def test_delete_events(ps, top):
    path, probe = prepared(ps, "b1", top=top)
    probe.tell(path, Cmd("b"))
    assert state(probe, path) == ["a-1", "a-2", "b-1", "b-2"]
    probe.tell(path, Delete(2))
    assert probe.receive(10) == DeleteMessagesSuccess(2)
    probe.tell(path, "boom")
    assert state(probe, path) == ["b-1", "b-2"]


def test_delete_all_events(ps):
    path, probe = prepared(ps, "b1")
    probe.tell(path, Cmd("b"))
    probe.tell(path, Delete(MAX_SEQUENCE_NR))
    assert probe.receive(10) == DeleteMessagesSuccess(MAX_SEQUENCE_NR)
    probe.tell(path, "boom")
    assert state(probe, path) == []
    # The event persisted by the same command is written after the delete, so it survives.
    probe.tell(path, "asks")
    assert probe.receive(10) == 1
    probe.tell(path, "seq")
    assert probe.receive(10) == 5


def test_not_delete_beyond_last_sequence_nr(ps):
    path, probe = prepared(ps, "b1")
    probe.tell(path, Cmd("b"))
    probe.tell(path, Delete(6))  # lastSequenceNr is 4 (5 once the Delete's own event is written)
    failure = probe.receive(10)
    assert isinstance(failure, DeleteMessagesFailure) and "less than or equal to lastSequenceNr" in str(failure.cause)
    assert state(probe, path) == ["a-1", "a-2", "b-1", "b-2"]


# ---- 45-47: failures ------------------------------------------------------------------------------------------------

@where
def test_recover_the_message_which_caused_the_restart(ps, top):
    path, probe = prepared(ps, "restartmsg", top=top)
    probe.tell(path, "Boom")
    assert probe.receive(10) == "failed with TestError while processing Boom"
    # A failing persist handler: pre_restart gets the event, not an internal envelope.
    probe.tell(path, Cmd("h"))
    assert probe.receive(10) == "failed with TestError while processing evt-h"


@where
def test_persist_events_from_recovery_completed_and_fail_when_persisting_during_replay(ps, top):
    path, probe = prepared(ps, "rcpersist", "watch", top=top)
    got = state(probe, path)
    assert got in (["a-1", "a-2", "rc-1", "rc-2"], ["a-1", "a-2", "rc-1", "rc-2", "rc-3"])
    probe.tell(path, Cmd("invalid"))
    assert state(probe, path) == ["a-1", "a-2", "rc-1", "rc-2", "rc-3", "invalid"]
    probe.tell(path, "boom")
    failure = probe.receive(10)
    assert failure.what == "recovery failure" and "Cannot persist during replay" in failure.detail[1]
    assert failure.detail[2] == "invalid"
    assert probe.receive(10) == Report("stopped", path)


@where
def test_stop_actor_when_receive_recover_throws(ps, top):
    path, probe = prepared(ps, "badrecover", "watch", top=top)
    probe.tell(path, "state")
    failure = probe.receive(10)
    assert failure == Report("recovery failure", ("TestError", "receive_recover cannot handle 'a-1'", "a-1"))
    assert probe.receive(10) == Report("stopped", path)
    probe.expect_no_message(0.1)
    if top:  # its host stops for good: a stop during start is not a crash to restart from
        wait_for(lambda: ps.status().hosts[path].state == "stopped", 10)
        assert ps.status().hosts[path].restarts == 0


# ---- TimerPersistentActorSpec, EventSourcedActorDeleteFailureSpec ---------------------------------------------

def test_timer_messages_are_not_discarded_by_stashing(ps):
    path, probe = prepared(ps, "timer")
    together(ps, probe, path, Cmd("hello"), Cmd("again"))
    assert probe.receive_many(2, 10) == ["hello", "again"]


def test_delete_messages_failure_is_delivered_to_the_actor(ps):
    path, probe = prepared(ps, "delfail")
    probe.tell(path, Delete(1))
    failure = probe.receive(10)
    assert isinstance(failure, DeleteMessagesFailure) and failure.to_sequence_nr == 1
    assert "Boom! Unable to delete events!" in str(failure.cause)
    probe.tell(path, "boom")
    assert state(probe, path) == ["a-1", "a-2"]  # nothing was deleted


@where
def test_exception_in_recovery_completed_handler_restarts_and_keeps_commands(ps, top):
    # RecoveryPermitterSpec "return permit when actor throws from RecoveryCompleted": not a recovery
    # failure; the actor restarts (here twice, then its handler succeeds) and the waiting command survives.
    path, probe = prepared(ps, "rcthrow", top=top)
    probe.tell(path, Cmd("b"))
    assert state(probe, path) == ["a-1", "a-2", "b-1", "b-2"]
    probe.tell(path, "rc-runs")
    assert probe.receive(10) == 3
    # Its error names what it failed on, not the message the restart is carried by (_RestartAfterRecovery).
    reasons = [e.reason for e in ps.errors().recent if e.path == path]
    assert reasons and all(r.startswith("failed on RecoveryCompleted: TestError") for r in reasons), reasons

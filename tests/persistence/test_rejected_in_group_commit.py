"""Writes the journal rejects in the middle of a group commit shared by several actors of one host, on both bases:
Akka's onPersistRejected (the actor goes on) for the rejected actor alone, the others' events durable and handled
once."""

from __future__ import annotations

import itertools

import pytest

from journal import open_journal
from tests.persistence.fixtures import Failed, Ops, Rejecting, Unregistered

pytestmark = pytest.mark.timeout(60)
_ids = itertools.count(1)


def _by_entity(replies: list) -> dict[str, list]:
    """The replies of one probe grouped by the entity that sent them (named by the first letter of each event)."""
    grouped: dict[str, list] = {}
    for r in replies:
        name = r.detail.removeprefix("Unregistered(name='") if isinstance(r, Failed) else r if isinstance(r, str) else r[0]
        grouped.setdefault(name[0], []).append(r)
    return grouped


def test_a_rejected_write_in_a_shared_group_commit_is_that_actor_s_rejection_only(psystem, tmp_path):
    n = next(_ids)
    psystem.spawn(Rejecting, path="/user/r", entities=True)
    a, b, c, d = (f"/user/r/{x}{n}" for x in "abcd")
    probe = psystem.probe()
    for path in (a, b, c, d):  # recovered before the commands, so that theirs meet in one group commit
        assert psystem.ask(path, "state") == ()
    psystem.tell_many([
        (a, Ops("a", ("p:1", "bad:2", "p:3", "d:4"))),  # a rejected persist between two stored ones, then a defer
        (b, Ops("b", ("pa:1", "pall:2,3", "da:4"))),  # nothing rejected
        (c, Ops("c", ("allbad:1,2", "p:3"))),  # an atomic persist_all with one unstorable event: rejected whole
        (d, Ops("d", ("abad:1", "pa:2"))),  # a rejected persist_async
        *[(p, ("state of", p[-2])) for p in (a, b, c, d)],  # (waiting behind the stashing persists only)
    ], sender=probe.path)
    replies = _by_entity(probe.receive_many(18, 15))
    probe.expect_no_message(0.3)  # no handler ran twice
    # Akka's order: each persist's handler (or rejection) in call order, a command stashed behind a stashing persist
    # once none is pending (ahead of the defer_async after it), a persist_async's command at once.
    assert replies["a"] == ["a-1-1", Failed("rejected", f"{Unregistered('a-2')}@2"), "a-3-2", "a-4", ("a", ("a-1", "a-3"))]
    assert replies["b"] == ["b-1-1", "b-2-2", "b-3-3", ("b", ("b-1", "b-2", "b-3")), "b-4"]
    assert replies["c"] == [Failed("rejected", "c-1@1"), Failed("rejected", f"{Unregistered('c')}@2"),
                            Failed("rejected", "c-2@3"), "c-3-1", ("c", ("c-3",))]
    assert replies["d"] == [("d", ()), Failed("rejected", f"{Unregistered('d-1')}@1"), "d-2-1"]

    with open_journal(f"sqlite:///{tmp_path}/journal.db") as j:
        stored = {p: [(e.sequence_nr, e.event) for e in j.events_by_persistence_id(p)] for p in (a, b, c, d)}
    assert stored == {a: [(1, "a-1"), (3, "a-3")], b: [(1, "b-1"), (2, "b-2"), (3, "b-3")], c: [(4, "c-3")],
                      d: [(2, "d-2")]}
    # Every actor went on (none stopped) and recovers what is stored; numbering goes on above the rejected events.
    for path in (a, b, c, d):
        psystem.stop(path)
    assert [psystem.ask(p, "state") for p in (a, b, c, d)] == [("a-1", "a-3"), ("b-1", "b-2", "b-3"), ("c-3",),
                                                                 ("d-2",)]
    assert [psystem.ask(p, "seq") for p in (a, b, c, d)] == [3, 3, 4, 2]


def test_an_event_whose_encoding_raises_an_unforeseen_error_is_rejected_alone(psystem, tmp_path):
    # Priced(5, "CHF") raises KeyError as the journal encodes it (its registered packing's bug). That failed the host's
    # whole group commit: every actor in it had on_persist_failure and stopped, and none of their events was stored.
    n = next(_ids)
    psystem.spawn(Rejecting, path="/user/r", entities=True)
    a, b = f"/user/r/a{n}", f"/user/r/b{n}"
    probe = psystem.probe()
    for path in (a, b):
        assert psystem.ask(path, "state") == ()
    psystem.tell_many([(a, Ops("a", ("price:5 CHF", "p:2"))), (b, Ops("b", ("p:1",)))], sender=probe.path)
    replies = probe.receive_many(2, 15)
    assert not [r for r in replies if isinstance(r, Failed) and r.what == "persist"], replies  # (both stopped, their events unstored)
    replies.append(probe.receive(15))
    probe.expect_no_message(0.3)
    rejected = [r for r in replies if isinstance(r, Failed)]
    assert rejected == [Failed("rejected", "5 CHF@1")], replies
    assert [r for r in replies if not isinstance(r, Failed)] in (["a-2-1", "b-1-1"], ["b-1-1", "a-2-1"])
    with open_journal(f"sqlite:///{tmp_path}/journal.db") as j:
        assert [(e.sequence_nr, e.event) for e in j.events_by_persistence_id(a)] == [(2, "a-2")]
        assert [(e.sequence_nr, e.event) for e in j.events_by_persistence_id(b)] == [(1, "b-1")]
    assert any("KeyError" in e.reason and "rejected" in e.reason for e in psystem.errors().recent if e.path == a)

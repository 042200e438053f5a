"""Persistent entities with receive_batch: the stash still holds commands back; persist_applied_many."""

from __future__ import annotations

import pytest

from journal import AtomicWrite, PersistentRepr, open_journal
from persistence.idempotent import AppliedBatch
from tests.persistence.batch_fixtures import ManyReceiver, StashingBatched
from tests.persistence.compact_fixtures import Parcel
from tests.persistence.test_compact_events import journal_events
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


def test_commands_of_a_batch_wait_for_a_stashing_persist(psystem):
    probe = psystem.probe()
    psystem.spawn(StashingBatched, "/user/s", entities=True, args=(probe.path,))
    psystem.tell_many([("/user/s/1", m) for m in ("p:1", "c1", "p:2", "c2")], sender=probe.path)
    assert probe.receive_many(4, 10) == [("persisted", "1"), ("cmd", "c1"), ("persisted", "2"), ("cmd", "c2")]


def test_persist_applied_many_journals_one_applied_batch_and_skips_duplicates(base, make_system, tmp_path):
    def system():
        return make_system(base, journal=f"sqlite:///{tmp_path}/journal.db",
                           snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")

    first = system()
    probe = first.probe()
    first.spawn(ManyReceiver, "/user/r", entities=True)
    parcels = [Parcel(i, f"p{i}") for i in (1, 2, 3, 2, 4)]
    first.tell_many([("/user/r/1", p) for p in parcels] + [("/user/r/1", "status")], sender=probe.path)
    applied, flags = wait_for(lambda: (s := first.ask("/user/r/1", "status"))[0] and s)
    assert applied == ("p1", "p2", "p3", "p4") and flags == ((True, True, True, False, True),)
    first.tell_many([("/user/r/1", Parcel(i, "again")) for i in (3, 5)], sender=probe.path)
    assert wait_for(lambda: first.ask("/user/r/1", "status")[0]) == ("p1", "p2", "p3", "p4", "again")
    first.shutdown()
    events = journal_events(tmp_path, "/user/r/1")
    assert [(type(e), e.delivery_ids) for e in events] == [(AppliedBatch, (1, 2, 3, 4)), (AppliedBatch, (5,))]
    # Recovery: the applications and the dedup state come back.
    second = system()
    second.spawn(ManyReceiver, "/user/r", entities=True)
    second.tell("/user/r/1", Parcel(4, "dup"), sender=probe.path)
    assert second.ask("/user/r/1", "status") == (("p1", "p2", "p3", "p4", "again"), ((False,),))


@pytest.mark.parametrize(("origins", "ids", "sends", "expected"), [
    # applications from two origins in one batch: each origin's ids are its own
    (("/user/a", "/user/b", "/user/a"), (1, 1, 2), [("/user/a", 1), ("/user/b", 1), ("/user/b", 2), ("/user/a", 3)],
     ("x", "y", "z", "b2", "a3")),
    # one origin for all (stored once)
    (("/user/a",), (1, 2, 3), [("/user/a", 2), ("/user/b", 2), ("/user/a", 3), ("/user/a", 4)], ("x", "y", "z", "b2", "a4")),
])
def test_a_recovered_applied_batch_restores_each_origins_applied_ids(base, make_system, tmp_path, origins, ids, sends,
                                                                     expected):
    """Replayed in order, and each origin's ids count as applied after recovery (redeliveries are skipped)."""
    journal = f"sqlite:///{tmp_path}/journal.db"
    with open_journal(journal) as j:
        assert j.write_messages([AtomicWrite([PersistentRepr(AppliedBatch(origins, ids, ("x", "y", "z")), 1,
                                                             "/user/r/1")])]) == [None]
    system = make_system(base, journal=journal)
    system.spawn(ManyReceiver, "/user/r", entities=True)
    assert system.ask("/user/r/1", "status") == (("x", "y", "z"), ())
    for origin, delivery_id in sends:
        system.tell("/user/r/1", Parcel(delivery_id, f"{origin[-1]}{delivery_id}"), sender=origin)
    assert wait_for(lambda: system.ask("/user/r/1", "status")[0] == expected, timeout=20)

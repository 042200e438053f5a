"""SnapshotSpec and the snapshot failure specs of reference §4.6, on both bases.

Not ported: SnapshotSpec #2 "recover completely if snapshot is not handled" (a Python receive_recover has
no "not defined at" for an offer; Recovery(from_snapshot=NONE) is how to skip snapshots).
"""

from __future__ import annotations

import pytest

from journal import SnapshotMetadata, SnapshotSelectionCriteria, open_snapshot_store
from persistence import (
    DeleteSnapshotFailure,
    DeleteSnapshotsFailure,
    DeleteSnapshotsSuccess,
    DeleteSnapshotSuccess,
    RecoveryCompleted,
)
from tests.persistence.spec_actors import Cmd, Report, new_name, state

pytestmark = pytest.mark.timeout(60)
RC = RecoveryCompleted()


def saved_fixture(ps, kind="ss"):
    """Akka's per-case fixture: a, snapshot, b, snapshot, c, d, snapshot, e, f (snapshots at 1, 2, 4)."""
    name = new_name(kind)
    probe = ps.probe(name)
    path = f"/user/spec/{name}"
    for m in (Cmd("a"), "take", Cmd("b"), "take", Cmd("c"), Cmd("d"), "take", Cmd("e"), Cmd("f")):
        probe.tell(path, m)
    assert probe.receive_many(3, 10) == [1, 2, 4]
    assert state(probe, path) == ["a-1", "b-2", "c-3", "d-4", "e-5", "f-6"]
    ps.stop(path)
    return name, probe


def load(ps, probe, name, *flags, first="wake"):
    """Start SnapshotSpec's loader actor on `name` with recovery `flags`; returns its path."""
    path = f"/user/spec/{name}~ls" + "".join(f"~{f}" for f in flags)
    probe.tell(path, first)
    return path


def offer(seq, *events):
    return ("offer", seq, True, tuple(events))


ABCD = ("a-1", "b-2", "c-3", "d-4")


@pytest.mark.parametrize("flags,expected", [
    ((), [offer(4, *ABCD), "e-5", "f-6", RC]),
    (("to3",), [offer(2, "a-1", "b-2"), "c-3", RC]),
    (("crit2",), [offer(2, "a-1", "b-2"), "c-3", "d-4", "e-5", "f-6", RC]),
    (("crit2", "to3"), [offer(2, "a-1", "b-2"), "c-3", RC]),
    (("nosnap", "to3"), ["a-1", "b-2", "c-3", RC]),
    (("nosnap", "rmax2"), ["a-1", "b-2", RC]),
    (("rmax1",), [offer(4, *ABCD), "e-5", RC]),
    (("none",), [RC]),
], ids=["most-recent", "upper-bound", "criteria", "criteria-and-bound", "from-scratch", "replay-max",
        "snapshot-and-replay-max", "recovery-none"])
def test_recover_with_snapshot_selection(ps, flags, expected):
    name, probe = saved_fixture(ps)
    load(ps, probe, name, *flags)
    assert probe.receive_many(len(expected), 10) == expected
    probe.expect_no_message(0.1)


def test_recover_to_a_snapshot_without_further_replay_and_commands_wait(ps):
    name, probe = saved_fixture(ps)
    load(ps, probe, name, "to4", first="done")
    assert probe.receive_many(3, 10) == [offer(4, *ABCD), RC, "done"]


def test_recovery_none_continues_numbering_after_the_journal(ps):
    name, probe = saved_fixture(ps)
    path = load(ps, probe, name, "none", first=Cmd("g"))
    assert probe.receive_many(2, 10) == [RC, "g-7"]
    probe.tell(path, "seq")
    assert probe.receive(10) == 7


def test_single_snapshot_deletion(ps):
    name, probe = saved_fixture(ps)
    path = load(ps, probe, name, "to4")
    assert probe.receive_many(2, 10) == [offer(4, *ABCD), RC]
    probe.tell(path, ("delsnap", 4))
    deleted = probe.receive(10)
    assert isinstance(deleted, DeleteSnapshotSuccess)
    assert (deleted.metadata.persistence_id, deleted.metadata.sequence_nr) == (name, 4)
    ps.stop(path)
    load(ps, probe, name, "to4")
    assert probe.receive_many(4, 10) == [offer(2, "a-1", "b-2"), "c-3", "d-4", RC]


def test_bulk_snapshot_deletion(ps):
    name, probe = saved_fixture(ps)
    path = load(ps, probe, name, "to4")
    assert probe.receive_many(2, 10) == [offer(4, *ABCD), RC]
    probe.tell(path, ("delsnaps", 4))
    assert probe.receive(10) == DeleteSnapshotsSuccess(SnapshotSelectionCriteria(max_sequence_nr=4))
    ps.stop(path)
    load(ps, probe, name, "to4")
    assert probe.receive_many(5, 10) == [*ABCD, RC]


# ---- SnapshotFailureRobustnessSpec / SnapshotIsOptionalSpec -------------------------------------------

def test_recover_from_the_most_recent_complete_snapshot(ps):
    name = new_name("sf")
    probe = ps.probe(name)
    path = f"/user/spec/{name}"
    for m in (Cmd("blahonga"), "take", Cmd("kablama"), "take"):
        probe.tell(path, m)
    assert probe.receive_many(2, 10) == [1, 2]  # the one at 2 was written as garbage
    ps.stop(path)
    load(ps, probe, name)
    assert probe.receive_many(3, 10) == [offer(1, "blahonga-1"), "kablama-2", RC]
    probe.expect_no_message(0.1)


def boom_snapshots(ps, kind):
    name = new_name(kind)
    probe = ps.probe(name)
    path = f"/user/spec/{name}"
    for m in (Cmd("boom1"), "take", Cmd("boom2"), "take", Cmd("boom3"), "take"):
        probe.tell(path, m)
    assert probe.receive_many(3, 10) == [1, 2, 3]  # all three written as garbage
    ps.stop(path)
    return name, probe


def test_fail_recovery_and_stop_when_no_snapshot_can_be_loaded(ps):
    name, probe = boom_snapshots(ps, "sf")
    path = load(ps, probe, name, "watch")
    failure = probe.receive(10)
    assert failure.what == "recovery failure" and "snapshot" in failure.detail[1]
    assert probe.receive(10) == Report("stopped", path)
    probe.expect_no_message(0.1)


def test_snapshot_is_optional_falls_back_to_events(ps):
    name, probe = boom_snapshots(ps, "so")
    load(ps, probe, name)
    assert probe.receive_many(4, 10) == ["boom1-1", "boom2-2", "boom3-3", RC]


def test_failure_message_when_deleting_a_snapshot_fails(ps):
    name = new_name("sf")
    probe = ps.probe(name)
    path = load(ps, probe, name)
    assert probe.receive(10) == RC
    probe.tell(path, ("delsnap", 1))
    failure = probe.receive(10)
    assert isinstance(failure, DeleteSnapshotFailure) and failure.metadata.sequence_nr == 1
    assert "Failed to delete" in str(failure.cause)
    probe.tell(path, ("delsnaps", 1))
    failure = probe.receive(10)
    assert isinstance(failure, DeleteSnapshotsFailure) and "Failed to delete" in str(failure.cause)


def test_save_snapshot_without_a_snapshot_store_fails(ps):
    name = new_name("nostore")
    probe = ps.probe(name)
    path = f"/user/spec/{name}"
    probe.tell(path, Cmd("a"))
    probe.tell(path, "take")
    failure = probe.receive(10)
    assert failure.what == "save failed" and "No snapshot store configured" in failure.detail


# ---- SnapshotRecoveryWithEmptyJournalSpec / SnapshotRecoveryLocalStoreSpec ----------------------------------

def test_snapshot_newer_than_an_empty_journal_advances_numbering(ps):
    name = new_name("ss")
    probe = ps.probe(name)
    with open_snapshot_store(ps.config["snapshot_store"]) as store:
        store.save(SnapshotMetadata(name, 4710), ["old"])
        store.save(SnapshotMetadata(name, 4711), ["new"])
    load(ps, probe, name, first=Cmd("x"))
    assert probe.receive_many(3, 10) == [offer(4711, "new"), RC, "x-4712"]


def test_snapshots_of_similar_ids_are_not_confused(ps):
    name = new_name("ss")
    probe = ps.probe(name)
    for pid, payload in ((name, ("europe",)), (name + "italy", ("europe-italy",))):
        ps.probe(pid).tell(f"/user/spec/{pid}", ("take-as", payload))
    assert probe.receive(10) == 0  # a snapshot at sequence nr 0 (no events) is legal
    assert ps.probe(name + "italy").receive(10) == 0
    load(ps, probe, name, "to0")
    assert probe.receive_many(2, 10) == [offer(0, "europe"), RC]

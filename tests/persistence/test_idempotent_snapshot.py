"""IdempotentReceiver's snapshots with applications in flight, on both bases: a snapshot keeps as applied only
what its state holds, and recovery replays what it does not, so no delivery is left marked applied unapplied.
Also a duplicate's confirm, which waits for the original's write even when that write is split after a rejection."""

from __future__ import annotations

import itertools
from typing import Any

import pytest

from persistence import Confirm, IdempotentReceiver, SnapshotOffer
from persistence.idempotent import Applied, AppliedBatch
from tests.persistence.compact_fixtures import Parcel
from tests.persistence.failing_journals import register_failing_first_write
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)

def _flaky(payload: object) -> list[str]:
    """The events of an application (alone or gathered) starting with "flaky": their first write fails."""
    events = payload.events if type(payload) is AppliedBatch else (
        (payload.event,) if type(payload) is Applied else ())
    return [e for e in events if isinstance(e, str) and e.startswith("flaky")]


register_failing_first_write("flakyidem", _flaky)


class SnapshottingReceiver(IdempotentReceiver):
    """Applies each Parcel once; ("many", parcel, ...) applies them in one turn, ("snap", parcel, ...) too and then
    saves a snapshot in the same turn."""

    journal_url = "flakyidem://idempotent-snapshot"
    snapshot_store_url = "flakyidem://idempotent-snapshot"

    def pre_start(self) -> None:
        self.applied: list[str] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.applied = list(event.snapshot)
        elif isinstance(event, str):
            self.applied.append(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Parcel):
            self._apply(message, sender)
        elif isinstance(message, tuple) and message[0] == "many":
            for parcel in message[1:]:
                self._apply(parcel, sender)
        elif isinstance(message, tuple) and message[0] == "snap":
            for parcel in message[1:]:
                self._apply(parcel, sender)
            self.save_snapshot(tuple(self.applied))  # what is applied (durable) so far
        elif message == "applied":
            self.tell(sender, tuple(self.applied))

    def _apply(self, parcel: Parcel, sender: str | None) -> None:
        def applied(event: str) -> None:
            self.applied.append(event)
            self.tell(sender, ("confirm", parcel.delivery_id))

        if not self.persist_applied(cast_str(sender), parcel.delivery_id, parcel.payload, applied):
            self.defer_async(parcel.delivery_id, lambda i: self.tell(sender, ("confirm", i)))


class SnapshotInHandler(SnapshottingReceiver):
    """Saves a snapshot in the handler of its second application (Akka's pattern: in the persist handler)."""

    def _apply(self, parcel: Parcel, sender: str | None) -> None:
        def applied(event: str) -> None:
            self.applied.append(event)
            self.tell(sender, ("confirm", parcel.delivery_id))
            if len(self.applied) == 2:
                self.save_snapshot(tuple(self.applied))

        self.persist_applied(cast_str(sender), parcel.delivery_id, parcel.payload, applied)


class SnapshotInHandlerConfirmingDuplicates(SnapshotInHandler):
    """SnapshotInHandler that confirms a duplicate again (as apply_and_confirm does)."""

    def _apply(self, parcel: Parcel, sender: str | None) -> None:
        if self.already_applied(cast_str(sender), parcel.delivery_id):
            self.defer_async(parcel.delivery_id, lambda i: self.tell(sender, ("confirm", i)))
        else:
            super()._apply(parcel, sender)


def cast_str(sender: str | None) -> str:
    assert sender is not None
    return sender


_ids = itertools.count(1)


def _entity(make_system, base: str, cls: type, prefix: str, tmp_path) -> tuple[Any, str, Any, int]:
    """A system on `base` with entities of `cls` at `prefix`; one new entity's path, a probe, and its number (the
    journal and what failed are per process: each case has its own entity and events)."""
    system = make_system(base)
    system.spawn(cls, path=prefix, entities=True)
    n = next(_ids)
    return system, f"{prefix}/{tmp_path.name}-{n}", system.probe(), n


@pytest.mark.parametrize("count", [1, 2], ids=["one", "gathered"])
def test_a_delivery_whose_write_failed_after_a_snapshot_is_applied_when_redelivered(base, make_system, tmp_path,
                                                                                     count):
    # The snapshot stored the dedup memory as it was when save_snapshot was called: with the deliveries whose
    # applications were queued in the same turn, not written yet. Their write failed (the actor stops, as Akka's
    # persist failure), the next instance recovered from that snapshot, took the redeliveries for duplicates and
    # confirmed them without applying them: the deliveries were lost.
    system, path, probe, n = _entity(make_system, base, SnapshottingReceiver, "/user/r", tmp_path)
    parcels = [Parcel(2, f"flaky-{n}"), Parcel(3, f"c-{n}")][:count]  # (gathered: one AppliedBatch for both)
    probe.tell(path, Parcel(1, "a"))
    assert probe.receive(10) == ("confirm", 1)
    probe.tell(path, ("snap", *parcels))  # their write fails: no confirm
    wait_for(lambda: system.errors(), timeout=10)
    for parcel in parcels:  # the sender redelivers them (to the next instance)
        probe.tell(path, parcel)
    assert sorted(probe.receive(10)[1] for _ in parcels) == [p.delivery_id for p in parcels]
    assert system.ask(path, "applied", timeout=10) == ("a", *[p.payload for p in parcels]), \
        "a delivery confirmed without being applied"


def test_a_snapshot_saved_by_a_handler_of_a_gathered_commit_is_recovered_with_the_applications_after_it(
        base, make_system, tmp_path):
    # Applications of one turn are journaled as one AppliedBatch (one sequence number). A snapshot saved by the
    # handler of the second of three was stored at that sequence number, with the state of two and all three
    # marked applied: recovered from it (no crash needed: a restart), the third was neither replayed nor
    # applicable again.
    system, path, probe, n = _entity(make_system, base, SnapshotInHandler, "/user/h", tmp_path)
    parcels = [Parcel(k, f"p{k}-{n}") for k in (1, 2, 3)]
    probe.tell(path, ("many", *parcels))  # (applied in one turn: one AppliedBatch)
    assert sorted(probe.receive(10)[1] for _ in parcels) == [1, 2, 3]
    assert system.ask(path, "applied", timeout=10) == tuple(p.payload for p in parcels)
    system.stop(path)  # its next instance recovers from the newest snapshot
    wait_for(lambda: system.ask(path, "applied", timeout=10) == tuple(p.payload for p in parcels), timeout=10)
    for parcel in parcels:  # redelivered: each a duplicate
        probe.tell(path, parcel)
    assert system.ask(path, "applied", timeout=10) == tuple(p.payload for p in parcels)


def test_a_snapshot_saved_before_a_rejected_write_of_the_same_commit_is_handled_keeps_it_unapplied(
        base, make_system, tmp_path):
    # The gathered AppliedBatch of b and c was rejected (c's event cannot be stored) and split: each application
    # went again as an event of its own, b's stored, c's rejected, in one write. b's handler saved a snapshot
    # (Akka's pattern) before c's rejection was handled: c, marked applied at its persist_applied call and no
    # longer queued, was stored in it as applied. Recovered from that snapshot (a restart, e.g. after c's
    # sender was fixed to send a storable event), the receiver took c's redelivery for a duplicate and confirmed
    # it without applying it: the delivery was lost silently.
    system, path, probe, n = _entity(make_system, base, SnapshotInHandlerConfirmingDuplicates, "/user/rj", tmp_path)
    probe.tell(path, Parcel(1, f"a-{n}"))
    assert probe.receive(10) == ("confirm", 1)
    probe.tell(path, ("many", Parcel(2, f"b-{n}"), Parcel(3, 2**70)))  # (an int beyond 64 bits: rejected)
    assert probe.receive(10) == ("confirm", 2)  # b's handler saved the snapshot
    wait_for(lambda: system.errors(), timeout=10)  # c's rejection is reported
    assert system.ask(path, "applied", timeout=10) == (f"a-{n}", f"b-{n}")
    system.stop(path)  # its next instance recovers from the snapshot
    wait_for(lambda: system.ask(path, "applied", timeout=10) == (f"a-{n}", f"b-{n}"), timeout=10)
    probe.tell(path, Parcel(3, f"c-{n}"))  # c redelivered, storable now
    assert probe.receive(10) == ("confirm", 3)
    assert system.ask(path, "applied", timeout=10) == (f"a-{n}", f"b-{n}", f"c-{n}"), \
        "a delivery confirmed without being applied"


def _split_flaky(payload: object) -> list[str]:
    """An application journaled on its own (an Applied: split from a rejected AppliedBatch) whose event starts
    with "split-flaky": its first write fails."""
    e = payload.event if type(payload) is Applied else None
    return [e] if isinstance(e, str) and e.startswith("split-flaky") else []


register_failing_first_write("splitidem", _split_flaky)


class SplitReceiver(SnapshottingReceiver):
    journal_url = "splitidem://idempotent-split"
    snapshot_store_url = "splitidem://idempotent-split"


def test_a_duplicate_is_confirmed_only_once_the_split_write_of_its_original_is_durable(base, make_system, tmp_path):
    # a and b, applied in one turn, went as one AppliedBatch, rejected (b's event cannot be stored) and split: each
    # application went again as an event of its own, in the next write. a's redelivery, in the same turn, was a
    # duplicate, confirmed after the writes in flight (defer_async): it ran with the rejected write's handlers,
    # before a's own write. That write failed (the actor stops): a was confirmed, never stored, and its sender
    # stopped redelivering it: the delivery lost silently.
    system, path, probe, n = _entity(make_system, base, SplitReceiver, "/user/sp", tmp_path)
    a = Parcel(1, f"split-flaky-{n}")
    probe.tell(path, ("many", a, Parcel(2, 2**70), a))  # (an int beyond 64 bits: rejected)
    wait_for(lambda: any("simulated write failure" in e.reason for e in system.errors().recent), timeout=10)
    probe.tell(path, "applied")  # (its next instance, recovered: neither is stored)
    assert probe.receive(10) == (), "a delivery confirmed before its event was durable (and it never was)"
    probe.tell(path, a)  # its sender redelivers it (no confirm came)
    assert probe.receive(10) == ("confirm", 1)
    assert system.ask(path, "applied", timeout=10) == (a.payload,)


class ConfirmingReceiver(IdempotentReceiver):
    """Applies each Parcel once with apply_and_confirm (a duplicate is confirmed again); ("many", parcel, ...)
    applies them in one turn."""

    journal_url = "flakyidem://idempotent-confirming"
    snapshot_store_url = "flakyidem://idempotent-confirming"

    def pre_start(self) -> None:
        self.applied: list[Any] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, str):
            self.applied.append(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        parcels = message[1:] if isinstance(message, tuple) and message[0] == "many" else (message,)
        if message == "applied":
            self.tell(sender, tuple(self.applied))
            return
        for parcel in parcels:
            self.apply_and_confirm(cast_str(sender), parcel.delivery_id, parcel.payload, self.applied.append)


def test_a_duplicate_of_a_rejected_application_is_not_confirmed(base, make_system, tmp_path):
    # A duplicate is confirmed after the write in flight of its original (apply_and_confirm): also when that write
    # was rejected (its event cannot be stored), so nothing was applied. Its sender, confirmed, never sent it again
    # (e.g. once fixed to send a storable event): the delivery lost silently.
    system, path, probe, n = _entity(make_system, base, ConfirmingReceiver, "/user/cr", tmp_path)
    bad = Parcel(1, 2**70)  # (an int beyond 64 bits: rejected)
    probe.tell(path, ("many", bad, bad))  # (the second is a duplicate while the first one's write is in flight)
    wait_for(lambda: system.errors().recent, timeout=10)  # the rejection is reported
    probe.tell(path, "applied")
    assert probe.receive(10) == (), "a delivery confirmed although its event was rejected"
    probe.tell(path, Parcel(1, f"fixed-{n}"))  # its sender redelivers it (no confirm came), storable now
    assert probe.receive(10) == Confirm(1)
    assert system.ask(path, "applied", timeout=10) == (f"fixed-{n}",)

"""DurableDelivery and IdempotentReceiver journal compact events (one per group commit), on both bases."""

from __future__ import annotations

from typing import Any

import pytest

from journal import AtomicWrite, PersistentRepr
from journal.sqlite import SqliteJournal
from persistence import ConfirmDeliveries
from persistence.durable import DeliveriesConfirmed, DeliveriesSent, DeliveryConfirmed, DeliverySent
from persistence.idempotent import AppliedBatch
from tests.persistence.compact_fixtures import (
    CountingShipper,
    Parcel,
    Receiver,
    Ship,
    Shipper,
    SnapshottingReceiver,
    _message,
)
from tests.persistence.failing_journals import register_failing_first_write
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)

SHP, RCV = "/user/shp", "/user/rcv"


def journal_events(tmp_path, pid):
    j = SqliteJournal(f"{tmp_path}/journal.db")
    try:
        return [r.payload for r in j.replay_messages(pid)]
    finally:
        j.close()


def start(psystem):
    psystem.spawn(Receiver, path=RCV)
    psystem.spawn(Shipper, path=SHP)
    return psystem.probe()


def settled(system, unconfirmed=0, applied=None):
    """Wait until the shipper has `unconfirmed` deliveries left and the receiver applied `applied` events."""
    def check():
        shp, rcv = system.ask(SHP, "status"), system.ask(RCV, "status")
        return shp[0] == unconfirmed and (applied is None or len(rcv[0]) == applied) and (shp, rcv)
    return wait_for(check, 30)


def test_deliveries_and_confirms_are_journaled_compactly_and_recovered(psystem, tmp_path):
    probe = start(psystem)
    payloads = tuple("abcdefghij")
    probe.tell(SHP, Ship(RCV, payloads))
    assert probe.receive(10) == ("shipped", tuple(range(1, 11)))
    _, rcv = settled(psystem, applied=10)
    assert sorted(rcv[0]) == list(payloads)

    events = journal_events(tmp_path, SHP)
    assert [type(e) for e in events][0] is DeliveriesSent
    sent = [e for e in events if type(e) is DeliveriesSent]
    assert len(sent) == 1 and sent[0].delivery_ids == tuple(range(1, 11)) and sent[0].destinations == (RCV,)
    assert [m.payload for m in sent[0].messages] == list(payloads)
    confirmed = [i for e in events if type(e) is DeliveriesConfirmed for i in e.delivery_ids]
    assert sorted(confirmed) == list(range(1, 11))
    applied = [e for e in journal_events(tmp_path, RCV)]
    assert all(type(e) is AppliedBatch for e in applied)
    assert sorted(i for e in applied for i in e.delivery_ids) == list(range(1, 11))

    # Both restart through recovery from the compact events: nothing unconfirmed, numbering goes on,
    # everything applied is remembered and nothing is applied twice.
    probe.tell(SHP, "boom")
    probe.tell(RCV, "boom")
    shp, rcv = settled(psystem, applied=10)
    assert shp[1] == 10
    assert sorted(rcv[0]) == list(payloads)
    probe.tell(SHP, Ship(RCV, ("k", "l")))
    assert probe.receive(10) == ("shipped", (11, 12))
    _, rcv = settled(psystem, applied=12)
    psystem.tell(RCV, Parcel(3, "c"), sender=SHP)  # a redelivery of something applied before the restart
    _, rcv = settled(psystem, applied=12)
    assert sorted(rcv[0]) == list("abcdefghijkl")
    assert rcv[2] == 0


def test_per_delivery_events_of_earlier_versions_still_replay(psystem, tmp_path):
    j = SqliteJournal(f"{tmp_path}/journal.db")
    events = [DeliverySent(1, RCV, Parcel(1, "x")), DeliverySent(2, RCV, Parcel(2, "y")), DeliveryConfirmed(1)]
    j.write_messages([AtomicWrite([PersistentRepr(e, seq, SHP)]) for seq, e in enumerate(events, 1)])
    j.close()
    probe = start(psystem)
    shp, rcv = settled(psystem, applied=1)
    assert rcv[0] == ("y",)  # only the unconfirmed one is redelivered after recovery
    assert shp[1] == 2
    probe.tell(SHP, Ship(RCV, ("z",)))
    assert probe.receive(10) == ("shipped", (3,))
    settled(psystem, applied=2)


def test_an_unstorable_delivery_is_rejected_alone(psystem, tmp_path):
    probe = start(psystem)
    probe.tell(SHP, Ship(RCV, ("a", "bad", "b")))
    assert probe.receive(10) == ("shipped", (1, 2, 3))
    shp, rcv = settled(psystem, applied=2)
    assert sorted(rcv[0]) == ["a", "b"]
    assert shp[3] == ((2,),)  # on_persist_rejected saw the bad delivery, given up: nothing unconfirmed
    sent = [i for e in journal_events(tmp_path, SHP) if type(e) is DeliveriesSent for i in e.delivery_ids]
    assert sorted(sent) == [1, 3]


def test_an_unstorable_application_is_rejected_alone(psystem):
    psystem.spawn(Receiver, path=RCV)
    probe = psystem.probe()
    psystem.tell_many([(RCV, Parcel(1, "a")), (RCV, Parcel(2, "bad")), (RCV, Parcel(3, "b"))], sender=probe.path)
    confirmed: list[int] = []
    while sorted(confirmed) != [1, 3]:
        message = probe.receive(10)
        assert type(message) is ConfirmDeliveries
        confirmed += message.delivery_ids
    applied, rejected, _ = wait_for(lambda: (s := psystem.ask(RCV, "status"))[1] and s, 10)
    assert sorted(applied) == ["a", "b"] and rejected == 1
    # Nothing was stored for delivery 2, so its redelivery is applied again (and rejected again),
    # not taken for a duplicate of something applied.
    psystem.tell(RCV, Parcel(2, "bad"), sender=probe.path)
    assert wait_for(lambda: psystem.ask(RCV, "status")[1] == 2, 10)
    # That redelivery was the only application of its commit (an AppliedBatch of one, rejected whole):
    # its id is forgotten too, so the next redelivery is applied (and rejected) again.
    psystem.tell(RCV, Parcel(2, "bad"), sender=probe.path)
    assert wait_for(lambda: psystem.ask(RCV, "status")[1] == 3, 10)


def test_the_journal_keeps_the_order_of_the_calls(psystem, tmp_path):
    probe = start(psystem)
    probe.tell(SHP, Ship(RCV, ("a", "b"), mark="after-a-and-b"))
    assert probe.receive(10) == ("shipped", (1, 2))
    assert probe.receive(10) == ("marked", "after-a-and-b")
    settled(psystem, applied=2)
    events = journal_events(tmp_path, SHP)
    assert type(events[0]) is DeliveriesSent and events[0].delivery_ids == (1, 2)
    assert events[1] == "after-a-and-b"


def test_seen_ids_agree_with_a_set_in_and_out_of_order():
    import random

    from persistence.idempotent import SeenIds

    rng = random.Random(7)
    for spread in (3, 50, 1000):
        seen, model, low = SeenIds(), set(), 0
        for _ in range(3000):
            i = rng.randint(1, spread) if rng.random() < 0.3 else max(model, default=0) + rng.randint(1, 3)
            assert seen.add(i) is (i not in model)
            model.add(i)
            while low + 1 in model:
                low += 1
            assert seen.low == low
        assert all((i in seen) == (i in model) for i in range(1, max(model) + 5))
        assert seen.range_count <= len(model)
        for i in rng.sample(sorted(model), 200):  # forgetting ids (rejected applications) splits ranges
            seen.discard(i)
            model.discard(i)
        assert all((i in seen) == (i in model) for i in range(1, max(model) + 5))


def test_batched_confirmations_go_through_an_overridden_confirm_delivery(psystem):
    psystem.spawn(Receiver, path=RCV)
    psystem.spawn(CountingShipper, path=SHP)
    probe = psystem.probe()
    probe.tell(SHP, Ship(RCV, tuple("abcde")))
    assert probe.receive(10) == ("shipped", (1, 2, 3, 4, 5))
    settled(psystem, applied=5)
    assert psystem.ask(SHP, "counted") == 5


@pytest.mark.parametrize("steps, expected", [
    # one application per commit (the fast path), two and three (gathered into one AppliedBatch)
    ((("apply", 1),), [(1,)]),
    ((("apply", 1), ("apply", 2)), [(1, 2)]),
    ((("apply", 1), ("apply", 2), ("apply", 3), ("mark", "m")), [(1, 2, 3), "m"]),
    # gathered across the other mixin's calls, not across a persist
    ((("apply", 1), ("deliver", "a"), ("apply", 2), ("deliver", "b"), ("apply", 3)),
     [(1, 2, 3), "DeliveriesSent"]),
    ((("apply", 1), ("mark", "m"), ("apply", 2), ("apply", 3)), [(1,), "m", (2, 3)]),
    ((("deliver", "a"), ("apply", 1), ("apply", 2)), ["DeliveriesSent", (1, 2)]),
])
def test_the_applications_of_one_commit_are_journaled_as_one_applied_batch(psystem, tmp_path, steps, expected):
    from tests.persistence.compact_fixtures import Relay, Steps

    probe = psystem.probe()
    psystem.spawn(Relay, path="/user/relay", kwargs={"destination": probe.path})
    assert psystem.ask("/user/relay", Steps(steps)) == "done"
    events = journal_events(tmp_path, "/user/relay")
    assert [e.delivery_ids if type(e) is AppliedBatch else e if isinstance(e, str) else type(e).__name__
            for e in events] == expected
    assert [e.events for e in events if type(e) is AppliedBatch] == [
        tuple(f"applied-{i}" for i in group) for group in expected if isinstance(group, tuple)]


def test_an_application_alone_in_its_commit_is_stored_as_before():
    """The fast path's write (_OneWrite) encodes to the bytes of the AtomicWrite the general path builds."""
    from journal.records import encode_writes
    from persistence.persistent_actor import _OneWrite, _repr

    applied = AppliedBatch(("/user/driver",), (123456,), (Parcel(7, "p"),))
    general = AtomicWrite((PersistentRepr(applied, 42, "/user/acct-1", writer_uuid="w" * 32),))
    fast = object.__new__(_OneWrite)
    object.__setattr__(fast, "payload", (_repr(applied, 42, "/user/acct-1", "w" * 32),))
    assert fast.atomic is fast and fast.payload == general.payload
    assert encode_writes([fast], 1_700_000_000_000) == encode_writes([general], 1_700_000_000_000)


@pytest.mark.parametrize("steps, expected", [
    ((("apply", 1), ("deliver", "a"), ("apply", 2), ("mark", "m")), ["AppliedBatch", "DeliveriesSent", "m"]),
    ((("deliver", "a"), ("apply", 1), ("deliver", "b"), ("mark", "m")), ["DeliveriesSent", "AppliedBatch", "m"]),
    ((("deliver", "a"), ("mark", "m"), ("apply", 1)), ["DeliveriesSent", "m", "AppliedBatch"]),
])
def test_two_compact_event_mixins_journal_in_the_order_of_the_calls(psystem, tmp_path, steps, expected):
    from tests.persistence.compact_fixtures import Relay, Steps

    probe = psystem.probe()
    psystem.spawn(Relay, path="/user/relay", kwargs={"destination": probe.path})
    assert psystem.ask("/user/relay", Steps(steps)) == "done"
    names = [type(e).__name__ if not isinstance(e, str) else e for e in journal_events(tmp_path, "/user/relay")]
    assert names == expected
    sent = [e for e in journal_events(tmp_path, "/user/relay") if type(e) is DeliveriesSent]
    assert [m.payload for e in sent for m in e.messages] == [p for k, p in steps if k == "deliver"]


def test_forget_applied_up_to_drops_the_gaps_below_and_keeps_those_above(psystem):
    psystem.spawn(Receiver, path=RCV)
    probe = psystem.probe()
    psystem.tell_many([(RCV, Parcel(i, f"p{i}")) for i in (2, 4, 6)], sender=probe.path)
    wait_for(lambda: len(psystem.ask(RCV, "status")[0]) == 3)
    assert psystem.ask(RCV, "status")[2] == 3  # ranges 2, 4 and 6 above the watermark 0
    # 1..3 taken as applied; 4 joins the watermark; 6 stays a range.
    assert psystem.ask(RCV, ("forget", probe.path, 3)) == (1, [True, True, True, True, False, True, False])
    assert psystem.ask(RCV, ("forget", probe.path, 1)) == (1, [True, True, True, True, False, True, False])
    assert psystem.ask(RCV, ("forget", "/user/unknown", 9)) == (1, [False] * 7)  # an unknown origin: no memory made
    psystem.tell(RCV, Parcel(4, "again"), sender=probe.path)  # below the watermark now: a duplicate
    psystem.tell(RCV, Parcel(5, "p5"), sender=probe.path)
    wait_for(lambda: len(psystem.ask(RCV, "status")[0]) == 4)
    assert sorted(psystem.ask(RCV, "status")[0]) == ["p2", "p4", "p5", "p6"]


def test_no_delivery_under_a_forgotten_watermark_is_applied_twice_after_recovery(psystem):
    # forget_applied_up_to is not journaled. What recovery restores: the snapshot's dedup state (the watermark as it
    # was when the snapshot was saved) and every replayed application. So an id applied before is known again
    # whether its event is replayed or covered by the snapshot (its events deleted); only the ids under the
    # watermark that were never applied here, which the origin promised never to deliver again, are not.
    psystem.spawn(SnapshottingReceiver, path=RCV)
    probe = psystem.probe()
    origin = probe.path

    def deliver(*ids: int) -> None:
        psystem.tell_many([(RCV, Parcel(i, f"p{i}")) for i in ids], sender=origin)

    def applied() -> list[str]:
        return sorted(psystem.ask(RCV, "status")[0])

    def restart() -> None:
        probe.tell(RCV, "boom")  # (the asks after it reach the new instance, once recovered)

    deliver(2, 4, 6)
    wait_for(lambda: len(applied()) == 3)
    assert psystem.ask(RCV, ("forget", origin, 4))[0] == 1  # 1..4 under the watermark, 6 a range
    # Recovery from the events alone: 2, 4 and 6 are replayed; the watermark is not (1 and 3 were never applied).
    restart()
    assert psystem.ask(RCV, ("applied?", origin, 7)) == ([2, 4, 6], 3)
    deliver(2, 4, 6)
    assert psystem.ask(RCV, ("forget", origin, 4))[0] == 1
    # A snapshot holds the watermark; the events it covers are deleted: recovery has only the snapshot.
    assert psystem.ask(RCV, "snap")[0] == "snapped"
    assert psystem.ask(RCV, "delete")[0] == "deleted"
    deliver(8)  # applied after the snapshot; the watermark then moves past it, unjournaled
    wait_for(lambda: len(applied()) == 4)
    psystem.ask(RCV, ("forget", origin, 9))
    restart()
    assert psystem.ask(RCV, ("applied?", origin, 10)) == ([1, 2, 3, 4, 6, 8], 2)  # the snapshot's, and 8 replayed
    deliver(2, 4, 6, 8)  # redeliveries of everything applied: none is applied again
    deliver(10)
    wait_for(lambda: len(applied()) == 5)
    assert applied() == ["p10", "p2", "p4", "p6", "p8"]


def _split_sent(payload: object) -> list[str]:
    """A DeliveriesSent of one delivery (split from a rejected one) whose Parcel's payload starts "split-flaky": its
    first write fails."""
    if type(payload) is DeliveriesSent and len(payload) == 1:
        m = payload.messages[0]
        if type(m) is Parcel and m.payload.startswith("split-flaky"):
            return [m.payload]
    return []


register_failing_first_write("splitsent", _split_sent)


class AckingShipper(Shipper):
    """Ship: delivers, then acknowledges ("acked") once everything delivered is journaled (defer_async, as the
    accounts example's Feeder); "unconfirmed" replies the number of deliveries not confirmed."""

    journal_url = "splitsent://compact-split"
    snapshot_store_url = "splitsent://compact-split"

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Ship):
            for p in message.payloads:
                self.deliver(message.destination, lambda i, p=p: _message(i, p))
            self.defer_async("acked", lambda m: self.tell(sender, m))
        elif message == "unconfirmed":
            self.tell(sender, ("unconfirmed", self.number_of_unconfirmed))
        else:
            super().receive_command(message, sender)


def test_deliveries_are_acknowledged_only_once_journaled_even_when_their_event_is_split(base, make_system, tmp_path):
    # The round's DeliveriesSent was rejected (one message cannot be stored) and split: each delivery went again as
    # an event of its own, in the next write. The acknowledgement deferred after them (defer_async) ran with the
    # rejected write's handlers, before that write, which failed (the actor stops): the client was told its
    # delivery was journaled, and it never was: lost silently.
    system = make_system(base)
    system.spawn(AckingShipper, path="/user/ack", entities=True)
    path = f"/user/ack/{tmp_path.name}"
    probe = system.probe()
    probe.tell(path, Ship("/user/nowhere", (f"split-flaky-{tmp_path.name}", "bad")))
    wait_for(lambda: any("simulated write failure" in e.reason for e in system.errors().recent), timeout=10)
    probe.tell(path, "unconfirmed")  # (its next instance, recovered: nothing was journaled)
    assert probe.receive(10) == ("unconfirmed", 0), "deliveries acknowledged before they were journaled"

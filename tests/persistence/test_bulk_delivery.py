"""AtLeastOnceDelivery's bulk API (deliver_many, restore_unconfirmed, confirm_deliveries, should_redeliver) and
PersistentActor.read_events / pending_handlers, as the Spark bridge uses them; on both bases."""

from __future__ import annotations

import pytest

from persistence import Confirm, DurableDelivery
from tests.persistence.bulk_actors import Batch, BulkSender, Bundle, Item
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)

SND = "/user/bulk"


def start(psystem):
    hub, a, b = psystem.probe(), psystem.probe(), psystem.probe()
    psystem.spawn(BulkSender, path=SND, kwargs={"hub": hub.path})
    return hub, a, b


def status(psystem):
    return psystem.ask(SND, "status")


def test_deliver_many_sends_once_together_and_redelivers_one_by_one(psystem):
    hub, a, b = start(psystem)
    control = psystem.probe()
    control.tell(SND, Batch((a.path, b.path, a.path), ("x", "y", "z")))
    assert control.receive(10) == "delivered"
    bundle = hub.receive(10)
    assert bundle == Bundle(((a.path, Item(1, "x")), (b.path, Item(2, "y")), (a.path, Item(3, "z"))))
    assert status(psystem) == (3, [1, 2, 3], 1, ())
    # Nothing was told to the destinations by the together-send: redelivery resends each with tell.
    assert sorted(a.receive_many(2, 10), key=lambda i: i.delivery_id) == [Item(1, "x"), Item(3, "z")]
    assert b.receive(10) == Item(2, "y")
    a.tell(SND, Confirm(1))
    a.tell(SND, Confirm(3))
    b.tell(SND, Confirm(2))
    wait_for(lambda: status(psystem)[0] == 0)
    hub.expect_no_message(0.3)


def test_deliver_many_without_send_tells_each_and_continues_the_numbering(psystem):
    hub, a, b = start(psystem)
    control = psystem.probe()
    control.tell(SND, Batch((a.path, b.path), ("x", "y"), together=False))
    assert control.receive(10) == "delivered"
    assert a.receive(10) == Item(1, "x") and b.receive(10) == Item(2, "y")
    control.tell(SND, Batch((a.path,), ("z",), together=False))
    assert control.receive(10) == "delivered" and a.receive(10) == Item(3, "z")
    assert status(psystem)[:3] == (3, [1, 2, 3], 0)
    hub.expect_no_message(0.2)


def test_confirm_deliveries_returns_each_message_or_none(psystem):
    hub, a, b = start(psystem)
    control = psystem.probe()
    control.tell(SND, Batch((a.path, b.path, a.path), ("x", "y", "z")))
    assert control.receive(10) == "delivered"
    assert psystem.ask(SND, ("confirm-many", (3, 99, 1, 3))) == ["z", None, "x", None]
    assert status(psystem)[:2] == (1, [2])


def test_replayed_and_snapshotted_bulk_deliveries_are_resent_after_a_restart(psystem):
    hub, a, b = start(psystem)
    control = psystem.probe()
    control.tell(SND, Batch((a.path, b.path), ("x", "y")))
    assert control.receive(10) == "delivered"
    assert hub.receive(10).items[0] == (a.path, Item(1, "x"))
    control.tell(SND, Confirm(2))
    control.tell(SND, "snap")  # the snapshot holds delivery 1 (restore_unconfirmed on recovery)
    assert hub.receive(10) == "saved"
    control.tell(SND, Batch((b.path,), ("w",)))  # replayed after the snapshot (deliver_many during recovery)
    assert control.receive(10) == "delivered"
    hub.receive(10)
    control.tell(SND, "boom")
    # Resent right after replay, not a redeliver interval later; the numbering goes on after the restart.
    assert a.receive(10) == Item(1, "x")
    assert b.receive(10) == Item(3, "w")
    assert wait_for(lambda: status(psystem)[:2] == (2, [1, 3]))
    control.tell(SND, Batch((a.path,), ("v",), together=False))
    assert control.receive(10) == "delivered"
    got = a.receive(10)
    while got == Item(1, "x"):  # a redelivery may come first
        got = a.receive(10)
    assert got == Item(4, "v")


def test_should_redeliver_false_gives_a_delivery_up_before_its_resend(psystem):
    hub, a, b = start(psystem)
    control = psystem.probe()
    control.tell(SND, Batch((a.path, a.path), ("skip-me", "keep"), together=False))
    assert control.receive(10) == "delivered"
    assert {a.receive(10), a.receive(10)} == {Item(1, "skip-me"), Item(2, "keep")}
    assert wait_for(lambda: status(psystem)[3] == (1,))
    assert a.receive(10) == Item(2, "keep")  # the other one is resent
    control.tell(SND, "boom")
    # The give-up was persisted, so only delivery 2 comes back (plain AtLeastOnceDelivery does not journal
    # confirmations: this sender never persisted one).
    assert wait_for(lambda: status(psystem)[:2] == (1, [2]))


def test_read_events_reads_back_stored_events_and_pending_handlers_counts(psystem):
    hub, a, b = start(psystem)
    control = psystem.probe()
    control.tell(SND, Batch((a.path,), ("x",)))
    assert control.receive(10) == "delivered"
    assert psystem.ask(SND, "pending") == 1  # asked right after persist_async: its handler is pending
    assert psystem.ask(SND, ("read", 1, 2)) == ["Numbered", "str"]
    assert psystem.ask(SND, ("read", 2, 2)) == ["str"]
    assert psystem.ask(SND, ("read", 5, 9)) == []


def test_deliver_many_refuses_bad_input_with_what_to_fix(psystem):
    hub, a, b = start(psystem)

    def attempt(ids, destinations, payloads):
        return psystem.ask(SND, ("try", ids, destinations, payloads))

    assert attempt([1, 2], [a.path], ["x", "y"]).startswith(
        "ValueError: deliver_many needs one destination and one message per delivery id, got 2 ids, 1 dest")
    assert "wildcard actor paths (/user/*) is not supported" in attempt([1], ["/user/*"], ["x"])
    assert attempt(list(range(1, 6)), [a.path] * 5, list("abcde")) == (
        "MaxUnconfirmedMessagesExceeded: Too many unconfirmed messages, maximum allowed is [4]")
    assert attempt([5, 6], [a.path, b.path], ["x", "y"]) == "ok"
    assert a.receive(10) == Item(5, "x") and b.receive(10) == Item(6, "y")
    assert "unconfirmed already" in attempt([6], [a.path], ["z"])
    assert status(psystem)[:2] == (2, [5, 6])


def test_durable_delivery_refuses_deliver_many_and_says_what_to_call():
    with pytest.raises(TypeError, match=r"call deliver\(\) for each message"):
        DurableDelivery.deliver_many(object.__new__(DurableDelivery), [1], ["/a"], ["x"])

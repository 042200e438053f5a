"""An IdempotentReceiver's dedup memory stays bounded when it sees only a share of a sender's deliveries (the ids
of the others are gaps it never fills): its confirms ask a DurableDelivery for its settled watermark. On both bases."""

from __future__ import annotations

import pytest

from persistence import Confirm, Settled
from tests.persistence.compact_fixtures import ConfirmingReceiver, FanOutShipper, Parcel, ParcelTable
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

SHP, A, B = "/user/shp", "/user/a", "/user/b"


def _all_confirmed(system) -> bool:
    return system.ask(SHP, "status")[0] == 0


def test_a_receiver_of_every_other_delivery_keeps_a_bounded_number_of_gaps(psystem):
    # 600 deliveries alternate between two receivers: each sees every other id, and before the receivers asked
    # for the settled watermark each kept one range per delivery for good (300 and 299 here, 500,000 each per
    # million deliveries in bench/profiling/memory_growth.py).
    psystem.spawn(FanOutShipper, path=SHP)
    psystem.spawn(ConfirmingReceiver, path=A, kwargs={"settle_after_gaps": 8})
    psystem.spawn(ConfirmingReceiver, path=B, kwargs={"settle_after_gaps": 8})
    for _ in range(15):  # 40 a round: a gap is kept at most for a round or two after its delivery is confirmed
        assert psystem.ask(SHP, ("round-robin", (A, B), 40)) == ("shipped", 40)
        wait_for(lambda: _all_confirmed(psystem))
    for path, first in ((A, 1), (B, 2)):
        applied, gaps = psystem.ask(path, "status")
        assert sorted(applied, key=lambda p: int(p[1:])) == [f"p{i}" for i in range(first, 601, 2)]  # each once
        assert gaps <= 64, (path, gaps)


def test_a_delivery_still_unconfirmed_holds_the_watermark_below_it_and_is_applied_when_it_arrives(psystem):
    # The watermark a DurableDelivery gives is below its lowest unconfirmed delivery: deliveries lost on the way to
    # a closed receiver, while the other one settled its gaps, are applied once their redeliveries get through.
    psystem.spawn(FanOutShipper, path=SHP)
    psystem.spawn(ConfirmingReceiver, path=A, kwargs={"settle_after_gaps": 8, "closed": True})
    psystem.spawn(ConfirmingReceiver, path=B, kwargs={"settle_after_gaps": 8})
    assert psystem.ask(SHP, ("round-robin", (A, B), 200)) == ("shipped", 200)
    wait_for(lambda: len(psystem.ask(B, "status")[0]) == 100)
    wait_for(lambda: psystem.ask(SHP, "status")[0] == 100)  # A's, every one lost so far (B's confirms on their way)
    assert psystem.ask(A, "open") == "opened"
    wait_for(lambda: _all_confirmed(psystem), timeout=30)  # (redelivered every second)
    applied, _ = psystem.ask(A, "status")
    assert sorted(applied, key=lambda p: int(p[1:])) == [f"p{i}" for i in range(1, 201, 2)]
    # With A's deliveries confirmed, the next asks drop the gaps both kept meanwhile.
    assert psystem.ask(SHP, ("round-robin", (A, B), 40)) == ("shipped", 40)
    wait_for(lambda: _all_confirmed(psystem))
    assert psystem.ask(SHP, ("round-robin", (A, B), 40)) == ("shipped", 40)
    wait_for(lambda: _all_confirmed(psystem))
    wait_for(lambda: psystem.ask(A, "status")[1] <= 64 and psystem.ask(B, "status")[1] <= 64)


def test_a_sender_numbering_its_own_deliveries_may_answer_the_ask_with_settled(psystem):
    # A sender that is no DurableDelivery gets a Confirm with settle_for set (it may ignore it); answering with
    # Settled drops the receiver's gaps below it, and an id below it is a duplicate from then on (confirmed, not
    # applied): send it only for ids that will never be delivered again.
    psystem.spawn(ConfirmingReceiver, path=A, kwargs={"settle_after_gaps": 4})
    probe = psystem.probe()
    psystem.tell_many([(A, Parcel(i, f"p{i}")) for i in range(2, 21, 2)], sender=probe.path)
    confirms = probe.receive_many(10, 10)
    assert sorted(c.delivery_id for c in confirms) == list(range(2, 21, 2))
    # One asks (the origin key, to echo in Settled); the others, fewer than settle_after_gaps gaps later, do not.
    asking = [c for c in confirms if c.settle_for]
    assert [c.settle_for for c in asking] == [probe.path]
    assert [c for c in confirms if c not in asking] == [Confirm(c.delivery_id) for c in confirms if c not in asking]
    assert psystem.ask(A, "status")[1] == 10
    psystem.tell(A, Settled(probe.path, 15), sender=probe.path)
    wait_for(lambda: psystem.ask(A, "status")[1] == 2)  # 16 joins the watermark; 18 and 20 stay above it
    psystem.tell_many([(A, Parcel(i, f"late{i}")) for i in (13, 17)], sender=probe.path)
    assert sorted(c.delivery_id for c in probe.receive_many(2, 10)) == [13, 17]
    applied, _ = psystem.ask(A, "status")
    assert "late13" not in applied and "late17" in applied


def test_an_entity_table_confirming_with_confirm_keeps_a_bounded_number_of_gaps(psystem):
    # The table's dedup state is shared by its entities; it sees every other id of the shipper here (the others
    # go to B): kept, 300 ranges; `confirm` asks for the settled watermark as apply_and_confirm does.
    psystem.spawn(FanOutShipper, path=SHP)
    psystem.spawn(ParcelTable, path="/user/t", entities=True)
    psystem.spawn(ConfirmingReceiver, path=B, kwargs={"settle_after_gaps": 8})
    for _ in range(15):
        assert psystem.ask(SHP, ("round-robin", ("/user/t/x", B), 40)) == ("shipped", 40)
        wait_for(lambda: _all_confirmed(psystem))
    applied, gaps = psystem.ask("/user/t", "status")
    assert applied == 300 and gaps <= 64, (applied, gaps)

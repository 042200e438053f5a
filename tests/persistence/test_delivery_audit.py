"""Deliveries lost or sent twice around snapshots, restarts and the redelivery burst (both bases)."""

from __future__ import annotations

import pytest

from tests.persistence.delivery_audit_actors import ShipAndSnap, SnapshottingShipper
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


def test_a_snapshot_saved_while_a_delivery_is_journaled_does_not_hold_it_when_that_write_fails(
        base, make_system, tmp_path):
    # DurableDelivery registers a delivery at deliver() and journals it asynchronously (commands keep flowing). A
    # snapshot saved meanwhile held it: when that write then failed (the actor stops; its client was never told the
    # delivery was journaled, so it retries), the instance recovered from the snapshot sent it anyway: the message
    # went out twice, under two delivery ids (so a receiver's dedup cannot tell).
    system = make_system(base)
    system.spawn(SnapshottingShipper, path="/user/shp", entities=True)
    name = tmp_path.name
    dst = system.probe()

    # A write that succeeds: the snapshot need not hold the delivery, replay brings it back.
    kept = f"/user/shp/kept-{name}"
    assert system.ask(kept, ("mark", "m"), timeout=10) == ("marked", "m")
    assert system.ask(kept, ShipAndSnap(dst.path, f"keep-{name}"), timeout=10) == ("shipped", 1)
    assert dst.receive(10).body == f"keep-{name}"
    system.tell(kept, "boom")  # restarted: recovered from the snapshot and the DeliveriesSent after it
    assert system.ask(kept, "unconfirmed", timeout=10) == ("unconfirmed", (1,))
    assert dst.receive(10).body == f"keep-{name}", "resent after recovery"

    # A write that fails.
    lost = f"/user/shp/lost-{name}"
    assert system.ask(lost, ("mark", "m"), timeout=10) == ("marked", "m")
    system.tell(lost, ShipAndSnap(dst.path, f"fail-{name}"))
    wait_for(lambda: any("simulated write failure" in e.reason and e.path == lost for e in system.errors().recent))
    assert system.ask(lost, "unconfirmed", timeout=10) == ("unconfirmed", ()), \
        "a delivery never journaled came back from the snapshot"
    dst.expect_no_message(0.5)

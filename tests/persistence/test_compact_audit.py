"""Audit of the compact-event paths (DurableDelivery, IdempotentReceiver, EntityTable) on both bases with real
SQLite journals: what the journal replays must be what the live actor holds."""

from __future__ import annotations

import pytest

from tests.persistence.compact_audit_actors import UpToShipper
from tests.persistence.compact_fixtures import Parcel
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


def test_a_cumulative_confirm_above_every_id_does_not_confirm_on_replay_a_delivery_made_after_it(psystem):
    # confirm_deliveries_up_to(n) confirms the ids unconfirmed at the call; a delivery made after it in the same
    # group commit gets a higher id, which may still be <= n (n above the newest id: a destination's cumulative
    # number, a client's "everything up to"). Live it stays unconfirmed; the round journals DeliveriesSent before
    # DeliveriesConfirmed(up_to=n), so replay confirmed it too: after a restart it was never redelivered (lost).
    path = "/user/uptoshipper/a"
    psystem.spawn(UpToShipper, path="/user/uptoshipper", entities=True)
    probe = psystem.probe()
    probe.tell(path, ("deliver", probe.path, "first"))
    assert {probe.receive(10), probe.receive(10)} == {("delivered", 1), Parcel(1, "first")}
    probe.tell(path, ("up-to-then-deliver", 100, probe.path, "second"))
    assert {probe.receive(10), probe.receive(10)} == {("delivered", 2), Parcel(2, "second")}
    assert psystem.ask(path, "unconfirmed", timeout=10) == [2]
    psystem.stop(path)  # its next instance recovers from the journal
    assert wait_for(lambda: psystem.ask(path, "unconfirmed", timeout=10) == [2], timeout=10), \
        "a delivery made after a cumulative confirm was confirmed on replay"

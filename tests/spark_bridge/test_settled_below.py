"""The bridge's settled watermark (Row.settled_below) across its own writes in flight, on both bases: receivers
forget every delivery id below it, so it must never pass an id the bridge will still deliver.

No Spark: a probe speaks the bridge's protocol (spark_bridge.messages) as a task and a driver do."""

from __future__ import annotations

import pytest

from spark_bridge import BRIDGE_PATH, SparkBridge, start_bridge
from spark_bridge.messages import BatchAccepted, FeedProcessed, FeedReleased, IngestBatch, Release
from tests.spark_bridge.sample import DurableAccount, GetBalance
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


class FanOutTurnDuringRelease(SparkBridge):
    """A bridge that takes a fan-out turn (which refreshes its settled watermark) while a release's
    AttemptsReleased is in flight, as a _FanOut turn of another feed's backlog does when it comes then."""

    def _release(self, m: Release) -> None:
        super()._release(m)
        self._low_at = 0.0  # (the watermark is refreshed at most every 0.5 s: this turn is due)
        self._fan_out()


def test_rows_of_a_release_in_flight_stay_above_the_settled_watermark(base, make_system, tmp_path):
    # AttemptsReleased allocates the released batches' delivery ids when it is persisted, but they reach the
    # backlog only in its handler. A watermark refreshed in between counted none of them (not unconfirmed, not
    # allocated, not in the backlog: only _next_id, already past them), and the rows went out with a
    # settled_below above their own ids: a FeedReceiver forgot them as settled and took each for a
    # redelivery, confirming it without applying it. The run's deposits were lost, silently.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db", snapshot_store=f"sqlite:///{tmp_path}/s.db")
    system.spawn(DurableAccount, path="/user/accounts", entities=True)
    start_bridge(system, cls=FanOutTurnDuringRelease)
    probe = system.probe("driver")
    # An earlier feed's row: the account keeps dedup memory of this bridge, which a trim can then forget.
    system.tell(BRIDGE_PATH, IngestBatch("e", 0, 0, ["/user/accounts/a0"], [{"amount": 100}], probe.path))
    assert isinstance(probe.receive(10), BatchAccepted)
    wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10).applied == 1, timeout=30)
    # (more rows than a receiver applies between two trims of its dedup memory: one comes after a trim)
    values = [{"amount": a} for a in range(1, 21)]
    system.tell(BRIDGE_PATH, IngestBatch("f", 0, 0, ["/user/accounts/a0"] * 20, values, probe.path,
                                         attempt="runA/1"))
    accepted = probe.receive(10)
    assert isinstance(accepted, BatchAccepted), accepted
    system.tell(BRIDGE_PATH, Release("f", "runA", [[0, "runA/1"]], probe.path, processed=True))
    assert probe.receive(10) == FeedReleased("f", "runA", 0)
    assert isinstance(probe.receive(30), FeedProcessed)  # every row confirmed
    balance = wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10), timeout=30)
    assert (balance.total, balance.applied) == (310, 21), f"rows confirmed without being applied: {balance}"

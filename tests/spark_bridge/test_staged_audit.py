"""Staging and release under rejected writes, restarts and discards: acknowledged rows are never lost or doubled.

No Spark: a probe speaks the bridge's protocol (spark_bridge.messages) as a task and a driver do. On both bases.
"""

from __future__ import annotations

import pytest

import actors
from spark_bridge import BRIDGE_PATH, SparkBridge
from spark_bridge.messages import BatchAccepted, FeedReleased, IngestBatch, Release
from tests.spark_bridge.sample import Balance, GetBalance
from tests.spark_bridge.test_staged import restart, runs, staged_system
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


class LingeringBridge(SparkBridge):
    """A bridge that gathers a round's batches for half a second: batches sent together share one write."""

    progress_linger = 0.5


@pytest.fixture
def bridged(base, make_system, tmp_path):
    """staged_system's (system, probe, url)."""
    return staged_system(base, make_system, tmp_path)


def ingest(feed_id: str, attempt: str, partition: int, amounts: list[object], first_txid: int,
           reply_to: str) -> IngestBatch:
    """Batch 0 of `attempt`'s partition: deposits of `amounts` to account a0."""
    return IngestBatch(feed_id, partition, 0, ["/user/accounts/a0"] * len(amounts),
                       [{"amount": a, "txid": t} for t, a in enumerate(amounts, first_txid)], reply_to,
                       attempt=attempt)


def test_a_batch_staged_in_the_write_of_a_rejected_one_is_durable_once_accepted(bridged):
    """Batches of one round are written together: when the journal rejects one of them (a value it cannot
    store), it rejects the others too. Their marks used to stay: a task's resend was answered "accepted" as
    a duplicate although nothing of its batch was durable, and a bridge restarted before the release lost it."""
    system, probe, _ = bridged
    system.spawn(LingeringBridge, path=BRIDGE_PATH)
    # (An earlier feed's batch first: a journal whose first events were rejected starts past sequence nr 1, which
    # recovery takes for a pruned journal whose snapshots are gone.)
    system.tell(BRIDGE_PATH, ingest("other", "run0/1", 0, [1], 100, probe.path))
    assert isinstance(probe.receive(10), BatchAccepted)
    bad = system.probe("bad-task")
    system.tell(BRIDGE_PATH, ingest("f", "run1/1", 0, [5, 6], 0, probe.path))
    system.tell(BRIDGE_PATH, ingest("f", "run1/2", 1, [2**70], 9, bad.path))  # (beyond 64 bits: rejected)
    wait_for(lambda: system.errors().recent, timeout=30)  # the rejection is reported
    # The task resends its batch until it is accepted (as _Publisher does).
    good = ingest("f", "run1/1", 0, [5, 6], 0, probe.path)

    def accepted() -> bool:
        system.tell(BRIDGE_PATH, good)
        try:
            reply = probe.receive(1)
        except actors.AskTimeout:
            return False
        return isinstance(reply, BatchAccepted) and reply.partition == 0
    wait_for(accepted, timeout=30)
    restart(system, LingeringBridge)  # accepted means durable: a restart keeps it staged
    assert sorted((r.run, r.batches, r.rows) for r in runs(system)) == [("run0", 1, 1), ("run1", 1, 2)]
    system.tell(BRIDGE_PATH, Release("f", "run1", [[0, "run1/1"]], probe.path))
    assert wait_for(lambda: next((m for m in iter(lambda: probe.receive(10), None) if isinstance(m, FeedReleased)),
                                 None))
    wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10).applied == 2, timeout=30)
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(11, 2, 0)

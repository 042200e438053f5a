"""A BridgeSnapshot in the format earlier versions wrote is restored, and the bridge writes that format still.

No Spark: a probe speaks the bridge's protocol (spark_bridge.messages) itself. On both bases.
"""

from __future__ import annotations

import pytest

from journal import SnapshotMetadata, SnapshotSelectionCriteria, open_snapshot_store
from spark_bridge import BRIDGE_PATH, FeedProgress, GetFeedProgress, Row
from spark_bridge.acker import edge
from spark_bridge.bridge import PERSISTENCE_ID
from spark_bridge.messages import (
    BatchAccepted,
    BridgeSnapshot,
    Confirmed,
    Forward,
    ForwardAccepted,
    IngestBatch,
)
from tests.spark_bridge.sample import EverySnapshotBridge
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)

ORIGIN = "/user/origin"


def old_snapshot(destination: str) -> BridgeSnapshot:
    """As written before SeenIds replaced the bridge's own batch set: batch numbers as a watermark (every
    number below it seen) plus a sorted list above it; follow-up ids as [low, [[start, end], ...]]."""
    return BridgeSnapshot(
        next_id=200,
        batches=[["f", 0, 5, [7]]],  # batches 0..4 and 7 of feed f, partition 0
        keys={},
        trees=[[100, edge(100), 1, "f", 0, 4]],  # batch 4: one row (delivery 100), not confirmed yet
        unconfirmed=[[100, destination, "body", 100]],
        backlog=[],
        confirmed_ahead=[],
        forwarded={ORIGIN: [3, [[5, 6]]]},  # follow-ups 1..3, 5 and 6 of ORIGIN
        feeds={"f": [6, 5]},
    )


def latest(url: str):
    with open_snapshot_store(url) as store:
        return store.load(PERSISTENCE_ID, SnapshotSelectionCriteria.LATEST)


def test_an_earlier_snapshot_is_restored_and_the_format_is_kept(base, make_system, tmp_path):
    url = f"sqlite:///{tmp_path}/snapshots.db"
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=url)
    destination, task = system.probe(), system.probe()
    with open_snapshot_store(url) as store:
        store.save(SnapshotMetadata(PERSISTENCE_ID, 5), old_snapshot(destination.path))
    system.system_actor_of(EverySnapshotBridge, path=BRIDGE_PATH)

    # The unconfirmed delivery is resent right after recovery.
    assert destination.receive(10) == Row(100, "body", 100)

    # Batches 3 and 7 were stored before: duplicates. Batch 5 is new.
    for batch_no in (3, 7, 5):
        task.tell(BRIDGE_PATH, IngestBatch("f", 0, batch_no, [destination.path], ["v"], task.path))
    assert task.receive(10) == BatchAccepted("f", 0, 3, 1)
    assert task.receive(10) == BatchAccepted("f", 0, 7, 1)
    accepted = task.receive(10)
    assert accepted.batch_no == 5 and accepted.duplicates == 0
    row = destination.receive(10)
    assert row.delivery_id == 200 and row.body == "v" and row.anchor == 200

    # The bridge snapshotted before fanning batch 5 out (its next command once the batch was durable), in
    # the earlier format.
    first = wait_for(lambda: latest(url).metadata.sequence_nr > 5 and latest(url))
    assert first.snapshot.batches == [["f", 0, 6, [7]]]
    assert first.snapshot.forwarded == {ORIGIN: [3, [[5, 6]]]}
    assert first.snapshot.unconfirmed == [[100, destination.path, "body", 100]]
    assert [b[1:] for b in first.snapshot.backlog] == [[0, 200, 1]]

    task.tell(BRIDGE_PATH, Forward(ORIGIN, 6, None, destination.path, "again"))
    assert task.receive(10) == ForwardAccepted(6)  # accepted before: a duplicate

    task.tell(BRIDGE_PATH, Forward(ORIGIN, 4, None, destination.path, "new"))
    assert task.receive(10) == ForwardAccepted(4)
    follow_up = destination.receive(10)
    assert follow_up.delivery_id == 201 and follow_up.body == "new"

    # Confirming delivery 100 completes batch 4's tree.
    task.tell(BRIDGE_PATH, Confirmed([100, 200, 201]))
    assert wait_for(lambda: system.ask(BRIDGE_PATH, GetFeedProgress("f")) == FeedProgress("f", 7, 7))

    # Batch 6 closes the gap; the snapshot after it holds the merged state.
    task.tell(BRIDGE_PATH, IngestBatch("f", 0, 6, [destination.path], ["w"], task.path))
    assert task.receive(10).duplicates == 0

    def second():
        system.ask(BRIDGE_PATH, GetFeedProgress("f"))  # a command: the bridge snapshots between commands
        selected = latest(url)
        return selected.metadata.sequence_nr > first.metadata.sequence_nr and selected

    snapshot = wait_for(second, 30).snapshot
    assert snapshot.batches == [["f", 0, 8, []]]
    assert snapshot.forwarded == {ORIGIN: [6, []]}
    assert snapshot.next_id == 203 and snapshot.unconfirmed == [] and [b[1:] for b in snapshot.backlog] == [[0, 202, 1]]

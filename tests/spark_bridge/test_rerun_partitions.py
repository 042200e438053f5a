"""A rerun of a batch feed id split into another number of partitions is refused, never skipped or doubled.

A feed id's released partitions are done: a rerun skips them by number. Split otherwise (2 partitions, then 3),
the rerun skipped partitions 0 and 1 (rows now in them that were in partition 2 before: lost) and delivered
partition 2 (rows partition 1 held before: twice). The bridge records the partition count of each batch feed
id's released (or decided) runs, durably, and refuses a rerun with another count, naming both.

No Spark but the last test: a probe speaks the bridge's protocol (spark_bridge.messages) as tasks and a driver
do. On both bases.
"""

from __future__ import annotations

from typing import Any

import pytest

import actors
from spark_bridge import BRIDGE_PATH, SparkBridge, bridge_path, start_bridge, start_bridges
from spark_bridge.messages import (
    BatchAccepted,
    Coordinate,
    Discard,
    Discarded,
    FeedReleased,
    IngestBatch,
    KeyingMismatch,
    PartitionsMismatch,
    Release,
    ReleasePlan,
)
from tests.spark_bridge.sample import Balance
from tests.spark_bridge.test_staged import SnapshotEveryBatch, restart, runs, stage, staged_system
from tests.spark_bridge.test_staged_bridges import balance
from tests.spark_bridge.test_staged_bridges import stage as stage_at
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
def bridged(base, make_system, tmp_path):
    """staged_system's (system, probe, url)."""
    return staged_system(base, make_system, tmp_path)


def restart_once_settled(system: actors.System, cls: type[SparkBridge]) -> None:
    """Restart the bridge once the account holds runA's 3 deposits and the bridge has their confirms (a stop writes
    what it has): one still on its way at the stop is resent after the restart and counted as repeated by the
    account (3 in a loaded CI run), which the tests' last check would take for a rerun's."""
    wait_for(lambda: balance(system) == Balance(6, 3, 0), timeout=30)
    wait_for(lambda: system.status().hosts[BRIDGE_PATH].counters.get("unconfirmed") == 0, timeout=30)
    restart(system, cls)


def release(system: actors.System, probe: actors.Probe, feed_id: str, run: str, partitions: int,
            keyed: bool = False) -> object:
    """The driver's Release of every partition of `run` (attempt f"{run}/{p}"); the bridge's reply."""
    winners: list[list[Any]] = [[p, f"{run}/{p}"] for p in range(partitions)]
    system.tell(BRIDGE_PATH, Release(feed_id, run, winners, probe.path, partitions=partitions, keyed=keyed))
    return probe.receive(10)


@pytest.mark.parametrize("cls", [SparkBridge, SnapshotEveryBatch], ids=["replayed", "from-a-snapshot"])
def test_a_rerun_split_into_other_partitions_is_refused_also_after_a_restart(bridged, cls):
    system, probe, _ = bridged
    start_bridge(system, cls=cls)
    # Deposits of 1, 2, 3 (txids 0-2) in 2 partitions, released.
    stage(system, probe, "f", "runA/0", 0, 0, [1, 2], 0)
    stage(system, probe, "f", "runA/1", 1, 0, [3], 2)
    assert release(system, probe, "f", "runA", 2) == FeedReleased("f", "runA", 0)
    restart_once_settled(system, cls)  # the count is durable: in the journal's AttemptsReleased, or in the snapshot
    # The same rows split into 3 partitions: the 3rd (txid 2, released before in partition 1) is new by number.
    stage(system, probe, "f", "runB/0", 0, 0, [1], 0)
    stage(system, probe, "f", "runB/1", 1, 0, [2], 1)
    stage(system, probe, "f", "runB/2", 2, 0, [3], 2)
    refused = release(system, probe, "f", "runB", 3)
    assert refused == PartitionsMismatch("f", "runB", 3, 2, BRIDGE_PATH), refused
    text = refused.explain()
    assert all(s in text for s in ("'f'", "3 partitions", "released 2 partitions", "repartition(2",
                                   "new feed_id")), text
    # Asked again (a resend), the same answer; nothing of runB was released: its batch of partition 2 (those of
    # the partitions released before were taken for duplicates) waits for its Discard.
    assert release(system, probe, "f", "runB", 3) == refused
    assert [(r.run, r.batches) for r in runs(system)] == [("runB", 1)]
    system.tell(BRIDGE_PATH, Discard("f", "runB", probe.path))
    assert probe.receive(10) == Discarded("f", "runB")
    assert runs(system) == []
    # A rerun split as the first run is done: all duplicates, nothing delivered again.
    assert stage(system, probe, "f", "runC/0", 0, 0, [1, 2], 0).duplicates == 2
    assert stage(system, probe, "f", "runC/1", 1, 0, [3], 2).duplicates == 1
    assert release(system, probe, "f", "runC", 2) == FeedReleased("f", "runC", 0)
    # A keyed rerun would deliver f's rows, released without keys, again: refused (see
    # test_a_keyed_rerun_of_a_feed_id_released_without_keys_is_refused); a new feed id is a new feed.
    assert release(system, probe, "f", "runK", 4, keyed=True) == KeyingMismatch("f", "runK", BRIDGE_PATH)
    assert isinstance(release(system, probe, "g", "runG", 5), FeedReleased)
    assert balance(system) == Balance(6, 3, 0)


def test_the_coordinator_refuses_a_coordinate_split_otherwise_than_the_feed_s_released_runs(bridged):
    system, probe, _ = bridged
    [node] = system.nodes()
    nb = bridge_path(node)
    assert start_bridges(system, nodes=[node]) == [nb]
    stage_at(system, probe, nb, "f", "runA/0", 0, [1, 2], 0)
    stage_at(system, probe, nb, "f", "runA/1", 1, [3], 2)
    system.tell(BRIDGE_PATH, Coordinate("f", "runA", [[0, "runA/0", nb], [1, "runA/1", nb]], False, probe.path, 2))
    assert isinstance(probe.receive(10), ReleasePlan)
    restart_coordinator(system)
    system.tell(BRIDGE_PATH, Coordinate("f", "runB", [[p, f"runB/{p}", nb] for p in range(3)], False, probe.path, 3))
    assert probe.receive(10) == PartitionsMismatch("f", "runB", 3, 2, BRIDGE_PATH)
    # runA was decided without keys (ReleaseDecided.keyed, replayed): a keyed Coordinate would deliver it again.
    system.tell(BRIDGE_PATH, Coordinate("f", "runK", [[p, f"runK/{p}", BRIDGE_PATH] for p in range(2)], True,
                                        probe.path, 2))
    assert probe.receive(10) == KeyingMismatch("f", "runK", BRIDGE_PATH)
    # A feed id released at the coordinator alone (one bridge), then coordinated: checked the same.
    stage(system, probe, "h", "runA/0", 0, 0, [4], 10)
    assert release(system, probe, "h", "runA", 1) == FeedReleased("h", "runA", 0)
    system.tell(BRIDGE_PATH, Coordinate("h", "runB", [[0, "runB/0", nb], [1, "runB/1", nb]], False, probe.path, 2))
    assert probe.receive(10) == PartitionsMismatch("h", "runB", 2, 1, BRIDGE_PATH)


def restart_coordinator(system: actors.System) -> None:
    restart(system, SparkBridge)


@pytest.mark.spark
@pytest.mark.timeout(180)
@pytest.mark.parametrize("base", ["multiproc"])
def test_feed_rerun_with_another_partition_count_fails_naming_both_and_delivers_nothing(spark, bridged):
    from spark_bridge import FeedError, feed
    from tests.spark_bridge.test_feed import deposits, expected_sums, settled

    system, _, _ = bridged
    start_bridge(system)
    df = deposits(spark, 600, accounts=10, partitions=2)
    assert feed(df, system, feed_id="orders", progress=False).rows == 600
    expected = expected_sums(df)
    settled(system, expected)
    with pytest.raises(FeedError, match=r"'orders': this run splits its rows into 3 partitions, but the earlier "
                                        r"run\(s\) of this feed_id released 2 partitions"):
        feed(df.repartition(3), system, feed_id="orders", progress=False)
    assert runs(system) == []  # what the refused run staged is discarded
    with pytest.raises(FeedError, match=r"'orders': this run gives key=, but the earlier run\(s\) of this feed_id "
                                        r"released rows without key="):
        feed(df, system, feed_id="orders", key="txid", progress=False)
    assert runs(system) == []
    assert feed(deposits(spark, 600, accounts=10, partitions=2), system, feed_id="orders",
                progress=False).duplicates_skipped == 600
    assert {p: b.total for p, b in settled(system, expected).items()} == expected


def stage_keyed(system: actors.System, probe: actors.Probe, feed_id: str, attempt: str, partition: int,
                amounts: list[int], first_txid: int) -> None:
    """Stage one keyed batch (key: the row's txid, as str) of deposits to a0 under `attempt`."""
    txids = list(range(first_txid, first_txid + len(amounts)))
    system.tell(BRIDGE_PATH, IngestBatch(feed_id, partition, 0, ["/user/accounts/a0"] * len(amounts),
                                         [{"amount": a, "txid": t} for t, a in zip(txids, amounts, strict=True)],
                                         probe.path, keys=[str(t) for t in txids], attempt=attempt))
    reply = probe.receive(10)
    assert isinstance(reply, BatchAccepted), reply


@pytest.mark.parametrize("cls", [SparkBridge, SnapshotEveryBatch], ids=["replayed", "from-a-snapshot"])
def test_a_keyed_rerun_of_a_feed_id_released_without_keys_is_refused(bridged, cls):
    """The bridge knows no keys of rows released without key=: a keyed rerun's keys were all new to it, and it
    delivered every row again (Account counts them as repeated). It is refused, naming the feed id and the fix;
    the reverse (keyed, then unkeyed, split as before) skips the released partitions: nothing again."""
    system, probe, _ = bridged
    start_bridge(system, cls=cls)
    stage(system, probe, "f", "runA/0", 0, 0, [1, 2], 0)
    stage(system, probe, "f", "runA/1", 1, 0, [3], 2)
    assert release(system, probe, "f", "runA", 2) == FeedReleased("f", "runA", 0)
    restart_once_settled(system, cls)  # durable: replayed, or from the snapshot
    stage_keyed(system, probe, "f", "runB/0", 0, [1, 2], 0)
    stage_keyed(system, probe, "f", "runB/1", 1, [3], 2)
    refused = release(system, probe, "f", "runB", 2, keyed=True)
    assert refused == KeyingMismatch("f", "runB", BRIDGE_PATH), refused
    text = refused.explain()
    assert all(s in text for s in ("'f'", "without key=", "every row again", "new feed_id")), text
    system.tell(BRIDGE_PATH, Discard("f", "runB", probe.path))
    assert probe.receive(10) == Discarded("f", "runB")
    # A keyed feed id rerun without keys, split as before: its partitions are done.
    stage_keyed(system, probe, "k", "runA/0", 0, [4], 10)
    assert release(system, probe, "k", "runA", 1, keyed=True) == FeedReleased("k", "runA", 0)
    assert stage(system, probe, "k", "runB/0", 0, 0, [4], 10).duplicates == 1
    assert release(system, probe, "k", "runB", 1) == FeedReleased("k", "runB", 0)
    # A keyed feed id whose released rows all had keys takes a keyed rerun (its keys are known).
    stage_keyed(system, probe, "k", "runC/0", 0, [4, 5], 10)
    assert release(system, probe, "k", "runC", 1, keyed=True) == FeedReleased("k", "runC", 0)
    assert wait_for(lambda: balance(system) == Balance(15, 5, 0), timeout=30)


@pytest.mark.spark
@pytest.mark.timeout(180)
@pytest.mark.parametrize("base", ["multiproc"])
def test_feed_rerun_with_the_same_partition_count_split_otherwise_delivers_nothing_again(spark, bridged):
    """Same count, other split (the user repartitioned by another column): a released run released every
    partition of its job at once, so every partition of the rerun is done: no row of it is delivered, none twice,
    whatever rows each partition now holds (all counted as duplicates)."""
    from spark_bridge import feed
    from tests.spark_bridge.test_feed import deposits, expected_sums, settled

    system, _, _ = bridged
    start_bridge(system)
    df = deposits(spark, 400, accounts=8, partitions=4)
    expected = expected_sums(df)
    assert feed(df, system, feed_id="orders", progress=False, ack="processed").rows == 400
    settled(system, expected)
    split = df.repartition(4, "amount")  # 4 partitions, holding other rows than range()'s
    assert sorted(split.rdd.glom().map(len).collect()) != [100] * 4, "not the same split"
    again = feed(split, system, feed_id="orders", progress=False, ack="processed")
    assert (again.rows, again.duplicates_skipped) == (400, 400)
    got = settled(system, expected)
    assert {p: (b.total, b.repeated) for p, b in got.items()} == {p: (t, 0) for p, t in expected.items()}
    assert sum(b.applied for b in got.values()) == 400

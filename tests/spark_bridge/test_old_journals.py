"""Bridge journals and snapshots written by older versions: a rerun of a feed id they released is still checked.

Events and snapshots are written here as those versions stored them (their fields, in order), not by running old
code. No Spark: a probe speaks the bridge's protocol (spark_bridge.messages) as tasks and a driver do. On both bases.
"""

from __future__ import annotations

from typing import Any

import pytest

from journal import SnapshotMetadata, open_journal, open_snapshot_store
from spark_bridge import BRIDGE_PATH, start_bridge
from spark_bridge.bridge import PERSISTENCE_ID
from spark_bridge.messages import (
    BridgeSnapshot,
    FedBeforeStaging,
    FeedReleased,
    IngestBatch,
    KeyingMismatch,
    PartitionsMismatch,
    Release,
)
from tests.spark_bridge.sample import Account, Balance
from tests.spark_bridge.test_staged import runs, stage, staged_system
from tests.spark_bridge.test_staged_bridges import balance
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


def write_old_events(tmp_path, records: list[tuple[str, int, list[Any]]], first_seq: int = 1,
                     url: str | None = None) -> None:
    """Store `records` (manifest, version, fields in order) as the bridge's events from `first_seq` on, packed as
    the journal packs any event: what a version with those fields wrote (in `url`, default tmp_path's SQLite)."""
    import msgpack

    from journal.records import FORMAT_FLAT, EncodedBatch
    from journal.serialization import _default, checksum, key_seed

    pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    rows = []
    for seq, (manifest, version, fields) in enumerate(records, start=first_seq):
        blob = pack([FORMAT_FLAT, "old-writer", "", 0, None, None, manifest, version, *fields])
        rows.append((PERSISTENCE_ID, seq, blob, checksum(key_seed(PERSISTENCE_ID), seq, blob)))
    with open_journal(url or f"sqlite:///{tmp_path}/journal.db") as journal:
        journal._store(EncodedBatch(rows, []))


def staged_batch(feed_id: str, partition: int, attempt: str, amounts: list[int], first_txid: int) -> tuple[str, int,
                                                                                                             list[Any]]:
    """A BatchStored of deposits to a0 staged under `attempt`, in version 2's fields."""
    values = [{"amount": a, "txid": t} for t, a in enumerate(amounts, first_txid)]
    return ("spark_bridge.BatchStored", 2,
            [feed_id, partition, 0, ["/user/accounts/a0"] * len(amounts), values, None, None, 0, [], 0, attempt, 1.7e9])


def old_release(feed_id: str, run: str, partitions: int, first_id: int) -> tuple[str, int, list[Any]]:
    """An AttemptsReleased as versions before the partition count was journaled stored it (no `partitions`)."""
    return ("spark_bridge.AttemptsReleased", 1, [feed_id, run, [[p, f"{run}/{p}"] for p in range(partitions)],
                                                 first_id, False])


def release(system, probe, feed_id: str, run: str, partitions: int) -> object:
    """The driver's Release of every partition of `run` (attempt f"{run}/{p}"), saying the count; the reply."""
    system.tell(BRIDGE_PATH, Release(feed_id, run, [[p, f"{run}/{p}"] for p in range(partitions)], probe.path,
                                     partitions=partitions))
    return probe.receive(10)


@pytest.mark.parametrize("recorded", ["events", "snapshot"])
def test_a_rerun_of_a_run_released_before_partition_counts_were_journaled_is_checked(base, make_system, tmp_path,
                                                                                     recorded):
    """A run released by a version that journaled no partition count (AttemptsReleased without `partitions`, a
    BridgeSnapshot without `partitions`) was unchecked: its rerun split into 3 partitions delivered the third,
    whose row the old run had delivered in partition 1. Its count is taken from what it released (partitions
    0..n-1, as every driver's Release and every job's commit names them all)."""
    if recorded == "events":
        write_old_events(tmp_path, [
            ("spark_bridge.Progress", 1, [[], [], []]),
            staged_batch("f", 0, "runA/0", [1, 2], 0),
            staged_batch("f", 1, "runA/1", [3], 2),
            old_release("f", "runA", 2, 1),
            ("spark_bridge.Progress", 1, [[1, 2, 3], [], []]),  # its rows were delivered and confirmed
        ])
    else:
        with open_snapshot_store(f"sqlite:///{tmp_path}/snapshots.db") as store:
            # (the fields of the version before: no partitions, no run_counts, no unkeyed)
            store.save(SnapshotMetadata(PERSISTENCE_ID, 5),
                       BridgeSnapshot(4, [], {}, [], [], [], [], {}, {"f": [3, 3]}, [], {"f": [0, 1]},
                                      ["f/runA"]))
    system, probe, _ = staged_system(base, make_system, tmp_path)
    start_bridge(system)
    # The same rows split into 3 partitions: the 3rd holds txid 2, delivered before in partition 1.
    assert stage(system, probe, "f", "runB/0", 0, 0, [1], 0).duplicates == 1
    assert stage(system, probe, "f", "runB/1", 1, 0, [2], 1).duplicates == 1
    stage(system, probe, "f", "runB/2", 2, 0, [3], 2)
    assert release(system, probe, "f", "runB", 3) == PartitionsMismatch("f", "runB", 3, 2, BRIDGE_PATH)
    assert [(r.run, r.batches) for r in runs(system)] == [("runB", 1)]  # (until its driver's Discard)
    # Split as before: done, nothing delivered again.
    assert stage(system, probe, "f", "runC/0", 0, 0, [1, 2], 0).duplicates == 2
    assert stage(system, probe, "f", "runC/1", 1, 0, [3], 2).duplicates == 1
    assert release(system, probe, "f", "runC", 2) == FeedReleased("f", "runC", 0)
    # Its rows were released without keys (the old snapshot does not say: it holds no key of f): a keyed rerun
    # would deliver them again.
    system.tell(BRIDGE_PATH, Release("f", "runK", [[0, "runK/0"], [1, "runK/1"]], probe.path, partitions=2,
                                     keyed=True))
    assert probe.receive(10) == KeyingMismatch("f", "runK", BRIDGE_PATH)
    assert balance(system) == Balance(0, 0, 0)



@pytest.mark.parametrize("staged", [True, False], ids=["staged", "delivered-at-once"])
def test_an_old_journal_whose_first_write_was_rejected_recovers(base, make_system, tmp_path, journal_url, staged):
    """Versions before a81712f wrote no empty first event: a journal whose first write the journal rejected (a
    value it cannot store; a rejected write uses its sequence number) starts at 2. With no snapshot, recovery took
    it for a journal pruned with its snapshots gone and refused to start, for good: its batches out of reach. A
    pruned journal holds the snapshot_every batches stored between its last two snapshots; this one fewer."""
    if staged:
        write_old_events(tmp_path, [staged_batch("f", 1, "run1/1", [5, 6], 1)], first_seq=2, url=journal_url)
    else:  # (delivered at once; the rejected batch had taken delivery ids 1 and 2)
        write_old_events(tmp_path, [("spark_bridge.BatchStored", 2, [
            "g", 0, 0, ["/user/accounts/a0"], [{"amount": 7, "txid": 9}], None, None, 3, [], 0, None, 0.0])],
            first_seq=2, url=journal_url)
    # (recovery reads the journal ahead while replaying it: on PostgreSQL too)
    system = make_system(base, journal=journal_url, snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    probe = system.probe("driver")
    start_bridge(system)
    if staged:
        assert [(r.run, r.batches, r.rows) for r in runs(system)] == [("run1", 1, 2)]
        system.tell(BRIDGE_PATH, Release("f", "run1", [[1, "run1/1"]], probe.path))
        assert probe.receive(10) == FeedReleased("f", "run1", 0)
        assert wait_for(lambda: balance(system) == Balance(11, 2, 0), timeout=30)
    else:
        assert wait_for(lambda: balance(system) == Balance(7, 1, 0), timeout=30)


@pytest.mark.parametrize("recorded", ["events", "snapshot"])
def test_an_unkeyed_rerun_of_a_feed_id_fed_before_staging_is_refused(base, make_system, tmp_path, recorded):
    """Versions before staging delivered each batch once stored (BatchStored without an attempt), deduplicated
    by partition and batch number; none of its partitions counts as released. A rerun by the staging driver
    delivered every row again. The bridge cannot tell which rows of such a partition were delivered (its feed
    may have died part-way): an unkeyed rerun is refused, naming the fix; a keyed one checks the keys it kept."""
    def unstaged(feed_id: str, partition: int, amounts: list[int], first_txid: int, first_id: int,
                 keys: list[str] | None = None) -> tuple[str, int, list[Any]]:
        values = [{"amount": a, "txid": t} for t, a in enumerate(amounts, first_txid)]
        return ("spark_bridge.BatchStored", 2, [feed_id, partition, 0, ["/user/accounts/a0"] * len(amounts), values,
                                                None, keys, first_id, [], 0, None, 0.0])

    if recorded == "events":
        write_old_events(tmp_path, [
            unstaged("g", 0, [1, 2], 0, 1), unstaged("g", 1, [3], 2, 3),
            unstaged("k", 0, [4], 10, 4, keys=["10"]),
            ("spark_bridge.Progress", 1, [[1, 2, 3, 4], [], []]),  # delivered and confirmed
        ])
    else:
        with open_snapshot_store(f"sqlite:///{tmp_path}/snapshots.db") as store:  # (the fields of that version)
            store.save(SnapshotMetadata(PERSISTENCE_ID, 4),
                       BridgeSnapshot(5, [["g", 0, 1, []], ["g", 1, 1, []], ["k", 0, 1, []]], {"k": ["10"]}, [], [],
                                      [], [], {}, {"g": [3, 3], "k": [1, 1]}))
    system, probe, _ = staged_system(base, make_system, tmp_path)
    start_bridge(system)
    stage(system, probe, "g", "runB/0", 0, 0, [1, 2], 0)
    stage(system, probe, "g", "runB/1", 1, 0, [3], 2)
    refused = release(system, probe, "g", "runB", 2)
    assert refused == FedBeforeStaging("g", "runB", BRIDGE_PATH), refused
    text = refused.explain()
    assert all(s in text for s in ("'g'", "before staging", "new feed_id")), text
    # A keyed rerun of the keyed one: its keys are known, only the new key is delivered.
    system.tell(BRIDGE_PATH, IngestBatch("k", 0, 0, ["/user/accounts/a0"] * 2, [{"amount": 4, "txid": 10},
                                                                                 {"amount": 5, "txid": 11}],
                                         probe.path, keys=["10", "11"], attempt="runK/0"))
    assert probe.receive(10).duplicates == 1
    system.tell(BRIDGE_PATH, Release("k", "runK", [[0, "runK/0"]], probe.path, partitions=1, keyed=True))
    assert probe.receive(10) == FeedReleased("k", "runK", 0)
    assert wait_for(lambda: balance(system) == Balance(5, 1, 0), timeout=30)

"""Staging and release under rejected writes, restarts and discards: acknowledged rows are never lost or doubled.

No Spark: a probe speaks the bridge's protocol (spark_bridge.messages) as a task and a driver do. On both bases.
"""

from __future__ import annotations

import pytest

import actors
from spark_bridge import BRIDGE_PATH, SparkBridge
from spark_bridge.messages import BatchAccepted, FeedReleased, GetFeedProgress, IngestBatch, Release
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
    system.system_actor_of(LingeringBridge, path=BRIDGE_PATH)
    # (An earlier feed's batch first: written when a journal whose first write was rejected could not recover,
    # see test_a_bridge_whose_first_write_was_rejected_recovers.)
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


def test_an_aborted_commit_s_discard_releases_a_run_the_coordinator_had_decided(bridged):
    """Spark calls the job's abort when its commit fails, e.g. a bridge that did not confirm its Release within
    the timeout (it was restarting): the driver's FeedError says "run it again", and its abort sends a Discard to
    every bridge. A bridge still holding the decided run staged used to discard it: the coordinator had decided its
    partitions, so the rerun skipped them and its resent release was refused: their rows were never delivered
    under the feed id. The run is released, as its planned Release would have, and the rerun succeeds."""
    from spark_bridge import bridge_path, start_bridges
    from spark_bridge.messages import Coordinate, Discard, Discarded, ReleasePlan
    from tests.spark_bridge.test_staged_bridges import release, stage

    system, probe, _ = bridged
    [node] = system.nodes()
    nb = bridge_path(node)
    assert start_bridges(system, nodes=[node]) == [nb]
    stage(system, probe, nb, "f", "runA/1", 0, [1, 2], 0)
    stage(system, probe, BRIDGE_PATH, "f", "runA/2", 1, [3], 2, account="a1")  # (its node had no bridge then)
    system.tell(BRIDGE_PATH, Coordinate("f", "runA", [[0, "runA/1", nb], [1, "runA/2", BRIDGE_PATH]], False,
                                        probe.path))
    plan = probe.receive(10)
    assert isinstance(plan, ReleasePlan) and len(plan.winners) == 2
    # The Releases are lost (the bridges were restarting), the commit fails, and Spark's abort discards the run.
    for bridge in (BRIDGE_PATH, nb):
        system.tell(bridge, Discard("f", "runA", probe.path))
    assert [probe.receive(10), probe.receive(10)] == [Discarded("f", "runA")] * 2
    wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(3, 2, 0)
             and system.ask("/user/accounts/a1", GetBalance(), timeout=10) == Balance(3, 1, 0), timeout=30)
    # The rerun: its partitions were decided by runA, whose releases it resends: repeats, not refused.
    system.tell(BRIDGE_PATH, Coordinate("f", "runB", [[0, "runB/1", nb], [1, "runB/2", nb]], False, probe.path))
    rerun = probe.receive(10)
    assert isinstance(rerun, ReleasePlan) and rerun.winners == [] and len(rerun.earlier) == 2
    for run, bridge, winners in rerun.earlier:
        assert release(system, probe, bridge, "f", run, winners) == FeedReleased("f", run, 0, bridge)
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(3, 2, 0)
    assert system.ask("/user/accounts/a1", GetBalance(), timeout=10) == Balance(3, 1, 0)


@pytest.mark.parametrize("staged", [True, False], ids=["staged", "delivered-at-once"])
def test_a_batch_with_an_unhashable_key_is_refused_alone_and_later_batches_go_on(bridged, staged):
    """A client that tells the bridge rows directly (not through feed(), which refuses such keys before the job)
    sent a key that cannot be hashed (a list): the bridge raised in the middle of taking the batch, and later
    batches were not handled as before. The batch is refused, naming its key, and the next ones go on."""
    from spark_bridge.messages import BatchRefused

    system, probe, _ = bridged
    system.system_actor_of(SparkBridge, path=BRIDGE_PATH)
    attempt = "run1/1" if staged else None
    paths = ["/user/accounts/a0"] * 2

    def batch(batch_no: int, keys: list[object], amounts: list[int]) -> IngestBatch:
        values = [{"amount": a, "txid": f"k{batch_no}-{i}"} for i, a in enumerate(amounts)]
        return IngestBatch("f", 0, batch_no, paths, values, probe.path, keys=keys, attempt=attempt)

    system.tell(BRIDGE_PATH, batch(0, ["a", ["b"]], [1, 2]))
    refused = probe.receive(10)
    assert isinstance(refused, BatchRefused) and (refused.feed_id, refused.partition, refused.batch_no) == ("f", 0, 0)
    assert "row 1" in refused.reason and "['b']" in refused.reason and "list" in refused.reason, refused.reason
    # The same batch number with good keys, and the next: stored, the keys of the refused one not taken.
    system.tell(BRIDGE_PATH, batch(0, ["a", "b"], [1, 2]))
    assert probe.receive(10) == BatchAccepted("f", 0, 0, 0)
    system.tell(BRIDGE_PATH, batch(1, ["b", "c"], [4, 8]))
    # (key "b" again: skipped at once when delivered at once, when released when staged)
    assert probe.receive(10) == BatchAccepted("f", 0, 1, 0 if staged else 1)
    if staged:
        system.tell(BRIDGE_PATH, Release("f", "run1", [[0, "run1/1"]], probe.path, partitions=1, keyed=True))
        assert probe.receive(10) == FeedReleased("f", "run1", 0, duplicates=1)
    wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(11, 3, 0), timeout=30)


@pytest.mark.parametrize("cls", [SparkBridge, "snapshots"], ids=["replayed", "from-a-snapshot"])
def test_an_abort_s_discard_at_a_node_bridge_whose_winner_was_empty_lets_the_decided_run_be_released(bridged, cls):
    """A decided run whose winner at a node bridge had an empty partition (nothing staged there): the driver's
    Release to that bridge was lost, the commit failed, Spark's abort sent a Discard everywhere. With nothing
    staged, the node bridge did not ask the coordinator and recorded the decided run as discarded: the rerun's
    resent release of it was refused, and its FeedError advised a new feed id, which would deliver the other
    partitions again. A Discard that drops nothing does not make a later Release refused."""
    from spark_bridge import bridge_path, start_bridges
    from spark_bridge.messages import Coordinate, Discard, Discarded, ReleasePlan
    from tests.spark_bridge.test_staged import SnapshotEveryBatch, restart_at
    from tests.spark_bridge.test_staged_bridges import release, stage

    cls = SnapshotEveryBatch if cls == "snapshots" else cls
    system, probe, _ = bridged
    [node] = system.nodes()
    nb = bridge_path(node)
    assert start_bridges(system, nodes=[node], cls=cls) == [nb]
    stage(system, probe, BRIDGE_PATH, "f", "runA/1", 0, [1, 2], 0)  # partition 1 (at nb) is empty
    stage(system, probe, nb, "g", "runX/1", 0, [4], 10, account="a1")  # (another feed's: nb has a journal to snapshot)
    system.tell(BRIDGE_PATH, Coordinate("f", "runA", [[0, "runA/1", BRIDGE_PATH], [1, "runA/2", nb]], False,
                                        probe.path, 2))
    plan = probe.receive(10)
    assert isinstance(plan, ReleasePlan) and len(plan.winners) == 2
    assert release(system, probe, BRIDGE_PATH, "f", "runA", [[0, "runA/1"]]) == FeedReleased("f", "runA", 0)
    # nb's Release is lost, the commit fails, the abort discards the run at every bridge.
    for bridge in (BRIDGE_PATH, nb):
        system.tell(bridge, Discard("f", "runA", probe.path))
    assert [probe.receive(10), probe.receive(10)] == [Discarded("f", "runA")] * 2
    system.tell(nb, Release("g", "runX", [[0, "runX/1"]], probe.path))  # (a snapshot of nb, for SnapshotEveryBatch)
    assert probe.receive(10) == FeedReleased("g", "runX", 0)
    restart_at(system, nb, cls)
    # The rerun: runA decided both partitions; its resent releases are answered "released", not refused.
    system.tell(BRIDGE_PATH, Coordinate("f", "runB", [[0, "runB/1", nb], [1, "runB/2", nb]], False, probe.path, 2))
    rerun = probe.receive(10)
    assert isinstance(rerun, ReleasePlan) and rerun.winners == [] and len(rerun.earlier) == 2
    for run, bridge, winners in rerun.earlier:
        assert release(system, probe, bridge, "f", run, winners) == FeedReleased("f", run, 0, bridge)
    # runA's rows delivered once (a1's row of feed g may come again: its confirmation may not have been durable
    # when nb restarted).
    wait_for(lambda: system.ask("/user/accounts/a1", GetBalance(), timeout=10).total == 4, timeout=30)
    wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(3, 2, 0), timeout=30)


def test_the_error_of_an_earlier_run_s_refused_release_names_its_partitions_and_no_whole_new_feed():
    """A rerun resends the releases of the earlier run that decided its partitions; one refused (its rows were
    discarded at that bridge) fails the feed. Its FeedError said "Feed their rows again under a new feed_id",
    read as the whole feed: its other partitions, delivered, would come twice. It names the partitions."""
    from spark_bridge.feed import refused_message
    from spark_bridge.messages import ReleaseRefused

    text = refused_message(ReleaseRefused("f", "runA", "operator", 90.0), "/system/spark-bridges/n1", [], "runB",
                           [3, 1])
    assert "earlier run runA" in text and "partitions 1, 3" in text, text
    assert "feed only the rows of partitions 1, 3 again, under a new feed_id" in text, text
    assert "would deliver the others twice" in text, text


@pytest.mark.parametrize("staged", [True, False], ids=["staged", "delivered-at-once"])
def test_a_bridge_whose_first_write_was_rejected_recovers(bridged, staged):
    """A rejected write uses its sequence numbers: a bridge whose first batch the journal rejected (a value it
    cannot store) has a journal starting past 1. With no snapshot yet, recovery took that for a journal pruned
    with its snapshots gone and refused to start, for good: every batch accepted after it was out of reach."""
    system, probe, _ = bridged
    system.system_actor_of(SparkBridge, path=BRIDGE_PATH)
    attempt = "run1/{}" if staged else None

    def batch(partition: int, amounts: list[object], first_txid: int) -> IngestBatch:
        return IngestBatch("f", partition, 0, ["/user/accounts/a0"] * len(amounts),
                           [{"amount": a, "txid": t} for t, a in enumerate(amounts, first_txid)], probe.path,
                           attempt=attempt and attempt.format(partition))

    system.tell(BRIDGE_PATH, batch(0, [2**70], 0))  # (beyond 64 bits: rejected)
    wait_for(lambda: system.errors().recent, timeout=30)  # the rejection is reported
    system.tell(BRIDGE_PATH, batch(1, [5, 6], 1))
    assert probe.receive(10) == BatchAccepted("f", 1, 0, 0)
    restart(system)
    assert system.ask(BRIDGE_PATH, GetFeedProgress("f"), timeout=10).accepted == 2  # recovered, with the batch
    if staged:  # the staged batch is there to release
        assert [(r.run, r.batches, r.rows) for r in runs(system)] == [("run1", 1, 2)]
        system.tell(BRIDGE_PATH, Release("f", "run1", [[1, "run1/1"]], probe.path))
        assert probe.receive(10) == FeedReleased("f", "run1", 0)
    wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10).total == 11, timeout=30)
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10).applied == 2


@pytest.mark.parametrize("cls", [SparkBridge, "snapshots"], ids=["replayed", "from-a-snapshot"])
def test_a_repeated_release_is_answered_with_the_counts_of_the_original(bridged, cls):
    """The driver resends its Release until answered and keeps the first answer: when the first was lost, it took
    a repeat's, which said 0 rows discarded and 0 duplicates: its FeedResult undercounted both. A repeat carries
    the original counts, also after a restart (replayed, or from a snapshot)."""
    from tests.spark_bridge.test_staged import SnapshotEveryBatch

    cls = SnapshotEveryBatch if cls == "snapshots" else cls
    system, probe, _ = bridged
    system.system_actor_of(cls, path=BRIDGE_PATH)

    def keyed(partition: int, attempt: str, keys: list[str], amounts: list[int]) -> None:
        system.tell(BRIDGE_PATH, IngestBatch("f", partition, 0, ["/user/accounts/a0"] * len(keys),
                                             [{"amount": a, "txid": k} for k, a in zip(keys, amounts, strict=True)],
                                             probe.path, keys=keys, attempt=attempt))
        assert isinstance(probe.receive(10), BatchAccepted)

    keyed(0, "run1/1", ["a", "b"], [1, 2])
    keyed(0, "run1/9", ["a", "b", "z"], [1, 2, 9])  # a failed attempt of partition 0: its 3 rows are discarded
    keyed(1, "run1/2", ["b", "c"], [2, 4])  # key b again: a duplicate
    release = Release("f", "run1", [[0, "run1/1"], [1, "run1/2"]], probe.path, partitions=2, keyed=True)
    system.tell(BRIDGE_PATH, release)
    first = probe.receive(10)
    assert first == FeedReleased("f", "run1", 3, duplicates=1), first
    system.tell(BRIDGE_PATH, release)  # (the driver's resend: the first answer was lost)
    assert probe.receive(10) == first
    wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(7, 3, 0), timeout=30)
    system.tell(BRIDGE_PATH, Release("g", "run2", [], probe.path))  # (one more round: a snapshot after the release)
    assert probe.receive(10) == FeedReleased("g", "run2", 0)
    restart(system, cls)
    system.tell(BRIDGE_PATH, release)
    assert probe.receive(10) == first

"""What long-running feeds leave behind grows with live state, not with the number of feeds (tasks, micro-batches).

No Spark: the task side (`_Publisher`) runs in this process against a real bridge, and a probe speaks the driver's
protocol, as in test_staged.py. Sizes are counted after N operations (no timings).
"""

from __future__ import annotations

import os

import pytest

import actors
from spark_bridge import BRIDGE_PATH, SparkBridge, start_bridge
from spark_bridge.bridge import KEPT_MICRO_BATCHES
from spark_bridge.feed import _connection, _connections, _Publisher, make_plan
from spark_bridge.messages import BatchAccepted, FeedReleased, IngestBatch, Release
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)


def test_a_worker_s_cached_connection_keeps_no_probe_of_a_finished_task(make_system, tmp_path):
    """A Spark Python worker is reused for many tasks, and attaches once (feed._connections); each task made a probe
    on that connection for its bridge's answers and never closed it: the client kept every task's probe path and
    mailbox (late answers to resends queued in it) for the worker's life, one per task of every feed."""
    from tests.spark_bridge.sample import Account

    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/journal.db",
                         snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    start_bridge(system)
    plan = make_plan("127.0.0.1", int(system.admin_port), "f", "to", None, None, 100, 4, 30.0, "persisted")
    worker = _connection("127.0.0.1", int(system.admin_port))  # the worker's cached attachment, as a task's
    try:
        before = len(worker._listening_paths)
        for task in range(40):
            pub = _Publisher(plan, "f", task, f"{plan.run}/{task}")
            assert pub.system is worker
            pub.send(0, ["/user/accounts/a0"], [{"amount": 1, "txid": task}], None, None)
            assert pub.finish() == (task, f"{plan.run}/{task}", 1, 0, 0, BRIDGE_PATH)
        assert len(worker._listening_paths) == before, sorted(worker._listening_paths)
        assert not [p for p in worker._mailbox if "spark-feed-" in p]
    finally:
        _connections.pop((os.getpid(), "127.0.0.1", int(system.admin_port)), None)
        worker.close()


class SnapshotOften(SparkBridge):
    """A bridge that snapshots every 20 stored batches: a restart recovers from a snapshot and the events after."""

    snapshot_every = 20


def _release(system: actors.System, probe: actors.Probe, feed_id: str, run: str, key: str | None) -> FeedReleased:
    """Stage one row of `feed_id` (to account a0, keyed by `key` if one) under `run` and release it, as a task and
    a driver do; the FeedReleased."""
    system.tell(BRIDGE_PATH, IngestBatch(feed_id, 0, 0, ["/user/accounts/a0"], [{"amount": 1, "txid": feed_id}],
                                         probe.path, keys=None if key is None else [key], attempt=f"{run}/1"))
    assert isinstance(probe.receive(10), BatchAccepted)
    system.tell(BRIDGE_PATH, Release(feed_id, run, [[0, f"{run}/1"]], probe.path, partitions=1, keyed=key is not None))
    reply = probe.receive(10)
    assert isinstance(reply, FeedReleased), reply
    return reply


def _micro_batch(system: actors.System, probe: actors.Probe, stream: str, batch_id: int, keyed: bool) -> FeedReleased:
    """Micro-batch `batch_id` of `stream` (one row), staged and released."""
    return _release(system, probe, f"{stream}/{batch_id}", f"run{batch_id}", f"k{batch_id}" if keyed else None)


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_a_stream_s_released_micro_batches_are_remembered_for_its_newest_batches_only(base, make_system, tmp_path,
                                                                                        keyed):
    """A streaming query feeds each micro-batch as its own feed id, f"{query}/{batch id}": the bridge kept every
    one's released partitions (and, keyed, every key of every micro-batch) in memory and in each snapshot for good:
    a query feeding every minute grew it by 525,600 feed ids a year. Spark replays only a query's newest micro-batch
    (the one not yet in its commit log) and keeps the offsets of its last `minBatchesToRetain` (100) only: the bridge
    keeps the newest KEPT_MICRO_BATCHES of each stream, and still refuses to deliver a replay of the newest again,
    also after a restart (snapshot and journal)."""
    from tests.spark_bridge.sample import Account, Balance, GetBalance

    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db",
                         snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    system.system_actor_of(SnapshotOften, path=BRIDGE_PATH)
    probe = system.probe("driver")
    n = KEPT_MICRO_BATCHES + 60
    for batch_id in range(n):
        _micro_batch(system, probe, "q", batch_id, keyed)
    kept = counters(system)
    assert kept["feed_ids_remembered"] == KEPT_MICRO_BATCHES, kept
    assert kept["feed_keys_remembered"] == (KEPT_MICRO_BATCHES if keyed else 0), kept
    wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(n, n, 0), timeout=60)
    # The newest micro-batch replayed after a restart (another run of the same feed id) delivers nothing again.
    system.stop(BRIDGE_PATH)
    system.system_actor_of(SnapshotOften, path=BRIDGE_PATH)
    assert counters(system)["feed_ids_remembered"] == KEPT_MICRO_BATCHES
    feed_id, run = f"q/{n - 1}", "replay"
    system.tell(BRIDGE_PATH, IngestBatch(feed_id, 0, 0, ["/user/accounts/a0"], [{"amount": 1, "txid": feed_id}],
                                         probe.path, keys=[f"k{n - 1}"] if keyed else None, attempt=f"{run}/1"))
    # (its row a duplicate when staged: unkeyed, its partition is done; keyed, its key was released)
    assert probe.receive(10) == BatchAccepted(feed_id, 0, 0, 1)
    system.tell(BRIDGE_PATH, Release(feed_id, run, [[0, f"{run}/1"]], probe.path, partitions=1, keyed=keyed))
    assert probe.receive(10) == FeedReleased(feed_id, run, 0)
    _micro_batch(system, probe, "q", n, keyed)  # (the stream goes on)
    wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(n + 1, n + 1, 0),
             timeout=60)
    assert counters(system)["feed_ids_remembered"] == KEPT_MICRO_BATCHES


def counters(system: actors.System) -> dict[str, int]:
    return system.status().hosts[BRIDGE_PATH].counters


class KeepsFew(SparkBridge):
    """A bridge that remembers 5 micro-batches per stream, and 8 in all besides each stream's newest."""

    kept_micro_batches = 5
    kept_stream_batches = 8


def test_past_the_bound_over_all_streams_the_least_recent_streams_keep_their_newest_only(base, make_system, tmp_path):
    """Queries started without their checkpoint get a new query id each time: a new stream. Past
    `kept_stream_batches` in all (besides each stream's newest), the streams that released least recently keep their
    newest only: that one is what Spark replays after a crash between its release and the query's commit, however
    long the query then stays down (forgotten whole, a replay after 100,000 other micro-batches delivered its rows
    again). A batch feed id is never forgotten (its reruns are skipped, as documented)."""
    from tests.spark_bridge.sample import Account

    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db",
                         snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    system.system_actor_of(KeepsFew, path=BRIDGE_PATH)
    probe = system.probe("driver")
    _release(system, probe, "daily-1", "run0", None)  # a batch feed id: never forgotten
    for batch_id in range(7):
        _micro_batch(system, probe, "q1", batch_id, keyed=False)
    assert counters(system)["feed_ids_remembered"] == 1 + 5  # q1/2 .. q1/6
    for batch_id in range(5):
        _micro_batch(system, probe, "q2", batch_id, keyed=False)
    assert counters(system)["feed_ids_remembered"] == 1 + 10  # 8 besides the newest of q1 and q2
    _micro_batch(system, probe, "q1", 7, keyed=False)  # q1 released last: q2 is now the least recent
    for batch_id in range(3):
        _micro_batch(system, probe, "q3", batch_id, keyed=False)
    # past 8 besides the newest (at q3/1): q2 keeps q2/4 only; q1 keeps 5 and q3 3, and the batch feed id
    assert counters(system)["feed_ids_remembered"] == 1 + 5 + 1 + 3, counters(system)
    # q2's newest replayed (its query back after a crash between release and commit): nothing delivered again.
    system.tell(BRIDGE_PATH, IngestBatch("q2/4", 0, 0, ["/user/accounts/a0"], [{"amount": 1, "txid": "q2/4"}],
                                         probe.path, attempt="replay/1"))
    assert probe.receive(10) == BatchAccepted("q2/4", 0, 0, 1)
    # A forgotten micro-batch is a new feed id again (Spark never replays it): its row would be delivered.
    assert _micro_batch(system, probe, "q2", 3, keyed=False) == FeedReleased("q2/3", "run3", 0)
    # The same after a restart (snapshot and journal): q2/4 still known.
    system.stop(BRIDGE_PATH)
    system.system_actor_of(KeepsFew, path=BRIDGE_PATH)
    system.tell(BRIDGE_PATH, IngestBatch("q2/4", 0, 0, ["/user/accounts/a0"], [{"amount": 1, "txid": "q2/4"}],
                                         probe.path, attempt="replay2/1"))
    assert probe.receive(10) == BatchAccepted("q2/4", 0, 0, 1)
    # The batch feed id is still known: its rerun delivers nothing again.
    system.tell(BRIDGE_PATH, IngestBatch("daily-1", 0, 0, ["/user/accounts/a0"], [{"amount": 1, "txid": "x"}],
                                         probe.path, attempt="rerun/1"))
    assert probe.receive(10) == BatchAccepted("daily-1", 0, 0, 1)


class KeepsThreeFeeds(SparkBridge):
    """A bridge that remembers the releases of 3 batch feed ids, and snapshots every 2 stored batches."""

    kept_feed_ids = 3
    snapshot_every = 2


@pytest.mark.parametrize("keyed", [False, True], ids=["unkeyed", "keyed"])
def test_kept_feed_ids_bounds_the_batch_feed_ids_remembered_the_first_released_forgotten_first(
        base, make_system, tmp_path, keyed):
    """A system fed under a new batch feed id every minute kept every one's released partitions (and keys) for good:
    ~70 bytes of every snapshot each, and ~17 a key. `kept_feed_ids` bounds them: a rerun of one still kept delivers
    nothing again, one of a forgotten feed id is a new feed. The same after a restart."""
    from tests.spark_bridge.sample import Account

    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db",
                         snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    system.system_actor_of(KeepsThreeFeeds, path=BRIDGE_PATH)
    probe = system.probe("driver")
    for n in range(5):
        _release(system, probe, f"daily-{n}", "run1", "k" if keyed else None)
    assert counters(system)["feed_ids_remembered"] == 3
    assert counters(system)["feed_keys_remembered"] == (3 if keyed else 0)

    def rerun(feed_id: str, run: str) -> int:
        """The duplicates of the one batch of a rerun of `feed_id` (a new run)."""
        system.tell(BRIDGE_PATH, IngestBatch(feed_id, 0, 0, ["/user/accounts/a0"], [{"amount": 1, "txid": run}],
                                             probe.path, keys=["k"] if keyed else None, attempt=f"{run}/1"))
        accepted = probe.receive(10)
        assert isinstance(accepted, BatchAccepted), accepted
        system.tell(BRIDGE_PATH, Release(feed_id, run, [[0, f"{run}/1"]], probe.path, partitions=1, keyed=keyed))
        assert isinstance(probe.receive(10), FeedReleased)
        return accepted.duplicates

    assert rerun("daily-4", "run2") == 1  # kept: nothing again
    assert rerun("daily-0", "run3") == 0  # forgotten: a new feed (and now the newest kept)
    system.stop(BRIDGE_PATH)
    system.system_actor_of(KeepsThreeFeeds, path=BRIDGE_PATH)
    assert counters(system)["feed_ids_remembered"] == 3
    assert rerun("daily-3", "run4") == 1 and rerun("daily-0", "run5") == 1  # (daily-2 went when daily-0 came back)
    assert rerun("daily-2", "run6") == 0


@pytest.mark.spark
@pytest.mark.timeout(180)
def test_the_bridge_remembers_one_follow_up_origin_per_receiver_that_sent_one_not_per_row(spark, make_bridged):
    """The bridge keeps the follow-up ids it accepted from each receiver for good (a receiver recovering resends
    those its journal does not know were accepted, however much later: see SparkBridge._forward), which nothing
    counted: `follow_up_origins_remembered` is one per receiver (README's figure: ~280 bytes each), whatever the
    rows, feeds and follow-ups."""
    from spark_bridge import feed
    from tests.spark_bridge.sample import DurableAccount, GetBalance
    from tests.spark_bridge.test_feed import deposits

    system = make_bridged(account=DurableAccount, ledger=True)
    assert counters(system)["follow_up_origins_remembered"] == 0
    for n, rows in enumerate((120, 360)):  # (a follow-up per row: 4 and 12 per account)
        result = feed(deposits(spark, rows, accounts=30), system=system.admin_port, feed_id=f"origins-{n}",
                      ack="processed", batch_size=60, progress=False)
        assert result.rows == rows
        assert counters(system)["follow_up_origins_remembered"] == 30
    assert system.ask("/user/ledger", GetBalance(), timeout=10).applied == 480

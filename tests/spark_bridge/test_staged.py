"""Staged runs a driver never released (it died): visible, discarded by staged_ttl or by hand, never lost silently.

No Spark: a probe speaks the bridge's protocol (spark_bridge.messages) as a task and a driver do. On both bases.
"""

from __future__ import annotations

import contextlib
import sqlite3

import pytest

import actors
from journal import SnapshotSelectionCriteria, open_journal, open_snapshot_store
from spark_bridge import (
    BRIDGE_PATH,
    FeedError,
    SparkBridge,
    StagedRun,
    discard_staged,
    staged_runs,
    start_bridge,
)
from spark_bridge.bridge import PERSISTENCE_ID, check_staged_ttl
from spark_bridge.feed import commit_run, make_plan
from spark_bridge.messages import (
    AttemptsDiscarded,
    BatchAccepted,
    DiscardStaged,
    FeedReleased,
    GetFeedProgress,
    GetStagedRuns,
    IngestBatch,
    Release,
    ReleaseRefused,
    StagedRuns,
)
from tests.spark_bridge.sample import Account, Balance, GetBalance
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)

TTL = 1.0  # short, so that the tests wait about a second for the TTL (never sleep: they wait for conditions)


class SnapshotEveryBatch(SparkBridge):
    """A bridge that snapshots after every stored batch."""

    snapshot_every = 1


def stage(system: actors.System, probe: actors.Probe, feed_id: str, attempt: str, partition: int, batch_no: int,
          amounts: list[int], first_txid: int, account: str = "a0") -> BatchAccepted:
    """Stage one batch of deposits to `account` under `attempt` (as a task does); the BatchAccepted."""
    paths = [f"/user/accounts/{account}"] * len(amounts)
    values = [{"amount": a, "txid": t} for t, a in enumerate(amounts, first_txid)]
    system.tell(BRIDGE_PATH, IngestBatch(feed_id, partition, batch_no, paths, values, probe.path,
                                         attempt=attempt))
    reply = probe.receive(10)
    assert isinstance(reply, BatchAccepted) and reply.batch_no == batch_no, reply
    return reply


class ThrottledWhileBusy(SparkBridge):
    """A bridge whose fan-out while tasks stage is one row per minute."""

    fan_out_chunk_busy = 1
    busy_pause = 60.0
    busy_for = 60.0


def test_a_released_run_is_fanned_out_at_once_not_throttled_by_its_own_staging(bridged):
    """Staged batches mark the bridge busy (fan-out in small turns, so that tasks' batches are accepted first)
    for busy_for s after the last one. The run's Release ends that: its tasks are done. It used to linger, and
    the first ~0.4 s of a 1M-row processed feed's fan-out went at 1,000 rows per 50 ms."""
    system, probe, _ = bridged
    start_bridge(system, cls=ThrottledWhileBusy)
    stage(system, probe, "f", "runA/1", 0, 0, [1, 2, 3], 0)
    system.tell(BRIDGE_PATH, Release("f", "runA", [[0, "runA/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("f", "runA", 0)
    # Throttled, the second row would come a minute after the first.
    wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10).applied == 3, timeout=30)
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10).total == 6


def runs(system: actors.System) -> list[StagedRun]:
    reply = system.ask(BRIDGE_PATH, GetStagedRuns(), timeout=10)
    assert isinstance(reply, StagedRuns)
    return reply.runs


def counters(system: actors.System) -> dict[str, int]:
    return system.status().hosts[BRIDGE_PATH].counters


def restart(system: actors.System, cls: type[SparkBridge] = SparkBridge, **kwargs: object) -> None:
    restart_at(system, BRIDGE_PATH, cls, **kwargs)


def restart_at(system: actors.System, path: str, cls: type[SparkBridge] = SparkBridge, **kwargs: object) -> None:
    """Stop the bridge at `path` and spawn `cls` there again with `kwargs` (it recovers)."""
    system.stop(path)
    system.system_actor_of(cls, path=path, kwargs=kwargs)


def staged_system(base: str, make_system, tmp_path) -> tuple[actors.System, actors.Probe, str]:
    """A system on `base` with SQLite journal and snapshots, accounts, a probe for tasks and drivers, its URL."""
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db",
                         snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    return system, system.probe("driver"), f"sqlite:///{tmp_path}"


@pytest.fixture
def bridged(base, make_system, tmp_path):
    """staged_system's (system, probe, url)."""
    return staged_system(base, make_system, tmp_path)


def test_staged_runs_are_listed_and_summed_in_stats_until_released(bridged):
    system, probe, _ = bridged
    start_bridge(system)
    assert counters(system)["staged_runs"] == 0 and counters(system)["staged_ttl_seconds"] == 24 * 3600
    stage(system, probe, "f1", "runA/1", 0, 0, [1, 2], 0)
    stage(system, probe, "f1", "runA/1", 0, 1, [3], 2)
    stage(system, probe, "f1", "runA/2", 1, 0, [4], 3)
    stage(system, probe, "f2/7", "runB/1", 0, 0, [5, 6, 7], 10)  # a stream's feed id holds a '/'
    by_run = {(r.feed_id, r.run): r for r in runs(system)}
    a, b = by_run[("f1", "runA")], by_run[("f2/7", "runB")]
    assert (a.batches, a.rows, a.partitions, a.attempts) == (3, 4, 2, 2)
    assert (b.batches, b.rows, b.partitions, b.attempts) == (1, 3, 1, 1)
    assert a.last_staged_at is not None and a.bridge == BRIDGE_PATH and len(by_run) == 2
    c = counters(system)
    assert (c["staged_runs"], c["staged_batches"], c["staged_rows"]) == (2, 4, 7)
    # The idle clock runs; staging again restarts it.
    wait_for(lambda: min(r.idle_seconds for r in runs(system)) >= 0.5)
    stage(system, probe, "f1", "runA/1", 0, 2, [8], 20)
    assert {r.run: r.idle_seconds < 0.5 for r in runs(system)} == {"runA": True, "runB": False}
    # The API lists the same, the longest idle first.
    assert [(r.feed_id, r.run) for r in staged_runs(system)] == [("f2/7", "runB"), ("f1", "runA")]

    system.tell(BRIDGE_PATH, Release("f1", "runA", [[0, "runA/1"], [1, "runA/2"]], probe.path))
    assert probe.receive(10) == FeedReleased("f1", "runA", 0)
    assert [(r.feed_id, r.run) for r in runs(system)] == [("f2/7", "runB")]
    c = counters(system)
    assert (c["staged_runs"], c["staged_batches"], c["staged_rows"]) == (1, 1, 3)
    assert wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10).applied == 5)


def test_an_idle_run_is_discarded_after_the_ttl_and_its_late_release_is_refused_also_after_a_restart(bridged):
    system, probe, url = bridged
    start_bridge(system, staged_ttl=TTL)
    stage(system, probe, "dead", "runD/1", 0, 0, [100, 100], 0)  # a driver that dies after staging
    stage(system, probe, "live", "runL/1", 0, 0, [1], 50)
    system.tell(BRIDGE_PATH, Release("live", "runL", [[0, "runL/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("live", "runL", 0)

    wait_for(lambda: counters(system)["staged_runs"] == 0, timeout=TTL * 10)
    assert counters(system)["staged_expired"] == 1
    with open_journal(f"{url}/journal.db") as j:
        events = [e.event for e in j.events_by_persistence_id(PERSISTENCE_ID)]
    [discarded] = [e for e in events if isinstance(e, AttemptsDiscarded)]
    assert (discarded.feed_id, discarded.run, discarded.reason) == ("dead", "runD", "ttl")
    assert discarded.idle_seconds >= TTL

    # The driver was merely slow: its release is refused (not "released": the rows are gone), and stays so.
    for _ in range(2):
        system.tell(BRIDGE_PATH, Release("dead", "runD", [[0, "runD/1"]], probe.path))
        refused = probe.receive(10)
        assert isinstance(refused, ReleaseRefused) and (refused.feed_id, refused.run, refused.reason) == (
            "dead", "runD", "ttl")
        assert "without staging activity" in refused.explain()
        restart(system, staged_ttl=TTL)  # replayed from the journal: refused still
    # A repeat of the released run is still a repeat; a zombie batch of the discarded run is not staged.
    system.tell(BRIDGE_PATH, Release("live", "runL", [[0, "runL/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("live", "runL", 0)
    assert stage(system, probe, "dead", "runD/1", 0, 1, [100], 2).duplicates == 1
    assert runs(system) == []
    # Nothing of the discarded run was delivered; the released one was, once.
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(1, 1, 0)


def test_the_idle_clock_restarts_at_recovery_so_a_restart_never_discards_earlier(bridged):
    system, probe, _ = bridged
    start_bridge(system, staged_ttl=None)  # off: staged runs stay
    assert counters(system)["staged_ttl_seconds"] == 0
    stage(system, probe, "f", "run1/1", 0, 0, [1], 0)
    wait_for(lambda: runs(system)[0].idle_seconds >= 2 * TTL)
    restart(system, staged_ttl=TTL)  # idle longer than the TTL before the restart, yet the clock starts again
    [run] = runs(system)
    assert run.idle_seconds < TTL and run.last_staged_at is not None  # (the wall time is kept in the journal)
    wait_for(lambda: runs(system) == [], timeout=TTL * 10)
    assert counters(system)["staged_expired"] == 1


def test_a_snapshot_taken_after_a_discard_restores_it_and_released_runs_stay_repeats(bridged):
    system, probe, url = bridged
    system.system_actor_of(SnapshotEveryBatch, path=BRIDGE_PATH)  # (default TTL: a day)
    stage(system, probe, "f", "runOld/1", 0, 0, [7], 0)
    stage(system, probe, "f", "runNew/1", 0, 0, [9], 1)
    system.tell(BRIDGE_PATH, Release("f", "runNew", [[0, "runNew/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("f", "runNew", 0)
    # Its row confirmed (and that journaled) before the restart below: a confirmation still on its way then
    # would bring a redelivery of the same row, which at-least-once allows and the last check would count.
    wait_for(lambda: system.ask(BRIDGE_PATH, GetFeedProgress("f"), timeout=10).processed == 1)
    [gone] = discard_staged(system, "f", "runOld")
    assert (gone.feed_id, gone.run, gone.batches, gone.rows) == ("f", "runOld", 1, 1)
    assert discard_staged(system, "f", "runOld") == []  # not staged any more
    # A batch stored after the discard makes the next command save a snapshot holding it.
    stage(system, probe, "other", "runX/1", 0, 0, [1], 2, account="a1")
    with open_journal(f"{url}/journal.db") as j:
        discard_seq = next(e.sequence_nr for e in j.events_by_persistence_id(PERSISTENCE_ID)
                           if isinstance(e.event, AttemptsDiscarded))

    def snapshot():
        runs(system)
        with open_snapshot_store(f"{url}/snapshots.db") as store:
            s = store.load(PERSISTENCE_ID, SnapshotSelectionCriteria.LATEST)
        return s is not None and s.metadata.sequence_nr > discard_seq and s
    taken = wait_for(snapshot)
    assert taken.snapshot.discarded == [["f/runOld", "operator", gone.idle_seconds]]
    assert [r[:2] for r in taken.snapshot.staged_at] == [["other", "runX"]]

    restart(system, SnapshotEveryBatch)  # restored from that snapshot (nothing after it but what it holds)
    system.tell(BRIDGE_PATH, Release("f", "runOld", [[0, "runOld/1"]], probe.path))
    refused = probe.receive(10)
    assert isinstance(refused, ReleaseRefused) and refused.reason == "operator"
    system.tell(BRIDGE_PATH, Release("f", "runNew", [[0, "runNew/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("f", "runNew", 0)
    [left] = runs(system)
    assert (left.feed_id, left.run) == ("other", "runX") and left.last_staged_at is not None
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(9, 1, 0)


def test_discarding_by_idle_time_takes_only_runs_idle_that_long(bridged):
    system, probe, _ = bridged
    start_bridge(system)
    stage(system, probe, "f", "old/1", 0, 0, [1], 0)
    wait_for(lambda: runs(system)[0].idle_seconds >= 1.0)
    stage(system, probe, "f", "young/1", 0, 0, [2], 1)
    assert discard_staged(system, idle_for=3600) == []
    [gone] = discard_staged(system, idle_for=1.0)
    assert gone.run == "old" and [r.run for r in runs(system)] == ["young"]
    assert counters(system)["staged_expired"] == 0  # (an operator's discard, not the TTL's)
    with pytest.raises(ValueError, match="never discards every staged run"):
        DiscardStaged()
    with pytest.raises(ValueError, match="idle_for must be a number"):
        discard_staged(system, idle_for=-1)


def test_listing_or_discarding_without_a_bridge_says_to_start_one(bridged):
    """No bridge in the system: staged_runs and discard_staged fail naming it (both bases)."""
    system, _, _ = bridged
    for call in (lambda: staged_runs(system), lambda: discard_staged(system, idle_for=0)):
        with pytest.raises(FeedError, match=r"no Spark bridge runs in this actor system .*start_bridge"):
            call()


def test_a_bad_staged_ttl_is_refused_naming_it(system):
    for bad in (0, -5, "1h", float("inf"), True):
        with pytest.raises(ValueError, match="staged_ttl must be a number of seconds > 0"):
            check_staged_ttl(bad)
        with pytest.raises(ValueError, match="staged_ttl"):
            start_bridge(system, staged_ttl=bad)  # type: ignore[arg-type]
    assert BRIDGE_PATH not in system.status().hosts


@pytest.mark.multiproc
def test_the_driver_of_a_discarded_run_gets_a_feed_error_saying_what_happened_and_what_to_do(make_system, tmp_path):
    """The driver side (spark_bridge.feed.commit_run, what feed() and the sink run after the job): a run
    discarded by staged_ttl fails with a FeedError naming the feed, the run, why, and to run it again."""
    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/journal.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    start_bridge(system, staged_ttl=TTL)
    plan = make_plan("127.0.0.1", system.admin_port, "slow", "destination", None, None, 2000, 8, 10.0,
                     "persisted")
    probe = system.probe("task")
    stage(system, probe, "slow", f"{plan.run}/1", 0, 0, [5, 6], 0)
    wait_for(lambda: runs(system) == [], timeout=TTL * 10)  # discarded before the driver's commit
    with pytest.raises(FeedError) as caught:
        commit_run(plan, "slow", [(0, f"{plan.run}/1", 2, 0, 0)], 0.0)
    text = str(caught.value)
    assert "feed 'slow'" in text and f"run {plan.run}" in text and "without staging activity" in text
    assert "staged_ttl" in text and "Run the feed again with the same feed_id" in text
    # The rerun the error asks for delivers the rows, once.
    rerun = make_plan("127.0.0.1", system.admin_port, "slow", "destination", None, None, 2000, 8, 10.0,
                      "processed")
    stage(system, probe, "slow", f"{rerun.run}/1", 0, 0, [5, 6], 0)
    result = commit_run(rerun, "slow", [(0, f"{rerun.run}/1", 2, 0, 0)], 0.0)
    assert result.rows == 2 and result.duplicates_skipped == 0
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(11, 2, 0)


def test_a_bridge_whose_journal_holds_version_2_batches_stages_and_delivers_them_and_writes_version_3_after(
        base, make_system, tmp_path):
    # BatchStored version 3 stores the paths as a prefix and each path's rest, Progress version 2 its ids as
    # differences (spark_bridge/messages.py); a journal written before must recover as it was: a staged run still
    # staged and releasable, an undelivered batch delivered once but for the row confirmed before, and later
    # events appended in the new forms.
    import msgpack

    from journal.records import FORMAT_FLAT, EncodedBatch
    from journal.serialization import _default, checksum, key_seed

    pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    old = [  # the fields of version 2, in order: a staged batch, then one of a feed delivered at once
        ["f", 0, 0, ["/user/accounts/a0"] * 2, [{"amount": 3, "txid": 0}, {"amount": 4, "txid": 1}], None, None, 0,
         [], 0, "runOld/1", 1.7e9],
        ["g", 0, 0, ["/user/accounts/a1", "/user/accounts/a0"], [{"amount": 5, "txid": 9}, {"amount": 6, "txid": 8}],
         None, None, 1, [], 0, None, 0.0],
    ]
    records = [("spark_bridge.BatchStored", 2, fields) for fields in old]
    records.append(("spark_bridge.Progress", 1, [[1], [], []]))  # (version 1: ids as they are) row 1 confirmed
    rows = []
    for seq, (manifest, version, fields) in enumerate(records, start=1):
        blob = pack([FORMAT_FLAT, "old-writer", "", 0, None, None, manifest, version, *fields])
        rows.append((PERSISTENCE_ID, seq, blob, checksum(key_seed(PERSISTENCE_ID), seq, blob)))
    with open_journal(f"sqlite:///{tmp_path}/journal.db") as journal:
        journal._store(EncodedBatch(rows, []))
    system, probe, url = staged_system(base, make_system, tmp_path)
    start_bridge(system)
    [run] = runs(system)
    assert (run.feed_id, run.run, run.batches, run.rows) == ("f", "runOld", 1, 2), "still staged, as stored"
    assert wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(6, 1, 0))
    assert system.ask("/user/accounts/a1", GetBalance(), timeout=10) == Balance(0, 0, 0), "confirmed before: not again"
    system.tell(BRIDGE_PATH, Release("f", "runOld", [[0, "runOld/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("f", "runOld", 0)
    assert wait_for(lambda: system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(13, 3, 0))
    stage(system, probe, "h", "runNew/1", 0, 0, [20], 0, account="a1")
    system.tell(BRIDGE_PATH, Release("h", "runNew", [[0, "runNew/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("h", "runNew", 0)
    assert wait_for(lambda: system.ask("/user/accounts/a1", GetBalance(), timeout=10) == Balance(20, 1, 0))
    assert wait_for(lambda: system.ask(BRIDGE_PATH, GetFeedProgress("h"), timeout=10).processed == 1)

    restart(system)  # version 2 and version 3 batches recover together: nothing staged, nothing delivered again
    assert runs(system) == []
    assert stage(system, probe, "f", "runOld/1", 0, 0, [3, 4], 0).duplicates == 2, "its partition is done"
    assert [system.ask(f"/user/accounts/{a}", GetBalance(), timeout=10) for a in ("a0", "a1")] == [
        Balance(13, 3, 0), Balance(20, 1, 0)]
    with contextlib.closing(sqlite3.connect(f"{tmp_path}/journal.db")) as conn:
        stored = [msgpack.unpackb(blob, ext_hook=lambda code, data: None, strict_map_key=False)[6:8] for (blob,) in
                  conn.execute("SELECT record FROM journal WHERE persistence_id = ? ORDER BY sequence_nr",
                               (PERSISTENCE_ID,))]
    batches = [version for manifest, version in stored if manifest == "spark_bridge.BatchStored"]
    assert batches == [2, 2, 3], "the batch staged after recovery is stored in the new form"
    progress = [version for manifest, version in stored if manifest == "spark_bridge.Progress"]
    assert progress[0] == 1 and set(progress[1:]) == {2}, progress
    with open_journal(f"{url}/journal.db") as j:
        paths = [e.event.paths for e in j.events_by_persistence_id(PERSISTENCE_ID) if type(e.event).__name__ ==
                 "BatchStored"]
    assert paths == [["/user/accounts/a0"] * 2, ["/user/accounts/a1", "/user/accounts/a0"], ["/user/accounts/a1"]]


class PruningBridge(SparkBridge):
    """Snapshots (and prunes) after every stored batch; one row in flight at a time, so rows wait in the
    backlog at every snapshot and are read back from the journal after a restart."""

    snapshot_every = 1
    fan_out_window = 2


def bridge_events(url: str) -> list[object]:
    """The events left in the bridge's journal, in order."""
    with open_journal(f"{url}/journal.db") as j:
        return [e for e in j.events_by_persistence_id(PERSISTENCE_ID)]


def test_the_bridge_prunes_its_journal_after_snapshots_keeping_what_staged_and_waiting_rows_need(bridged):
    # prune_journal: after each snapshot the events up to the one before go, but for the batches still staged
    # or waiting for fan-out, read back from the journal after a restart. A batch staged while many runs come and
    # go is written again (BatchRestaged), so the pruning goes past it. Every row applies once.
    system, probe, url = bridged
    system.system_actor_of(PruningBridge, path=BRIDGE_PATH)
    fed = [0, 0]  # runs fed into a0 and a1 (each 3 deposits: 1 + 2 + 3)

    def feed_runs(first: int, last: int) -> None:
        for k in range(first, last):
            stage(system, probe, f"f{k}", f"run{k}/1", 0, 0, [1, 2, 3], 100 * k, account=f"a{k % 2}")
            system.tell(BRIDGE_PATH, Release(f"f{k}", f"run{k}", [[0, f"run{k}/1"]], probe.path))
            assert probe.receive(10) == FeedReleased(f"f{k}", f"run{k}", 0)
            fed[k % 2] += 1
            if k % 3 == 1:
                restart(system, PruningBridge)  # rows still waiting are read back from what the pruning kept
        for k in range(first, last):
            assert wait_for(lambda k=k: system.ask(BRIDGE_PATH, GetFeedProgress(f"f{k}"), timeout=10).processed == 3)

    def batches(kind: tuple[str, ...] = ("BatchStored", "BatchRestaged")) -> list[tuple[int, str]]:
        return [(e.sequence_nr, e.event.feed_id) for e in bridge_events(url) if type(e.event).__name__ in kind]

    feed_runs(0, 6)
    # (snapshots are taken after stored batches: two more, with nothing waiting, and what the first needs stays)
    stage(system, probe, "x", "runX/1", 0, 0, [1], 0, account="a8")
    stage(system, probe, "x", "runX/1", 0, 1, [1], 1, account="a8")
    assert bridge_events(url)[0].sequence_nr > 1 and batches()[0][1] != "f0", "pruned"
    assert counters(system)["journal_pruned_to"] == bridge_events(url)[0].sequence_nr - 1, "in its stats"
    system.tell(BRIDGE_PATH, Release("x", "runX", [[0, "runX/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("x", "runX", 0)
    stage(system, probe, "old", "runA/1", 0, 0, [1000], 0, account="a9")  # staged while the next ones are fed
    old = [seq for seq, feed_id in batches() if feed_id == "old"]
    k = 6
    while not batches(("BatchRestaged",)):  # until the staged batch holds the pruning back far enough
        assert k < 30, "the staged batch was never written again"
        feed_runs(k, k + 1)
        k += 1
    assert bridge_events(url)[0].sequence_nr == old[0], "nothing from the staged batch on was pruned before"
    # Right after the copy, before any snapshot that holds it: recovery reads the copy over the snapshot's batch,
    # so the next snapshot finds nothing held back to write again.
    restart(system, PruningBridge)
    k += k % 3 == 1  # (a run that does not restart the bridge)
    feed_runs(k, k + 1)
    k += 1
    assert counters(system)["staged_restaged"] == 0, "recovery did not read the staged batch at its copy"
    while bridge_events(url)[0].sequence_nr <= old[0]:  # two snapshots after the copy, the original is pruned
        assert k < 40, "the original staged batch was never pruned"
        feed_runs(k, k + 1)
        k += 1
    assert [feed_id for _, feed_id in batches(("BatchRestaged",))] == ["old"], "written again, once"
    restart(system, PruningBridge)
    assert [(r.feed_id, r.run, r.rows) for r in runs(system)] == [("old", "runA", 1)]
    system.tell(BRIDGE_PATH, Release("old", "runA", [[0, "runA/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("old", "runA", 0)
    assert wait_for(lambda: system.ask(BRIDGE_PATH, GetFeedProgress("old"), timeout=10).processed == 1)
    feed_runs(k, k + 4)  # snapshots after the release: the staged batch's copy is pruned too
    assert "old" not in [feed_id for _, feed_id in batches()] and bridge_events(url)[0].sequence_nr > old[0]
    restart(system, PruningBridge)
    assert runs(system) == []
    assert stage(system, probe, "f0", "run0/1", 0, 0, [1, 2, 3], 0).duplicates == 3, "a released run stays done"
    balances = [system.ask(f"/user/accounts/{a}", GetBalance(), timeout=10) for a in ("a0", "a1", "a9", "a8")]
    assert [(b.total, b.applied) for b in balances] == [(6 * fed[0], 3 * fed[0]), (6 * fed[1], 3 * fed[1]),
                                                        (1000, 1), (2, 2)]


def test_a_run_staged_before_anything_else_is_written_again_and_the_journal_pruned_past_it(bridged):
    # A dead driver's run staged first holds back every later event (the floor is 0): it is written again all the
    # same, the journal is pruned past it, and it is still staged (and releasable) after a restart.
    system, probe, url = bridged
    system.system_actor_of(PruningBridge, path=BRIDGE_PATH)
    stage(system, probe, "dead", "runD/1", 0, 0, [7], 0, account="a9")
    stage(system, probe, "dead", "runD/1", 0, 1, [8], 1, account="a9")
    first = bridge_events(url)[0].sequence_nr
    for k in range(30):
        if bridge_events(url)[0].sequence_nr > first + 1:
            break
        stage(system, probe, f"f{k}", f"run{k}/1", 0, 0, [1], k, account="a0")
        system.tell(BRIDGE_PATH, Release(f"f{k}", f"run{k}", [[0, f"run{k}/1"]], probe.path))
        assert probe.receive(10) == FeedReleased(f"f{k}", f"run{k}", 0)
        assert wait_for(lambda k=k: system.ask(BRIDGE_PATH, GetFeedProgress(f"f{k}"), timeout=10).processed == 1)
    assert bridge_events(url)[0].sequence_nr > first + 1, "the staged run held back the pruning"
    restart(system, PruningBridge)
    assert [(r.feed_id, r.run, r.batches, r.rows) for r in runs(system)] == [("dead", "runD", 2, 2)]
    system.tell(BRIDGE_PATH, Release("dead", "runD", [[0, "runD/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("dead", "runD", 0)
    assert wait_for(lambda: system.ask(BRIDGE_PATH, GetFeedProgress("dead"), timeout=10).processed == 2)
    balance = system.ask("/user/accounts/a9", GetBalance(), timeout=10)
    assert (balance.total, balance.applied) == (15, 2)


class DeleteFailingBridge(PruningBridge):
    """A PruningBridge whose journal (the same SQLite file, through tests.persistence.spec_actors' faildelete
    scheme) refuses every delete of events."""

    @property
    def journal_url(self) -> str | None:
        import tests.persistence.spec_actors  # noqa: F401  (registers faildelete:// in this process)
        return "faildelete://" + str(self.config["journal"]).partition("://")[2]


def test_a_bridge_whose_journal_refuses_deletes_keeps_every_event_and_delivers_every_row_once(bridged):
    # DeleteMessagesFailure: pruning gives up until the next snapshot, deletes nothing, and the bridge goes on;
    # a restart recovers from the newest snapshot and the events after it, all still there.
    system, probe, url = bridged
    system.system_actor_of(DeleteFailingBridge, path=BRIDGE_PATH)
    for k in range(6):
        stage(system, probe, f"f{k}", f"run{k}/1", 0, 0, [1, 2, 3], 100 * k, account=f"a{k % 2}")
        system.tell(BRIDGE_PATH, Release(f"f{k}", f"run{k}", [[0, f"run{k}/1"]], probe.path))
        assert probe.receive(10) == FeedReleased(f"f{k}", f"run{k}", 0)
        if k == 3:
            restart(system, DeleteFailingBridge)
    for k in range(6):
        assert wait_for(lambda k=k: system.ask(BRIDGE_PATH, GetFeedProgress(f"f{k}"), timeout=10).processed == 3)
    stage(system, probe, "x", "runX/1", 0, 0, [1], 0, account="a8")  # (snapshots after stored batches)
    stage(system, probe, "x", "runX/1", 0, 1, [1], 1, account="a8")

    def snapshots() -> int:
        with contextlib.closing(sqlite3.connect(url.partition(":///")[2] + "/snapshots.db")) as conn:
            return conn.execute("SELECT count(*) FROM snapshot WHERE persistence_id = ?", (PERSISTENCE_ID,)).fetchone()[0]

    # (a snapshot is taken when the next message arrives: each poll's GetStagedRuns is one)
    assert wait_for(lambda: runs(system) and snapshots() <= 2), "the older snapshots are deleted first"
    assert bridge_events(url)[0].sequence_nr == 1, "no event deleted"
    assert counters(system)["journal_pruned_to"] == 0
    restart(system, DeleteFailingBridge)
    assert [(r.feed_id, r.rows) for r in runs(system)] == [("x", 2)]
    assert stage(system, probe, "f0", "run0/1", 0, 0, [1, 2, 3], 0).duplicates == 3, "a released run stays done"
    balances = [system.ask(f"/user/accounts/{a}", GetBalance(), timeout=10) for a in ("a0", "a1", "a8")]
    assert [(b.total, b.applied) for b in balances] == [(18, 9), (18, 9), (0, 0)]
    restart(system, PruningBridge)  # deletes work again: the next snapshots prune what they could not
    system.tell(BRIDGE_PATH, Release("x", "runX", [[0, "runX/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("x", "runX", 0)
    stage(system, probe, "y", "runY/1", 0, 0, [1], 10, account="a9")
    stage(system, probe, "y", "runY/1", 0, 1, [1], 11, account="a9")
    assert wait_for(lambda: runs(system) and bridge_events(url)[0].sequence_nr > 1), "pruned on a later snapshot"
    assert wait_for(lambda: system.ask("/user/accounts/a8", GetBalance(), timeout=10) == Balance(2, 2, 0))


def released_one_row_runs(system: actors.System, probe: actors.Probe, feed_id: str, count: int) -> None:
    """Stage and release `count` runs of one row of `feed_id` each (run k stages partition k), until processed."""
    for k in range(count):
        stage(system, probe, feed_id, f"run{k}/1", k, 0, [1], k)
        system.tell(BRIDGE_PATH, Release(feed_id, f"run{k}", [[k, f"run{k}/1"]], probe.path))
        assert probe.receive(10) == FeedReleased(feed_id, f"run{k}", 0)
    assert wait_for(lambda: system.ask(BRIDGE_PATH, GetFeedProgress(feed_id), timeout=10).processed == count)


def test_a_pruned_bridge_journal_without_its_snapshots_fails_recovery_naming_what_to_restore(bridged):
    system, probe, url = bridged
    system.system_actor_of(PruningBridge, path=BRIDGE_PATH)
    released_one_row_runs(system, probe, "f", 4)
    stage(system, probe, "g", "runG/1", 0, 0, [1], 50)  # (two snapshots with nothing waiting: the first prunes)
    stage(system, probe, "g", "runG/1", 0, 1, [1], 51)
    # (a snapshot is taken when the next message arrives: each poll's GetStagedRuns is one)
    assert wait_for(lambda: runs(system) and bridge_events(url)[0].sequence_nr > 1), "pruned"
    system.stop(BRIDGE_PATH)
    with open_snapshot_store(f"{url}/snapshots.db") as store:
        store.delete_matching(PERSISTENCE_ID, SnapshotSelectionCriteria())
    system.system_actor_of(PruningBridge, path=BRIDGE_PATH)
    def refused():
        return [e for e in system.errors().recent if e.path == BRIDGE_PATH and "recovery failed" in e.reason]
    [error] = wait_for(refused)
    assert "no snapshot loaded" in error.reason and "prune_journal" in error.reason
    assert "restore its snapshot store" in error.reason and "..." not in error.reason
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(4, 4, 0), "nothing delivered again"


def test_a_bridge_whose_snapshots_live_in_memory_keeps_its_durable_journal_whole(make_system, tmp_path):
    # Snapshots in memory:// are gone with their process; a durable journal pruned behind them could not recover.
    # (The local base only: multiproc refuses memory:// stores.)
    system = make_system("local", journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store="memory://prune-test")
    system.spawn(Account, path="/user/accounts", entities=True)
    probe = system.probe("driver")
    system.system_actor_of(PruningBridge, path=BRIDGE_PATH)
    released_one_row_runs(system, probe, "f", 4)
    for k in range(3):
        stage(system, probe, "g", "runG/1", 0, k, [1], 50 + k)
        runs(system)  # (the snapshot after each stored batch is taken when the next message arrives)
    assert bridge_events(f"sqlite:///{tmp_path}")[0].sequence_nr == 1, "nothing pruned"
    assert [(r.feed_id, r.batches) for r in runs(system)] == [("g", 3)]


@pytest.mark.multiproc
def test_a_pruning_bridge_sigkilled_with_rows_waiting_reads_them_back_and_every_row_applies_once(make_system,
                                                                                                 tmp_path):
    # The worst moment for pruning: the bridge's process dies with rows of released batches still waiting for
    # fan-out after its journal was pruned; the restarted bridge reads them back from what the pruning kept.
    import os
    import signal

    system, probe, url = staged_system("multiproc", make_system, tmp_path)
    system.system_actor_of(PruningBridge, path=BRIDGE_PATH)
    for k in range(8):
        stage(system, probe, f"f{k}", f"run{k}/1", 0, 0, [1, 2, 3], 100 * k, account=f"a{k % 2}")
        system.tell(BRIDGE_PATH, Release(f"f{k}", f"run{k}", [[0, f"run{k}/1"]], probe.path))
        assert probe.receive(10) == FeedReleased(f"f{k}", f"run{k}", 0)
    for k in range(8):
        assert wait_for(lambda k=k: system.ask(BRIDGE_PATH, GetFeedProgress(f"f{k}"), timeout=10).processed == 3)
    # (snapshots come after stored batches: two more, with nothing waiting, and the journal is pruned)
    stage(system, probe, "last", "runZ/1", 0, 0, [10, 20, 30], 5_000, account="a0")
    stage(system, probe, "last", "runZ/1", 0, 1, [40], 5_003, account="a1")
    assert wait_for(lambda: runs(system) and bridge_events(url)[0].sequence_nr > 1), "pruned"
    system.tell(BRIDGE_PATH, Release("last", "runZ", [[0, "runZ/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("last", "runZ", 0)
    os.kill(system.status().hosts[BRIDGE_PATH].pid, signal.SIGKILL)  # (a window of 2: rows are still waiting)
    assert wait_for(lambda: system.ask(BRIDGE_PATH, GetFeedProgress("last"), timeout=10).processed == 4, timeout=30)
    assert system.status().hosts[BRIDGE_PATH].restarts >= 1
    balances = [system.ask(f"/user/accounts/{a}", GetBalance(), timeout=10) for a in ("a0", "a1")]
    assert [(b.total, b.applied) for b in balances] == [(24 + 60, 12 + 3), (24 + 40, 12 + 1)]


def test_a_retried_task_s_run_held_back_and_written_again_delivers_each_row_once_and_is_copied_once(bridged):
    # A Spark task retried stages its partition again under a new attempt (runR/2 beside runR/1); the run, staged
    # while other feeds come and go, holds the pruning back and is written again (BatchRestaged). The copies are of
    # the batches staged (both attempts: the release picks one), each once, and the release delivers each row of
    # the winning attempt once: the retry and the copies add no sends.
    system, probe, url = bridged
    system.system_actor_of(PruningBridge, path=BRIDGE_PATH)
    for attempt in ("runR/1", "runR/2"):  # the retry stages the same rows again
        stage(system, probe, "retried", attempt, 0, 0, [10, 20], 0, account="a9")
        stage(system, probe, "retried", attempt, 0, 1, [30], 2, account="a9")
    originals = [e.sequence_nr for e in bridge_events(url) if getattr(e.event, "feed_id", None) == "retried"]
    assert len(originals) == 4
    k = 0
    while bridge_events(url)[0].sequence_nr <= max(originals):  # until the journal is pruned past the originals
        assert k < 40, "the retried run's batches were never pruned past"
        stage(system, probe, f"f{k}", f"run{k}/1", 0, 0, [1], k, account="a0")
        system.tell(BRIDGE_PATH, Release(f"f{k}", f"run{k}", [[0, f"run{k}/1"]], probe.path))
        assert probe.receive(10) == FeedReleased(f"f{k}", f"run{k}", 0)
        assert wait_for(lambda k=k: system.ask(BRIDGE_PATH, GetFeedProgress(f"f{k}"), timeout=10).processed == 1)
        k += 1
    copies = [(e.event.attempt, e.event.batch_no) for e in bridge_events(url)
              if type(e.event).__name__ == "BatchRestaged"]
    assert sorted(copies) == [("runR/1", 0), ("runR/1", 1), ("runR/2", 0), ("runR/2", 1)], copies
    restart(system, PruningBridge)
    assert [(r.feed_id, r.run, r.batches, r.rows) for r in runs(system)] == [("retried", "runR", 4, 6)]
    system.tell(BRIDGE_PATH, Release("retried", "runR", [[0, "runR/2"]], probe.path))
    assert probe.receive(10) == FeedReleased("retried", "runR", 3)  # (runR/1's 3 rows discarded)
    assert wait_for(lambda: system.ask(BRIDGE_PATH, GetFeedProgress("retried"), timeout=10).processed == 3)
    balance = system.ask("/user/accounts/a9", GetBalance(), timeout=10)
    assert (balance.total, balance.applied, balance.repeated) == (60, 3, 0)
    assert counters(system)["staged_restaged"] == 0, "the copies were read at recovery: none written again"

"""The reprise data sink: df.write / df.writeStream .format("reprise"), Spark's commit protocol, bad options.

The writes, the retried attempt, the restarted stream and the bridge restarts run on SQLite and on PostgreSQL
journals (the bridge's and the destinations'; PostgreSQL tests skip loudly when it is absent, or fail under
REPRISE_REQUIRE_POSTGRES=1).
"""

from __future__ import annotations

import importlib
import json
import logging
import os
import tempfile
import threading
import time
import uuid
from pathlib import Path

import pytest

import actors
from journal import SnapshotSelectionCriteria, open_journal, open_snapshot_store
from spark_bridge import (
    BRIDGE_PATH,
    GetFeedProgress,
    SparkBridge,
    discard_staged,
    feed,
    feed_stream,
    last_write_result,
    register,
    staged_runs,
    start_bridge,
)
from spark_bridge.bridge import PERSISTENCE_ID
from spark_bridge.messages import (
    BatchAccepted,
    BatchStored,
    Coordinate,
    Discard,
    Discarded,
    FeedProcessed,
    FeedReleased,
    IngestBatch,
    Release,
)
from tests.spark_bridge.sample import Account, Balance, DurableAccount, GetBalance
from tests.spark_bridge.test_feed import balances, deposits, down_mid_way, settled, sums
from tests.waiting import wait_for

pytestmark = pytest.mark.spark


@pytest.fixture
def sink(spark):
    """The shared session with the reprise data sources registered."""
    register(spark)
    return spark


@pytest.fixture
def journal(journal_url: str) -> str:
    """The journal (and snapshot store) of the bridge and the destinations: a SQLite file or a fresh PostgreSQL schema."""
    return journal_url


def staged(journal: str | Path) -> list[BatchStored]:
    """The batches the bridge stored (each staged under its task attempt), in `journal` (a URL, or a directory
    holding journal.db)."""
    url = journal if isinstance(journal, str) else f"sqlite:///{journal}/journal.db"
    with open_journal(url) as j:
        return [r.payload for r in j.replay_messages(PERSISTENCE_ID) if isinstance(r.payload, BatchStored)]


def unique(name: str) -> str:
    """A feed id no other run of the tests uses."""
    return f"{name}-{uuid.uuid4().hex[:8]}"


def by_account(spark, rows: int, accounts: int = 20, partitions: int = 2):
    """Deposits with an `account` column (no path column): the sink builds the path from a template."""
    return deposits(spark, rows, accounts, partitions).drop("destination")


def write(df, port: int, **options):
    """df.write.format("reprise") with `options`; returns None like save()."""
    writer = df.write.format("reprise").mode("append").option("port", str(port))
    for name, value in options.items():
        writer = writer.option(name, str(value))
    writer.save()


def expected_by_account(df) -> dict[str, int]:
    """The DataFrame's own sums per account path."""
    return {f"/user/accounts/a{r['account']}": r["total"] for r in
            df.groupBy("account").sum("amount").withColumnRenamed("sum(amount)", "total").collect()}


def later_marker(spark, system, accounts: int, feed_id: str) -> None:
    """A later +1 to every account: bridge -> account is FIFO, so any redelivery would arrive before it."""
    marker = spark.range(0, accounts, numPartitions=1).selectExpr(
        "cast(id as int) as account", "cast(1 as long) as amount", "id + 1000000000 as txid")
    write(marker, system.admin_port, to="/user/accounts/a{account}", feed_id=feed_id)


@pytest.mark.timeout(120)
def test_write_persisted_delivers_every_row_once_and_a_rerun_of_the_feed_id_nothing(sink, make_bridged, journal):
    bridged = make_bridged(journal=journal)
    df = by_account(sink, 4_000).cache()
    expected = expected_by_account(df)
    feed_id = unique("w")  # (results are kept per host: other runs of this test must not answer for it)
    assert last_write_result(feed_id) is None
    write(df, bridged.admin_port, to="/user/accounts/a{account}", feed_id=feed_id, batch_size=500)
    first = last_write_result(feed_id)  # what save() cannot return, kept by the job's commit
    assert first is not None and (first.feed_id, first.rows, first.duplicates_skipped, first.discarded) == (
        feed_id, 4_000, 0, 0)
    got = settled(bridged, expected)
    assert sums(got) == expected and sum(b.applied for b in got.values()) == 4_000
    stored = len(staged(journal))
    assert stored == 8  # 2 partitions x 4 batches of 500
    write(df, bridged.admin_port, to="/user/accounts/a{account}", feed_id=feed_id, batch_size=500)
    assert len(staged(journal)) == stored  # its partitions were done: nothing staged again
    rerun = last_write_result(feed_id)
    assert rerun is not None and (rerun.rows, rerun.duplicates_skipped) == (4_000, 4_000), rerun
    later_marker(sink, bridged, 20, f"{feed_id}-marker")
    after = settled(bridged, {p: t + 1 for p, t in expected.items()})
    assert sums(after) == {p: t + 1 for p, t in expected.items()}
    assert sum(b.repeated for b in after.values()) == 0
    df.unpersist()


@pytest.mark.timeout(120)
def test_write_processed_returns_once_durable_accounts_applied_every_row(sink, make_bridged, journal):
    system = make_bridged(account=DurableAccount, ledger=True, journal=journal)
    df = by_account(sink, 3_000, accounts=30).cache()
    expected = expected_by_account(df)
    write(df, system.admin_port, to="/user/accounts/a{account}", feed_id="w-processed", ack="processed",
          batch_size=400)
    got = balances(system, expected)  # no waiting: save() returned after every row and follow-up was confirmed
    assert sums(got) == expected and sum(b.applied for b in got.values()) == 3_000
    ledger = system.ask("/user/ledger", GetBalance(), timeout=10)
    assert (ledger.total, ledger.applied) == (sum(expected.values()), 3_000)
    df.unpersist()


def attempt_dependent(last: int, journal: str | Path, feed_id: str):
    """A UDF: amount 1000 in a first attempt, 1 in the retry. Partition 0's first attempt fails as soon as it sees
    (every 1,000 rows) that the writer staged one of its batches, or at txid `last` (its last row) at the latest:
    under load the writer can lag the UDF by thousands of rows, so a fixed row would sometimes stage nothing."""
    def amount(txid):  # (no type hints: pyspark would take them for an Arrow UDF)
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.attemptNumber() == 0:
            if ctx.partitionId() == 0 and (txid >= last or (
                    txid % 1000 == 0 and any(b.partition == 0 and b.feed_id == feed_id for b in staged(journal)))):
                raise RuntimeError("injected failure of partition 0's first attempt")
            return 1000
        return 1
    return amount


@pytest.mark.timeout(120)
def test_a_retried_attempt_with_different_content_is_the_only_one_delivered(sink, make_bridged, journal):
    from pyspark.sql.functions import col, udf

    bridged = make_bridged(journal=journal)
    ROWS = 12_000  # noqa: N806 (partition 0's 6,000 leave the writer room to stage before the UDF fails)

    # Small Arrow batches, so that the first attempt stages batches before its failure. Whether it did is up to
    # Spark's pipelining under load (rarely it stages none): then the scenario is run again, up to 3 times.
    sink.conf.set("spark.sql.execution.arrow.maxRecordsPerBatch", "100")
    try:
        for tries in range(1, 4):  # noqa: B007 (the count of runs is used after the loop)
            feed_id = unique("nondeterministic")
            # Each run its own txids: the accounts skip a txid they have seen, so a rerun's rows must be new ones.
            start = (tries - 1) * ROWS
            amount = udf(attempt_dependent(last=start + ROWS // 2 - 1, journal=journal, feed_id=feed_id), "long")
            df = sink.range(start, start + ROWS, numPartitions=2) \
                .selectExpr("cast(id % 20 as int) as account", "id as txid").withColumn("amount", amount(col("txid")))
            write(df, bridged.admin_port, to="/user/accounts/a{account}", feed_id=feed_id, batch_size=250)
            batches = [b for b in staged(journal) if b.feed_id == feed_id]
            attempts = {b.attempt for b in batches if b.partition == 0}
            if len(attempts) == 2:  # the failed attempt staged batches too...
                break
        else:
            pytest.fail(f"in 3 runs partition 0's failing first attempt never staged a batch: {attempts}")
    finally:
        sink.conf.unset("spark.sql.execution.arrow.maxRecordsPerBatch")
    assert any(1000 in b.values[b.columns.index("amount")] for b in batches)
    # ...but only the winners count: partition 0's retry (amount 1), partition 1's first attempt (1000).
    failed = sum(len(b.paths) for b in batches if b.partition == 0 and 1000 in b.values[b.columns.index("amount")])
    result = last_write_result(feed_id)
    assert result is not None and (result.rows, result.discarded) == (ROWS, failed), result
    per = ROWS // 2 // 20  # rows of each partition per account, in each run
    expected = {f"/user/accounts/a{a}": tries * (per * 1 + per * 1000) for a in range(20)}
    got = settled(bridged, expected)
    later_marker(sink, bridged, 20, f"{feed_id}-marker")
    after = settled(bridged, {p: t + 1 for p, t in expected.items()})
    assert sums(got) == expected and sums(after) == {p: t + 1 for p, t in expected.items()}
    assert sum(b.repeated for b in after.values()) == 0


# ---- the protocol at the bridge: two attempts of one partition (a speculative copy), a zombie ----------


def stage(system, probe, feed_id: str, attempt: str, batch_no: int, amounts: list[int], first_txid: int):
    """Stage one batch of deposits to account a0 under `attempt`; the BatchAccepted."""
    paths = ["/user/accounts/a0"] * len(amounts)
    values = [paths, amounts, list(range(first_txid, first_txid + len(amounts)))]
    system.tell(BRIDGE_PATH, IngestBatch(feed_id, 0, batch_no, paths, values, probe.path,
                                         ("destination", "amount", "txid"), attempt=attempt))
    reply = probe.receive(10)
    assert isinstance(reply, BatchAccepted)
    return reply


class SnapshotEveryBatch(SparkBridge):
    """A bridge that snapshots after every stored batch: staged and released state must survive in snapshots."""

    snapshot_every = 1


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bridge", [SparkBridge, SnapshotEveryBatch])
def test_the_release_delivers_the_winning_attempt_only_and_survives_a_bridge_restart(base, make_system, journal,
                                                                                     bridge):
    system = make_system(base, journal=journal, snapshot_store=journal)
    system.spawn(Account, path="/user/accounts", entities=True)
    system.system_actor_of(bridge, path=BRIDGE_PATH)
    probe = system.probe("driver")
    # Two attempts of partition 0 (the original and a speculative copy) staged different rows.
    assert stage(system, probe, "spec", "run1/7", 0, [5, 5], 0).duplicates == 0
    stage(system, probe, "spec", "run1/9", 0, [100, 100, 100], 0)
    stage(system, probe, "spec", "run1/9", 1, [100], 3)
    system.stop(BRIDGE_PATH)  # restarted with both attempts staged, not released
    system.system_actor_of(bridge, path=BRIDGE_PATH)
    assert stage(system, probe, "spec", "run1/9", 1, [100], 3).duplicates == 0  # a resend: known, not again
    system.tell(BRIDGE_PATH, Release("spec", "run1", [[0, "run1/9"]], probe.path, processed=True))
    assert probe.receive(10) == FeedReleased("spec", "run1", 2)  # attempt 7's two rows were discarded
    assert probe.receive(10) == FeedProcessed("spec")
    balance = system.ask("/user/accounts/a0", GetBalance(), timeout=10)
    assert (balance.total, balance.applied) == (400, 4)
    # A zombie attempt and a rerun after the release: duplicates, nothing stored or delivered.
    assert stage(system, probe, "spec", "run1/7", 1, [5], 9).duplicates == 1
    assert stage(system, probe, "spec", "run2/3", 0, [7, 7], 20).duplicates == 2
    system.stop(BRIDGE_PATH)
    system.system_actor_of(bridge, path=BRIDGE_PATH)  # recovers staging and release from its journal (or snapshot)
    system.tell(BRIDGE_PATH, Release("spec", "run1", [[0, "run1/9"]], probe.path))
    # A repeat: answered with the original's counts (attempt 7's two rows), nothing delivered again.
    assert probe.receive(10) == FeedReleased("spec", "run1", 2)
    assert stage(system, probe, "spec", "run3/1", 0, [7], 30).duplicates == 1
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(400, 4, 0)
    progress = system.ask(BRIDGE_PATH, GetFeedProgress("spec"), timeout=10)
    assert (progress.accepted, progress.processed) == (4, 4)  # the discarded attempt's rows are not counted
    if bridge is SnapshotEveryBatch:
        with open_snapshot_store(journal) as snapshots:
            assert snapshots.load(PERSISTENCE_ID, SnapshotSelectionCriteria.LATEST) is not None


@pytest.mark.timeout(60)
def test_an_aborted_run_is_discarded_and_its_feed_id_can_run_again(system_with_journal):
    system, probe = system_with_journal
    stage(system, probe, "retry-me", "runA/1", 0, [50], 0)
    system.tell(BRIDGE_PATH, Discard("retry-me", "runA", probe.path))
    assert probe.receive(10) == Discarded("retry-me", "runA")
    assert stage(system, probe, "retry-me", "runA/2", 0, [50], 0).duplicates == 1  # a zombie of the aborted run
    stage(system, probe, "retry-me", "runB/1", 0, [3], 0)
    system.tell(BRIDGE_PATH, Release("retry-me", "runB", [[0, "runB/1"]], probe.path, processed=True))
    assert probe.receive(10) == FeedReleased("retry-me", "runB", 0)
    assert probe.receive(10) == FeedProcessed("retry-me")
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(3, 1, 0)


@pytest.mark.timeout(60)
def test_two_runs_of_one_feed_id_at_once_deliver_a_partition_once(system_with_journal):
    system, probe = system_with_journal
    stage(system, probe, "twice", "runA/1", 0, [10], 0)
    stage(system, probe, "twice", "runB/1", 0, [10], 0)  # the same partition, staged by a concurrent rerun
    system.tell(BRIDGE_PATH, Release("twice", "runA", [[0, "runA/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("twice", "runA", 0)
    system.tell(BRIDGE_PATH, Release("twice", "runB", [[0, "runB/1"]], probe.path, processed=True))
    assert probe.receive(10) == FeedReleased("twice", "runB", 1)  # runB's rows: discarded, partition 0 was done
    assert probe.receive(10) == FeedProcessed("twice")
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(10, 1, 0)


def stage_partition(system, probe, feed_id: str, attempt: str, partition: int, txids: list[int]) -> BatchAccepted:
    """Stage batch 0 of `partition` (deposits of 1 to account a0, one per txid) under `attempt`."""
    paths = ["/user/accounts/a0"] * len(txids)
    system.tell(BRIDGE_PATH, IngestBatch(feed_id, partition, 0, paths, [paths, [1] * len(txids), txids], probe.path,
                                         ("destination", "amount", "txid"), attempt=attempt))
    reply = probe.receive(10)
    assert isinstance(reply, BatchAccepted)
    return reply


@pytest.mark.timeout(60)
def test_a_micro_batch_replayed_in_other_partitions_delivers_nothing_again(system_with_journal):
    # Spark replays an uncommitted micro-batch with the same rows, but a restart on more cores may split them into
    # more partitions: those were new partition numbers to the bridge, and their rows were delivered again.
    system, probe = system_with_journal
    stage_partition(system, probe, "query/7", "runA/1", 0, [1, 2, 3, 4])
    system.tell(BRIDGE_PATH, Release("query/7", "runA", [[0, "runA/1"]], probe.path))
    assert probe.receive(10) == FeedReleased("query/7", "runA", 0)
    # The replay: the same four rows in three partitions (partition 0 is known at once: not even stored).
    assert stage_partition(system, probe, "query/7", "runB/1", 0, [1, 2]).duplicates == 2
    stage_partition(system, probe, "query/7", "runB/2", 1, [3])
    stage_partition(system, probe, "query/7", "runB/3", 2, [4])
    system.tell(BRIDGE_PATH, Release("query/7", "runB", [[0, "runB/1"], [1, "runB/2"], [2, "runB/3"]], probe.path,
                                     processed=True))
    assert probe.receive(10) == FeedReleased("query/7", "runB", 2)
    assert probe.receive(10) == FeedProcessed("query/7")
    # A multi-bridge replay asks the coordinator first: every partition of a micro-batch decided before is left out.
    system.tell(BRIDGE_PATH, Coordinate("query/8", "runA", [[0, "runA/1", BRIDGE_PATH]], False, probe.path))
    assert probe.receive(10).winners == [[0, "runA/1", BRIDGE_PATH]]
    system.tell(BRIDGE_PATH, Coordinate("query/8", "runB", [[0, "runB/1", BRIDGE_PATH], [1, "runB/2", BRIDGE_PATH]],
                                        False, probe.path))
    plan = probe.receive(10)
    assert (plan.winners, [p for p, _, _ in plan.excluded]) == ([], [0, 1])
    assert system.ask("/user/accounts/a0", GetBalance(), timeout=10) == Balance(4, 4, 0)


@pytest.fixture
def system_with_journal(base, make_system, tmp_path):
    """A system on `base` with a SQLite journal, accounts and the bridge; and a probe for the driver's side."""
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    start_bridge(system)
    return system, system.probe("driver")


# ---- streaming --------------------------------------------------------------------------------------


@pytest.mark.timeout(180)
@pytest.mark.parametrize("ack", ["persisted", "processed"])
def test_stream_restarted_from_its_checkpoint_loses_and_repeats_nothing(sink, make_bridged, journal, tmp_path, ack):
    system = make_bridged(account=DurableAccount if ack == "processed" else Account, journal=journal)
    source, checkpoint = tmp_path / "in", str(tmp_path / "checkpoint")
    source.mkdir()
    batches = [by_account(sink, 300, accounts=10, partitions=1).selectExpr("account", "amount", f"txid + {i * 300} as txid")
               for i in range(2)]
    for i, b in enumerate(batches):
        (source / f"part-{i}.json").write_text("".join(json.dumps(r.asDict()) + "\n" for r in b.collect()))
    expected = expected_by_account(batches[0].unionByName(batches[1]))

    def run():
        stream = sink.readStream.schema("account int, amount long, txid long").option("maxFilesPerTrigger", 1) \
            .json(str(source))
        query = (stream.writeStream.format("reprise").option("port", str(system.admin_port))
                 .option("to", "/user/accounts/a{account}").option("ack", ack)
                 .option("checkpointLocation", checkpoint).trigger(availableNow=True).start())
        query.awaitTermination(120)
        assert query.exception() is None, query.exception()
        return query

    first = run()
    stored = len(staged(journal))
    assert stored == 2  # one batch per micro-batch
    assert {b.feed_id for b in staged(journal)} == {f"{first.id}/0", f"{first.id}/1"}
    micro_batch = last_write_result(f"{first.id}/1")
    assert micro_batch is not None and (micro_batch.rows, micro_batch.duplicates_skipped) == (300, 0)
    commits = tmp_path / "checkpoint" / "commits"
    for name in ("1", ".1.crc"):  # forget that micro-batch 1 was committed: it is replayed, same id, same data
        (commits / name).unlink(missing_ok=True)
    replayed = run()
    assert replayed.id == first.id
    assert [(p["batchId"], p["numInputRows"]) for p in replayed.recentProgress if p["numInputRows"]] == [(1, 300)]
    assert len(staged(journal)) == stored
    replayed_batch = last_write_result(f"{first.id}/1")
    assert replayed_batch is not micro_batch and replayed_batch.duplicates_skipped == 300  # type: ignore[union-attr]
    got = settled(system, expected)
    assert sums(got) == expected and sum(b.applied for b in got.values()) == 600
    assert sum(b.repeated for b in got.values()) == 0


def _two_files(source: Path, rows: int, null_last: bool = False) -> None:
    """Files part-0 and part-1 (one micro-batch, two partitions) of `rows` deposits each; part-1's rows are
    `slow`, and with `null_last` its last row has no account (its path cannot be made: the task fails)."""
    source.mkdir()
    for p in range(2):
        lines = []
        for i in range(rows):
            account = None if null_last and p == 1 and i == rows - 1 else i % 5
            lines.append(json.dumps({"account": account, "amount": 1, "txid": p * 1000 + i, "slow": p}) + "\n")
        (source / f"part-{p}.json").write_text("".join(lines))


def _paced_stream(sink, source: Path, seconds_a_slow_row: float):
    from pyspark.sql.functions import udf

    @udf("long")
    def pace(slow):
        if slow:
            time.sleep(seconds_a_slow_row)
        return slow

    return sink.readStream.schema("account int, amount long, txid long, slow long").json(str(source)) \
        .withColumn("slow", pace("slow"))


@pytest.mark.timeout(120)
def test_a_micro_batch_whose_run_was_discarded_while_it_ran_fails_instead_of_committing_nothing(
        sink, make_bridged, tmp_path):
    # Spark makes a new stream writer (so a new run id) for a micro-batch's commit: its Release named a run the
    # bridge had never discarded, the bridge answered "released" for batches already gone, and the query went on
    # with every row of the micro-batch lost.
    system = make_bridged(account=DurableAccount)
    source = tmp_path / "in"
    _two_files(source, 40)
    query = (_paced_stream(sink, source, 0.25).writeStream.format("reprise").option("port", str(system.admin_port))
             .option("to", "/user/accounts/a{account}").option("feed_id", "paced")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    runs = wait_for(lambda: [r for r in staged_runs(system) if r.feed_id == "paced/0"], timeout=60, interval=0.1)
    assert discard_staged(system, "paced/0", runs[0].run)  # (the operator's `reprise spark discard`)
    with pytest.raises(Exception, match="was discarded by the bridge"):
        query.awaitTermination(90)
    assert not (tmp_path / "checkpoint" / "commits" / "0").exists(), "the micro-batch must not be committed"


@pytest.mark.timeout(120)
def test_an_aborted_micro_batch_discards_what_its_tasks_staged(sink, make_bridged, tmp_path):
    # The abort's Discard named the new writer's run, not the tasks': their batches stayed staged (listed by
    # `reprise spark staged`, holding the bridge's journal pruning back) until staged_ttl, a day later.
    system = make_bridged(account=DurableAccount)
    source = tmp_path / "in"
    _two_files(source, 20, null_last=True)
    query = (_paced_stream(sink, source, 0.05).writeStream.format("reprise").option("port", str(system.admin_port))
             .option("to", "/user/accounts/a{account}").option("feed_id", "aborted")
             .option("checkpointLocation", str(tmp_path / "checkpoint")).trigger(availableNow=True).start())
    with pytest.raises(Exception, match="InvalidPath"):
        query.awaitTermination(90)
    wait_for(lambda: not [r for r in staged_runs(system) if r.feed_id == "aborted/0"], timeout=30, interval=0.2)
    assert all(b.total == 0 for b in balances(system, [f"/user/accounts/a{a}" for a in range(5)]).values())


# ---- bad options ------------------------------------------------------------------------------------


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("options", "match"), [
    ({"colour": "red"}, "unknown option 'colour'; the options are port, host, to"),
    ({"port": ""}, 'option "port" is required'),
    ({"port": "x"}, 'option "port" must be an integer'),
    ({"ack": "eventually"}, 'option "ack" must be one of'),
    ({"batch_size": "0"}, 'option "batch_size" must be an integer >= 1'),
    ({"window": "many"}, 'option "window" must be an integer >= 1'),
    ({"timeout": "-1"}, 'option "timeout" must be a finite number of seconds'),
    ({"timeout": "inf"}, 'option "timeout" must be a finite number of seconds'),  # (ack="processed" hung forever)
    ({"to": "/user/accounts/*"}, "contains a wildcard"),  # (it sent nothing and said so: rows=0)
    ({"to": "/user/accounts/{account}/"}, "no empty segments"),
    ({"to": "nowhere"}, "to='nowhere' is not a column"),
    ({"to": "/user/accounts/{nobody}"}, r"placeholder \{nobody\} is not a column"),
    ({"to": "/user/accounts/{account"}, "path template"),
    ({"key": "nokey"}, "option \"key\": 'nokey' is not a column"),
    ({"feed_id": ""}, 'option "feed_id" must not be empty'),
    ({"feed_id": "orders/0"}, "option \"feed_id\": feed_id 'orders/0' has a '/': the feeds of a stream's micro-batches"),
    ({"to": "account"}, "to='account' names a column of type int, not string"),
])
def test_bad_options_fail_the_write_naming_the_option(sink, bridged, options, match):
    df = by_account(sink, 10)
    args = {"port": bridged.admin_port, "to": "/user/accounts/a{account}"} | options
    port = args.pop("port")
    with pytest.raises(Exception, match=match):
        writer = df.write.format("reprise").mode("append").option("port", str(port))
        for name, value in args.items():
            writer = writer.option(name, value)
        writer.save()


@pytest.mark.timeout(60)
def test_mode_overwrite_is_refused_instead_of_taken_as_append(sink, bridged):
    # Rows were sent to their actors as with append: "overwrite" said yes to what cannot be done.
    df = by_account(sink, 10)
    with pytest.raises(Exception, match='mode\\("overwrite"\\) is not supported: each row is sent to its actor, nothing '
                                        'is replaced; use .mode\\("append"\\)'):
        df.write.format("reprise").mode("overwrite").option("port", str(bridged.admin_port)) \
            .option("to", "/user/accounts/a{account}").save()
    assert bridged.ask("/user/accounts/a0", GetBalance()).total == 0


@pytest.mark.timeout(60)
def test_unreachable_system_and_missing_bridge_fail_the_write_saying_how_to_start(sink, make_system):
    df = by_account(sink, 10)
    with pytest.raises(Exception, match="no actor system listens"):
        write(df, actors.free_port(), to="/user/accounts/a{account}")
    system = make_system("multiproc")
    with pytest.raises(Exception, match="start_bridge"):
        write(df, system.admin_port, to="/user/accounts/a{account}")


@pytest.mark.timeout(60)
def test_bad_options_fail_a_stream_at_start(sink, bridged, tmp_path):
    stream = sink.readStream.format("rate").load().selectExpr("cast(value as int) as account")
    with pytest.raises(Exception, match='option "ack" must be one of'):
        run_briefly(stream.writeStream.format("reprise").option("ack", "never"), bridged, tmp_path)


def run_briefly(writer, system, tmp_path) -> None:
    """Start `writer` into `system`'s accounts and wait up to 30 s; what failed it (at start or in a batch) raises."""
    query = (writer.option("port", str(system.admin_port)).option("to", "/user/accounts/a{account}")
             .option("checkpointLocation", str(tmp_path / "cp")).start())
    try:
        query.awaitTermination(30)
        if query.exception() is not None:
            raise RuntimeError(str(query.exception()))
    finally:
        query.stop()


@pytest.mark.timeout(60)
def test_a_stream_in_complete_output_mode_is_refused_at_start(sink, bridged, tmp_path):
    # Each micro-batch sent the whole result table to the actors again (30 deposited where 15 were).
    from pyspark.sql.functions import col

    stream = sink.readStream.format("rate").load().groupBy((col("value") % 2).alias("account")).count()
    with pytest.raises(Exception, match=r'outputMode\("complete"\) is not supported'):
        run_briefly(stream.writeStream.format("reprise").outputMode("complete"), bridged, tmp_path)


@pytest.mark.timeout(60)
def test_a_template_without_placeholders_sends_every_row_to_that_one_actor(sink, make_bridged):
    # It rendered no path at all: the feed sent nothing and reported rows=0, even with ack="processed".
    system = make_bridged(account=DurableAccount)
    df = sink.range(0, 10, numPartitions=2).selectExpr("cast(1 as long) as amount", "id as txid")
    assert feed(df, system, to="/user/accounts/7", ack="processed", feed_id="one-actor", progress=False).rows == 10
    write(df, system.admin_port, to="/user/accounts/8", ack="processed", feed_id="one-actor-save")
    got = balances(system, ["/user/accounts/7", "/user/accounts/8"])
    assert [(b.total, b.applied) for b in got.values()] == [(10, 10), (10, 10)]


@pytest.mark.timeout(90)
def test_a_write_from_a_new_thread_finds_the_sink_once_register_ran_there(sink, make_bridged):
    # A new thread's JVM thread has no active session, where Spark looks Python data sources up: its save() failed
    # with DATA_SOURCE_NOT_FOUND: reprise, registered or not, and nothing said why.
    system = make_bridged(account=DurableAccount)
    df = sink.range(0, 10, numPartitions=2).selectExpr("cast(1 as long) as amount", "id as txid")
    failures: list[BaseException] = []

    def in_thread() -> None:
        try:
            register(sink)
            write(df, system.admin_port, to="/user/accounts/9", ack="processed", feed_id=unique("thread"))
        except BaseException as e:  # noqa: BLE001 - handed to the test's thread
            failures.append(e)
    thread = threading.Thread(target=in_thread)
    thread.start()
    thread.join(80)
    assert not thread.is_alive() and not failures, failures
    assert system.ask("/user/accounts/9", GetBalance(), timeout=10).total == 10


@pytest.mark.timeout(90)
def test_a_null_key_fails_the_feed_naming_the_column(sink, make_bridged):
    # Rows with a null key were one key: all but the first were skipped as duplicates, silently.
    system = make_bridged(account=DurableAccount)
    df = sink.createDataFrame([(1, 10, None), (2, 20, None), (3, 30, "k3")], "account int, amount long, order_id string")
    with pytest.raises(Exception, match="key='order_id': the column is null in a row"):
        feed(df, system, to="/user/accounts/a{account}", key="order_id", feed_id="null-keys", progress=False)
    assert all(b.total == 0 for b in balances(system, [f"/user/accounts/a{a}" for a in (1, 2, 3)]).values())


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("kwargs", "match"), [
    ({"batch_size": 0}, "batch_size must be an int >= 1"),
    ({"window": -1}, "window must be an int >= 1"),
    ({"to": "nocolumn"}, "to='nocolumn' is not a column"),
    ({"feed_id": ""}, "feed_id must be a non-empty string"),
    ({"checkpoint": None}, "checkpoint must be"),  # (a query without one cannot resume: its restart numbers from 0)
])
def test_feed_stream_refuses_bad_arguments_before_the_query_starts(sink, bridged, tmp_path, kwargs, match):
    # Only ack and timeout were checked at the call: the others started the query, made its checkpoint and failed
    # in micro-batch 0; feed_id="" named every micro-batch "/N", shared with every other query fed so.
    stream = sink.readStream.format("rate").load().selectExpr("cast(value as int) as account", "value as txid")
    args = {"feed_id": "checked", "checkpoint": str(tmp_path / "cp"), "to": "/user/accounts/a{account}", **kwargs}
    with pytest.raises(ValueError, match=match):
        feed_stream(stream, bridged, **args)
    assert not (tmp_path / "cp").exists()


@pytest.mark.timeout(60)
def test_feed_and_feed_stream_refuse_a_frame_of_the_wrong_kind_naming_the_one_to_use(sink, bridged, tmp_path):
    # feed([...]) raised "AttributeError: 'list' object has no attribute 'columns'"; feed(a streaming frame) Spark's
    # "Queries with streaming sources must be executed with writeStream.start()"; neither named feed_stream.
    batch = by_account(sink, 10)
    stream = sink.readStream.format("rate").load().selectExpr("cast(value as int) as account", "value as txid")
    with pytest.raises(TypeError, match="df must be a pyspark DataFrame, got a list"):
        feed([1, 2], bridged, to="/user/accounts/a{account}")
    with pytest.raises(ValueError, match=r"a streaming DataFrame: feed it with spark_bridge.feed_stream\("):
        feed(stream, bridged, to="/user/accounts/a{account}")
    with pytest.raises(ValueError, match=r"not a streaming DataFrame: feed it with spark_bridge.feed\("):
        feed_stream(batch, bridged, feed_id="kind", checkpoint=str(tmp_path / "cp"), to="/user/accounts/a{account}")
    assert not (tmp_path / "cp").exists()


@pytest.mark.timeout(60)
def test_a_column_msgpack_cannot_carry_fails_the_write_naming_it(sink, bridged):
    df = by_account(sink, 10).selectExpr("*", "current_date() as day")
    with pytest.raises(Exception, match="column 'day' has type date, which msgpack cannot carry; cast it"):
        write(df, bridged.admin_port, to="/user/accounts/a{account}")


@pytest.mark.timeout(60)
def test_feed_accepts_a_path_template_and_logs_and_keeps_its_result(spark, bridged, caplog):
    from spark_bridge import feed

    df = by_account(spark, 500, accounts=10)
    feed_id = unique("templated")
    with caplog.at_level(logging.INFO, logger="spark_bridge"):
        result = feed(df, system=bridged.admin_port, to="/user/accounts/a{account}", feed_id=feed_id)
    assert result.rows == 500 and last_write_result(feed_id) == result
    assert [r.getMessage() for r in caplog.records if r.name == "spark_bridge"] == [
        f"feed {feed_id!r} committed: 500 rows, 0 duplicates skipped, 0 dead-lettered, 0 of other attempts "
        f"discarded, in {result.seconds:.2f} s ({result.rows_per_second:.0f} rows/s)"]
    got = settled(bridged, expected_by_account(df))
    assert sums(got) == expected_by_account(df)


# ---- last_write_result's store ------------------------------------------------------------------------


def test_the_results_kept_are_the_newest_and_a_full_store_never_drops_the_one_just_written(tmp_path, monkeypatch):
    from spark_bridge import FeedResult
    from spark_bridge.feed import RESULTS_DIR, _remember

    monkeypatch.setenv(RESULTS_DIR, str(tmp_path / "results"))
    monkeypatch.setattr(importlib.import_module("spark_bridge.feed"), "KEPT_RESULTS", 3)  # (spark_bridge.feed: the function)
    results = [FeedResult(n, 0, 0, 1.0, float(n), feed_id=f"f/{n}") for n in range(6)]
    for result in results:  # in one clock tick or a few: ties in mtime
        _remember(result)
        assert last_write_result(result.feed_id) == result
    assert len(list((tmp_path / "results").iterdir())) == 3
    assert last_write_result("f/0") is None and last_write_result("never") is None


def test_a_result_file_left_half_written_by_a_killed_writer_is_removed_once_stale(tmp_path, monkeypatch):
    # A commit killed between writing its result's temporary file and renaming it left a .partial for good: one per
    # such crash, never pruned (only .json files counted). A fresh one may be another writer's, still at it.
    from spark_bridge import FeedResult
    from spark_bridge.feed import PARTIAL_STALE, RESULTS_DIR, _remember

    monkeypatch.setenv(RESULTS_DIR, str(tmp_path / "results"))
    _remember(FeedResult(1, 0, 0, 1.0, 1.0, feed_id="first"))
    stale, fresh = tmp_path / "results" / "tmpold.partial", tmp_path / "results" / "tmpnew.partial"
    stale.write_text('{"rows": ')
    fresh.write_text('{"rows": ')
    old = time.time() - PARTIAL_STALE - 60
    os.utime(stale, (old, old))
    _remember(FeedResult(2, 0, 0, 1.0, 2.0, feed_id="second"))
    assert not stale.exists() and fresh.exists()
    assert last_write_result("first").rows == 1 and last_write_result("second").rows == 2


def test_a_results_directory_of_another_user_is_refused_and_does_not_fail_the_write(tmp_path, monkeypatch, caplog):
    from spark_bridge import FeedError, FeedResult
    from spark_bridge.feed import RESULTS_DIR, _remember

    monkeypatch.setenv(RESULTS_DIR, str(tmp_path))
    monkeypatch.setattr("os.getuid", lambda: 12345)  # (tmp_path is this user's, whoever runs the tests)
    with caplog.at_level(logging.WARNING, logger="spark_bridge"):
        _remember(FeedResult(1, 0, 0, 1.0, 1.0, feed_id="theirs"))  # the rows were released: no exception
    assert "its result cannot be kept for last_write_result" in caplog.text
    with pytest.raises(FeedError, match=f"belongs to another user: set {RESULTS_DIR} to a directory of yours"):
        last_write_result("theirs")


def test_a_symlink_at_the_default_results_directory_is_refused_and_nothing_is_written_through_it(tmp_path,
                                                                                               monkeypatch):
    # Another user could put a symlink at /tmp/reprise-spark-results-<uid> to any directory of ours: a committed
    # write then wrote its result there and pruned that directory's oldest .json files (it checked the owner of
    # what the link pointed to). The default directory must be a real directory.
    from spark_bridge import FeedError, FeedResult
    from spark_bridge.feed import RESULTS_DIR, _remember

    monkeypatch.delenv(RESULTS_DIR, raising=False)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "config.json").write_text("{}")
    (tmp_path / f"reprise-spark-results-{os.getuid()}").symlink_to(victim)
    _remember(FeedResult(1, 0, 0, 1.0, 1.0, feed_id="via-link"))  # (the rows were released: no exception)
    assert sorted(p.name for p in victim.iterdir()) == ["config.json"]
    with pytest.raises(FeedError, match="is a symbolic link"):
        last_write_result("via-link")


@pytest.mark.timeout(120)
@pytest.mark.parametrize(("how", "kind", "value"), [
    ("feed", "array<int>", [1]), ("save", "struct<a:int>", (1,)), ("feed", "map<string,int>", {"a": 1})])
def test_a_key_column_of_a_type_with_no_equality_is_refused_before_the_job(sink, make_bridged, how, kind, value):
    # An array, map or struct key arrives as a list or dict: the bridge could not hash it, crashed on the batch,
    # and no later feed of any kind was confirmed; the task only timed out, naming nothing.
    system = make_bridged(account=DurableAccount)
    df = sink.createDataFrame([(1, 10, value)], f"account int, amount long, k {kind}")
    # (feed raises the ValueError itself; save() gets it back from Spark's writer set-up, before any task)
    with pytest.raises(ValueError if how == "feed" else Exception, match=f"key='k' names a column of type {kind}"):
        if how == "feed":
            feed(df, system, to="/user/accounts/a{account}", key="k", feed_id=unique("k"), progress=False, timeout=5)
        else:
            write(df, system.admin_port, to="/user/accounts/a{account}", key="k", feed_id=unique("k"), timeout=5)
    good = sink.createDataFrame([(1, 10, "k1")], "account int, amount long, k string")
    result = feed(good, system, to="/user/accounts/a{account}", key="k", ack="processed", progress=False, timeout=20)
    assert result.rows == 1 and balances(system, ["/user/accounts/a1"])["/user/accounts/a1"].total == 10


@pytest.mark.timeout(90)
def test_a_nan_key_fails_the_feed_naming_the_column(sink, make_bridged):
    # NaN equals nothing, not even itself: the bridge never took a NaN key for one it had released, so a rerun
    # of the feed id delivered its rows again (and two NaN rows were two keys).
    system = make_bridged(account=DurableAccount)
    df = sink.createDataFrame([(1, 10, 1.5), (2, 20, float("nan"))], "account int, amount long, k double")
    with pytest.raises(Exception, match="key='k': the column is NaN in a row"):
        feed(df, system, to="/user/accounts/a{account}", key="k", feed_id=unique("nan"), progress=False)
    assert all(b.total == 0 for b in balances(system, ["/user/accounts/a1", "/user/accounts/a2"]).values())


def _registered_write(df, port: int, **options) -> None:
    """write(df, port, **options), called in a thread of its own (down_mid_way's): registers the sink there first,
    as the README says (Spark finds the sink through the thread's active session)."""
    register(df.sparkSession)
    write(df, port, **options)


@pytest.mark.timeout(300)
def test_a_write_whose_system_goes_down_while_staging_fails_saying_so_and_its_rerun_loses_and_repeats_nothing(
        sink, make_bridged):
    system = make_bridged(account=DurableAccount)
    cut = by_account(sink, 300_000, accounts=100).cache()
    expected = expected_by_account(cut)
    message = str(down_mid_way(system, "feed_rows", 12_000, _registered_write, cut, system.admin_port,
                               to="/user/accounts/a{account}", feed_id="cut", batch_size=500))
    assert f"FeedSystemDown: feed 'cut': the actor system on 127.0.0.1:{system.admin_port} went down while the " \
           "feed was staging its rows; none of its rows were released" in message, message
    assert """Start the system again (on the same journal) and run the write again with .option("feed_id", 'cut')""" \
        in message, message
    assert "start one first" not in message, message

    again = make_bridged(account=DurableAccount)  # the same journal: every acknowledged row is in it
    write(cut, again.admin_port, to="/user/accounts/a{account}", feed_id="cut", batch_size=5_000)
    result = last_write_result("cut")
    assert result is not None and (result.rows, result.duplicates_skipped) == (300_000, 0), result
    got = settled(again, expected, timeout=120)
    assert sums(got) == expected and sum(b.applied for b in got.values()) == 300_000  # none lost, none twice
    cut.unpersist()


def _task_outcome(plan):
    """What the sink's task (its writer's write) ended with in a Spark task of its own: "Type: message"."""
    from spark_bridge.sink import _BatchWriter

    def run(it):
        try:
            yield f"wrote: {_BatchWriter(plan).write(it)}"
        except Exception as exc:  # (returned, not raised: a retried attempt would meet another moment)
            yield f"{type(exc).__name__}: {exc}"

    return run


@pytest.mark.timeout(120)
def test_a_task_attaching_as_the_system_stops_reports_feed_system_down_naming_the_rerun(spark, tmp_path):
    # Its admin still took connections a moment while the run dir was gone with the secret (shutdown removes it
    # after a bounded wait for the port): the task's attach raised SecretUnavailable ("secret file .../secret does
    # not exist"), and so did the check whether the system was gone, so that error failed the write, saying
    # neither that the system went down nor to rerun it (CI: the "while_staging" test above, now and then).
    from pyspark.sql import Row

    from spark_bridge.feed import PathTemplate, make_plan
    from tests.actors.exiting_admin import exiting_admin

    with exiting_admin(str(tmp_path / "run"), hold=1.5) as (port, _):
        plan = make_plan("127.0.0.1", port, "cut", PathTemplate.parse("/user/accounts/a{account}"), None, None, 500,
                         4, 30.0, "accepted")
        rows = [Row(account=1, amount=5)]
        (outcome,) = spark.sparkContext.parallelize(rows, 1).mapPartitions(_task_outcome(plan)).collect()
    assert outcome.startswith("FeedSystemDown: feed 'cut': the actor system on "
                              f"127.0.0.1:{port} went down while the feed was staging its rows"), outcome
    assert """run the write again with .option("feed_id", 'cut')""" in outcome, outcome


@pytest.mark.timeout(300)
def test_a_write_whose_system_goes_down_after_its_release_says_so_and_its_rerun_delivers_nothing_twice(
        sink, make_bridged):
    system = make_bridged(account=DurableAccount)
    df = by_account(sink, 60_000, accounts=100).cache()
    expected = expected_by_account(df)
    message = str(down_mid_way(system, "delivered", 1, _registered_write, df, system.admin_port,
                               to="/user/accounts/a{account}", feed_id="released", ack="processed", batch_size=2_000))
    assert "FeedSystemDown: feed 'released': the actor system on 127.0.0.1:" in message, message
    assert "went down while the feed was releasing its rows" in message, message
    assert """.option("feed_id", 'released')""" in message and "stopped while this client" not in message, message

    again = make_bridged(account=DurableAccount)
    write(df, again.admin_port, to="/user/accounts/a{account}", feed_id="released", ack="processed")
    result = last_write_result("released")
    assert result is not None and (result.rows, result.duplicates_skipped) == (60_000, 60_000), result
    got = settled(again, expected, timeout=120)
    assert sums(got) == expected and sum(b.applied for b in got.values()) == 60_000
    df.unpersist()

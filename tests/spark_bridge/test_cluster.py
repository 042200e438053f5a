"""Real speculative attempts on a real Spark standalone cluster (a master and 2 one-core workers, each on its own
loopback address), against the sink and the source.

Local mode never speculates, and a speculative copy is never placed on a host that already runs an attempt of
its task: hence two workers on two addresses. The driver runs as a subprocess (tests/spark_bridge/cluster_job.py)
because this process already holds the session's local SparkContext; one driver (a DriverServer) runs the
module's jobs in turn, so executors start once. Partition 0's first attempt straggles (stalls after some rows);
the scheduler launches a copy on the other worker, which wins. Last, the worker running the straggler is
SIGKILLed (its executor and Python workers with it) while partition 1 is held (so no copy is launched), and the
task is retried on the other worker. The module's cluster is started once; every JVM it started is gone
afterwards.
"""

from __future__ import annotations

import pytest

from journal import AtomicWrite, PersistentRepr, open_journal
from spark_bridge import BRIDGE_PATH, GetFeedProgress, SessionError, cluster_session
from tests.spark_bridge.sample import DurableAccount, GetBalance
from tests.spark_bridge.standalone import REQUIRE, DriverServer, attempts, start_or_skip, worker_of
from tests.spark_bridge.test_feed import balances, sums
from tests.spark_bridge.test_sink import staged
from tests.waiting import wait_for

pytestmark = [pytest.mark.spark, pytest.mark.multiproc]


def test_cluster_session_refuses_what_is_not_a_standalone_master_url() -> None:
    with pytest.raises(SessionError, match=r"spark://host:port, got 'local\[2\]' \(for local mode use local_session\)"):
        cluster_session("local[2]", "not-a-cluster")


def test_cluster_session_refuses_a_second_master_in_a_process_running_a_local_context(spark) -> None:
    with pytest.raises(SessionError, match=r"already runs a SparkContext on 'local\[2,3\]'; stop it first"):
        cluster_session("spark://127.0.0.1:7077", "a-second-context")


@pytest.fixture(scope="module")
def standalone(tmp_path_factory):
    """A master and two workers (127.0.0.2, 127.0.0.3) for the module; every JVM is killed afterwards."""
    started = start_or_skip(tmp_path_factory.mktemp("standalone"))
    yield started
    parts = ", ".join(f"{role} {mb:.0f}" for role, mb in started.peak_jvms)
    print(f"\nstandalone cluster: peak resident memory of its JVMs {started.peak_jvm_mb:.0f} MiB ({parts})")
    started.stop()
    assert started.survivors() == [], "processes of the standalone cluster outlived stop()"


@pytest.fixture
def cluster(standalone):
    """The module's cluster with both workers alive: a test that killed one leaves its restart to the next user."""
    for host in standalone.hosts:
        if standalone.daemons[f"worker-{host}"].poll() is not None:
            standalone.restart_worker(host)
    return standalone


@pytest.fixture(scope="module")
def speculating(standalone):
    """One driver with speculation on for the module's jobs (started at the first, stopped after)."""
    server = DriverServer(standalone, "driver-speculating")
    yield server
    server.close()


@pytest.mark.parametrize("required", [False, True])
def test_a_cluster_that_cannot_start_skips_loudly_or_fails_when_required(tmp_path, monkeypatch, required) -> None:
    monkeypatch.setenv(REQUIRE, "1" if required else "0")
    with pytest.raises(pytest.fail.Exception if required else pytest.skip.Exception,
                       match=r"cannot bind 192\.0\.2\.123|no java|pyspark is not installed") as caught:
        start_or_skip(tmp_path, hosts=("192.0.2.123",))  # (TEST-NET-1: no interface has it)
    assert (REQUIRE in str(caught.value)) and ("SKIPPING" in str(caught.value)) != required


def speculated(markers) -> dict:
    """The attempts that ran, after checking that partition 0 got a speculative copy on the other worker."""
    ran = attempts(markers)
    assert (markers / "straggler-stalled").exists(), f"partition 0's first attempt never stalled: {sorted(ran)}"
    assert (0, 1) in ran, f"no speculative copy of partition 0 ran (attempts: {sorted(ran)})"
    assert worker_of(ran[0, 0]) != worker_of(ran[0, 1]), "the copy ran on the straggler's own host"
    assert {worker_of(a) for a in ran.values()} == {"127.0.0.2", "127.0.0.3"}
    return ran


@pytest.mark.timeout(170)
def test_a_speculative_copy_of_a_write_task_is_delivered_and_the_straggler_s_staged_rows_discarded(
        cluster, speculating, make_bridged, tmp_path):
    system = make_bridged(account=DurableAccount, ledger=True)
    markers = tmp_path / "markers"
    markers.mkdir()
    rows, accounts = 2_000, 20
    speculating.run({"job": "sink", "port": system.admin_port, "feed_id": "speculated", "rows": rows,
                     "journal": f"sqlite:///{tmp_path}/journal.db", "accounts": accounts, "stall_from": 750,
                     "stall_seconds": 60, "batch_size": 100, "markers": str(markers)}, timeout=120)
    speculated(markers)
    batches = staged(tmp_path)
    by_attempt: dict[str, list] = {}
    for b in batches:
        if b.partition == 0:
            by_attempt.setdefault(b.attempt, []).append(b)
    assert len(by_attempt) == 2, f"partition 0 was staged by {sorted(by_attempt)}: the straggler staged nothing"
    straggler = next(a for a, bs in by_attempt.items() if any(1000 in b.values[b.columns.index("amount")] for b in bs))
    assert 0 < sum(len(b.paths) for b in by_attempt[straggler]) < rows // 2  # it stalled part way
    # Only the winners count: partition 0's copy (amount 1 each), partition 1's first attempt (1000 each).
    per = rows // 2 // accounts  # deposits per account in each partition
    expected = {f"/user/accounts/a{a}": per * 1 + per * 1000 for a in range(accounts)}
    got = balances(system, expected)  # no waiting: save() returned once every row and follow-up was confirmed
    assert sums(got) == expected and sum(b.applied for b in got.values()) == rows
    assert sum(b.repeated for b in got.values()) == 0
    ledger = system.ask("/user/ledger", GetBalance(), timeout=10)
    assert (ledger.total, ledger.applied) == (sum(expected.values()), rows)
    progress = system.ask(BRIDGE_PATH, GetFeedProgress("speculated"), timeout=10)
    assert (progress.accepted, progress.processed) == (rows, rows)  # the straggler's rows are not counted


def fill(url: str, ids: int, events: int) -> None:
    """`ids` accounts with `events` tagged events each, and an untagged audit id."""
    from tests.spark_bridge.sample import Deposited

    with open_journal(url) as j:
        for n in range(ids):
            assert j.write_messages([AtomicWrite([PersistentRepr(Deposited(i), i, f"acc-{n}",
                                                                 tags=frozenset({"account"}))])
                                     for i in range(1, events + 1)]) == [None] * events
        j.write_messages([AtomicWrite([PersistentRepr(("login", i), i, "audit")]) for i in range(1, 4)])



@pytest.mark.timeout(170)
@pytest.mark.parametrize("journal_url", ["postgresql"], indirect=True)  # (SQLite's reads are checked in local mode)
def test_a_speculative_copy_of_a_read_task_gives_each_planned_event_exactly_once(cluster, speculating, journal_url,
                                                                                tmp_path):
    url = journal_url
    fill(url, ids=3, events=40)
    markers = tmp_path / "markers"
    markers.mkdir()
    result = speculating.run({"job": "source", "url": url, "markers": str(markers), "stall_after": 10,
                              "stall_seconds": 60}, timeout=120)
    speculated(markers)
    # The copy (launched as soon as partition 1 finished) read only after the straggler's late writes.
    assert float((markers / "straggler-stalled").read_text()) < float((markers / "reading-a1").read_text())
    keys = [tuple(r) for r in result["rows"]]
    assert len(keys) == len({k[0] for k in keys}) == 120  # count, distinct offsets
    with open_journal(url) as j:
        events = list(j.all_events())
    # The straggler wrote 5 tagged events while it ran: after planning, so in no partition of either attempt.
    assert sum(1 for e in events if e.persistence_id == "late") == 5
    assert sorted(keys) == [(e.offset, e.persistence_id, e.sequence_nr) for e in events
                            if "account" in e.tags and e.persistence_id != "late"]


@pytest.mark.timeout(170)
def test_a_write_task_whose_worker_is_killed_is_retried_on_the_other_worker_and_delivered_once(
        cluster, speculating, make_bridged, tmp_path):
    system = make_bridged(account=DurableAccount, ledger=True)
    markers = tmp_path / "markers"
    markers.mkdir()
    rows, accounts = 2_000, 20
    # On the speculating driver, partition 1 is held until the kill: no task finishes first, so no copy is launched.
    job = speculating.submit({"job": "sink", "port": system.admin_port, "feed_id": "killed", "rows": rows,
                              "accounts": accounts, "stall_from": 750, "stall_seconds": 60, "batch_size": 100,
                              "markers": str(markers), "hold": True})
    wait_for(lambda: (markers / "straggler-stalled").exists() and (markers / "p0-a0.json").exists(), 90, 0.1)
    wait_for(lambda: any(b.partition == 0 for b in staged(tmp_path)), 30, 0.1)  # its first rows are staged
    victim = worker_of(attempts(markers)[0, 0])
    cluster.kill_worker(victim)  # its executor JVM and Python workers with it: a host lost mid-write
    (markers / "released").touch()
    speculating.result(job, timeout=120)  # (the `cluster` fixture restarts the worker for a later test)
    ran = attempts(markers)
    assert (0, 1) in ran and worker_of(ran[0, 1]) != victim, f"partition 0 was not retried elsewhere: {ran}"
    assert worker_of(ran[1, 0]) != victim and (1, 1) not in ran  # the held partition ran once, on the survivor
    assert len({b.attempt for b in staged(tmp_path) if b.partition == 0}) == 2  # the killed attempt's and the retry's
    per = rows // 2 // accounts  # deposits per account in each partition
    expected = {f"/user/accounts/a{a}": per * 1 + per * 1000 for a in range(accounts)}
    got = balances(system, expected)
    assert sums(got) == expected and sum(b.applied for b in got.values()) == rows
    assert sum(b.repeated for b in got.values()) == 0
    ledger = system.ask("/user/ledger", GetBalance(), timeout=10)
    assert (ledger.total, ledger.applied) == (sum(expected.values()), rows)

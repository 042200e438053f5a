"""Staged runs with a bridge per node: a node bridge asks the coordinator before its staged_ttl discards a run.

A driver that died after its Coordinate was decided but before its Release reached a node bridge: that bridge
releases the run itself (its rows are delivered once, a rerun of the feed id succeeds). A driver that died before
its Coordinate: the coordinator records the run abandoned first (its late Coordinate is refused), then the bridge
discards it. While the coordinator does not answer, nothing is discarded.

No Spark: a probe speaks the protocol (spark_bridge.messages) as tasks and a driver do, on one system whose own
node gets a node bridge (start_bridges(nodes=[node])). On both bases; the driver's code (commit_run) attaches by
admin port, so the tests of its FeedError run on multiprocTCPBase only.
"""

from __future__ import annotations

from typing import Any

import pytest

import actors
from journal import SnapshotSelectionCriteria, open_journal, open_snapshot_store
from spark_bridge import (
    BRIDGE_PATH,
    FeedError,
    SparkBridge,
    StagedRun,
    bridge_path,
    discard_staged,
    start_bridges,
)
from spark_bridge.bridge import PERSISTENCE_ID
from spark_bridge.feed import commit_run, make_plan
from spark_bridge.messages import (
    AttemptsDiscarded,
    AttemptsReleased,
    BatchAccepted,
    Coordinate,
    DiscardStaged,
    FeedReleased,
    GetStagedRuns,
    IngestBatch,
    Release,
    ReleasePlan,
    ReleaseRefused,
    RunAbandoned,
    StagedRuns,
)
from spark_bridge.staged import discard_or_release
from tests.spark_bridge.sample import Account, Balance, GetBalance
from tests.spark_bridge.test_staged import TTL, SnapshotEveryBatch, staged_system
from tests.spark_bridge.test_staged import restart_at as restart
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

def stage(system: actors.System, probe: actors.Probe, bridge: str, feed_id: str, attempt: str, partition: int,
          amounts: list[int], first_txid: int, account: str = "a0", batch_no: int = 0) -> BatchAccepted:
    """Stage one batch of deposits to `account` under `attempt` at `bridge` (as a task does); the BatchAccepted."""
    paths = [f"/user/accounts/{account}"] * len(amounts)
    values = [{"amount": a, "txid": t} for t, a in enumerate(amounts, first_txid)]
    system.tell(bridge, IngestBatch(feed_id, partition, batch_no, paths, values, probe.path, attempt=attempt))
    reply = probe.receive(10)
    assert isinstance(reply, BatchAccepted) and (reply.partition, reply.batch_no) == (partition, batch_no), reply
    return reply


def runs(system: actors.System, bridge: str) -> list[StagedRun]:
    reply = system.ask(bridge, GetStagedRuns(), timeout=10)
    assert isinstance(reply, StagedRuns)
    return reply.runs


def counters(system: actors.System, bridge: str) -> dict[str, int]:
    return system.status().hosts[bridge].counters


def coordinate(system: actors.System, probe: actors.Probe, feed_id: str, run: str, winners: list[list[Any]]) -> object:
    """The driver's Coordinate (unkeyed); the coordinator's reply."""
    system.tell(BRIDGE_PATH, Coordinate(feed_id, run, winners, False, probe.path))
    return probe.receive(10)


def release(system: actors.System, probe: actors.Probe, bridge: str, feed_id: str, run: str,
            winners: list[list[Any]]) -> object:
    """A planned Release, as the driver sends it to a node bridge; the bridge's reply."""
    system.tell(bridge, Release(feed_id, run, winners, probe.path, planned=True))
    return probe.receive(10)


def events(url: str, persistence_id: str) -> list[object]:
    with open_journal(f"{url}/journal.db") as j:
        return [e.event for e in j.events_by_persistence_id(persistence_id)]


def balance(system: actors.System, account: str = "a0") -> Balance:
    return system.ask(f"/user/accounts/{account}", GetBalance(), timeout=10)


@pytest.fixture
def bridged(base, make_system, tmp_path):
    """test_staged's system (system, probe, url) and its own node's name."""
    system, probe, url = staged_system(base, make_system, tmp_path)
    [node] = system.nodes()
    return system, probe, url, node


def test_a_decided_run_whose_driver_died_is_released_by_its_node_bridge_and_a_rerun_delivers_nothing_twice(bridged):
    system, probe, url, node = bridged
    nb = bridge_path(node)
    assert start_bridges(system, nodes=[node], staged_ttl=TTL) == [nb]
    stage(system, probe, nb, "f", "runA/1", 0, [1, 2], 0)
    stage(system, probe, nb, "f", "runA/2", 1, [3], 2, account="a1")
    plan = coordinate(system, probe, "f", "runA", [[0, "runA/1", nb], [1, "runA/2", nb]])
    assert isinstance(plan, ReleasePlan) and len(plan.winners) == 2 and plan.excluded == []
    # The driver dies here: its Release never reaches the node bridge. After the TTL the bridge asks the
    # coordinator, learns the run was decided, and releases it itself.
    wait_for(lambda: runs(system, nb) == [], timeout=TTL * 10)
    assert wait_for(lambda: balance(system) == Balance(3, 2, 0) and balance(system, "a1") == Balance(3, 1, 0))
    c = counters(system, nb)
    assert c["staged_expired"] == 0 and c["staged_plan_asks"] >= 1
    [released] = [e for e in events(url, nb) if isinstance(e, AttemptsReleased)]
    assert (released.run, released.planned, released.winners) == ("runA", True, [[0, "runA/1"], [1, "runA/2"]])
    assert not [e for e in events(url, nb) if isinstance(e, AttemptsDiscarded)]

    # The slow driver's Release after all: a repeat. After a restart (replay) too.
    assert release(system, probe, nb, "f", "runA", [[0, "runA/1"], [1, "runA/2"]]) == FeedReleased("f", "runA", 0)
    restart(system, nb, staged_ttl=TTL)
    assert release(system, probe, nb, "f", "runA", [[0, "runA/1"], [1, "runA/2"]]) == FeedReleased("f", "runA", 0)
    # A rerun of the feed id: its batches are duplicates, the coordinator excludes the partitions and has it
    # resend runA's release (answered as a repeat): nothing is delivered twice, the rerun succeeds.
    assert stage(system, probe, nb, "f", "runB/1", 0, [1, 2], 0).duplicates == 2
    rerun = coordinate(system, probe, "f", "runB", [[0, "runB/1", nb], [1, "runB/1", nb]])
    assert isinstance(rerun, ReleasePlan) and rerun.winners == [] and len(rerun.excluded) == 2
    assert rerun.earlier == [["runA", nb, [[0, "runA/1"], [1, "runA/2"]]]]
    assert release(system, probe, nb, "f", "runB", []) == FeedReleased("f", "runB", 0)
    assert release(system, probe, nb, "f", "runA", rerun.earlier[0][2]) == FeedReleased("f", "runA", 0)
    assert runs(system, nb) == []
    assert balance(system) == Balance(3, 2, 0) and balance(system, "a1") == Balance(3, 1, 0)


def test_an_undecided_run_is_abandoned_at_the_coordinator_before_its_node_bridge_discards_it(bridged):
    system, probe, url, node = bridged
    nb = bridge_path(node)
    start_bridges(system, nodes=[node], staged_ttl=TTL)
    stage(system, probe, nb, "g", "runA/1", 0, [5, 6], 0)  # its driver dies before its Coordinate
    wait_for(lambda: runs(system, nb) == [], timeout=TTL * 10)
    [abandoned] = [e for e in events(url, PERSISTENCE_ID) if isinstance(e, RunAbandoned)]
    assert (abandoned.feed_id, abandoned.run, abandoned.bridge, abandoned.reason) == ("g", "runA", nb, "ttl")
    assert abandoned.idle_seconds >= TTL
    [discarded] = [e for e in events(url, nb) if isinstance(e, AttemptsDiscarded)]
    assert (discarded.feed_id, discarded.run, discarded.reason) == ("g", "runA", "ttl")
    assert counters(system, nb)["staged_expired"] == 1

    # The driver was merely slow: its Coordinate is refused (deciding it now would release nothing at nb).
    for _ in range(2):
        refused = coordinate(system, probe, "g", "runA", [[0, "runA/1", nb]])
        assert isinstance(refused, ReleaseRefused) and (refused.run, refused.reason, refused.bridge) == (
            "runA", "ttl", nb)
        assert "without staging activity" in refused.explain()
    # A rerun (a new run id) stages afresh and delivers every row once.
    stage(system, probe, nb, "g", "runB/1", 0, [5, 6], 0)
    plan = coordinate(system, probe, "g", "runB", [[0, "runB/1", nb]])
    assert isinstance(plan, ReleasePlan) and plan.winners == [[0, "runB/1", nb]] and plan.earlier == []
    assert release(system, probe, nb, "g", "runB", [[0, "runB/1"]]) == FeedReleased("g", "runB", 0)
    assert wait_for(lambda: balance(system) == Balance(11, 2, 0))


def test_nothing_is_discarded_while_the_coordinator_does_not_answer(bridged):
    system, probe, url, node = bridged
    nb = bridge_path(node)
    start_bridges(system, nodes=[node], staged_ttl=TTL)
    system.stop(BRIDGE_PATH)
    stage(system, probe, nb, "h", "runA/1", 0, [7], 0)
    # Idle past the TTL, asked again on every tick (several times), unanswered: still staged.
    wait_for(lambda: counters(system, nb)["staged_plan_asks"] >= 3, timeout=TTL * 20)
    [still] = runs(system, nb)
    assert (still.run, still.idle_seconds >= TTL) == ("runA", True)
    # An operator's discard waits for the coordinator too: it times out and discards nothing.
    with pytest.raises(actors.AskTimeout):
        system.ask(nb, DiscardStaged("h", "runA"), timeout=TTL)
    assert [r.run for r in runs(system, nb)] == ["runA"] and counters(system, nb)["staged_expired"] == 0
    assert not [e for e in events(url, nb) if isinstance(e, AttemptsDiscarded)]

    system.system_actor_of(SparkBridge, path=BRIDGE_PATH, kwargs={"staged_ttl": TTL})  # the coordinator is back
    wait_for(lambda: runs(system, nb) == [], timeout=TTL * 10)
    [discarded] = [e for e in events(url, nb) if isinstance(e, AttemptsDiscarded)]
    assert discarded.run == "runA" and discarded.reason == "operator"  # (the operator's ask, answered at last)
    assert [e.bridge for e in events(url, PERSISTENCE_ID) if isinstance(e, RunAbandoned)] == [nb]
    assert balance(system) == Balance(0, 0, 0)


def test_an_operators_discard_at_a_node_bridge_releases_a_decided_run_instead(bridged):
    system, probe, _, node = bridged
    nb = bridge_path(node)
    start_bridges(system, nodes=[node], staged_ttl=None)  # no TTL: only the operator discards
    stage(system, probe, nb, "k", "runA/1", 0, [4], 0)
    stage(system, probe, nb, "k2", "runZ/1", 0, [9], 0, account="a1")
    assert isinstance(coordinate(system, probe, "k", "runA", [[0, "runA/1", nb]]), ReleasePlan)
    discarded, released = discard_or_release(system, idle_for=0)  # (what `reprise spark discard` shows)
    assert [(r.feed_id, r.run) for r in discarded] == [("k2", "runZ")]
    assert [(r.feed_id, r.run) for r in released] == [("k", "runA")]
    assert runs(system, nb) == [] and discard_staged(system, idle_for=0) == []
    assert wait_for(lambda: balance(system) == Balance(4, 1, 0))
    assert balance(system, "a1") == Balance(0, 0, 0)
    refused = coordinate(system, probe, "k2", "runZ", [[0, "runZ/1", nb]])
    assert isinstance(refused, ReleaseRefused) and refused.reason == "operator"


def test_the_abandoned_run_survives_a_restart_of_the_coordinator_from_its_journal_and_from_a_snapshot(bridged):
    system, probe, url, node = bridged
    nb = bridge_path(node)
    start_bridges(system, nodes=[node], cls=SnapshotEveryBatch, staged_ttl=TTL)
    stage(system, probe, nb, "g", "runA/1", 0, [5], 0)
    wait_for(lambda: runs(system, nb) == [], timeout=TTL * 10)

    def refused() -> None:
        reply = coordinate(system, probe, "g", "runA", [[0, "runA/1", nb]])
        assert isinstance(reply, ReleaseRefused) and (reply.run, reply.reason, reply.bridge) == ("runA", "ttl", nb)

    restart(system, BRIDGE_PATH, SnapshotEveryBatch, staged_ttl=None)  # replayed from the journal
    refused()
    # A batch staged at the coordinator makes its next command save a snapshot holding the abandoned run.
    stage(system, probe, BRIDGE_PATH, "other", "runX/1", 0, [1], 0, account="a1")
    with open_journal(f"{url}/journal.db") as j:
        abandoned_at = next(e.sequence_nr for e in j.events_by_persistence_id(PERSISTENCE_ID)
                            if isinstance(e.event, RunAbandoned))

    def snapshot():
        runs(system, BRIDGE_PATH)
        with open_snapshot_store(f"{url}/snapshots.db") as store:
            s = store.load(PERSISTENCE_ID, SnapshotSelectionCriteria.LATEST)
        return s is not None and s.metadata.sequence_nr > abandoned_at and s
    taken = wait_for(snapshot)
    [[key, bridge, reason, idle]] = taken.snapshot.abandoned
    assert (key, bridge, reason, idle >= TTL) == ("g/runA", nb, "ttl", True)
    # Restored from the snapshot alone: the journal up to it is deleted while the coordinator is stopped.
    system.stop(BRIDGE_PATH)
    with open_journal(f"{url}/journal.db") as j:
        j.delete_messages_to(PERSISTENCE_ID, taken.metadata.sequence_nr)
        assert not [e for e in j.events_by_persistence_id(PERSISTENCE_ID) if isinstance(e.event, RunAbandoned)]
    system.system_actor_of(SnapshotEveryBatch, path=BRIDGE_PATH, kwargs={"staged_ttl": None})
    refused()
    assert [r.run for r in runs(system, BRIDGE_PATH)] == ["runX"]


@pytest.mark.multiproc
def test_the_driver_code_fails_a_late_coordinate_clearly_and_its_rerun_succeeds(make_system, tmp_path):
    """commit_run (what feed() and the sink run after the job) with a node bridge: a run abandoned before its
    Coordinate fails with a FeedError naming the feed and the run and saying to run it again; the rerun
    succeeds; a rerun of a run whose node bridge released it for its dead driver delivers nothing twice."""
    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/journal.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    [node] = system.nodes()
    nb = bridge_path(node)
    start_bridges(system, nodes=[node], staged_ttl=TTL)
    probe = system.probe("task")

    def plan(feed_id: str, ack: str = "processed") -> Any:
        return make_plan("127.0.0.1", system.admin_port, feed_id, "destination", None, None, 2000, 8, 10.0, ack)

    slow = plan("slow", "persisted")
    stage(system, probe, nb, "slow", f"{slow.run}/1", 0, [5, 6], 0)
    wait_for(lambda: runs(system, nb) == [], timeout=TTL * 10)  # abandoned and discarded before the commit
    with pytest.raises(FeedError) as caught:
        commit_run(slow, "slow", [(0, f"{slow.run}/1", 2, 0, 0, nb)], 0.0)
    text = str(caught.value)
    assert "feed 'slow'" in text and f"run {slow.run}" in text and "without staging activity" in text
    assert "Run the feed again with the same feed_id" in text and "a rerun is a new run" in text
    rerun = plan("slow")
    stage(system, probe, nb, "slow", f"{rerun.run}/1", 0, [5, 6], 0)
    result = commit_run(rerun, "slow", [(0, f"{rerun.run}/1", 2, 0, 0, nb)], 0.0)
    assert result.rows == 2 and result.duplicates_skipped == 0
    assert balance(system) == Balance(11, 2, 0)

    # Decided, then the driver died: the node bridge releases it; the rerun's commit succeeds, nothing twice.
    dead = plan("dead")
    stage(system, probe, nb, "dead", f"{dead.run}/1", 0, [3], 0, account="a1")
    assert isinstance(coordinate(system, probe, "dead", dead.run, [[0, f"{dead.run}/1", nb]]), ReleasePlan)
    assert wait_for(lambda: balance(system, "a1") == Balance(3, 1, 0), timeout=TTL * 10)
    again = plan("dead")
    assert stage(system, probe, nb, "dead", f"{again.run}/1", 0, [3], 0, account="a1").duplicates == 1
    result = commit_run(again, "dead", [(0, f"{again.run}/1", 1, 1, 0, nb)], 0.0)
    assert result.duplicates_skipped == 1
    assert balance(system, "a1") == Balance(3, 1, 0) and runs(system, nb) == []


def test_the_coordinator_releases_its_own_share_of_a_decided_run_and_refuses_a_run_it_discarded(bridged):
    """Tasks may stage at /system/spark-bridge too (a node without a bridge): the coordinator knows its plans,
    so its TTL releases its share of a decided run at once, and it refuses the Coordinate of a run it discarded."""
    system, probe, url, node = bridged
    nb = bridge_path(node)
    start_bridges(system, nodes=[node], staged_ttl=TTL)
    stage(system, probe, BRIDGE_PATH, "m", "runA/1", 0, [2], 0)
    stage(system, probe, nb, "m", "runA/2", 1, [3], 1, account="a1")
    plan = coordinate(system, probe, "m", "runA", [[0, "runA/1", BRIDGE_PATH], [1, "runA/2", nb]])
    assert isinstance(plan, ReleasePlan) and len(plan.winners) == 2  # ... and its driver dies
    wait_for(lambda: runs(system, BRIDGE_PATH) == [] and runs(system, nb) == [], timeout=TTL * 10)
    assert wait_for(lambda: balance(system) == Balance(2, 1, 0) and balance(system, "a1") == Balance(3, 1, 0))
    [mine] = [e for e in events(url, PERSISTENCE_ID) if isinstance(e, AttemptsReleased)]
    assert (mine.run, mine.planned, mine.winners) == ("runA", True, [[0, "runA/1"]])

    stage(system, probe, BRIDGE_PATH, "n", "runB/1", 0, [4], 0)  # never coordinated: discarded by the TTL
    wait_for(lambda: runs(system, BRIDGE_PATH) == [], timeout=TTL * 10)
    refused = coordinate(system, probe, "n", "runB", [[0, "runB/1", BRIDGE_PATH]])
    assert isinstance(refused, ReleaseRefused) and (refused.reason, refused.bridge) == ("ttl", BRIDGE_PATH)
    assert balance(system) == Balance(2, 1, 0)

"""One Spark bridge per node: executors stage at their own node's bridge, the coordinator releases each
partition of a feed id once across all bridges, and destinations get exact sums.

Three actor systems on this machine form one convention: the leader "alpha" and members "beta" and "gamma"
(own admin ports, one shared secret file), all on one PostgreSQL journal. `start_bridges` puts a bridge on
each node. A Spark standalone cluster's two workers (127.0.0.2, 127.0.0.3) get REPRISE_PORT = beta's and
gamma's admin port in their environment, so their executors attach to those nodes. The driver runs as a
subprocess (this process holds the session's local SparkContext): `python -m tests.spark_bridge.test_bridges
JSON` runs `main` below, which feeds what the test sends it (a DriverServer), one job after another, in one
application. Local-mode feeds name the executors' node with the Spark conf key spark.reprise.port.
"""

from __future__ import annotations

import dataclasses
import json
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import actors
from spark_bridge import BRIDGE_PATH, GetFeedProgress, SparkBridge, bridge_path, feed, start_bridges
from tests.conftest import start_system, stop_system
from tests.spark_bridge.journals import fresh_schema
from tests.spark_bridge.sample import DurableAccount, GetBalance, Ledger
from tests.spark_bridge.standalone import DriverServer, serve, start_or_skip
from tests.spark_bridge.test_feed import balances, sums

pytestmark = [pytest.mark.spark, pytest.mark.multiproc]

ROOT = str(Path(__file__).resolve().parents[2])
MODULE = "tests.spark_bridge.test_bridges"
NODES = ("alpha", "beta", "gamma")
ACCOUNTS = 12
ROWS = 2_000
WORKERS = {"127.0.0.2": "beta", "127.0.0.3": "gamma"}


class SampleBridge(SparkBridge):
    """The bridge, from a module that imports the sample's types: a restarted bridge replays the ledger's
    follow-ups (LedgerEntry) from its journal, so its process must know them."""


@dataclass
class Convention:
    """The leader and the members, by node name, and their journal."""

    systems: dict[str, actors.System]
    url: str

    @property
    def leader(self) -> actors.System:
        """The leader's system (node alpha): the feeds' `system=`."""
        return self.systems["alpha"]

    def feed_rows(self) -> dict[str, int]:
        """Rows each node's bridge took from feeds (its stats(), as `reprise status` shows them)."""
        hosts = self.leader.status().hosts
        return {node: hosts[bridge_path(node)].counters.get("feed_rows", 0) for node in NODES}


def expected_sums(rows: int, start: int = 0) -> dict[str, int]:
    """What each account holds after deposits `start .. start + rows - 1` (account id % 12, amount 1 + id % 3)."""
    out = {f"/user/accounts/a{a}": 0 for a in range(ACCOUNTS)}
    for i in range(start, start + rows):
        out[f"/user/accounts/a{i % ACCOUNTS}"] += 1 + i % 3
    return out


def deposits(spark: Any, rows: int, start: int = 0, partitions: int = 8) -> Any:
    """`rows` deposits with txids start.. in `partitions` partitions."""
    return spark.range(start, start + rows, numPartitions=partitions).selectExpr(
        f"cast(id % {ACCOUNTS} as int) as account", "id as txid", "cast(1 + id % 3 as long) as amount")


def fed(spark: Any, port: int, rows: int, feed_id: str, start: int = 0, key: str | None = None) -> dict[str, Any]:
    """feed() the deposits through the bridges with ack="processed"; the FeedResult as a dict."""
    result = feed(deposits(spark, rows, start), port, to="/user/accounts/a{account}", feed_id=feed_id,
                  ack="processed", batch_size=100, timeout=90, progress=False, key=key)
    return dataclasses.asdict(result)


def main(argv: list[str]) -> None:
    """The cluster's driver (a DriverServer's): feed each job's deposits; its result is the FeedResult as a dict."""
    from spark_bridge import cluster_session

    job = json.loads(argv[1])
    spark = cluster_session(job["master"], "reprise-bridges", import_paths=(ROOT,), **{"spark.locality.wait": "0s"})
    try:
        serve(Path(job["inbox"]), lambda each: fed(spark, each["port"], each["rows"], each["feed_id"]))
    finally:
        spark.stop()


@pytest.fixture(scope="module")
def convention(tmp_path_factory, postgres_url) -> Iterator[Convention]:
    """alpha (leader), beta, gamma on one PostgreSQL journal, durable accounts and a ledger, a bridge per node."""
    tmp = tmp_path_factory.mktemp("convention")
    schema = fresh_schema(postgres_url)
    url = next(schema)
    secret = str(tmp / "secret")
    started: list[actors.System] = []
    try:
        leader = start_system("multiproc", tmp, node="alpha", secret_file=secret, journal=url, snapshot_store=url)
        started.append(leader)
        systems = {"alpha": leader}
        for node in NODES[1:]:
            systems[node] = start_system("multiproc", tmp, leader=f"127.0.0.1:{leader.admin_port}", node=node,
                                         secret_file=secret, journal=url, snapshot_store=url)
            started.append(systems[node])
        leader.spawn(Ledger, path="/user/ledger")
        leader.spawn(DurableAccount, path="/user/accounts", entities=True, kwargs={"ledger": "/user/ledger"})
        assert start_bridges(leader, nodes=list(NODES), cls=SampleBridge) == [bridge_path(n) for n in NODES]
        yield Convention(systems, url)
    finally:
        for system in reversed(started):
            stop_system(system)
        next(schema, None)


@pytest.fixture(scope="module")
def cluster(convention, tmp_path_factory):
    """A master and two workers whose executors attach to beta and gamma (REPRISE_PORT); all JVMs killed after."""
    env = {host: {"REPRISE_PORT": str(convention.systems[node].admin_port)} for host, node in WORKERS.items()}
    started = start_or_skip(tmp_path_factory.mktemp("standalone"), worker_env=env)
    yield started
    started.stop()
    assert started.survivors() == [], "processes of the standalone cluster outlived stop()"


def check_balances(convention: Convention, expected: dict[str, int], applied: int) -> None:
    """Exact sums, each deposit applied once, and the ledger's follow-ups (one per deposit) exact too."""
    got = balances(convention.leader, expected)  # no waiting: ack="processed" returned once all was confirmed
    assert sums(got) == expected
    assert sum(b.applied for b in got.values()) == applied and sum(b.repeated for b in got.values()) == 0
    ledger = convention.leader.ask("/user/ledger", GetBalance(), timeout=10)
    assert (ledger.total, ledger.applied) == (sum(expected.values()), applied)


def progress(convention: Convention, feed_id: str) -> tuple[int, int]:
    """(accepted, processed) rows of `feed_id`, summed over the coordinator and every node's bridge."""
    replies = [convention.leader.ask(path, GetFeedProgress(feed_id), timeout=10)
               for path in (BRIDGE_PATH, *(bridge_path(n) for n in NODES))]
    return sum(p.accepted for p in replies), sum(p.processed for p in replies)


def test_a_bridge_path_names_a_node_and_start_bridges_refuses_bad_node_lists(convention):
    assert bridge_path("beta") == "/system/spark-bridges/beta"
    for bad in ("", "a/b", None):
        with pytest.raises(ValueError, match="a node name is a non-empty string without '/'"):
            bridge_path(bad)
    for nodes in (["beta", "beta"], [], "beta"):
        with pytest.raises(ValueError, match="nodes must be a non-empty list of distinct node names"):
            start_bridges(convention.leader, nodes=nodes)
    # Each bridge runs on its own node: in that node's processes.
    hosts = convention.leader.status().hosts
    assert {n: hosts[bridge_path(n)].node for n in NODES} == {n: n for n in NODES}
    for node in NODES:  # a client learns the name of the node it attached to (what tasks do)
        client = actors.connect(convention.systems[node].admin_port)
        try:
            assert client.node == node
        finally:
            client.close()


@pytest.mark.timeout(200)
def test_executors_stage_at_their_node_s_bridge_and_a_rerun_on_other_bridges_delivers_nothing(
        convention, cluster, spark):
    before = convention.feed_rows()
    job = {"job": "feed", "port": convention.leader.admin_port, "feed_id": "bridged", "rows": ROWS}
    driver = DriverServer(cluster, "driver-bridges", module=MODULE)  # one application runs the feed and its rerun
    try:
        result = driver.run(job, timeout=150)
        took, expected = check_first_feed(convention, result, before)
        # A rerun on the cluster: every partition is done (at whichever bridge it lands now).
        again = driver.run(job, timeout=150)
    finally:
        driver.close()
    assert (again["rows"], again["duplicates_skipped"], again["discarded"]) == (ROWS, ROWS, 0)
    check_balances(convention, expected, ROWS)

    # A rerun in local mode whose executors attach to beta (the Spark conf names its port): the partitions
    # gamma released land on beta's bridge now, are staged there and dropped, since the coordinator knows.
    before = convention.feed_rows()
    spark.conf.set("spark.reprise.port", str(convention.systems["beta"].admin_port))
    try:
        local = fed(spark, convention.leader.admin_port, ROWS, "bridged")
    finally:
        spark.conf.unset("spark.reprise.port")
    assert (local["rows"], local["duplicates_skipped"], local["dead_lettered"], local["discarded"]) == (ROWS, ROWS, 0, 0)
    after = convention.feed_rows()
    assert after["beta"] - before["beta"] == took["gamma"]  # gamma's partitions, new to beta: staged, not released
    assert after["gamma"] == before["gamma"] and after["alpha"] == before["alpha"]
    check_balances(convention, expected, ROWS)


def check_first_feed(convention: Convention, result: dict[str, Any],
                     before: dict[str, int]) -> tuple[dict[str, int], dict[str, int]]:
    """The cluster's first feed: all rows delivered once, staged at beta's and gamma's bridges; (rows each node's
    bridge took, the expected sums)."""
    assert (result["rows"], result["duplicates_skipped"], result["dead_lettered"]) == (ROWS, 0, 0)
    took = {n: rows - before[n] for n, rows in convention.feed_rows().items()}
    # Each worker's executor staged at its node's bridge; nothing went through the leader's.
    assert took["beta"] > 0 and took["gamma"] > 0 and took["alpha"] == 0, took
    assert took["beta"] + took["gamma"] == ROWS
    expected = expected_sums(ROWS)
    check_balances(convention, expected, ROWS)
    assert progress(convention, "bridged") == (ROWS, ROWS)
    return took, expected


@pytest.mark.timeout(120)
def test_in_local_mode_the_spark_conf_names_the_node_whose_bridge_the_tasks_use(convention, spark):
    accounts = list(expected_sums(0))
    held = sums(balances(convention.leader, accounts))
    rows, start = 600, 10 * ROWS  # txids no other test feeds
    before = convention.feed_rows()
    spark.conf.set("spark.reprise.port", str(convention.systems["gamma"].admin_port))
    try:
        result = fed(spark, convention.leader.admin_port, rows, "local-gamma", start=start)
    finally:
        spark.conf.unset("spark.reprise.port")
    assert (result["rows"], result["duplicates_skipped"]) == (rows, 0)
    after = convention.feed_rows()
    assert {n: after[n] - before[n] for n in NODES} == {"alpha": 0, "beta": 0, "gamma": rows}
    # Without the conf key, tasks attach to the feed's system (the leader, node alpha) and use its bridge.
    more = 300
    result = fed(spark, convention.leader.admin_port, more, "local-alpha", start=start + rows)
    assert (result["rows"], result["duplicates_skipped"]) == (more, 0)
    last = convention.feed_rows()
    assert {n: last[n] - after[n] for n in NODES} == {"alpha": more, "beta": 0, "gamma": 0}
    # A keyed feed stages at the coordinator even where the tasks' node has a bridge: keys stay exact.
    keyed = 200
    coordinator = convention.leader.status().hosts[BRIDGE_PATH].counters.get("feed_rows", 0)
    spark.conf.set("spark.reprise.port", str(convention.systems["gamma"].admin_port))
    try:
        result = fed(spark, convention.leader.admin_port, keyed, "local-keyed", start=start + rows + more, key="txid")
    finally:
        spark.conf.unset("spark.reprise.port")
    assert (result["rows"], result["duplicates_skipped"]) == (keyed, 0)
    assert convention.feed_rows() == last, "a keyed feed went through a node's bridge"
    assert convention.leader.status().hosts[BRIDGE_PATH].counters["feed_rows"] - coordinator == keyed
    added = expected_sums(rows + more + keyed, start)
    assert sums(balances(convention.leader, accounts)) == {p: held[p] + added[p] for p in accounts}


@pytest.mark.timeout(120)
def test_a_node_bridge_killed_after_staging_recovers_its_batches_and_the_commit_releases_them_once(convention):
    from spark_bridge.feed import commit_run, make_plan
    from spark_bridge.messages import BatchAccepted, IngestBatch

    leader, path = convention.leader, bridge_path("beta")
    accounts = list(expected_sums(0))
    held = sums(balances(leader, accounts))
    start, rows = 20 * ROWS, 100
    plan = make_plan("127.0.0.1", leader.admin_port, "restarted", "to", None, None, 50, 8, 60.0, "processed",
                     bridges=tuple(bridge_path(n) for n in NODES))
    attempt = f"{plan.run}/7"

    def stage(node: str, attempt: str) -> None:
        """What a task on `node`'s host does: stage partition 0's rows at that node's bridge."""
        task = actors.connect(convention.systems[node].admin_port)
        try:
            probe = task.probe()
            for batch_no, first in enumerate(range(start, start + rows, 50)):
                txids = range(first, first + 50)
                task.tell(bridge_path(node), IngestBatch(
                    "restarted", 0, batch_no, [f"/user/accounts/a{i % ACCOUNTS}" for i in txids],
                    [{"account": i % ACCOUNTS, "txid": i, "amount": 1 + i % 3} for i in txids], probe.path,
                    attempt=attempt))
            assert [type(m) for m in probe.receive_many(2, timeout=20)] == [BatchAccepted] * 2
        finally:
            task.close()

    stage("beta", attempt)
    victim = leader.status().hosts[path]
    os.kill(victim.pid, signal.SIGKILL)  # staged, durable, not released: the commit comes while it restarts
    staged = [(0, attempt, rows, 0, 0, path)]
    result = commit_run(plan, "restarted", staged, time.monotonic())
    assert (result.rows, result.duplicates_skipped, result.discarded) == (rows, 0, 0)
    info = leader.status().hosts[path]
    assert info.restarts > victim.restarts and info.pid != victim.pid and info.node == "beta"
    added = expected_sums(rows, start)
    assert sums(balances(leader, accounts)) == {p: held[p] + added[p] for p in accounts}
    # The driver's commit again (its Release resent): answered, nothing delivered twice.
    commit_run(plan, "restarted", staged, time.monotonic())
    assert sums(balances(leader, accounts)) == {p: held[p] + added[p] for p in accounts}
    # A rerun staging partition 0 at gamma, committed while the coordinator restarts: its journal still
    # says partition 0 is released, so gamma drops the rows.
    rerun = dataclasses.replace(plan, run="rerun0000000000")
    stage("gamma", f"{rerun.run}/3")
    os.kill(leader.status().hosts[BRIDGE_PATH].pid, signal.SIGKILL)
    again = commit_run(rerun, "restarted", [(0, f"{rerun.run}/3", rows, 0, 0, bridge_path("gamma"))],
                       time.monotonic())
    assert (again.rows, again.duplicates_skipped, again.discarded) == (rows, rows, 0)
    assert leader.status().hosts[BRIDGE_PATH].restarts >= 1
    assert sums(balances(leader, accounts)) == {p: held[p] + added[p] for p in accounts}


if __name__ == "__main__":
    main(sys.argv)

"""`reprise spark staged|discard` against a live multiproc system: the installed console script, real processes.

Tasks and drivers are played by a probe speaking the bridge's protocol (no Spark): one feed is released
(delivered), another one's driver "dies" after staging. The CLI lists and discards what it left; the released
feed's rows stay applied exactly once, and the dead driver's late release is refused.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from actors.system import free_port
from spark_bridge import BRIDGE_PATH, bridge_path, start_bridge, start_bridges
from spark_bridge.messages import (
    BatchAccepted,
    FeedProcessed,
    FeedReleased,
    IngestBatch,
    Release,
    ReleaseRefused,
)
from tests.actors.test_metrics import sample, scrape
from tests.spark_bridge.sample import Account, Balance, GetBalance
from tests.spark_bridge.test_staged_bridges import balance, coordinate
from tests.spark_bridge.test_staged_bridges import stage as stage_at
from tests.waiting import wait_for

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(120)]

REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reprise(*argv: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([REPRISE, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def stage(system, probe, feed_id: str, attempt: str, batch_no: int, txids: range, account: str) -> None:
    """Stage one batch of deposits of 10 each to `account` under `attempt` (as a task does)."""
    paths = [f"/user/accounts/{account}"] * len(txids)
    system.tell(BRIDGE_PATH, IngestBatch(feed_id, 0, batch_no, paths, [{"amount": 10, "txid": t} for t in txids],
                                         probe.path, attempt=attempt))
    assert isinstance(probe.receive(10), BatchAccepted)


def test_staged_lists_and_discard_removes_a_dead_driver_s_run_and_nothing_released_is_lost(make_system, tmp_path):
    metrics = free_port()
    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/journal.db", metrics_port=metrics)
    system.spawn(Account, path="/user/accounts", entities=True)
    start_bridge(system)
    port = str(system.admin_port)
    probe = system.probe("driver")
    # A feed released and delivered: 20 rows to a1.
    stage(system, probe, "good", "run1/1", 0, range(0, 10), "a1")
    stage(system, probe, "good", "run1/1", 1, range(10, 20), "a1")
    system.tell(BRIDGE_PATH, Release("good", "run1", [[0, "run1/1"]], probe.path, processed=True))
    assert probe.receive(10) == FeedReleased("good", "run1", 0)
    assert probe.receive(10) == FeedProcessed("good")
    # Two drivers that die after staging: 3 and 1 rows to a2.
    stage(system, probe, "lost", "runX/1", 0, range(100, 103), "a2")
    stage(system, probe, "stale", "runY/4", 0, range(200, 201), "a2")

    listed = reprise("spark", "staged", "--port", port, "--json")
    assert listed.returncode == 0, listed.stderr
    by_run = {(r["feed_id"], r["run"]): r for r in json.loads(listed.stdout)["runs"]}
    assert set(by_run) == {("lost", "runX"), ("stale", "runY")}
    assert (by_run["lost", "runX"]["batches"], by_run["lost", "runX"]["rows"]) == (1, 3)
    assert by_run["lost", "runX"]["bridge"] == BRIDGE_PATH and by_run["lost", "runX"]["last_staged_at"] > 0
    text = reprise("spark", "staged", "--port", port)
    assert text.returncode == 0 and "2 staged run(s)" in text.stdout and "runX" in text.stdout, text
    status = json.loads(reprise("status", "--port", port, "--json").stdout)
    counters = status["hosts"][BRIDGE_PATH]["counters"]
    assert (counters["staged_runs"], counters["staged_batches"], counters["staged_rows"]) == (2, 2, 4)
    assert sample(scrape(metrics), "reprise_actor_stat", host=BRIDGE_PATH, stat="staged_rows") == 4

    # One run by name.
    gone = reprise("spark", "discard", "--port", port, "--feed-id", "lost", "--run", "runX")
    assert gone.returncode == 0 and "discarded 1 staged run(s)" in gone.stdout, gone
    again = reprise("spark", "discard", "--port", port, "--feed-id", "lost", "--run", "runX")
    assert again.returncode == 1 and "no staged run runX of feed 'lost'" in again.stderr, again
    # Every run idle that long: none yet (exit 0), then the stale one.
    none = reprise("spark", "discard", "--port", port, "--idle-for", "1h")
    assert none.returncode == 0 and "nothing discarded" in none.stdout, none
    wait_for(lambda: json.loads(reprise("spark", "staged", "--port", port, "--json").stdout)["runs"][0]
             ["idle_seconds"] >= 1.0, timeout=30, interval=0.2)
    idle = reprise("spark", "discard", "--port", port, "--idle-for", "1s", "--json")
    assert idle.returncode == 0, idle.stderr
    assert [(r["feed_id"], r["run"]) for r in json.loads(idle.stdout)["discarded"]] == [("stale", "runY")]
    assert json.loads(idle.stdout)["released"] == []  # (one bridge: no coordinator's decisions to honour)
    assert json.loads(reprise("spark", "staged", "--port", port, "--json").stdout)["runs"] == []
    assert json.loads(reprise("status", "--port", port, "--json").stdout)["hosts"][BRIDGE_PATH]["counters"][
        "staged_rows"] == 0
    assert sample(scrape(metrics), "reprise_actor_stat", host=BRIDGE_PATH, stat="staged_runs") == 0

    # Usage mistakes: one line, exit 2.
    bad = reprise("spark", "discard", "--port", port, "--run", "runX")
    assert bad.returncode == 2 and "--feed-id" in bad.stderr, bad
    unit = reprise("spark", "discard", "--port", port, "--idle-for", "2 weeks")
    assert unit.returncode == 2 and "'2 weeks' is not a duration" in unit.stderr, unit
    nothing = reprise("spark", "discard", "--port", port)
    assert nothing.returncode == 2 and "--idle-for" in nothing.stderr, nothing
    elsewhere = reprise("spark", "staged", "--port", port, "--bridge", "/user/accounts/a1")
    assert elsewhere.returncode == 1 and "is not a bridge of this actor system" in elsewhere.stderr, elsewhere
    host = reprise("spark", "staged", "--port", port, "--bridge", "/user/accounts")  # a host, but not a bridge
    assert host.returncode == 1 and "is not a bridge of this actor system" in host.stderr, host

    # The dead driver comes back after all: refused, not "released".
    system.tell(BRIDGE_PATH, Release("lost", "runX", [[0, "runX/1"]], probe.path))
    refused = probe.receive(10)
    assert isinstance(refused, ReleaseRefused) and refused.reason == "operator"
    # Nothing acknowledged lost: the released feed's 20 rows applied exactly once; nothing discarded delivered.
    assert system.ask("/user/accounts/a1", GetBalance(), timeout=10) == Balance(200, 20, 0)
    assert system.ask("/user/accounts/a2", GetBalance(), timeout=10) == Balance(0, 0, 0)


def test_discard_at_a_node_bridge_releases_a_decided_run_and_discards_the_others(make_system, tmp_path):
    """With a bridge per node, `reprise spark discard` releases (delivers, once) a run the coordinator had
    decided before its driver died, and discards an undecided one; both are reported, the exit is 0."""
    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/journal.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    [node] = system.nodes()
    start_bridges(system, nodes=[node], staged_ttl=None)
    nb, port = bridge_path(node), str(system.admin_port)
    probe = system.probe("driver")
    stage_at(system, probe, nb, "k", "runA/1", 0, [4], 0)
    stage_at(system, probe, nb, "k2", "runZ/1", 0, [9], 0, account="a1")
    assert type(coordinate(system, probe, "k", "runA", [[0, "runA/1", nb]])).__name__ == "ReleasePlan"

    done = reprise("spark", "discard", "--port", port, "--idle-for", "0")
    assert done.returncode == 0, done.stderr
    released, discarded = done.stdout.split("discarded ")
    assert "released 1 staged run(s) instead of discarding them" in released and "runA" in released
    assert "1 staged run(s)" in discarded and "runZ" in discarded and "runA" not in discarded
    assert wait_for(lambda: balance(system) == Balance(4, 1, 0))  # the decided run delivered, once
    assert balance(system, "a1") == Balance(0, 0, 0)
    assert json.loads(reprise("spark", "staged", "--port", port, "--json").stdout)["runs"] == []

"""The main job (`make demo`) at small scale, run as the user runs it: Spark, bridge, accounts, ledger, SIGKILL."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from actors.system import tagged_pids
from tests.conftest import SESSION_TOKEN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
pytestmark = [pytest.mark.spark, pytest.mark.multiproc]


def demo(*argv: str) -> subprocess.CompletedProcess:
    tag = f"{SESSION_TOKEN}-demo-"  # under the session token: conftest's leak check covers the demo's system
    done = subprocess.run([sys.executable, "-m", "examples.demo", "--tag", tag, *argv], cwd=ROOT,
                          capture_output=True, text=True, timeout=280)
    assert tagged_pids(tag) == [], "the demo left processes behind"
    return done


@pytest.mark.timeout(300)
def test_demo_with_chaos_ends_with_exact_balances():
    # As `make demo` runs it: Spark's JVM on the class archive in the environment (built by this run when missing).
    run = demo("--transactions", "20000", "--accounts", "200", "--partitions", "4",
               "--class-archive", os.path.join(sys.prefix, "spark-classes.jsa"))
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert "2 shard process(es), restarted 1 time(s) (SIGKILL after" in run.stdout
    assert "ledger              20,000 entries" in run.stdout
    assert "mismatches 0, ledger mismatches 0" in run.stdout and "OK: every balance is exact" in run.stdout
    # The read model (an exactly-once projection per account journal) is exact after the SIGKILL too.
    assert "read model          200 balances in 2 exactly-once projection(s)" in run.stdout
    assert "read model mismatches 0" in run.stdout and "in the ledger and in the read model" in run.stdout


@pytest.mark.timeout(300)
def test_demo_without_chaos_and_bad_options():
    run = demo("--transactions", "3000", "--accounts", "30", "--no-chaos", "--partitions", "2")
    assert run.returncode == 0, run.stdout + run.stderr[-3000:]
    assert "restarted 0 time(s)" in run.stdout and "OK: every balance is exact" in run.stdout
    assert "read model          30 balances in 2 exactly-once projection(s)" in run.stdout
    assert "read model mismatches 0" in run.stdout
    bad = demo("--transactions", "0")
    assert bad.returncode == 2 and "--transactions, --accounts and --shards must be at least 1" in bad.stderr


def test_the_chaos_thread_asks_often_only_when_the_mark_may_be_near():
    from examples.demo import _Pace

    pace = _Pace(1_000_000, 400_000)
    assert pace.interval == _Pace.NEAR  # before the first answer
    pace.observe(0.0, 300_000, 0)
    assert pace.interval == _Pace.FAR  # staging: nothing is processed before the release
    pace.observe(1.0, 1_000_000, 0)
    assert pace.interval == _Pace.NEAR  # released: the rate is not known yet
    pace.observe(1.1, 1_000_000, 10_000)
    assert pace.interval == _Pace.NEAR
    pace.observe(1.2, 1_000_000, 20_000)  # 100k rows/s: the mark is 3.8 s away
    assert pace.interval == _Pace.FAR
    pace.observe(4.9, 1_000_000, 390_000)  # 0.1 s away
    assert pace.interval == pytest.approx(0.025)
    pace.observe(4.99, 1_000_000, 399_900)
    assert pace.interval == _Pace.NEAR

"""examples/accounts/topology.toml as a user runs it: reprise up --detach, the client feeds and checks, down."""

from __future__ import annotations

import itertools
import os
import shutil
import subprocess
import sys

import pytest

import actors
from actors.system import kill_tagged, tagged_pids
from tests.conftest import SESSION_TOKEN

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(150)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPOLOGY = os.path.join(ROOT, "examples", "accounts", "topology.toml")
REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
_n = itertools.count(1)


def run(*argv: str, timeout: float = 100) -> subprocess.CompletedProcess:
    return subprocess.run(list(argv), cwd=ROOT, capture_output=True, text=True, timeout=timeout)


def client(port: int, *argv: str) -> subprocess.CompletedProcess:
    return run(sys.executable, "-m", "examples.accounts.client", "--port", str(port), *argv)


@pytest.fixture
def tag():
    tag = f"{SESSION_TOKEN}-accounts-{next(_n)}-"
    yield tag
    assert kill_tagged(tag) == [], f"processes tagged {tag} were left behind"


def up_detached(tmp_path, tag) -> tuple[int, subprocess.CompletedProcess]:
    """`reprise up` of a copy of the topology (its relative journal lands in tmp_path); (port, result)."""
    topology = tmp_path / "topology.toml"
    shutil.copy(TOPOLOGY, topology)
    port = actors.free_port()
    up = run(REPRISE, "up", str(topology), "--detach", "--port", str(port), "--tag", tag,
             "--run-dir", str(tmp_path / "run"))
    assert up.returncode == 0, up.stderr
    return port, up


def test_up_feed_check_down(tmp_path, tag):
    port, up = up_detached(tmp_path, tag)
    assert "/user/accounts" in up.stdout and "/user/feeder" in up.stdout and "/user/balances" in up.stdout
    try:
        fed = client(port, "feed", "--count", "1500", "--accounts", "30")
        assert fed.returncode == 0, fed.stderr
        assert "feeder accepted 1500" in fed.stdout
        fed = client(port, "feed", "--start", "1500", "--count", "500", "--accounts", "30")
        assert fed.returncode == 0 and "feeder accepted 2000" in fed.stdout, fed.stderr
        # The projection's relative offset store landed next to the topology file.
        read_model = f"sqlite://{tmp_path}/accounts-read-model.db"
        checked = client(port, "check", "--deposits", "2000", "--accounts", "30", "--read-model", read_model)
        assert checked.returncode == 0, checked.stdout + checked.stderr
        assert "OK: 30 balances exact after 2000 deposits, in the read model too" in checked.stdout
        one = client(port, "balance", "7")
        assert one.returncode == 0 and int(one.stdout) > 0
        status = run(REPRISE, "status", "--port", str(port))
        assert "/user/accounts" in status.stdout and "entities" in status.stdout
        assert "projection_lag 0" in status.stdout
    finally:
        down = run(REPRISE, "down", "--port", str(port))
    assert down.returncode == 0, down.stderr
    assert tagged_pids(tag) == []
    journal = f"sqlite://{tmp_path}/accounts-journal.db"
    ls = run(REPRISE, "journal", "ls", journal)
    assert ls.returncode == 0 and "/user/feeder" in ls.stdout and "/user/accounts/7" in ls.stdout
    # The event classes live in the example's model: the CLI reads them once told where.
    plain = run(REPRISE, "journal", "verify", journal)
    assert plain.returncode == 1 and "UNREADABLE persistence_id=/user/feeder" in plain.stdout
    assert "--import MODULE" in plain.stderr and "CORRUPT" not in plain.stdout
    verified = run(REPRISE, "journal", "verify", journal, "--import", "examples.accounts.model")
    assert verified.returncode == 0 and ": ok" in verified.stdout, verified.stdout + verified.stderr
    shown = run(REPRISE, "journal", "show", journal, "/user/accounts/7", "--limit", "1",
                "--import", "examples.accounts.model")
    # Deposits applied in one group commit are one AppliedBatch event, readable with the model imported.
    assert shown.returncode == 0 and "origins=('/user/feeder',)" in shown.stdout, shown.stderr
    assert "Deposited(amount=" in shown.stdout


def test_check_reports_a_wrong_expectation(tmp_path, tag):
    port, _ = up_detached(tmp_path, tag)
    try:
        assert client(port, "feed", "--count", "100", "--accounts", "5").returncode == 0
        wrong = client(port, "check", "--deposits", "120", "--accounts", "5")
        assert wrong.returncode == 1 and "MISMATCH account" in wrong.stdout
    finally:
        assert run(REPRISE, "down", "--port", str(port)).returncode == 0

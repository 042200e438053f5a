"""bench/cluster.py through the bench runner at a tiny size: both systems measured, hosts where placed."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from actors.cli import main

pytestmark = [pytest.mark.timeout(180), pytest.mark.multiproc]


def test_the_cluster_benchmark_runs_under_the_bench_runner(tmp_path, capsys, monkeypatch, postgres_url) -> None:
    monkeypatch.setenv("REPRISE_BENCH_POSTGRES_URL", postgres_url)
    args = ["--rows=600", "--entities=20", "--rounds=1", "--chunk=100", "--publish-hosts=1"]
    code = main(["bench", "--only", "cluster", "--out", str(tmp_path),
                 *[x for a in args for x in ("--arg", f"cluster:{a}")]])
    assert code == 0, capsys.readouterr().err
    md = (tmp_path / "RESULTS.md").read_text()
    assert "| reprise one node | rows/s, durable entities (PostgreSQL) |" in md
    assert "| reprise three nodes | rows/s, durable entities (PostgreSQL) |" in md


def test_the_cluster_benchmark_counts_the_bytes_and_the_directory(tmp_path, postgres_url) -> None:
    env = dict(os.environ, REPRISE_BENCH_POSTGRES_URL=postgres_url,
               PYTHONPATH=os.pathsep.join([os.getcwd(), os.environ.get("PYTHONPATH", "")]))
    done = subprocess.run([sys.executable, "-m", "bench.cluster", "--rows=400", "--entities=10", "--rounds=1",
                           "--chunk=100", "--publish-hosts=2", "--json"], capture_output=True, text=True,
                          env=env, timeout=170)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout.strip().splitlines()[-1])
    for name in ("one node", "three nodes"):
        figures = doc["systems"][name]
        # Every row was sent in a frame the feeder counted: at least its Deposit's pickle.
        assert figures["feeder_bytes_out_per_row"] > 10 and figures["feeder_frames_out"] >= 4
        assert figures["rows_per_commit"] > 1  # group commits, not one per row
        assert doc["postgres"][name]["connections"] >= 2
    assert [m["routes"] for m in doc["publish_micro"] if not m["sharded"]] == [10, 100, 1000]
    assert doc["publish_real"][1]["hosts"] == doc["publish_real"][0]["hosts"] + 2

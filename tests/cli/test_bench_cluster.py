"""bench/cluster.py at a tiny size: both systems measured, bytes, commits, connections and the directory counted."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = [pytest.mark.timeout(180), pytest.mark.multiproc]


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

"""The README's Projections block runs as written (saved as balances.py, as its first line says)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.test_readme import blocks, processes_started_in
from tests.waiting import wait_for

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_the_readme_projection_block_runs_verbatim_as_a_script(tmp_path) -> None:
    (block,) = [b for b in blocks("python") if b.startswith("# balances.py")]
    (tmp_path / "balances.py").write_text(block)
    where = str(tmp_path.resolve())
    try:
        env = {**os.environ, "PYTHONPATH": ROOT}  # this checkout's packages, wherever the venv points
        run = subprocess.run([sys.executable, "balances.py"], cwd=where, capture_output=True, text=True,
                             timeout=90, env=env)
        assert run.returncode == 0, run.stderr
        wait_for(lambda: not processes_started_in(where), timeout=15)
    finally:
        for pid in processes_started_in(where):
            os.kill(pid, 9)

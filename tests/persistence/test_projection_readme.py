"""The README's Projections block runs as written (saved as balances.py, as its first line says)."""

from __future__ import annotations

import pytest

from tests.test_readme import run_block_as_script


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_the_readme_projection_block_runs_verbatim_as_a_script(tmp_path) -> None:
    run_block_as_script("balances.py", tmp_path)

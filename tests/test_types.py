"""The type checker over the four packages: `python -m mypy` (configured in pyproject.toml) must pass.

Strict mode everywhere (pyproject.toml's [tool.mypy]); only dependencies without type information are
exempt from having their imports checked.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

pytestmark = pytest.mark.timeout(300)


def test_mypy_passes_on_the_packages(tmp_path) -> None:
    if importlib.util.find_spec("mypy") is None:
        pytest.skip("MYPY IS NOT INSTALLED: type errors go unchecked; install the dev extra: pip install -e '.[dev]'")
    # The cache goes to tmp_path, so that test runs leave no .mypy_cache in the checkout.
    done = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "mypy-cache")],
                          cwd=ROOT, capture_output=True, text=True, timeout=280)
    assert done.returncode == 0, (
        f"`python -m mypy` found type errors (fix them; annotate precisely, use Any only for a user's "
        f"message or event):\n{done.stdout}{done.stderr}")

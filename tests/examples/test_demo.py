"""The main job (`make demo`) at small scale: exact balances after a SIGKILL of the account host."""

from __future__ import annotations

import pytest

from examples import demo


@pytest.mark.timeout(120)
def test_demo_with_chaos_ends_with_exact_balances(capsys):
    assert demo.main(["--deposits", "6000", "--accounts", "50"]) == 0
    out = capsys.readouterr().out
    assert "restarted 1 time(s) (SIGKILL after" in out
    assert "mismatches 0" in out and "OK: every balance is exact" in out


@pytest.mark.timeout(120)
def test_demo_without_chaos(capsys):
    assert demo.main(["--deposits", "2000", "--accounts", "20", "--no-chaos"]) == 0
    assert "restarted 0 time(s)" in capsys.readouterr().out

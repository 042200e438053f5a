"""A short seeded torture run inside `make test` (the long one is `make torture SEED=... HISTORIES=...`).

Each history is a random, seeded sequence of user operations and faults (puts, DurableDelivery streams,
CLI readers and a plain reader in other processes, SIGKILL of hosts and the admin, down/up, PostgreSQL
backends terminated, disk full, bad inputs) against a real multiproc system; the checker then requires 0
acknowledged events lost, 0 duplicates applied, FIFO per store, every failure a clear error and no process
left behind. A failing history prints its seed and operations; replay it with the printed command.
"""

from __future__ import annotations

import io

import pytest

from tests.conftest import SESSION_TOKEN
from tests.torture.runner import run

pytestmark = [pytest.mark.multiproc]

SQLITE_SEED, POSTGRES_SEED = 7, 8  # fixed: the run inside `make test` is the same every time


def _run(seed: int, histories: int, journal: str) -> str:
    out = io.StringIO()
    summary = run(seed, histories, journal, ops_range=(5, 10), spark=0.0, token=f"{SESSION_TOKEN}-torture", out=out)
    report = out.getvalue()
    print(report)
    assert summary.histories == histories
    assert summary.acknowledged > 0, "the histories acknowledged nothing: the checker would have nothing to check"
    assert not summary.failed, report
    return report


@pytest.mark.timeout(150)
def test_torture_histories_on_sqlite():
    _run(SQLITE_SEED, 3, "sqlite")


@pytest.mark.postgres
@pytest.mark.timeout(150)
def test_torture_histories_on_postgres(postgres_url, monkeypatch):
    monkeypatch.setattr("tests.torture.runner.PG_URL", postgres_url)
    _run(POSTGRES_SEED, 2, "postgres")

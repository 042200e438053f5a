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
from tests.torture import ops
from tests.torture.runner import run

pytestmark = [pytest.mark.multiproc]

SQLITE_SEED, POSTGRES_SEED = 7, 8  # fixed: the run inside `make test` is the same every time


def _run(seed: int, histories: int, journal: str, ops_range: tuple[int, int] = (5, 10),
         exclude: frozenset[str] = frozenset()) -> str:
    out = io.StringIO()
    summary = run(seed, histories, journal, ops_range=ops_range, spark=0.0, token=f"{SESSION_TOKEN}-torture",
                  out=out, exclude=exclude)
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


# Only puts and bursts told around SIGKILLs of the stores' host. Before actors/inflight.py, 2 to 5 of 10 such
# histories broke FIFO (more under load): a burst the guardian had forwarded to a host SIGKILLed right after bounced back
# after the client's later messages, which were held for the restarting host, and was journaled after them.
BURSTS_ONLY = frozenset(ops.OPS) - {"put_ask", "put_burst", "burst_across_restart"}


@pytest.mark.timeout(170)
def test_bursts_told_across_sigkills_are_journaled_in_the_order_sent(monkeypatch):
    # Up to ~7 SIGKILLs of the stores' host come within seconds of each other: the default backoff doubles from
    # 0.2 s to seconds, and the history waits on it. 0.05 s capped at 0.2 s: the after-burst (tells of a few ms,
    # sent once the killed process is gone) still meets a host that is down and is held, as before.
    monkeypatch.setattr("tests.torture.world.STORE_BACKOFF", (0.05, 0.2, 0.2))
    report = _run(6000, 7, "sqlite", ops_range=(5, 20), exclude=BURSTS_ONLY)
    assert "out-of-order=0" in report

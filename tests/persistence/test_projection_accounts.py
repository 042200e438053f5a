"""The accounts example's SQL read model (examples/accounts/read_model.py): exact, also after a SIGKILL.

The feeder delivers deposits to Account entities, which tag their Deposited events; the exactly-once
projection at /user/balances adds them to `account_balance`. The table must equal the sums that
`deposit(i, accounts)` gives, and what the accounts themselves say, however the projection's host died.
"""

from __future__ import annotations

import os
import signal

import pytest

import actors
from examples.accounts.client import FEEDER, balances, expected_balances, wait_confirmed
from examples.accounts.model import Account, FeedDeposits, Feeder
from examples.accounts.read_model import BALANCES, TAG, projection_kwargs, read_balances
from journal import open_journal
from persistence import GetProjectionState, Projection
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

N_ACCOUNTS = 20
CHUNK = 50


def start_pipeline(system: actors.System, store: str) -> None:
    """The accounts topology (entities and feeder) plus the read model's projection."""
    system.spawn(Account, "/user/accounts", entities=True)
    system.spawn(Feeder, FEEDER)
    system.spawn(Projection, BALANCES, kwargs=projection_kwargs(store))


def feed_chunk(system: actors.System, k: int) -> None:
    system.ask(FEEDER, FeedDeposits(k * CHUNK, CHUNK, N_ACCOUNTS), timeout=60)


def newest_deposit_offset(journal: str) -> int:
    with open_journal(journal) as j:
        return max((e.offset for e in j.events_by_tag(TAG)), default=0)


def check_exact(system: actors.System, journal: str, store: str, deposits: int) -> None:
    """The read model equals the expected sums and the accounts' own balances, once caught up."""
    assert wait_confirmed(system, timeout=60).unconfirmed == 0
    newest = newest_deposit_offset(journal)
    wait_for(lambda: system.ask(BALANCES, GetProjectionState(), timeout=10).stored_offset == newest,
             timeout=60, interval=0.05)
    expected = expected_balances(deposits, N_ACCOUNTS)
    assert read_balances(store) == expected
    assert balances(system, list(expected)) == expected


def test_the_read_model_is_exact_after_the_pipeline_runs(base, make_system, tmp_path):
    journal, store = f"sqlite:///{tmp_path}/journal.db", f"sqlite:///{tmp_path}/read-model.db"
    system = make_system(base, journal=journal, snapshot_store=journal)
    start_pipeline(system, store)
    for k in range(6):
        feed_chunk(system, k)
    check_exact(system, journal, store, 6 * CHUNK)




@pytest.mark.multiproc
def test_the_read_model_is_exact_after_its_host_is_sigkilled_mid_stream(projection_stores, make_system):
    journal, store = projection_stores
    system = make_system("multiproc", journal=journal, snapshot_store=journal)
    start_pipeline(system, store)
    chunks, kills = 12, 0
    for k in range(chunks):
        feed_chunk(system, k)
        if k in (3, 7):
            # Mid-stream: the projection has handled part of what is journaled, and more keeps coming.
            wait_for(lambda: read_balances(store), timeout=30, interval=0.01)
            os.kill(system.status().hosts[BALANCES].pid, signal.SIGKILL)
            kills += 1
            wait_for(lambda n=kills: (lambda h: h.restarts == n and h.state == "running")(
                system.status().hosts[BALANCES]), timeout=30, interval=0.05)
    check_exact(system, journal, store, chunks * CHUNK)

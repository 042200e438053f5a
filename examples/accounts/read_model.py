"""A SQL read model of the accounts: the balance of each account in a table, kept by an exactly-once projection.

Accounts tag their `Deposited` events "deposit" (Account.tags_for). The projection at /user/balances
reads them by tag and, per group of envelopes, adds the amounts to `account_balance` in the same
transaction that stores its offset: after any crash the table is exact, never counting a deposit twice.

    system.spawn(Projection, BALANCES, kwargs=projection_kwargs("sqlite:///abs/read-model.db"))
    read_balances("sqlite:///abs/read-model.db")   # {"7": 1234, ...}
"""

from __future__ import annotations

import sqlite3
from collections import Counter
from typing import Any

from examples.accounts.model import Deposited
from journal import EventEnvelope
from persistence import EventsByTag, TableCommit
from persistence.idempotent import Applied, AppliedBatch
from persistence.offset_store import postgres_conninfo
from spark_bridge.messages import RowApplied

TAG = "deposit"
BALANCES = "/user/balances"
_UPSERT = ("INSERT INTO account_balance (account, balance) VALUES ({m}, {m}) ON CONFLICT (account) "
           "DO UPDATE SET balance = account_balance.balance + excluded.balance")


def deposits_of(event: object) -> list[int]:
    """The amounts deposited by one journaled event of an account (an AppliedBatch holds several)."""
    if isinstance(event, AppliedBatch):
        return [a for e in event.events for a in deposits_of(e)]
    if isinstance(event, Applied | RowApplied):  # RowApplied: the Spark pipeline's BankAccount (pipeline.py)
        return deposits_of(event.event)
    return [event.amount] if isinstance(event, Deposited) else []


def apply_deposits(conn: Any, envelopes: list[EventEnvelope]) -> None:
    """The projection's exactly-once grouped handler: add each group's deposits to the balance table."""
    sums: Counter[str] = Counter()
    for envelope in envelopes:
        event = envelope.event
        if type(event) is TableCommit:  # a table's commit (pipeline.AccountTable): many accounts' deposits
            for account, e in zip(event.entity_ids, event.events, strict=True):
                if type(e) is Deposited:
                    sums[account] += e.amount
        else:
            sums[envelope.persistence_id.rsplit("/", 1)[1]] += sum(deposits_of(event))
    mark = "?" if isinstance(conn, sqlite3.Connection) else "%s"
    if mark == "%s":
        from journal.postgres import lock_ddl

        lock_ddl(conn)  # (on PostgreSQL two projections creating the table at once would fail one)
    conn.execute("CREATE TABLE IF NOT EXISTS account_balance (account TEXT PRIMARY KEY, balance BIGINT NOT NULL)")
    conn.cursor().executemany(_UPSERT.format(m=mark), sorted(sums.items()))


def projection_kwargs(offset_store: str) -> dict[str, Any]:
    """The Projection's arguments: deposits by tag, exactly-once, in groups (Akka's defaults otherwise)."""
    return dict(source=EventsByTag(TAG), handler=apply_deposits, offset_store=offset_store,
                exactly_once=True, group_size=100, group_within=1.0, poll_interval=1.0)


def read_balances(offset_store: str) -> dict[str, int]:
    """The read model's table as {account id: balance}; empty before the first deposit is projected."""
    if offset_store.startswith("sqlite://"):
        with sqlite3.connect(offset_store[len("sqlite://"):]) as db:
            try:
                return {a: int(b) for a, b in db.execute("SELECT account, balance FROM account_balance")}
            except sqlite3.OperationalError:  # no table yet
                return {}
    import psycopg

    conninfo, schema = postgres_conninfo(offset_store)
    with psycopg.connect(conninfo) as db:
        try:
            return {a: int(b) for a, b in db.execute(f'SELECT account, balance FROM "{schema}".account_balance')}
        except psycopg.errors.UndefinedTable:
            return {}

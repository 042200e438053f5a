"""The actors of the Spark pipeline (`make demo`): accounts fed by the bridge, and a ledger they post to.

    Spark rows ──feed(ack="processed")──▶ /system/spark-bridge ──Row──▶ /user/accounts/<id>  (AccountTable)
                                                                              │ Entry, a follow-up of the row
                                                 /user/ledger/<id> (LedgerTable) ◀───┘ (straight to the ledger)

The main job runs the table kinds (spark_bridge.FeedTable: all the entities of a host as rows of one
persistent actor, one journal record per group commit). Each account applies a row once, its event and
its follow-up in one commit, sends the `Entry` to the account's row of the ledger once durable, and
confirms the row to the bridge once the ledger confirmed the entry. A feed with ack="processed" returns
only when every row and its entry are applied. BankAccount and Ledger are the same pipeline with one
actor per account (FeedReceiver: follow-ups anchored to the row, through the bridge); examples/streaming.py
uses BankAccount.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import actors
from examples.accounts.model import Deposited
from examples.accounts.read_model import TAG
from journal import register_type
from spark_bridge import FeedReceiver, FeedTable, Row
from spark_bridge.messages import RowApplied

LEDGER_PATH = "/user/ledger"
ACCOUNTS_PATH = "/user/accounts"


@register_type(manifest="reprise.examples.Entry")
@dataclass(frozen=True)
class Entry:
    """Account -> ledger (anchored follow-up) and the ledger's event: `amount` was deposited to `account`."""

    account: str
    amount: int


@dataclass(frozen=True)
class BalanceOf:
    """Reply of an account to "balance": its id, its balance and how many rows it saw again."""

    account: str
    balance: int
    redelivered: int


@dataclass(frozen=True)
class LedgerTotals:
    """Reply of the ledger to "totals": entries applied, their sum, per-account sums, rows seen again."""

    entries: int
    total: int
    per_account: dict
    redelivered: int


class BankAccount(FeedReceiver):
    """Applies each deposit row once, posts an anchored Entry to the ledger (if any), confirms once durable."""

    def __init__(self, ledger: str | None = LEDGER_PATH) -> None:
        self.ledger = ledger  # None: no follow-ups

    def pre_start(self) -> None:
        """Start empty; recovery replays the deposits."""
        self.balance = 0
        self.redelivered = 0

    def receive_recover(self, event: Any) -> None:
        """Replay a deposit."""
        if isinstance(event, Deposited):
            self.balance += event.amount

    def tags_for(self, event: Any) -> tuple[str, ...]:
        """Deposits are tagged for the read model's projection (read_model.py): FeedReceiver journals each
        one inside a RowApplied (inside IdempotentReceiver's wrappers, which ask tags per user event)."""
        return (TAG,) if type(event) is RowApplied and type(event.event) is Deposited else ()

    def receive_command(self, message: Any, sender: str | None) -> None:
        """A Row is a deposit ({"amount": n, ...}); "balance" replies BalanceOf."""
        if isinstance(message, Row):
            amount = int(message.body["amount"])
            posted = [(self.ledger, Entry(self.entity_id, amount))] if self.ledger else []
            if not self.apply_row(message, Deposited(amount), self.receive_recover, follow_ups=posted):
                self.redelivered += 1  # applied before: confirmed again, not applied again
        elif message == "balance":
            self.tell(sender, BalanceOf(self.entity_id, self.balance, self.redelivered))


class Ledger(FeedReceiver):
    """Applies each Entry row once; keeps the sum per account, to be checked against the accounts."""

    def pre_start(self) -> None:
        """Start empty; recovery replays the entries."""
        self.entries = 0
        self.total = 0
        self.per_account: dict[str, int] = {}
        self.redelivered = 0

    def receive_recover(self, event: Any) -> None:
        """Replay an entry."""
        if isinstance(event, Entry):
            self.entries += 1
            self.total += event.amount
            self.per_account[event.account] = self.per_account.get(event.account, 0) + event.amount

    def receive_command(self, message: Any, sender: str | None) -> None:
        """A Row carries an Entry; "totals" replies LedgerTotals."""
        if isinstance(message, Row):
            if not self.apply_row(message, message.body, self.receive_recover):
                self.redelivered += 1
        elif message == "totals":
            self.tell(sender, LedgerTotals(self.entries, self.total, dict(self.per_account), self.redelivered))


class AccountTable(FeedTable):
    """The accounts of a host as rows of one FeedTable: a deposit row is applied once, its Entry sent to the
    account's row of the ledger (`ledger`/<id>; None: no entries), and the row confirmed once both are done."""

    def __init__(self, ledger: str | None = LEDGER_PATH) -> None:
        self.ledger = ledger

    def pre_start(self) -> None:
        """Count rows arriving again after being applied (not journaled: for the demo's summary)."""
        self.redelivered: dict[str, int] = {}

    def empty_state(self) -> int:
        return 0

    def command_handler(self, entity_id: str, state: int, command: Any) -> list[Any] | None:
        """A Row is a deposit ({"amount": n, ...}); "balance" replies BalanceOf."""
        if type(command) is Row:
            amount = int(command.value("amount"))
            entry = [(f"{self.ledger}/{entity_id}", Entry(entity_id, amount))] if self.ledger else ()
            if self.apply_row(command, entry):
                return [Deposited(amount)]
            self.redelivered[entity_id] = self.redelivered.get(entity_id, 0) + 1
        elif command == "balance":
            self.reply(self.sender, BalanceOf(entity_id, state, self.redelivered.get(entity_id, 0)))
        return None

    def event_handler(self, state: int, event: Deposited) -> int:
        return state + event.amount

    def tags_for(self, event: Any) -> tuple[str, ...]:
        """Deposits are tagged for the read model's projection (read_model.py)."""
        return (TAG,) if type(event) is Deposited else ()


class LedgerTable(FeedTable):
    """The ledger as rows of one FeedTable, one per account: (entries, total); "totals" to its own path replies
    LedgerTotals over all of them."""

    def pre_start(self) -> None:
        """Count entries arriving again after being applied."""
        self.redelivered = 0

    def empty_state(self) -> tuple[int, int]:
        return (0, 0)

    def command_handler(self, entity_id: str, state: tuple[int, int], command: Any) -> list[Any] | None:
        """A Row carries an Entry: journaled as it is, once."""
        if type(command) is Row:
            if self.apply_row(command):
                return [command.body]
            self.redelivered += 1
        return None

    def event_handler(self, state: tuple[int, int], event: Entry) -> tuple[int, int]:
        return (state[0] + 1, state[1] + event.amount)

    def receive_command(self, message: Any, sender: str | None) -> None:
        """"totals" replies LedgerTotals."""
        if message == "totals":
            states = self.entity_states()
            self.tell(sender, LedgerTotals(sum(s[0] for s in states.values()), sum(s[1] for s in states.values()),
                                           {a: s[1] for a, s in states.items()}, self.redelivered))
        else:
            super().receive_command(message, sender)


def balances(system: actors.System, ids: list[str], timeout: float = 120.0) -> dict[str, BalanceOf]:
    """Ask every account in `ids` for its BalanceOf, in one round (one probe, many replies)."""
    probe = system.probe()
    system.tell_many([(f"{ACCOUNTS_PATH}/{a}", "balance") for a in ids], sender=probe.path)
    return {b.account: b for b in probe.receive_many(len(ids), timeout=timeout)}

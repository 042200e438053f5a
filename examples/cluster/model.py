"""The cluster example's entities: accounts that apply each fed row exactly once and count who brought it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from journal import register_type
from spark_bridge import FeedReceiver, Row


@register_type(manifest="reprise.examples.cluster.Deposited")
@dataclass(frozen=True)
class Deposited:
    """An account's event: a row's amount, and the bridge the row came through."""

    amount: int
    via: str


@dataclass(frozen=True)
class GetBalance:
    """Ask an account for its Balance."""


@dataclass(frozen=True)
class Balance:
    """An account's sum, how many rows it applied, and how many of them came through each bridge."""

    total: int
    rows: int
    via: dict[str, int] = field(default_factory=dict)


def deposit(txid: int, accounts: int) -> tuple[int, int]:
    """Row `txid`: (account number, amount), the same in Spark SQL (feed.ROWS_SQL) and in Python."""
    return (txid * 7_919) % accounts, (txid * 31) % 97 + 1


class Account(FeedReceiver):
    """Sums the `amount` of its rows; each row is applied once, through the journal (PostgreSQL here)."""

    def pre_start(self) -> None:
        """Start empty; recovery replays the deposits (on whichever node this shard runs now)."""
        self.total = 0
        self.rows = 0
        self.via: dict[str, int] = {}

    def receive_recover(self, event: Any) -> None:
        """Replay (or apply) a deposit."""
        if isinstance(event, Deposited):
            self.total += event.amount
            self.rows += 1
            self.via[event.via] = self.via.get(event.via, 0) + 1

    def receive_command(self, message: Any, sender: str | None) -> None:
        """A Row is applied once (a redelivered one is only confirmed again); GetBalance replies."""
        if isinstance(message, Row):
            self.apply_row(message, Deposited(int(message.body["amount"]), sender or "?"), self.receive_recover)
        elif isinstance(message, GetBalance) and sender is not None:
            self.tell(sender, Balance(self.total, self.rows, dict(self.via)))

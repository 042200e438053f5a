"""Accounts fed by a durable, at-least-once feeder: every deposit applied exactly once, even under SIGKILL."""

from __future__ import annotations

from dataclasses import dataclass

from journal import register_type
from persistence import DurableDelivery, IdempotentReceiver


@register_type(manifest="reprise.examples.Deposit")
@dataclass(frozen=True)
class Deposit:
    """Feeder -> account: add `amount` (delivery `delivery_id`, resent until confirmed)."""

    delivery_id: int
    amount: int


@register_type(manifest="reprise.examples.Deposited")
@dataclass(frozen=True)
class Deposited:
    """The account's event."""

    amount: int


@dataclass(frozen=True)
class FeedDeposits:
    """Client -> feeder: deliver deposits number `start` .. `start + count - 1`."""

    start: int
    count: int
    accounts: int


@dataclass(frozen=True)
class FeedStats:
    """Feeder -> client: deposits accepted and still unconfirmed."""

    accepted: int
    unconfirmed: int


def deposit(i: int, accounts: int) -> tuple[int, int]:
    """Deposit number `i`: (account id, amount), the same in every process."""
    return (i * 7_919) % accounts, (i * 31) % 97 + 1


class Account(IdempotentReceiver):
    """Applies each delivery once (dedup kept in its own journal) and confirms it once durable."""

    def __init__(self) -> None:
        self.balance = 0

    def receive_recover(self, event):
        if isinstance(event, Deposited):
            self._deposited(event)

    def _deposited(self, event: Deposited) -> None:
        self.balance += event.amount

    def tags_for(self, event):
        # For the read model's projection (read_model.py): deposits by tag, in offset order.
        return ("deposit",) if isinstance(event, Deposited) else ()

    def receive_command(self, message, sender):
        if isinstance(message, Deposit):
            # Applied once, confirmed once durable; a redelivery is confirmed again without applying.
            self.apply_and_confirm(sender, message.delivery_id, Deposited(message.amount), self._deposited)
        elif message == "balance":
            self.tell(sender, (self.entity_id, self.balance))


class Feeder(DurableDelivery):
    """Journals each deposit it sends and resends it until the account confirms."""

    redeliver_interval = 1.0

    def __init__(self) -> None:
        self.accepted = 0

    def receive_recover(self, event):
        pass

    def receive_command(self, message, sender):
        if isinstance(message, FeedDeposits):
            for i in range(message.start, message.start + message.count):
                account, amount = deposit(i, message.accounts)
                self.deliver(f"/user/accounts/{account}", lambda delivery_id, a=amount: Deposit(delivery_id, a))
            self.accepted += message.count
            # Acknowledge once every delivery above is journaled (DeliveriesSent) (defer_async runs after their
            # handlers): a feeder killed before that must not have acknowledged deposits it forgot.
            self.defer_async(FeedStats(self.accepted, self.number_of_unconfirmed),
                             lambda stats, sender=sender: self.tell(sender, stats))
        elif message == "stats":
            self.tell(sender, FeedStats(self.accepted, self.number_of_unconfirmed))

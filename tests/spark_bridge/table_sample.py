"""FeedTable samples for tests/spark_bridge/test_feed_table.py (importable by host processes).

Rows are told by the test itself as a bridge would deliver them (`Row(..., bridge=probe.path)`), so the test's
probe receives their confirmations (spark_bridge.Confirmed) without Spark.
"""

from __future__ import annotations

from typing import Any

import actors
from spark_bridge import FeedReceiver, FeedTable, Row, ack
from tests.spark_bridge.sample import Deposited, LedgerEntry, Posted


def row(delivery_id: int, bridge: str, amount: int = 1, posts: int = 1, fail: bool = False) -> Row:
    """A row as a bridge at `bridge` delivers it: {"amount", "posts" (follow-ups to send), "fail" (raise)}."""
    return Row(delivery_id, {"amount": amount, "posts": posts, "fail": fail}, delivery_id, 0, None, bridge)


class Posting(FeedTable):
    """Accounts whose rows each send `posts` LedgerEntry follow-ups to `ledger`; a row with "fail" raises after
    apply_row (its command is dropped). "balance" and "unconfirmed" reply."""

    redeliver_interval = 1.0
    snapshot_every = 3

    def __init__(self, ledger: str) -> None:
        self.ledger = ledger

    def empty_state(self) -> int:
        return 0

    def command_handler(self, entity_id: str, state: int, command: Any) -> list[Any] | None:
        if type(command) is Row:
            body = command.body
            posts = [(self.ledger, LedgerEntry(entity_id, body["amount"])) for _ in range(body["posts"])]
            new = self.apply_row(command, posts)
            if body["fail"]:
                raise ValueError(f"row {command.delivery_id} asked to fail")
            return [Deposited(body["amount"])] if new else None
        if command == "balance":
            self.reply(self.sender, state)
        elif command == "unconfirmed":
            self.reply(self.sender, self.unconfirmed_follow_ups)
        return None

    def event_handler(self, state: int, event: Deposited) -> int:
        return state + event.amount


class Holder(actors.Actor):
    """A receiver that confirms nothing until told "release" (then everything, at once from then on) and
    remembers every delivery it got: "got" replies [(delivery id, entry's amount, row.bridge), ...]."""

    def pre_start(self) -> None:
        """Holding, nothing got."""
        self.holding = True
        self.held: list[Row] = []
        self.got: list[tuple[int, int, str | None]] = []

    def receive(self, message: Any, sender: str | None) -> None:
        """Rows are held or confirmed; "release", "hold" and "got" as above."""
        if isinstance(message, Row):
            self.got.append((message.delivery_id, message.body.amount, message.bridge))
            if self.holding:
                self.held.append(message)
            else:
                ack(self, message)
        elif message == "release":
            self.holding = False
            for r in self.held:
                ack(self, r)
            self.held = []
            self.tell(sender, "released")
        elif message == "got":
            self.tell(sender, list(self.got))


class Forgetful(actors.Actor):
    """Drops the first delivery of every follow-up (as a receiver killed before it confirmed would) and confirms
    the next: "got" replies how many deliveries it saw."""

    def pre_start(self) -> None:
        """Nothing seen."""
        self.seen: set[tuple[str | None, int]] = set()
        self.deliveries = 0

    def receive(self, message: Any, sender: str | None) -> None:
        """Drop or confirm; "got" replies the count."""
        if isinstance(message, Row):
            self.deliveries += 1
            key = (message.bridge, message.delivery_id)
            if key in self.seen:
                ack(self, message)
            else:
                self.seen.add(key)
        elif message == "got":
            self.tell(sender, self.deliveries)


class TableLedger(FeedTable):
    """A durable ledger as rows of a FeedTable, per account: (entries, total); "totals" to its own path."""

    def empty_state(self) -> tuple[int, int]:
        return (0, 0)

    def command_handler(self, entity_id: str, state: tuple[int, int], command: Any) -> list[Any] | None:
        if type(command) is Row:
            return [Posted(command.body.amount)] if self.apply_row(command) else None
        return None

    def event_handler(self, state: tuple[int, int], event: Posted) -> tuple[int, int]:
        return (state[0] + 1, state[1] + event.amount)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "totals":
            states = self.entity_states().values()
            self.tell(sender, (sum(s[0] for s in states), sum(s[1] for s in states)))


class AuditingLedger(FeedReceiver):
    """A durable ledger (one actor) that applies each entry once and sends a follow-up of it to /user/audit."""

    def pre_start(self) -> None:
        """Empty; recovery replays the postings."""
        self.entries = 0
        self.total = 0

    def receive_recover(self, event: Any) -> None:
        """Replay a posting."""
        if isinstance(event, Posted):
            self.entries += 1
            self.total += event.amount

    def receive_command(self, message: Any, sender: str | None) -> None:
        """A Row carries a LedgerEntry; "totals" replies (entries, total)."""
        if isinstance(message, Row):
            entry = message.body
            self.apply_row(message, Posted(entry.amount), self.receive_recover,
                           follow_ups=[("/user/audit", LedgerEntry(entry.account, entry.amount))])
        elif message == "totals":
            self.tell(sender, (self.entries, self.total))

"""EntityTable samples for tests/persistence/test_entity_table.py (importable by host processes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from actors.messages import Scatter
from journal import register_type
from persistence import Confirm, EntityTable


@dataclass(frozen=True)
class Deposit:
    """Add `amount` to the account once for delivery `delivery_id` from `origin` (confirmed when durable)."""

    origin: str
    delivery_id: int
    amount: int


@dataclass(frozen=True)
class DepositChunk(Scatter):
    """Deposits for many accounts in one message, as the Spark bridge sends rows (a Scatter: columns)."""

    targets: list[str]
    delivery_ids: list[int]
    amounts: list[int]

    def items(self) -> list[tuple[str, Deposit]]:
        return [(t, Deposit("/chunks", d, a)) for t, d, a in zip(self.targets, self.delivery_ids, self.amounts,
                                                                 strict=True)]


@register_type(manifest="tests.table.Deposited")
@dataclass(frozen=True)
class Deposited:
    amount: int


@dataclass(frozen=True)
class Withdraw:
    """Take `amount` out; refused (an exception: the command is dropped) below zero."""

    amount: int


@register_type(manifest="tests.table.Withdrew")
@dataclass(frozen=True)
class Withdrew:
    amount: int


@dataclass(frozen=True)
class DepositTwice:
    """Deposit `amount` twice (two events of one command), once for delivery `delivery_id`; with `poisoned`,
    a third event that event_handler refuses, so the whole command fails."""

    origin: str
    delivery_id: int
    amount: int
    poisoned: bool = False


@dataclass(frozen=True)
class Poison:
    """An event event_handler raises on."""


class Accounts(EntityTable):
    """A balance per account; "balance" asks for it (answered once everything before it is durable)."""

    snapshot_every = 5

    def empty_state(self) -> int:
        return 0

    def command_handler(self, entity_id: str, state: int, command: Any) -> list[Any] | None:
        if type(command) is Deposit:
            self.reply(self.sender, Confirm(command.delivery_id))
            return [Deposited(command.amount)] if self.apply_once(command.origin, command.delivery_id) else []
        if type(command) is DepositTwice:
            self.reply(self.sender, Confirm(command.delivery_id))
            if not self.apply_once(command.origin, command.delivery_id):
                return []
            return [Deposited(command.amount), Deposited(command.amount), *([Poison()] if command.poisoned else [])]
        if type(command) is Withdraw:
            if command.amount > state:
                raise ValueError(f"{entity_id} has {state}, cannot withdraw {command.amount}")
            return [Withdrew(command.amount)]
        if command == "balance":
            self.reply(self.sender, state)
        elif command == "not a list":
            return Deposited(1)  # type: ignore[return-value]  # (the mistake the test checks)
        elif command == "zero":
            return 0  # type: ignore[return-value]  # (a falsy mistake: not "no events")
        elif command == "path":
            self.reply(self.sender, self.entity_path)
        elif command == "unpicklable reply":
            self.reply(self.sender, lambda: "a function cannot be pickled")
        return None

    def event_handler(self, state: int, event: Any) -> int:
        if type(event) is Deposited:
            return state + event.amount
        if type(event) is Withdrew:
            return state - event.amount
        if type(event) is Poison:
            raise ValueError("a poisoned event")
        return state

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "count":
            self.tell(sender, self.entity_count())
        elif message == "sequence_nr":
            self.tell(sender, self.last_sequence_nr)
        else:
            super().receive_command(message, sender)

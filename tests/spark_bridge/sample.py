"""Destination actors for the spark_bridge tests (importable by host processes)."""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import actors
from journal import register_type
from journal.serialization import store_values_with
from spark_bridge import FeedReceiver, FeedTable, Row, SparkBridge, ack


@dataclass(frozen=True)
class GetBalance:
    """Ask an account (or the ledger) for its Balance."""


@dataclass(frozen=True)
class Balance:
    """A sum of amounts, how many deliveries were applied, and how many arrived again after being applied."""

    total: int
    applied: int
    repeated: int


@register_type(manifest="tests.spark_bridge.Deposited")
@dataclass(frozen=True)
class Deposited:
    """A durable account's event."""

    amount: int


@register_type(manifest="tests.spark_bridge.LedgerEntry")
@dataclass(frozen=True)
class LedgerEntry:
    """Account -> ledger follow-up, anchored to the deposit's row."""

    account: str
    amount: int


@register_type(manifest="tests.spark_bridge.Stamped")
@dataclass(frozen=True)
class Stamped:
    """An event holding a datetime and a date (stored as ISO strings: the journal's values have no time type)."""

    at: datetime.datetime
    day: datetime.date


store_values_with(Stamped, lambda s: [s.at.isoformat(), s.day.isoformat()],
                  lambda v: [datetime.datetime.fromisoformat(v[0]), datetime.date.fromisoformat(v[1])])


@register_type(manifest="tests.spark_bridge.Posted")
@dataclass(frozen=True)
class Posted:
    """The ledger's event."""

    amount: int


class Account(actors.Actor):
    """Sums `amount` of rows in memory; idempotent by the row's `txid`; confirms each row at once."""

    def pre_start(self) -> None:
        """Start empty."""
        self.total = 0
        self.txids: set[Any] = set()
        self.repeated = 0

    def receive(self, message: Any, sender: str | None) -> None:
        """A Row adds its amount once and is confirmed; GetBalance replies."""
        if isinstance(message, GetBalance):
            self.tell(sender, Balance(self.total, len(self.txids), self.repeated))
        elif isinstance(message, Row):
            body = message.body
            if body["txid"] in self.txids:
                self.repeated += 1
            else:
                self.txids.add(body["txid"])
                self.total += body["amount"]
            ack(self, message)


class DurableAccount(FeedReceiver):
    """Applies each row once through its journal; with `ledger`, posts an anchored follow-up per deposit."""

    def __init__(self, ledger: str | None = None) -> None:
        self.ledger = ledger

    def pre_start(self) -> None:
        """Start empty; recovery replays the deposits."""
        self.total = 0
        self.applied = 0
        self.repeated = 0

    def receive_recover(self, event: Any) -> None:
        """Replay a deposit."""
        if isinstance(event, Deposited):
            self.total += event.amount
            self.applied += 1

    def receive_command(self, message: Any, sender: str | None) -> None:
        """Rows are applied once (follow-ups ride along); GetBalance replies."""
        if isinstance(message, Row):
            amount = message.body["amount"]
            follow_ups = [(self.ledger, LedgerEntry(self.entity_id, amount))] if self.ledger else []
            if not self.apply_row(message, Deposited(amount), self.receive_recover, follow_ups):
                self.repeated += 1
        elif isinstance(message, GetBalance):
            self.tell(sender, Balance(self.total, self.applied, self.repeated))


class TableAccounts(FeedTable):
    """DurableAccount's accounts as rows of one FeedTable per host: (total, applied) per account; with `ledger`,
    a LedgerEntry follow-up per deposit."""

    def __init__(self, ledger: str | None = None) -> None:
        self.ledger = ledger

    def empty_state(self) -> tuple[int, int]:
        return (0, 0)

    def command_handler(self, entity_id: str, state: tuple[int, int], command: Any) -> list[Any] | None:
        if type(command) is Row:
            amount = command.value("amount")
            follow_ups = [(self.ledger, LedgerEntry(entity_id, amount))] if self.ledger else ()
            return [Deposited(amount)] if self.apply_row(command, follow_ups) else None
        if type(command) is GetBalance:
            self.reply(self.sender, Balance(state[0], state[1], 0))
        return None

    def event_handler(self, state: tuple[int, int], event: Deposited) -> tuple[int, int]:
        return (state[0] + event.amount, state[1] + 1)


class Ledger(FeedReceiver):
    """Posts ledger entries in rounds on a timer (like a batching writer): confirmations come late."""

    round_seconds = 0.3

    def pre_start(self) -> None:
        """Start empty."""
        self.total = 0
        self.applied = 0
        self.repeated = 0
        self.waiting: list[Row] = []

    def receive_recover(self, event: Any) -> None:
        """Replay a posting."""
        if isinstance(event, Posted):
            self.total += event.amount
            self.applied += 1

    def receive_command(self, message: Any, sender: str | None) -> None:
        """Entries wait for the next round; GetBalance replies."""
        if isinstance(message, Row):
            if not self.waiting:
                self.schedule_once(self.round_seconds, "post")
            self.waiting.append(message)
        elif message == "post":
            rows, self.waiting = self.waiting, []
            for row in rows:
                if not self.apply_row(row, Posted(row.body.amount), self.receive_recover):
                    self.repeated += 1
        elif isinstance(message, GetBalance):
            self.tell(sender, Balance(self.total, self.applied, self.repeated))
        elif message == "waiting":  # (a stalled test's report: rows waiting for a round that never came)
            self.tell(sender, len(self.waiting))


class Deaf(actors.Actor):
    """Takes rows and never confirms them (for processed-mode timeouts)."""

    def receive(self, message: Any, sender: str | None) -> None:
        """Ignore everything."""


class Trickle(actors.Actor):
    """Confirms one row every `every` seconds, in order (a destination slower than the feed's timeout in
    total, yet never stalled)."""

    every = 0.1

    def pre_start(self) -> None:
        """Nothing waiting."""
        self.waiting: list[Row] = []

    def receive(self, message: Any, sender: str | None) -> None:
        """Rows wait their turn; each tick confirms the oldest."""
        if isinstance(message, Row):
            if not self.waiting:
                self.schedule_once(self.every, "tick")
            self.waiting.append(message)
        elif message == "tick" and self.waiting:
            ack(self, self.waiting.pop(0))
            if self.waiting:
                self.schedule_once(self.every, "tick")


class SnapshottingBridge(SparkBridge):
    """The bridge with a snapshot every 20 stored batches, so that tests recover from snapshots."""

    snapshot_every = 20


class TrickleBridge(SparkBridge):
    """A bridge that fans out 10 rows at a time: a SIGKILL finds rows released and not delivered yet."""

    fan_out_window = 10
    fan_out_chunk = 10
    fan_out_chunk_busy = 10


class TrickleSnapshottingBridge(TrickleBridge):
    """TrickleBridge with a snapshot after every stored batch or release: recovery starts from a snapshot taken
    mid fan-out."""

    snapshot_every = 1


def fail_first_attempt_halfway(txid: int):
    """A message callable that raises in partition 0's first attempt once it reaches `txid`."""
    def message(row: Any) -> dict:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and row["txid"] >= txid:
            raise RuntimeError("injected failure halfway through partition 0 (first attempt)")
        return row.asDict()
    return message


def with_a_set_of_dates(row: Any) -> dict:
    """A message callable whose dict holds a value msgpack cannot carry."""
    import datetime

    return {"amount": row["amount"], "when": datetime.date(2026, 11, 21)}


class SpillingBridge(SparkBridge):
    """A bridge that keeps only 1,000 backlog rows in memory (the rest is read back from its journal)."""

    backlog_in_memory = 1_000
    snapshot_every = 10


class NarrowSpillingBridge(SpillingBridge):
    """A bridge that keeps no backlog row in memory and sends at most 300 rows unconfirmed, so it sends each batch
    of 500 over several fan-out turns, reading it back from its journal; "reads" answers (reads, batches read)."""

    backlog_in_memory = 0
    fan_out_window = 300

    def pre_start(self) -> None:
        super().pre_start()
        self.reads: dict[int, int] = {}

    def _load(self, seq: int) -> Any:
        self.reads[seq] = self.reads.get(seq, 0) + 1
        return super()._load(seq)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "reads":
            self.tell(sender, (sum(self.reads.values()), len(self.reads)))
        else:
            super().receive_command(message, sender)


class EagerBridge(SparkBridge):
    """A bridge that redelivers after 1 s (tests that lose deliveries need not wait 10 s)."""

    redeliver_interval = 1.0
    redelivery_backoff = (1.0, 4.0, 2.0)


class EverySnapshotBridge(SparkBridge):
    """A bridge that snapshots after every stored batch (snapshot format tests)."""

    snapshot_every = 1

"""Destination actors for the spark_bridge tests (importable by host processes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import actors


@dataclass(frozen=True)
class GetBalance:
    """Ask an account for its Balance."""


@dataclass(frozen=True)
class Balance:
    """An account's sum of amounts, how many deposits it applied, and how many it saw twice."""

    total: int
    applied: int
    repeated: int


class Account(actors.Actor):
    """Sums `amount` of row dicts; idempotent by the row's `txid` so a redelivery is never applied twice."""

    def pre_start(self) -> None:
        """Start empty."""
        self.total = 0
        self.txids: set[Any] = set()
        self.repeated = 0

    def receive(self, message: Any, sender: str | None) -> None:
        """A row dict adds its amount once; GetBalance replies."""
        if isinstance(message, GetBalance):
            self.tell(sender, Balance(self.total, len(self.txids), self.repeated))
        elif isinstance(message, dict):
            if message["txid"] in self.txids:
                self.repeated += 1
                return
            self.txids.add(message["txid"])
            self.total += message["amount"]


def fail_first_attempt_halfway(txid: int):
    """A message callable that raises in partition 0's first attempt once it reaches `txid`."""
    def message(row: Any) -> dict:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx.partitionId() == 0 and ctx.attemptNumber() == 0 and row["txid"] >= txid:
            raise RuntimeError("injected failure halfway through partition 0 (first attempt)")
        return row.asDict()
    return message

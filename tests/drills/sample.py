"""Actors for the drills (importable by actor processes)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from examples.accounts.model import Account


@dataclass(frozen=True)
class RecoveryRefused:
    """ReportingAccount -> observer: its recovery failed with `error` (the exception's type name)."""

    path: str
    error: str
    message: str
    persistence_id: str | None
    sequence_nr: int | None


class ReportingAccount(Account):
    """The example's Account, telling `report_to` why its recovery failed (the exception cannot travel)."""

    def __init__(self, report_to: str) -> None:
        super().__init__()
        self.report_to = report_to

    def on_recovery_failure(self, cause: BaseException, event: Any | None) -> None:
        super().on_recovery_failure(cause, event)
        self.tell(self.report_to, RecoveryRefused(self.path, type(cause).__name__, str(cause),
                                                  getattr(cause, "persistence_id", None),
                                                  getattr(cause, "sequence_nr", None)))

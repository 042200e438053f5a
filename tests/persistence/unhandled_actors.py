"""Actors of the unhandled-failure cases in tests/persistence/test_akka_conformance.py (importable by module path).

Their journal's deletes fail (spec_actors' "faildelete" scheme, Akka's EventSourcedActorDeleteFailureSpec) and,
with no snapshot store configured, so do snapshot saves and deletes (Akka's NoSnapshotStore).
"""

from __future__ import annotations

from typing import Any

from journal import MAX_SEQUENCE_NR, SnapshotSelectionCriteria
from persistence import (
    DeleteMessagesFailure,
    DeleteSnapshotFailure,
    DeleteSnapshotsFailure,
    PersistentActor,
    SaveSnapshotFailure,
)
from tests.persistence.conformance_actors import ReportsToProbe
from tests.persistence.spec_actors import FailingDeleteJournal  # noqa: F401 - registers the faildelete:// scheme


class IgnoresFailures(ReportsToProbe, PersistentActor):
    """"save", "delete-snapshot", "delete-snapshots" and "delete-messages" each start the operation, which fails;
    its failure is not handled: this class names none of the failure types, and tells the probe ("other", type)."""

    @property
    def journal_url(self) -> str:
        return "faildelete://" + str(self.config["journal"]).partition("://")[2] + ".delfail"

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "save":
            self.save_snapshot("state")
        elif message == "delete-snapshot":
            self.delete_snapshot(1)
        elif message == "delete-snapshots":
            self.delete_snapshots(SnapshotSelectionCriteria(max_sequence_nr=MAX_SEQUENCE_NR))
        elif message == "delete-messages":
            self.delete_messages(MAX_SEQUENCE_NR)
        else:
            self.tell(self.probe, ("other", type(message).__name__))


class HandlesFailures(IgnoresFailures):
    """The same, handling each failure (in a helper its receive_command calls): tells the probe ("handled", type)."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if not self._handled(message):
            super().receive_command(message, sender)

    def _handled(self, message: Any) -> bool:
        match message:
            case SaveSnapshotFailure() | DeleteSnapshotFailure() | DeleteSnapshotsFailure() | DeleteMessagesFailure():
                self.tell(self.probe, ("handled", type(message).__name__))
                return True
        return False

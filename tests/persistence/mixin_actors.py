"""A third-party mixin written against PersistentActor's public mixin_* hooks only, and an actor using it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence import PersistentActor, RecoveryCompleted, SaveSnapshotSuccess, SnapshotOffer


@dataclass(frozen=True)
class Bump:
    """The mixin's own command: count one."""


@register_type
@dataclass(frozen=True)
class Bumped:
    """The mixin's own event."""


@register_type
@dataclass(frozen=True)
class CountedSnapshot:
    """The mixin's part of a snapshot, around the user's."""

    bumps: int
    state: Any


class Counted(PersistentActor):
    """Counts Bump commands durably; the application below never sees Bump, Bumped or CountedSnapshot."""

    def mixin_init(self) -> None:
        super().mixin_init()
        self.bumps = 0

    def mixin_command(self, message: Any, sender: str | None) -> None:
        if type(message) is Bump:
            self.persist(Bumped(), self._count)
        else:
            super().mixin_command(message, sender)

    def mixin_recover_event(self, event: Any) -> None:
        if type(event) is Bumped:
            self._count(event)
        else:
            super().mixin_recover_event(event)

    def mixin_recover_snapshot(self, offer: SnapshotOffer) -> None:
        if isinstance(offer.snapshot, CountedSnapshot):
            self.bumps = offer.snapshot.bumps
            offer = SnapshotOffer(offer.metadata, offer.snapshot.state)
        super().mixin_recover_snapshot(offer)

    def mixin_wrap_snapshot(self, snapshot: Any) -> Any:
        return CountedSnapshot(self.bumps, super().mixin_wrap_snapshot(snapshot))

    def _count(self, _: Bumped) -> None:
        self.bumps += 1


class Notes(Counted):
    """Keeps notes (str commands); "snap" saves a snapshot (replies "saved"); "state" replies
    (bumps, notes, what recovery saw)."""

    def pre_start(self) -> None:
        self.notes: list[str] = []
        self.recovered: list[Any] = []
        self.snap_requester: str | None = None

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.notes = list(event.snapshot)
            self.recovered.append(("offer", event.snapshot))
        elif isinstance(event, RecoveryCompleted):
            self.recovered.append("completed")
        else:
            self.notes.append(event)
            self.recovered.append(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "snap":
            self.snap_requester = sender
            self.save_snapshot(tuple(self.notes))
        elif type(message) is SaveSnapshotSuccess:
            self.tell(self.snap_requester, "saved")
        elif message == "state":
            self.tell(sender, (self.bumps, self.notes, self.recovered))
        elif message == "stop":
            self.stop()
            self.tell(sender, ("stop_requested", self.stop_requested))
        elif isinstance(message, str):
            self.persist(message, lambda e: self.notes.append(e))
        else:
            self.tell(sender, ("unhandled", type(message).__name__))

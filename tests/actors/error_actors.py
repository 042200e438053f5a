"""Actors for tests/actors/test_errors.py: persistent ones whose journal rejects or whose snapshots fail."""

from __future__ import annotations

from dataclasses import dataclass

from thespian.actors import DeadEnvelope

import actors
from persistence import PersistentActor, SaveSnapshotFailure, SaveSnapshotSuccess
from tests.actors.sample import Seq
from tests.thespian_retry import retry_first_send


@dataclass(frozen=True)
class NotRegistered:
    """Picklable but not registered with the journal's serializer: persisting it is rejected."""

    n: int


class Keeper(PersistentActor):
    """Persists strings; "snap" saves a snapshot and reports the outcome; "bad" persists a NotRegistered."""

    def pre_start(self) -> None:
        self.state: list = []
        self.report = None

    def receive_recover(self, event):
        if isinstance(event, str):
            self.state.append(event)

    def receive_command(self, message, sender):
        if message == "snap":
            self.report = sender
            self.save_snapshot(tuple(self.state))
        elif isinstance(message, SaveSnapshotSuccess):
            self.tell(self.report, "saved")
        elif isinstance(message, SaveSnapshotFailure):
            self.tell(self.report, (type(message.cause).__name__, str(message.cause)))
        elif message == "bad":
            self.persist(NotRegistered(1), lambda e: self.tell(sender, "stored?!"))
        elif isinstance(message, str):
            self.persist(message, lambda e: (self.state.append(e), self.tell(sender, len(self.state))))


@dataclass(frozen=True)
class Stream:
    """Ask a Streamer to send `count` numbered ("fwd", report, Seq) messages to `target`, `per_tick` every 2 ms."""

    target: str
    report: str
    count: int
    per_tick: int = 5


class Streamer(actors.Actor):
    """An actor sender whose stream spans a while (timers), so a receiver can be killed in the middle of it."""

    def receive(self, message, sender):
        if isinstance(message, Stream):
            self.job, self.next = message, 0
            self.timer = self.schedule_repeatedly(0.002, "tick")
            self.tell(sender, "started")
        elif message == "tick":
            job = self.job
            for i in range(self.next, min(job.count, self.next + job.per_tick)):
                self.tell(job.target, ("fwd", job.report, Seq(self.path, i)))
            self.next = min(job.count, self.next + job.per_tick)
            if self.next >= job.count:
                self.timer.cancel()


class SlowBounceStreamer(Streamer):
    """A Streamer whose process sends the first batch that bounced back to the guardian only a second late;
    "held back" answers how many it held back (0 or 1)."""

    def receive(self, message, sender):
        if isinstance(message, Stream):
            self.held = retry_first_send(DeadEnvelope, after=1.0)
        elif message == "held back":
            self.tell(sender, len(self.held))
            return
        super().receive(message, sender)

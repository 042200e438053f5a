"""Actors for tests/actors/test_errors.py: persistent ones whose journal rejects or whose snapshots fail."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import timedelta

from thespian.actors import DeadEnvelope
from thespian.system.timing import ExpirationTimer
from thespian.system.transport.TCPTransport import TCPTransport

import actors
from persistence import PersistentActor, SaveSnapshotFailure, SaveSnapshotSuccess
from tests.actors.sample import Seq


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


_held_back: list[float] = []  # (in the process that installed the delay) when each held-back send was made


def _hold_back_the_first_dead_envelope(seconds: float) -> None:
    """Make this process's Thespian transport wait `seconds` to send its first DeadEnvelope, as it waits for a
    retry after a connection both ends wrote on at once (kquick#19), while later sends to the guardian go on."""
    original = TCPTransport._scheduleTransmitActual
    if getattr(original, "holds_back", False):
        return

    def schedule(self, intent, has_exclusive_flag=False):
        if isinstance(intent.message, DeadEnvelope) and not _held_back:
            _held_back.append(time.monotonic())
            intent.stage = self._XMITStepSendConnect
            intent._retryTime = ExpirationTimer(timedelta(seconds=seconds))
            self._waitingTransmits.append(intent)
            return None
        return original(self, intent, has_exclusive_flag)

    schedule.holds_back = True
    TCPTransport._scheduleTransmitActual = schedule


class SlowBounceStreamer(Streamer):
    """A Streamer whose process sends the first batch that bounced back to the guardian only a second late;
    "held back" answers how many it held back (0 or 1)."""

    def receive(self, message, sender):
        if isinstance(message, Stream):
            _hold_back_the_first_dead_envelope(1.0)
        elif message == "held back":
            self.tell(sender, len(_held_back))
            return
        super().receive(message, sender)

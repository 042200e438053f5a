"""Actors of the settle-fairness tests: an entity that keeps telling itself, next to one that answers."""

from __future__ import annotations

import time
from dataclasses import dataclass

import actors


@dataclass(frozen=True)
class Spin:
    """Tell yourself this again until `until` (time.time()); tell `reply_to` "spinning" first, then
    ("spun", count) once done."""

    until: float
    reply_to: str
    count: int = 0


class SelfSender(actors.Actor):
    """On Spin, keeps telling itself the next Spin (one local delivery each); answers ("pong", n) to ("ping", n)."""

    def receive(self, message, sender):
        if isinstance(message, Spin):
            if message.count == 0:
                self.tell(message.reply_to, "spinning")
            if time.time() < message.until:
                self.tell(self.path, Spin(message.until, message.reply_to, message.count + 1))
            else:
                self.tell(message.reply_to, ("spun", message.count))
        elif isinstance(message, tuple) and message[0] == "ping":
            self.tell(sender, ("pong", message[1]))


@dataclass(frozen=True)
class Measure:
    """Ask a Pinger to tell `spinner` Spin(until, reply_to), then ping `other` every `every` s while it spins and
    tell `reply_to` ("latencies", [seconds per ping], pinged while spinning) when it stops."""

    spinner: str
    other: str
    until: float
    reply_to: str
    every: float = 0.25


class Pinger(actors.Actor):
    """Measures, from another host, how long an entity takes to answer while its neighbour spins (Measure)."""

    def receive(self, message, sender):
        if isinstance(message, Measure):
            self.measure = message
            self.latencies: list[float] = []
            self.sent_at = 0.0
            self.tell(message.spinner, Spin(message.until, message.reply_to))
            self.schedule_once(message.every, "tick")
        elif message == "tick":
            self.sent_at = time.monotonic()
            self.tell(self.measure.other, ("ping", len(self.latencies)))
        elif isinstance(message, tuple) and message[0] == "pong":
            self.latencies.append(time.monotonic() - self.sent_at)
            if time.time() < self.measure.until - self.measure.every:
                self.schedule_once(self.measure.every, "tick")
            else:
                self.tell(self.measure.reply_to, ("latencies", self.latencies))

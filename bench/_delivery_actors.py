"""Actors of the delivery benchmark: a DurableDelivery producer and an IdempotentReceiver consumer.

Set REPRISE_BENCH_PROFILE=DIR to write a cProfile of each host process to DIR/<actor>.prof.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence import Confirm, ConfirmDeliveries, DurableDelivery, IdempotentReceiver, PersistentActor


@register_type(manifest="bench.delivery.Work")
@dataclass(frozen=True)
class Work:
    """The delivered message: its delivery id and a small payload."""

    delivery_id: int
    n: int


@dataclass(frozen=True)
class Run:
    """Deliver `count` messages to `destination` (`chunk` per journal write), then tell `reply_to` once all
    are confirmed."""

    count: int
    destination: str
    reply_to: str
    chunk: int = 1000
    window: int = 20_000
    """At most this many unconfirmed deliveries (back-pressure; below max_unconfirmed_messages)."""


@dataclass(frozen=True)
class PersistLoop:
    """Persist `count` events, one per command, each command sent by the previous event's handler; then
    tell `reply_to` ("done", path)."""

    count: int
    reply_to: str


@dataclass(frozen=True)
class NextPersist:
    """One command of a PersistLoop: persist one event (`left` counts down), then send the next command."""

    left: int
    reply_to: str


def cpu_seconds() -> float:
    """CPU seconds (user + system) this process has used."""
    t = os.times()
    return t.user + t.system


class _Profiled:
    """Profiles the host process from pre_start to post_stop when REPRISE_BENCH_PROFILE is set."""

    def _start_profile(self) -> None:
        self._profile = None
        where = os.environ.get("REPRISE_BENCH_PROFILE")
        if where:
            import cProfile
            self._profile = cProfile.Profile()
            self._profile.enable()
            self._profile_to = os.path.join(where, self.path.strip("/").replace("/", "_") + ".prof")

    def _stop_profile(self) -> None:
        if getattr(self, "_profile", None) is not None:
            self._profile.disable()
            self._profile.dump_stats(self._profile_to)
            self._profile = None


class BenchProducer(_Profiled, DurableDelivery):
    """Delivers in chunks, each once the previous one is journaled; reports when all are confirmed."""

    redeliver_interval = 5.0

    def pre_start(self) -> None:
        self._start_profile()
        self.run: Run | None = None
        self.sent = 0
        self.blocked = False

    def post_stop(self) -> None:
        self._stop_profile()

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if type(message) is Run:
            self.run, self.sent = message, 0
            self._produce()
        elif message == "cpu":
            self.tell(sender, cpu_seconds())

    def _produce(self) -> None:
        run = self.run
        end = min(run.count, self.sent + run.chunk, self.sent + run.window - self.number_of_unconfirmed)
        if end <= self.sent:
            self.blocked = True  # the window is full: confirmations resume production
            return
        self.blocked = False
        deliver, destination = self.deliver, run.destination
        for n in range(self.sent, end):
            deliver(destination, lambda i, n=n: Work(i, n))
        self.sent = end
        if end < run.count:
            # The next chunk once this one is journaled and on its way: production streams, overlapping
            # the consumer's work, instead of journaling every delivery before the first one leaves.
            self.defer_async(None, self._more)

    def _more(self, _: Any) -> None:
        if self.run is not None:
            self._produce()

    def receive(self, message: Any, sender: str | None) -> None:
        super().receive(message, sender)
        if type(message) is ConfirmDeliveries:
            run = self.run
            if run is not None and self.blocked:
                self._produce()
            elif run is not None and self.sent == run.count and not self.number_of_unconfirmed:
                self.run = None
                # Done once the confirmed events are durable too (the deferral runs after them).
                self.defer_async(run, lambda r: self.tell(r.reply_to, ("done", r.count)))


class BenchConsumer(_Profiled, IdempotentReceiver):
    """Applies each Work once; confirms what one group commit made durable in one message per producer."""

    def pre_start(self) -> None:
        self._start_profile()
        self.total = 0
        self._to_confirm: dict[str, list[int]] = {}

    def post_stop(self) -> None:
        self._stop_profile()

    def receive_recover(self, event: Any) -> None:
        if type(event) is int:
            self.total += event

    def receive_command(self, message: Any, sender: str | None) -> None:
        if type(message) is Work:
            delivery_id = message.delivery_id
            if not self.persist_applied(sender, delivery_id, message.n,
                                        lambda n: self._applied(n, sender, delivery_id)):
                # A duplicate: confirm again, once its original is durable (confirm_duplicate: not if rejected).
                self.confirm_duplicate(sender, delivery_id, lambda: self.tell(sender, Confirm(delivery_id)))
        elif message == "cpu":
            self.tell(sender, cpu_seconds())

    def _applied(self, n: int, origin: str, delivery_id: int) -> None:
        self.total += n
        ids = self._to_confirm.get(origin)
        if ids is None:
            ids = self._to_confirm[origin] = []
            # Deferred from a handler: it runs after the handlers of this whole write, so one
            # ConfirmDeliveries carries every delivery that this commit made durable.
            self.defer_async(None, self._confirm_applied)
        ids.append(delivery_id)

    def _confirm_applied(self, _: Any) -> None:
        to_confirm, self._to_confirm = self._to_confirm, {}
        for origin, ids in to_confirm.items():
            self.tell(origin, ConfirmDeliveries(tuple(ids)))


class BenchPersister(_Profiled, PersistentActor):
    """Persists one event per command; the event's handler replies by sending the actor its next command, so
    a command is only handled once the previous event is durable (a closed loop, no pipelining)."""

    def pre_start(self) -> None:
        self._start_profile()

    def post_stop(self) -> None:
        self._stop_profile()

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if type(message) is NextPersist:
            if message.left <= 0:
                self.tell(message.reply_to, ("done", self.path))
            else:
                self.persist(message.left, lambda left: self.tell(self.path, NextPersist(left - 1, message.reply_to)))
        elif type(message) is PersistLoop:
            self.tell(self.path, NextPersist(message.count, message.reply_to))
        elif message == "cpu":
            self.tell(sender, cpu_seconds())

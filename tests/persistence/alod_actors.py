"""Actors of AtLeastOnceDeliveryCrashSpec and AtLeastOnceDeliveryFailureSpec (the chaos spec), reference §4.4.

Randomness is seeded: every random decision comes from `rng(seed, role)`, so a failing run can be repeated
with its seed (up to the scheduling of the processes involved).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

import actors
from journal import MAX_SEQUENCE_NR, JournalError, open_journal, register_type
from persistence import AtLeastOnceDelivery, IllegalStateError, register_scheme

S = 0.3  # 1 s of Akka's specs is S seconds here (as in test_at_least_once_delivery.py)

_rngs: dict[tuple[int, str], random.Random] = {}


def rng(seed: int, role: str) -> random.Random:
    """The process's random source for one role of one seeded run."""
    r = _rngs.get((seed, role))
    if r is None:
        r = _rngs[(seed, role)] = random.Random(f"{seed}/{role}")
    return r


class TestError(RuntimeError):
    """An injected processing failure."""


# ---- AtLeastOnceDeliveryCrashSpec ------------------------------------------------------------------------

class CrashingSender(AtLeastOnceDelivery):
    """Persists "message" (handler: deliver to the probe) and "crash" (handler: reply); replaying "crash" throws."""

    redeliver_interval = 5.0 * S  # Akka's default interval, scaled

    def __init__(self, client: str) -> None:
        self.client = client

    @property
    def probe(self) -> str:
        return f"{self.client}/{self.entity_id}"

    def _deliver(self) -> None:
        self.deliver(self.probe, lambda i: ("SendingMessage", i))

    def receive_recover(self, event: Any) -> None:
        if event == "message":
            self._deliver()
        elif event == "crash":
            raise IllegalStateError("crash while replaying")

    def on_recovery_failure(self, cause: BaseException, event: Any | None) -> None:
        self.tell(self.probe + "-reports", ("recovery failure", str(cause), self.number_of_unconfirmed))

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "message":
            self.persist("message", lambda e: self._deliver())
        elif message == "crash":
            self.persist("crash", lambda e: self.tell(sender, "ConfirmCrashMessage"))


# ---- AtLeastOnceDeliveryFailureSpec (chaos) --------------------------------------------------------------

WRITE_FAILURE, REPLAY_FAILURE, READ_HIGHEST_FAILURE, DELETE_FAILURE = 0.3, 0.25, 0.1, 0.3
LIVE_PROCESSING_FAILURE, REPLAY_PROCESSING_FAILURE, CONFIRM_FAILURE = 0.3, 0.1, 0.3
NUM_MESSAGES = 10


class ChaosJournal:
    """Akka's ChaosJournal around a real journal: writes, replays, highest-seq reads and deletes fail at
    random (a failed replay first replays a random prefix of the events, as Akka's does)."""

    def __init__(self, inner: Any, seed: int) -> None:
        self.inner = inner
        self.rng = rng(seed, "journal")

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def _fails(self, rate: float) -> bool:
        return self.rng.random() < rate

    def write_messages(self, messages: Any) -> Any:
        if self._fails(WRITE_FAILURE):
            raise JournalError("simulated write failure (chaos)")
        return self.inner.write_messages(messages)

    def replay_messages(self, persistence_id, from_sequence_nr=1, to_sequence_nr=MAX_SEQUENCE_NR,
                        max=MAX_SEQUENCE_NR):  # noqa: A002
        events = list(self.inner.replay_messages(persistence_id, from_sequence_nr, to_sequence_nr, max))
        if self._fails(REPLAY_FAILURE):
            yield from events[:self.rng.randrange(len(events) + 1)]
            raise JournalError("simulated replay failure (chaos)")
        yield from events

    def highest_sequence_nr(self, persistence_id: str, from_sequence_nr: int = 0) -> int:
        if self._fails(READ_HIGHEST_FAILURE):
            raise JournalError("simulated read highest failure (chaos)")
        return self.inner.highest_sequence_nr(persistence_id, from_sequence_nr)

    def delete_messages_to(self, persistence_id: str, to_sequence_nr: int) -> None:
        if self._fails(DELETE_FAILURE):
            raise JournalError("simulated delete failure (chaos)")
        self.inner.delete_messages_to(persistence_id, to_sequence_nr)


def _chaos_journal(url: str) -> ChaosJournal:
    path, _, seed = url.partition("://")[2].partition("?seed=")
    return ChaosJournal(open_journal("sqlite://" + path), int(seed))


register_scheme("chaos", journal=_chaos_journal)


@register_type(manifest="tests.persistence.MsgSent")
@dataclass(frozen=True)
class MsgSent:
    i: int


@register_type(manifest="tests.persistence.MsgConfirmed")
@dataclass(frozen=True)
class MsgConfirmed:
    delivery_id: int
    i: int


@dataclass(frozen=True)
class Msg:
    delivery_id: int
    i: int


@dataclass(frozen=True)
class ChaosConfirm:
    delivery_id: int
    i: int


@dataclass(frozen=True)
class Ack:
    i: int


@dataclass(frozen=True)
class Done:
    source: str
    ints: tuple


class ChaosSender(AtLeastOnceDelivery):
    """Persists MsgSent(i) for each new int and delivers it; persists MsgConfirmed on confirmation; fails
    live processing (after acking) with p = 0.3 and replay with p = 0.1 per event, on a chaos journal."""

    redeliver_interval = 0.5 * S

    def __init__(self, seed: int, pid: str, destination: str, app: str, probe: str) -> None:
        self.seed, self.pid, self.destination, self.app, self.probe = seed, pid, destination, app, probe

    @property
    def persistence_id(self) -> str:
        return self.pid

    @property
    def journal_url(self) -> str:
        return f"chaos://{self.config['journal'].partition('://')[2]}.chaos?seed={self.seed}"

    def pre_start(self) -> None:
        self.state: set[int] = set()
        self.rng = rng(self.seed, "sender")

    def pre_restart(self, error: BaseException, message: Any) -> None:
        pass  # not post_stop: a restart is not a termination the app should react to

    def post_stop(self) -> None:
        self.tell(self.app, "terminated")

    def _update(self, event: Any) -> None:
        if isinstance(event, MsgSent):
            self.state.add(event.i)
            self.deliver(self.destination, lambda d: Msg(d, event.i))
            if len(self.state) == NUM_MESSAGES:
                self.tell(self.probe, Done("sender", tuple(sorted(self.state))))
        elif isinstance(event, MsgConfirmed):
            self.confirm_delivery(event.delivery_id)

    def receive_recover(self, event: Any) -> None:
        self._update(event)
        if isinstance(event, MsgSent | MsgConfirmed) and self.rng.random() < REPLAY_PROCESSING_FAILURE:
            raise TestError(f"replay failed at event {event}")

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, int):
            if message in self.state:
                self.tell(sender, Ack(message))
                return

            def sent(event: MsgSent) -> None:
                self._update(event)
                self.tell(sender, Ack(message))
                if self.rng.random() < LIVE_PROCESSING_FAILURE:
                    raise TestError(f"failed at payload {message}")
            self.persist(MsgSent(message), sent)
        elif isinstance(message, ChaosConfirm):
            self.persist(MsgConfirmed(message.delivery_id, message.i), self._update)
        elif message == "unconfirmed":
            self.tell(sender, self.number_of_unconfirmed)


class ChaosDestination(actors.Actor):
    """Records each int once and confirms; drops a confirmation with p = 0.3; reports Done with all ten."""

    def __init__(self, seed: int, probe: str) -> None:
        self.seed, self.probe = seed, probe

    def pre_start(self) -> None:
        self.state: set[int] = set()
        self.rng = rng(self.seed, "destination")

    def receive(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Msg):
            if self.rng.random() < CONFIRM_FAILURE:
                return
            if message.i not in self.state:
                self.state.add(message.i)
                if len(self.state) == NUM_MESSAGES:
                    self.tell(self.probe, Done("destination", tuple(sorted(self.state))))
            self.tell(sender, ChaosConfirm(message.delivery_id, message.i))
        elif message == "count":
            self.tell(sender, len(self.state))


class ChaosApp(actors.Actor):
    """Sends 1..10 to the sender; when the sender terminates, starts it again and resends the un-acked."""

    def __init__(self, sender_path: str) -> None:
        self.sender_path = sender_path

    def pre_start(self) -> None:
        self.acks: set[int] = set()

    def receive(self, message: Any, sender: str | None) -> None:
        if message == "start":
            for i in range(1, NUM_MESSAGES + 1):
                self.tell(self.sender_path, i)
        elif isinstance(message, Ack):
            self.acks.add(message.i)
        elif message == "terminated":
            # An entity starts again on its next message: this is Akka's "create the sender again".
            self.tell(self.sender_path, "wake")
            for i in range(1, NUM_MESSAGES + 1):
                if i not in self.acks:
                    self.tell(self.sender_path, i)


class TellsWhatItGets(AtLeastOnceDelivery):
    """Replies ("got", message) to every command: what reaches user code."""

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        self.tell(sender, ("got", message))

"""Akka's at-least-once example, twice: with AtLeastOnceDelivery and with DurableDelivery, side by side.

    python -m examples.at_least_once [--base multiproc|local] [--journal sqlite:///path.db]

Akka's documented example (reference: akka-persistence.md §1.1) persists the *intent* before it
delivers and persists the confirmation before it stops redelivering:

    command "a"        -> persist MsgSent("a")      -> handler: deliver(dest, id -> Msg(id, "a"))
    Confirm(id) reply  -> persist MsgConfirmed(id)   -> handler: confirm_delivery(id)
    receive_recover    -> the same two handlers, so a restarted sender knows what is still unconfirmed

`AtLeastOnceSender` below is that example. `DurableSender` does the same with DurableDelivery, which
journals its own DeliveriesSent / DeliveriesConfirmed events (one per group commit): the user code shrinks to one `deliver` call.

The run shows, for each sender: a message the destination "loses" (drops its first copy) and gets
again by redelivery, then the sender stopped while a message is unconfirmed and started again at the
same path, which replays its journal and redelivers what was never confirmed. At the end it prints
each sender's journal. Both are at-least-once: a destination can see a message twice (pair the
sender with an IdempotentReceiver, as examples/accounts does, to apply each delivery once).
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import actors
from actors import Actor
from journal import open_journal, register_type
from persistence import AtLeastOnceDelivery, Confirm, DurableDelivery
from persistence.durable import DeliveriesConfirmed, DeliveriesSent

# ---- the messages and events of Akka's example ------------------------------------------------------


@register_type
@dataclass(frozen=True)
class Msg:
    """Sender -> destination: the payload, tagged with its delivery id."""

    delivery_id: int
    s: str


@register_type
@dataclass(frozen=True)
class MsgSent:
    """AtLeastOnceSender's event: it intends to deliver `s`."""

    s: str


@register_type
@dataclass(frozen=True)
class MsgConfirmed:
    """AtLeastOnceSender's event: delivery `delivery_id` was confirmed."""

    delivery_id: int


@dataclass(frozen=True)
class Seen:
    """Destination -> observer: what arrived (which copy) and what the destination did with it."""

    destination: str
    sender: str | None
    msg: Msg
    copy: int
    action: str


# ---- the actors ---------------------------------------------------------------------------------------


class AtLeastOnceSender(AtLeastOnceDelivery):
    """Akka's MyPersistentActor: persist MsgSent then deliver; persist MsgConfirmed then confirm."""

    redeliver_interval = 1.0

    def __init__(self, destination: str) -> None:
        self.destination = destination

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, str) and message != "unconfirmed":
            self.persist(MsgSent(message), self.update_state)
        elif isinstance(message, Confirm):
            self.persist(MsgConfirmed(message.delivery_id), self.update_state)
        elif message == "unconfirmed":
            self.tell(sender, self.number_of_unconfirmed)

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, MsgSent | MsgConfirmed):
            self.update_state(event)

    def update_state(self, event: MsgSent | MsgConfirmed) -> None:
        """The one place state changes, live and in replay (as in Akka's `updateState`)."""
        if isinstance(event, MsgSent):
            self.deliver(self.destination, lambda delivery_id: Msg(delivery_id, event.s))
        else:
            self.confirm_delivery(event.delivery_id)


class DurableSender(DurableDelivery):
    """The same sender with DurableDelivery: deliver() journals the intent, Confirm is journaled for it.

    (A sender with events of its own writes an event and the deliveries it decides together, with
    persist_and_deliver: a deliver() from a persist handler of a DurableDelivery, or from a defer handler queued
    behind a persist, raises IllegalStateError.)"""

    redeliver_interval = 1.0

    def __init__(self, destination: str) -> None:
        self.destination = destination

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "unconfirmed":
            self.tell(sender, self.number_of_unconfirmed)
        elif isinstance(message, str):
            self.deliver(self.destination, lambda delivery_id: Msg(delivery_id, message))

    def receive_recover(self, event: Any) -> None:
        pass  # DeliveriesSent / DeliveriesConfirmed are replayed by DurableDelivery itself


class Destination(Actor):
    """Akka's MyDestination: replies Confirm(delivery id); drops the first copy of the texts in `lose_first`."""

    def __init__(self, observer: str, lose_first: tuple[str, ...] = ()) -> None:
        self.observer = observer
        self.lose_first = set(lose_first)
        self.copies: dict[tuple[str | None, int], int] = {}

    def receive(self, message: Any, sender: str | None) -> None:
        if not isinstance(message, Msg):
            return
        key = (sender, message.delivery_id)
        copy = self.copies[key] = self.copies.get(key, 0) + 1
        if copy == 1 and message.s in self.lose_first:
            self.tell(self.observer, Seen(self.path, sender, message, copy, "dropped (a lost message)"))
            return
        self.tell(sender, Confirm(message.delivery_id))
        self.tell(self.observer, Seen(self.path, sender, message, copy, "confirmed"))


# ---- the walk-through ---------------------------------------------------------------------------------


class Walkthrough:
    """Drives one sender class through a loss and a restart, printing what the destination sees."""

    def __init__(self, system: actors.System, label: str, cls: type, path: str) -> None:
        self.system, self.label, self.cls, self.path = system, label, cls, path
        self.observer = system.probe()
        self.destination = f"{path}-destination"
        system.spawn(Destination, self.destination,
                     kwargs={"observer": self.observer.path, "lose_first": ("b", "d")})
        system.spawn(cls, path, kwargs={"destination": self.destination})

    def run(self) -> None:
        """Send a, b, c; wait until all are confirmed; send d, restart the sender while d is unconfirmed."""
        print(f"\n== {self.label}: {self.cls.__name__} at {self.path} ==")
        print('  sender <- "a", "b", "c"')
        for s in ("a", "b", "c"):
            self.system.tell(self.path, s)
        self.watch(until_seen={("a", "confirmed"), ("b", "confirmed"), ("c", "confirmed")})
        self.settle()
        print('  sender <- "d"')
        self.system.tell(self.path, "d")
        self.watch(until_seen={("d", "dropped (a lost message)")})
        self.system.stop(self.path)
        print(f"  sender stopped with d unconfirmed; started again at {self.path}: it replays its journal")
        self.system.spawn(self.cls, self.path, kwargs={"destination": self.destination})
        self.watch(until_seen={("d", "confirmed")})
        self.unconfirmed = self.settle()

    def watch(self, until_seen: set[tuple[str, str]], timeout: float = 30.0) -> None:
        """Print what the destination reports until every (text, action) in `until_seen` happened."""
        deadline = time.monotonic() + timeout
        missing = set(until_seen)
        while missing:
            seen = self.observer.receive(max(0.1, deadline - time.monotonic()))
            what = "again (a redelivery)" if seen.copy > 1 else "first copy"
            print(f"  destination got Msg({seen.msg.delivery_id}, {seen.msg.s!r}) {what}: {seen.action}")
            missing.discard((seen.msg.s, seen.action))

    def settle(self, timeout: float = 30.0) -> int:
        """Wait until the sender has journaled every confirm; returns how many are still unconfirmed."""
        deadline = time.monotonic() + timeout
        while (n := self.system.ask(self.path, "unconfirmed", timeout=10)) and time.monotonic() < deadline:
            time.sleep(0.05)
        print(f"  sender: {n} unconfirmed")
        return n


def print_journal(url: str, persistence_id: str) -> list[Any]:
    """Print the events stored for `persistence_id`; returns their payloads."""
    with open_journal(url) as j:
        events = list(j.show(persistence_id))
    print(f"\n  journal of {persistence_id}:")
    for e in events:
        print(f"    #{e.sequence_nr:<3} {e.payload!r}")
    return [e.payload for e in events]


def journaled_ids(events: list[Any]) -> tuple[list[int], set[int]]:
    """(delivery ids sent, delivery ids confirmed) as recorded in either sender's journal."""
    sent, confirmed, n = [], set(), 0
    for e in events:
        if isinstance(e, MsgSent):  # AtLeastOnceDelivery numbers its deliveries in MsgSent order
            n += 1
            sent.append(n)
        elif isinstance(e, DeliveriesSent):  # DurableDelivery: one event per group commit
            sent.extend(e.delivery_ids)
        elif isinstance(e, MsgConfirmed):
            confirmed.add(e.delivery_id)
        elif isinstance(e, DeliveriesConfirmed):
            confirmed.update(e.delivery_ids)
            confirmed.update(i for i in sent if i <= e.up_to)
    return sent, confirmed


def run(base: str = "multiproc", journal: str | None = None, tag: str | None = None) -> int:
    """Run both walk-throughs on a fresh actor system; returns the exit code."""
    workdir = tempfile.mkdtemp(prefix="reprise-at-least-once-")
    journal = journal or f"sqlite:///{workdir}/journal.db"
    print(f"Akka's at-least-once example on Reprise ({base} base, journal {journal})")
    failures: list[str] = []
    try:
        options = {"tag": tag, "run_dir": f"{workdir}/run"} if base == "multiproc" else {}
        with actors.start(base, journal=journal, snapshot_store=journal, **options) as system:
            for label, cls, path in (("AtLeastOnceDelivery, you persist MsgSent/MsgConfirmed",
                                      AtLeastOnceSender, "/user/alod-sender"),
                                     ("DurableDelivery, it journals for you", DurableSender,
                                      "/user/durable-sender")):
                walk = Walkthrough(system, label, cls, path)
                walk.run()
                sent, confirmed = journaled_ids(print_journal(journal, path))
                if walk.unconfirmed or sent != [1, 2, 3, 4] or confirmed != {1, 2, 3, 4}:
                    failures.append(f"{path}: {walk.unconfirmed} unconfirmed, journaled sent {sent}, "
                                    f"confirmed {sorted(confirmed)}")
        for failure in failures:
            print(f"FAILED {failure}")
        if failures:
            return 1
        print("\nOK: every message was confirmed and journaled once; the lost ones arrived again by redelivery")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Parse options and run."""
    parser = argparse.ArgumentParser(prog="python -m examples.at_least_once", description=__doc__.split("\n")[0])
    parser.add_argument("--base", choices=("multiproc", "local"), default="multiproc",
                        help="multiproc: every actor in its own process (default); local: all in this process")
    parser.add_argument("--journal", help="journal URL (default: a SQLite file in a temp dir)")
    args = parser.parse_args(argv)
    return run(args.base, args.journal)


if __name__ == "__main__":
    # Run the importable twin of this file: actor processes load classes by module name, not from __main__.
    from examples import at_least_once

    sys.exit(at_least_once.main())

"""What the bridge's answers to duplicate follow-ups cost: ROUNDS Forwards messages of N follow-ups each from one
receiver, first all new (the bridge stores and accepts them), then the same again: all duplicates, as a
redelivery pile's resends are; then mixed, every second one new (a round of new rows and redelivered copies).
Per phase: the acceptance messages the receiver got, the forward ids they accepted, the seconds until every one
was accepted, and the events the bridge wrote. On BASE local (one process) or multiproc (the receiver,
the bridge and the follow-ups' destination each on a host of their own).

    PYTHONPATH=$PWD python bench/profiling/duplicate_follow_ups.py multiproc 1000 20

Measured (1000 x 20, this 2-core VM, two alternated runs each; seconds vary by ~30% between runs):
    c9f7dca:  duplicates 20,000 messages, 0.07-0.11 s; mixed 20,000 messages, 0.38-0.53 s, ~10,010 bridge events
    16a7043:  duplicates 20 messages, 0.03-0.05 s; mixed 20 messages, 0.08-0.12 s, 21 bridge events
(new: 20,000 messages before, 20 after, 0.21-0.25 s both; ForwardsAccepted now groups a receiver's ids.)
"""

from __future__ import annotations

import contextlib
import itertools
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import actors
from spark_bridge import BRIDGE_PATH, start_bridge
from spark_bridge.bridge import PERSISTENCE_ID
from spark_bridge.messages import ForwardAccepted, Forwards

RECEIVER = "/user/receiver"
SINK = "/user/sink"
ORIGIN = "bench-origin"


@dataclass(frozen=True)
class GetCounts:
    """Ask the Receiver for its Counts."""


@dataclass(frozen=True)
class Reset:
    """Have the Receiver count from zero again (the next phase)."""


@dataclass(frozen=True)
class Counts:
    """ForwardAccepted messages received, and the distinct forward ids they accepted."""

    messages: int
    ids: int


class Receiver(actors.Actor):
    """Plays the FeedReceiver the follow-ups came from: counts the bridge's acceptances."""

    def pre_start(self) -> None:
        """Nothing received yet."""
        self.messages = 0
        self.ids: set[int] = set()

    def receive(self, message: Any, sender: str | None) -> None:
        """Count a ForwardAccepted (and every id it carries); answer GetCounts."""
        if type(message) is ForwardAccepted:
            self.messages += 1
            self.ids.add(message.forward_id)
            self.ids.update(getattr(message, "more", ()))  # (the batched form; absent before it)
        elif type(message) is GetCounts:
            self.tell(sender, Counts(self.messages, len(self.ids)))
        elif type(message) is Reset:
            self.pre_start()
            self.tell(sender, Counts(0, 0))


def _send(system: actors.System, batches: list[list[int]]) -> None:
    for ids in batches:
        n = len(ids)
        system.tell(BRIDGE_PATH, Forwards([RECEIVER] * n, [ORIGIN] * n, ids, [None] * n, [SINK] * n,
                                          [{"txid": f, "amount": 1} for f in ids]))


def _bridge_events(url: str) -> int:
    """The bridge's highest sequence number in the SQLite journal at `url`: the events it wrote."""
    with contextlib.closing(sqlite3.connect(url.removeprefix("sqlite:///"))) as db:
        row = db.execute("SELECT max(sequence_nr) FROM journal WHERE persistence_id = ?", (PERSISTENCE_ID,)).fetchone()
    return row[0] or 0


def _until_accepted(system: actors.System, ids: int) -> Counts:
    deadline = time.monotonic() + 120
    while True:
        counts = system.ask(RECEIVER, GetCounts(), timeout=60)
        if counts.ids >= ids:
            return counts
        if time.monotonic() > deadline:
            raise SystemExit(f"only {counts} after 120 s")
        time.sleep(0.002)


def main(base: str, n: int, rounds: int) -> None:
    """Run both phases on `base` and print their figures."""
    from tests.spark_bridge.sample import Account  # (confirms each follow-up's row: nothing is redelivered)

    with tempfile.TemporaryDirectory(prefix="reprise-duplicate-follow-ups-") as tmp:
        journal = f"sqlite:///{tmp}/journal.db"
        system = actors.start(base, journal=journal, snapshot_store=f"sqlite:///{tmp}/snap.db")
        with system:
            system.spawn(Receiver, RECEIVER)
            system.spawn(Account, SINK)
            start_bridge(system)
            first = [list(range(r * n + 1, (r + 1) * n + 1)) for r in range(rounds)]
            fresh = itertools.count(rounds * n + 1)
            # (mixed: as a receiver's round of new rows and redelivered copies sends them, new and resent in turn)
            mixed = [[next(fresh) if k % 2 else f for k, f in enumerate(ids)] for ids in first]
            for phase, batches in (("new", first), ("duplicates", first), ("mixed", mixed)):
                system.ask(RECEIVER, Reset(), timeout=60)  # (answered: done before the Forwards go)
                events = _bridge_events(journal)
                t0 = time.perf_counter()
                _send(system, batches)
                counts = _until_accepted(system, rounds * n)
                seconds = time.perf_counter() - t0
                time.sleep(0.2)  # (the bridge's last writes of the phase: its lazily flushed confirmations)
                print(f"{base} {phase}: {rounds} x {n} follow-ups: {counts.messages} ForwardAccepted messages "
                      f"for {counts.ids} ids, all accepted in {seconds:.3f} s; "
                      f"{_bridge_events(journal) - events} bridge events", flush=True)


if __name__ == "__main__":
    # Through the module's own name: hosts import Receiver from there, and the messages' types must be the same.
    from bench.profiling.duplicate_follow_ups import main as run
    run(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]))

"""Benchmark (not a test): applied messages/s in one host of many IdempotentReceiver entities on SQLite.

    .venv/bin/python -m bench.entities [--entities 10000] [--messages 200000] [--base local|multiproc|both]
                                       [--chunk 2000] [--rounds 1] [--receive-batch] [--kind receiver|table|both]
                                       [--json]

The shape of `make demo`'s account host without Spark and the bridge: the driver tells `Deposit`s in
chunks of `--chunk` (one Thespian message each, hence one group commit each) spread at random over the
entities, so most entities get one application per commit (one AppliedBatch of one). Each entity applies
every delivery once with `persist_applied` (asynchronous) and, once it is durable, counts it in a
per-host confirmation sent to the driver when the host settles (like FeedReceiver's Confirmed). Delivery
ids come from one origin and are global, so each entity sees sparse ids (as the bridge's rows).

`--kind table` (part of the default `both`) runs the same accounts as rows of one `EntityTable`
(persistence/table.py): the same deliveries, each applied once (`apply_once`), one TableCommit record per
group commit instead of one AppliedBatch per entity, one `Applied` per commit.

Every entity is created and recovered in a warm-up pass before the clock starts. Reported: applied
messages/s (wall clock) and CPU µs per message in the host process (on `local` the driver shares it).
REPRISE_BENCH_PROFILE=FILE writes a cProfile of the measured rounds, taken in the process that hosts the
entities (this one on `local`, the base for profiling, also with py-spy).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import tempfile
import time
import weakref
from dataclasses import dataclass
from typing import Any

import actors
from journal import register_type
from persistence import EntityTable, IdempotentReceiver, TableCommit

HOST = "/user/accounts"
ORIGIN = "/user/driver"
"""The origin of every delivery (one sender numbering its deliveries, like the bridge)."""


@dataclass(frozen=True)
class Deposit:
    """The command: apply `amount` once for delivery `delivery_id`."""

    delivery_id: int
    amount: int


@register_type  # manifest = module.qualname: no clash when this file also runs as __main__
@dataclass(frozen=True)
class Deposited:
    """The journaled effect of one Deposit."""

    amount: int


@dataclass(frozen=True)
class Applied:
    """Told to the driver when the host settles: this many deliveries became durable and were applied."""

    count: int


def cpu_seconds() -> float:
    """CPU seconds (user + system) this process has used."""
    t = os.times()
    return t.user + t.system


# Applications of all entities of one host, reported as one message per settle round (as FeedReceiver
# confirms): a message per row would measure the transport, not persistence.
_applied: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def _count_applied(actor: actors.Actor, reply_to: str) -> None:
    host = actor.context
    counts = _applied.get(host)
    if counts is None:
        counts = _applied[host] = {}
        ref = weakref.ref(host)
        host.on_settle(lambda: _report_applied(ref))
    counts[reply_to] = counts.get(reply_to, 0) + 1


def _report_applied(ref: weakref.ref) -> bool:
    host = ref()
    counts = _applied.get(host) if host is not None else None
    if not counts:
        return False
    _applied[host] = {}
    for reply_to, n in counts.items():
        host.route(host.path, reply_to, Applied(n))
    return True


class Account(IdempotentReceiver):
    """One account entity: applies each Deposit once; answers "cpu" with its process's CPU seconds."""

    def pre_start(self) -> None:
        self.balance = 0

    def receive_recover(self, event: Any) -> None:
        if type(event) is Deposited:
            self.balance += event.amount

    def receive_command(self, message: Any, sender: str | None) -> None:
        if type(message) is Deposit:
            self.persist_applied(ORIGIN, message.delivery_id, Deposited(message.amount), self._deposited)
        elif message == "cpu":
            self.tell(sender, cpu_seconds())
        elif message == "profile":
            _toggle_profile()
            self.tell(sender, "ok")

    def _deposited(self, event: Deposited) -> None:
        self.balance += event.amount
        _count_applied(self, self.sender)  # the sender of the Deposit (handlers run with it)


class BatchAccount(Account):
    """Account with receive_batch (--receive-batch): the Deposits of one host batch in one persist_applied_many."""

    def receive_batch(self, messages: Any) -> None:
        ids: list[int] = []
        amounts: list[Deposited] = []
        for message, sender in messages:
            if type(message) is Deposit and not self._stash:  # (nothing here stashes: persists are async)
                ids.append(message.delivery_id)
                amounts.append(Deposited(message.amount))
                self.sender = sender
                continue
            self._apply(ids, amounts)
            ids, amounts = [], []
            self.receive(message, sender)
        self._apply(ids, amounts)

    def _apply(self, ids: list[int], amounts: list[Deposited]) -> None:
        if ids:
            self.persist_applied_many(ORIGIN, ids, amounts, self._deposited)


class TableAccounts(EntityTable):
    """The same accounts as rows of one EntityTable (--table): each Deposit applied once (apply_once), one
    TableCommit per group commit, and one Applied per commit to the driver once it is durable."""

    def empty_state(self) -> int:
        return 0

    def command_handler(self, entity_id: str, state: int, command: Any) -> list[Any] | None:
        if type(command) is Deposit:
            self.reply_to = self.sender
            return [Deposited(command.amount)] if self.apply_once(ORIGIN, command.delivery_id) else None
        if command == "cpu":
            self.tell(self.sender, cpu_seconds())
        elif command == "profile":
            _toggle_profile()
            self.tell(self.sender, "ok")
        return None

    def event_handler(self, state: int, event: Deposited) -> int:
        return state + event.amount

    def committed(self, commit: TableCommit) -> None:
        if commit.delivery_ids:
            self.tell(self.reply_to, Applied(len(commit.delivery_ids)))


_profile: Any = None


def _toggle_profile() -> None:
    """Start a cProfile of this process, or stop it and write REPRISE_BENCH_PROFILE (multiproc hosts)."""
    global _profile
    where = os.environ.get("REPRISE_BENCH_PROFILE")
    if not where:
        return
    if _profile is None:
        import cProfile
        _profile = cProfile.Profile()
        _profile.enable()
    else:
        _profile.disable()
        _profile.dump_stats(where)
        _profile = None


def _toggle_host_profile(system: actors.System, local: bool) -> None:
    """Start or stop the cProfile of the process that hosts the entities (this one on `local`)."""
    if local:
        _toggle_profile()
    else:
        system.ask(f"{HOST}/0", "profile")


def feed(system: actors.System, probe: actors.Probe, rows: list[tuple[int, int]], chunk: int,
         window: int) -> None:
    """Tell Deposit(delivery id) to each (entity, delivery id) of `rows` in chunks, at most `window` chunks
    unconfirmed, and wait until every row was applied."""
    sent = applied = 0
    n = len(rows)
    while applied < n:
        while sent < n and sent - applied < window * chunk:
            part = rows[sent:sent + chunk]
            system.tell_many([(f"{HOST}/{e}", Deposit(d, 1)) for e, d in part], sender=probe.path)
            sent += len(part)
        got = probe.receive(120)
        if type(got) is not Applied:
            raise RuntimeError(f"the driver got {got!r}, expected Applied")
        applied += got.count
    if applied != n:
        raise RuntimeError(f"{applied} applications for {n} deliveries")


def run(entities: int, messages: int, base: str, chunk: int = 2000, rounds: int = 1, window: int = 4,
        seed: int = 1, receive_batch: bool = False, table: bool = False) -> dict[str, float]:
    """Applied messages/s and host CPU µs per message (medians of `rounds` runs of `messages`)."""
    rng = random.Random(seed)
    next_id = 1
    results = []
    # The journal holds every application of the run (tens of MB): removed afterwards.
    with tempfile.TemporaryDirectory(prefix="reprise-bench-entities-") as d, \
            actors.start(base, journal=f"sqlite:///{d}/j.db", snapshot_store=f"sqlite:///{d}/s.db") as system:
        kind = TableAccounts if table else BatchAccount if receive_batch else Account
        system.spawn(kind, HOST, entities=True, passivate_after=3600.0)
        probe = system.probe()
        # Warm-up: create and recover every entity (and the journal file) before the clock starts.
        warm = [(e, next_id + e) for e in range(entities)]
        next_id += entities
        feed(system, probe, warm, chunk, window)
        local = base == "local"
        profiled = bool(os.environ.get("REPRISE_BENCH_PROFILE"))
        if profiled:
            _toggle_host_profile(system, local)
        for _ in range(rounds):
            rows = [(rng.randrange(entities), next_id + i) for i in range(messages)]
            next_id += messages
            cpu = cpu_seconds() if local else system.ask(f"{HOST}/0", "cpu")
            t = time.perf_counter()
            feed(system, probe, rows, chunk, window)
            elapsed = time.perf_counter() - t
            used = (cpu_seconds() if local else system.ask(f"{HOST}/0", "cpu")) - cpu
            results.append((messages / elapsed, used / messages * 1e6))
        if profiled:
            _toggle_host_profile(system, local)
    return {"applied_per_s": statistics.median(r[0] for r in results),
            "cpu_us_per_message": statistics.median(r[1] for r in results)}


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the benchmark and print its figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--entities", type=int, default=10_000)
    p.add_argument("--messages", type=int, default=200_000)
    p.add_argument("--base", choices=("local", "multiproc", "both"), default="both",
                   help="the entities in this process (local), in a host process (multiproc: issue 16's target), "
                        "or one run of each")
    p.add_argument("--chunk", type=int, default=2000, help="deliveries per Thespian message (group commit)")
    p.add_argument("--rounds", type=int, default=1, help="measured runs in one system; the median is printed")
    p.add_argument("--receive-batch", action="store_true",
                   help="entities opt into receive_batch and apply with persist_applied_many")
    p.add_argument("--kind", choices=("receiver", "table", "both"), default="both",
                   help="IdempotentReceiver entities on each --base (receiver), the same accounts as rows of one "
                        "EntityTable (table: one journal record per group commit; on multiproc unless --base local), "
                        "or both (the default)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    a = p.parse_args(argv)
    how = ", receive_batch" if a.receive_batch else ""
    figures = {}
    runs = []
    if a.kind in ("receiver", "both"):
        runs += [(f"reprise {base}", base, False) for base in (("local", "multiproc") if a.base == "both" else (a.base,))]
    if a.kind in ("table", "both"):
        base = "local" if a.base == "local" else "multiproc"
        runs.append((f"EntityTable {base}", base, True))
    for name, base, table in runs:
        r = figures[name] = run(a.entities, a.messages, base, a.chunk, a.rounds, receive_batch=a.receive_batch,
                                table=table)
        kind = "EntityTable rows" if table else f"IdempotentReceiver entities{how}"
        print(f"{base}: {a.messages:,} applications over {a.entities:,} {kind}, chunks of {a.chunk:,}: "
              f"{r['applied_per_s']:,.0f} applied/s, {r['cpu_us_per_message']:.1f} CPU µs per message in the host")
    if a.json:
        print(json.dumps(figures))
    return 0


if __name__ == "__main__":
    # Run the importable copy: the host processes unpickle bench.entities.Deposit, not __main__.Deposit.
    from bench import entities

    sys.exit(entities.main())

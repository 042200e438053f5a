"""After a history: compare what was acknowledged, what is durable (the journal) and what was applied (live actors)."""

from __future__ import annotations

import time
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from itertools import pairwise

from journal import MAX_SEQUENCE_NR, open_journal
from persistence.durable import DeliveriesSent
from persistence.idempotent import Applied, AppliedBatch
from spark_bridge.messages import RowApplied
from tests.torture.actors import FED, FEEDER, SINKS, STORES, Fed, GetValues, Got, Stored, Values
from tests.torture.ops import N_STORES
from tests.torture.world import World

QUIESCE_TIMEOUT = 60.0
FED_SINKS = 4


COUNTS = ("acknowledged", "lost", "duplicates", "out_of_order", "inconsistent", "unclear", "leftovers", "orphans")
"""The figures of a Verdict that a run sums over its histories."""


@dataclass
class Verdict:
    """The figures of one history; `failures` lists what broke a guarantee (empty: the history passed)."""

    acknowledged: int = 0
    lost: int = 0
    duplicates: int = 0
    out_of_order: int = 0
    inconsistent: int = 0
    unclear: int = 0
    leftovers: int = 0
    orphans: int = 0
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    def fail(self, what: str, examples: object = None) -> None:
        """Record a broken guarantee."""
        self.failures.append(what if examples is None else f"{what}: {examples}")


def _values(w: World, path: str) -> tuple | None:
    try:
        reply = w.system.ask(path, GetValues(), timeout=10)
    except Exception as exc:  # noqa: BLE001
        w.note_error(f"final query of {path}", exc)
        return None
    return reply.values if isinstance(reply, Values) else None


def _settled_hosts(w: World, timeout: float = 30.0) -> dict:
    """The hosts once none is starting, restarting or backing off before a restart (bounded)."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            hosts = w.system.status(timeout=10).hosts
        except Exception as exc:  # noqa: BLE001
            w.note_error("final status", exc)
            return {}
        if all(h.state not in ("starting", "restarting", "backoff") for h in hosts.values()) or time.monotonic() > deadline:
            return hosts
        time.sleep(0.2)


def applied_state(w: World) -> dict[str, tuple | None]:
    """What each live actor says it applied, after the feeder has delivered everything (bounded wait)."""
    if w.system is None:
        w.start()
    hosts = _settled_hosts(w)
    ours = {STORES, FEEDER, SINKS, FED, "/system/spark-bridge"}  # not hosts a bad input spawned and stopped
    stopped = sorted(path for path, info in hosts.items() if info.state != "running" and path in ours)
    if stopped:
        # Nothing restarts them short of a new system; do that, so what they owe can still be checked.
        w.findings.append(f"hosts not running at the end of the history (restarted the system): "
                          f"{', '.join(f'{p} {hosts[p].state}' for p in stopped)}")
        w.restart()
    deadline = time.monotonic() + QUIESCE_TIMEOUT
    left = w.unconfirmed()
    while left != 0 and time.monotonic() < deadline:
        time.sleep(0.2)
        left = w.unconfirmed()
    if left != 0:
        w.findings.append(f"the feeder still had {left} unconfirmed deliveries after {QUIESCE_TIMEOUT:.0f} s")
    paths = [f"{STORES}/{k}" for k in range(N_STORES)] + [f"{SINKS}/{k}" for k in range(w.SINKS)]
    if w.spark is not None:
        paths += [f"{FED}/{k}" for k in range(FED_SINKS)]
    return {p: _values(w, p) for p in paths}


def durable_state(url: str) -> tuple[dict[str, list[int]], dict[str, list], list[tuple[str, int]], dict[str, list[int]]]:
    """From the journal: store values, sink applications [(origin, delivery id, (stream, n))], items the feeder
    journaled, and fed txids per FedSink."""
    stores: dict[str, list[int]] = defaultdict(list)
    sinks: dict[str, list] = defaultdict(list)
    sent: list[tuple[str, int]] = []
    fed: dict[str, list[int]] = defaultdict(list)
    with open_journal(url) as j:
        for pid in j.current_persistence_ids():
            for r in j.replay_messages(pid, 1, MAX_SEQUENCE_NR, MAX_SEQUENCE_NR):
                event = r.payload
                if isinstance(event, Stored):
                    stores[pid].append(event.value)
                elif isinstance(event, DeliveriesSent) and pid == FEEDER:
                    sent.extend((m.stream, m.n) for _, _, m in event.entries())
                elif isinstance(event, AppliedBatch | Applied):
                    entries = event.entries() if isinstance(event, AppliedBatch) else [
                        (event.origin, event.delivery_id, event.event)]
                    for origin, delivery_id, inner in entries:
                        if isinstance(inner, Got):
                            sinks[pid].append((origin, delivery_id, (inner.stream, inner.n)))
                        elif isinstance(inner, RowApplied) and isinstance(inner.event, Fed):
                            fed[pid].append(inner.event.txid)
    return stores, sinks, sent, fed


def check(w: World, applied: dict[str, tuple | None]) -> Verdict:
    """Stop the system, read the journal, and judge the history."""
    w.stop()
    v = Verdict()
    stores, sinks, sent, fed = durable_state(w.url)
    ledger = w.ledger

    # Stores: every acknowledged value durable; no value twice; values in the order they were sent (FIFO).
    for entity, acked in ledger.puts.items():
        v.acknowledged += len(acked)
        durable = stores.get(f"{STORES}/{entity}", [])
        missing = sorted(set(acked) - set(durable))
        if missing:
            v.lost += len(missing)
            v.fail(f"store {entity}: acknowledged puts not durable", missing[:10])
    for pid, durable in stores.items():
        dups = [x for x, n in Counter(durable).items() if n > 1]
        if dups:
            v.duplicates += len(dups)
            v.fail(f"{pid}: values journaled twice", dups[:10])
        inversions = [(i, a, b) for i, (a, b) in enumerate(pairwise(durable)) if b < a]
        if inversions:
            v.out_of_order += len(inversions)
            i = inversions[0][0]
            # The durable values around the first inversion, next to the order they were sent in.
            sent_order = ledger.sent_puts.get(pid.rsplit("/", 1)[1], [])
            v.fail(f"{pid}: FIFO broken (a later put journaled before an earlier one)",
                   f"{[(a, b) for _, a, b in inversions[:5]]}; journaled {durable[max(0, i - 8):i + 8]}; "
                   f"sent {[x for x in sent_order if durable[max(0, i - 8)] <= x <= durable[i]][:40]}")
        raised = w.raised.get(pid.rsplit("/", 1)[1], set()) & set(durable)
        if raised:
            v.notes.append(f"{pid}: a tell raised, yet {len(raised)} of its puts were delivered and journaled")
        sent_values = set(ledger.sent_puts.get(pid.rsplit("/", 1)[1], []))
        invented = sorted(set(durable) - sent_values)
        if invented:
            v.inconsistent += len(invented)
            v.fail(f"{pid}: durable values nobody sent", invented[:10])

    # DurableDelivery: every acknowledged item journaled by the feeder and applied once by its sink.
    v.acknowledged += len(ledger.items)
    journaled = Counter(sent)
    not_journaled = sorted(ledger.items - set(journaled))
    if not_journaled:
        v.fail("acknowledged items not journaled by the feeder", not_journaled[:10])
    twice = [x for x, n in journaled.items() if n > 1]
    if twice:
        v.duplicates += len(twice)
        v.fail("items journaled twice by the feeder (under two delivery ids)", twice[:10])
    applied_items: Counter = Counter()
    for pid, entries in sinks.items():
        ids = Counter((origin, delivery_id) for origin, delivery_id, _ in entries)
        dup_ids = [k for k, n in ids.items() if n > 1]
        if dup_ids:
            v.duplicates += len(dup_ids)
            v.fail(f"{pid}: deliveries applied twice", dup_ids[:10])
        applied_items.update(item for _, _, item in entries)
    dup_items = [x for x, n in applied_items.items() if n > 1]
    if dup_items:
        v.duplicates += len(dup_items)
        v.fail("items applied twice", dup_items[:10])
    unapplied = sorted(ledger.items - set(applied_items))
    if unapplied:
        v.fail("acknowledged items never applied by a sink", unapplied[:10])
    v.lost += len(set(not_journaled) | set(unapplied))  # an item missing in both places is lost once

    # Spark: every row of a returned feed (ack="processed") applied once.
    if w.spark is not None:
        v.acknowledged += len(ledger.fed)
        fed_all = Counter(t for txids in fed.values() for t in txids)
        missing = sorted(ledger.fed - set(fed_all))
        if missing:
            v.lost += len(missing)
            v.fail("rows of returned feeds not applied", missing[:10])
        dup_rows = [t for t, n in fed_all.items() if n > 1]
        if dup_rows:
            v.duplicates += len(dup_rows)
            v.fail("feed rows applied twice", dup_rows[:10])

    # Applied (live state before the last stop) against durable: an effect without its event, or the reverse.
    for path, values in applied.items():
        if values is None:
            v.notes.append(f"{path} did not answer the final query")
            continue
        if path.startswith(STORES + "/"):
            durable = stores.get(path, [])
            if list(values) != durable:
                v.inconsistent += 1
                v.fail(f"{path}: applied {len(values)} values, journal holds {len(durable)}",
                       sorted(set(values) ^ set(durable))[:10])
        elif path.startswith(SINKS + "/"):
            durable_items = sorted(item for _, _, item in sinks.get(path, []))
            if sorted(tuple(x) for x in values) != durable_items:
                v.inconsistent += 1
                v.fail(f"{path}: applied {len(values)} items, journal holds {len(durable_items)}")
            dups = [x for x, n in Counter(values).items() if n > 1]
            if dups:
                v.duplicates += len(dups)
                v.fail(f"{path}: live sink applied items twice", dups[:10])
        elif path.startswith(FED + "/"):
            if sorted(values) != sorted(fed.get(path, [])):
                v.inconsistent += 1
                v.fail(f"{path}: applied {len(values)} rows, journal holds {len(fed.get(path, []))}")

    v.unclear = len(w.unclear)
    for u in w.unclear:
        v.fail("unclear error", u)
    v.leftovers = len(w.leftovers)
    for left in w.leftovers:
        v.fail("processes left behind", left)
    for gone in w.gave_up:
        v.fail("host not restarted (the guardian gave up on it)", gone)
    v.orphans = w.orphans
    v.notes.extend(w.findings)
    return v


def leftover_processes(token: str) -> list[int]:
    """Processes of any system this run started that are still alive."""
    from actors.system import tagged_pids
    return tagged_pids(token)


__all__ = ["Verdict", "applied_state", "check", "durable_state", "leftover_processes"]

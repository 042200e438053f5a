"""Prototype (not product code): the entity-host bench's shape with the entities of one host kept as columns.

    PYTHONPATH=. .venv/bin/python bench/profiling/columnar_proto.py [entities] [messages] [chunk] [rounds]

One plain actor (its own host process on multiproc) holds every entity's state in dicts and applies a chunk
of (entity, Deposit) rows in one loop: dedup per entity (SeenIds), one AppliedBatch record per entity and
chunk (the stored format of IdempotentReceiver), one `write_messages` per chunk, then the count of applied
rows to the driver. No per-entity actor objects, no coordinator, no handlers queue. It answers one
question: with the journal's record format and the real transport, what does a row cost when the per-entity
Python objects are gone (issue 16's columnar sketch, PROFILE.md §17)?
"""

from __future__ import annotations

import os
import random
import sys
import tempfile
import time
from dataclasses import dataclass

import actors
from bench.entities import ORIGIN, Applied, Deposit, Deposited, cpu_seconds
from journal import AtomicWrite, open_journal, register_type
from journal.model import replayed_repr
from persistence.idempotent import AppliedBatch, SeenIds

_NO_TAGS: frozenset[str] = frozenset()
# entity: one AppliedBatch record per entity and chunk (today's layout); chunk: the same AppliedBatches in one
# record per chunk; columns: one CommitColumns record per chunk, built without them; none: nothing stored
RECORDS = os.environ.get("RECORDS", "entity")


@register_type
@dataclass(frozen=True)
class CommitColumns:
    """RECORDS=columns: the applications of one chunk as columns (entity ids, their sequence nrs, delivery ids
    per entity, amounts per entity), one record per chunk."""

    entities: list[int]
    sequence_nrs: list[int]
    delivery_ids: list[list[int]]
    amounts: list[list[int]]


@dataclass(frozen=True)
class Open:
    url: str


@dataclass(frozen=True)
class Chunk:
    rows: list[tuple[int, Deposit]]


class Table(actors.Actor):
    """Every account of this host as columns: balance, dedup state and sequence nr per entity id."""

    def pre_start(self) -> None:
        self.journal = None
        self.balance: dict[int, int] = {}
        self.seen: dict[int, SeenIds] = {}
        self.seq: dict[int, int] = {}
        self.pids: dict[int, str] = {}
        self.origins = (ORIGIN,)
        self.stages: dict[str, float] = {}

    def receive(self, message, sender):
        if type(message) is Chunk:
            self.tell(sender, Applied(self._apply(message.rows)))
        elif type(message) is Open:
            self.journal = open_journal(message.url)
            self.tell(sender, "ok")
        elif message == "cpu":
            self.tell(sender, cpu_seconds())
        elif message == "stages":
            self.tell(sender, dict(self.stages))
            self.stages.clear()

    def _apply(self, rows: list[tuple[int, Deposit]]) -> int:
        st, clock = self.stages, time.process_time
        t0 = clock()
        seen, pending = self.seen, {}
        for e, d in rows:
            s = seen.get(e)
            if s is None:
                s = seen[e] = SeenIds()
            if not s.add(d.delivery_id):
                continue
            p = pending.get(e)
            if p is None:
                pending[e] = ([d.delivery_id], [Deposited(d.amount)])
            else:
                p[0].append(d.delivery_id)
                p[1].append(Deposited(d.amount))
        t1 = clock()
        seq, pids, origins, writes = self.seq, self.pids, self.origins, []
        if RECORDS == "columns":  # the design's record: built from the columns, no object per entity or event
            entities = list(pending)
            seqs = [seq.get(e, 0) + 1 for e in entities]
            seq.update(zip(entities, seqs, strict=True))
            per = pending.values()
            record = CommitColumns(entities, seqs, [p[0] for p in per], [[ev.amount for ev in p[1]] for p in per])
            self.chunks = getattr(self, "chunks", 0) + 1
            writes = [AtomicWrite((replayed_repr(record, self.chunks, "/user/accounts", "", "w", 0, _NO_TAGS, None),))]
            pending = {}  # (the state loop below: counted here instead)
            applied_here = sum(len(a) for a in record.amounts)
            for e, amounts in zip(entities, record.amounts, strict=True):
                self.balance[e] = self.balance.get(e, 0) + sum(amounts)
        for e, (ids, events) in pending.items():
            pid = pids.get(e)
            if pid is None:
                pid = pids[e] = f"/user/accounts/{e}"
            n = seq[e] = seq.get(e, 0) + 1
            writes.append(AtomicWrite((replayed_repr(AppliedBatch(origins, tuple(ids), tuple(events)), n, pid, "",
                                                     "w", 0, _NO_TAGS, None),)))
        if RECORDS == "chunk":  # one record for the whole chunk (a host-level commit record), under one id
            per = [w.payload[0] for w in writes]
            self.chunks = getattr(self, "chunks", 0) + 1
            writes = [AtomicWrite((replayed_repr(AppliedBatch(tuple(r.persistence_id for r in per),
                                                              tuple(r.sequence_nr for r in per),
                                                              tuple(r.payload for r in per)),
                                                 self.chunks, "/user/accounts", "", "w", 0, _NO_TAGS, None),))]
        elif RECORDS == "none":
            writes = []
        t2 = clock()
        from journal.records import encode_writes
        batch, results = encode_writes(writes, 0)
        t3 = clock()
        if batch.rows:
            self.journal._store(batch)
        t4 = clock()
        if any(r is not None for r in results):
            raise RuntimeError(f"rejected: {results}")
        balance, applied = self.balance, applied_here if RECORDS == "columns" else 0
        for e, (_ids, events) in pending.items():
            balance[e] = balance.get(e, 0) + sum(ev.amount for ev in events)
            applied += len(events)
        t5 = clock()
        for k, v in (("dedup+pending", t1 - t0), ("build writes", t2 - t1), ("encode", t3 - t2), ("store", t4 - t3),
                     ("state", t5 - t4)):
            st[k] = st.get(k, 0.0) + v
        return applied


def feed(system, probe, rows, chunk, window):
    sent = applied = 0
    n = len(rows)
    while applied < n:
        while sent < n and sent - applied < window * chunk:
            part = rows[sent:sent + chunk]
            system.tell("/user/table", Chunk([(e, Deposit(d, 1)) for e, d in part]), sender=probe.path)
            sent += len(part)
        got = probe.receive(120)
        applied += got.count


def main() -> None:
    defaults = ["10000", "200000", "2000", "3"]
    entities, messages, chunk, rounds = (int(a) for a in sys.argv[1:] + defaults[len(sys.argv) - 1:])
    base = os.environ.get("BASE", "multiproc")
    rng = random.Random(1)
    with tempfile.TemporaryDirectory(prefix="reprise-proto-") as d, actors.start(base) as system:
        system.spawn(Table, "/user/table")
        system.ask("/user/table", Open(f"sqlite:///{d}/j.db"))
        probe = system.probe()
        next_id = 1
        feed(system, probe, [(e, next_id + e) for e in range(entities)], chunk, 4)
        next_id += entities
        for _ in range(rounds):
            rows = [(rng.randrange(entities), next_id + i) for i in range(messages)]
            next_id += messages
            cpu = system.ask("/user/table", "cpu")
            system.ask("/user/table", "stages")
            t = time.perf_counter()
            feed(system, probe, rows, chunk, 4)
            el = time.perf_counter() - t
            used = system.ask("/user/table", "cpu") - cpu
            stages = system.ask("/user/table", "stages")
            print("  " + ", ".join(f"{k} {v / messages * 1e6:.2f}" for k, v in stages.items()), flush=True)
            print(f"columnar proto {base}, records={RECORDS}: {messages / el:,.0f} applied/s, {used / messages * 1e6:.2f} host CPU µs/msg",
                  flush=True)


if __name__ == "__main__":
    from bench.profiling import columnar_proto
    columnar_proto.main()

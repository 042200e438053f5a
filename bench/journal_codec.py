"""Micro-benchmark of the journal's write and replay paths on the main job's typical event.

    .venv/bin/python -m bench.journal_codec [--rounds 7] [--json]

The event is what an account of `make demo` journals: an `AppliedBatch` of 1-2 `RowApplied`, each holding
a `Deposited(amount)` and the follow-up `[["/user/ledger", Entry(account, amount)]]`. The journal holds
40 such events of each of 10,000 accounts. Prints µs per event, CPU time of this process unless marked
wall, for:

* encode: `records.encode_writes` of one group commit (2,000 AtomicWrites of one event, 2,000 ids), median;
* decode: `records.decode_rows` of the 40 events of an id (what a lazily recovered account replays), median;
* replay: `SqliteJournal.replay_messages` of those ids (SELECT + decode), median;
* commit: `SqliteJournal._store` of group commits of 2,000 events of random ids (WAL, synchronous=FULL;
  another connection writes a row in between, as the demo's other hosts share the file), mean over
  15 commits so that the occasional WAL checkpoint is counted.

Compare two versions of the code by running this file against each, back to back.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import random
import sqlite3
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import closing

from examples.accounts.model import Deposited
from examples.accounts.pipeline import LEDGER_PATH, Entry
from journal import AtomicWrite, PersistentRepr
from journal.records import EncodedBatch, decode_rows, encode_writes
from journal.serialization import checksum, key_seed
from journal.sqlite import SqliteJournal
from persistence.idempotent import AppliedBatch
from spark_bridge.messages import RowApplied

ACCOUNTS = 10_000   # persistence ids in the journal
PER_COMMIT = 2_000  # events, each of another id, per group commit
STORED = 40         # events per id stored before the measurements (and replayed)
REPLAY_IDS = 250    # ids replayed per round
COMMITS = 15        # group commits timed


def event(account: int, seq: int) -> AppliedBatch:
    """A typical account event: 1 or 2 applied rows (alternating), each with one ledger follow-up."""
    n = 1 + (account + seq) % 2
    delivery = 1_000 * seq + account
    rows = tuple(RowApplied(Deposited(17 + i), delivery, [[LEDGER_PATH, Entry(f"acc-{account}", 17 + i)]],
                            seq * 2 + i, seq * 2, delivery - 40) for i in range(n))
    return AppliedBatch(("spark-bridge",), tuple(delivery + i for i in range(n)), rows)


def pid(account: int) -> str:
    """The persistence id of an account."""
    return f"/user/accounts/{account}"


def group_commit(accounts: Iterable[int], seq: int, writer: str) -> list[AtomicWrite]:
    """One group commit: event `seq` of each account."""
    return [AtomicWrite((PersistentRepr(event(a, seq), seq, pid(a), writer_uuid=writer),)) for a in accounts]


def fill(path: str, writer: str) -> None:
    """STORED events of every account; the events of PER_COMMIT accounts are encoded once and reused."""
    with SqliteJournal(path, synchronous="NORMAL") as journal:
        for seq in range(1, STORED + 1):
            blobs = [row[2] for row in encode_writes(group_commit(range(PER_COMMIT), seq, writer), 0)[0].rows]
            rows = [(pid(a), seq, blobs[a % PER_COMMIT], checksum(key_seed(pid(a)), seq, blobs[a % PER_COMMIT]))
                    for a in range(ACCOUNTS)]
            journal._store(EncodedBatch(rows, []))


def per_event(fn: Callable[[], int]) -> float:
    """CPU µs per event of one call of `fn` (which returns how many events it handled)."""
    gc.collect()
    t = time.process_time()  # CPU time: what we want to cut, and less disturbed by other processes
    n = fn()
    return (time.process_time() - t) * 1e6 / n


def run(rounds: int) -> dict[str, float]:
    """µs per event of each measurement."""
    writer = uuid.uuid4().hex
    figures: dict[str, list[float]] = {"encode": [], "decode": [], "replay": []}
    with tempfile.TemporaryDirectory(prefix="bench-journal-codec-") as tmp:
        path = os.path.join(tmp, "journal.db")
        fill(path, writer)
        # The other writer is a plain connection opened before the journal and closed after it: a process
        # shares one journal connection per file, and closing a second one early would drop its locks.
        with closing(sqlite3.connect(path, isolation_level=None)) as other, SqliteJournal(path) as journal:
            other.execute("CREATE TABLE IF NOT EXISTS bench_other (k INTEGER)")
            stored = {pid(a): list(journal._read(pid(a), 1, STORED, STORED)) for a in range(REPLAY_IDS)}
            writes = group_commit(range(PER_COMMIT), STORED + 1, writer)
            for _ in range(rounds):
                figures["encode"].append(per_event(lambda: len(encode_writes(writes, 0)[0].rows)))
                figures["decode"].append(per_event(
                    lambda: sum(len(decode_rows(p, rows)) for p, rows in stored.items())))
                figures["replay"].append(per_event(
                    lambda: sum(len(list(journal.replay_messages(p))) for p in stored)))
            cpu = wall = 0.0
            for k in range(COMMITS):
                seq = STORED + 1 + k
                batch, _ = encode_writes(group_commit(random.Random(k).sample(range(ACCOUNTS), PER_COMMIT), seq,
                                                      writer), 0)
                other.execute("INSERT INTO bench_other VALUES (?)", (k,))
                gc.collect()
                t, c = time.perf_counter(), time.process_time()
                journal._store(batch)
                cpu += time.process_time() - c
                wall += time.perf_counter() - t
    us = {name: statistics.median(values) for name, values in figures.items()}
    us["commit"] = cpu * 1e6 / (COMMITS * PER_COMMIT)
    us["commit_wall"] = wall * 1e6 / (COMMITS * PER_COMMIT)
    return us


def main() -> None:
    """Run the measurements and print them (or one JSON line for `reprise bench`)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7, help="rounds of encode/decode/replay (median taken)")
    parser.add_argument("--json", action="store_true", help="print one JSON line (events/s) for `reprise bench`")
    args = parser.parse_args()
    us = run(args.rounds)
    if args.json:
        print(json.dumps({"reprise": {f"{name}_events_per_s": 1e6 / v for name, v in us.items()}}))
        return
    for name, v in us.items():
        print(f"{name:>10}: {v:7.2f} µs/event")


if __name__ == "__main__":
    main()

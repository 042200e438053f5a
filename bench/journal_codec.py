"""Micro-benchmark of the journal's write and replay paths on the main job's typical event.

    .venv/bin/python -m bench.journal_codec [--rounds 7] [--json]

The event is what an account of `make demo` journals: an `AppliedBatch` of 1-2 `RowApplied`, each holding
a `Deposited(amount)` and the follow-up `[["/user/ledger", Entry(account, amount)]]`. Prints µs per event
(median over rounds; CPU time of this process unless marked wall) for:

* encode: `records.encode_writes` of one group commit (2,000 AtomicWrites of one event, 2,000 ids);
* decode: `records.decode_rows` of 40 events per id (what a lazily recovered account replays);
* replay: `SqliteJournal.replay_messages` of those ids (SELECT + decode);
* commit: `SqliteJournal._store` of one group commit's rows (WAL, synchronous=FULL), CPU and wall time.

Compare two versions of the code by running this file against each, back to back.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable

from examples.accounts.model import Deposited
from examples.accounts.pipeline import LEDGER_PATH, Entry
from journal import AtomicWrite, PersistentRepr
from journal.records import decode_rows, encode_writes
from journal.sqlite import SqliteJournal
from persistence.idempotent import AppliedBatch
from spark_bridge.messages import RowApplied

IDS = 2_000         # persistence ids per group commit (one event each)
REPLAYED = 40       # events per id replayed on recovery
REPLAY_IDS = 250    # ids replayed per round of the decode/replay figures


def event(account: int, seq: int) -> AppliedBatch:
    """A typical account event: 1 or 2 applied rows (alternating), each with one ledger follow-up."""
    n = 1 + (account + seq) % 2
    delivery = 1_000 * seq + account
    rows = tuple(RowApplied(Deposited(17 + i), delivery, [[LEDGER_PATH, Entry(f"acc-{account}", 17 + i)]],
                            seq * 2 + i, seq * 2, delivery - 40) for i in range(n))
    return AppliedBatch(("spark-bridge",), tuple(delivery + i for i in range(n)), rows)


def group_commit(seq: int, writer: str) -> list[AtomicWrite]:
    """One group commit: event `seq` of every account."""
    return [AtomicWrite((PersistentRepr(event(a, seq), seq, f"/user/accounts/{a}", writer_uuid=writer),))
            for a in range(IDS)]


def per_event(fn: Callable[[], int]) -> float:
    """CPU µs per event of one call of `fn` (which returns how many events it handled)."""
    gc.collect()
    t = time.process_time()  # CPU time: what we want to cut, and less disturbed by other processes
    n = fn()
    return (time.process_time() - t) * 1e6 / n


def run(rounds: int) -> dict[str, float]:
    """Median µs per event of each measurement over `rounds` rounds."""
    writer = uuid.uuid4().hex
    figures: dict[str, list[float]] = {"encode": [], "decode": [], "replay": [], "commit": [], "commit_wall": []}
    with tempfile.TemporaryDirectory(prefix="bench-journal-codec-") as tmp:
        journal = SqliteJournal(os.path.join(tmp, "journal.db"))
        try:
            # Fill REPLAYED events per id first (one group commit per sequence nr), timing every commit.
            for seq in range(1, REPLAYED + 1):
                writes = group_commit(seq, writer)
                batch, results = encode_writes(writes, time.time_ns() // 1_000_000)
                assert not any(results) and len(batch.rows) == IDS
                gc.collect()
                t, c = time.perf_counter(), time.process_time()
                journal._store(batch)
                figures["commit"].append((time.process_time() - c) * 1e6 / IDS)
                figures["commit_wall"].append((time.perf_counter() - t) * 1e6 / IDS)
            stored = {f"/user/accounts/{a}": [(seq, blob, ck) for seq, blob, ck in
                                              journal._read(f"/user/accounts/{a}", 1, REPLAYED, REPLAYED)]
                      for a in range(REPLAY_IDS)}
            writes = group_commit(REPLAYED + 1, writer)
            for _ in range(rounds):
                figures["encode"].append(per_event(lambda: len(encode_writes(writes, 0)[0].rows)))
                figures["decode"].append(per_event(
                    lambda: sum(len(decode_rows(pid, rows)) for pid, rows in stored.items())))
                figures["replay"].append(per_event(
                    lambda: sum(len(list(journal.replay_messages(pid))) for pid in stored)))
        finally:
            journal.close()
    return {name: statistics.median(values) for name, values in figures.items()}


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

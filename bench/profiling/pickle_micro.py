"""PROFILE.md §26: CPU µs per message of pickling a batch's entries, pickle.dumps against actors.pickling.dumps
(alternated, min of rounds): a follow-up RowChunk of Entry objects, a client's Deposit entries, a bridge RowChunk
of plain tuples, Confirmed-style lists of ints.  python bench/profiling/pickle_micro.py [ROUNDS]"""

import pickle
import sys
import time

from actors.pickling import PROTOCOL, dumps
from bench.entities import Deposit
from examples.accounts.pipeline import Entry
from spark_bridge.messages import RowChunk

N = 2000
ids = list(range(N))
shapes = {
    "follow-ups: RowChunk of Entry": [("/user/accounts/~f", "/user/ledger/acc-1", RowChunk(
        [f"/user/ledger/acc-{i % 10000}" for i in ids], ids, ids, [Entry(f"acc-{i % 10000}", i) for i in ids], None, 0,
        "/user/accounts/~f"))],
    "client tells: Deposit each": [("/c/1", f"/user/accounts/{i % 10000}", Deposit(i, 5)) for i in ids],
    "bridge rows: RowChunk of tuples": [("/system/spark-bridge", "/user/accounts/acc-1", RowChunk(
        [f"/user/accounts/acc-{i % 10000}" for i in ids], ids, ids, [(f"acc-{i % 10000}", i, 5) for i in ids],
        ("destination", "txid", "amount"), 0, "/system/spark-bridge"))],
    "confirms: lists of ints": [("/user/accounts", "/system/spark-bridge", (ids, ids))],
}
rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
for name, entries in shapes.items():
    assert dumps(entries) == pickle.dumps(entries, PROTOCOL)
    best = {"pickle.dumps": 1e9, "pickling.dumps": 1e9}
    for _ in range(rounds):
        for label, fn in (("pickle.dumps", lambda e: pickle.dumps(e, PROTOCOL)), ("pickling.dumps", dumps)):
            t = time.process_time()
            for _ in range(20):
                fn(entries)
            best[label] = min(best[label], (time.process_time() - t) / 20 / N * 1e6)
    print(f"{name:34} pickle.dumps {best['pickle.dumps']:.3f}  pickling.dumps {best['pickling.dumps']:.3f} µs/message")

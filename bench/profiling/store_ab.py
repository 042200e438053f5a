"""A/B micro-benchmark of SqliteJournal writes and reads between source trees, interleaved in one run (§10).

One worker process per tree (PYTHONPATH=<tree>), each with its own journal file (synchronous=FULL, as
shipped) prefilled with PREFILL events; the driver asks the workers in turn for one round of each shape,
so the machine's load and the journals' growth hit every tree alike. Reported: median CPU and wall µs per
event of write_messages (encoding + INSERTs + COMMIT) per shape and tree, and of three
reads (replay, events_by_tag, events_by_persistence_id: query + decoding) of one id of 20,000 events.

    python bench/profiling/store_ab.py [--rounds 15] [--prefill 100000] TREE_A TREE_B ...
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

WORKER = r'''
import json, os, random, sys, time
from journal import AtomicWrite, PersistentRepr, open_journal
from bench.entities import Deposited

path, prefill = sys.argv[1], int(sys.argv[2])
ids = 5000
rng = random.Random(1)
seq = {}
j = open_journal(f"sqlite://{path}")

def event(pid):
    seq[pid] = seq.get(pid, 0) + 1
    return AtomicWrite([PersistentRepr(Deposited(seq[pid]), seq[pid], pid, writer_uuid="w")])

def entity_round(n):  # a host's group commit: n events of ids at random
    return [event(f"/user/accounts/{rng.randrange(ids)}") for _ in range(n)]

SHAPES = {
    "2,000 events of 5,000 ids (entity host)": lambda: entity_round(2000),
    "100 events of 5,000 ids": lambda: entity_round(100),
    "1,000 events of one id (batch)": lambda: [event("batch") for _ in range(1000)],
    "1 event per call": lambda: [event("single")],
}
for _ in range(prefill // 2000):
    j.write_messages(entity_round(2000))
for n in range(1, 20_001, 1000):  # the read side: one id of 20,000 events, every other one tagged
    j.write_messages([AtomicWrite([PersistentRepr(Deposited(k), k, "replay", writer_uuid="w",
                                                  tags=frozenset({"t"}) if k % 2 else frozenset())])
                      for k in range(n, n + 1000)])
READS = {
    "replay one id of 20,000 events": lambda: sum(1 for _ in j.replay_messages("replay")),
    "events_by_tag, 10,000 events": lambda: sum(1 for _ in j.events_by_tag("t")),
    "events_by_persistence_id, 20,000 events": lambda: sum(1 for _ in j.events_by_persistence_id("replay")),
}
print("ready", flush=True)
for line in sys.stdin:
    out = {}
    for name, read in READS.items():
        c, w = time.process_time(), time.perf_counter()
        n = read()
        out[name] = ((time.process_time() - c) / n * 1e6, (time.perf_counter() - w) / n * 1e6)
    for name, make in SHAPES.items():
        n, cpu, wall = 0, 0.0, 0.0
        while n < 2000:
            writes = make()
            c, w = time.process_time(), time.perf_counter()
            assert j.write_messages(writes) == [None] * len(writes)
            cpu += time.process_time() - c
            wall += time.perf_counter() - w
            n += len(writes)
        out[name] = (cpu / n * 1e6, wall / n * 1e6)
    print(json.dumps(out), flush=True)
j.close()
'''


def main() -> int:
    """Run the workers interleaved and print a table of medians."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--prefill", type=int, default=100_000)
    ap.add_argument("trees", nargs="+")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="reprise-store-ab-") as d:
        workers = []
        for k, tree in enumerate(a.trees):
            env = {**os.environ, "PYTHONPATH": os.path.abspath(tree)}
            w = subprocess.Popen([sys.executable, "-c", WORKER, f"{d}/{k}.db", str(a.prefill)], env=env,
                                 cwd=tree, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            workers.append(w)
        for w in workers:
            assert w.stdout is not None and w.stdout.readline().strip() == "ready"
        results: list[list[dict[str, list[float]]]] = [[] for _ in workers]
        for _ in range(a.rounds):
            for k, w in enumerate(workers):
                assert w.stdin is not None and w.stdout is not None
                w.stdin.write("go\n")
                w.stdin.flush()
                results[k].append(json.loads(w.stdout.readline()))
        for w in workers:
            assert w.stdin is not None
            w.stdin.close()
            w.wait(timeout=60)
    print(f"µs per event, median of {a.rounds} interleaved rounds "
          f"(prefill {a.prefill:,}, load {os.getloadavg()[0]:.1f}): CPU / wall")
    print("| shape | " + " | ".join(a.trees) + " |")
    print("|---|" + "---:|" * len(a.trees))
    for shape in results[0][0]:
        cells = []
        for res in results:
            cpu = statistics.median(r[shape][0] for r in res)
            wall = statistics.median(r[shape][1] for r in res)
            cells.append(f"{cpu:.2f} / {wall:.2f}")
        print(f"| {shape} | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())

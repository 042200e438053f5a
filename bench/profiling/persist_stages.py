"""Split py-spy --idle raw stacks of a closed-loop persist host (persist_loop_spy.py) into stages, scaled to
µs per event: python bench/profiling/persist_stages.py OUT.raw US_PER_EVENT (the unprofiled wall figure)."""

import collections
import sys

from spy import load, store_line_rules

# (stage, substring of a frame); the innermost frame matching a rule decides. The lines of SqliteJournal._store
# that run SQLite are read from its source (spy.store_line_rules).
RULES = [
    *store_line_rules("sqlite INSERT", "sqlite INSERT", "sqlite COMMIT (fsync wait + WAL write)"),
    ("sqlite BEGIN IMMEDIATE (write lock)", "_Connection.begin"),
    ("journal: encode (encode_writes, serialize)", "encode_writes"),
    ("journal: other Python (write_messages, _store)", "journal/"),
    ("persistence: persist, batch, handlers (PersistentActor, coordinator)", "persistence/"),
    ("bench actor (receive_command, handler)", "bench/_delivery_actors"),
    ("host: settle loop, deliver", "actors/"),
]
IDLE = ("EpollSelector.select", "PollPass.select", "watch (actors/supervision.py")  # (PollPass: since §24)

stacks = load(sys.argv[1])
us = float(sys.argv[2])
c = collections.Counter()
for frames, n in stacks:
    if any(i in frames[-1] for i in IDLE):
        continue  # waiting for messages between runs, the orphan watcher thread: not the loop
    stage = "other"
    for f in reversed(frames):
        hit = next((name for name, pat in RULES if pat in f), None)
        if hit:
            stage = hit
            break
    c[stage] += n
total = sum(c.values())
for k, n in c.most_common():
    print(f"| {k} | {100 * n / total:.1f}% | {us * n / total:.1f} |")
print(f"| total ({total} samples) | 100% | {us} |")

"""Micro-benchmark: ms per poll of a live persistence_ids (PROFILE §45), with nothing new and after 10 new ids.

Fills a fresh journal with EVENTS events over IDS ids (round robin), deletes every event of the first DELETED ids,
and on PostgreSQL adds GHOSTS ids that are only in highest_sequence_nr (written and deleted; put there by SQL, for
speed); then times the backend's poller as Journal.persistence_ids uses it: 5 first polls, 30 with nothing new,
and 20 each after 10 new ids (each followed by one more with nothing new).

    PYTHONPATH=<tree> python bench/profiling/ids_poll_micro.py URL EVENTS IDS [DELETED] [GHOSTS]
    e.g. sqlite:///tmp/ids/a.db 200000 100000 10000;
         "postgresql://postgres@127.0.0.1:5432/test?schema=idsbench" 200000 1000 100 100000 (drop the schema after)
"""

import statistics
import sys
import time
import uuid

from journal import open_journal
from journal.model import MAX_SEQUENCE_NR, AtomicWrite, PersistentRepr


def main() -> None:
    """Fill, then print the poll times."""
    url, events, nids = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    deleted = int(sys.argv[4]) if len(sys.argv) > 4 else 0
    ghosts = int(sys.argv[5]) if len(sys.argv) > 5 else 0
    j = open_journal(url)
    writes = [AtomicWrite([PersistentRepr(s, s, f"id-{i}")]) for s in range(1, events // nids + 1) for i in range(nids)]
    for i in range(0, len(writes), 2000):
        assert j.write_messages(writes[i:i + 2000]) == [None] * len(writes[i:i + 2000])
    for i in range(deleted):
        j.delete_messages_to(f"id-{i}", MAX_SEQUENCE_NR)
    if ghosts:
        j.execute("INSERT INTO {s}.highest_sequence_nr SELECT 'del-' || g, 1 FROM generate_series(1, %s) g",  # type: ignore[attr-defined]
                  (ghosts,))
    poll = j._persistence_ids_poller()
    seen: set[str] = set()

    def one() -> tuple[float, int]:
        t = time.perf_counter()
        new = sorted(set(poll()).difference(seen))  # what Journal.persistence_ids does with a poll
        seen.update(new)
        return (time.perf_counter() - t) * 1000, len(new)

    print("first polls (ms, new ids):", [(round(ms, 2), n) for ms, n in (one() for _ in range(5))])
    idle = [one()[0] for _ in range(30)]
    after = []
    for r in range(20):
        assert j.write_messages([AtomicWrite([PersistentRepr(0, 1, f"new-{r}-{k}-{uuid.uuid4().hex[:6]}")])
                                 for k in range(10)]) == [None] * 10
        ms, n = one()
        assert n == 10, n
        after.append(ms)
        idle.append(one()[0])
    for what, times in (("nothing new", idle), ("after 10 new ids", after)):
        print(f"{what}: median {statistics.median(times):.3f} ms (min {min(times):.3f}, max {max(times):.3f})")
    j.close()


if __name__ == "__main__":
    main()

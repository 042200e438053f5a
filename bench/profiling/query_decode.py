"""Persistence queries against replay, in one process: rows/s of replay_messages and events_by_persistence_id over one
id of 100,000 events, and of events_between / events_by_tag over 100,000 events of 1,000 interleaved ids (each
consecutive event of another id, as in an entity host's journal). Each read starts from a collected heap.

    PYTHONPATH=. .venv/bin/python bench/profiling/query_decode.py [sqlite|postgresql] [--big-heap]

--big-heap first imports pyspark, pyarrow and pandas and keeps 300,000 small lists alive (a Spark worker's heap),
where a full collection costs more.
"""

import gc
import shutil
import sys
import tempfile
import time
import uuid

if "--big-heap" in sys.argv:
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401
    import pyspark.sql  # noqa: F401

    heap = [[i] for i in range(300_000)]

from bench.journal import PG_URL, _event, write_all
from journal import AtomicWrite, PersistentRepr, open_journal
from journal.postgres import drop_schema

backend = sys.argv[1] if len(sys.argv) > 1 and not sys.argv[1].startswith("--") else "sqlite"
scratch = tempfile.mkdtemp(prefix="reprise-query-decode-")
url = (f"sqlite://{scratch}/j.db" if backend == "sqlite"
       else f"{PG_URL}?schema=reprise_query_decode_{uuid.uuid4().hex[:8]}")


def timed(name: str, read) -> None:
    rates = []
    for _ in range(3):
        gc.collect()
        t = time.perf_counter()
        n = read()
        rates.append(n / (time.perf_counter() - t))
    print(f"{name:44} " + "  ".join(f"{r:9,.0f}/s" for r in rates))


try:
    with open_journal(url) as j:
        one, mixed = frozenset({"one"}), frozenset({"mixed"})
        writes = [AtomicWrite([PersistentRepr(_event(n), n, "one-id", writer_uuid="w", tags=one)])
                  for n in range(1, 100_001)]
        writes += [AtomicWrite([PersistentRepr(_event(n), n // 1000 + 1, f"acc-{n % 1000}", writer_uuid="w",
                                               tags=mixed)]) for n in range(100_000)]
        write_all(j, writes)
        del writes
        hi = j.newest_offset()
        timed("replay one id", lambda: sum(1 for _ in j.replay_messages("one-id")))
        timed("events_by_persistence_id one id", lambda: sum(1 for _ in j.events_by_persistence_id("one-id")))
        timed("events_by_tag, one id", lambda: sum(1 for _ in j.events_by_tag("one")))
        timed("events_by_tag, 1,000 interleaved ids", lambda: sum(1 for _ in j.events_by_tag("mixed")))
        timed("events_between, all", lambda: sum(1 for _ in j.events_between(0, hi)))
finally:
    shutil.rmtree(scratch, ignore_errors=True)
    if backend != "sqlite":
        drop_schema(url)

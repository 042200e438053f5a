"""PostgreSQL journal writes (PROFILE.md §42): batches of 100 one-event writes of 100 ids, 500 single writes, and 20
writes of 1,000 events of one id, into a new schema of the test database (dropped after); rates per second.

    PYTHONPATH=$PWD python bench/profiling/pg_write_micro.py
"""

import time
import uuid

from journal import open_journal
from journal.model import AtomicWrite, PersistentRepr

schema = "bench_pgw_" + uuid.uuid4().hex[:8]
url = f"postgresql://postgres@127.0.0.1:5432/test?schema={schema}"
j = open_journal(url)
try:
    w = "w" * 36
    out = []
    # batches of 100 one-event writes (the entity host's group commit shape)
    t = time.perf_counter()
    n = 0
    for b in range(100):
        j.write_messages([AtomicWrite([PersistentRepr(("salary", 1), 1, f"acc-{b}-{k}", writer_uuid=w)]) for k in range(100)])
        n += 100
    out.append(f"batches of 100 ids: {n / (time.perf_counter() - t):,.0f}/s")
    t = time.perf_counter()
    for k in range(500):
        j.write_messages([AtomicWrite([PersistentRepr("x", k + 1, "single", writer_uuid=w)])])
    out.append(f"singles: {500 / (time.perf_counter() - t):,.0f}/s")
    t = time.perf_counter()
    for b in range(20):
        j.write_messages([AtomicWrite([PersistentRepr("y", b * 1000 + i + 1, "many", writer_uuid=w) for i in range(1000)])])
    out.append(f"1000 per write: {20000 / (time.perf_counter() - t):,.0f}/s")
    print(" | ".join(out))
finally:
    j.close()
    import psycopg
    with psycopg.connect("postgresql://postgres@127.0.0.1:5432/test", autocommit=True) as c:
        c.execute(f"DROP SCHEMA {schema} CASCADE")

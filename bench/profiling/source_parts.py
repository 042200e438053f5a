"""PROFILE.md §39: the journal's Spark source in one process: query and decode, event_json, and a partition
read as a Spark worker does it (JSON and struct), µs a row, over bench.spark_source's events.

    PYTHONPATH=$PWD python bench/profiling/source_parts.py [sqlite|pg] [EVENTS]
"""

import gc
import sys
import tempfile
import time
import uuid

import pyspark.sql.types as T

from bench.spark_source import PG_URL, fill
from journal import open_journal
from spark_bridge.source import SourceOptions, _OffsetRange, _read_partition, event_json

kind = sys.argv[1] if len(sys.argv) > 1 else "pg"
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
tmp = tempfile.TemporaryDirectory()
url = f"{PG_URL}?schema=bench_{uuid.uuid4().hex[:8]}" if kind == "pg" else f"sqlite://{tmp.name}/j.db"
fill(url, n)


def timed(label: str, count) -> None:
    gc.collect()
    t = time.perf_counter()
    rows = count()
    print(f"{label}: {(time.perf_counter() - t) / rows * 1e6:.2f} µs a row")


try:
    with open_journal(url) as j:
        timed("query + decode (events_between, all)", lambda: sum(1 for _ in j.events_between(0, 10**12)))
        events = [e.event for e in j.events_between(0, 10**12)]
        timed("event_json", lambda: len([event_json(e) for e in events]))
    columns = [T.StructField("offset", T.LongType()), T.StructField("persistence_id", T.StringType()),
               T.StructField("sequence_nr", T.LongType()), T.StructField("timestamp", T.LongType()),
               T.StructField("tags", T.ArrayType(T.StringType()))]
    json_schema = T.StructType([*columns, T.StructField("event", T.StringType())])  # (the default SCHEMA)
    struct_schema = T.StructType([*columns, T.StructField("event", T.StructType([
        T.StructField("account", T.StringType()), T.StructField("amount", T.LongType()),
        T.StructField("note", T.StringType())]))])
    for label, schema in (("partition, JSON", json_schema), ("partition, struct", struct_schema),
                          ("partition, JSON again", json_schema)):
        timed(label, lambda schema=schema: sum(getattr(b, "num_rows", 1) for b in _read_partition(
            SourceOptions(url), schema, _OffsetRange(0, 10**12))))
finally:
    if kind == "pg":
        from journal.postgres import drop_schema
        drop_schema(url)
    tmp.cleanup()

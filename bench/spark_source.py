"""Benchmark (not a test): rows/s read by the "reprise-journal" Spark source vs spark.read.format("jdbc").

    .venv/bin/python -m bench.spark_source [--events 200000] [--rounds 2] [--json FILE]

One PostgreSQL journal (a fresh schema, dropped afterwards) holding `events` Deposited events of 1,000
ids, every one tagged "account"; one local[2] Spark session; each read is materialized whole
(`.write.format("noop")`) in 2 partitions, best of `rounds`:
- reprise-journal, all events, event as JSON; the same with the event decoded to a struct (a user schema);
  the tag's events (the tags table joined);
- the peer a user would pick for the same PostgreSQL table: spark.read.format("jdbc") on the journal
  table (partitioned on `ordering`), and on the tag's join. It reads the stored rows as they are (the
  event is msgpack bytes: no decoding, no checksum check). Its driver is the Debian package
  libpostgresql-jdbc-java (/usr/share/java/postgresql.jar; else one in the local Maven repository ~/.m2; or
  $REPRISE_BENCH_JDBC_JAR); where it is
  absent, the peer is reported as not measured.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from journal import AtomicWrite, PersistentRepr, open_journal, register_type

PG_URL = os.environ.get("REPRISE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
def _jdbc_jar() -> str:
    """$REPRISE_BENCH_JDBC_JAR, else Debian's driver, else one in the local Maven repository (~/.m2)."""
    if "REPRISE_BENCH_JDBC_JAR" in os.environ:
        return os.environ["REPRISE_BENCH_JDBC_JAR"]
    debian = "/usr/share/java/postgresql.jar"
    maven = sorted(glob.glob(os.path.expanduser("~/.m2/repository/org/postgresql/postgresql/*/postgresql-*.jar")))
    return debian if os.path.exists(debian) or not maven else maven[-1]


JDBC_JAR = _jdbc_jar()
TAG = "account"
PARTITIONS = 2


@register_type(manifest="bench.spark_source.Deposited")
@dataclass(frozen=True)
class Deposited:
    """A typical small domain event."""

    account: str
    amount: int
    note: str


STRUCT_SCHEMA = ("offset long, persistence_id string, sequence_nr long, timestamp long, tags array<string>, "
                 "event struct<account:string, amount:long, note:string>")


def fill(url: str, events: int) -> None:
    """`events` tagged events of 1,000 ids, 1,000 AtomicWrites per write_messages call."""
    tags = frozenset({TAG})
    with open_journal(url) as j:
        for start in range(0, events, 1000):
            writes = [AtomicWrite([PersistentRepr(Deposited(f"acc-{n % 1000}", n, "salary"), n // 1000 + 1,
                                                  f"acc-{n % 1000}", tags=tags)])
                      for n in range(start, min(start + 1000, events))]
            assert j.write_messages(writes) == [None] * len(writes)


def best_rate(read: Callable[[], Any], rows: int, rounds: int) -> float:
    """Rows/s of the fastest of `rounds` full reads (a DataFrame written to the noop sink)."""
    best = float("inf")
    for _ in range(rounds):
        started = time.monotonic()
        read().write.format("noop").mode("overwrite").save()
        best = min(best, time.monotonic() - started)
    return rows / best


def jdbc_options(url: str) -> dict[str, str]:
    """spark.read.format("jdbc") options for the PostgreSQL database of journal URL `url`."""
    parts = urlsplit(url)
    options = {"url": f"jdbc:postgresql://{parts.hostname or '127.0.0.1'}:{parts.port or 5432}{parts.path}",
               "driver": "org.postgresql.Driver", "user": parts.username or "postgres"}
    if parts.password:
        options["password"] = parts.password
    return options


def main(argv: list[str] | None = None) -> dict[str, Any]:
    """Fill a journal, read it both ways, print the table; write JSON if asked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--json", metavar="FILE", help="also write the results to FILE")
    args = parser.parse_args(argv)
    import spark_bridge
    from journal.postgres import drop_schema
    from spark_bridge import local_session

    schema = f"reprise_bench_src_{uuid.uuid4().hex[:8]}"
    url = f"{PG_URL}?schema={schema}"
    have_jdbc = os.path.isfile(JDBC_JAR)
    conf = {"spark.ui.showConsoleProgress": "false"}
    if have_jdbc:
        conf["spark.jars"] = JDBC_JAR
    paths = tuple(p for p in sys.path if p and os.path.isdir(p))
    spark = local_session("reprise-bench-spark-source", "local[2]", 4, True, paths, **conf)
    spark_bridge.register(spark)
    figures: list[tuple[str, str, float]] = []
    notes: list[str] = []
    try:
        started = time.monotonic()
        fill(url, args.events)
        print(f"wrote {args.events:,} events in {time.monotonic() - started:.1f} s")

        def source(struct: bool = False, **options: str) -> Callable[[], Any]:
            def read() -> Any:
                reader = spark.read.format("reprise-journal")
                if struct:
                    reader = reader.schema(STRUCT_SCHEMA)
                # Executors import this module by name (it registers Deposited), also when it runs as __main__.
                reader = (reader.option("url", url).option("partitions", str(PARTITIONS))
                          .option("imports", "bench.spark_source"))
                for key, value in options.items():
                    reader = reader.option(key, value)
                return reader.load()
            return read

        def jdbc(table: str) -> Callable[[], Any]:
            def read() -> Any:
                reader = spark.read.format("jdbc")
                for key, value in jdbc_options(PG_URL).items():
                    reader = reader.option(key, value)
                return (reader.option("dbtable", table).option("partitionColumn", "ordering")
                        .option("lowerBound", "1").option("upperBound", str(args.events + 1))
                        .option("numPartitions", str(PARTITIONS)).option("fetchsize", "10000").load())
            return read

        n = args.events
        figures.append(("reprise-journal", "all events, event as JSON", best_rate(source(), n, args.rounds)))
        figures.append(("reprise-journal", "all events, event as struct", best_rate(source(struct=True), n, args.rounds)))
        figures.append(("reprise-journal", f"tag {TAG!r}, event as JSON", best_rate(source(tag=TAG), n, args.rounds)))
        tagged = (f"(SELECT j.* FROM {schema}.journal j JOIN {schema}.tags t ON t.ordering = j.ordering "
                  f"WHERE t.tag = '{TAG}') tagged")
        if have_jdbc:
            figures.append(("spark jdbc", "journal table (msgpack bytes)", best_rate(jdbc(f"{schema}.journal"), n,
                                                                                   args.rounds)))
            figures.append(("spark jdbc", f"tag {TAG!r} join (msgpack bytes)", best_rate(jdbc(tagged), n, args.rounds)))
        else:
            notes.append(f'spark.read.format("jdbc") was not measured: its driver {JDBC_JAR} is absent '
                         f"(apt-get install libpostgresql-jdbc-java)")
    finally:
        spark.stop()
        drop_schema(url)

    print(f"{args.events:,} events on PostgreSQL, local[2], {PARTITIONS} partitions, best of {args.rounds}, "
          f"{os.cpu_count()} cores")
    print("| reader | read | rows/s |\n|---|---|---:|")
    for system, what, rate in figures:
        print(f"| {system} | {what} | {rate:,.0f} |")
    peer = {what: rate for system, what, rate in figures if system == "spark jdbc"}
    ours = {what: rate for system, what, rate in figures if system == "reprise-journal"}
    if peer:
        print(f"reprise-journal all events (JSON) vs jdbc journal table: "
              f"{ours['all events, event as JSON'] / peer['journal table (msgpack bytes)']:.2f}x; "
              f"tag vs jdbc tag join: {ours[f'tag {TAG!r}, event as JSON'] / peer[f'tag {TAG!r} join (msgpack bytes)']:.2f}x")
    for note in notes:
        print(note)
    doc = {"events": args.events, "notes": notes,
           "results": [{"system": system, "measurement": f"{what} rows/s", "rate": rate}
                       for system, what, rate in figures]}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return doc


if __name__ == "__main__":
    main(sys.argv[1:])

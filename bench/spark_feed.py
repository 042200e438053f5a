"""Benchmark (not a test): rows/s through feed(ack="persisted") and feed(ack="processed") vs plain TCP floors.

    .venv/bin/python -m bench.spark_feed [--rows 1000000] [--json FILE] [--skip-durable]

One Spark session (local[2]), one cached DataFrame of `rows` deposits to 1,000 account paths, then:
- floors: the same job pushing msgpack batches of 2,000 rows to a plain TCP server that acknowledges
  each batch (no actors, no journal): once from Row objects (`df.rdd`), once from Arrow record batches
  (`mapInArrow`, the path `feed` takes for plain columns);
- feed(ack="persisted") into in-memory account entities (the rate counts until every row is durable in the
  bridge's journal; the fan-out is then waited for before the next run);
- feed(ack="processed") into in-memory accounts (each confirms its row at once);
- feed(ack="processed") into durable accounts (FeedReceiver: one journal event per row, exactly once), in one
  host process and then in two (shards=2), then as rows of one FeedTable (one journal record per group
  commit, exactly once);
- the same two in-memory runs through the data sink, `df.write.format("reprise")` (spark_bridge.sink),
  each right after its feed() run, with the ratio sink / feed (target >= 0.9x).
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import socketserver
import statistics
import struct
import sys
import tempfile
import threading
import time
from typing import Any

import msgpack

import actors
from spark_bridge import BRIDGE_PATH, FeedProgress, GetFeedProgress, feed, register, start_bridge
from tests.spark_bridge.sample import Account, DurableAccount, TableAccounts

BATCH = 2_000


class _Acker(socketserver.BaseRequestHandler):
    """Reads length-prefixed msgpack batches and acknowledges each one (no actors, no journal)."""

    def handle(self) -> None:
        f = self.request.makefile("rb")
        while header := f.read(4):
            msgpack.unpackb(f.read(struct.unpack(">I", header)[0]))
            self.request.sendall(b"k")


def _send(s: socket.socket, payload: object) -> None:
    data = msgpack.packb(payload)
    s.sendall(struct.pack(">I", len(data)) + data)
    s.recv(1)


def _push_rows(port: int, rows):
    """One Spark task of the Row floor: msgpack batches of (path, row dict), one ack per batch."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        batch, n = [], 0
        for row in rows:
            batch.append((row["destination"], row.asDict()))
            if len(batch) >= BATCH:
                _send(s, batch)
                n, batch = n + len(batch), []
        if batch:
            _send(s, batch)
            n += len(batch)
    yield n


def _push_arrow(port: int, batches):
    """One Spark task of the Arrow floor: columns as lists, cut into batches of 2,000, one ack per batch."""
    import pyarrow as pa

    n = 0
    with socket.create_connection(("127.0.0.1", port)) as s:
        for rb in batches:
            columns = [c.to_pylist() for c in rb.columns]
            for i in range(0, rb.num_rows, BATCH):
                _send(s, [c[i:i + BATCH] for c in columns])
            n += rb.num_rows
    yield pa.RecordBatch.from_pydict({"n": [n]}, schema=pa.schema([("n", pa.int64())]))


def _floor(df, rows: int, arrow: bool) -> float:
    """rows/s of the same job pushing its rows to a plain TCP acker: from Arrow batches, or from Row objects."""
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Acker)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    try:
        started = time.monotonic()
        if arrow:
            assert sum(r[0] for r in df.mapInArrow(lambda it: _push_arrow(port, it), "n long").collect()) == rows
        else:
            assert sum(df.rdd.mapPartitions(lambda it: _push_rows(port, it)).collect()) == rows
        return rows / (time.monotonic() - started)
    finally:
        server.shutdown()
        server.server_close()


def _drained(system: actors.System, feed_id: str, rows: int, timeout: float = 600.0) -> float:
    """Wait until every row of `feed_id` is confirmed by its destination; the seconds it took."""
    started = time.monotonic()
    while time.monotonic() - started < timeout:
        p = system.ask(BRIDGE_PATH, GetFeedProgress(feed_id), timeout=30)
        if isinstance(p, FeedProgress) and p.processed >= rows:
            return time.monotonic() - started
        time.sleep(0.2)
    raise RuntimeError(f"{feed_id}: the fan-out did not finish within {timeout} s")


def _sink(df, port: int, feed_id: str, ack: str) -> float:
    """rows/s of df.write.format("reprise") (same batch size and window as feed's defaults)."""
    started = time.monotonic()
    (df.write.format("reprise").mode("append").option("port", str(port)).option("feed_id", feed_id)
     .option("ack", ack).save())
    seconds = time.monotonic() - started
    return int(df.count()) / seconds


def _system(account: type, tmp: str, shards: int = 1) -> actors.System:
    system = actors.start("multiproc", journal=f"sqlite:///{tmp}/journal.db", snapshot_store=f"sqlite:///{tmp}/snapshots.db")
    system.spawn(account, path="/user/accounts", entities=True, shards=shards)
    start_bridge(system)
    return system


def session_and_frame(name: str, rows: int) -> tuple[Any, Any]:
    """A local[2] SparkSession whose workers import this checkout, and the bench's DataFrame of `rows` deposits
    (destination over 1,000 accounts, amount, txid) in 2 partitions, cached and counted."""
    from spark_bridge import local_session

    spark = local_session(name, import_paths=tuple(p for p in sys.path if p and os.path.isdir(p)),
                          **{"spark.ui.showConsoleProgress": "false"})
    df = spark.range(0, rows, numPartitions=2).selectExpr(
        "concat('/user/accounts/a', cast(id % 1000 as string)) as destination",
        "cast(id % 97 + 1 as long) as amount", "id as txid").cache()
    df.count()
    return spark, df


def main(argv: list[str] | None = None) -> dict:
    """Run the floors and the feeds on one DataFrame; print rows/s and ratios; write JSON if asked."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--json", metavar="FILE", help="also write the results to FILE")
    parser.add_argument("--skip-durable", action="store_true", help="leave out the durable-accounts run")
    parser.add_argument("--rounds", type=int, default=3,
                        help="rounds of the FeedTable run, each right after an Arrow floor run (medians reported)")
    args = parser.parse_args(argv)
    rows = args.rows
    spark, df = session_and_frame("reprise-bench-spark-feed", rows)
    register(spark)
    row_floor = _floor(df, rows, arrow=False)
    arrow_floors = [_floor(df, rows, arrow=True)]
    figures: dict[str, float] = {}
    with tempfile.TemporaryDirectory(prefix="reprise-bench-spark-") as tmp:
        with _system(Account, tmp) as system:
            feed(df.limit(10_000), system=system.admin_port, feed_id="warm-up", progress=False)
            _sink(df.limit(10_000), system.admin_port, "warm-up-sink", "persisted")  # (its Python workers start)
            persisted = feed(df, system=system.admin_port, feed_id="bench-persisted", progress=False)
            figures["persisted"] = persisted.rows_per_second
            drain = _drained(system, "bench-persisted", rows)
            figures["persisted, then delivered"] = rows / (persisted.seconds + drain)
            figures["sink persisted"] = _sink(df, system.admin_port, "bench-sink-persisted", "persisted")
            _drained(system, "bench-sink-persisted", rows)
            processed = feed(df, system=system.admin_port, feed_id="bench-processed", ack="processed",
                             progress=False)
            figures["processed"] = processed.rows_per_second
            figures["sink processed"] = _sink(df, system.admin_port, "bench-sink-processed", "processed")
    # The durable accounts in one host process, then split over two (shards=2, one per core: as the demo runs
    # them): one host is the bottleneck of this run (bench/PROFILE.md §16).
    # Then the same accounts as rows of one FeedTable (one journal record per group commit: PROFILE.md §18), in
    # rounds each right after an Arrow floor run: issue 16's target is their ratio, and this VM's speed moves by
    # 1.5x within minutes (PROFILE.md §42), so each ratio compares runs of the same minute.
    runs = [(DurableAccount, 1, "processed, durable accounts"),
            (DurableAccount, 2, "processed, durable accounts, 2 shards")]
    runs += [(TableAccounts, 1, "processed, durable FeedTable accounts")] * max(1, args.rounds)
    table_rates: list[float] = []
    table_ratios: list[float] = []
    for account, shards, name in runs:
        if args.skip_durable:
            break
        if account is TableAccounts:
            arrow_floors.append(_floor(df, rows, arrow=True))
        with (tempfile.TemporaryDirectory(prefix="reprise-bench-spark-") as tmp,
              _system(account, tmp, shards) as system):
            feed(df.limit(10_000), system=system.admin_port, feed_id="warm-up", ack="processed", progress=False)
            durable = feed(df, system=system.admin_port, feed_id="bench-durable", ack="processed", progress=False)
        if account is TableAccounts:
            table_rates.append(durable.rows_per_second)
            table_ratios.append(durable.rows_per_second / arrow_floors[-1])
            figures[name] = statistics.median(table_rates)
        else:
            figures[name] = durable.rows_per_second
    arrow_floor = statistics.median(arrow_floors)
    spark.stop()

    print(f"{rows:,} rows, local[2], batch {BATCH:,}, window 8, 1,000 account entities, {os.cpu_count()} cores")
    print("| run | rows/s | vs Row floor | vs Arrow floor |\n|---|---:|---:|---:|")
    print(f"| plain TCP floor, Row objects | {row_floor:,.0f} | 1.00x | {row_floor / arrow_floor:.2f}x |")
    print(f"| plain TCP floor, Arrow batches | {arrow_floor:,.0f} | {arrow_floor / row_floor:.2f}x | 1.00x |")
    labels = {"persisted": 'feed ack="persisted" (in-memory accounts)',
              "persisted, then delivered": "  ... until every row was confirmed by its account",
              "processed": 'feed ack="processed" (in-memory accounts)',
              "processed, durable accounts": 'feed ack="processed" (durable FeedReceiver accounts)',
              "processed, durable accounts, 2 shards":
                  'feed ack="processed" (durable FeedReceiver accounts in 2 shard processes)',
              "processed, durable FeedTable accounts":
                  'feed ack="processed" (durable accounts as rows of one FeedTable)',
              "sink persisted": 'df.write.format("reprise") ack="persisted"',
              "sink processed": 'df.write.format("reprise") ack="processed"'}
    for name, rate in figures.items():
        print(f"| {labels[name]} | {rate:,.0f} | {rate / row_floor:.2f}x | {rate / arrow_floor:.2f}x |")
    if table_rates:
        print("FeedTable rounds, each after its Arrow floor run: " + "; ".join(
            f"{rate:,.0f} / {floor:,.0f} = {ratio:.2f}x"
            for rate, floor, ratio in zip(table_rates, arrow_floors[-len(table_rates):], table_ratios, strict=True)))
        ratio = statistics.median(table_ratios)
        print(f"target FeedTable processed >= 0.5x its Arrow floor (median of the rounds' ratios): {ratio:.2f}x, "
              f"{'met' if ratio >= 0.5 else 'NOT met'}")
    for name, target in (("persisted", 250_000), ("processed", 100_000)):
        print(f"target {name} >= {target:,} rows/s: {'met' if figures[name] >= target else 'NOT met'}")
    for name in ("persisted", "processed"):
        ratio = figures[f"sink {name}"] / figures[name]
        print(f"sink / feed, ack={name}: {ratio:.2f}x (target >= 0.9x: {'met' if ratio >= 0.9 else 'NOT met'})")
    results = [{"system": "plain TCP (Row objects)", "measurement": "rows/s", "rate": row_floor},
               {"system": "plain TCP (Arrow)", "measurement": "rows/s", "rate": arrow_floor}]
    results += [{"system": "reprise", "measurement": f"feed {name} rows/s", "rate": rate} for name, rate in figures.items()]
    doc = {"rows": rows, "results": results, "arrow_floors": arrow_floors, "feed_table_rounds": table_rates}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return doc


if __name__ == "__main__":
    main(sys.argv[1:])

"""A Structured Streaming query fed into persistent account entities with spark_bridge.feed_stream.

    python -m examples.streaming [--rows 20000] [--accounts 100] [--rows-per-batch 2000] [--source rate|files]

A multi-process actor system runs the Spark bridge (/system/spark-bridge) and the accounts of
examples/accounts/pipeline.py (/user/accounts/<id>, BankAccount: FeedReceiver entities). A streaming
DataFrame of deposits is fed through `feed_stream`: each micro-batch becomes one `feed()` with the
feed id "<feed id>/<batch id>", acknowledged once the bridge has journaled it; the bridge then
delivers each row at least once to its account, which applies it once (FeedReceiver.apply_row) even
when the bridge sends it again after a restart.

Sources: `rate` (Spark's `rate-micro-batch`: exactly --rows-per-batch new rows per micro-batch; the
query is stopped once --rows rows went through) or `files` (the deposits written as JSON files first,
read one file per micro-batch with an availableNow trigger, so the query ends by itself). At the end
every balance is compared with the balance Spark computes itself; any mismatch exits non-zero.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from typing import Any

import actors
from examples.accounts.pipeline import ACCOUNTS_PATH, BankAccount, balances
from spark_bridge import feed_stream, local_session, start_bridge

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FEED_ID = "streaming-example"


def with_deposit_columns(df: Any, rows: int, accounts: int) -> Any:
    """Add destination and amount to a DataFrame of row numbers `value` (as model.deposit computes them)."""
    return df.where(f"value < {rows}").selectExpr(
        "value",
        f"concat('/user/accounts/', cast((value * 7919) % {accounts} as string)) as destination",
        "cast((value * 31) % 97 + 1 as long) as amount",
    )


def rate_stream(spark: Any, rows: int, accounts: int, rows_per_batch: int) -> Any:
    """Spark's rate-micro-batch source: row numbers 0, 1, 2, ... exactly `rows_per_batch` per micro-batch."""
    raw = (spark.readStream.format("rate-micro-batch").option("rowsPerBatch", rows_per_batch)
           .option("numPartitions", 2).load())
    return with_deposit_columns(raw, rows, accounts)


def file_stream(spark: Any, rows: int, accounts: int, rows_per_batch: int, directory: str) -> Any:
    """Write the row numbers as JSON files of `rows_per_batch` rows, then stream them one file per batch."""
    files = max(1, -(-rows // rows_per_batch))
    spark.range(0, rows, numPartitions=files).withColumnRenamed("id", "value").write.mode("overwrite").json(directory)
    raw = spark.readStream.schema("value long").option("maxFilesPerTrigger", 1).json(directory)
    return with_deposit_columns(raw, rows, accounts)


def expected_balances(spark: Any, rows: int, accounts: int) -> dict[str, int]:
    """Every account's balance as Spark computes it from the same rows (a batch query, not the stream)."""
    df = with_deposit_columns(spark.range(0, rows).withColumnRenamed("id", "value"), rows, accounts)
    totals = df.groupBy("destination").sum("amount").collect()
    return {r["destination"].rsplit("/", 1)[1]: r["sum(amount)"] for r in totals}


def wait_until_fed(query: Any, rows: int, timeout: float) -> int:
    """Wait until the query's completed micro-batches read `rows` rows (a rate stream never ends)."""
    seen: dict[int, int] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for p in query.recentProgress:
            seen[p["batchId"]] = p["numInputRows"]
        if sum(seen.values()) >= rows or query.exception() is not None or not query.isActive:
            break
        time.sleep(0.2)
    return sum(seen.values())


def stop_between_batches(query: Any, timeout: float = 10.0) -> None:
    """Stop a query while its trigger is idle: interrupting a running foreachBatch makes Spark log a stack overflow."""
    deadline = time.monotonic() + timeout
    while query.isActive and query.status["isTriggerActive"] and time.monotonic() < deadline:
        time.sleep(0.02)
    query.stop()


def run(spark: Any, rows: int = 20_000, accounts: int = 100, rows_per_batch: int = 2_000, source: str = "rate",
        tag: str | None = None, timeout: float = 120.0) -> int:
    """Run the streaming pipeline with `spark`; returns the exit code."""
    workdir = tempfile.mkdtemp(prefix="reprise-streaming-")
    journal = f"sqlite:///{workdir}/journal.db"
    print(f"Streaming {rows:,} deposits from a {source} source into {accounts:,} accounts "
          f"({rows_per_batch:,} rows per micro-batch), journal {journal}")
    started = time.perf_counter()
    try:
        with actors.start("multiproc", journal=journal, snapshot_store=journal, tag=tag,
                          run_dir=f"{workdir}/run") as system:
            system.spawn(BankAccount, ACCOUNTS_PATH, entities=True, kwargs={"ledger": None})
            start_bridge(system)
            if source == "rate":
                stream = rate_stream(spark, rows, accounts, rows_per_batch)
                # A micro-batch every second: the query is idle most of the time, so it stops cleanly.
                trigger = {"processingTime": "1 second"}
            else:
                stream = file_stream(spark, rows, accounts, rows_per_batch, f"{workdir}/input")
                trigger = {"availableNow": True}
            query = feed_stream(stream, system, feed_id=FEED_ID, checkpoint=f"{workdir}/checkpoint",
                                to="destination", trigger=trigger)
            try:
                read = wait_until_fed(query, rows, timeout)
                if source == "files":
                    query.awaitTermination(timeout)
                else:
                    stop_between_batches(query)
            finally:
                query.stop()
            if query.exception() is not None:
                print(f"FAILED: the streaming query failed: {query.exception()}")
                return 1
            # Counted again now that it stopped: an availableNow query can be inactive before its last progress
            # report is in recentProgress (CI read 2,000 of 3,000 rows that way, every balance exact).
            final = {p["batchId"]: p["numInputRows"] for p in query.recentProgress}
            read = max(read, sum(final.values()))
            batches = len({b for b, n in final.items() if n})
            expected = expected_balances(spark, rows, accounts)
            # Fan-out follows the bridge's acks: wait (bounded) until the accounts have applied everything.
            deadline = time.monotonic() + timeout
            while True:
                got = {a: b.balance for a, b in balances(system, list(expected), 60.0).items()}
                if got == expected or time.monotonic() > deadline:
                    break
                time.sleep(0.2)
            letters = system.dead_letters().count
        seconds = time.perf_counter() - started
        mismatches = {a: (got.get(a), want) for a, want in expected.items() if got.get(a) != want}
        print("summary")
        print(f"  rows read          {read:,} in {batches} micro-batches (the first {rows:,} are deposits)")
        print(f"  balances checked   {len(expected):,}, mismatches {len(mismatches):,}")
        print(f"  dead letters       {letters:,}")
        print(f"  wall time          {seconds:.1f} s")
        if mismatches or read < rows:
            for account, (have, want) in list(mismatches.items())[:10]:
                print(f"  MISMATCH account {account}: balance {have}, expected {want}")
            print("FAILED")
            return 1
        print("OK: every balance equals Spark's own sum")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def spark_session(master: str = "local[2]") -> Any:
    """A local SparkSession on loopback whose Python workers can import this project."""
    # Workers unpickle what feed_stream ships by module name: they need the project on their path.
    return local_session("reprise-streaming-example", master, import_paths=(ROOT,))


def main(argv: list[str] | None = None) -> int:
    """Parse options, start Spark and run."""
    parser = argparse.ArgumentParser(prog="python -m examples.streaming", description=__doc__.split("\n")[0])
    parser.add_argument("--rows", type=int, default=20_000)
    parser.add_argument("--accounts", type=int, default=100)
    parser.add_argument("--rows-per-batch", type=int, default=2_000)
    parser.add_argument("--source", choices=("rate", "files"), default="rate")
    args = parser.parse_args(argv)
    if args.rows < 1 or args.accounts < 1 or args.rows_per_batch < 1:
        parser.error("--rows, --accounts and --rows-per-batch must be at least 1")
    spark = spark_session()
    try:
        return run(spark, args.rows, args.accounts, args.rows_per_batch, args.source)
    finally:
        spark.stop()


if __name__ == "__main__":
    sys.exit(main())

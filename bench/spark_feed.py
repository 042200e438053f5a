"""Benchmark (not a test): rows/s through feed(ack="persisted") vs a plain TCP msgpack floor, local[2].

    .venv/bin/python -m bench.spark_feed [ROWS]
"""

from __future__ import annotations

import os
import socket
import socketserver
import struct
import sys
import tempfile
import threading
import time

import msgpack

import actors
from spark_bridge import feed, start_bridge
from tests.spark_bridge.sample import Account


class _Acker(socketserver.BaseRequestHandler):
    """Reads length-prefixed msgpack batches and acknowledges each one (no actors, no journal)."""

    def handle(self) -> None:
        f = self.request.makefile("rb")
        while header := f.read(4):
            msgpack.unpackb(f.read(struct.unpack(">I", header)[0]))
            self.request.sendall(b"k")


def _push(port: int, rows, batch_size: int = 2_000):
    """One Spark task of the floor: msgpack batches of row dicts, one ack per batch."""
    with socket.create_connection(("127.0.0.1", port)) as s:
        batch, n = [], 0
        for row in rows:
            batch.append((row["destination"], row.asDict()))
            if len(batch) >= batch_size:
                data = msgpack.packb(batch)
                s.sendall(struct.pack(">I", len(data)) + data)
                s.recv(1)
                n, batch = n + len(batch), []
        if batch:
            data = msgpack.packb(batch)
            s.sendall(struct.pack(">I", len(data)) + data)
            s.recv(1)
            n += len(batch)
    yield n


def main(rows: int = 1_000_000) -> None:
    """Run both jobs on the same DataFrame and print rows/s and the ratio."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
    spark = (SparkSession.builder.master("local[2]").config("spark.driver.bindAddress", "127.0.0.1")
             .config("spark.driver.host", "127.0.0.1").config("spark.ui.enabled", "false").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    df = spark.range(0, rows, numPartitions=2).selectExpr(
        "concat('/user/accounts/a', cast(id % 1000 as string)) as destination",
        "cast(id % 97 + 1 as long) as amount", "id as txid").cache()
    df.count()
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _Acker)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    port = server.server_address[1]
    started = time.monotonic()
    assert sum(df.rdd.mapPartitions(lambda it: _push(port, it)).collect()) == rows
    floor = rows / (time.monotonic() - started)
    server.shutdown()
    tmp = tempfile.mkdtemp(prefix="reprise-bench-spark-")
    with actors.start("multiproc", journal=f"sqlite:///{tmp}/journal.db",
                      snapshot_store=f"sqlite:///{tmp}/snapshots.db") as system:
        system.spawn(Account, path="/user/accounts", entities=True)
        start_bridge(system)
        result = feed(df, system=system.admin_port, feed_id="bench")
    spark.stop()
    print(f"{rows:,} rows, local[2], batch 2,000, window 8")
    print(f"plain TCP msgpack floor : {floor:12,.0f} rows/s")
    print(f"feed ack=persisted      : {result.rows_per_second:12,.0f} rows/s  ({result.rows_per_second / floor:.2f}x floor)")
    print("feed ack=processed      : not implemented")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000)

"""What the Spark bridge keeps per receiver that sent follow-ups (README, "The bridge also remembers ... the follow-up
ids"): feed(ack="processed") of ROWS rows, one per durable account (tests/spark_bridge/sample.DurableAccount, each
posting a follow-up to a ledger), in real PySpark local mode on a multiproc system; then the bridge's
`follow_up_origins_remembered`, the bytes its follow-up dedup holds (sys.getsizeof of the dict, its keys and each
SeenIds with its lists) and the bytes they add to each snapshot (journal.serialization of that part), per receiver.

    PYTHONPATH=$PWD python bench/profiling/follow_up_origins.py 20000
"""

from __future__ import annotations

import sys
import tempfile
from typing import Any

import actors
from journal.serialization import serialize
from spark_bridge import BRIDGE_PATH, SparkBridge, feed


def _deep_size(forwarded: dict[str, Any]) -> int:
    """Bytes of the dict, its keys, and each SeenIds with its two lists (ints below 256 are shared: not counted)."""
    total = sys.getsizeof(forwarded)
    for origin, seen in forwarded.items():
        total += sys.getsizeof(origin) + sys.getsizeof(seen) + sys.getsizeof(seen._starts) + sys.getsizeof(seen._ends)
        total += sys.getsizeof(seen.low) if seen.low > 256 else 0
    return total


class MeasuredBridge(SparkBridge):
    """A SparkBridge whose stats also give the bytes of its follow-up dedup, in memory and in a snapshot."""

    def stats(self) -> dict[str, int]:
        """SparkBridge.stats, with `follow_up_bytes` and `follow_up_snapshot_bytes`."""
        part = {o: [s.low, [list(r) for r in s.state()[1]]] for o, s in self._forwarded.items()}
        return {**super().stats(), "follow_up_bytes": _deep_size(self._forwarded),
                "follow_up_snapshot_bytes": len(serialize(part)) - len(serialize({}))}


def main(rows: int) -> None:
    """Feed `rows` rows to as many receivers; print what the bridge keeps per receiver."""
    # (MeasuredBridge by module path, not __main__'s: the bridge's host process imports it)
    from bench.profiling.follow_up_origins import MeasuredBridge
    from bench.spark_feed import session_and_frame
    from tests.spark_bridge.sample import DurableAccount, Ledger

    spark, _ = session_and_frame("follow-up-origins", 0)
    df = spark.range(0, rows, numPartitions=2).selectExpr(
        "concat('/user/accounts/a', cast(id as string)) as destination", "cast(id % 97 + 1 as long) as amount",
        "id as txid")
    with tempfile.TemporaryDirectory(prefix="reprise-follow-up-origins-") as tmp, \
            actors.start("multiproc", journal=f"sqlite:///{tmp}/journal.db",
                         snapshot_store=f"sqlite:///{tmp}/snapshots.db") as system:
        system.spawn(Ledger, path="/user/ledger")
        system.spawn(DurableAccount, path="/user/accounts", entities=True, kwargs={"ledger": "/user/ledger"})
        system.system_actor_of(MeasuredBridge, path=BRIDGE_PATH)
        result = feed(df, system=system, feed_id="origins", ack="processed", progress=False, timeout=600)
        counters = system.status().hosts[BRIDGE_PATH].counters
        origins = counters["follow_up_origins_remembered"]
        print(f"{result.rows:,} rows in {result.seconds:.1f} s; follow_up_origins_remembered {origins:,}: "
              f"{counters['follow_up_bytes']:,} bytes in memory ({counters['follow_up_bytes'] / origins:.0f} a "
              f"receiver), {counters['follow_up_snapshot_bytes']:,} in each snapshot "
              f"({counters['follow_up_snapshot_bytes'] / origins:.1f} a receiver; paths /user/accounts/a<n>, "
              f"{len('/user/accounts/a') + len(str(rows - 1))} characters at most)")
    spark.stop()


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 20_000)

"""The cluster example's Spark driver: feed N rows into the sharded accounts, then check every sum exactly.

    python -m examples.cluster.feed --master spark://10.78.0.1:7077 --system 10.78.0.1:1900 --rows 200000

Rows are made on the executors (spark.range), and each executor feeds its own node's bridge (the workers
run with REPRISE_HOST/REPRISE_PORT of their node). With ack="processed" the feed returns once every row is
applied and confirmed by its account. The check then asks every account for its balance: each sum must
equal the one computed here, and the accounts together must have applied exactly N rows (none twice, none
lost). Prints `RESULT {json}` last; exits 1 when a sum is off.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import uuid
from typing import Any

from examples.cluster.model import Balance, GetBalance, deposit

ACCOUNTS_PATH = "/user/accounts"
# The checkout's root: executors import examples.cluster.model (and Reprise) from there.
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def rows_sql(accounts: int) -> list[str]:
    """The columns of row `id` (model.deposit in Spark SQL)."""
    return [f"cast((id * 7919) % {accounts} as int) as account", "id as txid",
            "cast((id * 31) % 97 + 1 as int) as amount"]


def expected(rows: int, accounts: int) -> dict[int, tuple[int, int]]:
    """Account -> (sum of amounts, row count) after rows 0 .. rows-1."""
    sums: dict[int, tuple[int, int]] = {}
    for txid in range(rows):
        account, amount = deposit(txid, accounts)
        total, count = sums.get(account, (0, 0))
        sums[account] = (total + amount, count + 1)
    return sums


def check(system: Any, rows: int, accounts: int, timeout: float = 30.0) -> dict[str, Any]:
    """Ask every account for its Balance; what matched, what did not, and the rows per bridge."""
    want = expected(rows, accounts)
    wrong: dict[str, Any] = {}
    via: dict[str, int] = {}
    applied = 0
    for account in range(accounts):
        balance = system.ask(f"{ACCOUNTS_PATH}/a{account}", GetBalance(), timeout=timeout)
        if not isinstance(balance, Balance):
            raise RuntimeError(f"a{account} answered {balance!r} instead of a Balance")
        applied += balance.rows
        for bridge, n in balance.via.items():
            via[bridge] = via.get(bridge, 0) + n
        if (balance.total, balance.rows) != want.get(account, (0, 0)):
            wrong[f"a{account}"] = {"got": [balance.total, balance.rows], "want": list(want.get(account, (0, 0)))}
    return {"exact": not wrong and applied == rows, "applied": applied, "wrong": wrong, "via": via}


def main(argv: list[str] | None = None) -> int:
    """Feed, check, print RESULT."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--master", required=True, help="the Spark standalone master, spark://HOST:PORT")
    p.add_argument("--system", required=True, metavar="HOST:PORT", help="the leader's admin address")
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--accounts", type=int, default=60)
    p.add_argument("--partitions", type=int, default=8, help="Spark partitions (tasks) of the feed")
    p.add_argument("--driver-host", default="127.0.0.1", help="the address the executors reach this driver at")
    p.add_argument("--batch-size", type=int, default=2_000)
    p.add_argument("--timeout", type=float, default=60.0, help="seconds a batch may wait for its confirmation")
    p.add_argument("--check-only", action="store_true", help="only check the sums of an earlier feed")
    args = p.parse_args(argv)

    import actors

    host, _, port = args.system.rpartition(":")
    result: dict[str, Any] = {"rows": args.rows}
    if not args.check_only:
        import spark_bridge

        spark = spark_bridge.cluster_session(args.master, "reprise-cluster-feed", driver_host=args.driver_host,
                                             executor_memory="512m", import_paths=(ROOT,))
        try:
            df = spark.range(0, args.rows, numPartitions=args.partitions).selectExpr(*rows_sql(args.accounts))
            started = time.monotonic()
            fed = spark_bridge.feed(df, args.system, to=f"{ACCOUNTS_PATH}/a{{account}}", ack="processed",
                                    feed_id=f"cluster-example-{uuid.uuid4().hex[:8]}", batch_size=args.batch_size,
                                    timeout=args.timeout, progress=False)
            result.update(seconds=round(time.monotonic() - started, 2), fed=fed.rows,
                          duplicates_skipped=fed.duplicates_skipped, rows_per_second=round(fed.rows_per_second))
        finally:
            spark.stop()
    system = actors.connect(int(port), host=host)
    try:
        result.update(check(system, args.rows, args.accounts))
    finally:
        system.close()
    print("RESULT " + json.dumps(result), flush=True)
    if not result["exact"]:
        print(f"sums are off: {result['applied']} rows applied for {args.rows} fed; wrong accounts: "
              f"{json.dumps(result['wrong'])[:2000]}", file=sys.stderr)
        return 1
    print(f"OK: {args.accounts} sums exact after {args.rows} rows; rows per bridge: {result['via']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The main job (`make demo`): a Spark job feeds transactions into persistent accounts, with a SIGKILL mid-feed.

    python -m examples.demo [--transactions 1000000] [--accounts 10000] [--no-chaos] [--journal URL]
        [--class-archive FILE]

1. A local multi-process actor system on the embedded SQLite journal: the Spark bridge
   (/system/spark-bridge), the accounts (/user/accounts/<id>, examples.accounts.pipeline.AccountTable: the
   accounts of a process as rows of one FeedTable) in two shard processes (one per core, each with its own
   SQLite file), and a ledger (/user/ledger/<id>, LedgerTable, also in a file of its own) that receives a
   follow-up of every deposit.
2. A PySpark job (local[2]) generates the transactions and feeds them with ack="processed": the feed
   returns only when every account and the ledger have confirmed every row, each applied once durably.
3. With chaos (the default) an account host process (shard 0) is killed with SIGKILL once 40% of the rows
   are processed; the guardian restarts it, its accounts recover from the journal (the newest snapshot of
   the table, then its commits), it resends the ledger entries not confirmed yet, and the bridge resends
   the rows the dead process had not confirmed.
4. An exactly-once projection per account journal (examples.accounts.read_model, /user/balances-<shard>)
   keeps a SQL read model next to the journal: the balance of each account in a table, updated in the
   transaction that stores its offset. After the feed the demo waits (bounded) until it caught up.
5. Every balance is compared with the balance Spark computes itself, with the ledger and with the read
   model; any mismatch exits non-zero. Everything is shut down at the end.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import threading
import time
from typing import Any

import actors
from examples.accounts.pipeline import ACCOUNTS_PATH, LEDGER_PATH, AccountTable, LedgerTable
from examples.accounts.pipeline import balances as account_balances
from examples.accounts.read_model import BALANCES, TAG, projection_kwargs, read_balances
from persistence import EventsByTag, GetProjectionState, Projection, ProjectionState
from spark_bridge import BRIDGE_PATH, FeedError, GetFeedProgress, feed, local_session, start_bridge
from spark_bridge.session import prepare_class_archive

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FEED_ID = "demo-transactions"
CHAOS_AT = 0.4
CATCH_UP_TIMEOUT = 120.0


def spark_session(partitions: int, class_archive: str | None = None) -> Any:
    """A local[2] SparkSession bound to loopback whose Python workers import this checkout (and whose JVM maps
    Spark's classes from `class_archive`, built there first when missing: spark_bridge.class_archive)."""
    return local_session("reprise-demo", shuffle_partitions=partitions, import_paths=(ROOT,),
                         class_archive=class_archive)


def transactions(spark: Any, n: int, accounts: int, partitions: int) -> Any:
    """Transaction i: `amount` (1..97) to account (i * 7919) % accounts, at path /user/accounts/<account>."""
    return spark.range(0, n, numPartitions=partitions).selectExpr(
        "id as txid",
        f"cast((id * 7919) % {accounts} as string) as account",
        "cast((id * 31) % 97 + 1 as long) as amount",
    ).selectExpr("txid", "account", "amount", f"concat('{ACCOUNTS_PATH}/', account) as destination")


class Chaos(threading.Thread):
    """Kills an account host process (shard 0) with SIGKILL once `fraction` of the rows are processed."""

    def __init__(self, port: int, total: int, fraction: float) -> None:
        super().__init__(name="demo-chaos", daemon=True)
        self.port, self.total, self.fraction = port, total, fraction
        self.killed_pids: list[int] = []
        self.killed_at = 0
        self.stopping = threading.Event()

    def run(self) -> None:
        system = actors.connect(self.port)
        try:
            mark = self.total * self.fraction
            pace = _Pace(self.total, mark)
            while not self.stopping.wait(pace.interval):
                progress = system.ask(BRIDGE_PATH, GetFeedProgress(FEED_ID), timeout=10)
                pace.observe(time.monotonic(), progress.accepted, progress.processed)
                if progress.processed >= mark:
                    # One process: Thespian 4.0.1 mishandles two children dying at the same instant.
                    name, host = sorted(account_hosts(system.status()).items())[0]
                    if host.pid is None:  # between two processes (restarting): try again in a moment
                        continue
                    os.kill(host.pid, signal.SIGKILL)
                    self.killed_pids, self.killed_at = [host.pid], progress.processed
                    sys.stderr.write(f"\n  chaos: killed {name} (pid {host.pid}) with SIGKILL after "
                                     f"{progress.processed:,} rows were processed\n")
                    return
        finally:
            system.close()


class _Pace:
    """How long the chaos thread waits between two progress asks: 5 ms near the mark, longer far from it.

    Rows are counted processed a whole batch at a time, and a small feed crosses 40% only some 30 ms before
    its end (a 50 ms poll missed it in 1 run of 6 at 20,000 rows): hence 5 ms once the mark may be near. Far
    from it, each ask would be CPU the bridge and this process take from the feed (about 0.4 ms on each side),
    and `make demo` asked 1,364 times before the kill (161 now): no row is processed before every row is staged
    (the release is job-atomic), and after that the processing rate says when the mark comes.
    """

    NEAR, FAR = 0.005, 0.1

    def __init__(self, total: int, mark: float) -> None:
        self.total, self.mark = total, mark
        self.interval = self.NEAR
        self._first: tuple[float, int] | None = None  # (when, rows processed) at the first ask that saw some

    def observe(self, now: float, accepted: int, processed: int) -> None:
        """Set the next interval from one answer."""
        if accepted < self.total:  # still staging: nothing is processed before the release
            self.interval = self.FAR
        elif processed <= 0 or self._first is None:
            self.interval = self.NEAR
            if processed > 0:
                self._first = (now, processed)
        else:
            since, before = self._first
            rate = (processed - before) / max(now - since, 1e-3)
            left = (self.mark - processed) / rate if rate > 0 else 0.0
            self.interval = min(self.FAR, max(self.NEAR, left / 4))


def account_hosts(status: actors.SystemStatus) -> dict[str, actors.HostInfo]:
    """The account host's processes (its shards) by name."""
    return {k: h for k, h in status.hosts.items() if k.split(" ")[0] == ACCOUNTS_PATH}


def start_read_model(system: actors.System, journals: list[str], store: str) -> list[str]:
    """One exactly-once projection per account journal into the read model at `store`; their paths."""
    paths = []
    for i, journal in enumerate(journals):
        path = f"{BALANCES}-{i}"
        kwargs = projection_kwargs(store)
        kwargs["source"] = EventsByTag(TAG, journal=journal)
        system.spawn(Projection, path, kwargs=kwargs)
        paths.append(path)
    return paths


def wait_caught_up(system: actors.System, paths: list[str], timeout: float) -> list[ProjectionState]:
    """Wait until every projection stored the newest offset of its tag, or until their stored offsets did not
    move for `timeout` s (a slow machine still catches up); their states."""
    deadline = time.monotonic() + timeout
    stored = -1
    while True:
        states = [system.ask(p, GetProjectionState(), timeout=30) for p in paths]
        if all(s.lag == 0 for s in states):
            return states
        now = time.monotonic()
        if sum(s.stored_offset for s in states) > stored:
            stored, deadline = sum(s.stored_offset for s in states), now + timeout
        elif now >= deadline:
            return states
        time.sleep(0.05)


def expected_balances(df: Any) -> dict[str, int]:
    """What Spark itself says every account must hold."""
    return {r["account"]: int(r["total"]) for r in df.groupBy("account").agg({"amount": "sum"})
            .withColumnRenamed("sum(amount)", "total").collect()}


def run(n: int, accounts: int, chaos: bool, journal: str | None, partitions: int = 8, tag: str | None = None,
        shards: int = 2, class_archive: str | None = None) -> int:
    """Run the pipeline; returns the process exit code."""
    workdir = tempfile.mkdtemp(prefix="reprise-demo-")
    # On the embedded default each account shard writes its own SQLite file: the shards then never
    # wait for each other's write lock (one writer per file; the feed ran ~13% faster).
    accounts_journal = None if journal else f"sqlite:///{workdir}/accounts-{{shard}}.db"
    journal = journal or f"sqlite:///{workdir}/journal.db"
    journals = [accounts_journal.format(shard=i) for i in range(shards)] if accounts_journal else [journal]
    read_model = f"sqlite:///{workdir}/read-model.db"
    print(f"Reprise demo: {n:,} transactions over {accounts:,} accounts from Spark (local[2]), "
          f"ack=processed, journal {journal}" + (f" (accounts: {accounts_journal})" if accounts_journal else "")
          + f", chaos {'on' if chaos else 'off'}", flush=True)
    if class_archive:  # built before the clock starts: a one-off setup step of this machine, like installing Spark
        prepare_class_archive(class_archive, announce=lambda path: print(
            f"Building a class archive of Spark's JVM at {path} (once, ~25 s; later runs start ~4 s sooner)",
            flush=True))
    started = time.perf_counter()
    spark = spark_session(partitions, class_archive)
    try:
        with actors.start("multiproc", journal=journal, snapshot_store=journal, run_dir=f"{workdir}/run",
                          tag=tag) as system:
            # The ledger in a file of its own too: it and the bridge commit as often as the shards, and waited
            # for each other's write lock in journal.db.
            ledger_journal = f"sqlite:///{workdir}/ledger.db" if accounts_journal else None
            system.spawn(LedgerTable, LEDGER_PATH, entities=True, journal=ledger_journal, snapshot_store=ledger_journal)
            # Two shards: account work is most of the job, and this way it runs on both cores.
            system.spawn(AccountTable, ACCOUNTS_PATH, entities=True, kwargs={"ledger": LEDGER_PATH}, shards=shards,
                         journal=accounts_journal, snapshot_store=accounts_journal)
            projections = start_read_model(system, journals, read_model)
            start_bridge(system)
            df = transactions(spark, n, accounts, partitions)
            killer = Chaos(system.admin_port, n, CHAOS_AT) if chaos else None
            if killer:
                killer.start()
            try:
                result = feed(df, system=system.admin_port, feed_id=FEED_ID, ack="processed",
                              timeout=120.0, progress=True)
            except FeedError as e:
                print(f"FAILED: the feed did not complete: {e}")
                return 1
            finally:
                if killer:
                    killer.stopping.set()
                    killer.join(15)
            caught_up_at = time.perf_counter()
            projected = wait_caught_up(system, projections, CATCH_UP_TIMEOUT)
            caught_up_s = time.perf_counter() - caught_up_at
            expected = expected_balances(df)
            balances = account_balances(system, sorted(expected))
            ledger = system.ask(LEDGER_PATH, "totals", timeout=60)
            status = system.status()
            hosts = status.hosts
            letters = system.dead_letters()
        seconds = time.perf_counter() - started
        table = read_balances(read_model)
        lagging = [s for s in projected if s.lag]
        model_off = {a: (table.get(a), want) for a, want in expected.items() if table.get(a) != want}
        mismatches = {a: (balances[a].balance if a in balances else None, want)
                      for a, want in expected.items() if a not in balances or balances[a].balance != want}
        ledger_off = {a: (ledger.per_account.get(a), want) for a, want in expected.items()
                      if ledger.per_account.get(a) != want}
        seen_again = sum(b.redelivered for b in balances.values()) + ledger.redelivered
        resent = hosts[BRIDGE_PATH].counters.get("redelivered", 0)
        restarts = sum(h.restarts for h in account_hosts(status).values())
        print("summary")
        print(f"  rows                {result.rows:,} fed in {result.seconds:.1f} s "
              f"({result.rows_per_second:,.0f} rows/s processed, end to end incl. Spark start {seconds:.1f} s)")
        print(f"  duplicates skipped  {result.duplicates_skipped:,} (rows the bridge already had)")
        print(f"  redeliveries        {resent:,} rows resent by the bridge; {seen_again:,} arrived again after being "
              "applied (confirmed, not applied twice)")
        print(f"  dead letters        {letters.count:,} (rows dead-lettered by the feed: {result.dead_lettered:,})")
        print(f"  account host        {shards} shard process(es), restarted {restarts} time(s)"
              + (f" (SIGKILL after {killer.killed_at:,} rows)" if killer and killer.killed_pids else ""))
        print(f"  ledger              {ledger.entries:,} entries, total {ledger.total:,}")
        print(f"  balances checked    {len(expected):,} against Spark's own sums, mismatches {len(mismatches):,}, "
              f"ledger mismatches {len(ledger_off):,}")
        print(f"  read model          {len(table):,} balances in {len(projected)} exactly-once projection(s), "
              f"caught up {caught_up_s:.1f} s after the feed; read model mismatches {len(model_off):,}")
        failed = bool(mismatches or ledger_off or model_off or lagging or ledger.entries != n
                      or (chaos and not restarts))
        if failed:
            for account, (got, want) in list(mismatches.items())[:10]:
                print(f"  MISMATCH account {account}: balance {got}, Spark says {want}")
            for account, (got, want) in list(ledger_off.items())[:10]:
                print(f"  MISMATCH ledger for account {account}: {got}, Spark says {want}")
            for account, (got, want) in list(model_off.items())[:10]:
                print(f"  MISMATCH read model for account {account}: {got}, Spark says {want}")
            for s in lagging:
                print(f"  projection {s.projection_id} stopped catching up ({CATCH_UP_TIMEOUT:.0f} s without progress): "
                      f"stored offset {s.stored_offset:,} of {s.newest_offset:,}")
            if chaos and not restarts:
                print("  the chaos kill did not happen (the feed finished first?)")
            print("FAILED")
            return 1
        print("OK: every balance is exact, in the accounts, in the ledger and in the read model")
        return 0
    finally:
        spark.stop()
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Parse options and run."""
    parser = argparse.ArgumentParser(prog="python -m examples.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--transactions", type=int, default=1_000_000)
    parser.add_argument("--accounts", type=int, default=10_000)
    parser.add_argument("--partitions", type=int, default=8, help="Spark partitions of the transactions")
    parser.add_argument("--no-chaos", dest="chaos", action="store_false", help="do not kill the account host")
    parser.add_argument("--journal", help="journal URL (default: a SQLite file in a temp dir)")
    parser.add_argument("--shards", type=int, default=2, help="processes sharing the account entities")
    parser.add_argument("--tag", help="a marker on the command line of every process of the system (for tests)")
    parser.add_argument("--class-archive", metavar="FILE",
                        help="map Spark's JVM classes from FILE, built there first when missing (make demo: "
                             ".venv/spark-classes.jsa)")
    args = parser.parse_args(argv)
    if args.transactions < 1 or args.accounts < 1 or args.shards < 1:
        parser.error("--transactions, --accounts and --shards must be at least 1")
    return run(args.transactions, args.accounts, args.chaos, args.journal, args.partitions, args.tag, args.shards,
               args.class_archive)


if __name__ == "__main__":
    sys.exit(main())

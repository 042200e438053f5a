"""The main job (`make demo`): deposits fed at-least-once into persistent accounts, with a SIGKILL mid-feed.

    python -m examples.demo [--deposits 100000] [--accounts 1000] [--no-chaos] [--journal sqlite:///path.db]

A multi-process actor system on the embedded SQLite journal: a feeder (DurableDelivery) journals and
delivers every deposit to /user/accounts/<id> (IdempotentReceiver entities in one host process).
With chaos (the default) the account host is killed with SIGKILL part-way through; the guardian
restarts it, accounts recover from the journal and the feeder resends what was not confirmed.
At the end every balance is checked against the expected one; any mismatch exits non-zero.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter

import actors
from examples.accounts.model import Account, FeedDeposits, Feeder, deposit

CHUNK = 5_000


def progress(done: int, total: int, started: float) -> None:
    """A one-line progress bar on stderr."""
    width = 30
    filled = int(width * done / total) if total else width
    rate = done / max(1e-9, time.perf_counter() - started)
    sys.stderr.write(f"\r  [{'#' * filled}{'.' * (width - filled)}] {done:,}/{total:,} confirmed  {rate:,.0f}/s ")
    sys.stderr.flush()


def run(deposits: int, accounts: int, chaos: bool, journal: str | None) -> int:
    """Run the pipeline; returns the process exit code."""
    workdir = tempfile.mkdtemp(prefix="reprise-demo-")
    journal = journal or f"sqlite:///{workdir}/journal.db"
    print(f"Reprise demo: {deposits:,} deposits into {accounts:,} accounts, journal {journal}, "
          f"chaos {'on' if chaos else 'off'}")
    started = time.perf_counter()
    killed_at = None
    try:
        with actors.start("multiproc", journal=journal, snapshot_store=journal, run_dir=f"{workdir}/run") as system:
            system.spawn(Account, "/user/accounts", entities=True)
            system.spawn(Feeder, "/user/feeder")
            fed = 0
            while fed < deposits:
                count = min(CHUNK, deposits - fed)
                stats = system.ask("/user/feeder", FeedDeposits(fed, count, accounts), timeout=120)
                fed += count
                if chaos and killed_at is None and fed >= deposits * 0.4:
                    pid = system.status().hosts["/user/accounts"].pid
                    os.kill(pid, signal.SIGKILL)
                    killed_at = fed
                    sys.stderr.write(f"\n  chaos: killed the account host (pid {pid}) with SIGKILL after "
                                     f"{fed:,} deposits\n")
                while stats.unconfirmed > 50_000:  # keep the feeder below its unconfirmed limit
                    time.sleep(0.05)
                    stats = system.ask("/user/feeder", "stats", timeout=60)
                progress(stats.accepted - stats.unconfirmed, deposits, started)
            deadline = time.monotonic() + 90
            while stats.unconfirmed and time.monotonic() < deadline:
                time.sleep(0.1)
                stats = system.ask("/user/feeder", "stats", timeout=60)
                progress(stats.accepted - stats.unconfirmed, deposits, started)
            sys.stderr.write("\n")
            seconds = time.perf_counter() - started
            expected = Counter()
            for i in range(deposits):
                account, amount = deposit(i, accounts)
                expected[str(account)] += amount
            probe = system.probe()
            system.tell_many([(f"/user/accounts/{a}", "balance") for a in expected], sender=probe.path)
            balances = dict(probe.receive_many(len(expected), timeout=60))
            mismatches = {a: (balances.get(a), want) for a, want in expected.items() if balances.get(a) != want}
            hosts = system.status().hosts
            letters = system.dead_letters()
        print("summary")
        print(f"  deposits            {deposits:,} ({deposits / seconds:,.0f}/s end to end, {seconds:.1f} s)")
        print(f"  unconfirmed at end  {stats.unconfirmed:,}")
        print(f"  account host        restarted {hosts['/user/accounts'].restarts} time(s)"
              + (f" (SIGKILL after {killed_at:,} deposits)" if killed_at else ""))
        print(f"  dead letters        {letters.count:,}")
        print(f"  balances checked    {len(expected):,}, mismatches {len(mismatches):,}")
        if mismatches or stats.unconfirmed:
            for account, (got, want) in list(mismatches.items())[:10]:
                print(f"  MISMATCH account {account}: balance {got}, expected {want}")
            print("FAILED")
            return 1
        print("OK: every balance is exact")
        return 0
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Parse options and run."""
    parser = argparse.ArgumentParser(prog="python -m examples.demo", description=__doc__.split("\n")[0])
    parser.add_argument("--deposits", type=int, default=100_000)
    parser.add_argument("--accounts", type=int, default=1_000)
    parser.add_argument("--no-chaos", dest="chaos", action="store_false", help="do not kill the account host")
    parser.add_argument("--journal", help="journal URL (default: a SQLite file in a temp dir)")
    args = parser.parse_args(argv)
    return run(args.deposits, args.accounts, args.chaos, args.journal)


if __name__ == "__main__":
    sys.exit(main())

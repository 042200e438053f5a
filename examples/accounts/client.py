"""A client for the accounts topology: feed deposits, wait until they are confirmed, check balances.

    python -m examples.accounts.client --port 1901 feed --count 10000 --accounts 100 [--start 0]
    python -m examples.accounts.client --port 1901 check --deposits 10000 --accounts 100 [--read-model URL]
    python -m examples.accounts.client --port 1901 balance 42

Deposit number i always goes to the same account with the same amount (model.deposit), so `check`
knows every expected balance without asking anyone. Feed each number once: the feeder dedups
redeliveries, not a client that feeds the same numbers twice. `check --read-model URL` also waits until
the read model's projection (/user/balances) caught up and compares its table.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections import Counter

import actors
from examples.accounts.model import FeedDeposits, FeedStats, deposit
from examples.accounts.read_model import BALANCES, read_balances
from persistence import GetProjectionState

FEEDER = "/user/feeder"
ACCOUNTS = "/user/accounts"
CHUNK = 5_000


def feed(system: actors.System, start: int, count: int, accounts: int) -> FeedStats:
    """Hand deposits start .. start+count-1 to the feeder in chunks; returns its last stats."""
    stats = FeedStats(0, 0)
    for first in range(start, start + count, CHUNK):
        stats = system.ask(FEEDER, FeedDeposits(first, min(CHUNK, start + count - first), accounts), timeout=120)
    return stats


def wait_confirmed(system: actors.System, timeout: float = 120.0) -> FeedStats:
    """Wait until the feeder has no unconfirmed deposit (or `timeout` passes); returns its stats."""
    deadline = time.monotonic() + timeout
    while True:
        stats = system.ask(FEEDER, "stats", timeout=60)
        if not stats.unconfirmed or time.monotonic() >= deadline:
            return stats
        time.sleep(0.1)


def expected_balances(deposits: int, accounts: int) -> dict[str, int]:
    """Every account's balance after deposits 0 .. deposits-1 (accounts that got none are left out)."""
    expected: Counter = Counter()
    for i in range(deposits):
        account, amount = deposit(i, accounts)
        expected[str(account)] += amount
    return dict(expected)


def balances(system: actors.System, ids: list[str], timeout: float = 60.0) -> dict[str, int]:
    """Ask each account for its balance at once (one probe, many replies)."""
    probe = system.probe()
    system.tell_many([(f"{ACCOUNTS}/{a}", "balance") for a in ids], sender=probe.path)
    return dict(probe.receive_many(len(ids), timeout=timeout))


def wait_projected(system: actors.System, timeout: float = 120.0) -> int:
    """Wait until the read model's projection stored the newest deposit offset (or `timeout` passes); its lag."""
    deadline = time.monotonic() + timeout
    while True:
        lag = system.ask(BALANCES, GetProjectionState(), timeout=60).lag
        if not lag or time.monotonic() >= deadline:
            return int(lag)
        time.sleep(0.05)


def check(system: actors.System, deposits: int, accounts: int, read_model: str | None = None) -> list[str]:
    """Wait for confirms, then compare every balance (and the read model's); the mismatches as lines."""
    stats = wait_confirmed(system)
    expected = expected_balances(deposits, accounts)
    got = balances(system, list(expected))
    ordered = sorted(expected.items(), key=lambda kv: int(kv[0]))
    problems = [f"account {a}: balance {got.get(a)}, expected {want}" for a, want in ordered if got.get(a) != want]
    if read_model is not None:
        lag = wait_projected(system)
        table = read_balances(read_model)
        problems += [f"read model account {a}: balance {table.get(a)}, expected {want}"
                     for a, want in ordered if table.get(a) != want]
        if lag:
            problems.insert(0, f"the read model's projection is still {lag} offsets behind")
    if stats.unconfirmed:
        problems.insert(0, f"the feeder still has {stats.unconfirmed} unconfirmed deposits")
    return problems


def main(argv: list[str] | None = None) -> int:
    """Parse the command line and run one command against the system on --port."""
    parser = argparse.ArgumentParser(prog="python -m examples.accounts.client", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=1901, help="the system's admin port (default 1901)")
    parser.add_argument("--host", default="127.0.0.1")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("feed", help="hand deposits to the feeder")
    p.add_argument("--start", type=int, default=0, help="first deposit number (default 0)")
    p.add_argument("--count", type=int, required=True)
    p.add_argument("--accounts", type=int, required=True)
    p = sub.add_parser("check", help="wait until every deposit is confirmed and compare every balance")
    p.add_argument("--deposits", type=int, required=True, help="how many deposits were fed, from number 0")
    p.add_argument("--accounts", type=int, required=True)
    p.add_argument("--read-model", help="also check the read model's table (its offset store URL)")
    p = sub.add_parser("balance", help="print one account's balance")
    p.add_argument("account")
    args = parser.parse_args(argv)
    if getattr(args, "accounts", 1) < 1 or getattr(args, "count", 0) < 0:
        parser.error("--accounts must be at least 1 and --count must not be negative")

    system = actors.connect(args.port, host=args.host)
    try:
        if args.command == "feed":
            stats = feed(system, args.start, args.count, args.accounts)
            print(f"fed deposits {args.start}..{args.start + args.count - 1}: feeder accepted {stats.accepted}, "
                  f"{stats.unconfirmed} unconfirmed")
        elif args.command == "balance":
            print(system.ask(f"{ACCOUNTS}/{args.account}", "balance", timeout=30)[1])
        else:
            problems = check(system, args.deposits, args.accounts, args.read_model)
            for line in problems:
                print(f"MISMATCH {line}")
            if problems:
                return 1
            print(f"OK: {len(expected_balances(args.deposits, args.accounts))} balances exact after "
                  f"{args.deposits} deposits" + (", in the read model too" if args.read_model else ""))
    finally:
        system.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())

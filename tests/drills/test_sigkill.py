"""Twenty randomized SIGKILL drills over the accounts topology (examples/accounts/topology.toml).

Each drill starts the topology (feeder -> account entities host) on the multi-process base, feeds
deposits in chunks and, at a random moment of the feed, kills a random host process with SIGKILL
(the feeder's or the accounts'); the guardian restarts it. Then, from the journals themselves:

- zero acknowledged deposits lost: every chunk the feeder acknowledged is in its journal (DeliveriesSent)
  and applied by its account;
- zero duplicates applied: every (origin, delivery id) appears once in the accounts' journals (AppliedBatch),
  and no deposit is applied under two delivery ids;
- balances exact: each account's balance is the sum of the deposits journaled for it.

Only the multi-process base is drilled: it is the one whose hosts are OS processes that SIGKILL can
end (the in-process base has nothing to kill short of the test itself).

The randomness is seeded: drill k uses seed BASE + k, printed with the outcome. BASE is random per
run; replay a run with REPRISE_DRILL_SEED=BASE (and `-k drill-07` for one drill).
"""

from __future__ import annotations

import os
import random
import signal
import time
from collections import Counter, defaultdict

import pytest

import actors
from actors.topology import load, resolve_class
from examples.accounts.model import Deposit, FeedDeposits, deposit
from journal import MAX_SEQUENCE_NR, open_journal
from persistence.durable import DeliveriesSent
from persistence.idempotent import Applied, AppliedBatch
from tests.waiting import wait_for

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(90)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOPOLOGY = os.path.join(ROOT, "examples", "accounts", "topology.toml")
FEEDER, ACCOUNTS = "/user/feeder", "/user/accounts"
DRILLS = 20
BASE_SEED = int(os.environ.get("REPRISE_DRILL_SEED") or random.SystemRandom().randrange(10**9))
# 20 accounts: (account, amount) of deposit(i, 20) is unique for i < 1940 (97 and 7919 are prime and
# 20 divides neither), so each journaled Deposit names its deposit number exactly.
N_ACCOUNTS = 20
CHUNK = 40


def spawn_topology(system: actors.System, directory: str) -> None:
    """Spawn what examples/accounts/topology.toml declares (its [system] table is replaced by the test's).

    The read model's projection keeps its offset store in `directory`, not next to the shipped file.
    """
    for entry in load(TOPOLOGY).entries:
        kwargs = entry.kwargs
        if "offset_store" in kwargs:
            kwargs = {**kwargs, "offset_store": f"sqlite:///{directory}/read-model.db"}
        system.spawn(resolve_class(entry.factory), entry.path, entities=entry.entities, args=entry.args,
                     kwargs=kwargs, **entry.options)


def feed_with_a_kill(system: actors.System, rng: random.Random, chunks: int, victim: str) -> tuple[set, set, float]:
    """Feed `chunks` chunks; SIGKILL `victim`'s host a random 0-30 ms after chunk k was sent (k random, not last).

    Returns (acknowledged deposit numbers, numbers whose chunk went unanswered, kill delay).
    """
    kill_chunk = rng.randrange(1, chunks - 1)
    delay = rng.uniform(0.0, 0.03)
    pid = system.status().hosts[victim].pid
    acked: set[int] = set()
    unknown: set[int] = set()
    for k in range(chunks):
        numbers = range(k * CHUNK, (k + 1) * CHUNK)
        probe = system.probe()  # one per chunk: a late answer cannot be taken for the next chunk's
        probe.tell(FEEDER, FeedDeposits(numbers.start, CHUNK, N_ACCOUNTS))
        if k == kill_chunk:
            time.sleep(delay)
            os.kill(pid, signal.SIGKILL)
        try:
            probe.receive(timeout=4)
            acked.update(numbers)
        except actors.AskTimeout:
            # Killed while handling it: some, all or none of the chunk may be journaled. Not resent:
            # the feeder would give the same deposits new delivery ids (a client-side duplicate).
            unknown.update(numbers)
            wait_for(lambda: _answers(system), timeout=30, interval=0.1)
    return acked, unknown, delay


def _answers(system: actors.System) -> bool:
    try:
        system.ask(FEEDER, "stats", timeout=1)
        return True
    except actors.AskTimeout:
        return False


def journaled(url: str) -> tuple[dict[int, tuple[str, int]], list[tuple[str, Applied]]]:
    """The feeder's sent deliveries {delivery id: (destination, amount)} and every account's applications."""
    sent: dict[int, tuple[str, int]] = {}
    applied: list[tuple[str, Applied]] = []
    with open_journal(url) as j:
        for pid in j.current_persistence_ids():
            for repr_ in j.replay_messages(pid, 1, MAX_SEQUENCE_NR, MAX_SEQUENCE_NR):
                event = repr_.payload
                if pid == FEEDER and isinstance(event, DeliveriesSent):  # one event per group commit
                    for delivery_id, destination, message in event.entries():
                        assert isinstance(message, Deposit)
                        assert delivery_id not in sent, f"delivery id {delivery_id} journaled twice"
                        sent[delivery_id] = (destination, message.amount)
                elif pid.startswith(ACCOUNTS + "/"):
                    assert isinstance(event, AppliedBatch | Applied), f"{pid} journaled {event!r}"
                    entries = event.entries() if isinstance(event, AppliedBatch) else [
                        (event.origin, event.delivery_id, event.event)]
                    applied.extend((pid, Applied(*entry)) for entry in entries)
    return sent, applied


@pytest.mark.parametrize("drill", range(DRILLS), ids=[f"drill-{k:02d}" for k in range(DRILLS)])
def test_sigkill_drill(drill, make_system, tmp_path):
    seed = BASE_SEED + drill
    rng = random.Random(seed)
    victim = rng.choice([FEEDER, ACCOUNTS])
    chunks = rng.randrange(6, 14)
    print(f"\ndrill {drill}: seed {seed} (replay: REPRISE_DRILL_SEED={BASE_SEED} -k drill-{drill:02d}), "
          f"kill {victim} host, {chunks} chunks of {CHUNK}")
    url = f"sqlite:///{tmp_path}/journal.db"
    system = make_system("multiproc", journal=url, snapshot_store=url)
    spawn_topology(system, str(tmp_path))
    system.ask(FEEDER, "stats", timeout=30)  # the feeder has recovered and answers

    acked, unknown, delay = feed_with_a_kill(system, rng, chunks, victim)
    restarted = wait_for(lambda: (lambda h: h if h.restarts == 1 and h.state == "running" else None)(
        system.status().hosts[victim]), timeout=30)
    assert restarted.pid > 0
    stats = wait_for(lambda: (lambda s: s if s.unconfirmed == 0 else None)(system.ask(FEEDER, "stats", timeout=10)),
                     timeout=40, interval=0.2)
    assert stats.unconfirmed == 0

    sent, applied = journaled(url)
    number_of = {(f"{ACCOUNTS}/{a}", amount): i
                 for i in range(chunks * CHUNK) for a, amount in [deposit(i, N_ACCOUNTS)]}
    assert len(number_of) == chunks * CHUNK, "deposit numbers must be identifiable by (account, amount)"
    numbers = Counter(number_of[d] for d in sent.values())
    # Nothing invented and no deposit sent twice under two delivery ids; nothing acknowledged lost.
    assert max(numbers.values()) == 1
    assert acked <= set(numbers), f"acknowledged but not journaled: {sorted(acked - set(numbers))[:10]}"
    assert set(numbers) <= acked | unknown
    # Every journaled delivery applied exactly once, at its destination, with its amount.
    seen = Counter((e.origin, e.delivery_id) for _, e in applied)
    assert max(seen.values()) == 1, f"applied twice: {[k for k, n in seen.items() if n > 1][:10]}"
    assert {(e.origin, e.delivery_id) for _, e in applied} == {(FEEDER, i) for i in sent}
    for pid, e in applied:
        assert sent[e.delivery_id] == (pid, e.event.amount)
    # Balances: what the live accounts say equals the sum of what their journals hold.
    expected: dict[str, int] = defaultdict(int)
    for destination, amount in sent.values():
        expected[destination.rsplit("/", 1)[1]] += amount
    probe = system.probe()
    system.tell_many([(f"{ACCOUNTS}/{a}", "balance") for a in expected], sender=probe.path)
    assert dict(probe.receive_many(len(expected), timeout=30)) == expected
    print(f"drill {drill}: killed {delay * 1000:.0f} ms after sending a chunk; {len(acked)} acknowledged, "
          f"{len(set(numbers) & unknown)} of {len(unknown)} unanswered journaled, {len(sent)} applied once each")

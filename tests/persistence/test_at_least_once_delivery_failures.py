"""AtLeastOnceDeliveryCrashSpec and AtLeastOnceDeliveryFailureSpec (the chaos spec), reference §4.4.

Akka's timings scaled by S (its ratios kept): the chaos sender redelivers every 0.5 s x S. The chaos run is
seeded; the seed is printed, and named in the failure message, so that a failing run can be repeated with
REPRISE_CHAOS_SEED=<seed>.
"""

from __future__ import annotations

import itertools
import os
import random

import pytest

from actors import AskTimeout
from tests.persistence.alod_actors import (
    NUM_MESSAGES,
    ChaosApp,
    ChaosDestination,
    ChaosSender,
    CrashingSender,
    Done,
    S,
)
from tests.waiting import wait_for

_ids = itertools.count(1)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("top", [False, True], ids=["entity", "top"])
def test_not_send_when_actor_crashes(shared_psystem, top):
    system = shared_psystem
    name = f"crash-{next(_ids)}"
    probe, reports = system.probe(name), system.probe(name + "-reports")
    path = f"/user/{name}" if top else f"/user/crashers-{name}/{name}"
    if top:
        system.spawn(CrashingSender, path=path, kwargs={"client": system.prefix})
    else:
        system.spawn(CrashingSender, path=f"/user/crashers-{name}", entities=True,
                     kwargs={"client": system.prefix})
    probe.tell(path, "message")
    assert probe.receive(10) == ("SendingMessage", 1)
    probe.tell(path, "crash")
    assert probe.receive(10) == "ConfirmCrashMessage"
    system.stop(path)
    probe.expect_no_message(0.25 * S)
    # The same persistence id again: recovery records the delivery, then fails on "crash".
    if top:
        system.spawn(CrashingSender, path=path, kwargs={"client": system.prefix})
    else:
        probe.tell(path, "wake")
    kind, cause, recorded = reports.receive(10)
    assert kind == "recovery failure" and "crash while replaying" in cause and recorded == 1
    # ... and a failed recovery sends nothing of what it recorded.
    probe.expect_no_message(1 * S)


def spawn_app(system, run: str, seed: int, pid: str, probe) -> tuple[str, str, str]:
    """Akka's ChaosApp: a destination, a sender (restarted through the app) and the app itself."""
    dst, snd, app = (f"/user/{run}-{x}/{x}" for x in ("destination", "sender", "app"))
    system.spawn(ChaosDestination, path=f"/user/{run}-destination", entities=True,
                 kwargs={"seed": seed, "probe": probe.path})
    system.spawn(ChaosSender, path=f"/user/{run}-sender", entities=True, max_restarts=10_000,
                 kwargs={"seed": seed, "pid": pid, "destination": dst, "app": app, "probe": probe.path})
    system.spawn(ChaosApp, path=f"/user/{run}-app", entities=True, kwargs={"sender_path": snd})
    system.tell(app, "start")
    return dst, snd, app


def wait_done(probe, *sources: str) -> None:
    expected = tuple(range(1, NUM_MESSAGES + 1))
    missing = set(sources)
    while missing:
        done = probe.receive(30)
        assert isinstance(done, Done) and done.ints == expected, done
        missing.discard(done.source)


@pytest.mark.timeout(120)
def test_tolerate_and_recover_from_random_failures(shared_psystem):
    system = shared_psystem
    seed = int(os.environ.get("REPRISE_CHAOS_SEED", random.randrange(2**32)))
    print(f"chaos seed {seed} (rerun with REPRISE_CHAOS_SEED={seed})")
    n = next(_ids)
    pid = f"chaos-sender-{n}"
    try:
        probe = system.probe()
        _, snd, _ = spawn_app(system, f"chaos{n}", seed, pid, probe)
        wait_done(probe, "sender", "destination")

        def all_confirmed():
            try:
                return system.ask(snd, "unconfirmed", 2) == 0
            except AskTimeout:  # the sender may be between a failure and its next start
                return False
        wait_for(all_confirmed, 30)
        system.stop(f"/user/chaos{n}-sender")
        # A second app recovering the same persistence id has everything delivered and confirmed already.
        probe2 = system.probe()
        dst2, _, _ = spawn_app(system, f"chaos{n}b", seed, pid, probe2)
        wait_done(probe2, "sender")
        assert system.ask(dst2, "count", 10) == 0
    except (AssertionError, AskTimeout) as exc:
        raise AssertionError(f"chaos run failed with seed {seed} (REPRISE_CHAOS_SEED={seed}): {exc}") from exc

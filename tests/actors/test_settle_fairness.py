"""A host's settle loop yields to its mailbox: an entity that keeps telling itself does not starve the others."""

from __future__ import annotations

import time

import pytest

import actors
from tests.actors.fairness_sample import Measure, Pinger, SelfSender, Spin

pytestmark = pytest.mark.timeout(60)

SPIN = 2.0  # seconds the self-sender loops; twice the bound below (before the fix, a reply came at its end)
BOUND = 1.0  # what another entity's reply or a status answer may take meanwhile


def outcome(probe) -> dict[str, object]:
    """The three reports of a Measure run, by kind: "spinning", "latencies", "spun"."""
    got = {}
    for message in probe.receive_many(3, timeout=SPIN + 20):
        got[message if isinstance(message, str) else message[0]] = message
    return got


def neighbour_latencies(system: actors.System, looper_cls: type, path: str) -> tuple[list[float], int]:
    """Spawns looper_cls's entities at `path`, has another host ping `path`/other while `path`/spinner loops for
    SPIN s: the pong latencies (seconds) and the loop's count."""
    system.spawn(looper_cls, path=path, entities=True)
    system.spawn(Pinger, path="/user/pinger")
    assert system.ask(f"{path}/other", ("ping", -1)) == ("pong", -1)
    probe = system.probe()
    system.tell("/user/pinger", Measure(f"{path}/spinner", f"{path}/other", time.time() + SPIN, probe.path))
    got = outcome(probe)
    return got["latencies"][1], got["spun"][1]


def test_self_sending_entity_does_not_block_another_entitys_replies(system):
    """Another host pings an entity whose neighbour in its host keeps telling itself: each pong comes back
    within BOUND, and the self-sender's loop goes on meanwhile (both bases)."""
    latencies, spun = neighbour_latencies(system, SelfSender, "/user/loop")
    assert len(latencies) >= 3, f"only {len(latencies)} pings answered during a {SPIN} s loop: {latencies}"
    assert max(latencies) < BOUND, f"pongs took {latencies} s while the neighbour looped"
    assert spun > 1000  # the loop ran all along


def test_client_replies_and_status_while_an_entity_tells_itself(base, make_system):
    """A client's ask to another entity of the busy host, and a status request, are answered within BOUND.
    (The in-process base runs actors inside the client's own calls: its tell returns once they are idle.)"""
    if base == "local":
        pytest.skip("the local base runs its actors inside the client's tell: no client call overlaps a loop")
    system = make_system(base)
    system.spawn(SelfSender, path="/user/loop", entities=True)
    assert system.ask("/user/loop/other", ("ping", 0)) == ("pong", 0)
    probe = system.probe()
    until = time.time() + SPIN
    system.tell("/user/loop/spinner", Spin(until, probe.path))
    assert probe.receive(timeout=10) == "spinning"

    began = time.monotonic()
    assert system.ask("/user/loop/other", ("ping", 1), timeout=10) == ("pong", 1)
    replied = time.monotonic() - began
    began = time.monotonic()
    status = system.status(timeout=10)
    answered = time.monotonic() - began
    assert replied < BOUND, f"another entity's reply took {replied:.2f} s while one entity told itself"
    assert answered < BOUND, f"status took {answered:.2f} s while one entity told itself"
    assert time.time() < until, "the spin ended before the checks ran: nothing was measured"
    assert status.hosts["/user/loop"].alive == 2  # the busy host answered itself, not the guardian's timeout

    done, count = probe.receive(timeout=SPIN + 10)
    assert done == "spun" and count > 1000  # and the loop kept running all along

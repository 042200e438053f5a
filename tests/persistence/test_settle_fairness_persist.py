"""A host's settle loop yields to its mailbox between group commits: a persist loop does not starve the host."""

from __future__ import annotations

import time

import pytest

from tests.actors.fairness_sample import Measure, Pinger
from tests.actors.test_settle_fairness import BOUND, SPIN, outcome
from tests.persistence.fairness_actors import PersistLooper

pytestmark = pytest.mark.timeout(60)


def test_persist_loop_does_not_block_another_entitys_replies(psystem):
    """An entity persisting one event per command, each command told by the previous event's handler (one
    commit per round of the host's settle loop), next to an entity pinged from another host: every pong
    within BOUND, and the loop goes on meanwhile (both bases)."""
    psystem.spawn(PersistLooper, path="/user/ploop", entities=True)
    psystem.spawn(Pinger, path="/user/pinger")
    assert psystem.ask("/user/ploop/other", ("ping", -1)) == ("pong", -1)
    probe = psystem.probe()
    psystem.tell("/user/pinger", Measure("/user/ploop/spinner", "/user/ploop/other", time.time() + SPIN, probe.path))
    got = outcome(probe)
    latencies = got["latencies"][1]
    assert len(latencies) >= 3, f"only {len(latencies)} pings answered during a {SPIN} s loop: {latencies}"
    assert max(latencies) < BOUND, f"pongs took {latencies} s while the neighbour persisted in a loop"
    assert got["spun"][1] > 10  # events persisted, one commit each, all along

"""A host's settle loop yields to its mailbox between group commits: a persist loop does not starve the host."""

from __future__ import annotations

import pytest

from tests.actors.test_settle_fairness import BOUND, SPIN, neighbour_latencies
from tests.persistence.fairness_actors import PersistLooper

pytestmark = pytest.mark.timeout(60)


def test_persist_loop_does_not_block_another_entitys_replies(psystem):
    """An entity persisting one event per command, each command told by the previous event's handler (one
    commit per round of the host's settle loop), next to an entity pinged from another host: every pong
    within BOUND, and the loop goes on meanwhile (both bases)."""
    latencies, spun = neighbour_latencies(psystem, PersistLooper, "/user/ploop")
    assert len(latencies) >= 3, f"only {len(latencies)} pings answered during a {SPIN} s loop: {latencies}"
    assert max(latencies) < BOUND, f"pongs took {latencies} s while the neighbour looped"
    assert spun > 10  # events persisted, one commit each, all along

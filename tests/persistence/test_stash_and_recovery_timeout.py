"""PersistentActorBoundedStashingSpec and PersistentActorRecoveryTimeoutSpec (reference §2.7, §2.2, §4.6).

The internal stash holds commands while a stashing persist is pending; here that is while one dispatch
of the host is being handled, so the cases send the barrier command and the extra commands in one batch.
"""

from __future__ import annotations

import pytest

from persistence import PersistentActor, ReplyToStrategy
from tests.persistence.spec_actors import Cmd, Report, prepared, state, together
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)
TEN = list(range(1, 11))


def test_throw_strategy_restarts_and_loses_the_overflowing_command(ps):
    path, probe = prepared(ps, "bounded")
    together(ps, probe, path, Cmd("a"), *(Cmd(i) for i in range(1, 12)))
    # Cmd(11) overflowed: StashOverflowError restarted the actor; the 10 waiting commands survived it.
    assert state(probe, path) == ["a-1", "a-2", "a", *TEN]
    probe.tell(path, Cmd(12))
    assert state(probe, path) == ["a-1", "a-2", "a", *TEN, 12]


def test_drop_strategy_sends_overflow_to_dead_letters(ps):
    path, probe = prepared(ps, "bounded", "drop")
    before = ps.dead_letters().count
    together(ps, probe, path, Cmd("a"), *(Cmd(i) for i in range(1, 21)))
    assert state(probe, path) == ["a-1", "a-2", "a", *TEN]
    letters = wait_for(lambda: (d := ps.dead_letters()).count >= before + 10 and d, 10)
    dropped = [d.message for d in letters.recent if d.target == path]
    assert dropped == [Cmd(i) for i in range(11, 21)]


def test_reply_to_strategy_answers_the_sender(ps):
    path, probe = prepared(ps, "bounded", "reply")
    together(ps, probe, path, Cmd("a"), *(Cmd(i) for i in range(1, 21)))
    assert probe.receive_many(10, 10) == ["RejectToStash"] * 10
    assert state(probe, path) == ["a-1", "a-2", "a", *TEN]


@pytest.mark.parametrize("attr,value,text", [
    ("stash_capacity", -1, "Bad.stash_capacity must be an int of at least 1"),
    ("stash_capacity", 0, "Bad.stash_capacity must be an int of at least 1"),
    ("internal_stash_overflow_strategy", "bounce", "internal_stash_overflow_strategy of Bad must be"),
])
def test_bad_stash_settings_are_named(attr, value, text):
    class Bad(PersistentActor):
        config: dict = {}

    setattr(Bad, attr, value)
    with pytest.raises(ValueError, match=text):
        Bad()._stash_settings()
    assert ReplyToStrategy("x") != ReplyToStrategy("y")


def test_fail_recovery_if_an_event_does_not_arrive_within_the_timeout(ps):
    path, probe = prepared(ps, "slow", "watch")
    probe.tell(path, Cmd("slow"))
    assert state(probe, path) == ["a-1", "a-2", "slow"]
    ps.stop(path)
    assert probe.receive(10) == Report("stopped", path)
    probe.tell(path, "state")  # a new incarnation: its replay stalls before "slow" for longer than 0.2 s
    failure = probe.receive(10)
    assert failure == Report("recovery failure", (
        "RecoveryTimedOut", "Recovery timed out, didn't get event within 0.2 s, highest sequence number seen 2",
        None))
    assert probe.receive(10) == Report("stopped", path)

"""Persist ordering across failures, restarts and stops of a persistent actor (both bases, SQLite journal)."""

from __future__ import annotations

import pytest

from tests.persistence.core_audit_actors import Flaky

pytestmark = pytest.mark.timeout(60)


def test_commands_stashed_before_a_restart_survive_a_second_failure_on_the_first_of_them(psystem):
    psystem.spawn(Flaky, "/user/f", entities=True)
    probe = psystem.probe()
    # "boom", "x" and "y" wait behind the persist of "a", whose handler fails: the new instance gets them in
    # order, and "boom" fails it again. As in Akka only the failing command is lost: "x" and "y" are handled.
    psystem.tell_many([("/user/f/1", ("persist-then-fail", "a")), ("/user/f/1", "boom"), ("/user/f/1", "x"),
                       ("/user/f/1", "y")], sender=probe.path)
    assert probe.receive() == ("handled", "x")
    assert probe.receive() == ("handled", "y")
    assert psystem.ask("/user/f/1", "state") == ("a", "x", "y")

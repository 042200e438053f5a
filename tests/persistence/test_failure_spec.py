"""EventSourcedActorFailureSpec restart cases (reference §4.6) on both bases, as entity and top-level actor.

(The journal-failure cases are in test_failures.py; Resume has no counterpart: failures always restart.)
"""

from __future__ import annotations

import pytest

from tests.persistence.spec_actors import Cmd, prepared, state, together

pytestmark = pytest.mark.timeout(60)
where = pytest.mark.parametrize("top", [False, True], ids=["entity", "top"])


@where
def test_restart_when_persist_is_followed_by_an_exception(ps, top):
    path, probe = prepared(ps, "err", top=top)
    together(ps, probe, path, *(Cmd(d) for d in ("a", "err", "b", "c")))
    # The event of the failing command is still written; the new incarnation gets it by replay.
    assert state(probe, path) == ["a-1", "a-2", "a", "err", "b", "c"]


@where
def test_restart_when_the_persist_handler_throws(ps, top):
    path, probe = prepared(ps, "errh", top=top)
    together(ps, probe, path, *(Cmd(d) for d in ("a", "b", "err", "c", "d")))
    # "err" was stored before its handler failed: the restarted actor applies it on replay.
    assert state(probe, path) == ["a-1", "a-2", "a", "b", "err", "c", "d"]

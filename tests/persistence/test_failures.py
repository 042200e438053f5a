"""EventSourcedActorFailureSpec journal-failure cases on both bases (the crash spec is in
test_at_least_once_delivery_failures.py, the restart cases in test_failure_spec.py)."""

from __future__ import annotations

import itertools
import time

import pytest

from actors import MessageUndelivered
from tests.persistence.fixtures import Failed, FailureReporting, Ops, RecoveryFailureReporting

pytestmark = pytest.mark.timeout(60)
_ids = itertools.count(1)


@pytest.fixture
def fsys(base, make_system, tmp_path):
    return make_system(base)


def test_persist_failure_calls_hook_and_stops(fsys):
    fsys.spawn(FailureReporting, path="/user/f", entities=True)
    path = f"/user/f/w{next(_ids)}"
    probe = fsys.probe()
    probe.tell(path, ("watch", probe.path))
    probe.tell(path, Ops("a", ("pa:1",)))
    assert probe.receive(10) == "a-1-1"
    probe.tell(path, Ops("wrong", ("p:1",)))
    assert probe.receive(10) == Failed("persist", "wrong-1-2")
    assert probe.receive(10) == Failed("stopped", path)


def test_persist_rejected_calls_hook_and_continues(fsys):
    fsys.spawn(FailureReporting, path="/user/f", entities=True)
    path = f"/user/f/r{next(_ids)}"
    probe = fsys.probe()
    probe.tell(path, Ops("not serializable", ("pall:1,2",)))
    assert probe.receive_many(2, 10) == [Failed("rejected", "not serializable-1-1"),
                                         Failed("rejected", "not serializable-2-2")]
    probe.tell(path, Ops("a", ("pall:1,2",)))
    assert probe.receive_many(2, 10) == ["a-1-1", "a-2-2"]
    probe.tell(path, "seq")
    assert probe.receive(10) == 4


def test_recovery_failure_stops_and_calls_hook(fsys):
    fsys.spawn(FailureReporting, path="/user/f", entities=True)
    fsys.spawn(RecoveryFailureReporting, path="/user/g", entities=True)
    name = f"c{next(_ids)}"
    probe = fsys.probe()
    # Same persistence id? No: different paths; write a corrupt event under /user/g's id via a command.
    probe.tell(f"/user/g/{name}", Ops("x", ("raw:corrupt",)))
    assert probe.receive(10) == "corrupt-1"
    probe.tell(f"/user/g/{name}", ("watch", probe.path))
    probe.tell(f"/user/g/{name}", "boom")  # restart -> recovery replays "corrupt" -> fails
    assert probe.receive(10) == Failed("recovery", "blahonga 1 1")
    assert probe.receive(10) == Failed("stopped", f"/user/g/{name}")


def test_an_ask_to_an_entity_whose_recovery_fails_fails_at_once_naming_the_cause(fsys, tmp_path):
    # The ask waited out its whole timeout; why was only in system.errors().
    fsys.spawn("tests.persistence.fixtures:Scripted", "/user/s", entities=True, journal=f"sqlite:///{tmp_path}/j.db")
    path = f"/user/s/r{next(_ids)}"
    assert fsys.ask(path, Ops("a", ("raw:bad",))) == "bad-1"  # an event its receive_recover raises on
    fsys.stop(path)
    started = time.monotonic()
    with pytest.raises(MessageUndelivered, match=f"the message to {path} was not delivered .*persistent actor "
                                                 "stopped: recovery failed: RuntimeError: bad event in replay"):
        fsys.ask(path, "state", timeout=30)
    assert time.monotonic() - started < 10


def test_persist_during_replay_fails_recovery(fsys):
    fsys.spawn(RecoveryFailureReporting, path="/user/g", entities=True)
    path = f"/user/g/p{next(_ids)}"
    probe = fsys.probe()
    probe.tell(path, Ops("x", ("raw:persist-in-replay",)))
    assert probe.receive(10) == "persist-in-replay-1"
    probe.tell(path, ("watch", probe.path))
    probe.tell(path, "boom")
    got = probe.receive(10)
    assert got.what == "recovery" and "Cannot persist during replay" in got.detail

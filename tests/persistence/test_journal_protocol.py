"""PersistentActorJournalProtocolSpec (reference §2.6, §4.6): one outstanding write per actor, and what
accumulates meanwhile goes out together in the next one. The journal records the AtomicWrite sizes of each
write call (for the case's persistence id); the first write is the fixture's persist_all of a-1, a-2."""

from __future__ import annotations

import pytest

from tests.persistence.spec_actors import Cmd, prepared, together

pytestmark = pytest.mark.timeout(60)


def writes(probe, path):
    probe.tell(path, "writes")
    return probe.receive(10)[1:]  # without the fixture's write


def test_simple_persist_waits_for_the_previous_write(ps):
    path, probe = prepared(ps, "proto")
    together(ps, probe, path, Cmd(("persist", 1)), Cmd(("persist", 1)))
    assert probe.receive_many(2, 10) == ["0", "0"]
    assert writes(probe, path) == [[1], [1]]  # the second command's event is written after the first's


def test_nested_persists_go_into_the_next_write(ps):
    path, probe = prepared(ps, "proto")
    together(ps, probe, path, Cmd(("nested", 2)), Cmd(("persist", 1)))
    assert probe.receive_many(5, 10) == ["outer-0", "outer-1", "inner-0", "inner-1", "0"]
    # One write with both persist calls of the command, one with the nested events, then the next command.
    assert writes(probe, path) == [[1, 1], [1, 1], [1]]


def test_many_persist_calls_of_one_command_are_one_write(ps):
    path, probe = prepared(ps, "proto")
    probe.tell(path, Cmd(("persist", 30)))
    assert probe.receive_many(30, 10) == [str(k) for k in range(30)]
    assert writes(probe, path) == [[1] * 30]


def test_persist_async_calls_accumulate_into_one_write(ps):
    path, probe = prepared(ps, "proto")
    together(ps, probe, path, *(Cmd(("async", n)) for n in range(20)))
    assert len(probe.receive_many(40, 10)) == 40
    # 20 commands while nothing was written: one write of 20 AtomicWrites of 2 events each; the events
    # persisted by their handlers form the next write.
    assert writes(probe, path) == [[2] * 20, [1] * 40]

"""receive_batch: an entity that opts in gets its messages of one host batch in one call, as receive would."""

from __future__ import annotations

import pytest

from tests.actors.batch_sample import Batched

pytestmark = pytest.mark.timeout(60)

E1, E2 = "/user/b/1", "/user/b/2"


def start(system):
    probe = system.probe()
    system.spawn(Batched, "/user/b", entities=True, args=(probe.path,))
    return probe


def received(probe, n):
    """The next n probe messages, split into ("got", ...) and ("batch", ...) per entity."""
    got: dict[str, list] = {}
    batches: dict[str, list] = {}
    for m in probe.receive_many(n, 10):
        (got if m[0] == "got" else batches).setdefault(m[1], []).append(m[2:] if m[0] == "got" else m[2])
    return got, batches


def test_each_entity_gets_its_messages_of_a_batch_in_order_in_one_call(system):
    probe = start(system)
    system.tell_many([(E1, 1), (E2, "a"), (E1, 2), (E1, 3), (E2, "b")], sender=probe.path)
    got, batches = received(probe, 7)
    assert [m for m, _ in got[E1]] == [1, 2, 3] and [m for m, _ in got[E2]] == ["a", "b"]
    assert batches == {E1: [(1, 2, 3)], E2: [("a", "b")]}


def test_a_failing_message_restarts_the_entity_and_the_rest_go_to_the_new_instance(system):
    probe = start(system)
    system.tell_many([(E1, 1), (E1, "boom"), (E1, 2), (E1, 3)], sender=probe.path)
    got, batches = received(probe, 4)
    (m1, first), (m2, second), (m3, third) = got[E1]
    # The failing message is not handed over again, as with receive; 2 and 3 reach a new incarnation.
    assert (m1, m2, m3) == (1, 2, 3) and first != second == third
    assert batches == {E1: [(2, 3)]}  # the failed call reported nothing


def test_an_entity_that_stops_gets_no_more_of_the_batch(system):
    probe = start(system)
    system.tell_many([(E1, 1), (E1, "stop"), (E1, 2)], sender=probe.path)
    got, batches = received(probe, 5)
    (m1, first), (m2, same), (m3, new) = got[E1]
    assert (m1, m2, m3) == (1, "stop", 2) and first == same != new  # a fresh entity for the message after
    assert batches == {E1: [(1, "stop"), (2,)]}

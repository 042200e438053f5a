"""Batched transport keeps per sender->receiver FIFO order under load."""

from __future__ import annotations

import pytest

from tests.actors.sample import Checker, Produce, Producer


@pytest.mark.timeout(180)
def test_100k_messages_arrive_in_order_across_hosts(system):
    system.spawn(Producer, "/user/producer")
    system.spawn(Checker, "/user/checker")
    received, out_of_order = system.ask("/user/producer", Produce("/user/checker", 100_000), timeout=150)
    assert (received, out_of_order) == (100_000, 0)


@pytest.mark.timeout(120)
def test_two_producers_into_one_entity_keep_each_stream_in_order(system):
    system.spawn(Producer, "/user/producers", entities=True)
    system.spawn(Checker, "/user/checkers", entities=True)
    probe = system.probe()
    for name in ("a", "b"):
        probe.tell(f"/user/producers/{name}", Produce("/user/checkers/1", 20_000))
    results = probe.receive_many(2, timeout=100)
    # The first "end" may arrive before the other stream is complete; the last sees both streams whole.
    assert max(r[0] for r in results) == 40_000
    assert all(r[1] == 0 for r in results)

"""AtLeastOnceDelivery rules of reference §1 that the AtLeastOnceDeliverySpec cases do not pin down."""

from __future__ import annotations

import pytest

from persistence import Confirm
from tests.persistence.beyond_actors import Payload, endpoint, sender, unconfirmed

pytestmark = pytest.mark.timeout(60)


def test_max_unconfirmed_messages_rejects_without_using_an_id(fs):
    path, _ = sender(fs, max_unconfirmed=3)
    dst, _ = endpoint(fs, "silent")
    assert [fs.ask(path, ("direct", dst, f"m{i}")) for i in range(3)] == [("queued", i) for i in (1, 2, 3)]
    assert fs.ask(path, ("direct", dst, "m4")) == ("max", "Too many unconfirmed messages, maximum allowed is [3]",
                                                   3, 3)
    fs.tell(path, Confirm(2))
    assert fs.ask(path, ("direct", dst, "m5")) == ("queued", 4)


def test_redelivery_timer_runs_only_while_something_is_unconfirmed(fs):
    path, _ = sender(fs, interval=30.0)
    dst, probe = endpoint(fs, "silent")
    assert fs.ask(path, "timer") is False
    fs.ask(path, ("direct", dst, "x"))
    assert fs.ask(path, "timer") is True
    fs.tell(path, Confirm(1))
    assert unconfirmed(fs, path) == 0
    assert fs.ask(path, "timer") is False


def test_delivery_by_path_reaches_a_restarted_destination(fs):
    path, _ = sender(fs, interval=0.3 * 0.3)
    dst, probe = endpoint(fs, "fresh")
    fs.ask(path, ("direct", dst, "x"))
    assert probe.receive_many(2, 10) == ["started", Payload(1, "x")]
    fs.stop(dst)  # the destination entity is gone; the next redelivery starts a new one at the same path
    while probe.receive(10) != "started":  # copies that reached the old instance come first
        pass
    assert probe.receive(10) == Payload(1, "x")

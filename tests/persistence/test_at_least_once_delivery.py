"""AtLeastOnceDeliverySpec (reference §4.4) on both bases; intervals scaled by S, Akka's ratios kept."""

from __future__ import annotations

import itertools

import pytest

from persistence import RedeliveryTick, UnconfirmedWarning
from tests.persistence.alod_actors import TellsWhatItGets
from tests.persistence.fixtures import Action, Destination, Req, Sender, SenderConfig, Unreliable
from tests.waiting import dead_letters_reach

pytestmark = pytest.mark.timeout(90)
S = 0.3  # 1 s in Akka's spec is S seconds here
_ids = itertools.count(1)


class World:
    """A Sender entity, destination probes and (optionally) Unreliable links in front of them."""

    def __init__(self, system, drops: dict[str, int | None], interval: float, warn_after: int = 5,
                 burst: int = 1000, use_async: bool = False, bare: bool = False):
        self.system = system
        n = next(_ids)
        system.spawn(Sender, path="/user/snd", entities=True)
        system.spawn(Destination, path="/user/dst", entities=True)
        system.spawn(Unreliable, path="/user/unr", entities=True)
        self.control = system.probe()
        self.probes, dests = {}, []
        for letter, drop in drops.items():
            probe = self.probes[letter] = system.probe()
            if bare:
                dests.append((letter, probe.path))
                continue
            dst = f"/user/dst/{letter}{n}"
            self.control.tell(dst, ("probe", probe.path))
            assert self.control.receive(10) == "ok"
            if drop:
                link = f"/user/unr/{letter}{n}"
                self.control.tell(link, ("config", drop, dst))
                assert self.control.receive(10) == "ok"
                dst = link
            dests.append((letter, dst))
        self.sender = f"/user/snd/s{n}"
        self.warnings = system.probe()
        self.config = SenderConfig(tuple(dests), self.warnings.path, interval, warn_after, burst, use_async)
        self.control.tell(self.sender, self.config)
        assert self.control.receive(10) == "configured"

    def req(self, *payloads: str) -> None:
        for p in payloads:
            self.control.tell(self.sender, Req(p))
        for _ in payloads:
            assert self.control.receive(10) == "ReqAck"


def test_a_redelivery_tick_from_another_actor_never_reaches_user_code(psystem):
    # RedeliveryTick is exported (for isinstance checks) and was handed to receive_command when another sent it.
    psystem.spawn(TellsWhatItGets, path="/user/tells", entities=True)
    probe = psystem.probe()
    probe.tell("/user/tells/1", RedeliveryTick())
    probe.tell("/user/tells/1", "next")
    assert probe.receive(10) == ("got", "next")
    assert dead_letters_reach(psystem, 1)
    assert "RedeliveryTick is AtLeastOnceDelivery's own timer message" in psystem.dead_letters().recent[-1].reason


def test_deliver_in_order_when_nothing_is_lost(psystem):
    w = World(psystem, {"A": None}, interval=1 * S)
    w.req("a")
    assert w.probes["A"].receive(10) == Action(1, "a")
    w.probes["A"].expect_no_message(1 * S)


def lose_a3(psystem):
    """Akka's common opening: a-1 and a-2 arrive, a-3 is lost by the unreliable link, a-4 arrives."""
    w = World(psystem, {"A": 3}, interval=2 * S)
    a = w.probes["A"]
    w.req("a-1")
    assert a.receive(10) == Action(1, "a-1")
    w.req("a-2")
    assert a.receive(10) == Action(2, "a-2")
    w.req("a-3", "a-4")
    assert a.receive(10) == Action(4, "a-4")
    return w, a


def test_redeliver_lost_messages(psystem):
    w, a = lose_a3(psystem)
    assert a.receive(10) == Action(3, "a-3")
    a.expect_no_message(1 * S)


def test_wildcards_are_not_supported(psystem):
    w = World(psystem, {"A": None}, interval=1 * S)
    w.control.tell(w.sender, "wildcard")
    kind, text, last_id = w.control.receive(10)
    assert kind == "failure" and "not supported" in text and last_id == 0


def test_redeliver_lost_messages_after_restart(psystem):
    w, a = lose_a3(psystem)
    w.control.tell(w.sender, "boom")
    assert a.receive(10) == Action(3, "a-3")
    w.req("a-5")
    assert a.receive(10) == Action(5, "a-5")
    a.expect_no_message(1 * S)


def test_resend_replayed_deliveries_initially_in_order(psystem):
    w = World(psystem, {"A": 2}, interval=2 * S)
    a = w.probes["A"]
    w.req("a-1")
    assert a.receive(10) == Action(1, "a-1")
    w.req("a-2")
    w.req("a-3")
    assert a.receive(10) == Action(3, "a-3")
    w.req("a-4")
    w.control.tell(w.sender, "boom")
    w.control.tell(w.sender, Req("a-5"))
    assert w.control.receive(10) == "ReqAck"
    assert a.receive(10) == Action(2, "a-2")
    assert {a.receive(10), a.receive(10)} == {Action(5, "a-5"), Action(4, "a-4")}
    a.expect_no_message(1 * S)


def test_restore_state_from_snapshot(psystem):
    w = World(psystem, {"A": 3}, interval=2 * S)
    a = w.probes["A"]
    w.req("a-1")
    assert a.receive(10) == Action(1, "a-1")
    w.req("a-2")
    assert a.receive(10) == Action(2, "a-2")
    w.control.tell(w.sender, Req("a-3"))
    w.control.tell(w.sender, Req("a-4"))
    w.control.tell(w.sender, "snap")
    assert w.control.receive_many(3, 10) == ["ReqAck", "ReqAck", "saved"]
    assert a.receive(10) == Action(4, "a-4")
    w.control.tell(w.sender, "boom")
    assert a.receive(10) == Action(3, "a-3")
    w.req("a-5")
    assert a.receive(10) == Action(5, "a-5")
    a.expect_no_message(1 * S)


def test_warn_about_unconfirmed_messages(psystem):
    w = World(psystem, {"A": None, "B": None}, interval=1 * S, warn_after=3, bare=True)
    w.req("a-1", "b-1", "b-2")
    dests, msgs = set(), set()
    while dests != {w.probes["A"].path, w.probes["B"].path} or len(msgs) < 3:
        warning = w.warnings.receive(5)
        assert isinstance(warning, UnconfirmedWarning)
        dests |= {u.destination for u in warning.unconfirmed_deliveries}
        msgs |= {u.message for u in warning.unconfirmed_deliveries}
    assert msgs == {Action(1, "a-1"), Action(2, "b-1"), Action(3, "b-2")}


def test_redeliver_many_lost_messages(psystem):
    w = World(psystem, {"A": 2, "B": 5, "C": 3}, interval=1 * S, use_async=True)
    for letter in "abc":
        w.req(*[f"{letter}-{n}" for n in range(1, 101)])
    for letter in "ABC":
        got = w.probes[letter].receive_many(100, 20)
        assert {x.payload for x in got} == {f"{letter.lower()}-{n}" for n in range(1, 101)}


def test_limit_messages_redelivered_at_once(psystem):
    w = World(psystem, {"A": 2}, interval=2 * S, burst=2, use_async=True)
    a = w.probes["A"]
    w.req(*[f"a-{n}" for n in range(1, 11)])
    assert a.receive_many(5, 10) == [Action(n, f"a-{n}") for n in (1, 3, 5, 7, 9)]
    a.expect_no_message(0.1 * S)
    resent = set()
    for _ in range(5):
        resent.add(a.receive(10).delivery_id)
        a.expect_no_message(0.1 * S)
    assert resent == {2, 4, 6, 8, 10}

"""A DurableDelivery that delivers what its own event decides: the event and its deliveries must be durable together
(persist_and_deliver), or a failed write or a SIGKILL between them loses the deliveries for good (DurableDelivery's
replay restores its own DeliveriesSent, never your events' deliveries); deliver() from a persist handler, where that
window opens, is refused naming the safe ways; a reply deferred after deliver() waits for the delivery's write."""

from __future__ import annotations

import os
from collections import Counter

import pytest

from actors import ActorFailed, AskTimeout, MessageUndelivered, System
from persistence import Confirm
from tests.persistence.compact_fixtures import Parcel
from tests.persistence.durable_handler_actors import (
    AsyncSender,
    BatchedSender,
    DeferDeliverAtOnce,
    DeferredForwardRelay,
    DeliverThenCheckedReply,
    DeliverThenReply,
    NaturalSender,
    PersistAndDeliverThenDeferDeliver,
    PersistAsyncThenDeferAsyncDeliver,
    PersistAsyncThenDeferDeliver,
    PersistThenDeferAsyncDeliver,
    PersistThenDeferDeliver,
    PersistThenDeliverFromItsHandlersDeferral,
    Sender,
    TwoAskers,
)
from tests.persistence.relay_actors import Sink
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

SENDER, SINKS = "/user/sender", ("/user/sink-a", "/user/sink-b")


def _payloads(tmp_path) -> list[str]:
    """The orders of a test: two of them fault- (their names unique: a failfwd journal fails each once per process)."""
    return ["p1", f"fault-a-{tmp_path.name}", "p2", "p3", f"fault-b-{tmp_path.name}", "p4"]


def _asked(system, path: str, message: object) -> object:
    """The reply, or None while `path`'s host is between a failure (or a kill) and its next start."""
    try:
        return system.ask(path, message, timeout=5)
    except (AskTimeout, ActorFailed, MessageUndelivered):
        return None


def _fault_urls(fault: str, tmp_path) -> dict[str, str]:
    """A journal failing (a memory one), or SIGKILLing its host (SQLite), at the first write of each fault- forward."""
    if fault == "fail":
        return {"journal": f"failfwd://{tmp_path.name}", "snapshot_store": f"failfwd://{tmp_path.name}"}
    return {"journal": f"killfwd://{tmp_path}/journal.db", "snapshot_store": f"killfwd://{tmp_path}/journal.db"}


def _order_until_acknowledged(system, payloads: list[str], command: str = "order") -> None:
    """Order each payload, again until acknowledged (a client's retry of a command that got no reply)."""
    for payload in payloads:
        wait_for(lambda p=payload: _asked(system, SENDER, (command, p)) == ("ok", p), timeout=60, interval=0.2)


def _lost(system, payloads: list[str]) -> list[tuple[str, str]]:
    """(sink, payload) of each acknowledged order a sink never got, once nothing is unconfirmed at the sender (or
    after 20 s); fails if a sink got one twice."""
    got: dict[str, object] = {}

    def settled() -> bool:
        got.update({sink: _asked(system, sink, "got") for sink in SINKS})
        complete = all(g is not None and set(g) >= set(payloads) for g in got.values())
        return complete and _asked(system, SENDER, "unconfirmed") == 0

    try:
        wait_for(settled, timeout=20, interval=0.2)
    except AssertionError:
        pass
    for sink, g in got.items():
        assert g is not None, f"{sink} did not answer"
        assert all(n == 1 for n in Counter(g).values()), f"{sink} got an order twice: {g}"
    return [(sink, p) for sink in SINKS for p in payloads if p not in got[sink]]


def _check_faults_hit(system, fault: str, tmp_path) -> None:
    if fault == "fail":
        failures = [e.reason for e in system.errors().recent if "simulated write failure" in e.reason]
        assert len(failures) == 2, f"the deliveries' write of each fault- order failed once: {failures}"
    else:
        assert sorted(f for f in os.listdir(tmp_path) if ".killed-" in f) == [
            f"journal.db.killed-fault-{x}-{tmp_path.name}" for x in "ab"], "the sender's host was killed at each"


def _spawn_sinks_and(system: System, sender: type) -> None:
    """The two sinks, and `sender` at SENDER delivering to both."""
    for sink in SINKS:
        system.spawn(Sink, sink)
    system.spawn(sender, SENDER, kwargs={"sinks": SINKS})


@pytest.mark.parametrize("cls", [Sender, AsyncSender], ids=["persist", "asynchronous"])
@pytest.mark.parametrize(("base", "fault"), [("local", "fail"), ("multiproc", "fail"), ("multiproc", "kill")])
def test_persist_and_deliver_loses_no_delivery_when_its_write_fails_or_kills_the_host(base, fault, cls, make_system,
                                                                                       tmp_path):
    # Before persist_and_deliver, such a sender persisted its event and delivered from the handler (NaturalSender):
    # the event was durable and acknowledged before the DeliveriesSent's write (a later group commit); a failed write
    # there (the sender stops) or a SIGKILL of its host lost the deliveries for good, 4 of 4 (2 orders x 2 sinks) in
    # every run, the replay restoring the event and no delivery. Here each fault- order's one write fails, or
    # kills the sender's host, and the client orders it again: every acknowledged order reaches both sinks once.
    system = make_system(base, **_fault_urls(fault, tmp_path))
    _spawn_sinks_and(system, cls)
    payloads = _payloads(tmp_path)
    _order_until_acknowledged(system, payloads)
    assert _lost(system, payloads) == []
    assert system.ask(SENDER, "ordered", timeout=10) == tuple(payloads), "each event stored once, in order"
    _check_faults_hit(system, fault, tmp_path)


def test_a_deliver_from_a_persist_handler_of_a_durable_delivery_is_refused_naming_persist_and_deliver(
        base, make_system, tmp_path):
    # The window above opens in every run where deliver() is called from a persist handler: refused at once, not
    # only when a crash hits it, naming the safe ways; nothing is delivered or acknowledged by the failed handler.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    _spawn_sinks_and(system, NaturalSender)
    with pytest.raises(ActorFailed) as refused:
        system.ask(SENDER, ("order", "p1"), timeout=10)
    reason = str(refused.value)
    assert "IllegalStateError" in reason and "persist_and_deliver(event, [(destination, id_to_message)" in reason, reason
    assert "apply_and_forward" in reason, reason
    assert system.ask(SENDER, "unconfirmed", timeout=10) == 0
    assert [system.ask(sink, "got", timeout=10) for sink in SINKS] == [(), ()], "nothing delivered"


@pytest.mark.parametrize("cls", [PersistThenDeferDeliver, PersistAsyncThenDeferAsyncDeliver, PersistThenDeferAsyncDeliver,
                                 PersistAsyncThenDeferDeliver, PersistThenDeliverFromItsHandlersDeferral],
                         ids=["persist-defer", "persist_async-defer_async", "persist-defer_async", "persist_async-defer",
                              "defer-in-persist-handler"])
def test_a_deliver_from_a_deferral_queued_behind_a_persist_is_refused_naming_persist_and_deliver(
        base, cls, make_system, tmp_path):
    # A deferral queued behind a persist (of its command, or from the persist's handler) runs once the event is
    # durable and acknowledged: its deliveries were journaled in a later write. Measured before the refusal with
    # failfwd:// (the deliveries' write fails, the sender stops): 4 of 4 deliveries of the 2 acknowledged fault-
    # orders lost for good, local and multiproc, in each of the 4 persist/defer combinations (killfwd://: 0 to 2
    # lost, and the fault- orders' events stored twice, 8 for 6 orders). Refused in every run, as in a persist handler.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    _spawn_sinks_and(system, cls)
    assert system.ask(SENDER, ("order", "p1"), timeout=10) == ("ok", "p1"), "the event's handler acknowledged it"
    refused = wait_for(lambda: [e.reason for e in system.errors().recent if "IllegalStateError" in e.reason], 10)
    assert "defer handler queued behind a persist" in refused[0], refused
    assert "persist_and_deliver(event, [(destination, id_to_message)" in refused[0], refused
    assert system.ask(SENDER, "unconfirmed", timeout=10) == 0
    assert [system.ask(sink, "got", timeout=10) for sink in SINKS] == [(), ()], "nothing delivered"


@pytest.mark.parametrize("command", ["order", "chained"])
@pytest.mark.parametrize(("base", "fault"), [("local", "fail"), ("multiproc", "fail"), ("multiproc", "kill")])
def test_a_deferral_that_runs_at_once_or_waits_only_for_deliveries_may_deliver_as_a_command(
        base, fault, command, make_system, tmp_path):
    # Nothing pending: defer runs at once (Akka's), inside the command; queued behind deliveries only ("chained"), it
    # follows no event of its own. Neither is refused, and a reply deferred behind its deliveries loses none of them.
    system = make_system(base, **_fault_urls(fault, tmp_path))
    _spawn_sinks_and(system, DeferDeliverAtOnce)
    payloads = _payloads(tmp_path)
    _order_until_acknowledged(system, payloads, command)
    assert _lost(system, payloads) == []
    assert not [e.reason for e in system.errors().recent if "IllegalStateError" in e.reason]
    _check_faults_hit(system, fault, tmp_path)


@pytest.mark.parametrize(("base", "fault"), [("local", "fail"), ("multiproc", "fail"), ("multiproc", "kill")])
def test_a_reply_deferred_after_deliver_is_told_once_the_delivery_is_durable(base, fault, make_system, tmp_path):
    # deliver() in a command journals the delivery in the round's group commit, after the command returned: a reply
    # told at once acknowledged deliveries a failed write or a SIGKILL then lost (2 of 2 orders x 2 sinks, measured
    # with DeliverThenReplyAtOnce). defer() after deliver() runs behind the delivery's write: no reply when it fails.
    system = make_system(base, **_fault_urls(fault, tmp_path))
    _spawn_sinks_and(system, DeliverThenReply)
    payloads = _payloads(tmp_path)
    _order_until_acknowledged(system, payloads)
    assert _lost(system, payloads) == []
    _check_faults_hit(system, fault, tmp_path)


@pytest.mark.parametrize("payload", ["bad-event", "bad-forward"])
def test_persist_and_deliver_whose_event_or_message_the_journal_rejects_stores_neither_and_replies_nothing(
        base, make_system, tmp_path, payload):
    # One write: a rejected message beside a stored event would be a delivery lost (the event replayed, no delivery),
    # a rejected event beside stored deliveries a delivery of an order that never happened.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    _spawn_sinks_and(system, Sender)
    with pytest.raises(ActorFailed, match="rejected"):
        system.ask(SENDER, ("order", payload), timeout=10)
    assert system.ask(SENDER, ("order", "p1"), timeout=10) == ("ok", "p1"), "the sender goes on"
    assert _lost(system, ["p1"]) == []
    assert system.ask(SENDER, "ordered", timeout=10) == ("p1",)
    assert [system.ask(sink, "got", timeout=10) for sink in SINKS] == [("p1",), ("p1",)], "nothing else delivered"
    system.stop(SENDER)  # the next instance replays p1's event and its delivery, nothing of the rejected order
    system.spawn(Sender, SENDER, kwargs={"sinks": SINKS})
    assert system.ask(SENDER, "ordered", timeout=10) == ("p1",)
    assert system.ask(SENDER, "unconfirmed", timeout=10) == 0


def test_a_reply_deferred_after_a_delivery_the_journal_rejects_still_runs_and_can_tell_it_was_not_stored(
        base, make_system, tmp_path):
    # The journal rejects the last sink's forward (the first is stored and sent: a rejected DeliveriesSent of several
    # goes again one per delivery). As Akka's defer after a rejected persist, the deferred reply still runs: an asking
    # client's ask fails with the rejection first, but a sender that tells (an actor, a probe) got ("ok", ...) for a
    # delivery never stored. A reply that checks unconfirmed_ids() in a `defer` tells it apart.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    _spawn_sinks_and(system, DeliverThenReply)
    with pytest.raises(ActorFailed, match="rejected"):
        system.ask(SENDER, ("order", "bad-forward-asked"), timeout=10)
    probe = system.probe()
    probe.tell(SENDER, ("order", "bad-forward-told"))
    assert probe.receive(10) == ("ok", "bad-forward-told"), "the plain deferred reply runs after the rejection"
    system.stop(SENDER)
    system.spawn(DeliverThenCheckedReply, SENDER, kwargs={"sinks": SINKS})
    probe.tell(SENDER, ("order", "bad-forward-checked"))
    assert probe.receive(10) == ("not stored", "bad-forward-checked")
    probe.tell(SENDER, ("order", "p1"))
    assert probe.receive(10) == ("ok", "p1")
    got = wait_for(lambda: (lambda g: g if "p1" in g[0] and "p1" in g[1] else None)(
        [system.ask(sink, "got", timeout=10) for sink in SINKS]))
    assert got[1] == ("p1",), "the rejected forwards never reached the last sink"
    assert set(got[0]) == {"bad-forward-asked", "bad-forward-told", "bad-forward-checked", "p1"}, "the stored ones did"


def _two_askers(system, tmp_path) -> tuple:
    """Two probes whose paths are ask reply paths (a rejection or failure reported to one fails it: ActorFailure)."""
    return system.probe(f"ask-a-{tmp_path.name}"), system.probe(f"ask-b-{tmp_path.name}")


def test_a_rejected_delivery_is_reported_to_the_command_that_delivered_it_not_to_another_of_its_round(
        base, make_system, tmp_path):
    # A's command delivers (one forward the journal rejects) and replies at once; B's, in the same round, delivers and
    # defers its reply: both commands' deliveries are journaled as one DeliveriesSent when B defers, under B's sender.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    _spawn_sinks_and(system, TwoAskers)
    a, b = _two_askers(system, tmp_path)
    system.tell(SENDER, ("as", ((a.path, "bad-forward-now-a"), (b.path, "p-b"))))
    assert a.receive(10) == ("ok", "bad-forward-now-a")  # (told at once)
    a_failure = a.receive(10)
    assert type(a_failure).__name__ == "ActorFailure" and "rejected" in a_failure.error, a_failure
    assert b.receive(10) == ("ok", "p-b"), "B's deliveries were stored: its ask must not fail with A's rejection"
    b.expect_no_message(0.5)
    got = wait_for(lambda: (lambda g: g if all("p-b" in x for x in g) else None)(
        [system.ask(sink, "got", timeout=10) for sink in SINKS]))
    assert sorted(got[0]) == ["bad-forward-now-a", "p-b"] and got[1] == ("p-b",)


def test_a_failed_delivery_write_is_reported_to_every_command_that_delivered_in_it(base, make_system, tmp_path):
    # As above with a write that fails (the sender stops): A's forward is the fault, B's deliveries are in the same
    # event: B's ask fails at once (its deferred reply never runs), and A, whose delivery it was, hears of it too.
    system = make_system(base, **_fault_urls("fail", tmp_path))
    _spawn_sinks_and(system, TwoAskers)
    a, b = _two_askers(system, tmp_path)
    system.tell(SENDER, ("as", ((a.path, f"fault-now-{tmp_path.name}"), (b.path, "p-b"))))
    assert a.receive(10) == ("ok", f"fault-now-{tmp_path.name}")
    for probe in (a, b):
        failure = probe.receive(10)
        assert type(failure).__name__ == "ActorFailure" and "simulated write failure" in failure.error, failure


def _refusals(system) -> list[str]:
    return [e.reason for e in system.errors().recent if "IllegalStateError" in e.reason]


def test_a_deliver_from_a_deferral_behind_an_application_gathered_into_an_earlier_write_is_refused(
        base, make_system, tmp_path):
    # Two Parcels in one round: the second application joins the first's write (one AppliedBatch), which did not mark
    # its command as having written, so a deliver() from its deferral ran once the application was confirmed, its
    # forward journaled after. Measured with failfwd:// (that write fails, the relay stops): the confirmed parcel's
    # forward lost for good, both bases. Refused, as behind the round's first application.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Sink, SINKS[0])
    system.spawn(DeferredForwardRelay, "/user/relay", kwargs={"sink": SINKS[0]})
    probe = system.probe()
    system.tell_many([("/user/relay", Parcel(1, "plain")), ("/user/relay", Parcel(2, "forwarded"))], probe.path)
    assert sorted(probe.receive_many(2, 10), key=lambda c: c.delivery_id) == [Confirm(1), Confirm(2)]
    refused = wait_for(lambda: _refusals(system), 10)
    assert "defer handler queued behind a persist" in refused[0], refused
    assert system.ask(SINKS[0], "got", timeout=10) == (), "nothing forwarded"


def test_a_deliver_from_a_deferral_after_persist_and_deliver_is_refused(base, make_system, tmp_path):
    # persist_and_deliver's event is a write of the command's own: a deferral behind it delivers after the event.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    _spawn_sinks_and(system, PersistAndDeliverThenDeferDeliver)
    assert system.ask(SENDER, ("order", "p1"), timeout=10) == ("ok", "p1")
    refused = wait_for(lambda: _refusals(system), 10)
    assert "defer handler queued behind a persist" in refused[0], refused
    got = wait_for(lambda: (lambda g: g if all(g) else None)([system.ask(sink, "got", timeout=10) for sink in SINKS]))
    assert got == [("p1",), ("p1",)], "persist_and_deliver's own deliveries only, once"


@pytest.mark.parametrize("first", ["persist", "nothing"])
def test_a_receive_batch_override_s_own_deferral_is_judged_by_its_own_writes(base, make_system, tmp_path, first):
    # A receive_batch override handles commands without mixin_command, where the mark of a write was reset per command:
    # a mark left by an earlier batch's persist refused a deliver() from a later batch's chained deferral (behind
    # deliveries only, which a command may do); the deferral of its own persist, once a command it handed to receive
    # in between reset the mark, was not refused.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    for sink in SINKS:
        system.spawn(Sink, sink)
    system.spawn(BatchedSender, "/user/senders", entities=True, kwargs={"sinks": SINKS})
    entity = "/user/senders/1"
    if first == "persist":
        assert system.ask(entity, ("persist", "x"), timeout=10) == ("ok", "x")
    assert system.ask(entity, ("chained-inline", "p1"), timeout=10) == ("ok", "p1"), "a later batch may chain"
    assert not _refusals(system)
    probe = system.probe()
    system.tell_many([(entity, ("persist", "y")), (entity, "unconfirmed"), (entity, ("defer-deliver", "z"))], probe.path)
    assert ("ok", "y") in probe.receive_many(2, 10)
    refused = wait_for(lambda: _refusals(system), 10)
    assert "defer handler queued behind a persist" in refused[0], refused

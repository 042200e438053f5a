"""A relay (IdempotentReceiver + DurableDelivery) forwards each delivery it applies to a sink: no forward may be lost
when the forward's write fails or the relay's host is SIGKILLed at it, and the unsafe form (deliver() from
apply_and_confirm's handler, journaled after the confirm went out) is refused, naming the safe one."""

from __future__ import annotations

import os
import re
from collections import Counter

import pytest

from actors import ActorFailed, AskTimeout, MessageUndelivered
from persistence import Confirm
from tests.persistence.compact_fixtures import Parcel
from tests.persistence.relay_actors import NaturalRelay, Origin, Relay, Sink
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)

ORIGIN, RELAY, SINK, SINK2 = "/user/origin", "/user/relay", "/user/sink", "/user/sink-2"


def _asked(system, path: str, message: object) -> object:
    """The reply, or None while `path`'s host is between a failure (or a kill) and its next start."""
    try:
        return system.ask(path, message, timeout=5)
    except (AskTimeout, ActorFailed, MessageUndelivered):
        return None


@pytest.mark.parametrize("sinks", [(SINK,), (SINK, SINK2)], ids=["one-sink", "two-sinks"])
@pytest.mark.parametrize(("base", "fault"), [("local", "fail"), ("multiproc", "fail"), ("multiproc", "kill")])
def test_a_relay_forwards_every_delivery_exactly_once_when_a_forwards_write_fails_or_kills_its_host(
        base, fault, sinks, make_system, tmp_path):
    # Before apply_and_forward, a relay forwarded from apply_and_confirm's handler: the application was durable and
    # confirmed before the forward's write (a later group commit); a failed write there (the relay stops) or a
    # SIGKILL of its host lost the forward for good, the origin's redelivery being a duplicate, confirmed again.
    # Here the journal fails (a memory journal's write), or SIGKILLs the relay's host (SQLite), at the first write
    # of each "fault-" forward: every delivery must still reach the sink once (the sink dedups redeliveries).
    # Two sinks: apply_and_forward's list of forwards, all in the application's write (before: TypeError, no list).
    if fault == "fail":
        urls = {"journal": f"failfwd://{tmp_path.name}", "snapshot_store": f"failfwd://{tmp_path.name}"}
    else:
        urls = {"journal": f"killfwd://{tmp_path}/journal.db", "snapshot_store": f"killfwd://{tmp_path}/journal.db"}
    system = make_system(base, **urls)
    for sink in sinks:
        system.spawn(Sink, sink)
    system.spawn(Relay, RELAY, kwargs={"sink": SINK, "also": sinks[1:]})
    system.spawn(Origin, ORIGIN)
    # (the fault- names unique: a failfwd journal fails each once per process, and local tests share theirs)
    payloads = ["p1", f"fault-a-{tmp_path.name}", "p2", "p3", f"fault-b-{tmp_path.name}", "p4"]
    probe = system.probe()
    probe.tell(ORIGIN, ("send", RELAY, payloads[:3]))
    assert probe.receive(10) == "sent"
    probe.tell(ORIGIN, ("send", RELAY, payloads[3:]))
    assert probe.receive(10) == "sent"

    seen: list[tuple[object, object, object]] = []

    def settled() -> bool:
        """Each sink got every payload, and nothing is unconfirmed at the origin or the relay."""
        seen[:] = [([_asked(system, sink, "got") for sink in sinks], _asked(system, ORIGIN, "unconfirmed"),
                    _asked(system, RELAY, "unconfirmed"))]
        got, at_origin, at_relay = seen[0]
        return all(g is not None and set(g) >= set(payloads) for g in got) and at_origin == 0 and at_relay == 0

    try:
        wait_for(settled, timeout=60, interval=0.2)
    except AssertionError:
        got, at_origin, at_relay = seen[0]
        raise AssertionError(f"not every delivery reached the sinks: they got {got} of {payloads}; unconfirmed at the "
                             f"origin {at_origin}, at the relay {at_relay}") from None
    for sink in sinks:
        assert Counter(_asked(system, sink, "got")) == Counter(payloads), f"each delivery reaches {sink} exactly once"
    if fault == "fail":
        failures = [e.reason for e in system.errors().recent if "simulated write failure" in e.reason]
        assert len(failures) == 2, f"the forward's write of each fault- payload failed once: {failures}"
    else:
        assert sorted(f for f in os.listdir(tmp_path) if ".killed-" in f) == [
            f"journal.db.killed-fault-{x}-{tmp_path.name}" for x in "ab"], "the relay's host was killed at each"


def test_a_deliver_from_an_apply_and_confirm_handler_is_refused_naming_apply_and_forward(base, make_system, tmp_path):
    # The natural relay: the forward is journaled after the confirm went out, so a crash or failed write in between
    # loses it (the test above). deliver() there is refused at once, in every run, not only when a crash hits the
    # window: the error names the safe way, and nothing is confirmed by the failed handler.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Sink, SINK)
    system.spawn(NaturalRelay, RELAY, kwargs={"sink": SINK})
    origin = system.probe()
    origin.tell(RELAY, Parcel(1, "p1"))
    refused = wait_for(lambda: [e.reason for e in system.errors().recent if "apply_and_confirm" in e.reason])
    assert "apply_and_forward" in refused[0] and "deliver()" in refused[0], refused[0]
    assert system.ask(SINK, "got", timeout=10) == (), "nothing forwarded"
    origin.expect_no_message(0.5)  # (the application is stored: its redelivery is confirmed, not forwarded)


def test_apply_and_forward_confirms_a_duplicate_again_without_forwarding_it_again(base, make_system, tmp_path):
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Sink, SINK)
    system.spawn(Relay, "/user/relays", entities=True, kwargs={"sink": SINK})
    relay, origin = "/user/relays/a", system.probe()
    origin.tell(relay, Parcel(1, "p1"))
    origin.tell(relay, Parcel(1, "p1"))  # (a copy while the first one's write may be in flight)
    assert origin.receive_many(2, timeout=10) == [Confirm(1), Confirm(1)]
    system.stop(relay)  # the next instance recovers the application and the forward from the journal
    origin.tell(relay, Parcel(1, "p1"))
    assert origin.receive(10) == Confirm(1)
    assert wait_for(lambda: system.ask(SINK, "got", timeout=10)) == ("p1",)
    assert wait_for(lambda: system.ask(relay, "unconfirmed", timeout=10) == 0), "the sink confirmed the forward"
    origin.tell(relay, Parcel(1, "p1"))
    assert origin.receive(10) == Confirm(1)
    assert system.ask(SINK, "got", timeout=10) == ("p1",), "forwarded once"


@pytest.mark.parametrize("sinks", [(SINK,), (SINK, SINK2)], ids=["one-sink", "two-sinks"])
@pytest.mark.parametrize("payload", ["bad-event", "bad-forward"])
def test_apply_and_forward_whose_event_or_forward_the_journal_rejects_stores_neither_and_confirms_nothing(
        base, make_system, tmp_path, payload, sinks):
    # Written apart, a rejected forward beside a stored application was confirmed (the forward lost), and a rejected
    # application beside a stored forward was applied again, and forwarded again under a new id, on redelivery.
    # Two sinks: only the second's forward is rejected, and the first's is not stored either.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    for sink in sinks:
        system.spawn(Sink, sink)
    system.spawn(Relay, RELAY, kwargs={"sink": SINK, "also": sinks[1:]})
    origin = system.probe()
    origin.tell(RELAY, Parcel(1, payload))
    wait_for(lambda: [e for e in system.errors().recent if "rejected" in e.reason])
    origin.expect_no_message(0.5)
    assert system.ask(RELAY, ("applied", origin.path, 1), timeout=10) is False, "a redelivery applies it"
    assert system.ask(RELAY, "unconfirmed", timeout=10) == 0, "nothing to forward"
    assert [system.ask(sink, "got", timeout=10) for sink in sinks] == [()] * len(sinks)


@pytest.mark.parametrize(("kind", "says"), [
    ("no-message", "needs id_to_message"), ("both", "a list of forwards and an id_to_message"),
    ("none", "no forward"), ("not-pairs", "a (destination, id_to_message) pair"),
    ("not-a-path", "a path (str) or a list of (destination, id_to_message) pairs, got int 42")])
def test_apply_and_forward_refuses_forwards_it_cannot_read_naming_the_forms_it_takes(
        base, make_system, tmp_path, kind, says):
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Sink, SINK)
    system.spawn(Relay, RELAY, kwargs={"sink": SINK})
    with pytest.raises(ActorFailed, match=re.escape(says)):
        system.ask(RELAY, ("bad-args", kind), timeout=10)
    assert system.ask(RELAY, ("applied", RELAY, 1), timeout=10) is False, "nothing applied"
    assert system.ask(RELAY, "unconfirmed", timeout=10) == 0, "nothing forwarded"


def test_apply_and_forward_needs_a_durable_delivery(make_system, tmp_path):
    system = make_system("local", journal=f"sqlite:///{tmp_path}/journal.db")
    system.spawn(Sink, SINK)
    with pytest.raises(ActorFailed, match="must also be a DurableDelivery"):
        system.ask(SINK, ("forward", Parcel(1, "p1")), timeout=10)

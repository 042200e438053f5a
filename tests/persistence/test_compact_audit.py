"""Audit of the compact-event paths (DurableDelivery, IdempotentReceiver, EntityTable) on both bases with real
SQLite journals: what the journal replays must be what the live actor holds."""

from __future__ import annotations

import os
import random
import signal

import pytest

from persistence import Confirm
from persistence.idempotent import SeenIds
from tests.conftest import pg_schema_url
from tests.persistence.compact_audit_actors import (
    ForwardingRelay,
    ModelAccounts,
    ModelReceiver,
    ModelRelay,
    ModelShipper,
    ReversedForwardingRelay,
    SafeForwarder,
    UpToShipper,
)
from tests.persistence.compact_fixtures import Parcel, Unstorable
from tests.persistence.table_actors import Deposit, DepositTwice, Withdraw
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)


@pytest.fixture(params=["sqlite", "postgresql"])
def store_urls(request, tmp_path) -> dict[str, str]:
    """The journal and snapshot store URLs of one backend (PostgreSQL: a schema of its own, dropped after)."""
    if request.param == "sqlite":
        return {"journal": f"sqlite:///{tmp_path}/journal.db", "snapshot_store": f"sqlite:///{tmp_path}/snapshots.db"}
    url = pg_schema_url(request, "audit")
    return {"journal": url, "snapshot_store": url}


@pytest.fixture
def asystem(store_urls, base, make_system):
    """A system on `base` whose journal and snapshot store are on SQLite files or PostgreSQL (store_urls first: its
    schema is dropped after the system stopped)."""
    return make_system(base, **store_urls)


def test_a_cumulative_confirm_above_every_id_does_not_confirm_on_replay_a_delivery_made_after_it(psystem):
    # confirm_deliveries_up_to(n) confirms the ids unconfirmed at the call; a delivery made after it in the same
    # group commit gets a higher id, which may still be <= n (n above the newest id: a destination's cumulative
    # number, a client's "everything up to"). Live it stays unconfirmed; the round journals DeliveriesSent before
    # DeliveriesConfirmed(up_to=n), so replay confirmed it too: after a restart it was never redelivered (lost).
    path = "/user/uptoshipper/a"
    psystem.spawn(UpToShipper, path="/user/uptoshipper", entities=True)
    probe = psystem.probe()
    probe.tell(path, ("deliver", probe.path, "first"))
    assert {probe.receive(10), probe.receive(10)} == {("delivered", 1), Parcel(1, "first")}
    probe.tell(path, ("up-to-then-deliver", 100, probe.path, "second"))
    assert {probe.receive(10), probe.receive(10)} == {("delivered", 2), Parcel(2, "second")}
    assert psystem.ask(path, "unconfirmed", timeout=10) == [2]
    psystem.stop(path)  # its next instance recovers from the journal
    assert wait_for(lambda: psystem.ask(path, "unconfirmed", timeout=10) == [2], timeout=10), \
        "a delivery made after a cumulative confirm was confirmed on replay"


@pytest.mark.parametrize("seed", range(4))
def test_applications_with_snapshots_inside_batches_rejections_and_restarts_apply_each_delivery_once_in_order(
        asystem, seed):
    # A reference model: each (origin, id) applied once, in the order first seen; snapshots saved by the handler of
    # any application of an AppliedBatch (IdempotentSnapshotInBatch for all but its last); applications whose event
    # the journal rejects (not applied: a redelivery of the id applies it); restarts between turns; persist_applied
    # or persist_applied_many.
    rng = random.Random(seed)
    path = f"/user/model/{seed}"
    asystem.spawn(ModelReceiver, path="/user/model", entities=True)
    probe = asystem.probe()
    model: list[str] = []
    seen: set[tuple[str, int]] = set()
    for turn in range(25):
        items = []
        for _ in range(rng.randint(1, 6)):
            origin = rng.choice(("/o1", "/o2"))
            delivery_id = rng.randint(1, 40)
            bad = "bad" if rng.random() < 0.15 else ""
            items.append((origin, delivery_id, f"{bad}{origin}:{delivery_id}"))
        snap_at = frozenset(len(model) + k for k in range(1, len(items) + 1) if rng.random() < 0.4)
        probe.tell(path, (rng.choice(("batch", "many")), tuple(items), snap_at))
        kind, fresh = probe.receive(10)
        expected = []
        marked: set[tuple[str, int]] = set()  # (marked in this turn; a rejected one is forgotten after it)
        for origin, delivery_id, payload in items:
            key = (origin, delivery_id)
            expected.append(key not in seen and key not in marked)
            if expected[-1]:
                marked.add(key)
                if not payload.startswith("bad"):
                    seen.add(key)
                    model.append(payload)
        assert (kind, list(fresh)) == ("done", expected), f"turn {turn}"
        if rng.random() < 0.3:
            asystem.stop(path)  # its next instance recovers from the newest snapshot and the events after it
            assert asystem.ask(path, "applied", timeout=10) == tuple(model), f"recovered after turn {turn}"
    assert asystem.ask(path, "applied", timeout=10) == tuple(model)


def _unconfirmed(system, path):
    """The shipper's unconfirmed deliveries as comparable values: {id: (destination, message)}, and its counter."""
    return system.ask(path, "unconfirmed", timeout=10)


@pytest.mark.parametrize("seed", range(8))
def test_deliveries_and_confirms_of_every_kind_with_snapshots_and_restarts_recover_the_live_state(asystem, seed):
    # DurableDelivery journals each turn's deliveries as one DeliveriesSent and its confirms (ids and a cumulative
    # up_to) as one DeliveriesConfirmed: whatever the order of the calls in the turn, a restart (from the newest
    # snapshot and the events after it) must hold exactly the deliveries the live instance held unconfirmed.
    rng = random.Random(seed)
    path = f"/user/mshipper/{seed}"
    asystem.spawn(ModelShipper, path="/user/mshipper", entities=True)
    probe, a, b = asystem.probe(), asystem.probe(), asystem.probe()  # (a and b only receive)
    destinations = (a.path, b.path)
    model: dict[int, tuple[str, object]] = {}
    issued = 0
    for turn in range(30):
        ops: list[tuple] = []
        for _ in range(rng.randint(1, 6)):
            kind = rng.choice(("deliver", "deliver", "confirm", "confirm_many", "up_to", "up_to_dest", "snap"))
            top = issued + len([o for o in ops if o[0] == "deliver"]) + 2
            if kind == "deliver":
                ops.append((kind, rng.randrange(2), ("bad" if rng.random() < 0.1 else "") + f"p{turn}"))
            elif kind == "confirm":
                ops.append((kind, rng.randint(1, top)))
            elif kind == "confirm_many":
                ops.append((kind, tuple(rng.randint(1, top) for _ in range(rng.randint(1, 3)))))
            elif kind == "up_to":
                ops.append((kind, rng.randint(1, top + 3)))
            elif kind == "up_to_dest":
                ops.append((kind, rng.randint(1, top + 3), rng.randrange(2)))
            else:
                ops.append((kind,))
        probe.tell(path, ("ops", tuple(ops), destinations))
        kind, delivered = probe.receive(10)
        assert kind == "done"
        ids = iter(delivered)
        rejected = set()
        for op in ops:  # the model: what the calls do live
            if op[0] == "deliver":
                i = next(ids)
                issued = max(issued, i)
                if op[2].startswith("bad"):
                    rejected.add(i)
                model[i] = (destinations[op[1]], (Unstorable if op[2].startswith("bad") else Parcel)(i, op[2]))
            elif op[0] == "confirm":
                model.pop(op[1], None)
            elif op[0] == "confirm_many":
                for i in op[1]:
                    model.pop(i, None)
            elif op[0] == "up_to":
                for i in [i for i in model if i <= op[1]]:
                    del model[i]
            elif op[0] == "up_to_dest":
                for i in [i for i, (d, _) in model.items() if i <= op[1] and d == destinations[op[2]]]:
                    del model[i]
        for i in rejected:  # (its sent event was rejected: given up, never sent)
            model.pop(i, None)
        live, _ = _unconfirmed(asystem, path)
        assert live == model, f"turn {turn}: {ops}"
        if rng.random() < 0.3:
            asystem.stop(path)
            recovered, counter = _unconfirmed(asystem, path)
            assert recovered == model, f"recovered after turn {turn}: {ops}"
            assert counter >= max(model, default=0)


def _marks(dedup: dict) -> dict:
    """A table's dedup state without the origins that hold no mark."""
    return {o: state for o, state in dedup.items() if state != (0, ())}


@pytest.mark.parametrize("seed", range(4))
def test_table_batches_with_failing_and_unstorable_commands_snapshots_and_restarts_apply_each_deposit_once(
        asystem, seed):
    # EntityTable against a reference model: batches of deposits (with redeliveries), withdrawals that fail below
    # zero, commands failing on a poisoned event after apply_once, and commands whose event the journal cannot store
    # after apply_once; a TableSnapshot every 2 commits, restarts of the table between batches. Every entity's
    # balance and the table's dedup marks must be the model's, live and recovered; each deposit confirmed once
    # durable (a duplicate's again), none of a failed command.
    rng = random.Random(seed)
    table = f"/user/acc{seed}"
    asystem.spawn(ModelAccounts, table, entities=True)
    probe = asystem.probe()
    balance = {k: 0 for k in "abc"}
    seen: set[tuple[str, int]] = set()
    for turn in range(20):
        batch, confirms = [], []
        for _ in range(rng.randint(1, 8)):
            entity = rng.choice("abc")
            origin, delivery_id, amount = rng.choice(("/o1", "/o2")), rng.randint(1, 30), rng.randint(1, 9)
            kind = rng.random()
            key = (origin, delivery_id)
            if kind < 0.55:
                batch.append((f"{table}/{entity}", Deposit(origin, delivery_id, amount)))
                confirms.append(delivery_id)
                if key not in seen:
                    seen.add(key)
                    balance[entity] += amount
            elif kind < 0.75:
                batch.append((f"{table}/{entity}", Withdraw(amount)))
                if amount <= balance[entity]:
                    balance[entity] -= amount
            elif kind < 0.9:
                batch.append((f"{table}/{entity}", DepositTwice(origin, delivery_id, amount, poisoned=True)))
                if key in seen:  # (a duplicate: no events, so nothing poisoned; confirmed again)
                    confirms.append(delivery_id)
            else:
                batch.append((f"{table}/{entity}", ("unstorable", origin, delivery_id)))
                confirms.append(delivery_id)  # (its reply is dropped with it only if it was applied now)
                if key not in seen:
                    confirms.pop()
        asystem.tell_many(batch, sender=probe.path)
        got = sorted(c.delivery_id for c in probe.receive_many(len(confirms), 10))
        assert got == sorted(confirms), f"turn {turn}: {batch}"
        states, dedup = asystem.ask(table, "state", timeout=10)
        assert {k: v for k, v in states.items() if v} == {k: v for k, v in balance.items() if v}, f"turn {turn}"
        model_dedup = {o: SeenIds.of(0, [i for oo, i in seen if oo == o]).state() for o in ("/o1", "/o2")}
        assert {o: dedup.get(o, (0, ())) for o in model_dedup} == model_dedup, f"turn {turn}"
        if rng.random() < 0.3:
            asystem.tell(table, "restart")  # it stops; its next message recovers it from the newest TableSnapshot
            recovered_states, recovered_dedup = asystem.ask(table, "state", timeout=10)
            assert recovered_states == states, f"recovered after turn {turn}"
            # (an origin whose only mark was forgotten, a failed command's, has an empty SeenIds live)
            assert _marks(recovered_dedup) == _marks(dedup), f"recovered after turn {turn}"


@pytest.mark.parametrize("cls", [ForwardingRelay, ReversedForwardingRelay], ids=["delivery-first", "receiver-first"])
@pytest.mark.parametrize("deliveries", [(), ("ok", "bad")], ids=["applications", "both"])
def test_an_actor_with_both_compact_mixins_splits_a_rejected_applied_batch_and_applies_the_storable_ones(
        asystem, deliveries, cls):
    # DurableDelivery and IdempotentReceiver each split a rejected compact event of theirs into one event per item
    # with a method of the same name, _requeue_one_by_one: in an actor with both, IdempotentReceiver's split called
    # DurableDelivery's, which took the AppliedBatch's applications for deliveries and requeued none. The storable
    # application was never applied, and both stayed marked applied: their redeliveries were taken for duplicates
    # (and confirmed by confirm_duplicate), so the deliveries were lost. With IdempotentReceiver's first, a rejected
    # DeliveriesSent was requeued by IdempotentReceiver's, which failed on it: the actor restarted.
    path = f"/user/fwd/{len(deliveries)}"
    asystem.spawn(cls, path="/user/fwd", entities=True)
    probe, destination = asystem.probe(), asystem.probe()
    probe.tell(path, ("turn", ((1, "one"), (2, "bad-two")), deliveries, destination.path))
    # (the deferral runs after the handlers of the writes queued before it, whatever was split and requeued)
    assert probe.receive(10) == ("done", (True, True), ("one",), [1] if deliveries else [])
    assert asystem.ask(path, ("applied", probe.path), timeout=10) == (("one",), [1]), \
        "the storable application is applied, the rejected one is not marked"
    if deliveries:
        assert destination.receive(10) == Parcel(1, "ok")
        assert asystem.ask(path, "unconfirmed", timeout=10) == [1], "the rejected delivery is given up"
    probe.tell(path, ("turn", ((2, "two"),), (), destination.path))  # the redelivery of the rejected one, storable now
    assert probe.receive(10) == ("done", (True,), ("one", "two"), [1] if deliveries else [])
    asystem.stop(path)
    assert asystem.ask(path, ("applied", probe.path), timeout=10) == (("one", "two"), [1, 2])


@pytest.mark.parametrize("kill", ["after-reply", "at-once"])
def test_a_receiver_host_sigkilled_after_snapshots_inside_batches_recovers_each_delivery_applied_once(
        make_system, tmp_path, kill):
    # Snapshots saved by handlers inside AppliedBatches (IdempotentSnapshotInBatch), then the host process SIGKILLed:
    # once the last turn is acknowledged (its batch durable), or at once (before or after its commit, whichever
    # comes). The recovered instance holds each delivery applied once, in order, and every acknowledged one; the
    # sender's redelivery of the last turn applies exactly what it did not hold, once.
    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/j.db", snapshot_store=f"sqlite:///{tmp_path}/s.db")
    system.spawn(ModelReceiver, path="/user/killed", entities=True)
    path, probe = "/user/killed/r", system.probe()
    model: list[str] = []
    turns = [tuple(("/o", 10 * turn + k, f"t{turn}-{k}") for k in range(1, 6)) for turn in range(6)]
    for items in turns[:-1]:
        probe.tell(path, ("batch", items, frozenset({len(model) + 2, len(model) + 4})))  # (inside the batch)
        assert probe.receive(10) == ("done", (True,) * 5)
        model += [p for _, _, p in items]
    last = turns[-1]
    pid = system.status().hosts["/user/killed"].pid
    probe.tell(path, ("batch", last, frozenset({len(model) + 1, len(model) + 3})))
    if kill == "after-reply":
        assert probe.receive(10) == ("done", (True,) * 5)
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (h := system.status().hosts.get("/user/killed")) is not None and h.pid not in (None, pid), 30)
    recovered = wait_for(lambda: _ask_or_none(system, path, "applied"), 30)
    everything = tuple(model + [p for _, _, p in last])
    assert recovered == everything or (kill == "at-once" and recovered == tuple(model)), recovered
    again = system.probe()  # (the first may still get the killed instance's reply)
    again.tell(path, ("batch", last, frozenset()))  # the sender redelivers the last turn
    assert again.receive(10) == ("done", (recovered == tuple(model),) * 5), "applied only if it was not held"
    assert system.ask(path, "applied", timeout=10) == everything


def _ask_or_none(system, path: str, message: object) -> object:
    """The answer, or None while the recovering host does not answer yet."""
    try:
        return system.ask(path, message, timeout=5)
    except Exception:
        return None


def test_events_deleted_past_a_snapshot_saved_inside_a_batch_do_not_make_recovery_skip_a_later_batch(asystem):
    # A snapshot saved by the handler of the 2nd of 3 applications is stored before their AppliedBatch (it holds 2 of
    # them: IdempotentSnapshotInBatch, handled=2). Events deleted up to last_sequence_nr (past the snapshot's
    # sequence number, which SaveSnapshotSuccess gives) lose the 3rd. Recovery then took the next AppliedBatch it
    # replayed, a later turn's, for the snapshot's, and skipped its first 2 applications too: acknowledged, lost
    # from the state and from the dedup memory.
    path = "/user/deleting/r"
    asystem.spawn(ModelReceiver, path="/user/deleting", entities=True)
    probe = asystem.probe()
    probe.tell(path, ("batch", tuple(("/o", k, f"p{k}") for k in (1, 2, 3)), frozenset({2})))
    assert probe.receive(10) == ("done", (True,) * 3)
    probe.tell(path, "delete")
    assert probe.receive(10) == ("deleted", 1)
    probe.tell(path, ("batch", tuple(("/o", k, f"p{k}") for k in (4, 5, 6)), frozenset()))
    assert probe.receive(10) == ("done", (True,) * 3)
    asystem.stop(path)
    assert asystem.ask(path, "applied", timeout=10) == ("p1", "p2", "p4", "p5", "p6"), \
        "a later turn's applications are recovered (p3, deleted past the snapshot, is lost)"


@pytest.mark.parametrize("seed", range(6))
def test_a_relay_with_both_compact_mixins_recovers_the_live_applications_and_deliveries(asystem, seed):
    # DurableDelivery and IdempotentReceiver in one actor: applications (some rejected) forwarded with
    # apply_and_forward, whose handlers save snapshots, deliveries (some rejected) made directly in the same turns, restarts:
    # the recovered applications and unconfirmed deliveries are the live ones, and each application is applied once.
    rng = random.Random(seed)
    path = f"/user/mrelay/{seed}"
    asystem.spawn(ModelRelay, path="/user/mrelay", entities=True)
    probe, sink = asystem.probe(), asystem.probe()
    model: list[str] = []
    seen: set[tuple[str, int]] = set()
    for turn in range(20):
        items = tuple((rng.choice(("/o1", "/o2")), (i := rng.randint(1, 30)),
                       ("bad" if rng.random() < 0.15 else "") + f"{turn}:{i}") for _ in range(rng.randint(0, 5)))
        direct = tuple(("bad" if rng.random() < 0.15 else "") + f"d{turn}:{k}" for k in range(rng.randint(0, 3)))
        snap_at = frozenset(len(model) + k for k in range(1, len(items) + 1) if rng.random() < 0.4)
        probe.tell(path, ("turn", items, snap_at, direct, sink.path))
        kind, fresh = probe.receive(10)
        marked: set[tuple[str, int]] = set()
        expected = []
        for origin, i, payload in items:
            key = (origin, i)
            expected.append(key not in seen and key not in marked)
            if expected[-1]:
                marked.add(key)
                if not payload.startswith("bad"):
                    seen.add(key)
                    model.append(payload)
        assert (kind, list(fresh)) == ("done", expected), f"turn {turn}"
        live = asystem.ask(path, "state", timeout=10)
        assert live[0] == tuple(model), f"turn {turn}"
        forwarded = sorted(m[2] for m in live[1].values() if type(m) is tuple)
        assert forwarded == sorted(model), f"turn {turn}: one delivery per application"
        if rng.random() < 0.3:
            asystem.stop(path)
            assert asystem.ask(path, "state", timeout=10) == live, f"recovered after turn {turn}"


def test_a_forward_delivered_before_its_application_is_confirmed_only_once_both_are_durable(base, make_system,
                                                                                            tmp_path):
    # apply_and_confirm's (or persist_applied's) handler runs once the application is durable; a deliver() in it is
    # journaled in a later group commit, after the confirm went out: a crash or failed write in between lost the
    # forward for good (the application is stored: the origin's redelivery is a duplicate). The pattern for several
    # forwards of one delivery (apply_and_forward's docstring; one forward: apply_and_forward itself, test_relay.py):
    # deliver() and then persist_applied in the command, confirmed from the handler. Their write
    # fails here (the forwarder stops): nothing is confirmed, and the redelivery forwards it once and confirms it.
    system = make_system(base)
    system.spawn(SafeForwarder, path="/user/fwd", entities=True, kwargs={"sink": (sink := system.probe()).path})
    origin, path = system.probe(), f"/user/fwd/{tmp_path.name}"
    origin.tell(path, Parcel(1, f"flaky-{tmp_path.name}"))  # (its DeliveriesSent's first write fails)
    wait_for(lambda: any("simulated write failure" in e.reason for e in system.errors().recent), 10)
    origin.tell(path, Parcel(1, f"flaky-{tmp_path.name}"))  # the origin redelivers: nothing was confirmed
    assert origin.receive(10) == Confirm(1)
    assert sink.receive(10) == Parcel(1, f"flaky-{tmp_path.name}")
    origin.tell(path, Parcel(1, f"flaky-{tmp_path.name}"))  # a duplicate: confirmed again, not forwarded again
    assert origin.receive(10) == Confirm(1)
    assert system.ask(path, "unconfirmed", timeout=10) == 1, "forwarded once (the sink confirms nothing)"

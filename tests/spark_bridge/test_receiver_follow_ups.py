"""FeedReceiver's follow-ups across its recovery, on both bases: every follow-up the bridge has not accepted is
sent again when a row is redelivered, however the rows were gathered into commits; a redelivered row's own tree's
ones with every copy, the others at most once per follow_up_resend_interval. The test's probe plays the bridge
(rows carry its path as `Row.bridge`) and accepts nothing, unless a test says so."""

from __future__ import annotations

import itertools
import time
from typing import Any

import pytest

from persistence import SnapshotOffer
from spark_bridge import Row
from spark_bridge.messages import Confirmed, ForwardAccepted, Forwards
from tests.spark_bridge.sample import Deposited, DurableAccount, GetBalance
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

ACC = "/user/acc"


def row(delivery_id: int, bridge: str) -> Row:
    """A row as the bridge at `bridge` delivers it to DurableAccount."""
    return Row(delivery_id, {"amount": delivery_id}, delivery_id, 0, None, bridge)


class SnapshottingAccount(DurableAccount):
    """A DurableAccount that saves a snapshot whenever a deposit is applied, in the deposit's handler (Akka's
    pattern: snapshot in the persist handler every so many events)."""

    every = 1

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.total, self.applied = event.snapshot
            return
        super().receive_recover(event)
        if isinstance(event, Deposited) and self.recovery_finished and self.applied % self.every == 0:
            self.save_snapshot((self.total, self.applied))


class SnapshotEverySecondAccount(SnapshottingAccount):
    """Saves its snapshot at every second deposit applied: in a commit of three rows, in the second one's handler."""

    every = 2


def forwarded_until_confirmed(probe, confirms: int) -> list[int]:
    """The forward ids of the Forwards the probe gets until `confirms` row ids were Confirmed, sorted."""
    forwarded: list[int] = []
    confirmed: list[int] = []
    while len(confirmed) < confirms:
        message = probe.receive(30)
        if type(message) is Forwards:
            forwarded += message.forward_ids
        else:
            assert type(message) is Confirmed, message
            confirmed += message.delivery_ids
    return sorted(forwarded)


def test_follow_ups_of_rows_applied_in_one_commit_are_all_sent_again_after_a_recovery(base, make_system, tmp_path):
    # A row's RowApplied names the forward ids below which the bridge had accepted every follow-up. For the
    # second and later rows of one commit that mark counted their own ids only: the first row's follow-ups, not
    # sent yet, were taken as accepted. Recovered, the receiver forgot them, and one lost on the way with the
    # process (sent after the commit) was never sent again: its ledger entry was lost.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(DurableAccount, ACC, entities=True, kwargs={"ledger": "/user/ledger"})
    probe = system.probe()
    system.tell_many([(f"{ACC}/a", row(k, probe.path)) for k in (1, 2, 3)], sender=probe.path)
    assert forwarded_until_confirmed(probe, 3) == [1, 2, 3]
    system.stop(f"{ACC}/a")  # its next instance recovers from the journal
    system.tell(f"{ACC}/a", row(1, probe.path), sender=probe.path)  # a redelivery: what is unaccepted goes again
    assert forwarded_until_confirmed(probe, 1) == [1, 2, 3], "a follow-up the bridge never accepted was forgotten"


def test_follow_ups_of_a_row_whose_handler_saved_a_snapshot_are_sent_again_after_a_recovery(base, make_system,
                                                                                            tmp_path):
    # The row's follow-ups were taken as unaccepted only after its handler ran: a snapshot saved there (at the
    # row's own sequence number, so its event is not replayed after it) held none of them. Recovered from it,
    # the receiver forgot them, and one lost on the way (the host killed before it sent them) was never sent
    # again: its ledger entry was lost.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db", snapshot_store=f"sqlite:///{tmp_path}/s.db")
    system.spawn(SnapshottingAccount, ACC, entities=True, kwargs={"ledger": "/user/ledger"})
    probe = system.probe()
    system.tell(f"{ACC}/a", row(1, probe.path), sender=probe.path)
    assert forwarded_until_confirmed(probe, 1) == [1]
    system.stop(f"{ACC}/a")  # its next instance recovers from the snapshot
    system.tell(f"{ACC}/a", row(1, probe.path), sender=probe.path)  # a redelivery: what is unaccepted goes again
    assert forwarded_until_confirmed(probe, 1) == [1], "a follow-up the bridge never accepted was forgotten"


def test_rows_of_one_commit_after_a_snapshot_saved_by_an_earlier_ones_handler_are_recovered(base, make_system,
                                                                                            tmp_path):
    # Rows applied in one group commit are one AppliedBatch (one sequence number). A snapshot saved by the second
    # row's handler was stored at that sequence number: recovered from it (a restart, no crash), the third row was
    # marked applied but neither in the state nor replayed (its deposit lost), and its follow-up was forgotten.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db", snapshot_store=f"sqlite:///{tmp_path}/s.db")
    system.spawn(SnapshotEverySecondAccount, ACC, entities=True, kwargs={"ledger": "/user/ledger"})
    probe = system.probe()
    system.tell_many([(f"{ACC}/a", row(k, probe.path)) for k in (1, 2, 3)], sender=probe.path)
    assert forwarded_until_confirmed(probe, 3) == [1, 2, 3]
    system.stop(f"{ACC}/a")  # its next instance recovers from the snapshot
    balance = system.ask(f"{ACC}/a", GetBalance(), timeout=10)
    assert (balance.total, balance.applied) == (6, 3), f"a deposit marked applied was lost: {balance}"
    system.tell(f"{ACC}/a", row(3, probe.path), sender=probe.path)  # a redelivery: what is unaccepted goes again
    assert forwarded_until_confirmed(probe, 1) == [1, 2, 3], "a follow-up the bridge never accepted was forgotten"
    assert system.ask(f"{ACC}/a", GetBalance(), timeout=10).total == 6


class RowsAccount(DurableAccount):
    """A DurableAccount that also takes a tuple of rows, applied in one turn."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if type(message) is tuple:
            for r in message:
                super().receive_command(r, sender)
        else:
            super().receive_command(message, sender)


def test_a_duplicate_of_a_row_whose_write_was_rejected_is_not_confirmed(base, make_system, tmp_path):
    # A row's duplicate is confirmed after the write in flight of its first copy: also when that write was rejected
    # (its event cannot be stored), so nothing was applied. The bridge, confirmed, never sent the row again (e.g.
    # once its job was fixed to send a storable amount): the deposit lost silently.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(RowsAccount, ACC, entities=True)
    probe = system.probe()
    bad = Row(1, {"amount": 2**70}, 1, 0, None, probe.path)  # (an int beyond 64 bits: rejected)
    system.tell(f"{ACC}/a", (bad, bad), sender=probe.path)  # (the second is a duplicate while the first is in flight)
    wait_for(lambda: system.errors().recent, timeout=30)  # the rejection is reported
    system.tell(f"{ACC}/a", GetBalance(), sender=probe.path)
    assert type(probe.receive(30)) is not Confirmed, "a row confirmed although its event was rejected"
    system.tell(f"{ACC}/a", row(1, probe.path), sender=probe.path)  # redelivered (no confirm came), storable now
    assert forwarded_until_confirmed(probe, 1) == []
    assert system.ask(f"{ACC}/a", GetBalance(), timeout=30).total == 1


def test_a_redelivered_row_sends_again_its_own_tree_s_follow_ups_not_every_unaccepted_one_each_time(base, make_system,
                                                                                                     tmp_path):
    # Each copy of a redelivered row sent again, before its confirmation, every follow-up the bridge had not
    # accepted yet. Redeliveries pile up when a destination host restarts (the bridge parks its messages to it for
    # up to 10 s, the guardian holds more): thousands of copies each resent 40-100 follow-ups (5.4 million resent
    # for a 40,000-row feed), the bridge's acceptances queued behind them, so nothing got accepted and every copy
    # resent them all again. Before a row's confirmation only its tree's follow-ups must go (the tree's XOR counts
    # them first); every other one at most once per follow_up_resend_interval.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(DurableAccount, ACC, entities=True, kwargs={"ledger": "/user/ledger"})
    probe = system.probe()
    n, copies = 20, 20
    system.tell_many([(f"{ACC}/a", row(k, probe.path)) for k in range(1, n + 1)], sender=probe.path)  # tree k each
    assert forwarded_until_confirmed(probe, n) == list(range(1, n + 1))
    system.tell_many([(f"{ACC}/a", row(5, probe.path))] * copies, sender=probe.path)
    resent: list[int] = []
    since_confirmed: set[int] = set()
    confirmed = 0
    while confirmed < copies:
        message = probe.receive(30)
        if type(message) is Forwards:
            resent += message.forward_ids
            since_confirmed.update(message.forward_ids)
        else:
            assert type(message) is Confirmed and set(message.delivery_ids) == {5}, message
            assert 5 in since_confirmed, "a copy of row 5 was confirmed before its unaccepted follow-up went again"
            since_confirmed.clear()
            confirmed += len(message.delivery_ids)
    assert resent.count(5) == copies, "each copy's confirmation follows its tree's unaccepted follow-up"
    # (every unaccepted one once, maybe twice on a machine slow enough for the interval to pass meanwhile)
    assert len(resent) <= copies + 2 * (n - 1), f"{len(resent)} follow-ups sent again for {copies} copies of a row"


class QuickResendAccount(DurableAccount):
    """A DurableAccount that resends every unaccepted follow-up at most once a second (not every 10 s)."""

    follow_up_resend_interval = 1.0


def test_an_unaccepted_follow_up_of_another_tree_is_resent_once_per_interval(base, make_system, tmp_path):
    # A follow-up whose acceptance was lost (the bridge stored it, its ForwardAccepted died with a connection) is
    # of another tree than the rows redelivered later: only the resend of every unaccepted follow-up, at most once
    # per follow_up_resend_interval, sends it again. Without it the receiver would keep it (and its snapshots
    # would carry it) forever; with it on every copy, a redelivery pile resends them all with each copy.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(QuickResendAccount, ACC, entities=True, kwargs={"ledger": "/user/ledger"})
    probe = system.probe()
    system.tell_many([(f"{ACC}/a", row(k, probe.path)) for k in (1, 2, 3)], sender=probe.path)  # tree k each
    assert forwarded_until_confirmed(probe, 3) == [1, 2, 3]
    system.tell(f"{ACC}/a", ForwardAccepted(2), sender=probe.path)  # (follow-up 3's acceptance was lost)
    copies: list[tuple[float, list[int], float]] = []  # per copy of row 1: (sent at, follow-ups resent, answered at)

    def resent_three_times() -> bool:
        sent = time.monotonic()
        system.tell(f"{ACC}/a", row(1, probe.path), sender=probe.path)
        copies.append((sent, forwarded_until_confirmed(probe, 1), time.monotonic()))
        return sum(3 in resent for _, resent, _ in copies) >= 3

    # (the first copy resends it, then one after each interval: two intervals)
    wait_for(resent_three_times, timeout=30, interval=0.05)
    assert all(1 in resent for _, resent, _ in copies), "a copy was confirmed without its own tree's follow-up"
    assert not any(2 in resent for _, resent, _ in copies), "an accepted follow-up was sent again"
    with_3 = [(sent, answered) for sent, resent, answered in copies if 3 in resent]
    interval = QuickResendAccount.follow_up_resend_interval
    for (sent, _), (_, answered) in itertools.pairwise(with_3):  # (the receiver decided within [sent, answered])
        assert answered - sent >= interval, f"follow-up 3 resent twice within {answered - sent:.3f} s"
    assert len(copies) > len(with_3), "every copy resent every unaccepted follow-up"

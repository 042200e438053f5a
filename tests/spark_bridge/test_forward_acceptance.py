"""The acceptance of follow-ups (ForwardAccepted) by the bridge and by a FeedTable relaying them, on both bases:
duplicates (follow-ups stored before, sent again) are answered together and cost no write each, and a
FeedReceiver takes every id an answer carries. No Spark: probes speak the bridge's protocol
(spark_bridge.messages) as receivers do."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from journal import open_journal
from persistence import ConfirmUpTo
from spark_bridge import BRIDGE_PATH, Row, SparkBridge, start_bridge
from spark_bridge.bridge import PERSISTENCE_ID
from spark_bridge.destination import FOLLOW_UPS_ENTITY
from spark_bridge.messages import ForwardAccepted, Forwards, Progress
from tests.persistence.failing_journals import register_failing_first_write
from tests.spark_bridge.sample import DurableAccount
from tests.spark_bridge.table_sample import Holder, Posting
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(90)

ORIGIN = "/user/origin"


def forwards(sender: str, ids: list[int], to: str) -> Forwards:
    """Follow-ups `ids` of ORIGIN from `sender`, each to `to`, as a receiver's host sends them in one round."""
    n = len(ids)
    return Forwards([sender] * n, [ORIGIN] * n, ids, [None] * n, [to] * n, [f"m{f}" for f in ids])


def accepted(probe, count: int) -> list[ForwardAccepted]:
    """The ForwardAccepted messages the probe gets until they accepted `count` forward ids."""
    answers: list[ForwardAccepted] = []
    while sum(1 + len(a.more) for a in answers) < count:
        answer = probe.receive(30)
        assert type(answer) is ForwardAccepted, answer
        answers.append(answer)
    return answers


def ids_of(answers: list[ForwardAccepted]) -> list[int]:
    """Every forward id the answers accepted, sorted."""
    return sorted(f for a in answers for f in (a.forward_id, *a.more))


def bridge_events(url: str) -> int:
    """How many events the bridge has written to the journal at `url`."""
    with open_journal(url) as j:
        return j.highest_sequence_nr(PERSISTENCE_ID)


def test_duplicate_follow_ups_of_one_round_are_accepted_in_one_message(base, make_system, tmp_path):
    # The bridge answered each duplicate with its own ForwardAccepted (and its own deferred handler): a receiver
    # whose redelivered rows resent thousands of follow-ups got thousands of messages back, one per id.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    start_bridge(system)
    receiver, destination = system.probe("receiver"), system.probe("destination")
    receiver.tell(BRIDGE_PATH, forwards(receiver.path, [1, 2, 3, 4], destination.path))
    assert ids_of(accepted(receiver, 4)) == [1, 2, 3, 4]
    receiver.tell(BRIDGE_PATH, forwards(receiver.path, [1, 2, 3, 4], destination.path))  # all stored before
    assert accepted(receiver, 4) == [ForwardAccepted(1, (2, 3, 4))], "duplicates answered one message each"
    assert [destination.receive(30).delivery_id for _ in range(4)] == [1, 2, 3, 4]


def test_duplicates_among_new_follow_ups_cost_no_bridge_write_each(base, make_system, tmp_path):
    # Each duplicate flushed the bridge's round at once, so that its deferred answer came after the original's
    # write: in a round of new follow-ups and resent ones (a receiver's host applying new rows while redelivered
    # copies of applied ones come in) every duplicate cut a Progress event of its own, one write per resend.
    url = f"sqlite:///{tmp_path}/j.db"
    system = make_system(base, journal=url)
    start_bridge(system)
    receiver, destination = system.probe("receiver"), system.probe("destination")
    receiver.tell(BRIDGE_PATH, forwards(receiver.path, [1, 2, 3, 4], destination.path))
    assert ids_of(accepted(receiver, 4)) == [1, 2, 3, 4]
    before = bridge_events(url)
    receiver.tell(BRIDGE_PATH, forwards(receiver.path, [5, 1, 6, 2, 7, 3, 8, 4], destination.path))
    assert ids_of(accepted(receiver, 8)) == list(range(1, 9))
    assert bridge_events(url) - before == 1, "the duplicates among them split the round's Progress event"


@dataclass(frozen=True)
class GetUnaccepted:
    """Ask a CountingAccount how many of its follow-ups the bridge has not accepted (an int)."""


def test_duplicate_follow_ups_relayed_by_a_feed_table_are_accepted_in_one_message(base, make_system, tmp_path):
    # A FeedTable relays the follow-ups that receivers of its own anchored to them, and answered each one sent
    # again with a ForwardAccepted of its own, as the bridge did.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(Holder, "/user/ledger")
    system.spawn(Posting, "/user/acc", entities=True, kwargs={"ledger": "/user/ledger"})
    receiver = system.probe("receiver")
    relay = f"/user/acc/{FOLLOW_UPS_ENTITY}"  # (the table's own address: one shard)
    receiver.tell(relay, forwards(receiver.path, [1, 2, 3, 4], "/user/ledger"))
    assert ids_of(accepted(receiver, 4)) == [1, 2, 3, 4]
    receiver.tell(relay, forwards(receiver.path, [1, 2, 3, 4], "/user/ledger"))  # all relayed before
    assert accepted(receiver, 4) == [ForwardAccepted(1, (2, 3, 4))], "duplicates answered one message each"


# The first write of a Progress event holding a follow-up fails (a full disk, a lost connection).
register_failing_first_write("failforward", lambda p: ["forward"] if type(p) is Progress and p.forwards else [])


class FailingForwardBridge(SparkBridge):
    """A bridge whose first write of a follow-up fails (it is stopped), its memory journal kept by its process."""

    journal_url = "failforward://bridge"
    snapshot_store_url = "failforward://bridge"


def test_a_duplicate_is_not_accepted_before_its_original_is_durable(base, make_system):
    # Duplicates are answered with the round's other acceptances: not before the write holding their original is
    # durable. That write failing, the follow-up is not in the bridge's journal: accepted, the receiver would stop
    # resending it, and it would be lost.
    system = make_system(base)
    start_bridge(system, cls=FailingForwardBridge)
    receiver, destination = system.probe("receiver"), system.probe("destination")
    receiver.tell(BRIDGE_PATH, forwards(receiver.path, [1, 1], destination.path))  # sent twice in one round
    wait_for(lambda: system.errors().recent, timeout=30)  # the failed write is reported
    receiver.expect_no_message(0.5)


class CountingAccount(DurableAccount):
    """A DurableAccount that answers GetUnaccepted."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        """GetUnaccepted replies with unaccepted_follow_ups; the rest as DurableAccount."""
        if type(message) is GetUnaccepted:
            self.tell(sender, self.unaccepted_follow_ups)
        else:
            super().receive_command(message, sender)


def test_a_feed_receiver_takes_every_follow_up_one_acceptance_carries(base, make_system, tmp_path):
    # One ForwardAccepted carries all of a receiver's follow-ups accepted together: a receiver that took only the
    # first id would resend the others (with every redelivered copy of their rows) forever.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(CountingAccount, "/user/acc", entities=True, kwargs={"ledger": "/user/ledger"})
    bridge = system.probe("bridge")  # (plays the bridge: rows name it as theirs)
    system.tell_many([("/user/acc/a", Row(k, {"amount": k}, k, 0, None, bridge.path)) for k in (1, 2, 3)],
                     sender=bridge.path)
    wait_for(lambda: system.ask("/user/acc/a", GetUnaccepted(), timeout=10) == 3, timeout=30)
    bridge.tell("/user/acc/a", ForwardAccepted(1, (2, 3)))
    wait_for(lambda: system.ask("/user/acc/a", GetUnaccepted(), timeout=10) == 0, timeout=30)


def test_a_follow_up_the_journal_cannot_store_is_dead_lettered_and_the_others_of_its_round_delivered(
        base, make_system, tmp_path):
    # An ack() destination's follow-up the journal cannot store (nothing checks it on its way) got the bridge's
    # Progress event rejected with the other follow-ups of its round, which the bridge went on with as seen but
    # not stored: a receiver's resend was taken for a duplicate and accepted, and the follow-up never delivered.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    start_bridge(system)
    receiver, destination = system.probe("receiver"), system.probe("destination")
    receiver.tell(BRIDGE_PATH, Forwards([receiver.path] * 2, [ORIGIN] * 2, [1, 2], [None, None],
                                        [destination.path] * 2, [2**70, "m2"]))  # (beyond 64 bits: rejected)
    assert ids_of(accepted(receiver, 2)) == [1, 2]  # (the refused one too: resending it would not help)
    assert destination.receive(10).body == "m2"
    letters = wait_for(lambda: [d for d in system.dead_letters().recent if d.message == 2**70] or None, timeout=10)
    assert "cannot store" in letters[0].reason and letters[0].target == destination.path
    receiver.tell(BRIDGE_PATH, forwards(receiver.path, [2], destination.path))  # a resend: stored before
    assert accepted(receiver, 1) == [ForwardAccepted(2)]
    destination.expect_no_message(0.3)


class _QuickBridge(SparkBridge):
    """A bridge that resends an unconfirmed row after 2 s (not 10 s and more)."""

    redeliver_interval = 2.0
    redelivery_backoff = None


def test_a_cumulative_confirm_confirms_only_the_rows_delivered_to_its_sender(base, make_system, tmp_path):
    # Delivery ids are numbered across destinations: a's ConfirmUpTo once confirmed b's rows below it too,
    # rows b never confirmed (nor perhaps got), which were then never resent.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    start_bridge(system, cls=_QuickBridge)
    receiver, a, b = system.probe("receiver"), system.probe("a"), system.probe("b")
    receiver.tell(BRIDGE_PATH, Forwards([receiver.path] * 4, [ORIGIN] * 4, [1, 2, 3, 4], [None] * 4,
                                        [a.path, b.path, a.path, b.path], ["a1", "b2", "a3", "b4"]))
    rows = a.receive_many(2, 10) + b.receive_many(2, 10)
    a.tell(BRIDGE_PATH, ConfirmUpTo(max(r.delivery_id for r in rows)))
    assert sorted(r.body for r in b.receive_many(2, 10)) == ["b2", "b4"]  # resent: still unconfirmed
    a.expect_no_message(3.0)  # confirmed: not resent



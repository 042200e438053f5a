"""FeedTable's follow-ups, on both bases: sent straight to their receivers once the row's commit is durable,
redelivered until confirmed (also across a SIGKILL of the table's host), and the row confirmed to its bridge
only once they are. The test's probe plays the bridge (rows carry its path as `Row.bridge`)."""

from __future__ import annotations

import os
import signal

import pytest

from actors import AskTimeout
from spark_bridge.destination import FOLLOW_UPS_ENTITY
from spark_bridge.messages import Confirmed
from tests.spark_bridge.table_sample import AuditingLedger, Forgetful, Holder, Posting, TableLedger, row
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

ACC = "/user/acc"
LEDGER = "/user/ledger"


def confirmed(probe, n: int, timeout: float = 30.0) -> list[int]:
    """The row ids of the next Confirmed messages until `n` ids came (repeats included), sorted."""
    ids: list[int] = []
    while len(ids) < n:
        message = probe.receive(timeout)
        assert type(message) is Confirmed, message
        ids += message.delivery_ids
    return sorted(ids)


def nothing_confirmed(probe, seconds: float = 0.5) -> None:
    """Assert the probe gets no confirmation within `seconds` (what the table must not do yet)."""
    with pytest.raises(AskTimeout):
        got = probe.receive(seconds)
        pytest.fail(f"confirmed too early: {got!r}")


def got(system, path: str, n: int) -> list[tuple[int, int, str | None]]:
    """What the Holder at `path` got, once it got at least `n` deliveries."""
    def enough():
        g = system.ask(path, "got")
        return g if len(g) >= n else None
    return wait_for(enough, timeout=30)


def start(make_system, base: str, tmp_path, receiver=Holder):
    """A system on `base` with the Posting table at ACC sending to `receiver` at LEDGER; (system, probe)."""
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db", snapshot_store=f"sqlite:///{tmp_path}/s.db")
    system.spawn(receiver, LEDGER)
    system.spawn(Posting, ACC, entities=True, kwargs={"ledger": LEDGER})
    return system, system.probe()


def test_follow_ups_are_sent_once_durable_and_the_row_is_confirmed_only_after_them(base, make_system, tmp_path):
    system, probe = start(make_system, base, tmp_path)
    rows = [row(k, probe.path, amount=k, posts=2 if k in (3, 7) else 1) for k in range(1, 11)]
    system.tell_many([(f"{ACC}/{k % 4}", r) for k, r in enumerate(rows, 1)], sender=probe.path)
    deliveries = got(system, LEDGER, 12)
    assert sorted(d[1] for d in deliveries) == sorted([*range(1, 11), 3, 7]), "each follow-up once, with its amount"
    assert len({d[0] for d in deliveries}) == 12, "each with its own id"
    assert {d[2] for d in deliveries} == {f"{ACC}/{FOLLOW_UPS_ENTITY}"}, "from the table's own address"
    nothing_confirmed(probe)  # the rows are durable, but their follow-ups are not confirmed yet
    assert system.ask(f"{ACC}/1", "unconfirmed") == 12
    assert system.ask(LEDGER, "release") == "released"
    assert confirmed(probe, 10) == list(range(1, 11)), "every row confirmed, once its follow-ups were"
    assert system.ask(f"{ACC}/1", "unconfirmed") == 0
    assert len(system.ask(LEDGER, "got")) == 12, "nothing sent twice"


def test_a_redelivered_row_waits_for_the_follow_ups_of_its_first_copy_and_sends_none_again(base, make_system,
                                                                                           tmp_path):
    system, probe = start(make_system, base, tmp_path)
    system.tell(f"{ACC}/a", row(1, probe.path, amount=5), sender=probe.path)
    got(system, LEDGER, 1)
    system.tell(f"{ACC}/a", row(1, probe.path, amount=5), sender=probe.path)  # the bridge resends it
    nothing_confirmed(probe)
    assert system.ask(LEDGER, "release") == "released"
    assert set(confirmed(probe, 1)) == {1}
    assert system.ask(f"{ACC}/a", "balance") == 5, "applied once"
    assert len(system.ask(LEDGER, "got")) == 1, "a redelivered row sends no follow-up again"


def test_a_failing_command_sends_none_of_its_follow_ups_and_its_row_applies_when_sent_again(base, make_system,
                                                                                           tmp_path):
    system, probe = start(make_system, base, tmp_path)
    assert system.ask(LEDGER, "release") == "released"  # confirm at once from now on
    system.tell_many([(f"{ACC}/a", row(1, probe.path, amount=1)), (f"{ACC}/a", row(2, probe.path, 10, posts=3,
                                                                                     fail=True)),
                      (f"{ACC}/a", row(3, probe.path, amount=100))], sender=probe.path)
    assert confirmed(probe, 2) == [1, 3]
    assert sorted(d[1] for d in system.ask(LEDGER, "got")) == [1, 100], "the failed row's three follow-ups: none"
    assert system.ask(f"{ACC}/a", "balance") == 101
    errors = system.errors().recent
    assert any(e.path == f"{ACC}/a" and "row 2 asked to fail" in e.reason for e in errors), errors
    system.tell(f"{ACC}/a", row(2, probe.path, amount=10), sender=probe.path)  # its redelivery, which succeeds
    assert confirmed(probe, 1) == [2], "the dropped command's dedup mark was forgotten: the row applies now"
    assert system.ask(f"{ACC}/a", "balance") == 111
    assert system.ask(f"{ACC}/a", "unconfirmed") == 0


def test_follow_ups_lost_on_the_way_are_sent_again_until_confirmed(base, make_system, tmp_path):
    system, probe = start(make_system, base, tmp_path, receiver=Forgetful)
    system.tell_many([(f"{ACC}/{k}", row(k, probe.path)) for k in range(1, 6)], sender=probe.path)
    # Posting.redeliver_interval is 1 s: every follow-up's first delivery is dropped, the second confirmed.
    assert confirmed(probe, 5, timeout=30) == [1, 2, 3, 4, 5]
    assert system.ask(LEDGER, "got") >= 10


def test_follow_ups_of_follow_ups_are_relayed_by_the_table_and_hold_the_row(base, make_system, tmp_path):
    system, probe = start(make_system, base, tmp_path, receiver=AuditingLedger)
    system.spawn(Holder, "/user/audit")
    system.tell_many([(f"{ACC}/{k % 3}", row(k, probe.path, amount=k)) for k in range(1, 7)], sender=probe.path)
    audited = got(system, "/user/audit", 6)
    assert sorted(d[1] for d in audited) == [1, 2, 3, 4, 5, 6], "each ledger follow-up reached the audit once"
    assert {d[2] for d in audited} == {f"{ACC}/{FOLLOW_UPS_ENTITY}"}, "relayed by the table"
    assert system.ask(LEDGER, "totals") == (6, 21)
    nothing_confirmed(probe)  # the ledger confirmed its entries, but the audit has not confirmed their follow-ups
    assert system.ask("/user/audit", "release") == "released"
    assert confirmed(probe, 6) == [1, 2, 3, 4, 5, 6]
    assert system.ask(LEDGER, "totals") == (6, 21) and len(system.ask("/user/audit", "got")) == 6


def test_a_follow_up_to_a_path_nobody_serves_is_dead_lettered_and_its_row_confirmed(base, make_system, tmp_path):
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(Posting, ACC, entities=True, kwargs={"ledger": "/user/nobody"})
    probe = system.probe()
    system.tell(f"{ACC}/a", row(1, probe.path), sender=probe.path)
    assert confirmed(probe, 1, timeout=30) == [1], "after a redelivery found nobody serving the path"
    letters = wait_for(lambda: system.dead_letters() if system.dead_letters().count else None, timeout=10)
    assert any(letter.target == "/user/nobody" for letter in letters.recent), letters


@pytest.mark.multiproc
def test_a_table_killed_with_follow_ups_unconfirmed_sends_them_again_and_each_row_applies_once(make_system,
                                                                                            tmp_path):
    system, probe = start(make_system, "multiproc", tmp_path)
    # Seven rounds (seven commits; Posting snapshots every 3, with follow-ups still unconfirmed in them).
    for k in range(1, 8):
        system.tell(f"{ACC}/{k % 2}", row(k, probe.path, amount=k), sender=probe.path)
        got(system, LEDGER, k)
    pid = system.status().hosts[ACC].pid
    os.kill(pid, signal.SIGKILL)
    # Its next process recovers (the newest snapshot, then the commits after it) and sends all seven again.
    again = got(system, LEDGER, 14)
    assert sorted(d[0] for d in again) == sorted(2 * list({d[0] for d in again})), "the same seven ids, twice"
    system.tell_many([(f"{ACC}/{k % 2}", row(k, probe.path, amount=k)) for k in range(1, 8)], sender=probe.path)
    nothing_confirmed(probe)  # the bridge's redeliveries wait for the follow-ups too
    assert system.ask(LEDGER, "release") == "released"
    assert set(confirmed(probe, 7)) == set(range(1, 8))
    assert system.ask(f"{ACC}/0", "balance") == 2 + 4 + 6 and system.ask(f"{ACC}/1", "balance") == 1 + 3 + 5 + 7


def test_a_durable_ledger_table_applies_each_follow_up_once_across_its_host_s_sigkill(make_system, tmp_path):
    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(TableLedger, LEDGER, entities=True)
    system.spawn(Posting, ACC, entities=True, kwargs={"ledger": f"{LEDGER}/all"})
    probe = system.probe()
    system.tell_many([(f"{ACC}/{k % 5}", row(k, probe.path, amount=k)) for k in range(1, 201)], sender=probe.path)
    first = confirmed(probe, 100)
    os.kill(system.status().hosts[LEDGER].pid, signal.SIGKILL)
    system.tell_many([(f"{ACC}/{k % 5}", row(k, probe.path, amount=k)) for k in range(201, 301)], sender=probe.path)
    rest = set(first)
    while len(rest) < 300:
        rest.update(confirmed(probe, 1, timeout=60))
    assert rest == set(range(1, 301))
    assert system.ask(LEDGER, "totals") == (300, sum(range(1, 301))), "every entry applied once"
    assert sum(system.ask(f"{ACC}/{k}", "balance") for k in range(5)) == sum(range(1, 301))


def test_rows_of_two_bridges_in_one_commit_are_each_confirmed_to_their_own_bridge(base, make_system, tmp_path):
    # (node bridges: each numbers its own delivery ids, so a row confirmed to the other bridge is lost there)
    system, one = start(make_system, base, tmp_path)
    other = system.probe()
    system.tell_many([(f"{ACC}/{k % 3}", row(k, one.path, posts=0)) for k in range(1, 5)]
                     + [(f"{ACC}/{k % 3}", row(k, other.path, posts=0)) for k in range(1, 4)], sender=one.path)
    assert confirmed(one, 4) == [1, 2, 3, 4]
    assert confirmed(other, 3) == [1, 2, 3], "the same ids from another bridge are other rows: applied, confirmed"
    system.tell_many([(f"{ACC}/{k % 3}", row(k, other.path, posts=0)) for k in range(4, 7)], sender=one.path)
    assert confirmed(other, 3) == [4, 5, 6], "a commit of one bridge's rows"
    nothing_confirmed(one)
    assert sum(system.ask(f"{ACC}/{k}", "balance") for k in range(3)) == 10, "each of the 10 rows applied once"

"""The dedup state of an IdempotentReceiver and of an EntityTable survives delete_messages (without a snapshot) and a
partial recovery: a delivery applied once is never applied again (both bases; a SIGKILLed host on multiproc)."""

from __future__ import annotations

import os
import signal

import pytest

from journal import open_journal
from persistence.idempotent import DedupKept
from tests.persistence.beyond_actors import Payload
from tests.persistence.dedup_delete_actors import (
    DeletingAccounts,
    DeletingReceiver,
    DeletingRelay,
    FirstEventRecoveringReceiver,
    NoneRecoveringAccounts,
    NoneRecoveringReceiver,
    ReversedDeletingRelay,
    TaggingAccounts,
    TaggingReceiver,
)
from tests.persistence.table_actors import Deposit
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)

RCV = "/user/rcv"
ACC = "/user/acc"


def _restart(system, path: str, host: str, how: str) -> None:
    """Restart the actor at `path`: "boom" makes it raise (it recovers from the journal), "kill" SIGKILLs its host
    process (multiproc: the guardian starts it again, and the next message recovers it)."""
    if how == "boom":
        system.tell(path, "boom")
        return
    pid = system.status().hosts[host].pid
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (h := system.status().hosts.get(host)) is not None and h.pid not in (None, pid), 30)


def _hows(base: str) -> list[str]:
    return ["boom", "kill"] if base == "multiproc" else ["boom"]


@pytest.mark.parametrize("to", ["last", "max"])
def test_deleting_an_idempotent_receiver_s_events_keeps_its_dedup_state(psystem, base, tmp_path, to):
    # The applications are the receiver's dedup state, and delete_messages without a snapshot deleted it. Measured
    # before, both bases (a restart by an exception, and on multiproc a SIGKILL of the host): the redeliveries of 1, 2
    # and 4 were ("applied", ...) again, each delivery applied twice.
    system = psystem
    system.spawn(DeletingReceiver, path=RCV, entities=True)
    for k, how in enumerate(_hows(base)):
        rcv = f"{RCV}/{tmp_path.name}-{how}"
        for i in (1, 2, 4):  # (3 never came: a gap above the watermark)
            assert system.ask(rcv, ("apply", "/o", i, f"v{i}"), timeout=10) == ("applied", i)
        for round_ in (1, 2):  # (the second delete deletes the dedup state the first one kept)
            assert system.ask(rcv, ("delete", to), timeout=10) == ("deleted",)
            _restart(system, rcv, RCV, how)
            assert system.ask(rcv, "values", timeout=10) == (), "its events are deleted (the user's state: theirs)"
            for i in (1, 2, 4):
                assert system.ask(rcv, ("apply", "/o", i, f"v{i}"), timeout=10) == ("duplicate", i), (how, round_, i)
        assert system.ask(rcv, ("apply", "/o", 3, "v3"), timeout=10) == ("applied", 3), "the gap stays a gap"
        assert system.ask(rcv, ("apply", "/other", 1, "w1"), timeout=10) == ("applied", 1), k


def test_an_application_in_flight_at_a_delete_is_not_deleted_and_stays_applied(psystem, tmp_path):
    # Its event is written after the delete's call: kept (the delete is bounded at last_sequence_nr), and replayed.
    system = psystem
    system.spawn(DeletingReceiver, path=RCV, entities=True)
    rcv = f"{RCV}/{tmp_path.name}"
    assert system.ask(rcv, ("apply", "/o", 1, "v1"), timeout=10) == ("applied", 1)
    probe = system.probe()
    probe.tell(rcv, ("apply-and-delete", "/o", 2, "v2"))
    assert sorted(probe.receive_many(2, 10)) == [("applied", 2), ("deleted",)]
    system.tell(rcv, "boom")
    assert system.ask(rcv, "values", timeout=10) == ("v2",)
    for i in (1, 2):
        assert system.ask(rcv, ("apply", "/o", i, f"v{i}"), timeout=10) == ("duplicate", i)


def test_a_delete_whose_dedup_state_the_journal_rejects_deletes_nothing_and_says_so(base, make_system, tmp_path):
    # The dedup state goes to the journal before the delete: rejected, the delete would take it with it.
    url = f"rejectdedup:///{tmp_path}/journal.db"
    system = make_system(base, journal=url, snapshot_store=url)
    system.spawn(DeletingReceiver, path=RCV, entities=True)
    rcv = f"{RCV}/{tmp_path.name}"
    assert system.ask(rcv, ("apply", "/o", 1, "v1"), timeout=10) == ("applied", 1)
    probe = system.probe()  # (told, not asked: an asking client's ask fails with the rejection itself)
    probe.tell(rcv, ("delete", "last"))
    reply = probe.receive(10)
    assert reply[0] == "delete failed" and "rejected the dedup state" in reply[1], reply
    system.tell(rcv, "boom")
    assert system.ask(rcv, "values", timeout=10) == ("v1",), "nothing was deleted"
    assert system.ask(rcv, ("apply", "/o", 1, "v1"), timeout=10) == ("duplicate", 1)


def test_a_delete_called_from_receive_recover_keeps_the_dedup_state(psystem, tmp_path):
    # During the replay the dedup state is partial and nothing can be journaled: the delete waits for its end.
    # Measured before, both bases: the redeliveries of 1 and 2 were applied again after the next restart.
    system = psystem
    system.spawn(DeletingReceiver, path=RCV, entities=True)
    rcv = f"{RCV}/{tmp_path.name}"
    for i, value in ((1, "v1"), (2, "purge")):
        assert system.ask(rcv, ("apply", "/o", i, value), timeout=10) == ("applied", i)
    system.tell(rcv, "boom")  # its replay of "purge" deletes up to it
    wait_for(lambda: system.ask(rcv, "deletes", timeout=10) == 1)
    system.tell(rcv, "boom")
    assert system.ask(rcv, "values", timeout=10) == ()
    for i in (1, 2):
        assert system.ask(rcv, ("apply", "/o", i, f"v{i}"), timeout=10) == ("duplicate", i), i


def test_the_dedup_state_kept_is_not_handed_to_tags_for(psystem, tmp_path):
    # tags_for is asked of the user's events; DedupKept is Reprise's. Measured before the guard: the delete's
    # command failed on tags_for's AttributeError (no reply), as did the table's.
    system = psystem
    system.spawn(TaggingReceiver, path=RCV, entities=True)
    system.spawn(TaggingAccounts, path=ACC, entities=True)
    rcv = f"{RCV}/{tmp_path.name}"
    assert system.ask(rcv, ("apply", "/o", 1, "a-1"), timeout=10) == ("applied", 1)
    assert system.ask(rcv, ("delete", "last"), timeout=10) == ("deleted",)
    assert system.ask(f"{ACC}/a", Deposit("/o", 1, 10), timeout=10).delivery_id == 1
    assert system.ask(ACC, ("delete", "last"), timeout=10) == ("deleted",)
    with open_journal(f"sqlite:///{tmp_path}/journal.db") as journal, journal.all_events() as query:
        kept = [e for e in query if type(e.event) is DedupKept]
    assert [(e.persistence_id, e.tags) for e in kept] == [(rcv, frozenset()), (ACC, frozenset())]


@pytest.mark.parametrize("relay", [DeletingRelay, ReversedDeletingRelay])
def test_deleting_a_relay_s_events_keeps_both_its_dedup_state_and_its_delivery_state(psystem, tmp_path, relay):
    # A relay is both: each mixin journals its own state before the delete (in either order of the mixins).
    system = psystem
    system.spawn(relay, path=RCV, entities=True)
    rcv = f"{RCV}/{tmp_path.name}"
    dst = system.probe()
    assert system.ask(rcv, ("forward", "/o", 1, "a", dst.path), timeout=10) == ("forwarded", 1)
    assert dst.receive(10) == Payload(1, "a")
    assert system.ask(rcv, ("delete", "max"), timeout=10) == ("deleted",)
    system.tell(rcv, "boom")
    assert system.ask(rcv, "unconfirmed", timeout=10) == (1,)
    assert dst.receive(10) == Payload(1, "a"), "resent by the burst after recovery"
    assert system.ask(rcv, ("forward", "/o", 1, "a", dst.path), timeout=10) == ("duplicate", 1)
    assert system.ask(rcv, ("forward", "/o", 2, "b", dst.path), timeout=10) == ("forwarded", 2)
    assert dst.receive(10) == Payload(2, "b"), "forward id 1 was used already"
    assert system.ask(rcv, "values", timeout=10) == ("b",)


@pytest.mark.parametrize("to", ["last", "max"])
def test_deleting_an_entity_table_s_commits_keeps_its_dedup_state(psystem, base, to):
    # As for IdempotentReceiver: measured before, both bases, the redelivered deposit was applied again.
    system = psystem
    system.spawn(DeletingAccounts, path=ACC, entities=True)
    origin = f"/o-{to}"
    assert system.ask(f"{ACC}/a", Deposit(origin, 1, 10), timeout=10).delivery_id == 1
    assert system.ask(f"{ACC}/b", Deposit(origin, 3, 5), timeout=10).delivery_id == 3
    for how in _hows(base):
        assert system.ask(ACC, ("delete", to), timeout=10) == ("deleted",)
        _restart(system, ACC, ACC, how)
        assert system.ask(f"{ACC}/a", "balance", timeout=10) == 0, "its commits are deleted (the states with them)"
        for i, entity in ((1, "a"), (3, "b")):
            assert system.ask(f"{ACC}/{entity}", Deposit(origin, i, 100), timeout=10).delivery_id == i
        assert system.ask(f"{ACC}/a", "balance", timeout=10) == 0, (how, "deposit 1 applied again")
        assert system.ask(f"{ACC}/b", "balance", timeout=10) == 0, (how, "deposit 3 applied again")
    assert system.ask(f"{ACC}/a", Deposit(origin, 2, 7), timeout=10).delivery_id == 2
    assert system.ask(f"{ACC}/a", "balance", timeout=10) == 7, "the gap stays a gap"


@pytest.mark.parametrize("receiver", [NoneRecoveringReceiver, FirstEventRecoveringReceiver])
def test_a_partial_recovery_of_an_idempotent_receiver_recovers_its_whole_dedup_state(psystem, tmp_path, receiver):
    # Recovery.none() / Recovery(to_sequence_nr=1) replayed only part of the applications, and the dedup state was
    # made from them. Measured before, both bases: the redeliveries of 2 (and of 1 with none()) were applied again.
    system = psystem
    system.spawn(receiver, path=RCV, entities=True)
    rcv = f"{RCV}/{tmp_path.name}"
    for i in (1, 2):
        assert system.ask(rcv, ("apply", "/o", i, f"v{i}"), timeout=10) == ("applied", i)
    assert system.ask(rcv, ("delete", "max"), timeout=10) == ("deleted",)  # (the dedup state kept, then read too)
    assert system.ask(rcv, ("apply", "/o", 4, "v4"), timeout=10) == ("applied", 4)
    system.tell(rcv, "boom")
    assert system.ask(rcv, "values", timeout=10) == (), "what receive_recover sees is still limited"
    for i in (1, 2, 4):
        assert system.ask(rcv, ("apply", "/o", i, f"v{i}"), timeout=10) == ("duplicate", i), i
    assert system.ask(rcv, ("apply", "/o", 3, "v3"), timeout=10) == ("applied", 3)


def test_a_partial_recovery_takes_the_dedup_state_of_a_snapshot_whose_events_an_earlier_version_deleted(
        psystem, tmp_path):
    # Deleted under a snapshot without a DedupKept (as delete_messages did before): only the snapshot holds the dedup
    # state of the deleted applications, and a partial recovery (which loads no snapshot) reads it too.
    system = psystem
    system.spawn(NoneRecoveringReceiver, path=RCV, entities=True)
    rcv = f"{RCV}/{tmp_path.name}"
    for i in (1, 2):
        assert system.ask(rcv, ("apply", "/o", i, f"v{i}"), timeout=10) == ("applied", i)
    _, at = system.ask(rcv, "snap", timeout=10)
    assert system.ask(rcv, ("apply", "/o", 4, "v4"), timeout=10) == ("applied", 4)
    with open_journal(f"sqlite:///{tmp_path}/journal.db") as journal:
        journal.delete_messages_to(rcv, at)
    system.tell(rcv, "boom")
    for i in (1, 2, 4):
        assert system.ask(rcv, ("apply", "/o", i, f"v{i}"), timeout=10) == ("duplicate", i), i
    assert system.ask(rcv, ("apply", "/o", 3, "v3"), timeout=10) == ("applied", 3)


def test_a_partial_recovery_of_an_entity_table_recovers_its_whole_dedup_state(psystem):
    system = psystem
    system.spawn(NoneRecoveringAccounts, path=ACC, entities=True)
    assert system.ask(f"{ACC}/a", Deposit("/o", 1, 10), timeout=10).delivery_id == 1
    system.tell(ACC, "boom")
    assert system.ask(f"{ACC}/a", "balance", timeout=10) == 0, "Recovery.none(): no state"
    assert system.ask(f"{ACC}/a", Deposit("/o", 1, 10), timeout=10).delivery_id == 1
    assert system.ask(f"{ACC}/a", "balance", timeout=10) == 0, "deposit 1 applied again"

"""EntityTable (persistence/table.py): entities as rows of one persistent actor per host, on both bases."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from dataclasses import dataclass
from typing import Any

import pytest

from actors import ActorFailed, AskTimeout, SpawnFailed
from journal import open_journal, open_snapshot_store
from persistence import Confirm, TableCommit, entity_events
from tests.persistence.table_actors import Accounts, Deposit, DepositChunk, DepositTwice, Withdraw
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

ACC = "/user/acc"


def commits(url: str, pid: str = ACC) -> list[TableCommit]:
    """The TableCommits stored under `pid`."""
    with open_journal(url) as journal, journal.events_by_persistence_id(pid) as query:
        return [e.event for e in query]


def balances(system, ids) -> dict[str, int]:
    return {i: system.ask(f"{ACC}/{i}", "balance") for i in ids}


@dataclass(frozen=True)
class Tripled:
    """An event that triples the balance, deliberately not registered with the journal."""


class TriplingAccounts(Accounts):
    """Accounts with a "triple" command, whose event the journal cannot store (importable by host processes)."""

    def command_handler(self, entity_id: str, state: int, command: Any) -> list[Any] | None:
        if command == "triple":
            self.reply(self.sender, "tripled")
            return [Tripled()]
        return super().command_handler(entity_id, state, command)

    def event_handler(self, state: int, event: Any) -> int:
        return 3 * state if type(event) is Tripled else super().event_handler(state, event)


def test_one_batch_is_one_record_its_commands_apply_in_order_and_replies_wait_for_it(psystem, tmp_path):
    psystem.spawn(Accounts, ACC, entities=True)
    probe = psystem.probe()
    items = [(f"{ACC}/{'abc'[k % 3]}", Deposit("/o", k + 1, k + 1)) for k in range(30)]
    psystem.tell_many(items, sender=probe.path)
    confirms = probe.receive_many(30, 20)
    assert sorted(c.delivery_id for c in confirms) == list(range(1, 31)), "each delivery confirmed once"
    stored = commits(f"sqlite:///{tmp_path}/journal.db")
    assert len(stored) == 1, "the 30 deposits of one incoming batch are one journal record"
    (commit,) = stored
    assert commit.entity_ids == tuple("abc"[k % 3] for k in range(30))
    assert [e.amount for e in commit.events] == list(range(1, 31)), "in arrival order"
    assert commit.delivery_ids == tuple(range(1, 31)) and set(commit.origins) == {"/o"}
    assert balances(psystem, "abc") == {i: sum(k + 1 for k in range(30) if "abc"[k % 3] == i) for i in "abc"}
    assert psystem.ask(f"{ACC}/z", "balance") == 0, "an entity without events has the empty state"
    assert psystem.ask(f"{ACC}/z", "path") == f"{ACC}/z"
    assert psystem.ask(ACC, "count") == 3, "an entity that only answered has no row"


def test_state_and_dedup_survive_a_restart_from_the_newest_snapshot_and_the_commits_after_it(base, make_system,
                                                                                             tmp_path):
    urls = {"journal": f"sqlite:///{tmp_path}/j.db", "snapshot_store": f"sqlite:///{tmp_path}/s.db"}
    first = make_system(base, **urls)
    first.spawn(Accounts, ACC, entities=True)
    for k in range(1, 13):  # 12 commits: snapshots after the 5th and the 10th (snapshot_every = 5)
        assert first.ask(f"{ACC}/{k % 2}", Deposit("/o", k, 10 * k)) == Confirm(k)
    expected = {"0": sum(10 * k for k in range(2, 13, 2)), "1": sum(10 * k for k in range(1, 13, 2))}
    assert balances(first, "01") == expected
    first.shutdown()
    with open_snapshot_store(urls["snapshot_store"]) as store:
        newest = store.load(ACC)
        assert newest is not None and newest.metadata.sequence_nr == 10, "the newest snapshot, at commit 10"
        from journal import SnapshotSelectionCriteria
        older = store.load(ACC, SnapshotSelectionCriteria(max_sequence_nr=9))
        assert older is None, "older snapshots were deleted once a newer one was saved"

    second = make_system(base, **urls)
    second.spawn(Accounts, ACC, entities=True)
    assert balances(second, "01") == expected, "recovered: snapshot at 10, then commits 11 and 12"
    assert second.ask(f"{ACC}/1", Deposit("/o", 3, 30)) == Confirm(3), "a redelivery is confirmed again"
    assert second.ask(f"{ACC}/0", Deposit("/o", 12, 120)) == Confirm(12)
    assert balances(second, "01") == expected, "and not applied again: the dedup state was recovered"
    assert second.ask(f"{ACC}/1", Deposit("/o", 13, 5)) == Confirm(13)
    assert balances(second, "1") == {"1": expected["1"] + 5}
    assert second.ask(ACC, "sequence_nr") == 13


def test_a_failing_command_is_dropped_and_reported_and_the_rest_of_its_batch_applies(psystem):
    psystem.spawn(Accounts, ACC, entities=True)
    probe = psystem.probe()
    psystem.tell_many([(f"{ACC}/a", Deposit("/o", 1, 10)),
                       (f"{ACC}/a", Withdraw(100)),          # raises: dropped, a keeps 10
                       (f"{ACC}/b", Deposit("/o", 2, 5)),
                       (f"{ACC}/c", Deposit("/o", 3, 7)),
                       (f"{ACC}/c", "not a list"),           # a mistake in the handler: reported, dropped
                       (f"{ACC}/d", "zero")],                # a falsy one too (it passed for "no events")
                      sender=probe.path)
    assert sorted(c.delivery_id for c in probe.receive_many(3, 20)) == [1, 2, 3]
    assert balances(psystem, "abc") == {"a": 10, "b": 5, "c": 7}
    failed = {f"{ACC}/a", f"{ACC}/c", f"{ACC}/d"}
    errors = wait_for(lambda: (lambda es: es if failed <= {e.path for e in es} else None)(
        [e for e in psystem.errors().recent if e.path.startswith(ACC)]), 10)
    by_path = {e.path: e.reason for e in errors}
    assert "cannot withdraw 100" in by_path[f"{ACC}/a"], by_path
    assert "must return a list or tuple of events" in by_path[f"{ACC}/c"], by_path
    assert "must return a list or tuple of events (or None), got int 0" in by_path[f"{ACC}/d"], by_path
    with pytest.raises(ActorFailed, match="cannot withdraw 1000"):
        psystem.ask(f"{ACC}/a", Withdraw(1000))
    psystem.tell(f"{ACC}/a", Withdraw(4))
    assert psystem.ask(f"{ACC}/a", "balance") == 6, "the entity goes on after its failed commands"


def test_a_reply_that_cannot_be_pickled_is_reported_and_the_replies_after_it_in_its_commit_are_sent(psystem):
    # The replies after it in the same commit were lost (25 of 50 deposits durable and never confirmed).
    psystem.spawn(Accounts, ACC, entities=True)
    probe = psystem.probe()
    psystem.tell_many([(f"{ACC}/{k}", Deposit("/o", k, 1)) for k in range(1, 11)] + [(f"{ACC}/x", "unpicklable reply")]
                      + [(f"{ACC}/{k}", Deposit("/o", k, 1)) for k in range(11, 21)], sender=probe.path)
    assert sorted(c.delivery_id for c in probe.receive_many(20, 20)) == list(range(1, 21))
    errors = wait_for(lambda: [e for e in psystem.errors().recent if e.path == ACC] or None, 10)
    assert any(f"a reply to {probe.path} was not sent" in e.reason and "cannot be pickled" in e.reason
               for e in errors), [e.reason for e in errors]
    probe.expect_no_message(0.2)


def test_a_command_whose_event_handler_fails_on_a_later_event_leaves_no_event_no_mark_and_no_reply(psystem, tmp_path):
    psystem.spawn(Accounts, ACC, entities=True)
    probe = psystem.probe()
    psystem.tell_many([(f"{ACC}/a", DepositTwice("/o", 1, 10)),
                       (f"{ACC}/a", DepositTwice("/o", 2, 100, poisoned=True)),  # fails on its third event
                       (f"{ACC}/b", Deposit("/o", 3, 7))],
                      sender=probe.path)
    assert sorted(c.delivery_id for c in probe.receive_many(2, 20)) == [1, 3], "no reply from the failed command"
    assert balances(psystem, "ab") == {"a": 20, "b": 7}, "none of the failed command's events applied"
    (commit,) = commits(f"sqlite:///{tmp_path}/journal.db")
    assert commit.entity_ids == ("a", "a", "b") and [e.amount for e in commit.events] == [10, 10, 7]
    assert commit.delivery_ids == (1, 3), "the failed command's delivery is not marked applied"
    assert psystem.ask(f"{ACC}/a", DepositTwice("/o", 2, 100)) == Confirm(2)
    assert balances(psystem, "a") == {"a": 220}, "so its redelivery applies, both events"
    errors = wait_for(lambda: [e for e in psystem.errors().recent if e.path == f"{ACC}/a"] or None, 10)
    assert "a poisoned event" in errors[0].reason


def test_a_command_whose_event_the_journal_cannot_store_is_dropped_alone_and_the_rest_of_its_batch_commits(
        base, make_system, tmp_path):
    # The whole commit was rejected: the table stopped, and the other entities' deposits of the batch were lost.
    urls = {"journal": f"sqlite:///{tmp_path}/j.db", "snapshot_store": f"sqlite:///{tmp_path}/s.db"}
    first = make_system(base, **urls)
    first.spawn(TriplingAccounts, ACC, entities=True)
    probe = first.probe()
    first.tell_many([(f"{ACC}/a", Deposit("/o", 1, 10)),
                     (f"{ACC}/b", Deposit("/o", 2, 5)),
                     (f"{ACC}/b", "triple"),                 # an unregistered event: this command alone is dropped
                     (f"{ACC}/b", Deposit("/o", 3, 7)),       # so b's next command sees 5, not 15
                     (f"{ACC}/c", Deposit("/o", 4, 1))], sender=probe.path)
    assert sorted(c.delivery_id for c in probe.receive_many(4, 10)) == [1, 2, 3, 4]
    probe.expect_no_message(0.2)  # (not "tripled": the dropped command's reply is not sent)
    expected = {"a": 10, "b": 12, "c": 1}
    assert balances(first, "abc") == expected, "b kept its state without the dropped command's event"
    errors = wait_for(lambda: [e for e in first.errors().recent if e.path == f"{ACC}/b"] or None, 10)
    assert "its event cannot be journaled, so the command was dropped" in errors[0].reason, errors[0].reason
    assert "Tripled: register it with journal.register_type(Tripled)" in errors[0].reason, errors[0].reason
    started = time.monotonic()
    with pytest.raises(ActorFailed, match=r"register it with journal\.register_type\(Tripled\)"):
        first.ask(f"{ACC}/b", "triple", timeout=30)
    assert time.monotonic() - started < 10, "the ask failed at once, not at its timeout"
    assert first.ask(f"{ACC}/b", Deposit("/o", 5, 1)) == Confirm(5), "the table goes on"
    first.shutdown()
    stored = commits(urls["journal"])
    assert [(c.entity_ids, [e.amount for e in c.events], c.delivery_ids) for c in stored] == [
        (("a", "b", "b", "c"), [10, 5, 7, 1], (1, 2, 3, 4)), (("b",), [1], (5,))], "one commit for the batch"
    second = make_system(base, **urls)
    second.spawn(TriplingAccounts, ACC, entities=True)
    assert balances(second, "abc") == {"a": 10, "b": 13, "c": 1}, "recovered from the journal"


def test_a_commit_the_journal_rejects_stops_the_table_and_its_next_message_recovers_what_is_stored(psystem):
    # The table checks each event class once (the first Deposited here); a value of a class it found storable
    # that the journal cannot encode (an int beyond 64 bits) is found only when the commit is written.
    psystem.spawn(Accounts, ACC, entities=True)
    assert psystem.ask(f"{ACC}/a", Deposit("/o", 1, 10)) == Confirm(1)
    probe = psystem.probe()
    psystem.tell_many([(f"{ACC}/a", Deposit("/o", 2, 5)), (f"{ACC}/b", Deposit("/o", 3, 2**70))], sender=probe.path)
    wait_for(lambda: any("rejected a commit" in e.reason for e in psystem.errors().recent), 10)
    assert psystem.ask(f"{ACC}/a", "balance") == 10, "the rejected commit's deposit is not in the state"
    with pytest.raises(AskTimeout):
        probe.receive(0.5)  # nor was it confirmed
    assert psystem.ask(f"{ACC}/a", Deposit("/o", 2, 5)) == Confirm(2), "its redelivery applies"
    assert psystem.ask(f"{ACC}/a", "balance") == 15
    assert psystem.ask(f"{ACC}/b", "balance") == 0
    # An ask whose command's commit is rejected gets no retry: it fails at once (it waited out its timeout).
    with pytest.raises(ActorFailed, match="CommitRejected: the journal rejected the table's commit holding this "
                                          "command's events"):
        psystem.ask(f"{ACC}/b", Deposit("/o", 4, 2**70), timeout=30)
    assert psystem.ask(f"{ACC}/a", "balance") == 15


def test_the_table_path_itself_bad_entity_paths_and_stopping_one_entity(psystem):
    psystem.spawn(Accounts, ACC, entities=True)
    assert psystem.ask(f"{ACC}/a", Deposit("/o", 1, 10)) == Confirm(1)
    assert psystem.ask(ACC, "count") == 1
    psystem.tell(f"{ACC}/a/b", "balance")
    dead = wait_for(lambda: [d for d in psystem.dead_letters().recent if d.target == f"{ACC}/a/b"] or None, 10)
    assert "one non-empty path segment" in dead[0].reason
    psystem.stop(f"{ACC}/a")  # an entity of a table has no instance: returns at once, its state stays
    assert psystem.ask(f"{ACC}/a", "balance") == 10


def test_spawning_a_table_without_entities_true_fails_and_says_how(psystem):
    with pytest.raises(SpawnFailed, match="spawn it with entities=True"):
        psystem.spawn(Accounts, ACC)


def test_a_sharded_table_keeps_each_shard_apart_and_refuses_another_shard_count(psystem, tmp_path):
    psystem.spawn(Accounts, ACC, entities=True, shards=2)
    ids = [str(i) for i in range(8)]
    for n, i in enumerate(ids, 1):
        assert psystem.ask(f"{ACC}/{i}", Deposit("/o", n, n)) == Confirm(n)
    assert psystem.ask(f"{ACC}/3", Deposit("/o", 9, 100)) == Confirm(9)
    assert balances(psystem, ids) == {i: n + (100 if i == "3" else 0) for n, i in enumerate(ids, 1)}
    with open_journal(f"sqlite:///{tmp_path}/journal.db") as journal:
        assert [e.amount for _, e in entity_events(journal, ACC, "3", shards=2)] == [4, 100]
        assert [n for n, _ in entity_events(journal, ACC, "3", shards=2)] == [1, 2], "its own sequence numbers"
        # Without shards= the events read as none (found by an audit): the shard count is named instead.
        with pytest.raises(ValueError, match="holds the table /user/acc as 2 or more shards, not 1: pass the shards= "
                                             "it was spawned with, e.g. shards=2"):
            list(entity_events(journal, ACC, "3"))
        assert sorted(journal.current_persistence_ids()) == [f"{ACC} [shard 0]", f"{ACC} [shard 1]"]
    psystem.stop(ACC)
    # The spawn's error says why (it said "system.errors() and the host's log say why"; found by an audit).
    with pytest.raises(SpawnFailed, match="(?s)failed to start: recovery failed: .*spawn it with shards=2"):
        psystem.spawn(Accounts, ACC, entities=True, shards=3)
    reason = wait_for(lambda: [e.reason for e in psystem.errors().recent if "shards=2" in e.reason] or None, 10)
    assert "spawn it with shards=2" in reason[0]


@pytest.mark.timeout(180)
def test_a_sigkilled_table_host_loses_no_confirmed_deposit_and_applies_redeliveries_once(make_system, tmp_path):
    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/j.db",
                         snapshot_store=f"sqlite:///{tmp_path}/s.db")
    system.spawn(Accounts, ACC, entities=True)
    probe = system.probe()
    sent = [(f"{ACC}/{k % 50}", Deposit("/o", k, k % 7 + 1)) for k in range(1, 6001)]
    confirmed: set[int] = set()
    pid = system.status().hosts[ACC].pid
    # 1,500 deposits in one batch just before the kill, so that it lands while the host works on them however
    # fast the host is (after a batch of 200 it once found every deposit confirmed, and the test failed).
    for start, end in [*((k, k + 200) for k in range(0, 3000, 200)), (3000, 4500),
                       *((k, k + 200) for k in range(4500, 6000, 200))]:
        system.tell_many(sent[start:end], sender=probe.path)
        if start == 3000:
            os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (h := system.status().hosts.get(ACC)) is not None and h.pid not in (None, pid), 30)
    try:
        while True:  # the confirms that came (those of batches lost with the process never will)
            confirmed.add(probe.receive(2).delivery_id)
    except AskTimeout:
        pass
    assert 0 < len(confirmed) < len(sent), "the kill came mid-stream"
    expected = {f"{k}": 0 for k in range(50)}
    for path, d in sent:
        if d.delivery_id in confirmed:
            expected[path.rsplit("/", 1)[1]] += d.amount
    after_kill = balances(system, expected)
    assert all(after_kill[i] >= expected[i] for i in expected), "every confirmed deposit survived the SIGKILL"
    system.tell_many(sent, sender=probe.path)  # the sender redelivers everything: applied once each
    assert len(probe.receive_many(len(sent), 60)) == len(sent)
    total = {f"{k}": 0 for k in range(50)}
    for path, d in sent:
        total[path.rsplit("/", 1)[1]] += d.amount
    assert balances(system, total) == total, "each deposit applied exactly once"


@pytest.mark.multiproc
@pytest.mark.timeout(120)
def test_the_readme_entity_table_block_runs_verbatim_as_a_script(tmp_path) -> None:
    from tests.test_readme import run_block_as_script

    run_block_as_script("accounts_table.py", tmp_path)


def test_a_table_whose_journal_holds_version_1_commits_recovers_them_and_writes_version_2_after(base, make_system,
                                                                                                tmp_path):
    # TableCommit version 2 stores its columns as runs; a journal written before (version 1, each column a tuple)
    # must recover as it was: states, dedup marks, and later commits appended in the new form.
    import msgpack

    from journal.records import FORMAT_FLAT, EncodedBatch
    from journal.serialization import TUPLE_MARK, _default, checksum, key_seed, marked
    from tests.persistence.table_actors import Deposited

    pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    url = f"sqlite:///{tmp_path}/journal.db"
    old = [(("a", "b"), (Deposited(5), Deposited(7)), (1, 2)), (("a",), (Deposited(11),), (3,))]
    rows = []
    for seq, (ids, events, delivery_ids) in enumerate(old, start=1):
        v1 = [1, [TUPLE_MARK, *ids], [TUPLE_MARK, *map(marked, events)], [TUPLE_MARK, *("/o",) * len(ids)],
              [TUPLE_MARK, *delivery_ids], None]
        blob = pack([FORMAT_FLAT, "old-writer", "", 0, None, None, "reprise.persistence.TableCommit", 1, *v1])
        rows.append((ACC, seq, blob, checksum(key_seed(ACC), seq, blob)))
    with open_journal(url) as journal:
        journal._store(EncodedBatch(rows, []))
    system = make_system(base, journal=url, snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Accounts, ACC, entities=True)
    assert balances(system, "ab") == {"a": 16, "b": 7}, "recovered from the version 1 commits"
    assert system.ask(f"{ACC}/b", Deposit("/o", 2, 7)) == Confirm(2)
    assert balances(system, "b") == {"b": 7}, "a redelivery of a delivery applied in version 1 is not applied again"
    assert system.ask(f"{ACC}/b", Deposit("/o", 4, 1)) == Confirm(4)
    system.shutdown()
    stored = commits(url)
    assert [c.delivery_ids for c in stored] == [(1, 2), (3,), (4,)]
    assert [e.amount for c in stored for e in c.events] == [5, 7, 11, 1]
    with open_journal(url) as journal:
        assert list(entity_events(journal, ACC, "b")) == [(1, Deposited(7)), (2, Deposited(1))]
    import sqlite3

    with contextlib.closing(sqlite3.connect(f"{tmp_path}/journal.db")) as conn:
        versions = [msgpack.unpackb(blob, ext_hook=lambda code, data: None, strict_map_key=False)[7] for (blob,) in
                    conn.execute("SELECT record FROM journal WHERE persistence_id = ? ORDER BY sequence_nr", (ACC,))]
    assert versions == [1, 1, 2], "the commit written after recovery is in the new form"
    again = make_system(base, journal=url, snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    again.spawn(Accounts, ACC, entities=True)
    assert balances(again, "ab") == {"a": 16, "b": 8}, "version 1 and version 2 commits recover together"


@pytest.mark.parametrize("shards", [1, 2])
def test_a_scatter_of_deposits_applies_in_order_in_bulk_and_one_by_one_when_a_target_is_not_an_entity_here(
        psystem, shards):
    # A table's host takes a Scatter's columns in bulk (actors/host.py _table_batch) when every target is an
    # entity of it, and expands it where one is not: either way each deposit applies once, in order.
    from actors.paths import entity_shard

    psystem.spawn(Accounts, ACC, entities=True, shards=shards)
    probe = psystem.probe()
    mine = [i for i in "abcdefgh" if entity_shard(i, shards) == entity_shard("a", shards)]
    clean = DepositChunk([f"{ACC}/{i}" for i in mine] * 2, list(range(1, 2 * len(mine) + 1)), [1] * len(mine) * 2)
    psystem.tell(f"{ACC}/{mine[0]}", clean, sender=probe.path)
    confirms = probe.receive_many(2 * len(mine), 20)
    assert [c.delivery_id for c in confirms] == list(range(1, 2 * len(mine) + 1)), "in order"
    assert balances(psystem, mine) == dict.fromkeys(mine, 2)
    base = 2 * len(mine)
    mixed = DepositChunk([f"{ACC}/a", f"{ACC}/a/b", f"{ACC}/a", f"{ACC}/{mine[-1]}", f"{ACC}/a"],
                         [base + k for k in range(1, 6)], [10, 99, 20, 30, 10])
    psystem.tell(f"{ACC}/a", mixed, sender=probe.path)
    confirms = probe.receive_many(4, 20)
    assert [c.delivery_id for c in confirms] == [base + 1, base + 3, base + 4, base + 5]
    assert balances(psystem, ["a", mine[-1]]) == {"a": 2 + 40, mine[-1]: 2 + 30}
    dead = wait_for(lambda: [d for d in psystem.dead_letters().recent if d.target == f"{ACC}/a/b"] or None, 10)
    assert len(dead) == 1, "the deposit for a path that is not an entity is a dead letter"
    psystem.tell(f"{ACC}/a", clean, sender=probe.path)  # redelivered: confirmed again, applied once
    assert len(probe.receive_many(2 * len(mine), 20)) == 2 * len(mine)
    assert balances(psystem, mine) == {i: 2 + (40 if i == "a" else 30 if i == mine[-1] else 0) for i in mine}


def test_a_table_host_that_starts_over_on_the_paths_it_knew_applies_every_scatter_in_order(make_system, tmp_path,
                                                                                          monkeypatch):
    # The host remembers the entity id of each path it validated (actors/host.py _scattered_ids), up to a bound,
    # then starts over. The bound is patched in this process, so the table's host must run here: the local base.
    import actors.host

    monkeypatch.setattr(actors.host, "_TABLE_IDS_KEPT", 3)
    system = make_system("local", journal=f"sqlite:///{tmp_path}/j.db", snapshot_store=f"sqlite:///{tmp_path}/s.db")
    system.spawn(Accounts, ACC, entities=True)
    probe = system.probe()
    ids = [f"e{k}" for k in range(8)]
    for round_no in range(3):  # each chunk's 8 paths overflow the bound: known, then forgotten, then known again
        first = 8 * round_no + 1
        chunk = DepositChunk([f"{ACC}/{i}" for i in ids], list(range(first, first + 8)), [round_no + 1] * 8)
        system.tell(f"{ACC}/{ids[0]}", chunk, sender=probe.path)
        assert [c.delivery_id for c in probe.receive_many(8, 20)] == list(range(first, first + 8)), "in order"
    for first in (25, 27):  # a bad path among known ones, twice: it is never remembered as an entity's
        system.tell(f"{ACC}/e0", DepositChunk([f"{ACC}/e0", f"{ACC}/e0/x"], [first, first + 1], [100, 100]),
                    sender=probe.path)
        assert [c.delivery_id for c in probe.receive_many(1, 20)] == [first], "the bad path's deposit not applied"
    assert balances(system, ids) == {i: 1 + 2 + 3 + (200 if i == "e0" else 0) for i in ids}
    dead = wait_for(lambda: [d for d in system.dead_letters().recent if d.target == f"{ACC}/e0/x"] or None, 10)
    assert len(dead) == 2


def test_commands_after_a_rejected_commit_in_the_same_group_commit_are_not_stored_on_its_state(base, make_system,
                                                                                              tmp_path):
    # Each batch handed to the table was one TableCommit, and a group commit could hold several: a message to the
    # table's own path between two entity messages of one incoming batch splits it. When the first commit was
    # rejected, the second was stored all the same, decided on the first one's state: a withdrawal of money whose
    # deposit was never stored (the balance read -5 after the table recovered).
    urls = {"journal": f"sqlite:///{tmp_path}/j.db", "snapshot_store": f"sqlite:///{tmp_path}/s.db"}
    system = make_system(base, **urls)
    system.spawn(Accounts, ACC, entities=True)
    assert system.ask(f"{ACC}/a", Deposit("/o", 1, 10)) == Confirm(1)  # (Deposited is now checked storable)
    probe = system.probe()
    system.tell_many([(f"{ACC}/a", Deposit("/o", 2, 5)),
                      (f"{ACC}/x", Deposit("/o", 3, 2**70)),   # the journal rejects the commit holding it
                      (ACC, "count"),                          # (the table's own path: the batch is split here)
                      (f"{ACC}/a", Withdraw(15))], sender=probe.path)  # 15 only with the rejected deposit of 5
    wait_for(lambda: any("rejected a commit" in e.reason for e in system.errors().recent), 10)
    assert system.ask(f"{ACC}/a", "balance") == 10, "neither the rejected deposit nor a withdrawal decided on it"
    assert [c.delivery_ids for c in commits(urls["journal"])] == [(1,)], "nothing of that group commit is stored"
    assert system.ask(f"{ACC}/a", Deposit("/o", 2, 5)) == Confirm(2), "the deposit's redelivery applies"
    system.tell(f"{ACC}/a", Withdraw(15))
    assert system.ask(f"{ACC}/a", "balance") == 0


def test_entity_events_of_a_sharded_table_read_with_another_shard_count_fail_instead_of_reading_none(psystem,
                                                                                                    tmp_path):
    # With shards=3, entity 4 of a table of 2 shards maps to shard 1, which exists: its commits were read, none
    # held entity 4 (it is in shard 0), and its events read as none. Each commit says its shard count.
    psystem.spawn(Accounts, ACC, entities=True, shards=2)
    for n in range(1, 9):
        assert psystem.ask(f"{ACC}/{n - 1}", Deposit("/o", n, n)) == Confirm(n)
    with open_journal(f"sqlite:///{tmp_path}/journal.db") as journal:
        assert [e.amount for _, e in entity_events(journal, ACC, "4", shards=2)] == [5]
        for wrong in (3, 4):
            with pytest.raises(ValueError, match=f"written with shards=2, not {wrong}: pass shards=2"):
                list(entity_events(journal, ACC, "4", shards=wrong))
        # Entity 0 with shards=3 maps to shard 2, which the table does not have: its events read as none too.
        with pytest.raises(ValueError, match="written with shards=2, not 3: pass shards=2"):
            list(entity_events(journal, ACC, "0", shards=3))


class TotalAccounts(Accounts):
    """Accounts whose own path answers "total" with self.reply (importable by host processes)."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "total":
            self.reply(sender, sum(self.entity_states().values()))
        else:
            super().receive_command(message, sender)


def test_a_reply_from_the_table_s_own_path_is_sent_without_waiting_for_an_entity_s_message(base, make_system,
                                                                                          tmp_path):
    # self.reply in receive_command joined the replies of the next batch of entity messages: with none coming,
    # it was never sent.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db", snapshot_store=f"sqlite:///{tmp_path}/s.db")
    system.spawn(TotalAccounts, ACC, entities=True)
    assert system.ask(f"{ACC}/a", Deposit("/o", 1, 10)) == Confirm(1)
    assert system.ask(f"{ACC}/b", Deposit("/o", 2, 5)) == Confirm(2)
    assert system.ask(ACC, "total", timeout=10) == 15
    probe = system.probe()
    # Asked in the same incoming batch as deposits: answered once they are durable, with them.
    system.tell_many([(f"{ACC}/a", Deposit("/o", 3, 1)), (ACC, "total"), (f"{ACC}/b", Deposit("/o", 4, 1))],
                     sender=probe.path)
    assert probe.receive_many(3, 10) == [Confirm(3), 16, Confirm(4)]

"""delete_messages of many large events runs a journal transaction per turn: the host's other entities go on."""

from __future__ import annotations

import itertools

import pytest

from journal import MAX_SEQUENCE_NR
from tests.conftest import pg_schema_url
from tests.persistence.long_delete_actors import Delete, Deleter, Fill, Ping

pytestmark = pytest.mark.timeout(120)
_ids = itertools.count(1)


@pytest.fixture(params=["sqlite", "postgresql"])
def journal_url(request, tmp_path) -> str:
    """A SQLite file's URL, or a fresh PostgreSQL schema's (dropped after the test's systems stopped: name it before
    make_system)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/journal.db"
    return pg_schema_url(request, "longdel")


@pytest.fixture
def dsystem(journal_url, base, make_system, tmp_path):
    """A system on `base` with that journal."""
    return make_system(base, journal=journal_url, snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")


@pytest.fixture
def filled(dsystem):
    """(probe, path of A, path of B): entity A of a Deleter host has 1,500 events of 32 KiB, B is its neighbour."""
    dsystem.spawn(Deleter, path="/user/d", entities=True)
    n = next(_ids)
    a, b = f"/user/d/a{n}", f"/user/d/b{n}"
    probe = dsystem.probe()
    probe.tell(a, Fill(1500))
    assert probe.receive(60) == ("filled", 1500)
    return probe, a, b


def _until(probe, last, count: int) -> list:
    """The next `count` replies, which must include `last`."""
    got = probe.receive_many(count, 60)
    assert last in got, got
    return got


def test_a_neighbour_is_served_while_a_long_delete_runs(filled):
    """B answers pings while A's delete of 1,500 events is not complete yet (before: not one, the host ran the
    whole delete in A's command), and the delete completes."""
    probe, a, b = filled
    probe.tell(a, Delete())
    for i in range(20):
        probe.tell(b, Ping(i, a))
    got = _until(probe, ("deleted", MAX_SEQUENCE_NR), 21)
    pongs = [m for m in got if m[0] == "pong"]
    assert len(pongs) == 20
    during = [m for m in pongs if m[2] is not None]
    assert during, f"B answered no ping before A's delete completed: {pongs}"
    probe.tell(a, "events")
    assert probe.receive(10) == []


def test_events_persisted_during_a_delete_are_kept(dsystem, filled):
    """A persists while its delete of everything runs: the delete keeps those events (its bound is the highest at
    the call), including after a new instance recovers."""
    probe, a, _ = filled
    probe.tell(a, Delete(then=5))
    got = _until(probe, ("deleted", MAX_SEQUENCE_NR), 6)
    assert sorted(m for m in got if m[0] == "persisted") == [("persisted", 1500 + i) for i in range(1, 6)]
    probe.tell(a, "events")
    assert probe.receive(10) == [1501, 1502, 1503, 1504, 1505]
    dsystem.stop(a)
    probe.tell(a, "events")
    assert probe.receive(10) == [1501, 1502, 1503, 1504, 1505]


def test_deletes_run_and_reply_in_call_order(filled):
    """A second delete asked while the first runs waits for it: the replies come in call order."""
    probe, a, _ = filled
    probe.tell(a, Delete())
    probe.tell(a, Delete(to=1500))
    assert probe.receive_many(2, 60) == [("deleted", MAX_SEQUENCE_NR), ("deleted", 1500)]
    probe.tell(a, "events")
    assert probe.receive(10) == []


def test_an_actor_stopped_during_its_delete_completes_it(dsystem, filled):
    """Stopped while its delete runs, the actor completes it before it goes: the next instance recovers nothing."""
    probe, a, _ = filled
    probe.tell(a, Delete())
    dsystem.stop(a)
    probe.tell(a, "events")
    got = probe.receive(30)
    if got == ("deleted", MAX_SEQUENCE_NR):  # (the delete was done before the stop came)
        got = probe.receive(10)
    assert got == []


def test_an_actor_restarted_during_its_delete_completes_it(filled):
    """Failing while its delete runs, the actor completes it before the restart: the new instance recovers
    nothing."""
    probe, a, _ = filled
    probe.tell(a, Delete())
    probe.tell(a, "boom")
    probe.tell(a, "events")
    got = probe.receive(30)
    if got == ("deleted", MAX_SEQUENCE_NR):  # (the delete was done before "boom" came)
        got = probe.receive(10)
    assert got == []


def test_a_journal_overriding_delete_messages_to_has_its_own_delete_run(tmp_path):
    """A plugin subclassing SqliteJournal that overrides only delete_messages_to: a delete runs that override (whole),
    not the delete_in_steps it inherits."""
    from journal import AtomicWrite, PersistentRepr
    from journal.sqlite import SqliteJournal
    from persistence.deletes import Deletes

    class Counted(SqliteJournal):
        def delete_messages_to(self, persistence_id: str, to_sequence_nr: int) -> None:
            self.calls.append(to_sequence_nr)
            super().delete_messages_to(persistence_id, to_sequence_nr)

    journal = Counted(str(tmp_path / "j.db"))
    journal.calls = []
    try:
        journal.write_messages([AtomicWrite(tuple(PersistentRepr(i, i, "p") for i in range(1, 301)))])
        replies: list = []
        Deletes(journal, "p", lambda pause: replies.append(("step", pause)), replies.append).add(MAX_SEQUENCE_NR)
        assert journal.calls == [MAX_SEQUENCE_NR] and len(replies) == 1 and replies[0].to_sequence_nr == MAX_SEQUENCE_NR
        assert list(journal.replay_messages("p")) == []
    finally:
        journal.close()

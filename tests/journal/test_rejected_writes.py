"""A write the journal rejects (a tag no backend can store) is that actor's rejection only, on each journal."""

from __future__ import annotations

import pytest

from journal import open_journal
from tests.conftest import pg_schema_url
from tests.journal.rejection_actors import Noted, Notes


@pytest.fixture(params=["sqlite", "postgresql"])
def journal_url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/journal.db"
    return pg_schema_url(request, "rejected")


@pytest.mark.timeout(120)
def test_a_tag_with_a_nul_rejects_that_actor_s_persist_and_the_other_actor_s_command_is_applied(
        journal_url, make_system, base):
    # Both commands reach the host in one dispatch, so both persists go to the journal in one group commit.
    # PostgreSQL failed the whole commit on the NUL (the good entity stopped, its command lost); SQLite stored
    # the event.
    system = make_system(base, journal=journal_url)
    system.spawn(Notes, "/user/notes", entities=True)
    good, bad = "/user/notes/good", "/user/notes/bad"
    for path in (good, bad):
        assert system.ask(path, "state", timeout=15) == ([], [])  # recovered
    probe = system.probe()
    system.tell_many([(good, ("hello", "ok")), (bad, ("evil", "a\x00b"))], sender=probe.path)
    assert probe.receive(10) == "stored hello"
    probe.expect_no_message(0.5)  # the rejected persist's handler never runs
    assert system.ask(good, "state", timeout=15) == (["hello"], [])
    notes, rejected = system.ask(bad, "state", timeout=15)
    assert notes == [] and len(rejected) == 1, rejected
    assert rejected[0].startswith("SerializationError") and repr(bad) in rejected[0] and "NUL" in rejected[0]
    # The rejected actor goes on (Akka's onPersistRejected): its next persist is stored.
    system.tell(bad, ("fine", "ok"), sender=probe.path)
    assert probe.receive(10) == "stored fine"
    with open_journal(journal_url) as j:
        assert [e.event for e in j.events_by_persistence_id(good)] == [Noted("hello", "ok")]
        assert [e.event for e in j.events_by_persistence_id(bad)] == [Noted("fine", "ok")]
        assert [e.persistence_id for e in j.events_by_tag("ok")] == [good, bad]
    # Reported for the rejected actor only (a rejection, not a failure that stopped it).
    errors = system.errors().recent
    assert not [e for e in errors if e.path == good], errors
    assert [e.path for e in errors if "NUL" in e.reason and "rejected" in e.reason] == [bad], errors

"""Tags decided at persist time (PersistentActor.tags_for) and read back with Journal.events_by_tag."""

from __future__ import annotations

import pytest

from journal import open_journal
from tests.conftest import pg_schema_url
from tests.persistence.tagging_actors import AppliedMover, BadTags, Moved, Mover


@pytest.fixture(params=["sqlite", "postgresql"])
def journal_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/tags.db"
    return pg_schema_url(request, "tags")


def _by_tag(url: str, tag: str) -> list[tuple[str, int, object]]:
    with open_journal(url) as j:
        return [(e.persistence_id, e.sequence_nr, e.event) for e in j.events_by_tag(tag)]


@pytest.mark.timeout(120)
def test_events_are_tagged_at_persist_time_and_queried_by_tag(journal_url, make_system, base):
    system = make_system(base, journal=journal_url)
    system.spawn(Mover, "/user/movers", entities=True)
    assert system.ask("/user/movers/a", 5) == "done"
    assert system.ask("/user/movers/b", 150) == "done"
    assert system.ask("/user/movers/a", [200, 7]) == "done"
    moves = _by_tag(journal_url, "moves")
    assert sorted(moves, key=lambda r: (r[0], r[1])) == [
        ("/user/movers/a", 1, Moved(5)), ("/user/movers/a", 2, Moved(200)), ("/user/movers/a", 3, Moved(7)),
        ("/user/movers/b", 1, Moved(150))]
    assert _by_tag(journal_url, "big") == [("/user/movers/b", 1, Moved(150)), ("/user/movers/a", 2, Moved(200))]
    assert _by_tag(journal_url, "none") == []


@pytest.mark.timeout(120)
def test_an_idempotent_receiver_tags_its_users_events_not_its_batches(journal_url, make_system, base):
    system = make_system(base, journal=journal_url)
    system.spawn(AppliedMover, "/user/applied", entities=True)
    probe = system.probe()
    # Several applications in one batch to one entity: gathered into one AppliedBatch, tagged as a whole.
    system.tell_many([("/user/applied/x", (i, a)) for i, a in enumerate([1, 500, 2], 1)]
                     + [("/user/applied/y", (1, 3))], sender=probe.path)
    assert system.ask("/user/applied/x", "sync") == "done" and system.ask("/user/applied/y", "sync") == "done"
    big = _by_tag(journal_url, "big")
    assert [pid for pid, _, _ in big] == ["/user/applied/x"]
    assert Moved(500) in big[0][2].events


@pytest.mark.timeout(60)
def test_tags_for_returning_a_string_is_refused_at_the_persist_call(make_system, base, tmp_path):
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(BadTags, "/user/bad")
    reply = system.ask("/user/bad", "go")
    assert "tags_for(Moved) must return an iterable of non-empty str" in reply

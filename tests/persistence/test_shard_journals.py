"""Per-host journals: `spawn(..., journal="sqlite:///.../x-{shard}.db")` gives every shard its own file."""

from __future__ import annotations

import pytest

from actors import SpawnFailed
from actors.paths import shard_of
from journal.sqlite import SqliteJournal
from tests.persistence.fixtures import Ops

pytestmark = pytest.mark.timeout(120)

IDS = [str(i) for i in range(12)]


def stored_ids(path) -> dict[str, int]:
    """Highest sequence nr of every /user/s entity in one SQLite file."""
    journal = SqliteJournal(str(path))
    try:
        return {i: journal.highest_sequence_nr(f"/user/s/{i}") for i in IDS}
    finally:
        journal.close()


def test_each_shard_journals_to_its_own_file_and_keeps_that_layout(system, tmp_path):
    template = f"sqlite:///{tmp_path}/s-{{shard}}.db"
    system.spawn("tests.persistence.fixtures:Scripted", "/user/s", entities=True, shards=2, journal=template)
    for i in IDS:
        assert system.ask(f"/user/s/{i}", Ops(i, ("p:a",))) == f"{i}-a-1"

    for k in range(2):
        mine = {i: int(shard_of(f"/user/s/{i}", "/user/s", 2) == k) for i in IDS}
        assert stored_ids(tmp_path / f"s-{k}.db") == mine, f"shard {k}'s file holds exactly its entities' events"

    system.stop("/user/s")
    system.spawn("tests.persistence.fixtures:Scripted", "/user/s", entities=True, shards=2, journal=template)
    for i in IDS:
        assert system.ask(f"/user/s/{i}", "state") == (f"{i}-a",), "recovered from its shard's file"
    system.stop("/user/s")

    with pytest.raises(SpawnFailed, match=r"belongs to shard \d of 2 of /user/s.*Start /user/s with shards=2"):
        system.spawn("tests.persistence.fixtures:Scripted", "/user/s", entities=True, shards=3, journal=template)


@pytest.mark.parametrize("url, problem", [
    ("accounts.db", "is a file path, not a URL: .* give sqlite://accounts.db "),
    ("accounts:db", "must be a URL"),
    ("sqlite:///data/{path}-{shard}.db", "the only placeholder"),
])
def test_a_bad_per_host_journal_url_is_refused_before_spawning(system, url, problem):
    with pytest.raises(ValueError, match=problem):
        system.spawn("tests.persistence.fixtures:Scripted", "/user/s", entities=True, journal=url)

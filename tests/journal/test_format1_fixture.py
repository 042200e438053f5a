"""A journal written before issue 16 (format 1: nested ext values) is read by today's code, event by event.

tests/journal/fixtures/format1.db was written by main at 782fe88 with fixtures/make_format1.py; the values
it holds are built by fixtures/fixture_spec.py, from the same definitions, so every event and snapshot is
compared with what was written: payload (with its container types), manifest, writer, tags, metadata.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import sqlite3
from contextlib import closing
from typing import Any

import pytest

from journal import AtomicWrite, PersistentRepr, open_journal, open_snapshot_store, verify
from journal.records import decode_rows
from tests.journal import fixture_types
from tests.journal.fixtures import fixture_spec

pytestmark = pytest.mark.timeout(60)

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "format1.db")


def typed(v: Any) -> Any:
    """`v` with the type of every container and object kept, so a tuple read back as a list differs."""
    t = type(v)
    if t in (list, tuple):
        return (t.__name__, [typed(x) for x in v])
    if t in (set, frozenset):
        return (t.__name__, sorted(repr(typed(x)) for x in v))
    if t is dict:
        return ("dict", sorted((repr(typed(k)), repr(typed(x))) for k, x in v.items()))
    if dataclasses.is_dataclass(v):
        return (t.__qualname__, [typed(getattr(v, f.name)) for f in dataclasses.fields(v)])
    return (t.__name__, v)


@pytest.fixture
def url(tmp_path: Any) -> str:
    """A copy of the fixture (opening a journal may write to its file)."""
    path = tmp_path / "format1.db"
    shutil.copyfile(FIXTURE, path)
    return f"sqlite://{path}"


def test_the_fixture_is_format_1() -> None:
    """Every stored record starts with the writer uuid (a str), not the format 2 marker."""
    with closing(sqlite3.connect(f"file:{FIXTURE}?mode=ro", uri=True)) as db:
        blobs = [row[0] for row in db.execute("SELECT record FROM journal")]
        snapshots = [row[0] for row in db.execute("SELECT snapshot FROM snapshot")]
    assert len(blobs) == len(fixture_spec.events(fixture_types, fixture_types.Renamed))
    assert all(b[1] == 0xA8 for b in blobs)  # fixstr of 8: "writer-1"
    assert all(b[0] == 0x92 for b in snapshots)  # [metadata, snapshot]
    assert any(b"\xc7" in b for b in blobs)  # ext values (format 1's nesting)


def test_every_event_of_the_format_1_journal_reads_as_written(url: str) -> None:
    expected = fixture_spec.events(fixture_types, fixture_types.Renamed)
    with open_journal(url) as journal:
        by_pid: dict[str, list[PersistentRepr]] = {}
        for pid in sorted({e[0] for e in expected}):
            by_pid[pid] = list(journal.replay_messages(pid))
    read = {(r.persistence_id, r.sequence_nr): r for rs in by_pid.values() for r in rs}
    assert len(read) == len(expected)
    for pid, seq, payload, manifest, tags, meta in expected:
        r = read[(pid, seq)]
        assert typed(r.payload) == typed(payload), (pid, seq)
        assert (r.manifest, r.writer_uuid, r.tags) == (manifest, "writer-1", frozenset(tags)), (pid, seq)
        assert typed(r.metadata) == typed(meta) and r.timestamp > 1_700_000_000_000, (pid, seq)
    upcast = [r.payload for r in read.values() if type(r.payload) is fixture_types.Renamed]
    assert upcast == [fixture_types.Renamed(5, "EUR")]  # stored at version 1, read at version 2


def test_every_snapshot_of_the_format_1_journal_loads_as_written(url: str) -> None:
    with open_snapshot_store(url) as store:
        for pid, seq, snapshot in fixture_spec.snapshots(fixture_types, fixture_types.Renamed):
            selected = store.load(pid)
            assert selected is not None
            assert selected.metadata.sequence_nr == seq and selected.metadata.metadata == {"by": "fixture"}
            assert typed(selected.snapshot) == typed(snapshot), pid


def test_new_events_after_old_ones_replay_together_and_verify(url: str) -> None:
    """A journal written on by today's code holds both formats: replay, verify and queries read both."""
    new = fixture_types.Node("new", ((1, 2), {fixture_types.Renamed(3, "USD")}))
    with open_journal(url) as journal:
        high = journal.highest_sequence_nr("fixture-0")
        assert journal.write_messages([AtomicWrite([PersistentRepr(new, high + 1, "fixture-0", writer_uuid="w2",
                                                                   tags=frozenset({"even"}))])]) == [None]
        replayed = list(journal.replay_messages("fixture-0"))
        assert typed(replayed[-1].payload) == typed(new) and replayed[-1].writer_uuid == "w2"
        assert [r.sequence_nr for r in replayed] == list(range(1, high + 2))
        rows = journal._read("fixture-0", 1, high + 1, 1000)
        assert [r.sequence_nr for r in decode_rows("fixture-0", rows)] == list(range(1, high + 2))
        assert [e.sequence_nr for e in journal.events_by_tag("even") if e.persistence_id == "fixture-0"][-1] == high + 1
    report = verify(url)
    expected = len(fixture_spec.events(fixture_types, fixture_types.Renamed)) + 1
    assert report.ok and report.records_checked == expected and report.snapshots_checked == 3

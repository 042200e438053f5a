"""SQLite schema 2 (integer persistence ids): migration of schema 1 files, crash safety, newer files, old SQL.

Schema 1 files here: fixtures/schema1.db (written by main before this change, see make_schema1.py),
fixtures/format1.db (older still: format 1 records), and journals written in the test with schema 1's
DDL (copied below from main) and real encoded rows.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import threading
from contextlib import closing
from typing import Any

import pytest

import journal.sqlite
from journal import (
    AtomicWrite,
    JournalError,
    PersistentRepr,
    open_journal,
    open_snapshot_store,
    sqlite_schema,
    verify,
)
from journal.api import now_millis
from journal.records import encode_writes
from journal.sqlite_schema import SCHEMA_VERSION
from journal.sqlite_wal import scan

pytestmark = pytest.mark.timeout(120)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures")
MAX = 2**63 - 1

# Schema 1's DDL and statements, as main wrote and read them before schema 2 (journal/sqlite.py at 2dda9b8).
SCHEMA_1 = (
    """CREATE TABLE IF NOT EXISTS journal (
        ordering INTEGER PRIMARY KEY,
        persistence_id TEXT NOT NULL,
        sequence_nr INTEGER NOT NULL,
        record BLOB NOT NULL,
        checksum INTEGER NOT NULL,
        UNIQUE (persistence_id, sequence_nr))""",
    """CREATE TABLE IF NOT EXISTS tags (
        tag TEXT NOT NULL,
        ordering INTEGER NOT NULL,
        PRIMARY KEY (tag, ordering)) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS highest_sequence_nr (
        persistence_id TEXT PRIMARY KEY,
        sequence_nr INTEGER NOT NULL) WITHOUT ROWID""",
    """CREATE TABLE IF NOT EXISTS snapshot (
        persistence_id TEXT NOT NULL,
        sequence_nr INTEGER NOT NULL,
        timestamp INTEGER NOT NULL,
        snapshot BLOB NOT NULL,
        checksum INTEGER NOT NULL,
        PRIMARY KEY (persistence_id, sequence_nr)) WITHOUT ROWID""",
)
INSERT_1 = "INSERT INTO journal (persistence_id, sequence_nr, record, checksum) VALUES (?, ?, ?, ?)"
INSERT_TAG_1 = ("INSERT INTO tags (tag, ordering) "
                "SELECT ?, ordering FROM journal WHERE persistence_id = ? AND sequence_nr = ?")
REPLAY_1 = ("SELECT sequence_nr, record, checksum FROM journal "
            "WHERE persistence_id = ? AND sequence_nr >= ? AND sequence_nr <= ? ORDER BY sequence_nr LIMIT ?")


def _rows(path: str) -> list[tuple[Any, ...]]:
    """Every row of the `journal` table (schema 1) or view (schema 2), read with plain sqlite3."""
    with closing(sqlite3.connect(path)) as db:
        return db.execute("SELECT ordering, persistence_id, sequence_nr, record, checksum FROM journal "
                          "ORDER BY ordering").fetchall()


def _tables(path: str) -> tuple[int, dict[str, str], list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """(user_version, {name: type} of the schema, tags rows, highest_sequence_nr rows)."""
    with closing(sqlite3.connect(path)) as db:
        version = db.execute("PRAGMA user_version").fetchone()[0]
        names = dict(db.execute("SELECT name, type FROM sqlite_master WHERE name NOT LIKE 'sqlite_%'").fetchall())
        tags = db.execute("SELECT tag, ordering FROM tags ORDER BY 1, 2").fetchall()
        highest = db.execute("SELECT * FROM highest_sequence_nr ORDER BY 1").fetchall()
    return version, names, tags, highest


def _copy(name: str, tmp_path: Any) -> str:
    path = str(tmp_path / name)
    shutil.copyfile(os.path.join(FIXTURES, name), path)
    os.chmod(path, 0o600)
    return path


def _write_schema_1(path: str, ids: int, per_id: int, size: int = 40) -> None:
    """A schema 1 journal of real encoded events (`ids` persistence ids, `per_id` events each), in a WAL file."""
    writes = [AtomicWrite([PersistentRepr({"n": n, "pad": "x" * size}, n, f"p-{i}", writer_uuid="w",
                                          tags=frozenset({"t"}) if n == 1 else frozenset())])
              for n in range(1, per_id + 1) for i in range(ids)]
    batch, rejected = encode_writes(writes, now_millis())
    assert rejected == [None] * len(writes)
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        for ddl in SCHEMA_1:
            db.execute(ddl)
        db.execute("BEGIN")
        db.executemany(INSERT_1, batch.rows)
        db.executemany(INSERT_TAG_1, batch.tag_rows)
        db.execute("COMMIT")
    os.chmod(path, 0o600)


def test_main_s_schema_1_journal_migrates_and_reads_back_every_event(tmp_path) -> None:
    path = _copy("schema1.db", tmp_path)
    before = _rows(path)
    version, names, tags, highest = _tables(path)
    assert version == 0 and names["journal"] == "table" and ("", 16) in [(r[1], r[0]) for r in before]
    url = f"sqlite://{path}"
    with open_journal(url) as j:
        assert {p: j.highest_sequence_nr(p) for p in ("acc-1", "acc-2", "half", "gone", "never")} == {
            "acc-1": 7, "acc-2": 3, "half": 4, "gone": 2, "never": 0}
        replayed = {p: [(r.sequence_nr, r.payload, r.metadata, r.tags) for r in j.replay_messages(p)]
                    for p in ("acc-1", "acc-2", "half", "gone")}
        assert list(j.current_persistence_ids()) == ["acc-1", "acc-2", "gone", "half"]
        tagged = [(e.offset, e.persistence_id, e.sequence_nr) for e in j.events_by_tag("even")]
        by_id = [(e.offset, e.sequence_nr) for e in j.events_by_persistence_id("acc-1")]
        summaries = [(s.persistence_id, s.highest_sequence_nr, s.event_count) for s in j.summaries()]
        tail = [(e.offset, e.persistence_id, e.sequence_nr) for e in j.tail(3)]
    assert replayed["acc-1"][2] == (3, {"pid": "acc-1", "n": 3, "t": (3, [3])}, {"m": 3}, frozenset())
    assert [s for s, *_ in replayed["acc-1"]] == list(range(1, 8)) and replayed["half"][0][0] == 3
    assert replayed["gone"] == [] and replayed["acc-2"][1][3] == frozenset({"even"})
    assert tagged == [(2, "acc-1", 2), (4, "acc-1", 4), (7, "acc-2", 2), (12, "half", 4), (13, "acc-1", 6)]
    assert by_id == [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5), (13, 6), (14, 7)]
    assert summaries == [("acc-1", 7, 7), ("acc-2", 3, 3), ("gone", 2, 0), ("half", 4, 2)]
    assert tail == [(12, "half", 4), (13, "acc-1", 6), (14, "acc-1", 7)]
    # The rows themselves (offsets, tombstone, bytes, checksums), tags and highest numbers are as written.
    assert _rows(path) == before
    version, names, tags_after, highest_after = _tables(path)
    assert (version, names["journal"], names["events"], names["persistence_ids"]) == (
        SCHEMA_VERSION, "view", "table", "table")
    assert (tags_after, highest_after) == (tags, highest)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with open_snapshot_store(url) as store:
        snap = store.load("acc-1")
        assert snap is not None and snap.snapshot == {"balance": 3} and snap.metadata.sequence_nr == 3
    report = verify(url)
    assert report.ok and (report.records_checked, report.snapshots_checked) == (12, 1)


def test_a_migrated_journal_takes_new_writes_and_deletes_without_reusing_an_offset(tmp_path) -> None:
    url = f"sqlite://{_copy('schema1.db', tmp_path)}"
    with open_journal(url) as j:
        writes = [AtomicWrite([PersistentRepr("new", 8, "acc-1", tags=frozenset({"even"}))]),
                  AtomicWrite([PersistentRepr("first", 1, "fresh")])]
        assert j.write_messages(writes) == [None, None]
        with pytest.raises(JournalError, match="sequence nr 2 of persistence id 'acc-2' already exists"):
            j.write_messages([AtomicWrite([PersistentRepr("dup", 2, "acc-2")])])
        assert [e.offset for e in j.events_by_persistence_id("acc-1")][-1] == 17  # after the tombstone (16)
        assert j.highest_sequence_nr("gone") == 2
        assert j.write_messages([AtomicWrite([PersistentRepr("again", 3, "gone")])]) == [None]
        j.delete_messages_to("fresh", MAX)  # not the newest: deleted, its id kept
        j.delete_messages_to("gone", MAX)  # the newest offset: the tombstone moves to it
        assert [r.sequence_nr for r in j.replay_messages("gone")] == [] and j.highest_sequence_nr("gone") == 3
        assert j.write_messages([AtomicWrite([PersistentRepr("later", 9, "acc-1")])]) == [None]
        assert [e.offset for e in j.events_by_persistence_id("acc-1", 9)] == [20]
        assert list(j.current_persistence_ids()) == ["acc-1", "acc-2", "fresh", "gone", "half"]
        assert [e.sequence_nr for e in j.events_by_tag("even", 13)] == [8]


def test_a_live_persistence_ids_of_a_migrated_journal_polls_only_new_ids_yet_yields_one_known_by_its_highest(
        tmp_path) -> None:
    """A poll reads the ids created since the poll before (by persistence_ids' integer id), not the whole listing;
    the first poll also yields "gone", whose events were all deleted before the migration (so it is only in
    highest_sequence_nr, never in persistence_ids), and once only, though writing it again gives it an integer id."""
    url = f"sqlite://{_copy('schema1.db', tmp_path)}"
    with open_journal(url) as j:
        poll = j._persistence_ids_poller()
        assert sorted(poll()) == ["acc-1", "acc-2", "gone", "half"]
        assert list(poll()) == []
        with j.persistence_ids(live=True, poll_interval=0.01) as q:
            assert [next(q) for _ in range(4)] == ["acc-1", "acc-2", "gone", "half"]
            assert j.write_messages([AtomicWrite([PersistentRepr("again", 3, "gone")]),
                                     AtomicWrite([PersistentRepr("first", 1, "fresh")])]) == [None, None]
            assert next(q) == "fresh"
            j.delete_messages_to("fresh", MAX)
            assert j.write_messages([AtomicWrite([PersistentRepr("again", 2, "fresh")]),
                                     AtomicWrite([PersistentRepr("first", 1, "later")])]) == [None, None]
            assert next(q) == "later"
        assert sorted(poll()) == ["fresh", "gone", "later"]  # ("gone" again: a poll may repeat an id, the query not)
        assert list(poll()) == []


def test_the_format_1_fixture_migrates_too(tmp_path) -> None:
    path = _copy("format1.db", tmp_path)
    before = _rows(path)
    with open_journal(f"sqlite://{path}") as j:
        assert j.highest_sequence_nr("fixture-0") > 0
    assert _rows(path) == before and _tables(path)[0] == SCHEMA_VERSION


def test_a_journal_of_a_newer_schema_is_refused_clearly(tmp_path) -> None:
    path = str(tmp_path / "j.db")
    with open_journal(f"sqlite://{path}") as j:
        assert j.write_messages([AtomicWrite([PersistentRepr("e", 1, "p")])]) == [None]
    with closing(sqlite3.connect(path)) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(JournalError, match=rf"holds journal schema {SCHEMA_VERSION + 1}, written by a newer "
                                           rf"Reprise; this one reads schemas up to {SCHEMA_VERSION}"):
        open_journal(f"sqlite://{path}")


def test_sql_written_for_schema_1_still_reads_and_writes_a_schema_2_file(tmp_path) -> None:
    """Tools and code of before (they name the `journal` table) work through the view and its triggers."""
    path = str(tmp_path / "j.db")
    with open_journal(f"sqlite://{path}") as j:
        assert j.write_messages([AtomicWrite([PersistentRepr("e", n, "p")]) for n in (1, 2)]) == [None, None]
        with closing(sqlite3.connect(path, isolation_level=None)) as old:
            for ddl in SCHEMA_1:  # the old code's open: a no-op now
                old.execute(ddl)
            batch, _ = encode_writes([AtomicWrite([PersistentRepr("by old code", 3, "p", tags=frozenset({"t"})),
                                                   PersistentRepr("by old code", 4, "p")]),
                                      AtomicWrite([PersistentRepr("new id", 1, "q")])], now_millis())
            old.execute("BEGIN IMMEDIATE")
            old.executemany(INSERT_1, batch.rows)
            old.executemany(INSERT_TAG_1, batch.tag_rows)
            old.execute("COMMIT")
            with pytest.raises(sqlite3.IntegrityError):
                old.execute(INSERT_1, batch.rows[0])
            assert [r[0] for r in old.execute(REPLAY_1, ("p", 1, MAX, MAX))] == [1, 2, 3, 4]
            old.execute("UPDATE journal SET checksum = checksum + 1 WHERE persistence_id = 'p' AND sequence_nr = 4")
            old.execute("DELETE FROM journal WHERE persistence_id = ? AND sequence_nr <= ?", ("p", 1))
        assert [r.payload for r in j.replay_messages("p", 2, 3)] == ["e", "by old code"]
        assert [r.payload for r in j.replay_messages("q")] == ["new id"]
        assert [(e.persistence_id, e.sequence_nr) for e in j.events_by_tag("t")] == [("p", 3)]
        report = j.verify()
    assert [(p.persistence_id, p.sequence_nr) for p in report.problems] == [("p", 4)]


def test_ids_drawn_by_a_rolled_back_write_are_not_kept(tmp_path) -> None:
    """A rejected write's new ids are rolled back: another writer may get them for other persistence ids."""
    path = str(tmp_path / "j.db")
    with open_journal(f"sqlite://{path}") as j:
        assert j.write_messages([AtomicWrite([PersistentRepr("e", 1, "p")])]) == [None]
        with pytest.raises(JournalError, match="appears twice"):
            j.write_messages([AtomicWrite([PersistentRepr("x", 1, "x")]), AtomicWrite([PersistentRepr("x", 1, "x")])])
        with closing(sqlite3.connect(path, isolation_level=None)) as other:  # as another process would
            batch, _ = encode_writes([AtomicWrite([PersistentRepr("y", 1, "y")])], now_millis())
            other.execute(INSERT_1, batch.rows[0])
            assert other.execute("SELECT id FROM persistence_ids WHERE persistence_id = 'y'").fetchone() == (2,)
        assert j.write_messages([AtomicWrite([PersistentRepr("x", 1, "x")])]) == [None]
        assert [r.payload for r in j.replay_messages("x")] == ["x"]
        assert [r.payload for r in j.replay_messages("y")] == ["y"]


@pytest.mark.parametrize("ids, per_id", [(300, 1), (2, 150)])
def test_both_insert_forms_store_a_batch_whole_or_reject_it_whole(tmp_path, ids, per_id) -> None:
    """Many ids (executemany) or few ids with long runs (100-row statements): a duplicate rejects all."""
    with open_journal(f"sqlite://{tmp_path}/j.db") as j:
        assert j.write_messages([AtomicWrite([PersistentRepr("old", per_id, "p-1")])]) == [None]
        writes = [AtomicWrite([PersistentRepr(n, n, f"p-{i}")]) for i in range(ids) for n in range(1, per_id + 1)]
        with pytest.raises(JournalError, match=f"sequence nr {per_id} of persistence id 'p-1' already exists"):
            j.write_messages(writes)
        assert [j.highest_sequence_nr(f"p-{i}") for i in (0, 1)] == [0, per_id]
        j.delete_messages_to("p-1", MAX)
        assert j.write_messages(writes) == [None] * len(writes)
        assert [r.payload for r in j.replay_messages(f"p-{ids - 1}")] == list(range(1, per_id + 1))


_KILLED_MID_MIGRATION = """
import os, signal, sys
import journal.sqlite, journal.sqlite_schema as schema
journal.sqlite._CACHE_KIB = 64  # the migration's pages spill into the WAL before its commit
step, stop_after = schema._step, sys.argv[2]
def stopping(conn, sql):
    step(conn, sql)
    if sql.startswith(stop_after):
        os.kill(os.getpid(), signal.SIGKILL)
schema._step = stopping
journal.open_journal("sqlite://" + sys.argv[1])
sys.exit(3)  # the migration never ran that statement
"""


@pytest.mark.parametrize("stop_after", ["INSERT INTO events", "DROP TABLE journal", "PRAGMA user_version"])
def test_a_migration_killed_midway_leaves_a_journal_that_opens_and_migrates(tmp_path, stop_after) -> None:
    path = str(tmp_path / "j.db")
    _write_schema_1(path, ids=50, per_id=40, size=300)  # ~700 KB: far more than the killed process's cache
    before = _rows(path)
    done = subprocess.run([sys.executable, "-c", _KILLED_MID_MIGRATION, path, stop_after], cwd=ROOT,
                          env={**os.environ, "PYTHONPATH": ROOT}, capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    with open(path + "-wal", "rb") as f:
        s = scan(f.read())
    assert s.valid > s.committed, "the killed migration must have left uncommitted frames in the WAL"
    with open_journal(f"sqlite://{path}") as j:
        assert [r.sequence_nr for r in j.replay_messages("p-7")] == list(range(1, 41))
        assert j.verify().ok and len(list(j.events_by_tag("t"))) == 50
    assert _rows(path) == before and _tables(path)[0] == SCHEMA_VERSION
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


def test_two_connections_finding_schema_1_at_once_migrate_it_once(tmp_path, monkeypatch) -> None:
    """Both read version 0 before either holds the write lock: the second finds the first's migration done."""
    path = str(tmp_path / "j.db")
    _write_schema_1(path, ids=20, per_id=20)
    before = _rows(path)
    ran: list[str] = []
    step = sqlite_schema._step
    monkeypatch.setattr(sqlite_schema, "_step", lambda conn, sql: (ran.append(sql), step(conn, sql)))
    blocker = sqlite3.connect(path, isolation_level=None)
    blocker.execute("BEGIN IMMEDIATE")  # both connections must read the version before either migrates
    waiting = threading.Semaphore(0)
    errors: list[BaseException] = []

    def open_one() -> None:
        with closing(sqlite3.connect(path, isolation_level=None, timeout=30)) as conn:
            def begin() -> None:
                waiting.release()
                conn.execute("BEGIN IMMEDIATE")  # waits for the blocker, then for the other migration

            def rollback() -> None:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            try:
                sqlite_schema.ensure(conn, path, begin, rollback)
            except BaseException as e:
                errors.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(2)]
    for t in threads:
        t.start()
    try:
        assert waiting.acquire(timeout=30) and waiting.acquire(timeout=30), "both must reach the write lock"
    finally:
        blocker.execute("ROLLBACK")
        blocker.close()
        for t in threads:
            t.join(timeout=60)
    assert errors == [] and ran.count("DROP TABLE journal") == 1
    assert _rows(path) == before and _tables(path)[0] == SCHEMA_VERSION
    with open_journal(f"sqlite://{path}") as j:
        assert [r.sequence_nr for r in j.replay_messages("p-3")] == list(range(1, 21))


def test_a_writer_that_forgets_its_cached_ids_looks_them_up_again(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(journal.sqlite, "_IDS_CACHED", 3)
    with open_journal(f"sqlite://{tmp_path}/j.db") as j:
        for n in (1, 2):
            writes = [AtomicWrite([PersistentRepr(n, n, f"p-{i}")]) for i in range(5)]
            assert j.write_messages(writes) == [None] * 5
        assert all([r.payload for r in j.replay_messages(f"p-{i}")] == [1, 2] for i in range(5))
        with closing(sqlite3.connect(j.path)) as db:
            assert db.execute("SELECT count(*) FROM persistence_ids").fetchone() == (6,)  # '' and p-0 .. p-4


def test_a_schema_1_file_of_the_autoincrement_era_keeps_the_offsets_it_handed_out(tmp_path) -> None:
    """The first schema 1 files (journal/sqlite.py before e2bdc34) drew offsets with AUTOINCREMENT and deleted the
    newest events without a tombstone: only sqlite_sequence remembered their offsets. The migration must keep that
    high-water mark, or the next write reuses an offset a projection already read past (and never sees it)."""
    path = str(tmp_path / "j.db")
    writes = [AtomicWrite([PersistentRepr(n, n, "p-1", writer_uuid="w", tags=frozenset({"t"}))])
              for n in range(1, 6)]
    batch, rejected = encode_writes(writes, now_millis())
    assert rejected == [None] * len(writes)
    with closing(sqlite3.connect(path, isolation_level=None)) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute(SCHEMA_1[0].replace("ordering INTEGER PRIMARY KEY", "ordering INTEGER PRIMARY KEY AUTOINCREMENT"))
        for ddl in SCHEMA_1[1:]:
            db.execute(ddl)
        db.executemany(INSERT_1, batch.rows)
        db.executemany(INSERT_TAG_1, batch.tag_rows)
        # That era's delete of the newest events (4 and 5): the rows went, sqlite_sequence kept 5.
        db.execute("INSERT INTO highest_sequence_nr VALUES ('p-1', 5)")
        db.execute("DELETE FROM tags WHERE ordering IN (SELECT ordering FROM journal WHERE sequence_nr >= 4)")
        db.execute("DELETE FROM journal WHERE sequence_nr >= 4")
        assert db.execute("SELECT seq FROM sqlite_sequence WHERE name = 'journal'").fetchone() == (5,)
    os.chmod(path, 0o600)
    with open_journal(f"sqlite://{path}") as j:
        assert j.newest_offset() == 3 and j.highest_sequence_nr("p-1") == 5
        assert j.write_messages([AtomicWrite([PersistentRepr("new", 1, "p-2", tags=frozenset({"t"}))])]) == [None]
        assert [(e.persistence_id, e.offset) for e in j.events_by_tag("t", 5)] == [("p-2", 6)]
        assert [e.sequence_nr for e in j.all_events()] == [1, 2, 3, 1]
        assert j.verify().ok

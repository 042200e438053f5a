"""The SQLite journal's tables, their version (`PRAGMA user_version`), and the migration from older files.

Schema 2 (written today): events are keyed by an integer persistence id, so the unique index every event
writes a page of holds (integer, sequence nr) instead of (text, sequence nr): bench/PROFILE.md §10.

* `persistence_ids (id INTEGER PRIMARY KEY, persistence_id TEXT UNIQUE)`: one row per persistence id ever
  written, never deleted (so writers may cache them: see journal.sqlite); id 0 is '', the
  tombstone that keeps the newest offset (see journal.sqlite).
* `events (ordering INTEGER PRIMARY KEY, pid, sequence_nr, record, checksum)` with a unique index on
  (pid, sequence_nr); `ordering` is the global offset, as before.
* `journal`, a view with schema 1's table's columns (ordering, persistence_id, sequence_nr, record,
  checksum), writable through INSTEAD OF triggers: ad-hoc SQL, tools and code written for schema 1 read
  and write a schema 2 file as before (more slowly: the journal's own statements use the tables).
* `tags`, `highest_sequence_nr` and `snapshot` are as in schema 1.

Schema 1 (user_version 0, a `journal` table keyed by the text persistence id) is migrated when a file is
opened: in one transaction (a crash or SIGKILL at any point leaves schema 1 whole, migrated at the next
open), ids assigned in persistence id order, rows copied in offset order with their offsets (and a tombstone at
the greatest offset an AUTOINCREMENT file of the first schema 1 code handed out), the unique
index built after the copy (a sort, not one index page per row), and the file (with its -wal and -shm) made
private (0600) as a new journal is. A file with a newer schema is refused.
Cost, measured: 1,000,000 events (220 MB) migrate in ~2 s, holding the write lock (other processes' writes
wait their busy timeout); the transaction passes through the WAL (~400 MB here, kept on disk until the
file's last connection closes), and the old table's pages stay in the file as free pages that later writes
reuse (`VACUUM` returns them to the file system).
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Callable

from journal.errors import JournalError, NotAJournal

__all__ = ["SCHEMA_VERSION", "ensure"]

SCHEMA_VERSION = 2

_COMMON = (
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

_IDS = ("CREATE TABLE persistence_ids (id INTEGER PRIMARY KEY, persistence_id TEXT NOT NULL UNIQUE)",
        "INSERT INTO persistence_ids (id, persistence_id) VALUES (0, '')")
_EVENTS = ("CREATE TABLE events (ordering INTEGER PRIMARY KEY, pid INTEGER NOT NULL, sequence_nr INTEGER NOT NULL, "
           "record BLOB NOT NULL, checksum INTEGER NOT NULL)")
_INDEX = "CREATE UNIQUE INDEX events_pid_sequence_nr ON events (pid, sequence_nr)"
_VIEW = (
    """CREATE VIEW journal (ordering, persistence_id, sequence_nr, record, checksum) AS
        SELECT e.ordering, p.persistence_id, e.sequence_nr, e.record, e.checksum
        FROM events e JOIN persistence_ids p ON p.id = e.pid""",
    """CREATE TRIGGER journal_insert INSTEAD OF INSERT ON journal BEGIN
        INSERT OR IGNORE INTO persistence_ids (persistence_id) VALUES (NEW.persistence_id);
        INSERT INTO events (ordering, pid, sequence_nr, record, checksum)
            SELECT NEW.ordering, id, NEW.sequence_nr, NEW.record, NEW.checksum
            FROM persistence_ids WHERE persistence_id = NEW.persistence_id;
    END""",
    """CREATE TRIGGER journal_update INSTEAD OF UPDATE ON journal BEGIN
        INSERT OR IGNORE INTO persistence_ids (persistence_id) VALUES (NEW.persistence_id);
        UPDATE events SET ordering = NEW.ordering,
            pid = (SELECT id FROM persistence_ids WHERE persistence_id = NEW.persistence_id),
            sequence_nr = NEW.sequence_nr, record = NEW.record, checksum = NEW.checksum
            WHERE ordering = OLD.ordering;
    END""",
    """CREATE TRIGGER journal_delete INSTEAD OF DELETE ON journal BEGIN
        DELETE FROM events WHERE ordering = OLD.ordering;
    END""",
)
_VERSION = f"PRAGMA user_version = {SCHEMA_VERSION}"

_CREATE = (*_COMMON, *_IDS, _EVENTS, _INDEX, *_VIEW, _VERSION)
# The first schema 1 files drew offsets with AUTOINCREMENT and deleted the newest events without a tombstone:
# sqlite_sequence alone remembers the greatest offset handed out. A tombstone at it (as a delete leaves today) keeps
# the next write from reusing an offset a projection has already read past. (DROP TABLE forgets sqlite_sequence's
# row, so this runs before it; the step is left out when the file has no sqlite_sequence.)
_KEEP_AUTOINCREMENT = (
    "INSERT INTO events (ordering, pid, sequence_nr, record, checksum) "
    "SELECT seq, 0, seq, x'', 0 FROM sqlite_sequence "
    "WHERE name = 'journal' AND seq > coalesce((SELECT max(ordering) FROM events), 0)")
_MIGRATE_FROM_1 = (
    *_COMMON,
    *_IDS,
    "INSERT INTO persistence_ids (persistence_id) "
    "SELECT DISTINCT persistence_id FROM journal WHERE persistence_id <> '' ORDER BY persistence_id",
    _EVENTS,
    "INSERT INTO events (ordering, pid, sequence_nr, record, checksum) "
    "SELECT j.ordering, p.id, j.sequence_nr, j.record, j.checksum "
    "FROM journal j CROSS JOIN persistence_ids p ON p.persistence_id = j.persistence_id ORDER BY j.ordering",
    _KEEP_AUTOINCREMENT,
    "DROP TABLE journal",
    _INDEX,
    *_VIEW,
    _VERSION,
)


def _step(conn: sqlite3.Connection, sql: str) -> None:
    """Run one statement of a schema change (a separate function: tests stop a migration between two)."""
    conn.execute(sql)


def _version(conn: sqlite3.Connection) -> int:
    return int(conn.execute("PRAGMA user_version").fetchone()[0])


def _check_not_newer(version: int, path: str) -> None:
    if version > SCHEMA_VERSION:
        raise JournalError(
            f"{path} holds journal schema {version}, written by a newer Reprise; this one reads schemas up to "
            f"{SCHEMA_VERSION}. Open it with the Reprise version that wrote it (or a newer one)")


def check_is_journal(conn: sqlite3.Connection, path: str) -> None:
    """Refuse, before anything is written, a file that is not a journal: opening one switches the file to WAL
    and adds the journal's tables, which turned another application's database into a "journal" (even through
    `reprise journal verify`, which then called it ok). A new empty file, or a journal of a schema this version
    reads or migrates, passes."""
    try:
        version = _version(conn)
        if version == SCHEMA_VERSION:
            return
        _check_not_newer(version, path)
        tables = sorted(name for (name,) in conn.execute("SELECT name FROM sqlite_master WHERE type IN ('table', 'view')")
                        if name != "projection_offset_store")  # (a projection's offsets may share the file)
        if not tables:
            return
        if "journal" in tables and {"persistence_id", "sequence_nr"} <= {r[1] for r in conn.execute(
                "PRAGMA table_info(journal)")}:
            return  # (schema 1: ensure migrates it)
    except sqlite3.DatabaseError as e:
        if getattr(e, "sqlite_errorcode", 0) & 0xFF != 26:  # SQLITE_NOTADB
            raise
        raise NotAJournal(f"{path} is not a SQLite database, so not a Reprise journal (or one whose first page was "
                          "overwritten): check the URL, or restore the journal from a backup") from None
    shown = ", ".join(tables[:5]) + (", ..." if len(tables) > 5 else "")
    raise NotAJournal(f"{path} is a SQLite database but not a Reprise journal (it holds {shown}): opening it as one "
                      "would add the journal's tables and switch it to WAL; nothing was changed. Give the journal a "
                      "file of its own")


def ensure(conn: sqlite3.Connection, path: str, begin: Callable[[], None], rollback: Callable[[], None]) -> None:
    """Create the tables of a new file or migrate an older one (one transaction); refuse a newer schema.

    Runs no statement that writes when the file is already at SCHEMA_VERSION (opening then takes no lock).
    """
    version = _version(conn)
    if version == SCHEMA_VERSION:
        return
    _check_not_newer(version, path)
    begin()  # the write lock: another process may be creating or migrating the file right now
    migrated = False
    try:
        version = _version(conn)
        _check_not_newer(version, path)
        if version < SCHEMA_VERSION:
            old = conn.execute("SELECT type FROM sqlite_master WHERE name = 'journal'").fetchone()
            steps: tuple[str, ...]
            if old is None:
                steps = _CREATE
            elif old[0] == "table" and version == 0:
                steps = _MIGRATE_FROM_1
                if conn.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'").fetchone() is None:
                    steps = tuple(sql for sql in steps if sql != _KEEP_AUTOINCREMENT)
                migrated = True
            else:
                raise JournalError(f"{path} has a 'journal' {old[0]} at schema version {version}: not a journal "
                                   f"file this Reprise knows (schemas 1 and {SCHEMA_VERSION})")
            for sql in steps:
                _step(conn, sql)
        conn.execute("COMMIT")
    except BaseException:
        rollback()
        raise
    if migrated:
        _make_private(path)


def _make_private(path: str) -> None:
    """Mode 0600 for a migrated file and its -wal and -shm: a schema 1 file may predate 0600 journals."""
    for name in (path, f"{path}-wal", f"{path}-shm"):
        try:
            if os.stat(name).st_mode & 0o077:
                os.chmod(name, 0o600)
        except FileNotFoundError:
            pass

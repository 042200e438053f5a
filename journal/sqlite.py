"""SQLite journal and snapshot store: the embedded default.

Durability: WAL with `synchronous=FULL` (an acknowledged write survives power loss; `?synchronous=NORMAL`
trades that for speed), one transaction per `write_messages` call. Each connection caches up to 16 MiB of
pages and checkpoints once the WAL holds 4,000 pages (so the -wal file grows to ~16 MiB plus one commit).
Several processes may write one file: writers take the write lock up front (BEGIN IMMEDIATE) and wait for
it (busy timeout, then retry until `?busy_timeout=` seconds have passed); a reused (persistence id,
sequence nr) hits the unique key and raises JournalError naming both. Each row carries a checksum (see
journal.records); SQLite's own corruption errors become JournalCorruption. Files are created 0600; SQLite
gives the -wal and -shm files the database file's mode (and the umask is left alone: it is process-wide).

A WAL that ends inside a frame (cut mid-record) is refused at open: SQLite would silently drop the
transaction it belongs to. `?torn_wal=accept` opens anyway, accepting that rollback (right after a power
loss during a write that was never acknowledged).

Tables: `journal`, `tags`, `highest_sequence_nr` (written by deletes, so they never lower the highest)
and `snapshot`. `journal.ordering` is the rowid and the global offset of events_by_tag and tail. It is
not AUTOINCREMENT (that costs an extra page write per commit); instead a delete that would remove the
newest row turns it into a tombstone (persistence id '') so SQLite's max(rowid) + 1 never hands out
an offset twice.
"""

from __future__ import annotations

import os
import sqlite3
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from itertools import chain
from typing import Any

from journal.api import Journal, SnapshotStore, TaggedRow
from journal.errors import JournalCorruption, JournalError
from journal.model import PersistenceIdSummary, Problem, SnapshotMetadata, SnapshotSelectionCriteria
from journal.records import EncodedBatch, StoredRow

__all__ = ["SqliteJournal", "SqliteSnapshotStore", "torn_wal_problem"]

_SCHEMA = (
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

_INSERT = "INSERT INTO journal (persistence_id, sequence_nr, record, checksum) VALUES (?, ?, ?, ?)"
_MULTI_ROWS = 100
# One statement inserting 100 rows is about twice as fast as executemany of 100 (one step, one bind pass).
_INSERT_MULTI = _INSERT + ", (?, ?, ?, ?)" * (_MULTI_ROWS - 1)
_INSERT_TAG = ("INSERT INTO tags (tag, ordering) "
               "SELECT ?, ordering FROM journal WHERE persistence_id = ? AND sequence_nr = ?")
_REPLAY = ("SELECT sequence_nr, record, checksum FROM journal "
           "WHERE persistence_id = ? AND sequence_nr >= ? AND sequence_nr <= ? ORDER BY sequence_nr LIMIT ?")
_HIGHEST = ("SELECT max(coalesce((SELECT max(sequence_nr) FROM journal WHERE persistence_id = ?1), 0), "
            "coalesce((SELECT sequence_nr FROM highest_sequence_nr WHERE persistence_id = ?1), 0))")
_TAGGED = ("SELECT j.ordering, j.persistence_id, j.sequence_nr, j.record, j.checksum "
           "FROM tags t JOIN journal j ON j.ordering = t.ordering "
           "WHERE t.tag = ? AND t.ordering > ? ORDER BY t.ordering LIMIT ?")

_SYNCHRONOUS = ("FULL", "NORMAL", "EXTRA")
_CACHE_KIB = 16384  # page cache per connection (SQLite's default: 2,000 KiB)
_CHECKPOINT_PAGES = 4000  # WAL pages (16 MiB at 4 KiB) before a commit checkpoints (default: 1,000)
_WAL_MAGIC = (0x377F0682, 0x377F0683)
_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB


def torn_wal_problem(db_path: str) -> str | None:
    """Describe how the WAL of `db_path` ends inside a frame or header, or None if it does not."""
    wal = db_path + "-wal"
    try:
        size = os.path.getsize(wal)
    except FileNotFoundError:
        return None
    if size == 0:
        return None
    with open(wal, "rb") as f:
        header = f.read(32)
    if len(header) < 32:
        return f"{wal} is {size} bytes, shorter than a WAL header: it was cut before its first frame"
    magic, _, page_size = struct.unpack(">III", header[:12])
    if magic not in _WAL_MAGIC:
        return f"{wal} has no valid WAL header (magic {magic:#x}): every transaction in it would be lost"
    frame = 24 + page_size
    whole, partial = divmod(size - 32, frame)
    if partial:
        return (f"{wal} ends inside frame {whole + 1} (byte {32 + whole * frame}, {partial} of {frame} bytes "
                f"present): a record was cut mid-write and SQLite would silently drop its transaction")
    return None


def _wal_refusal(db_path: str) -> str | None:
    # Another process may be appending a frame right now (two write() calls per frame): a torn end
    # only counts once the WAL has kept its size for a few polls (bounded: at most ~0.2 s).
    wal = db_path + "-wal"
    stable = 0
    for _ in range(20):
        try:
            problem = torn_wal_problem(db_path)
            if problem is None:
                return None
            size = os.path.getsize(wal)
            time.sleep(0.01)
            stable = stable + 1 if os.path.getsize(wal) == size else 0
        except FileNotFoundError:  # checkpointed and removed by its last user meanwhile
            return None
        if stable >= 3:
            return problem
    return problem


def _options(synchronous: str = "FULL", busy_timeout: str = "30", torn_wal: str = "refuse",
             **unknown: str) -> tuple[str, float, bool]:
    if unknown:
        raise ValueError(f"unknown sqlite journal option(s) {sorted(unknown)}: "
                         f"supported are synchronous=FULL|NORMAL|EXTRA, busy_timeout=<seconds>, "
                         f"torn_wal=refuse|accept")
    sync = synchronous.upper()
    if sync not in _SYNCHRONOUS:
        raise ValueError(f"synchronous must be one of {_SYNCHRONOUS}, got {synchronous!r}")
    if torn_wal not in ("refuse", "accept"):
        raise ValueError(f"torn_wal must be 'refuse' or 'accept', got {torn_wal!r}")
    return sync, float(busy_timeout), torn_wal == "accept"


def _as_journal_error(what: str, e: sqlite3.Error, path: str) -> JournalError:
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _CORRUPT_CODES:
        return JournalCorruption(f"{what}: SQLite reports corruption in {path}: {e}")
    return JournalError(f"{what} failed on {path}: {e}")


class _Connection:
    """One SQLite connection with the journal's pragmas, schema and write-lock retry; thread-safe."""

    def __init__(self, path: str, synchronous: str = "FULL", busy_timeout: str = "30",
                 torn_wal: str = "refuse", **unknown: str):
        sync, self.busy_timeout, accept_torn = _options(synchronous, busy_timeout, torn_wal, **unknown)
        self.path = os.path.abspath(path)
        if not accept_torn:
            problem = _wal_refusal(self.path)
            if problem is not None:
                raise JournalCorruption(
                    f"refusing to open {self.path}: {problem}. Run `reprise journal verify` to inspect it; "
                    f"open with ?torn_wal=accept to let SQLite roll that transaction back")
        parent = os.path.dirname(self.path)
        os.makedirs(parent, mode=0o700, exist_ok=True)
        os.close(os.open(self.path, os.O_CREAT | os.O_RDWR, 0o600))
        self.lock = threading.RLock()
        try:
            self.conn = sqlite3.connect(self.path, timeout=self.busy_timeout, isolation_level=None,
                                        check_same_thread=False, cached_statements=64)
        except sqlite3.Error as e:
            raise _as_journal_error("open", e, self.path) from e
        try:
            self._with_retry(lambda: self.conn.execute("PRAGMA journal_mode=WAL").fetchone())
            self.conn.execute(f"PRAGMA synchronous={sync}")
            # Neither touches durability (a commit syncs the WAL as `synchronous` says). A group commit of
            # ~2,000 events of as many ids dirties a page of the (persistence_id, sequence_nr) index per
            # event: the default 2 MiB cache spilled them mid-transaction, and the default checkpoint
            # (every 1,000 WAL pages) copied them into the database file after every such commit.
            self.conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            self.conn.execute(f"PRAGMA wal_autocheckpoint={_CHECKPOINT_PAGES}")
            self.begin()
            try:
                for ddl in _SCHEMA:
                    self.conn.execute(ddl)
                self.conn.execute("COMMIT")
            except BaseException:
                self.rollback()
                raise
        except sqlite3.Error as e:
            self.conn.close()
            raise _as_journal_error("open", e, self.path) from e
        except BaseException:
            self.conn.close()
            raise

    def _with_retry(self, fn: Any) -> Any:
        # The busy handler already waits busy_timeout; this covers the SQLITE_BUSY cases it does not
        # (e.g. another connection running WAL recovery) and a lock held for longer.
        deadline = time.monotonic() + self.busy_timeout
        delay = 0.001
        while True:
            try:
                return fn()
            except sqlite3.OperationalError as e:
                code = getattr(e, "sqlite_errorcode", 0) & 0xFF
                if code not in (5, 6) or time.monotonic() > deadline:  # SQLITE_BUSY, SQLITE_LOCKED
                    raise
                time.sleep(delay)
                delay = min(delay * 2, 0.05)

    def begin(self) -> None:
        """Take the write lock now (BEGIN IMMEDIATE), waiting for other writers."""
        self._with_retry(lambda: self.conn.execute("BEGIN IMMEDIATE"))

    def rollback(self) -> None:
        """Roll back if a transaction is open; errors here would hide the original one."""
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def query(self, what: str, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Run a read under the lock; SQLite errors become JournalError / JournalCorruption."""
        with self.lock:
            try:
                return self.conn.execute(sql, params).fetchall()
            except sqlite3.Error as e:
                raise _as_journal_error(what, e, self.path) from e

    def close(self) -> None:
        """Close the connection (SQLite checkpoints the WAL when the last one closes)."""
        with self.lock:
            self.conn.close()


class SqliteJournal(Journal):
    """A journal in one SQLite file."""

    def __init__(self, path: str, **options: str):
        self._c = _Connection(path, **options)
        self.path = self._c.path

    def _store(self, batch: EncodedBatch) -> None:
        c = self._c
        with c.lock:
            conn = c.conn
            try:
                c.begin()
            except sqlite3.Error as e:
                raise _as_journal_error("write (waiting for the write lock)", e, c.path) from e
            try:
                rows = batch.rows
                whole = len(rows) - len(rows) % _MULTI_ROWS
                for i in range(0, whole, _MULTI_ROWS):
                    conn.execute(_INSERT_MULTI, list(chain.from_iterable(rows[i:i + _MULTI_ROWS])))
                if len(rows) == 1:
                    conn.execute(_INSERT, rows[0])
                elif whole < len(rows):
                    conn.executemany(_INSERT, rows[whole:])
                if batch.tag_rows:
                    conn.executemany(_INSERT_TAG, batch.tag_rows)
                conn.execute("COMMIT")
            except sqlite3.IntegrityError as e:
                c.rollback()
                raise self._duplicate_error(batch, e) from e
            except sqlite3.Error as e:
                c.rollback()
                raise _as_journal_error("write", e, c.path) from e

    def _read(self, persistence_id: str, start: int, end: int, limit: int) -> Sequence[StoredRow]:
        try:
            return self._c.query("replay", _REPLAY, (persistence_id, start, end, limit))
        except JournalCorruption as e:
            raise JournalCorruption(f"replaying persistence id {persistence_id!r} from sequence nr {start}: {e}",
                                    persistence_id, start) from e

    def _highest(self, persistence_id: str) -> int:
        return self._c.query("highest sequence nr", _HIGHEST, (persistence_id,))[0][0]

    def delete_messages_to(self, persistence_id: str, to_sequence_nr: int) -> None:
        """Delete all events with seq nr <= to (2**63 - 1 deletes all) without lowering the highest."""
        c = self._c
        with c.lock:
            try:
                c.begin()
                try:
                    conn = c.conn
                    highest = conn.execute(_HIGHEST, (persistence_id,)).fetchone()[0]
                    if highest:
                        conn.execute("INSERT OR REPLACE INTO highest_sequence_nr VALUES (?, ?)",
                                     (persistence_id, highest))
                    conn.execute("DELETE FROM tags WHERE ordering IN (SELECT ordering FROM journal "
                                 "WHERE persistence_id = ? AND sequence_nr <= ?)",
                                 (persistence_id, to_sequence_nr))
                    newest = conn.execute("SELECT ordering, persistence_id, sequence_nr FROM journal "
                                          "ORDER BY ordering DESC LIMIT 1").fetchone()
                    if newest and newest[1] == persistence_id and newest[2] <= to_sequence_nr:
                        conn.execute("DELETE FROM journal WHERE persistence_id = ''")
                        conn.execute("UPDATE journal SET persistence_id = '', sequence_nr = ordering, "
                                     "record = x'', checksum = 0 WHERE ordering = ?", (newest[0],))
                    conn.execute("DELETE FROM journal WHERE persistence_id = ? AND sequence_nr <= ?",
                                 (persistence_id, to_sequence_nr))
                    conn.execute("COMMIT")
                except BaseException:
                    c.rollback()
                    raise
            except sqlite3.Error as e:
                raise _as_journal_error("delete", e, c.path) from e

    def current_persistence_ids(self) -> Iterator[str]:
        """Every persistence id that has ever been written (sorted)."""
        rows = self._c.query("persistence ids", "SELECT DISTINCT persistence_id FROM journal "
                                                "WHERE persistence_id <> '' UNION "
                                                "SELECT persistence_id FROM highest_sequence_nr ORDER BY 1")
        return (r[0] for r in rows)

    def _read_tag(self, tag: str, offset: int, limit: int) -> Sequence[TaggedRow]:
        return self._c.query("events by tag", _TAGGED, (tag, offset, limit))

    def _read_tail(self, n: int) -> Sequence[TaggedRow]:
        return self._c.query("tail", "SELECT ordering, persistence_id, sequence_nr, record, checksum "
                                     "FROM journal WHERE persistence_id <> '' ORDER BY ordering DESC LIMIT ?",
                            (n,))

    def summaries(self) -> list[PersistenceIdSummary]:
        """`ls`: every persistence id with its highest sequence number and number of stored events."""
        rows = self._c.query(
            "ls", "SELECT p, max(h), sum(n) FROM ("
                  " SELECT persistence_id p, max(sequence_nr) h, count(*) n FROM journal WHERE persistence_id <> ''"
                  " GROUP BY persistence_id"
                  " UNION ALL SELECT persistence_id, sequence_nr, 0 FROM highest_sequence_nr)"
                  " GROUP BY p ORDER BY p")
        return [PersistenceIdSummary(p, h, n) for p, h, n in rows]

    def _read_all(self) -> Iterator[tuple[str, int, bytes, int]]:
        last = 0
        while True:
            rows = self._c.query("verify", "SELECT ordering, persistence_id, sequence_nr, record, checksum "
                                           "FROM journal WHERE ordering > ? ORDER BY ordering LIMIT 1000", (last,))
            for _, pid, seq, blob, ck in rows:
                if pid:  # '' is the tombstone keeping the newest offset (see the module doc)
                    yield pid, seq, blob, ck
            if len(rows) < 1000:
                return
            last = rows[-1][0]

    def _read_all_snapshots(self) -> Iterator[tuple[str, int, bytes, int]]:
        yield from self._c.query("verify", "SELECT persistence_id, sequence_nr, snapshot, checksum "
                                           "FROM snapshot ORDER BY persistence_id, sequence_nr")

    def _verify_storage(self) -> Iterator[Problem]:
        problem = torn_wal_problem(self.path)
        if problem is not None:
            yield Problem(None, None, problem)
        try:
            for (line,) in self._c.query("verify", "PRAGMA integrity_check"):
                if line != "ok":
                    yield Problem(None, None, f"SQLite integrity_check: {line}")
        except JournalError as e:
            yield Problem(None, None, str(e))

    def pragma(self, name: str) -> Any:
        """The value of a PRAGMA on the journal's connection (e.g. "synchronous", "journal_mode")."""
        if not name.isidentifier():
            raise ValueError(f"not a pragma name: {name!r}")
        return self._c.query("pragma", f"PRAGMA {name}")[0][0]

    def storage_bytes(self) -> int | None:
        """The database file plus its WAL and shared-memory files."""
        files = [self.path + suffix for suffix in ("", "-wal", "-shm")]
        return sum(os.path.getsize(f) for f in files if os.path.isfile(f))

    def close(self) -> None:
        """Close the connection."""
        self._c.close()


class SqliteSnapshotStore(SnapshotStore):
    """A snapshot store in a SQLite file (may be the journal's own file)."""

    def __init__(self, path: str, **options: str):
        self._c = _Connection(path, **options)
        self.path = self._c.path

    def _write(self, what: str, sql: str, params: Sequence[Any]) -> None:
        c = self._c
        with c.lock:
            try:
                c.begin()
                try:
                    c.conn.execute(sql, params)
                    c.conn.execute("COMMIT")
                except BaseException:
                    c.rollback()
                    raise
            except sqlite3.Error as e:
                raise _as_journal_error(what, e, c.path) from e

    def _save(self, metadata: SnapshotMetadata, blob: bytes, ck: int) -> None:
        self._write("save snapshot", "INSERT OR REPLACE INTO snapshot VALUES (?, ?, ?, ?, ?)",
                    (metadata.persistence_id, metadata.sequence_nr, metadata.timestamp, blob, ck))

    def _load(self, persistence_id: str,
              criteria: SnapshotSelectionCriteria) -> tuple[int, int, bytes, int] | None:
        rows = self._c.query(
            "load snapshot",
            "SELECT sequence_nr, timestamp, snapshot, checksum FROM snapshot WHERE persistence_id = ? "
            "AND sequence_nr BETWEEN ? AND ? AND timestamp BETWEEN ? AND ? "
            "ORDER BY sequence_nr DESC, timestamp DESC LIMIT 1",
            (persistence_id, criteria.min_sequence_nr, criteria.max_sequence_nr,
             criteria.min_timestamp, criteria.max_timestamp))
        return rows[0] if rows else None

    def delete(self, metadata: SnapshotMetadata) -> None:
        """Delete the snapshot at (pid, seq nr); a timestamp of 0 matches any timestamp."""
        self._write("delete snapshot",
                    "DELETE FROM snapshot WHERE persistence_id = ? AND sequence_nr = ? "
                    "AND (? = 0 OR timestamp = ?)",
                    (metadata.persistence_id, metadata.sequence_nr, metadata.timestamp, metadata.timestamp))

    def delete_matching(self, persistence_id: str, criteria: SnapshotSelectionCriteria) -> None:
        """Delete every snapshot of the id matching `criteria`."""
        self._write("delete snapshots",
                    "DELETE FROM snapshot WHERE persistence_id = ? AND sequence_nr BETWEEN ? AND ? "
                    "AND timestamp BETWEEN ? AND ?",
                    (persistence_id, criteria.min_sequence_nr, criteria.max_sequence_nr,
                     criteria.min_timestamp, criteria.max_timestamp))

    def close(self) -> None:
        """Close the connection."""
        self._c.close()

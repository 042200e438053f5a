"""SQLite journal and snapshot store: the embedded default.

Durability: WAL with `synchronous=FULL` (an acknowledged write survives power loss; `?synchronous=NORMAL`
trades that for speed), one transaction per `write_messages` call. Each connection caches up to 16 MiB of
pages and checkpoints once the WAL holds 4,000 pages (so the -wal file grows to ~16 MiB plus one commit). While
the WAL grows, zeros are written ahead of it (see `_Connection._write_wal_ahead`), so that commits overwrite
the file instead of appending to it.
Several processes may write one file: writers take the write lock up front (BEGIN IMMEDIATE) and wait for
it (busy timeout, then retry until `?busy_timeout=` seconds have passed); a reused (persistence id,
sequence nr) hits the unique key and raises JournalError naming both. Each row carries a checksum (see
journal.records); SQLite's own corruption errors become JournalCorruption. A new file is created 0600 (O_EXCL,
before any connection has it); SQLite gives the -wal and -shm files the database file's mode (and the
umask is left alone: it is process-wide). Paths naming one file by hard links are not recognised as one.

One connection per file per process: every journal and snapshot store of a process on one file share it
(reference-counted; see `_registry`), and nothing here ever opens and closes a descriptor of a database
that may be live. (Closing any descriptor of a file drops all of the process's POSIX locks on it; another
process then believes it is the last user, checkpoints and unlinks the WAL this one is still appending to.)

Before its first connection to a file, a process walks the WAL as SQLite's recovery would
(journal.sqlite_wal) and refuses with JournalCorruption, naming the frame, a WAL from which SQLite would
silently drop committed transactions: a flipped byte mid-WAL, a WAL cut inside a frame, a WAL cut at a
frame boundary when SQLite's WAL index says more was committed, an empty database file beside a WAL.
What a crash leaves (an unfinished last transaction) opens normally. Not when a connection of this process
that is not the registry's (an offset store sharing the file) already has the file open: it is live, and
reading its -shm would mean closing a descriptor of it (see `_wal_refusal`). `?torn_wal=accept` opens anyway,
accepting SQLite's rollback to the last intact commit (e.g. right after a power loss during a write that
was never acknowledged).

Tables (journal.sqlite_schema: schema 2, and the migration of older files): `events` keyed by an integer
persistence id (`persistence_ids` maps the text ids; a `journal` view shows schema 1's columns), `tags`,
`highest_sequence_nr` (written by deletes, so they never lower the highest) and `snapshot`.
`events.ordering` is the rowid and the global offset of events_by_tag and tail. It is not AUTOINCREMENT
(that costs an extra page write per commit); instead a delete that would remove the newest row turns it
into a tombstone (persistence id '', integer id 0) so SQLite's max(rowid) + 1 never hands out an offset
twice.
"""

from __future__ import annotations

import errno
import logging
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import partial
from itertools import chain
from typing import TypeVar, cast

from journal import sqlite_schema, sqlite_wal
from journal.api import Journal, SnapshotStore, TaggedRow, paced_slices
from journal.errors import InvalidUrl, JournalCorruption, JournalError
from journal.model import PersistenceIdSummary, Problem, SnapshotMetadata, SnapshotSelectionCriteria
from journal.records import EncodedBatch, StoredRow

__all__ = ["SqliteJournal", "SqliteSnapshotStore", "create_private_file", "torn_wal_problem"]

R = TypeVar("R")
SqlValue = int | float | str | bytes | None
"""A value SQLite returns (its storage classes: INTEGER, REAL, TEXT, BLOB, NULL)."""

# The statements use the tables, never the `journal` view: `pid` is the integer id (see journal.sqlite_schema).
# Never 0: '' is no persistence id a write can have, and its id's rows are tombstones (replaying, or deleting, them
# as events of '' removed the newest offset's tombstone, and offsets were handed out twice).
_PID = "(SELECT id FROM persistence_ids WHERE persistence_id = ?1 AND id <> 0)"
_INSERT = "INSERT INTO events (pid, sequence_nr, record, checksum) VALUES (?, ?, ?, ?)"
_MULTI_ROWS = 100
# Which form of INSERT is cheapest depends on how many ids a commit holds (bench/PROFILE.md §10): rows of few
# ids (long runs per id) cost half as much as 100-row statements as through executemany; rows of many ids
# (one or two events per id, as a host's group commit) cost about 40% less through one executemany call
# than through 100-row statements. The crossover is near 30 rows per id.
_INSERT_MULTI = _INSERT + ", (?, ?, ?, ?)" * (_MULTI_ROWS - 1)
_ROWS_PER_ID_FOR_MULTI = 32
_IDS_CACHED = 200_000  # integer ids a connection remembers (~25 MB) before it starts over: one lookup each again
_INSERT_TAG = "INSERT INTO tags (tag, ordering) SELECT ?, ordering FROM events WHERE pid = ? AND sequence_nr = ?"
_NEW_ID = "INSERT OR IGNORE INTO persistence_ids (persistence_id) VALUES (?)"
_REPLAY = ("SELECT sequence_nr, record, checksum FROM events "
           f"WHERE pid = {_PID} AND sequence_nr >= ?2 AND sequence_nr <= ?3 ORDER BY sequence_nr LIMIT ?4")
_HIGHEST = (f"SELECT max(coalesce((SELECT max(sequence_nr) FROM events WHERE pid = {_PID}), 0), "
            "coalesce((SELECT sequence_nr FROM highest_sequence_nr WHERE persistence_id = ?1), 0))")
# CROSS JOIN: SQLite keeps the tables in the order written (events by offset, then its id's text).
_WITH_IDS = "FROM events e CROSS JOIN persistence_ids p ON p.id = e.pid"
_TAGGED = ("SELECT e.ordering, p.persistence_id, e.sequence_nr, e.record, e.checksum "
           "FROM tags t CROSS JOIN events e ON e.ordering = t.ordering CROSS JOIN persistence_ids p ON p.id = e.pid "
           "WHERE t.tag = ? AND t.ordering > ? ORDER BY t.ordering LIMIT ?")
_EVENTS = ("SELECT ordering, ?1, sequence_nr, record, checksum FROM events "
           f"WHERE pid = {_PID} AND sequence_nr >= ?2 AND sequence_nr <= ?3 ORDER BY sequence_nr LIMIT ?4")
_TAIL = (f"SELECT e.ordering, p.persistence_id, e.sequence_nr, e.record, e.checksum {_WITH_IDS} "
         "WHERE e.pid <> 0 ORDER BY e.ordering DESC LIMIT ?")
_ALL = (f"SELECT e.ordering, p.persistence_id, e.sequence_nr, e.record, e.checksum {_WITH_IDS} "
        "WHERE e.ordering > ? ORDER BY e.ordering LIMIT 1000")
_IDS = ("SELECT persistence_id FROM persistence_ids WHERE id <> 0 UNION "
        "SELECT persistence_id FROM highest_sequence_nr ORDER BY 1")
# A live persistence_ids' poll: the ids created after an integer id (a range of persistence_ids' rowid), and
# highest_sequence_nr's ids, which only the first poll needs (see SqliteJournal._persistence_ids_poller).
_IDS_AFTER = "SELECT id, persistence_id FROM persistence_ids WHERE id > ? ORDER BY id"
_IDS_DELETED = "SELECT persistence_id FROM highest_sequence_nr"
_SUMMARIES = ("SELECT p, max(h), sum(n) FROM ("
              " SELECT i.persistence_id p, s.h h, s.n n FROM (SELECT pid, max(sequence_nr) h, count(*) n FROM events"
              "  WHERE pid <> 0 GROUP BY pid) s CROSS JOIN persistence_ids i ON i.id = s.pid"
              " UNION ALL SELECT persistence_id, sequence_nr, 0 FROM highest_sequence_nr)"
              " GROUP BY p ORDER BY p")
# Reads of the global offset range (events_between, all_events) and of the newest offset: id 0 ('') is the
# tombstone keeping the newest offset after a delete (module doc), not an event.
_ORDERED = (f"SELECT e.ordering, p.persistence_id, e.sequence_nr, e.record, e.checksum {_WITH_IDS} "
            "WHERE e.ordering > ? AND e.ordering <= ? AND e.pid <> 0 ORDER BY e.ordering LIMIT ?")
_NEWEST = "SELECT ordering FROM events WHERE pid <> 0 ORDER BY ordering DESC LIMIT 1"
# (A tag row whose event is gone, deleted by hand, names no offset: the newest with its event, by the key backwards.)
_NEWEST_TAGGED = ("SELECT t.ordering FROM tags t WHERE t.tag = ? AND EXISTS (SELECT 1 FROM events e WHERE e.ordering = "
                  "t.ordering) ORDER BY t.ordering DESC LIMIT 1")
# Events that every read above skips because their integer id was damaged (verify names them): an id that names no
# persistence id (the joins drop the row), or 0 on a row that is no tombstone (one has an empty record, a checksum
# of 0 and its offset as its sequence nr).
_LOST_IDS = ("SELECT e.ordering, e.pid, e.sequence_nr FROM events e LEFT JOIN persistence_ids p ON p.id = e.pid "
             "WHERE CASE WHEN e.pid = 0 THEN length(e.record) <> 0 OR e.checksum <> 0 OR e.sequence_nr <> e.ordering "
             "ELSE p.id IS NULL END ORDER BY e.ordering")

log = logging.getLogger("reprise.journal")

_SYNCHRONOUS = ("FULL", "NORMAL", "EXTRA")
_CACHE_KIB = 16384  # page cache per connection (SQLite's default: 2,000 KiB)
_CHECKPOINT_PAGES = 4000  # WAL pages (16 MiB at 4 KiB) before a commit checkpoints (default: 1,000)
_fdatasync = getattr(os, "fdatasync", os.fsync)  # (macOS has no fdatasync)
_WAL_AHEAD_MIN = 256 * 1024  # bytes: the least a growing WAL is written ahead to
_WAL_SPARE_FRAMES = 256  # frames written ahead past the checkpoint's size: the commit that reaches it
_CORRUPT_CODES = {11, 26}  # SQLITE_CORRUPT, SQLITE_NOTADB


def torn_wal_problem(db_path: str) -> str | None:
    """Why SQLite would silently drop committed transactions of `db_path`'s WAL (see journal.sqlite_wal), or None.

    Reads only the WAL, never the -shm: safe while this process has the database open.
    """
    return sqlite_wal.problem(db_path, use_shm=False)


def _open_in_this_process(db_path: str) -> bool | None:
    """Whether a descriptor of this process already refers to `db_path` or its -shm (None: cannot tell).

    Nothing is opened: each descriptor listed in /proc/self/fd (/dev/fd on macOS) is fstat'ed and compared.
    """
    files = set()
    for name in (db_path, db_path + "-shm"):
        try:
            st = os.stat(name)
        except OSError:
            continue
        files.add((st.st_dev, st.st_ino))
    if not files:
        return False
    for listing in ("/proc/self/fd", "/dev/fd"):
        try:
            fds = os.listdir(listing)
        except OSError:
            continue
        for fd in fds:
            try:
                st = os.fstat(int(fd))
            except (OSError, ValueError):  # (the listing's own descriptor, closed meanwhile)
                continue
            if (st.st_dev, st.st_ino) in files:
                return True
        return False
    return None


def _wal_refusal(db_path: str, use_shm: bool = True) -> str | None:
    if use_shm:
        # This runs before the registry's first connection to the file, but another SQLite connection of this
        # process, not ours, may have it open: a projection's offset store sharing the journal's file
        # (persistence.offset_store, opened before the journal), the user's own sqlite3 connection. Opening and
        # closing the -shm would then drop that connection's lock on it (SQLite's "DMS" byte: closing any
        # descriptor of a file drops all of the process's POSIX locks on it), and the next process to open the
        # file would take itself for the first, truncate the -shm this process has mapped and rebuild it under
        # it (a writer died of SIGBUS). Such a database is live here: SQLite runs no recovery of its WAL, as
        # for a database another process has open, so there is nothing to check (see sqlite_wal.problem).
        here = _open_in_this_process(db_path)
        if here:
            return None
        if here is None:
            use_shm = False  # (no way to list this process's descriptors: read the WAL alone, never the -shm)
    # Another process may be writing the WAL right now (a frame takes two write() calls, a commit of pages
    # written twice rewrites checksums after its commit frame): a problem only counts once it has been
    # seen unchanged a few times (bounded: at most ~20 polls).
    seen, stable = None, 0
    for _ in range(20):
        problem = sqlite_wal.problem(db_path, use_shm=use_shm)
        if problem is None:
            return None
        stable = stable + 1 if problem == seen else 0
        if stable >= 2:
            return problem
        seen = problem
        time.sleep(0.01)
    return seen


_BUSY_MAX = 86_400.0
"""The longest busy_timeout (s): a day."""


def _options(synchronous: str = "FULL", busy_timeout: str = "30", torn_wal: str = "refuse",
             **unknown: str) -> tuple[str, float, bool]:
    if unknown:
        raise InvalidUrl(f"unknown sqlite journal option(s) {sorted(unknown)}: "
                         f"supported are synchronous=FULL|NORMAL|EXTRA, busy_timeout=<seconds>, "
                         f"torn_wal=refuse|accept")
    sync = synchronous.upper()
    if sync not in _SYNCHRONOUS:
        raise InvalidUrl(f"synchronous must be one of {_SYNCHRONOUS}, got {synchronous!r}")
    if torn_wal not in ("refuse", "accept"):
        raise InvalidUrl(f"torn_wal must be 'refuse' or 'accept', got {torn_wal!r}")
    try:
        busy = float(busy_timeout)
    except ValueError:
        raise InvalidUrl(f"busy_timeout must be a number of seconds, got {busy_timeout!r}") from None
    # (negative: SQLite waits for no lock, so writers beside another process fail at once; nan and inf cannot be
    # turned into its milliseconds, and failed every host that opened the journal)
    if not 0 <= busy <= _BUSY_MAX:
        raise InvalidUrl(f"busy_timeout must be from 0 to {_BUSY_MAX:.0f} seconds, got {busy_timeout!r}")
    return sync, busy, torn_wal == "accept"


def _as_journal_error(what: str, e: sqlite3.Error, path: str) -> JournalError:
    code = getattr(e, "sqlite_errorcode", None)
    if code is not None and code & 0xFF in _CORRUPT_CODES:
        return JournalCorruption(f"{what}: SQLite reports corruption in {path}: {e}")
    return JournalError(f"{what} failed on {path}: {e}")


def check_writable(path: str, what: str) -> None:
    """JournalError naming the file or directory (for its -wal and -shm) this process cannot write."""
    for kind, name in (("file", path), ("directory", os.path.dirname(path) or ".")):
        if not os.access(name, os.W_OK):
            raise JournalError(f"the {what} {path} can be read but not written: this process may not write its "
                               f"{kind} {name} (a read-only file system, or its permissions); give a writable path, "
                               "or remount it read-write")


def create_private_file(path: str) -> None:
    """Create `path` empty and 0600 if it does not exist, so SQLite's files of it are private.

    SQLite gives a database's -wal and -shm the database file's mode, and sqlite3.connect would create the
    file with the process umask (0644 under 022). JournalError naming the file and the directory it could not
    be made in, also one that does not exist (never made: a misspelt directory would start an empty journal).
    """
    try:
        refuse_foreign_files(path)
        _create_private_file(path)
        refuse_foreign_files(path)  # (one planted meanwhile, by another user, was not replaced: it would be used)
    except OSError as e:
        # (it said "[Errno 30] Read-only file system: '/data/.reprise-4242-1398.new'": a name of ours, not the user's)
        where = os.path.dirname(e.filename) if isinstance(e.filename, str) else os.path.dirname(path)
        fix = {errno.EROFS: f"{where or '.'} is on a read-only file system: give a path on a writable one, or "
                            "remount it read-write",
               errno.EACCES: f"this process (uid {os.getuid()}) may not write in {where or '.'}: give a writable "
                             "path, or change the directory's permissions",
               errno.ENOSPC: f"the file system of {where or '.'} is full: free space, or give a path on another one",
               errno.ENOTDIR: f"{e.filename!r} is not a directory: fix the path",
               # (it was made silently: a misspelt directory started an empty journal, and the actors recovered
               # nothing from it)
               errno.ENOENT: f"its directory {where or '.'} does not exist: fix the path if it is misspelt, or "
                             f"create the directory (mkdir -p {where or '.'}); Reprise creates a new SQLite file, "
                             "never its directory"}.get(
            e.errno or 0, f"{e.strerror} ({e.filename})")
        raise JournalError(f"cannot create the SQLite file {path}: {fix}") from e


def refuse_foreign_files(path: str) -> None:
    """JournalError if `path`, its -wal or its -shm is another user's (or a link of theirs), or others may write it.

    SQLite opens whatever is there: in a directory others may write in (/tmp), another user could put their own
    file (or -wal, once a clean close removed ours) where a journal goes, and read and rewrite what it stores.
    """
    me = os.geteuid()
    directory = os.path.dirname(os.path.abspath(path))
    try:
        where = os.stat(directory)
    except OSError:
        where = None  # (missing: created 0700 as this user's; unreadable: the open says so)
    if where is not None and where.st_uid not in (me, 0):
        raise JournalError(f"{path}: its directory {directory} belongs to uid {where.st_uid}, who could replace "
                           "its files at any time (and read and rewrite what is stored in them): give a path in a "
                           "directory of your own")
    if where is not None and where.st_mode & stat.S_IWOTH and not where.st_mode & stat.S_ISVTX:
        raise JournalError(f"{path}: its directory {directory} may be written by every user (mode "
                           f"{stat.S_IMODE(where.st_mode):o}, without the sticky bit /tmp has), who could replace its "
                           "files: give a path in a directory of your own, or run `chmod o-w` on it")
    for name in (path, path + "-wal", path + "-shm"):
        try:
            link = os.lstat(name)
        except OSError:
            continue  # (missing: SQLite creates it, with the database file's owner and mode)
        try:
            target = os.stat(name) if stat.S_ISLNK(link.st_mode) else link
        except OSError:
            target = link  # (a dangling link: its owner decides)
        owner = next((s.st_uid for s in (link, target) if s.st_uid != me), None)
        if owner is not None:
            raise JournalError(
                f"{name} belongs to uid {owner}, not to this user (uid {me}): its owner could read and rewrite what "
                "is stored in it. Remove it (`rm` it as that user or root), or give a path in a directory only you "
                "may write (e.g. made with `mkdir -m 700`)")
        if stat.S_IMODE(target.st_mode) & (stat.S_IWGRP | stat.S_IWOTH):
            raise JournalError(f"{name} may be written by other users (mode {stat.S_IMODE(target.st_mode):o}): "
                               f"run `chmod 600 {name}`")


def _create_private_file(path: str) -> None:
    # Only for a file that does not exist yet: closing a descriptor of a file drops every POSIX lock this
    # process holds on it, which for a live database lets another process checkpoint and unlink its WAL.
    # The file is made under a name of its own and linked into place only once its descriptor is closed:
    # made at `path`, a connection of this process that does not hold the registry lock (a projection's
    # offset store sharing the journal's file; the journal, when the offset store creates the file) could
    # find it and take its locks before that close dropped them.
    if os.path.lexists(path):
        return
    new = os.path.join(os.path.dirname(path), f".reprise-{os.getpid()}-{threading.get_ident()}.new")
    try:
        fd = os.open(new, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # (left by a process of this pid killed right here)
        os.unlink(new)
        fd = os.open(new, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        try:
            os.fchmod(fd, 0o600)  # whatever the umask (SQLite gives -wal and -shm this file's mode)
        finally:
            os.close(fd)
        os.link(new, path)  # (never replaces: FileExistsError)
        _created(path)
    except FileExistsError:  # another process or thread created it meanwhile: it is theirs, and may be live
        pass
    except OSError as e:
        if e.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EMLINK, errno.ENOSYS):
            raise
        _create_and_keep(path)
    finally:
        os.unlink(new)


_kept_fds: list[int] = []


def _create_and_keep(path: str) -> None:
    """create_private_file on a file system without hard links: made at `path`, its descriptor never closed."""
    try:
        fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_RDWR | os.O_CLOEXEC, 0o600)
    except FileExistsError:  # another process created it meanwhile: it is theirs, and may be live
        return
    os.fchmod(fd, 0o600)
    _kept_fds.append(fd)  # (one descriptor per file this process creates there: closing it could drop locks)
    _created(path)


def _created(path: str) -> None:
    """Log that `path` was created: a misspelt path starts an empty journal, and this line is where that shows."""
    log.info("created the new SQLite file %s (nothing was at that path; if you meant an existing journal or offset "
             "store, fix the URL)", path)


def retry_busy(fn: Callable[[], R], busy_timeout: float) -> R:
    """`fn()`, run again while SQLite says busy or locked, for up to `busy_timeout` s.

    The busy handler already waits busy_timeout; this covers the SQLITE_BUSY cases it does not (switching a new
    database to WAL while another connection opens it, another connection running WAL recovery) and a lock held
    for longer.
    """
    deadline = time.monotonic() + busy_timeout
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


class _Connection:
    """The one SQLite connection of this process to one file, shared by every journal and snapshot store on it.

    Thread-safe (`lock`); reference-counted by `_acquire`/`_release`. Handles may ask for different
    `synchronous`/`busy_timeout`: `begin` applies the caller's before each transaction.
    """

    def __init__(self, path: str, synchronous: str, busy_timeout: float, accept_torn: bool):
        self.path = path
        self.users = 0
        self.inherited = False  # True in a forked child: its parent's connection, never used or closed there
        refuse_foreign_files(self.path)  # (before its -wal is read: another user's could be a FIFO, and block)
        if not accept_torn:
            problem = _wal_refusal(self.path)
            if problem is not None:
                raise JournalCorruption(
                    f"refusing to open {self.path}: {problem}. Run `reprise journal verify` to inspect it; "
                    f"open with ?torn_wal=accept to accept what SQLite keeps (the transactions before that point)")
        create_private_file(self.path)
        self.lock = threading.RLock()
        try:
            self.conn = sqlite3.connect(self.path, timeout=busy_timeout, isolation_level=None,
                                        check_same_thread=False, cached_statements=64)
        except sqlite3.Error as e:
            raise _as_journal_error("open", e, self.path) from e
        self.synchronous, self.busy_timeout = synchronous, busy_timeout
        self.wal_path = self.path + "-wal"
        self.page_size = 4096  # (read below, before the first transaction)
        self.wal_ahead = 0  # the WAL's size after zeros were last written ahead of it (see _write_wal_ahead)
        self.wal_full = False  # it has reached the size at which it is reused: nothing more to write ahead
        self.wal_fd: int | None = None
        # persistence id -> its integer id in `persistence_ids`, as committed (ids are never reassigned); only
        # the write path uses it, under `lock` (reads look the id up in SQL).
        self.ids: dict[str, int] = {}
        try:
            retry_busy(lambda: sqlite_schema.check_is_journal(self.conn, self.path), busy_timeout)
            retry_busy(lambda: self.conn.execute("PRAGMA journal_mode=WAL").fetchone(), busy_timeout)
            self.conn.execute(f"PRAGMA synchronous={synchronous}")
            # Neither touches durability (a commit syncs the WAL as `synchronous` says). A group commit of
            # ~2,000 events of as many ids dirties a page of the (persistence_id, sequence_nr) index per
            # event: the default 2 MiB cache spilled them mid-transaction, and the default checkpoint
            # (every 1,000 WAL pages) copied them into the database file after every such commit.
            self.conn.execute(f"PRAGMA cache_size=-{_CACHE_KIB}")
            self.conn.execute(f"PRAGMA wal_autocheckpoint={_CHECKPOINT_PAGES}")
            self.page_size = int(self.conn.execute("PRAGMA page_size").fetchone()[0])
            sqlite_schema.ensure(self.conn, self.path, lambda: self.begin(synchronous, busy_timeout),
                                 self.rollback)
        except sqlite3.Error as e:
            self.conn.close()
            if getattr(e, "sqlite_errorcode", 0) & 0xFF in (8, 14):  # SQLITE_READONLY, SQLITE_CANTOPEN
                # (a WAL journal needs its -wal and -shm, so even reading it needs a writable directory)
                check_writable(self.path, "journal")
            raise _as_journal_error("open", e, self.path) from e
        except BaseException:
            self.conn.close()
            raise

    def configure(self, synchronous: str, busy_timeout: float) -> None:
        """Apply one handle's settings to the shared connection (outside a transaction, under `lock`)."""
        if synchronous != self.synchronous:
            self.conn.execute(f"PRAGMA synchronous={synchronous}")
            self.synchronous = synchronous
        if busy_timeout != self.busy_timeout:
            self.conn.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
            self.busy_timeout = busy_timeout

    def begin(self, synchronous: str, busy_timeout: float) -> None:
        """Take the write lock now (BEGIN IMMEDIATE), waiting for other writers; the caller holds `lock`."""
        self.configure(synchronous, busy_timeout)
        retry_busy(lambda: self.conn.execute("BEGIN IMMEDIATE"), busy_timeout)
        if not self.wal_full:
            self._write_wal_ahead()

    def _write_wal_ahead(self) -> None:
        """If the WAL grew since the last look, write zeros past its end: to twice its size (at least 256 KiB), at
        most to the size at which it is checkpointed and then reused from its start.

        SQLite appends to a new WAL until it first reaches wal_autocheckpoint, and an fdatasync after an append
        also commits the file's new size (on ext4 a journal commit): one event per transaction cost ~1.6x as
        much until the WAL was 16 MiB (bench/PROFILE.md §37). Over zeros written ahead, a commit overwrites.
        Safe because it runs under the write lock, right after BEGIN IMMEDIATE (nobody writes frames
        meanwhile), and writes only past the file's end, where no frame is: SQLite's recovery stops at the
        first frame whose salts are not the header's, as it does at the stale frames of a reused WAL. Not
        before SQLite has written the WAL's header (a WAL of zeros has none). The size is read with lseek on a
        descriptor kept for this, never with stat: a stat between two writes made the fdatasync after the
        second commit the file system's journal too (the file's mtime, fine-grained once queried): +50 µs.
        """
        fd = self.wal_fd
        if fd is None:
            try:
                fd = self.wal_fd = os.open(self.wal_path, os.O_WRONLY | os.O_CLOEXEC)
            except OSError:
                return  # (no WAL yet: the next transaction looks again)
        # (SQLite holds no POSIX lock on the -wal itself: closing this descriptor later drops none of its locks)
        try:
            size = os.lseek(fd, 0, os.SEEK_END)
            if size == self.wal_ahead or size < sqlite_wal.WAL_HEADER:
                return  # (no frame past the zeros yet; or a new WAL, whose header its first commit writes)
            frame = sqlite_wal.FRAME_HEADER + self.page_size
            full = sqlite_wal.WAL_HEADER + (_CHECKPOINT_PAGES + _WAL_SPARE_FRAMES) * frame
            if size >= full:
                self._wal_ahead_done()
                return
            want = min(full, max(2 * size, _WAL_AHEAD_MIN))
            target = sqlite_wal.WAL_HEADER + -(-(want - sqlite_wal.WAL_HEADER) // frame) * frame  # (whole frames)
            zeros = bytes(min(target - size, 1 << 20))
            at = size
            try:
                while at < target:
                    at += os.pwrite(fd, zeros[:target - at], at)
                _fdatasync(fd)
            except OSError:
                os.ftruncate(fd, size)  # (only zeros lie past `size`)
                raise
        except OSError as e:  # (a full disk: the commit will say so)
            log.warning("could not write the WAL of %s ahead (%s): its commits append to it", self.path, e)
            self._wal_ahead_done()
            return
        self.wal_ahead = target
        if target >= full:
            self._wal_ahead_done()

    def _wal_ahead_done(self) -> None:
        self.wal_full = True
        self.close_wal_fd()

    def close_wal_fd(self) -> None:
        """Close the descriptor _write_wal_ahead keeps on the WAL, if open."""
        fd, self.wal_fd = self.wal_fd, None
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def rollback(self) -> None:
        """Roll back if a transaction is open; errors here would hide the original one."""
        if self.conn.in_transaction:
            try:
                self.conn.execute("ROLLBACK")
            except sqlite3.Error:
                pass

    def query(self, what: str, sql: str, params: Sequence[SqlValue] = ()) -> list[tuple[SqlValue, ...]]:
        """Run a read under the lock; SQLite errors become JournalError / JournalCorruption.

        Callers cast the rows to the tuple their SELECT makes (sqlite3 cannot say).
        """
        with self.lock:
            try:
                return self.conn.execute(sql, params).fetchall()
            except sqlite3.Error as e:
                raise _as_journal_error(what, e, self.path) from e


# realpath -> the connection of this process to that file. One per file: a second connection of the same
# process is harmless to SQLite itself, but anything that closes a descriptor of the file (as opening a
# second one and closing it does) drops the POSIX locks of all of them (sqlite.org/howtocorrupt.html 2.2).
_registry: dict[str, _Connection] = {}
_registry_lock = threading.Lock()
_inherited: list[_Connection] = []


def _forget_after_fork() -> None:
    # A forked child must not use or close its parent's connections (closing one could checkpoint or drop
    # locks it never held); they are kept referenced, never closed. Nor may it open the same file again:
    # SQLite keeps its POSIX lock records per file in process memory, which the fork copied, so the child's
    # new connection takes no real locks, and another process may then checkpoint and remove the WAL the
    # child is writing to: its acknowledged writes vanish (_acquire refuses; tests/journal/test_sqlite.py).
    global _registry_lock
    for c in _registry.values():
        c.inherited = True
    _inherited.extend(_registry.values())
    _registry.clear()
    _registry_lock = threading.Lock()


def _forked_error(path: str) -> JournalError:
    return JournalError(
        f"{path} was open in the process this one was forked from: SQLite cannot lock a file from a forked child "
        "whose parent had it open (its lock records were copied by the fork), so writes here could be lost. "
        "Start the child with multiprocessing.get_context('spawn') or 'forkserver' (or as a new program), or "
        "open the journal only after the fork, in the parent too")


os.register_at_fork(after_in_child=_forget_after_fork)


def _acquire(path: str, synchronous: str, busy_timeout: float, accept_torn: bool) -> _Connection:
    real = os.path.realpath(os.path.abspath(path))
    if any(i.path == real for i in _inherited):
        raise _forked_error(real)
    with _registry_lock:
        c = _registry.get(real)
        if c is None:
            # First user in this process: the only moment the WAL (and its -shm) may be inspected.
            c = _Connection(real, synchronous, busy_timeout, accept_torn)
            _registry[real] = c
        c.users += 1
        return c


def _release(c: _Connection) -> None:
    with _registry_lock:
        c.users -= 1
        if c.users > 0 or c.inherited:  # (a parent's connection is never closed in a forked child)
            return
        if _registry.get(c.path) is c:
            del _registry[c.path]
        with c.lock:
            c.close_wal_fd()
            c.conn.close()  # the last connection of all processes checkpoints and removes the WAL


class _Handle:
    """A journal's or snapshot store's use of the shared connection of its file, with its own settings."""

    def __init__(self, path: str, **options: str):
        self.synchronous, self.busy_timeout, accept_torn = _options(**options)
        self._c: _Connection | None = _acquire(path, self.synchronous, self.busy_timeout, accept_torn)
        self.path = self._c.path

    @property
    def c(self) -> _Connection:
        c = self._c
        if c is None:
            raise JournalError(f"{self.path} is closed")
        if c.inherited:
            raise _forked_error(self.path)
        return c

    def begin(self) -> None:
        """Take the write lock with this handle's settings; the caller holds the connection's lock."""
        self.c.begin(self.synchronous, self.busy_timeout)

    def transaction(self, what: str, work: Callable[[sqlite3.Connection], R]) -> R:
        """Run `work` in one write transaction (BEGIN IMMEDIATE .. COMMIT) under the connection's lock; SQLite's
        errors become JournalError / JournalCorruption naming `what`."""
        c = self.c
        with c.lock:
            try:
                self.begin()
                try:
                    result = work(c.conn)
                    c.conn.execute("COMMIT")
                    return result
                except BaseException:
                    c.rollback()
                    raise
            except sqlite3.Error as e:
                raise _as_journal_error(what, e, c.path) from e

    def close(self) -> None:
        """Give up this handle's share of the connection (idempotent)."""
        c, self._c = self._c, None
        if c is not None:
            _release(c)


def _assign_ids(conn: sqlite3.Connection, ids: dict[str, int], new: list[str]) -> None:
    """Give each persistence id of `new` its integer id (creating it), into `ids`; inside a write transaction."""
    conn.executemany(_NEW_ID, [(p,) for p in new])
    for i in range(0, len(new), 500):
        part = new[i:i + 500]
        found = conn.execute(f"SELECT persistence_id, id FROM persistence_ids WHERE persistence_id IN "
                             f"({', '.join('?' * len(part))})", part).fetchall()
        ids.update(cast("list[tuple[str, int]]", found))


def _delete_slice(conn: sqlite3.Connection, pid: int, to_sequence_nr: int, rows: int) -> int | None:
    """Delete the next `rows` events of `pid` up to `to_sequence_nr` (their tags too); the last sequence nr
    deleted, or None when this slice was the last one."""
    row = conn.execute("SELECT sequence_nr FROM events WHERE pid = ? AND sequence_nr <= ? ORDER BY sequence_nr "
                       "LIMIT 1 OFFSET ?", (pid, to_sequence_nr, rows - 1)).fetchone()
    upto = to_sequence_nr if row is None else int(row[0])
    conn.execute("DELETE FROM tags WHERE ordering IN (SELECT ordering FROM events "
                 "WHERE pid = ? AND sequence_nr <= ?)", (pid, upto))
    newest = conn.execute("SELECT ordering, pid, sequence_nr FROM events ORDER BY ordering DESC LIMIT 1").fetchone()
    if newest and newest[1] == pid and newest[2] <= upto:
        # The newest row becomes the tombstone that keeps its offset (module doc).
        conn.execute("DELETE FROM events WHERE pid = 0 AND length(record) = 0")  # (a damaged event's row stays for verify)
        conn.execute("UPDATE events SET pid = 0, sequence_nr = ordering, record = x'', "
                     "checksum = 0 WHERE ordering = ?", (newest[0],))
    conn.execute("DELETE FROM events WHERE pid = ? AND sequence_nr <= ?", (pid, upto))
    return None if row is None or upto >= to_sequence_nr else upto


class SqliteJournal(Journal):
    """A journal in one SQLite file."""

    def __init__(self, path: str, **options: str):
        self._h = _Handle(path, **options)
        self.path = self._h.path

    def _store(self, batch: EncodedBatch) -> None:
        h = self._h
        c = h.c
        with c.lock:
            conn = c.conn
            try:
                h.begin()
            except sqlite3.Error as e:
                raise _as_journal_error("write (waiting for the write lock)", e, c.path) from e
            rows = batch.rows
            ids = c.ids
            if len(ids) > _IDS_CACHED:
                ids.clear()
            one = len(rows) == 1
            pids = {rows[0][0]} if one else {r[0] for r in rows}
            new = [p for p in pids if p not in ids]
            try:
                if new:
                    _assign_ids(conn, ids, new)
                if one:
                    p, seq, blob, ck = rows[0]
                    conn.execute(_INSERT, (ids[p], seq, blob, ck))
                else:
                    keyed = [(ids[p], seq, blob, ck) for p, seq, blob, ck in rows]
                    if len(pids) * _ROWS_PER_ID_FOR_MULTI > len(rows):
                        conn.executemany(_INSERT, keyed)
                    else:
                        whole = len(keyed) - len(keyed) % _MULTI_ROWS
                        for i in range(0, whole, _MULTI_ROWS):
                            conn.execute(_INSERT_MULTI, list(chain.from_iterable(keyed[i:i + _MULTI_ROWS])))
                        if whole < len(keyed):
                            conn.executemany(_INSERT, keyed[whole:])
                if batch.tag_rows:
                    conn.executemany(_INSERT_TAG, [(tag, ids[p], seq) for tag, p, seq in batch.tag_rows])
                conn.execute("COMMIT")
            except BaseException as e:
                for p in new:  # ids drawn in a rolled-back transaction may go to other persistence ids
                    ids.pop(p, None)
                c.rollback()
                if isinstance(e, sqlite3.IntegrityError):
                    raise self._duplicate_error(batch, e) from e
                if isinstance(e, sqlite3.Error):
                    raise _as_journal_error("write", e, c.path) from e
                raise

    def _read(self, persistence_id: str, start: int, end: int, limit: int) -> Sequence[StoredRow]:
        try:
            return cast("list[StoredRow]", self._h.c.query("replay", _REPLAY, (persistence_id, start, end, limit)))
        except JournalCorruption as e:
            raise JournalCorruption(f"replaying persistence id {persistence_id!r} from sequence nr {start}: {e}",
                                    persistence_id, start) from e

    def _highest(self, persistence_id: str) -> int:
        highest = cast(int, self._h.c.query("highest sequence nr", _HIGHEST, (persistence_id,))[0][0])
        return highest

    def delete_messages_to(self, persistence_id: str, to_sequence_nr: int) -> None:
        """Delete all events with seq nr <= to (2**63 - 1 deletes all) without lowering the highest.

        In ascending order, as transactions of about `DELETE_SLICE` seconds each: a failure part-way leaves
        the events up to some sequence nr deleted, as a delete to that one would (and raises).
        """
        for pause in self.delete_in_steps(persistence_id, to_sequence_nr):
            time.sleep(pause)

    def delete_in_steps(self, persistence_id: str, to_sequence_nr: int) -> Iterator[float]:
        """delete_messages_to one transaction (slice) per step; the bound is the highest stored now, at most `to`."""
        rows = 64

        def first_slice(conn: sqlite3.Connection) -> tuple[int, int, int | None] | None:
            highest = conn.execute(_HIGHEST, (persistence_id,)).fetchone()[0]
            if highest:
                conn.execute("INSERT OR REPLACE INTO highest_sequence_nr VALUES (?, ?)", (persistence_id, highest))
            known = conn.execute(f"SELECT {_PID}", (persistence_id,)).fetchone()
            if known[0] is None:
                return None
            # Events the id's writer stores after this call are above the highest now: later slices keep them.
            bound = min(to_sequence_nr, int(highest or 0))
            return int(known[0]), bound, _delete_slice(conn, known[0], bound, rows)

        began = time.perf_counter()
        first = self._h.transaction("delete", first_slice)
        if first is None:
            return iter(())
        pid, bound, upto = first
        if upto is None:
            return iter(())
        return paced_slices(lambda n: self._h.transaction("delete", partial(_delete_slice, pid=pid, to_sequence_nr=bound,
                                                                             rows=n)) is not None, rows, began)

    def current_persistence_ids(self) -> Iterator[str]:
        """Every persistence id that has ever been written (sorted)."""
        # persistence_ids holds exactly the ids with a committed event (rows are added with an id's first
        # event, in its transaction, and never removed).
        rows = cast("list[tuple[str]]", self._h.c.query("persistence ids", _IDS))
        return (r[0] for r in rows)

    def _persistence_ids_poller(self) -> Callable[[], Iterable[str]]:
        """Each poll of a live persistence_ids reads the ids created since the poll before, by persistence_ids'
        integer id, not the whole listing (which took 60 ms a poll at 100k ids).

        Exact, with writers in other processes: a new id's row is inserted by its first write's transaction, with
        the table's greatest rowid + 1 (INTEGER PRIMARY KEY, never deleted, so never reused), and SQLite's writers
        hold the write lock from BEGIN IMMEDIATE to COMMIT, one at a time: ids are committed in the order of
        their integer ids. A read sees a prefix of the commits (WAL: its snapshot), so every id it does not see has
        an integer id above the greatest it does, and the next poll reads on from that one (one statement, one
        snapshot). An id whose events are all deleted keeps its row, so one deleted and written again is neither
        lost nor new. highest_sequence_nr names, besides ids of persistence_ids, only ids of a schema 1 file whose
        events were all deleted before its migration (a delete writes it only for an id with events or a row there
        already): the first poll reads it, later ones need not."""
        after, first = 0, True  # the greatest integer id returned (0: '', the tombstone's, never returned)

        def poll() -> set[str]:
            nonlocal after, first
            rows = cast("list[tuple[int, str]]", self._h.c.query("persistence ids", _IDS_AFTER, (after,)))
            ids = {p for _, p in rows}
            if first:
                ids.update(r[0] for r in cast("list[tuple[str]]", self._h.c.query("persistence ids", _IDS_DELETED)))
                first = False
            if rows:
                after = rows[-1][0]
            return ids
        return poll

    def _read_tag(self, tag: str, offset: int, limit: int, upto: int) -> Sequence[TaggedRow]:
        # No OrderingHorizon needed (`upto` is always the maximum): SQLite has one writer at a time, and
        # the offset (rowid) is drawn inside its BEGIN IMMEDIATE transaction, so offsets become visible
        # in offset order, in every process; a rolled-back write frees its rowids for the next writer.
        return cast("list[TaggedRow]", self._h.c.query("events by tag", _TAGGED, (tag, offset, limit)))

    def _read_ordered(self, offset: int, limit: int, upto: int) -> Sequence[TaggedRow]:
        # In offset order without a horizon, for the reason given in _read_tag.
        return cast("list[TaggedRow]", self._h.c.query("events by offset", _ORDERED, (offset, upto, limit)))

    def _newest(self, tag: str | None) -> int:
        if tag is None:
            rows = self._h.c.query("newest offset", _NEWEST)
        else:
            rows = self._h.c.query("newest offset of a tag", _NEWEST_TAGGED, (tag,))
        return int(cast(int, rows[0][0])) if rows and rows[0][0] is not None else 0

    def _read_events(self, persistence_id: str, start: int, end: int, limit: int) -> Sequence[TaggedRow]:
        return cast("list[TaggedRow]", self._h.c.query("events by persistence id", _EVENTS,
                                                       (persistence_id, start, end, limit)))

    def _read_tail(self, n: int) -> Sequence[TaggedRow]:
        return cast("list[TaggedRow]", self._h.c.query("tail", _TAIL, (n,)))

    def summaries(self) -> list[PersistenceIdSummary]:
        """`ls`: every persistence id with its highest sequence number and number of stored events."""
        rows = cast("list[tuple[str, int, int]]", self._h.c.query("ls", _SUMMARIES))
        return [PersistenceIdSummary(p, h, n) for p, h, n in rows]

    def _read_all(self) -> Iterator[tuple[str, int, bytes, int]]:
        last = 0
        while True:
            rows = cast("list[tuple[int, str, int, bytes, int]]", self._h.c.query("verify", _ALL, (last,)))
            for _, pid, seq, blob, ck in rows:
                if pid:  # '' is the tombstone keeping the newest offset (see the module doc)
                    yield pid, seq, blob, ck
            if len(rows) < 1000:
                return
            last = rows[-1][0]

    def _read_all_snapshots(self) -> Iterator[tuple[str, int, int, bytes, int]]:
        yield from cast("list[tuple[str, int, int, bytes, int]]",
                        self._h.c.query("verify", "SELECT persistence_id, sequence_nr, timestamp, snapshot, checksum "
                                                  "FROM snapshot ORDER BY persistence_id, sequence_nr"))

    def _verify_storage(self) -> Iterator[Problem]:
        with self._h.c.lock:  # not while this process's own writes are mid-frame
            # Never the -shm here: this process has the database open (see journal.sqlite_wal.problem).
            problem = _wal_refusal(self.path, use_shm=False)
        if problem is not None:
            yield Problem(None, None, problem)
        try:
            for (line,) in cast("list[tuple[str]]", self._h.c.query("verify", "PRAGMA integrity_check")):
                if line != "ok":
                    yield Problem(None, None, f"SQLite integrity_check: {line}")
        except JournalError as e:
            yield Problem(None, None, str(e))
        try:
            lost = cast("list[tuple[int, int, int]]", self._h.c.query("verify", _LOST_IDS))
        except JournalError as e:
            yield Problem(None, None, str(e))
            return
        for ordering, pid, seq in lost:
            what = "the tombstone's id 0" if pid == 0 else f"integer persistence id {pid}, which names none"
            yield Problem(None, seq, f"the event at offset {ordering} (sequence nr {seq}) has {what}: its persistence "
                                     "id was damaged, and no replay or query sees it")

    def pragma(self, name: str) -> SqlValue:
        """The value of a PRAGMA on the journal's connection (e.g. "synchronous", "journal_mode")."""
        if not name.isidentifier():
            raise ValueError(f"not a pragma name: {name!r}")
        h = self._h
        with h.c.lock:
            h.c.configure(h.synchronous, h.busy_timeout)  # report what this journal's writes use
            value = h.c.query("pragma", f"PRAGMA {name}")[0][0]
            return value

    def storage_bytes(self) -> int | None:
        """The database file plus the frames of its WAL: not the zeros written ahead of them (see
        _write_wal_ahead), which made a journal of 90 KiB read as 1.1 MiB, nor stale frames or the -shm index."""
        size = os.path.getsize(self.path) if os.path.isfile(self.path) else 0
        return size + sqlite_wal.frames_end(self.path + "-wal")

    def close(self) -> None:
        """Give up this store's share of the file's connection (closed with its last user)."""
        self._h.close()

    def check_writable(self) -> None:
        """JournalError if this process cannot write the file, or create its -wal and -shm beside it."""
        check_writable(self.path, "journal")


class SqliteSnapshotStore(SnapshotStore):
    """A snapshot store in a SQLite file (may be the journal's own file)."""

    def __init__(self, path: str, **options: str):
        self._h = _Handle(path, **options)
        self.path = self._h.path

    def _write(self, what: str, sql: str, params: Sequence[SqlValue]) -> None:
        self._h.transaction(what, lambda conn: conn.execute(sql, params))

    def _save(self, metadata: SnapshotMetadata, blob: bytes, ck: int) -> None:
        self._write("save snapshot", "INSERT OR REPLACE INTO snapshot VALUES (?, ?, ?, ?, ?)",
                    (metadata.persistence_id, metadata.sequence_nr, metadata.timestamp, blob, ck))

    def _load(self, persistence_id: str,
              criteria: SnapshotSelectionCriteria) -> tuple[int, int, bytes, int] | None:
        rows = cast("list[tuple[int, int, bytes, int]]", self._h.c.query(
            "load snapshot",
            "SELECT sequence_nr, timestamp, snapshot, checksum FROM snapshot WHERE persistence_id = ? "
            "AND sequence_nr BETWEEN ? AND ? AND timestamp BETWEEN ? AND ? "
            "ORDER BY sequence_nr DESC, timestamp DESC LIMIT 1",
            (persistence_id, criteria.min_sequence_nr, criteria.max_sequence_nr,
             criteria.min_timestamp, criteria.max_timestamp)))
        return rows[0] if rows else None

    def _younger(self, persistence_id: str, after: int, to: int) -> Sequence[tuple[int, int, bytes, int]]:
        return cast("list[tuple[int, int, bytes, int]]", self._h.c.query(
            "load snapshot", "SELECT sequence_nr, timestamp, snapshot, checksum FROM snapshot "
            "WHERE persistence_id = ? AND sequence_nr > ? AND sequence_nr <= ?", (persistence_id, after, to)))

    def _delete_range(self, persistence_id: str, min_sequence_nr: int, max_sequence_nr: int) -> None:
        self._write("delete snapshots", "DELETE FROM snapshot WHERE persistence_id = ? AND sequence_nr BETWEEN ? AND ?",
                    (persistence_id, min_sequence_nr, max_sequence_nr))

    def _delete_keys(self, what: str, persistence_id: str, keys: list[tuple[int, int]]) -> None:
        if keys:
            self._h.transaction(what, lambda conn: conn.executemany(
                "DELETE FROM snapshot WHERE persistence_id = ? AND sequence_nr = ? AND (? = 0 OR timestamp = ?)",
                [(persistence_id, seq, ts, ts) for seq, ts in keys]))

    def close(self) -> None:
        """Give up this store's share of the file's connection (closed with its last user)."""
        self._h.close()

    def check_writable(self) -> None:
        """JournalError if this process cannot write the file, or create its -wal and -shm beside it."""
        check_writable(self.path, "snapshot store")

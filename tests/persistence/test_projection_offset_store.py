"""The offset stores' one suite: memory, SQLite and PostgreSQL behave alike (exactly-once only on SQL)."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
import threading
import uuid

import pytest

from journal import open_journal, sqlite_wal
from persistence import OffsetConflict, OffsetStore, OffsetStoreError, open_offset_store
from tests.conftest import pg_schema_url

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    if request.param == "memory":
        return f"memory://offsets-{uuid.uuid4().hex[:8]}"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/offsets.db"
    return pg_schema_url(request, "offsets")


@pytest.fixture
def store(store_url):
    s = open_offset_store(store_url)
    yield s
    s.close()


def _sql(store: OffsetStore, text: str) -> str:
    return text if store.url.startswith("sqlite") else text.replace("?", "%s")


def test_an_unknown_projection_is_at_offset_zero_and_saves_replace(store, store_url):
    assert store.load("p") == 0
    store.save("p", 5)
    store.save("q", 2)
    store.save("p", 9)
    assert (store.load("p"), store.load("q")) == (9, 2)
    again = open_offset_store(store_url)  # another store on the same URL (a restarted projection)
    try:
        assert again.load("p") == 9
    finally:
        again.close()


def test_exactly_once_commits_the_handlers_writes_and_the_offset_together(store):
    if store.url.startswith("memory"):
        with pytest.raises(OffsetStoreError, match="exactly-once.*sqlite:// or postgresql://"):
            with store.transaction("p", 1):
                pass
        return
    with store.transaction("p", 3) as conn:
        conn.execute("CREATE TABLE model (v INTEGER)")
        conn.execute(_sql(store, "INSERT INTO model VALUES (?)"), (1,))
    with pytest.raises(RuntimeError, match="handler failed"):
        with store.transaction("p", 4) as conn:
            conn.execute(_sql(store, "INSERT INTO model VALUES (?)"), (2,))
            raise RuntimeError("handler failed")
    assert store.load("p") == 3, "a failed handler's offset must not be stored"
    with store.transaction("p", 5) as conn:
        assert [r[0] for r in conn.execute("SELECT v FROM model").fetchall()] == [1], "rolled back with it"


def test_exactly_once_commits_only_over_the_offset_its_caller_expects(store, store_url):
    # Two instances of a projection on one store (two systems, or one cut off while its replacement runs) both
    # applied every event: each committed its offset over whatever the other had stored.
    if store.url.startswith("memory"):
        return  # (no transactions: at-least-once only)
    other = open_offset_store(store_url)
    try:
        with store.transaction("p", 5, expected=0) as conn:
            conn.execute("CREATE TABLE model (v INTEGER)")
            conn.execute(_sql(store, "INSERT INTO model VALUES (?)"), (5,))
        with pytest.raises(OffsetConflict, match="projection p: the offset store .* holds offset 5, not 0, the "
                                                 "one this instance last committed.*rolled back"):
            with other.transaction("p", 7, expected=0) as conn:
                conn.execute(_sql(store, "INSERT INTO model VALUES (?)"), (7,))
        with pytest.raises(OffsetConflict, match="holds offset 5, not 3"):
            with other.transaction("p", 7, expected=3):
                pass
        assert other.load("p") == 5
        with other.transaction("p", 9, expected=5) as conn:  # from the offset it found, it goes on
            conn.execute(_sql(store, "INSERT INTO model VALUES (?)"), (9,))
            assert [r[0] for r in conn.execute("SELECT v FROM model ORDER BY v").fetchall()] == [5, 9]
        other.save("q", 0)  # a stored 0 is the expected 0 too
        with other.transaction("q", 2, expected=0):
            pass
        assert (store.load("p"), store.load("q")) == (9, 2)
    finally:
        other.close()


def test_a_bad_url_names_the_accepted_forms(tmp_path):
    with pytest.raises(OffsetStoreError, match="unsupported offset store URL 'mysql://x'.*sqlite:///abs/path.db"):
        open_offset_store("mysql://x")
    with pytest.raises(OffsetStoreError, match="does not exist"):
        open_offset_store(f"sqlite:///{tmp_path}/no/such/dir/o.db")


def test_sqlite_transaction_is_visible_to_other_connections_only_once_committed(tmp_path):
    path = f"{tmp_path}/o.db"
    with open_offset_store(f"sqlite:///{path}") as store:
        with store.transaction("p", 7) as conn:
            conn.execute("CREATE TABLE model (v INTEGER)")
            other = sqlite3.connect(path)
            assert other.execute("SELECT count(*) FROM projection_offset_store").fetchone()[0] == 0
        assert other.execute("SELECT current_offset FROM projection_offset_store").fetchone()[0] == 7
        other.close()


def test_stores_opened_at_once_on_a_new_database_all_open(store_url):
    # Two systems starting one projection on a new PostgreSQL store raced in CREATE SCHEMA/TABLE IF NOT EXISTS:
    # the loser failed with a unique violation on PostgreSQL's catalog and its projection restarted.
    opened: list[OffsetStore] = []
    errors: list[BaseException] = []
    start = threading.Barrier(8)

    def open_one() -> None:
        start.wait()
        try:
            opened.append(open_offset_store(store_url))
        except BaseException as e:  # (reported below, by the test's thread)
            errors.append(e)

    threads = [threading.Thread(target=open_one) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    try:
        assert errors == [] and len(opened) == 8
        opened[0].save("p", 3)
        assert [s.load("p") for s in opened] == [3] * 8
    finally:
        for s in opened:
            s.close()


_STORE_THEN_JOURNAL = """
import sys
from journal import AtomicWrite, PersistentRepr, open_journal
from persistence import open_offset_store
path = sys.argv[1]
store = open_offset_store(f"sqlite://{path}")  # the read model's offsets first (a projection of another journal)
store.save("p", 1)
journal = open_journal(f"sqlite://{path}")  # then the process's journal on the same file
n = 0
while sys.stdin.readline():
    n += 1
    journal.write_messages([AtomicWrite([PersistentRepr(f"e-{n}", n, "w")])])
    store.save("p", n)
    print(n, flush=True)  # acknowledged
journal.close()
store.close()
"""


def test_a_journal_opened_after_an_offset_store_on_its_file_keeps_the_process_s_locks(tmp_path):
    # An offset store may share the journal's file (sqlite_schema.check_is_journal lets its table be there). Opened
    # first in a process, its connection took SQLite's lock on the -shm; the journal's first open in that process
    # then opened and closed the -shm (to check the WAL before SQLite's recovery), which drops every POSIX lock of
    # the process on it. The next process to open the file believed itself the first and truncated the -shm the
    # host had mapped (a host writing meanwhile died of SIGBUS; the WAL index was reset under it).
    path = f"{tmp_path}/j.db"
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    host = subprocess.Popen([sys.executable, "-c", _STORE_THEN_JOURNAL, path], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=root,
                            env={**os.environ, "PYTHONPATH": root})
    assert host.stdin is not None and host.stdout is not None
    acknowledged, held = 0, []
    try:
        for _ in range(40):
            host.stdin.write("w\n")
            host.stdin.flush()
            line = host.stdout.readline()
            if not line:
                break
            acknowledged = int(line)
            held.append(sqlite_wal.in_use_elsewhere(path))  # (this process has no connection to the file)
            reader = sqlite3.connect(path)  # another process reading it: `reprise journal ls`, a Spark executor
            reader.execute("SELECT count(*) FROM events").fetchone()
            reader.close()
        host.stdin.close()
        code = host.wait(30)
    finally:
        if host.poll() is None:
            host.kill()
            host.wait(10)
    stderr = host.stderr.read() if host.stderr else ""
    assert code == 0, f"the host process died ({code}): {stderr[-500:]}"
    assert acknowledged == 40
    assert held == [True] * 40, "the host's lock on the -shm was dropped"
    with open_journal(f"sqlite://{path}") as j:
        assert [e.sequence_nr for e in j.replay_messages("w")] == list(range(1, 41))

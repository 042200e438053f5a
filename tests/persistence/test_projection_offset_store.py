"""The offset stores' one suite: memory, SQLite and PostgreSQL behave alike (exactly-once only on SQL)."""

from __future__ import annotations

import sqlite3
import threading
import uuid

import pytest

from persistence import OffsetConflict, OffsetStore, OffsetStoreError, open_offset_store

pytestmark = pytest.mark.timeout(60)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def store_url(request, tmp_path) -> str:
    if request.param == "memory":
        return f"memory://offsets-{uuid.uuid4().hex[:8]}"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/offsets.db"
    from journal.postgres import drop_schema

    url = f"{request.getfixturevalue('postgres_url')}?schema=offsets_{uuid.uuid4().hex[:8]}"
    request.addfinalizer(lambda: drop_schema(url))
    return url


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

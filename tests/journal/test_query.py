"""Persistence query beyond the TCK: OrderingHorizon's rules, and writers committing out of offset order.

PostgreSQL: a transaction held open with an explicit BEGIN draws a smaller offset than one that commits
first; a reader must neither skip it nor hand out the later event before it. SQLite serializes writers
(BEGIN IMMEDIATE), so there the later writer waits and offsets appear in order: tested anyway.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
import uuid
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import psycopg
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from psycopg import sql

from journal import AtomicWrite, Journal, PersistentRepr, open_journal, open_snapshot_store
from journal.api import OrderingBatch, OrderingHorizon, now_millis
from journal.model import MAX_SEQUENCE_NR as MAX
from journal.records import encode_writes
from journal.testing import QueryCollector as Reader
from tests.journal.postgres_server import SERVER, postgres_url  # noqa: F401  (fixture)
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


# --- OrderingHorizon, against a scripted database -----------------------------------------------


class FakeDb:
    """Stored offsets and the snapshot (xmin, xmax) the next fetch reports; a clock the test moves."""

    def __init__(self, offsets: list[int], snapshot: tuple[int, int] | None = (100, 100)):
        self.offsets = offsets
        self.snapshot = snapshot
        self.now = 0.0
        self.fetches = 0

    def fetch(self, after: int, limit: int) -> OrderingBatch:
        self.fetches += 1
        return [o for o in sorted(self.offsets) if o > after][:limit], self.snapshot

    def horizon(self, start: int = 0, timeout: float = 10.0, batch: int = 10_000) -> OrderingHorizon:
        return OrderingHorizon(self.fetch, start, timeout, batch, clock=lambda: self.now)


def test_horizon_advances_over_offsets_without_gaps_in_batches() -> None:
    db = FakeDb(list(range(1, 26)))
    h = db.horizon(batch=10)
    assert h.poll() == 25 and not h.waiting
    assert db.fetches == 3  # two full batches, then a short one
    assert db.horizon(start=20).poll() == 25


def test_horizon_waits_on_a_gap_until_it_is_filled() -> None:
    db = FakeDb([1, 2, 4, 5])
    h = db.horizon()
    assert h.poll() == 2 and h.waiting
    db.now = 5.0
    assert h.poll() == 2, "a gap younger than gap_timeout must hold the horizon while its writer may run"
    db.offsets.append(3)  # the write in flight committed
    assert h.poll() == 5 and not h.waiting


def test_horizon_gives_up_a_gap_once_every_transaction_running_after_it_was_seen_has_ended() -> None:
    db = FakeDb([1, 3], snapshot=(90, 100))
    h = db.horizon()
    assert h.poll() == 1
    db.snapshot = (120, 130)
    assert h.poll() == 1, "the first snapshot is taken too soon after the gap (its writer may lack an xid)"
    db.now = 0.25
    db.snapshot = (125, 140)  # its xmax, 140, is the horizon: transactions < 140 may hold offset 2
    assert h.poll() == 1
    db.snapshot = (139, 150)  # transaction 139 still runs
    assert h.poll() == 1
    db.snapshot = (140, 150)  # all transactions < 140 have ended, and 2 is still missing: rolled back
    assert h.poll() == 3 and not h.waiting


def test_horizon_gives_up_a_gap_after_gap_timeout_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    db = FakeDb([1, 3, 4], snapshot=None)  # a database without snapshots: only the timeout settles a gap
    h = db.horizon(timeout=2.0)
    assert h.poll() == 1
    db.now = 1.9
    assert h.poll() == 1
    db.now = 2.0
    with caplog.at_level(logging.WARNING, logger="journal.api"):
        assert h.poll() == 4
    assert "offsets after 1 up to 4 did not appear within gap_timeout=2.0s" in caplog.text
    db.offsets += [2, 6]  # 2 is behind the horizon now (missed); 5 is a new gap
    assert h.poll() == 4 and h.waiting


def test_horizon_waits_for_an_expected_offset_that_is_not_visible() -> None:
    db = FakeDb([1, 2], snapshot=None)
    h = db.horizon(timeout=1.0)
    h.expect(4)  # a current query's target: 3 and 4 were drawn; 4 may have been deleted since
    assert h.poll() == 2 and h.waiting
    db.now = 1.0
    assert h.poll() == 4 and not h.waiting


class SimulatedDb:
    """Transactions that draw offsets (and xids, in the same order), then commit or roll back in any order."""

    def __init__(self) -> None:
        self.next_offset, self.next_xid = 1, 100
        self.running: dict[int, int] = {}  # xid -> offset
        self.committed: list[int] = []
        self.now = 0.0

    def begin(self) -> None:
        self.running[self.next_xid] = self.next_offset
        self.next_offset += 1
        self.next_xid += 1

    def end(self, i: int, commit: bool) -> None:
        xid = sorted(self.running)[i % len(self.running)]
        offset = self.running.pop(xid)
        if commit:
            self.committed.append(offset)

    def fetch(self, after: int, limit: int) -> OrderingBatch:
        xmin = min(self.running, default=self.next_xid)
        return sorted(o for o in self.committed if o > after)[:limit], (xmin, self.next_xid)


@settings(max_examples=300, deadline=None)
@example([("begin", 0), ("begin", 0), ("commit", 1), ("poll", 0), ("wait", 30), ("poll", 0), ("poll", 0)])
@given(st.lists(st.tuples(st.sampled_from(["begin", "commit", "rollback", "poll", "wait"]),
                          st.integers(0, 50)), max_size=80))
def test_horizon_never_passes_a_write_in_flight_and_settles_once_all_ended(steps) -> None:
    db = SimulatedDb()
    h = OrderingHorizon(db.fetch, 0, gap_timeout=3600, batch=4, clock=lambda: db.now)
    for op, n in steps:
        if op == "begin":
            db.begin()
        elif op in ("commit", "rollback") and db.running:
            db.end(n, op == "commit")
        elif op == "wait":
            db.now += n / 100
        else:
            settled = h.poll()
            assert all(settled < o for o in db.running.values()), "the horizon passed an offset still in flight"
    while db.running:
        db.end(0, True)
    # Each gap takes three polls (seen, horizon taken after the grace, xmin past it), one batch at a time.
    for _ in range(3 * (len(db.committed) + 1)):
        h.poll()
        db.now += 0.25
    assert h.poll() == max([0, *db.committed]) and not h.waiting


# --- PostgreSQL: real concurrent writers ---------------------------------------------------------


def _schema(url: str) -> str:
    return parse_qs(urlsplit(url).query)["schema"][0]


def _ev(pid: str, tag: str) -> AtomicWrite:
    return AtomicWrite([PersistentRepr(f"{pid}-1", 1, pid, writer_uuid="w", tags=frozenset({tag}))])


def _begin_held_write(url: str, pid: str, tag: str) -> tuple[psycopg.Connection, int]:
    """Insert a tagged event (rows exactly as the journal stores them) in a transaction left open."""
    batch, _ = encode_writes([_ev(pid, tag)], now_millis())
    s = _schema(url)
    conn = psycopg.connect(SERVER)  # not autocommit: the INSERT opens a transaction that stays open
    ((ordering,),) = conn.execute(
        f"INSERT INTO {s}.journal (persistence_id, sequence_nr, record, checksum) VALUES (%s, %s, %s, %s) "
        f"RETURNING ordering", batch.rows[0]).fetchall()
    conn.execute(f"INSERT INTO {s}.tags (tag, ordering) VALUES (%s, %s)", (tag, ordering))
    return conn, ordering


def _visible_tag_offsets(url: str, tag: str) -> list[int]:
    with psycopg.connect(SERVER, autocommit=True) as c:
        return [r[0] for r in c.execute(f"SELECT ordering FROM {_schema(url)}.tags WHERE tag = %s ORDER BY 1",
                                        (tag,))]


@pytest.fixture
def pg(postgres_url: str) -> Iterator[tuple[Journal, str]]:  # noqa: F811
    with open_journal(postgres_url) as j:
        yield j, postgres_url


@pytest.mark.postgres
def test_an_event_committing_after_a_later_offset_is_neither_skipped_nor_overtaken(pg) -> None:
    j, url = pg
    tag, early, late = f"t-{uuid.uuid4().hex[:6]}", "early-writer", "late-writer"
    held, held_offset = _begin_held_write(url, early, tag)
    try:
        assert j.write_messages([_ev(late, tag)]) == [None]  # commits now, with a greater offset
        visible = _visible_tag_offsets(url, tag)
        assert len(visible) == 1 and visible[0] > held_offset, (
            "the scenario needs the later offset committed while the smaller one is in flight")
        current = Reader(j.events_by_tag(tag, gap_timeout=30))
        live = Reader(j.events_by_tag(tag, live=True, poll_interval=0.01, gap_timeout=30))
        # A negative can only be shown over a window: while the early write is open, neither query may
        # hand out the later event (a reader resuming from its offset would then never see the early one).
        assert not current.done.wait(0.5)
        assert current.got == [] and live.got == []
    finally:
        held.commit()
        held.close()
    wait_for(lambda: current.done.is_set(), 20)
    wait_for(lambda: len(live.got) >= 2, 20)
    live.query.close()  # type: ignore[attr-defined]
    assert current.error is None and live.error is None
    for r in (current, live):
        assert [(e.persistence_id, e.offset) for e in r.got[:2]] == [(early, held_offset), (late, visible[0])]
    assert len(current.got) == 2


@pytest.mark.postgres
def test_a_rolled_back_write_is_skipped_without_waiting_out_gap_timeout(pg) -> None:
    j, url = pg
    tag = f"t-{uuid.uuid4().hex[:6]}"
    held, _ = _begin_held_write(url, "rolled-back", tag)
    assert j.write_messages([_ev("kept", tag)]) == [None]
    current = Reader(j.events_by_tag(tag, gap_timeout=30))
    assert not current.done.wait(0.3)
    held.rollback()
    held.close()
    t0 = time.monotonic()
    wait_for(lambda: current.done.is_set(), 40)
    elapsed = time.monotonic() - t0
    assert current.error is None
    assert [e.persistence_id for e in current.got] == ["kept"]
    # Settled by the snapshot rule (its transaction ended) unless another session kept xmin back for 30 s.
    assert elapsed < 30, f"the gap of a rolled-back write was waited out ({elapsed:.1f} s)"


@pytest.mark.postgres
def test_a_write_slower_than_gap_timeout_is_skipped_with_a_warning(pg, caplog: pytest.LogCaptureFixture) -> None:
    """The documented limit (as in akka-persistence-jdbc): gap_timeout must exceed the slowest write."""
    j, url = pg
    tag = f"t-{uuid.uuid4().hex[:6]}"
    held, held_offset = _begin_held_write(url, "slow", tag)
    try:
        assert j.write_messages([_ev("fast", tag)]) == [None]
        with caplog.at_level(logging.WARNING, logger="journal.api"):
            got = list(j.events_by_tag(tag, gap_timeout=0.3))
        assert [e.persistence_id for e in got] == ["fast"]
        assert f"offsets after {held_offset - 1}" in caplog.text and "gap_timeout=0.3s" in caplog.text
    finally:
        held.commit()
        held.close()
    assert [e.persistence_id for e in j.events_by_tag(tag)] == ["slow", "fast"]  # a new query from 0 sees it


# --- SQLite: the later writer waits ---------------------------------------------------------------


def test_sqlite_writers_commit_in_offset_order_so_no_event_is_overtaken(tmp_path) -> None:
    path = str(tmp_path / "j.db")
    tag = f"t-{uuid.uuid4().hex[:6]}"
    held = None
    with open_journal(f"sqlite://{path}") as j:
        assert j.write_messages([_ev("first", tag)]) == [None]
        live = Reader(j.events_by_tag(tag, live=True, poll_interval=0.01))
        wait_for(lambda: live.got, 10)
        batch, _ = encode_writes([_ev("held", tag)], now_millis())
        # Another connection (as another process would) takes the write lock and draws the next offset.
        held = sqlite3.connect(path, isolation_level=None)
        held.execute("BEGIN IMMEDIATE")
        held.execute("INSERT INTO journal (persistence_id, sequence_nr, record, checksum) VALUES (?, ?, ?, ?)",
                     batch.rows[0])
        held.execute("INSERT INTO tags (tag, ordering) SELECT ?, max(ordering) FROM journal", (tag,))
        written = threading.Event()
        writer = threading.Thread(target=lambda: (j.write_messages([_ev("late", tag)]), written.set()),
                                  daemon=True)
        writer.start()
        # The late writer waits for the write lock (busy timeout): it cannot commit before the held one.
        assert not written.wait(0.3)
        held.execute("COMMIT")
        writer.join(30)
        assert written.is_set()
        wait_for(lambda: len(live.got) >= 3, 10)
        live.query.close()  # type: ignore[attr-defined]
        assert [e.persistence_id for e in live.got] == ["first", "held", "late"]
        assert [e.offset for e in live.got] == sorted(e.offset for e in live.got)
    held.close()  # after the journal's connection: closing a descriptor drops the process's POSIX locks


@pytest.mark.postgres
@pytest.mark.timeout(60)
def test_opening_a_journal_does_not_wait_for_writes_in_flight(pg) -> None:
    # CREATE INDEX IF NOT EXISTS locks the table before it looks: run on every open, it made each new reader
    # (a Spark partition, a restarted host) wait for every open write transaction.
    _, url = pg
    held, _ = _begin_held_write(url, "/held", "t")
    try:
        opened = threading.Event()

        def open_it() -> None:
            with open_journal(url), open_snapshot_store(url):
                opened.set()

        threading.Thread(target=open_it, daemon=True).start()
        assert opened.wait(10), "opening the journal waited for a write transaction of another connection"
    finally:
        held.rollback()
        held.close()


@pytest.mark.postgres
def test_a_range_read_waits_for_a_write_in_flight_below_its_end_but_not_above_it(pg) -> None:
    j, url = pg
    tag = f"t-{uuid.uuid4().hex[:6]}"
    assert j.write_messages([_ev("before", tag)]) == [None]
    before = j.newest_offset()
    held, held_offset = _begin_held_write(url, "held", tag)
    try:
        assert j.write_messages([_ev("after", tag)]) == [None]
        newest = j.newest_offset()
        assert before < held_offset < newest == j.newest_offset(tag)
        # Ending below the write in flight: nothing to wait for.
        t0 = time.monotonic()
        assert [e.persistence_id for e in j.events_between(0, held_offset - 1, gap_timeout=30)] == ["before"]
        assert time.monotonic() - t0 < 5, "a range ending below a write in flight waited for it"
        # Ending above it: neither the tag's range nor the all-events range hands out "after" without "held".
        readers = [Reader(j.events_between(before, newest, tag=tag, gap_timeout=30)),
                   Reader(j.events_between(before, newest, gap_timeout=30))]
        assert not readers[0].done.wait(0.5)
        assert all(r.got == [] for r in readers)
    finally:
        held.commit()
        held.close()
    for r in readers:
        wait_for(lambda r=r: r.done.is_set(), 20)
        assert r.error is None
        assert [(e.persistence_id, e.offset) for e in r.got] == [("held", held_offset), ("after", newest)]


# --- EventReader: never waits, never skips --------------------------------------------------------


@pytest.mark.postgres
def test_an_events_reader_stops_below_a_write_in_flight_at_once_and_reads_it_once_committed(pg) -> None:
    j, url = pg
    tag = f"t-{uuid.uuid4().hex[:6]}"
    assert j.write_messages([_ev("before", tag)]) == [None]
    tagged, everything = j.events_reader(tag=tag, gap_timeout=30), j.events_reader(j.newest_offset(), gap_timeout=30)
    assert [e.persistence_id for e in tagged.read(10)] == ["before"]
    held, held_offset = _begin_held_write(url, "early", tag)
    try:
        assert j.write_messages([_ev("late", tag)]) == [None]  # commits now, with a greater offset
        t0 = time.monotonic()
        for _ in range(5):  # each read returns at once, handing out nothing past the gap
            assert tagged.read(10) == [] and everything.read(10) == []
        assert time.monotonic() - t0 < 5, "a read waited for the write in flight"
        assert tagged.waiting and everything.waiting
    finally:
        held.commit()
        held.close()
    for reader in (tagged, everything):
        got = wait_for(lambda r=reader: r.read(10), 20, interval=0.02)
        assert [(e.persistence_id, e.offset) for e in got][:1] == [("early", held_offset)]
        rest = got[1:] or reader.read(10)
        assert [e.persistence_id for e in rest] == ["late"] and reader.read(10) == [] and not reader.waiting


@pytest.mark.postgres
def test_an_events_reader_passes_a_rolled_back_write_and_skips_a_too_slow_one_with_a_warning(
        pg, caplog: pytest.LogCaptureFixture) -> None:
    j, url = pg
    tag = f"t-{uuid.uuid4().hex[:6]}"
    rolled_back, _ = _begin_held_write(url, "rolled-back", tag)
    assert j.write_messages([_ev("kept", tag)]) == [None]
    reader = j.events_reader(tag=tag, gap_timeout=30)
    assert reader.read(10) == [] and reader.waiting
    rolled_back.rollback()
    rolled_back.close()
    t0 = time.monotonic()
    assert [e.persistence_id for e in wait_for(lambda: reader.read(10), 40, interval=0.02)] == ["kept"]
    assert time.monotonic() - t0 < 30, "the gap of a rolled-back write was waited out"
    # A write that stays open longer than gap_timeout is skipped as rolled back, as by a query (documented).
    slow, slow_offset = _begin_held_write(url, "slow", tag)
    try:
        assert j.write_messages([_ev("fast", tag)]) == [None]
        with caplog.at_level(logging.WARNING, logger="journal.api"):
            quick = j.events_reader(reader.offset, tag=tag, gap_timeout=0.3)
            assert quick.read(10) == []
            assert [e.persistence_id for e in wait_for(lambda: quick.read(10), 20, interval=0.02)] == ["fast"]
        assert f"offsets after {slow_offset - 1}" in caplog.text and "gap_timeout=0.3s" in caplog.text
    finally:
        slow.commit()
        slow.close()
    assert [e.persistence_id for e in j.events_reader(reader.offset, tag=tag).read(10)] == ["slow", "fast"]


def _journal_rows_read(plan: dict, table: str = "journal") -> int:
    """Rows the scans of `table` in an EXPLAIN (ANALYZE, FORMAT JSON) plan returned or filtered out."""
    own = 0
    if plan.get("Relation Name") == table:
        own = (plan["Actual Rows"] + plan.get("Rows Removed by Filter", 0)) * plan["Actual Loops"]
    return own + sum(_journal_rows_read(p, table) for p in plan.get("Plans", ()))


@pytest.mark.postgres
@pytest.mark.parametrize("plans", ["force_generic_plan", "force_custom_plan"])
def test_a_tag_read_at_a_high_offset_reads_only_its_chunk_of_the_journal(pg, plans: str) -> None:
    """A projection or a Spark read far into a big journal: each chunk costs its own rows, not its offset, with
    the generic plan the journal's connections use and with a custom plan (the offsets known to the planner),
    as a connection gets whose session setting was lost (a pooler in transaction mode)."""
    from psycopg import sql

    from journal.postgres import _QUERIES, split_url

    journal, url = pg
    tags = [frozenset({"dense"} if n % 10 else {"dense", "sparse"}) for n in range(4_000)]
    for start in range(0, 4_000, 500):
        assert journal.write_messages([AtomicWrite([PersistentRepr(n, 1, f"id-{n}", tags=tags[n])])
                                       for n in range(start, start + 500)]) == [None] * 500
    offsets = {tag: [e.offset for e in journal.events_by_tag(tag)] for tag in ("dense", "sparse")}
    conninfo, schema, *_ = split_url(url)
    with psycopg.connect(conninfo) as conn:
        conn.execute(f"ANALYZE {schema}.journal")
        conn.execute(f"ANALYZE {schema}.tags")
        conn.execute(f"SET plan_cache_mode = {plans}")
        query = _QUERIES["tagged"].format(s=schema)
        numbered = query
        for n in (1, 2, 3, 4, 4, 4):  # (the limit thrice: the chunk, and the marker row of a full one)
            numbered = numbered.replace("%s", f"${n}", 1)
        conn.execute(f"PREPARE tagged (text, bigint, bigint, bigint) AS {numbered}")
        for tag, after in (("dense", offsets["dense"][3_000]), ("sparse", offsets["sparse"][300])):
            args = (tag, after, offsets[tag][-1], 50)  # (a reader's upper bound: the newest offset)
            explain = sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE tagged ({}, {}, {}, {})")
            (plan,) = conn.execute(explain.format(*map(sql.Literal, args))).fetchone()[0]
            assert _journal_rows_read(plan["Plan"]) <= 50, (tag, plan)
            got = [r[0] for r in conn.execute(query, (*args, 50, 50)).fetchall() if r[1] is not None]
            assert got == [o for o in offsets[tag] if o > after][:50]


# --- live persistence_ids on PostgreSQL: incremental, exact -----------------------------------------


@pytest.mark.postgres
def test_live_persistence_ids_polls_read_only_new_events_and_miss_no_id_whose_first_write_commits_late(pg) -> None:
    """A poll reads the ids of the events since about its last polls (the whole listing only until the writes in
    flight at its start have ended), yet an id whose first write draws its offset before a later one commits, and
    commits over several polls later, is returned; so is an id whose events were deleted before a poll read them."""
    j, url = pg
    assert j.write_messages([_ev(f"old-{n}", "t") for n in range(5)]) == [None] * 5
    poll = j._persistence_ids_poller()
    assert set(poll()) == {f"old-{n}" for n in range(5)}
    # Incremental once the writes in flight at its first poll have ended: a poll no longer returns every id.
    wait_for(lambda: "old-0" not in set(poll()), 30)
    held, _ = _begin_held_write(url, "late", "t")
    try:
        assert j.write_messages([_ev("after", "t")]) == [None]
        wait_for(lambda: "after" in set(poll()), 10)
        # A negative shown over a window longer than _XID_GRACE: the polls go on while "late" is open.
        seen: set[str] = set()
        until = time.monotonic() + 1.0
        while time.monotonic() < until:
            seen |= set(poll())
            time.sleep(0.05)
        assert "late" not in seen
    finally:
        held.commit()
        held.close()
    wait_for(lambda: "late" in set(poll()), 30)  # read from below its offset, though later offsets were polled
    assert j.write_messages([_ev("gone", "t")]) == [None]
    j.delete_messages_to("gone", 1)
    assert "gone" in set(poll())
    assert sorted(j.persistence_ids()) == sorted({f"old-{n}" for n in range(5)} | {"late", "after", "gone"})


@pytest.mark.postgres
def test_a_persistence_ids_poll_reads_again_no_deleted_id_of_before_yet_one_deleted_by_a_write_open_across_polls(
        pg) -> None:
    """highest_sequence_nr (the ids whose events were deleted) is read whole by the first polls only: then only its
    rows written by a transaction no older than the previous poll's snapshot's xmin (57 ms a poll at 100k deleted ids
    before). An id written and deleted by a transaction that took its xid before several polls and commits after
    them, so never visible in the journal, is still returned."""
    from journal.postgres import _QUERIES

    j, url = pg
    old = {f"old-{n}" for n in range(5)}
    assert j.write_messages([_ev(p, "t") for p in sorted(old)]) == [None] * 5
    for p in old:
        j.delete_messages_to(p, MAX)
    poll = j._persistence_ids_poller()
    assert set(poll()) == old
    wait_for(lambda: not set(poll()) & old, 30)  # (the whole listing only until the writes in flight have ended)
    s = _schema(url)
    batch, _ = encode_writes([_ev("ghost", "t")], now_millis())
    with psycopg.connect(SERVER) as held:  # not autocommit: one transaction, left open over the polls below
        held.execute("SELECT pg_current_xact_id()")  # its xid, now: older than the snapshots of the polls to come
        assert j.write_messages([_ev("after", "t")]) == [None]  # (a later xid ends: the snapshots' xmax passes held's)
        seen: set[str] = set()
        until = time.monotonic() + 0.6  # (> _XID_GRACE: polls settle offsets meanwhile)
        while time.monotonic() < until:
            seen |= set(poll())
            time.sleep(0.05)
        held.execute(_QUERIES["insert"].format(s=s), batch.rows[0])
        held.execute(_QUERIES["delete"].format(s=s), {"p": "ghost", "to": MAX})
        seen |= set(poll())
        assert "ghost" not in seen and "after" in seen
        held.commit()
    wait_for(lambda: "ghost" in set(poll()), 10)
    assert not set(poll()) & (old | {"ghost"})
    assert set(j.persistence_ids()) == old | {"ghost", "after"}


@pytest.mark.postgres
def test_a_persistence_ids_poll_reads_only_the_deleted_ids_rows_inserted_since_about_its_last_poll(pg) -> None:
    """Each poll's read of highest_sequence_nr (the ids whose events were deleted) costs the rows inserted since
    about the previous poll, not the table: by the rows' xmin it was a scan of the whole table every poll (1.6 ms at
    20k deleted ids, 15 ms at 200k). The statements a poll sends are explained as the journal runs them (generic
    plans), with the poll's own parameters."""
    j, _ = pg
    j.execute("INSERT INTO {s}.highest_sequence_nr (persistence_id, sequence_nr) "  # type: ignore[attr-defined]
              "SELECT 'del-' || g, 1 FROM generate_series(1, 3000) g")
    j.execute("ANALYZE {s}.highest_sequence_nr")  # type: ignore[attr-defined]
    poll = j._persistence_ids_poller()
    assert len(set(poll())) == 3000
    wait_for(lambda: "del-1" not in set(poll()), 30)  # (the whole listing only until the writes in flight have ended)
    gone = {f"gone-{n}" for n in range(3)}
    for p in sorted(gone):
        assert j.write_messages([_ev(p, "t")]) == [None]
        j.delete_messages_to(p, MAX)
    sent: list[tuple[str, tuple]] = []
    query = j._db.query  # type: ignore[attr-defined]

    def recording(what: str, name: str, params: tuple = ()) -> list:
        sent.append((name, tuple(params)))
        return query(what, name, params)
    j._db.query = recording  # type: ignore[attr-defined]
    try:
        assert set(poll()) >= gone
    finally:
        j._db.query = query  # type: ignore[attr-defined]
    reads = [(name, params) for name, params in sent if "highest_sequence_nr" in j._db.q[name]]  # type: ignore[attr-defined]
    assert reads, sent
    with psycopg.connect(SERVER) as conn:
        conn.execute("SET plan_cache_mode = force_generic_plan")
        rows = 0
        for n, (name, params) in enumerate(reads):
            statement = j._db.q[name]  # type: ignore[attr-defined]
            for k in range(len(params)):
                statement = statement.replace("%s", f"${k + 1}", 1)
            conn.execute(f"PREPARE r{n} AS {statement}")
            args = sql.SQL(", ").join(sql.Literal(str(p)) for p in params)
            (plan,) = conn.execute(sql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE {} ({})").format(
                sql.Identifier(f"r{n}"), args)).fetchone()[0]
            rows += _journal_rows_read(plan["Plan"], "highest_sequence_nr")
    assert rows <= 100, (rows, reads)


@pytest.mark.postgres
@pytest.mark.parametrize("plans", ["force_generic_plan", "force_custom_plan"])
def test_a_persistence_ids_poll_at_a_high_offset_reads_only_the_events_after_it(pg, plans: str) -> None:
    """The poll's read of the ids after an offset walks the ordering index from it, with the generic plan the
    journal's connections use and with a custom one (a SELECT DISTINCT over the whole journal took 22-33 ms at
    200k events, every poll)."""
    from journal.postgres import _QUERIES, split_url

    journal, url = pg
    for start in range(0, 4_000, 500):
        assert journal.write_messages([AtomicWrite([PersistentRepr(n, 1, f"id-{n}")])
                                       for n in range(start, start + 500)]) == [None] * 500
    newest = journal.newest_offset()
    conninfo, schema, *_ = split_url(url)
    with psycopg.connect(conninfo) as conn:
        conn.execute(f"ANALYZE {schema}.journal")
        conn.execute(f"SET plan_cache_mode = {plans}")
        query = _QUERIES["ids_after"].format(s=schema)
        conn.execute(f"PREPARE ids_after (bigint, bigint) AS {query.replace('%s', '$1', 1).replace('%s', '$2', 1)}")
        (plan,) = conn.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ids_after ({newest - 30}, 10000)").fetchone()[0]
        assert _journal_rows_read(plan["Plan"]) <= 30, plan
        last, count, ids = conn.execute(query, (newest - 30, 10_000)).fetchone()
        assert (last, count, sorted(ids)) == (newest, 30, sorted(f"id-{n}" for n in range(3_970, 4_000)))


@pytest.mark.postgres
def test_a_role_that_may_not_read_the_offsets_sequence_still_reads_ranges(pg) -> None:
    """A range read asks the ordering identity's sequence for the highest offset drawn; a reader granted SELECT on
    the tables only (what `reprise journal` names as a reader's rights) may not read it, and reads by its range's
    own end instead of failing."""
    j, url = pg
    assert j.write_messages([_ev(f"p{n}", "t") for n in range(3)]) == [None] * 3
    assert j.write_messages([_ev("newest", "t")]) == [None]
    end = j.newest_offset()
    j.delete_messages_to("newest", 1)
    schema, role = _schema(url), f"reader_{uuid.uuid4().hex[:10]}"
    with psycopg.connect(SERVER, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN")
        try:
            admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
            admin.execute(f"GRANT SELECT ON ALL TABLES IN SCHEMA {schema} TO {role}")
            with open_journal(url.replace("postgres@", f"{role}@", 1)) as reader:
                assert [e.persistence_id for e in reader.events_between(0, end)] == ["p0", "p1", "p2"]
                assert [e.persistence_id for e in reader.events_between(0, 10**12)] == ["p0", "p1", "p2"]
        finally:
            admin.execute(f"DROP OWNED BY {role}")
            admin.execute(f"DROP ROLE {role}")

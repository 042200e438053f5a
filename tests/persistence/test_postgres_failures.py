"""Dropped PostgreSQL connections (pg_terminate_backend) under a top-level PersistentActor and an entity host:
both keep working, nothing acknowledged is lost (issue 12 item 7). Real server, both bases. And the journal's
pool itself: a terminated idle connection is discarded before use, without a round trip."""

from __future__ import annotations

import os
import socket
import threading
import time
import uuid

import psycopg
import pytest

from journal import AtomicWrite, PersistentRepr, open_journal
from journal.postgres import drop_schema
from tests.persistence.pg_actors import Add, Counter
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

SINGLE, ENTITY = "/user/single", "/user/counters/1"


@pytest.fixture
def pg(postgres_url):
    """(journal URL with its own schema and application_name, that application_name)."""
    name = f"reprise_super_{uuid.uuid4().hex[:10]}"
    url = f"{postgres_url}?schema={name}&application_name={name}"
    yield url, name
    drop_schema(url)


def _terminate(admin: psycopg.Connection, app: str) -> int:
    """Terminate every backend of `app` (the journal's pooled connections); returns how many."""
    rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                         (app,)).fetchall()
    return len(rows)


def _acks(probe, count: int) -> set[int]:
    got = probe.receive_many(count, 30)
    assert all(kind == "ack" for kind, _ in got), got
    return {n for _, n in got}


def _send(probe, numbers: range) -> None:
    for n in numbers:
        probe.tell(SINGLE, Add(n))
        probe.tell(ENTITY, Add(n))


def test_terminated_backends_neither_stop_actors_nor_lose_acknowledged_events(base, make_system, pg, postgres_url):
    url, app = pg
    system = make_system(base, journal=url, snapshot_store=url)
    system.spawn(Counter, SINGLE, backoff=(0.05, 0.2, 0))
    system.spawn(Counter, "/user/counters", entities=True)
    probe = system.probe()
    acked: set[int] = set()
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        _send(probe, range(0, 10))
        acked |= _acks(probe, 20)

        # 1. Idle pooled connections dropped by the server: the pool checks them before use.
        assert _terminate(admin, app) >= 1
        _send(probe, range(10, 20))
        acked |= _acks(probe, 20)
        assert system.status().hosts[SINGLE].restarts == 0

        # 2. A write in flight when its backend is terminated: the persist fails (outcome unknown), the
        # top-level actor stops and is restarted with backoff, the entity stops and comes back on demand.
        lock = psycopg.connect(postgres_url)
        lock.execute(f"LOCK TABLE {app}.journal IN ACCESS EXCLUSIVE MODE")

        # A write whose connection is lost before COMMIT is run once more on a new connection: lose the retried
        # one too, so that the writes fail. The local base runs every actor in one thread: one write waits at a time.
        writers = 1 if base == "local" else 2

        def terminate_the_waiting_writers() -> None:
            terminated: list[int] = []

            def new_waiters() -> list[int] | None:
                pids = [r[0] for r in admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock' "
                    "AND NOT pid = ANY(%s)", (app, terminated))]
                return pids if len(pids) >= writers else None

            try:
                for _ in range(2):
                    pids = wait_for(new_waiters, 30)
                    # Only the waiting writers: killing the idle pooled connections too left a retry waiting
                    # on the pool's reconnect backoff instead of on the lock (flaky under load).
                    admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
                    terminated.extend(pids)
            finally:
                lock.commit()  # releases the lock, also when this failed (the local base's tell would wait forever)

        killer = threading.Thread(target=terminate_the_waiting_writers)
        killer.start()
        _send(probe, range(100, 101))
        killer.join(40)
        lock.close()
        assert not killer.is_alive()
        host = wait_for(lambda: (h := system.status().hosts[SINGLE]).restarts >= 1 and h.state == "running" and h, 30)
        assert "persist failed" in host.last_exit
        _send(probe, range(20, 30))
        later = []
        while len([n for n in later if n != 100]) < 20:  # the write of 100 may or may not have been acked
            kind, n = probe.receive(30)
            later.append(n)
        acked |= set(later)
        assert set(range(30)) <= acked
    for path in (SINGLE, ENTITY):
        values = probe.system.ask(path, "values", 30)
        assert set(range(30)) <= set(values), (path, sorted(set(range(30)) - set(values)))
        assert len(values) == len(set(values)), f"{path} applied an event twice"


def _write(journal, pid: str, numbers: range) -> None:
    for n in numbers:
        journal.write_messages([AtomicWrite([PersistentRepr(payload=n, persistence_id=pid, sequence_nr=n)])])


def _terminate_pooled(admin: psycopg.Connection, app: str) -> None:
    """Terminate the pooled connections' backends by pid, and wait until they are gone."""
    pids = [r[0] for r in admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,))]
    assert len(pids) == 3, pids
    admin.execute("SELECT pg_terminate_backend(pid) FROM unnest(%s::int[]) AS pid", (pids,))
    # Gone from pg_stat_activity = the backend exited, so its FATAL notice and EOF are on the sockets: the
    # pool's check must see them now (with a race left, the write's own retry would hide a missing check).
    wait_for(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s)",
                                   (pids,)).fetchone()[0] == 0, 10)


def test_the_pool_discards_terminated_idle_connections_before_use(pg, postgres_url):
    url, app = pg
    journal = open_journal(f"{url}&pool_min=3&pool_max=3")
    try:
        pool = journal._db.pool
        wait_for(lambda: pool.get_stats()["pool_available"] == 3, 10)
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            _write(journal, "p", range(1, 101))
            assert pool.get_stats().get("connections_lost", 0) == 0, "the check discarded healthy connections"

            _terminate_pooled(admin, app)
            t = time.monotonic()
            _write(journal, "p", range(101, 102))
            # One dead connection found makes the check sweep the other idle ones (no round trip either);
            # otherwise the pool would back off 1 s, then 2 s, before trying each remaining dead one.
            assert time.monotonic() - t < 1.0
            wait_for(lambda: pool.get_stats()["pool_available"] == 3, 10)

            _terminate_pooled(admin, app)
            replayed = [r.payload for r in journal.replay_messages("p")]
            assert replayed == list(range(1, 102))
            assert journal.highest_sequence_nr("p") == 101

            stats = pool.get_stats()
            assert stats.get("connections_lost", 0) == 6, stats
            # No operation ran on a dead connection (a failed one is returned "bad", then retried): the check
            # caught every terminated connection before it was handed out.
            assert stats.get("returns_bad", 0) == 0, stats
    finally:
        journal.close()


_WAIT_AT_COMMIT = 0x7265707269736599  # advisory lock the test holds; the journal's COMMITs wait for it


def _commits_wait_for_the_test(journal, admin: psycopg.Connection) -> None:
    """Make every COMMIT of a journal write wait (a deferred trigger) while `admin` holds _WAIT_AT_COMMIT."""
    journal.execute("CREATE FUNCTION {s}.wait_at_commit() RETURNS trigger LANGUAGE plpgsql AS "
                    f"'BEGIN PERFORM pg_advisory_xact_lock_shared({_WAIT_AT_COMMIT}); RETURN NULL; END'")
    journal.execute("CREATE CONSTRAINT TRIGGER wait_at_commit AFTER INSERT ON {s}.journal "
                    "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {s}.wait_at_commit()")
    admin.execute("SELECT pg_advisory_lock(%s)", (_WAIT_AT_COMMIT,))


def _committing(admin: psycopg.Connection, app: str, not_pid: int = 0) -> int:
    """The pid of the journal's backend waiting inside COMMIT (bounded wait)."""
    return wait_for(lambda: (r := admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query = 'COMMIT' "
        "AND wait_event = 'advisory' AND pid <> %s", (app, not_pid)).fetchone()) and r[0], 20)


def _write_in_thread(journal, pid: str, n: int) -> tuple[threading.Thread, list[BaseException | None]]:
    outcome: list[BaseException | None] = []

    def write() -> None:
        try:
            _write(journal, pid, range(n, n + 1))
            outcome.append(None)
        except BaseException as e:  # noqa: BLE001  (reported to the test thread)
            outcome.append(e)
    thread = threading.Thread(target=write)
    thread.start()
    return thread, outcome


@pytest.mark.parametrize("commit", ["rolled-back", "landed", "landing"])
def test_a_write_whose_commit_was_lost_is_stored_exactly_once(pg, postgres_url, commit):
    """The connection is lost during COMMIT: the write reads its rows back and is stored once, without error.

    rolled-back: the server killed the backend (rows absent: the write runs again);
    landed: the client lost it, the server committed before the read back (rows there);
    landing: the server commits only after the read back; the write's second run waits on the primary key
    for the first, hits it, and reads back again (without that, "sequence nr 3 already exists")."""
    url, app = pg
    journal = open_journal(url)
    used: list[psycopg.Connection] = []
    before_getconn: list = []
    getconn = journal._db.pool.getconn

    def spy(timeout: float | None = None) -> psycopg.Connection:
        while before_getconn:
            before_getconn.pop()()
        used.append(conn := getconn(timeout))
        return conn
    journal._db.pool.getconn = spy
    try:
        with psycopg.connect(postgres_url, autocommit=True) as admin:
            def unlock_and_wait_until_committed() -> None:
                admin.execute("SELECT pg_advisory_unlock(%s)", (_WAIT_AT_COMMIT,))
                wait_for(lambda: admin.execute(f"SELECT count(*) FROM {app}.journal WHERE sequence_nr = 3")
                         .fetchone()[0], 20)

            _write(journal, "p", range(1, 3))
            _commits_wait_for_the_test(journal, admin)
            thread, outcome = _write_in_thread(journal, "p", 3)
            backend = _committing(admin, app)
            if commit == "rolled-back":
                admin.execute("SELECT pg_terminate_backend(%s)", (backend,))
                _committing(admin, app, not_pid=backend)  # the second run waits in COMMIT too
            else:
                conn = next(c for c in reversed(used) if c.info.backend_pid == backend)
                if commit == "landed":  # the commit lands before the write takes a connection to read back
                    before_getconn.append(unlock_and_wait_until_committed)
                socket.socket(fileno=os.dup(conn.fileno())).shutdown(socket.SHUT_RDWR)
                if commit == "landing":  # the second run waits on the primary key for the first
                    wait_for(lambda: admin.execute(
                        "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                        "AND wait_event = 'transactionid'", (app,)).fetchone()[0], 20)
            if commit != "landed":
                unlock_and_wait_until_committed()
            thread.join(30)
            assert not thread.is_alive()
            assert outcome == [None], outcome
            _write(journal, "p", range(4, 5))
            assert [r.payload for r in journal.replay_messages("p")] == [1, 2, 3, 4]
    finally:
        journal.close()


def test_a_persist_behind_a_lock_fails_after_the_statement_timeout_naming_it_and_the_actor_recovers(
        base, make_system, pg, postgres_url):
    # A write waiting on a lock (a migration, VACUUM FULL, LOCK TABLE) waited as long as the lock was held:
    # the host hung without an error, a restart or a log line.
    url, _ = pg
    system = make_system(base, journal=f"{url}&statement_timeout=1", snapshot_store=url)
    system.spawn(Counter, SINGLE, backoff=(0.05, 0.2, 0))
    probe = system.probe()
    probe.tell(SINGLE, Add(1))
    assert probe.receive(30) == ("ack", 1)
    schema = url.split("schema=")[1].split("&")[0]
    with psycopg.connect(postgres_url) as locker:
        locker.execute(f"LOCK TABLE {schema}.journal IN ACCESS EXCLUSIVE MODE")
        probe.tell(SINGLE, Add(2))
        wait_for(lambda: any("statement_timeout of 1 s" in e.reason for e in system.errors().recent), timeout=60)
        locker.rollback()
    probe.tell(SINGLE, Add(3))
    assert probe.receive(30) == ("ack", 3)
    assert system.ask(SINGLE, "values", timeout=30) == [1, 3], "the write that timed out was not stored"


def test_the_url_s_own_parameters_are_checked_and_libpq_s_reach_it_as_given(postgres_url):
    from journal import InvalidUrl
    from persistence import OffsetStoreError, open_offset_store

    long_schema = "s" * 64  # PostgreSQL would cut it to 63 bytes: two such URLs would share a journal
    for query, named in ((f"schema={long_schema}", "schema="), ("schema=", "schema="), ("pool_max=four", "pool_max"),
                         ("pool_max=0", "pool_max"), ("pool_min=3&pool_max=2", "pool_max"),
                         ("statement_timeout=-1", "statement_timeout"), ("statement_timeout=nan", "statement_timeout")):
        with pytest.raises(InvalidUrl, match=named):
            open_journal(f"{postgres_url}?{query}")
    with pytest.raises(OffsetStoreError, match="1 to 63 bytes"):
        open_offset_store(f"{postgres_url}?schema={long_schema}")
    name = f"reprise_url_{uuid.uuid4().hex[:8]}"
    # A space reached libpq as "+": application_name changed, and `options` (a libpq way to set a timeout) failed.
    url = f"{postgres_url}?schema={name}&application_name=a%20b&options=-c%20work_mem%3D5MB&statement_timeout=0"
    try:
        with open_journal(url) as j, psycopg.connect(postgres_url, autocommit=True) as admin:
            assert j.write_messages([AtomicWrite([PersistentRepr("x", 1, "p")])]) == [None]
            names = [r[0] for r in admin.execute("SELECT application_name FROM pg_stat_activity WHERE "
                                                 "application_name LIKE 'a_b'").fetchall()]
            assert names and set(names) == {"a b"}, names
        store = open_offset_store(url)
        try:
            assert store.load("p") == 0
        finally:
            store.close()
    finally:
        drop_schema(url)

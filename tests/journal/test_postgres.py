"""PostgreSQL journal cases that need a second session holding a lock at the right moment (real server, no mocks)."""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from journal import AtomicWrite, InvalidUrl, JournalError, PersistentRepr, open_journal, open_snapshot_store
from journal.model import MAX_SEQUENCE_NR
from journal.postgres import drop_schema, split_url
from journal.testing import QueryCollector as Reader
from journal.urls import missing_journal, redact_url
from tests.forking import in_forked_child
from tests.journal.postgres_server import SERVER, postgres_url  # noqa: F401  (fixture)
from tests.waiting import wait_for

pytestmark = [pytest.mark.postgres, pytest.mark.timeout(120)]


@pytest.fixture
def pg(postgres_url: str) -> Iterator[tuple[str, str]]:  # noqa: F811
    """(journal URL on a fresh schema whose connections carry that name as application_name, the name)."""
    name = f"audit_pg_{uuid.uuid4().hex[:10]}"
    url = f"{SERVER}?schema={name}&application_name={name}"
    yield url, name
    drop_schema(url)


def _event(pid: str, n: int, tag: str) -> AtomicWrite:
    return AtomicWrite([PersistentRepr(f"{pid}-{n}", n, pid, tags=frozenset({tag}))])


def _waiting_on_a_lock(admin: psycopg.Connection, app: str) -> bool:
    return bool(admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                              "AND wait_event_type = 'Lock'", (app,)).fetchone()[0])  # type: ignore[index]


def test_a_delete_racing_a_write_of_its_id_keeps_the_highest_and_leaves_no_tag_without_its_event(pg) -> None:
    """A write of the id commits while delete_messages_to(MAX) runs: the highest must not go down (the next writer
    would reuse an acknowledged number) and no tag may outlive its event (a tag chunk holding one read short, and
    the query took that for its end: it skipped the events after it, of every id)."""
    url, app = pg
    pid, other, tag = "p", "q", "t"
    with open_journal(url) as journal, open_journal(url) as second, \
            psycopg.connect(SERVER, autocommit=True) as admin, psycopg.connect(SERVER) as locker:
        assert journal.write_messages([_event(pid, n, tag) for n in range(1, 6)]) == [None] * 5
        # The delete waits on one of its tag rows: the write of 6 commits while it runs.
        locker.execute(f"SELECT 1 FROM {app}.tags WHERE ordering = (SELECT ordering FROM {app}.journal "
                       "WHERE persistence_id = %s AND sequence_nr = 5) FOR UPDATE", (pid,))
        failed: list[BaseException] = []

        def delete() -> None:
            try:
                journal.delete_messages_to(pid, MAX_SEQUENCE_NR)
            except BaseException as e:  # noqa: BLE001  (reported to the test thread)
                failed.append(e)
        deleter = threading.Thread(target=delete)
        deleter.start()
        try:
            wait_for(lambda: _waiting_on_a_lock(admin, app), 20)
            assert second.write_messages([_event(pid, 6, tag)]) == [None]
        finally:
            locker.commit()
            deleter.join(30)
        assert not deleter.is_alive() and not failed, failed
        assert journal.highest_sequence_nr(pid) == 6, "an acknowledged sequence number would be given out again"
        assert journal.write_messages([_event(other, n, tag) for n in range(1, 4)]) == [None] * 3
        orphans = admin.execute(f"SELECT count(*) FROM {app}.tags t WHERE NOT EXISTS "
                                f"(SELECT 1 FROM {app}.journal j WHERE j.ordering = t.ordering)").fetchone()
        assert orphans == (0,), "a tag outlived its event"
        journal.replay_chunk = 2  # so that a chunk holds the tag of a deleted event
        got = [(e.persistence_id, e.sequence_nr) for e in journal.events_by_tag(tag)]
        assert [k for k in got if k[0] == other] == [(other, 1), (other, 2), (other, 3)], got


_HOLD_EARLY = 0x7265707269736598  # advisory lock the test holds; the early write's INSERT waits for it


def test_a_write_held_after_drawing_its_offset_is_not_skipped_by_a_query(pg) -> None:
    """An INSERT draws its offset (the identity default) before its transaction has an id: a write held
    in between (here a BEFORE trigger; in production a descheduled backend) was invisible to the snapshot
    rule, the gap below the later committed event was given up after _XID_GRACE, and the query ended
    without the early event, which then committed: a query resumed from the later offset never saw it."""
    url, app = pg
    tag = "t"
    with open_journal(url) as journal, psycopg.connect(SERVER, autocommit=True) as admin:
        journal.execute("CREATE FUNCTION {s}.hold_early() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN "
                        f"IF NEW.persistence_id = ''early'' THEN PERFORM pg_advisory_xact_lock_shared({_HOLD_EARLY}); "
                        "END IF; RETURN NEW; END'")
        journal.execute("CREATE TRIGGER hold_early BEFORE INSERT ON {s}.journal "
                        "FOR EACH ROW EXECUTE FUNCTION {s}.hold_early()")
        # nextval() takes a transaction id itself when it writes WAL, every 32 offsets (the first one included):
        # draw one first, so that the early write's offset is one that does not.
        assert journal.write_messages([_event("first", 1, "other")]) == [None]
        admin.execute("SELECT pg_advisory_lock(%s)", (_HOLD_EARLY,))
        outcome: list[object] = []
        writer = threading.Thread(target=lambda: outcome.append(journal.write_messages([_event("early", 1, tag)])))
        writer.start()
        query: Reader | None = None
        try:
            wait_for(lambda: admin.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s "
                                           "AND wait_event = 'advisory'", (app,)).fetchone()[0], 20)  # type: ignore[index]
            assert journal.write_messages([_event("late", 1, tag)]) == [None]
            query = Reader(journal.events_by_tag(tag, gap_timeout=30))
            # A negative shown over a window: well past _XID_GRACE, the query still waits for the early write.
            assert not query.done.wait(1.5), [e.persistence_id for e in query.got]
        finally:
            admin.execute("SELECT pg_advisory_unlock(%s)", (_HOLD_EARLY,))
            writer.join(30)
        assert outcome == [[None]]
        assert query is not None
        wait_for(query.done.is_set, 30)
        assert query.error is None
        assert [e.persistence_id for e in query.got] == ["early", "late"]


@pytest.mark.parametrize("seconds,setting", [(0.0004, "1ms"), (0.0015, "2ms"), (2.5, "2500ms"), (0.0, "0")])
def test_a_statement_timeout_under_a_millisecond_is_one_not_none(seconds: float, setting: str) -> None:
    """statement_timeout=0.0004 became int(0.4) = 0 ms: PostgreSQL's "no timeout", the opposite of what was asked."""
    from journal.postgres import _configure_with

    assert split_url(f"{SERVER}?statement_timeout={seconds}").statement_timeout == seconds
    with psycopg.connect(SERVER, autocommit=True) as conn:
        _configure_with(seconds)(conn)  # what each pooled connection runs when it is opened
        assert conn.execute("SHOW statement_timeout").fetchone() == (setting,)


_WAIT_AT_COMMIT = 0x7265707269736597  # advisory lock the test holds; the journal's COMMITs wait for it


def test_a_write_whose_lost_commit_may_still_land_is_reported_as_of_unknown_outcome(pg) -> None:
    """The COMMIT is lost and not yet landed when read back; the second run waits on the first's primary key
    and fails (here lock_timeout): that failure said "write failed", though the first commits a moment later."""
    url, app = pg
    journal = open_journal(f"{url}&statement_timeout=0&options=-c%20lock_timeout%3D1000")
    used: list[psycopg.Connection] = []
    getconn = journal._db.pool.getconn

    def spy(timeout: float | None = None) -> psycopg.Connection:
        used.append(conn := getconn(timeout))
        return conn
    journal._db.pool.getconn = spy  # type: ignore[method-assign]
    try:
        with psycopg.connect(SERVER, autocommit=True) as admin:
            assert journal.write_messages([_event("p", 1, "t")]) == [None]
            # A deferred trigger makes COMMIT wait for the test (its own wait exempt from lock_timeout).
            journal.execute("CREATE FUNCTION {s}.wait_at_commit() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN "
                            "PERFORM set_config(''lock_timeout'', ''0'', true); "
                            f"PERFORM pg_advisory_xact_lock_shared({_WAIT_AT_COMMIT}); RETURN NULL; END'")
            journal.execute("CREATE CONSTRAINT TRIGGER wait_at_commit AFTER INSERT ON {s}.journal "
                            "DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION {s}.wait_at_commit()")
            admin.execute("SELECT pg_advisory_lock(%s)", (_WAIT_AT_COMMIT,))
            outcome: list[BaseException | list[BaseException | None]] = []

            def write() -> None:
                try:
                    outcome.append(journal.write_messages([_event("p", 2, "t")]))
                except BaseException as e:  # noqa: BLE001  (reported to the test thread)
                    outcome.append(e)
            writer = threading.Thread(target=write)
            writer.start()
            try:
                backend = wait_for(lambda: (r := admin.execute(
                    "SELECT pid FROM pg_stat_activity WHERE application_name = %s AND query = 'COMMIT' "
                    "AND wait_event = 'advisory'", (app,)).fetchone()) and r[0], 20)
                conn = next(c for c in reversed(used) if c.info.backend_pid == backend)
                socket.socket(fileno=os.dup(conn.fileno())).shutdown(socket.SHUT_RDWR)  # the client loses it
                writer.join(30)
            finally:
                admin.execute("SELECT pg_advisory_unlock(%s)", (_WAIT_AT_COMMIT,))
            assert not writer.is_alive()
            (error,) = outcome
            assert isinstance(error, JournalError), error
            wait_for(lambda: journal.highest_sequence_nr("p") == 2, 20)  # the first run's COMMIT landed
            assert "outcome unknown" in str(error), str(error)
    finally:
        journal.close()


def _sessions(admin: psycopg.Connection, app: str) -> set[int]:
    return {r[0] for r in admin.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s", (app,))}


def test_closing_the_parents_journal_in_a_forked_child_does_not_end_the_parents_sessions(pg) -> None:
    """psycopg's close() sends libpq's Terminate message down the socket, which a fork shares with the parent:
    the server ended the parent's session, and the parent had to reconnect (a statement in flight there was
    lost). The child's close must leave the parent's sessions alone: the parent's next statements, queued
    behind where a Terminate would be on the same socket, run in the very same server sessions."""
    url, app = pg
    url += "&pool_min=2&pool_max=2"
    with open_journal(url) as journal, psycopg.connect(SERVER, autocommit=True) as admin:
        store = open_snapshot_store(url)
        try:
            assert journal.write_messages([_event("p", 1, "t")]) == [None]
            wait_for(lambda: len(_sessions(admin, app)) == 4, 20)  # both pools filled: 2 + 2
            before = _sessions(admin, app)

            def close_both() -> str:
                journal.close()
                store.close()
                return "closed"
            assert in_forked_child(close_both) == "closed"
            for _ in range(2):  # (through each pooled connection: they are handed out in turn)
                assert journal.highest_sequence_nr("p") == 1
                assert store.load("p") is None
            assert _sessions(admin, app) == before
        finally:
            store.close()


_OLD_RELATIONS = {"journal", "journal_pkey", "journal_ordering", "tags", "tags_pkey", "highest_sequence_nr",
                  "highest_sequence_nr_pkey", "snapshot", "snapshot_pkey"}
"""A schema made before the tags_ordering index (every release up to it): tables, primary keys, journal_ordering."""


def _relations(admin: psycopg.Connection, schema: str) -> set[str]:
    return {r[0] for r in admin.execute("SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                                        "WHERE n.nspname = %s AND c.relkind IN ('r', 'i')", (schema,))}


def _drop_inserted_xid(admin: psycopg.Connection, schema: str) -> None:
    """Back to the layout before highest_sequence_nr's column inserted_xid and its index."""
    admin.execute(f"DROP INDEX {schema}.highest_sequence_nr_inserted_xid")
    admin.execute(f"ALTER TABLE {schema}.highest_sequence_nr DROP COLUMN inserted_xid")


def test_a_new_journal_schema_is_logged_naming_it_and_an_upgraded_or_existing_one_is_not(pg, caplog) -> None:
    # A misspelt ?schema= started an empty journal (created silently): as a new SQLite file, the creation says so.
    url, app = pg
    said = f"created the new journal schema {app!r} in PostgreSQL at 127.0.0.1/test"
    with caplog.at_level(logging.INFO, logger="reprise.journal"):
        with open_journal(url):
            pass
        assert [r.getMessage() for r in caplog.records if "created the new journal schema" in r.getMessage()] == [
            f"{said} (there was none; if you meant an existing journal, fix the URL's ?schema=)"], caplog.text
        caplog.clear()
        with psycopg.connect(SERVER, autocommit=True) as admin:
            admin.execute(f"DROP INDEX IF EXISTS {app}.tags_ordering")  # (an older schema: upgraded, not new)
        with open_journal(url):
            pass
        with open_journal(url):
            pass
    assert "created the new journal schema" not in caplog.text, caplog.text


def test_a_schema_of_the_delete_race_era_is_upgraded_once_and_its_orphaned_tags_cut_no_query_short(pg) -> None:
    """A tag whose event was deleted (left by the old four-statement delete racing a write) made a tag chunk read
    short, and the query took that for its end: the events after it, up to the horizon, were skipped for good
    by every query that passed there. Opening the schema removes such tags, once, with the tags_ordering index."""
    url, app = pg
    tag = "t"
    with open_journal(url) as journal:
        assert journal.write_messages([_event(p, n, tag) for p in ("a", "b") for n in (1, 2, 3)]) == [None] * 6
    with psycopg.connect(SERVER, autocommit=True) as admin:
        # Back to the old layout, and the race's leftover: the tag of a deleted event of "a".
        admin.execute(f"DROP INDEX IF EXISTS {app}.tags_ordering")
        _drop_inserted_xid(admin, app)
        assert _relations(admin, app) == _OLD_RELATIONS
        admin.execute(f"DELETE FROM {app}.journal WHERE persistence_id = 'a' AND sequence_nr = 3")
        assert missing_journal(url) is None, "a reader finds a journal in an old schema"
        with open_journal(url) as journal:
            journal.replay_chunk = 3  # a chunk [a-1, a-2, (a-3's orphan)]: read short, it ended the query
            keys = [(e.persistence_id, e.sequence_nr) for e in journal.events_by_tag(tag)]
            assert keys == [("a", 1), ("a", 2), ("b", 1), ("b", 2), ("b", 3)]
            orphans = f"SELECT count(*) FROM {app}.tags t WHERE NOT EXISTS " \
                      f"(SELECT 1 FROM {app}.journal j WHERE j.ordering = t.ordering)"
            assert admin.execute(orphans).fetchone() == (0,)
            assert _relations(admin, app) == _OLD_RELATIONS | {"tags_ordering", "highest_sequence_nr_inserted_xid"}
            # Once: a complete schema is not touched again (an orphan made now, by hand, stays).
            admin.execute(f"DELETE FROM {app}.journal WHERE persistence_id = 'b' AND sequence_nr = 3")
        with open_journal(url):
            assert admin.execute(orphans).fetchone() == (1,)


def test_a_schema_before_the_inserted_xid_index_is_upgraded_by_concurrent_openers_and_polls_miss_no_deleted_id(
        pg) -> None:
    """A live persistence_ids poll reads the deleted ids by highest_sequence_nr's column inserted_xid (its index): a
    schema made before it gets both when opened, once, by several processes opening it at once; its ids deleted
    before (rows without the column then), by a writer of the old layout, and after the upgrade are all returned."""
    url, app = pg
    with open_journal(url) as journal:
        assert journal.write_messages([_event(p, 1, "t") for p in ("a", "b")]) == [None] * 2
        journal.delete_messages_to("a", MAX_SEQUENCE_NR)
        delete = journal._db.q["delete"]  # type: ignore[attr-defined]
    with psycopg.connect(SERVER, autocommit=True) as admin:
        _drop_inserted_xid(admin, app)
        assert _relations(admin, app) == _OLD_RELATIONS | {"tags_ordering"}
        admin.execute(delete, {"p": "b", "to": MAX_SEQUENCE_NR})  # the delete statement as the old layout ran it
        go, opened, failed = threading.Barrier(4), [], []

        def open_one() -> None:
            try:
                go.wait(20)
                opened.append(open_journal(url))
            except BaseException as e:  # noqa: BLE001  (reported below)
                failed.append(e)
        openers = [threading.Thread(target=open_one) for _ in range(4)]
        for t in openers:
            t.start()
        for t in openers:
            t.join(60)
        try:
            assert failed == [] and len(opened) == 4
            assert _relations(admin, app) == _OLD_RELATIONS | {"tags_ordering", "highest_sequence_nr_inserted_xid"}
            journal = opened[0]
            poll = journal._persistence_ids_poller()  # type: ignore[attr-defined]
            assert set(poll()) == {"a", "b"}
            wait_for(lambda: not set(poll()) & {"a", "b"}, 30)  # incremental once the writes in flight have ended
            assert opened[1].write_messages([_event("c", 1, "t")]) == [None]
            opened[2].delete_messages_to("c", MAX_SEQUENCE_NR)
            assert "c" in set(poll())
            assert sorted(journal.persistence_ids()) == ["a", "b", "c"]
        finally:
            for j in opened:
                j.close()


def test_a_delete_finds_its_events_tags_by_index_not_by_reading_every_tag(pg) -> None:
    """Without an index leading with `ordering`, each delete read the whole tags table (26 ms a delete at 200k
    tags and growing; /tmp bench in the commit): the plan, with sequential scans made a last resort."""
    url, app = pg
    with open_journal(url) as journal, psycopg.connect(SERVER, autocommit=True) as admin:
        assert journal.write_messages([_event("p", n, "t") for n in range(1, 4)]) == [None] * 3
        admin.execute("SET plan_cache_mode = force_generic_plan")
        admin.execute("SET enable_seqscan = off")  # a tiny table is cheaper to scan: ask which access paths exist
        admin.execute(f"PREPARE d(text, bigint) AS {journal._db.q['delete'].replace('%(p)s', '$1').replace('%(to)s', '$2')}")
        plan = "\n".join(r[0] for r in admin.execute("EXPLAIN (COSTS OFF) EXECUTE d('p', 3)"))
        assert "Seq Scan on tags" not in plan and "tags_ordering" in plan, plan


def _make_old(admin: psycopg.Connection, schema: str) -> None:
    """Back to the layout of a schema made before tags_ordering and inserted_xid (what older Reprises made)."""
    admin.execute(f"DROP INDEX {schema}.tags_ordering")
    _drop_inserted_xid(admin, schema)
    assert _relations(admin, schema) == _OLD_RELATIONS


@contextlib.contextmanager
def _role(admin: psycopg.Connection, schema: str, grants: str) -> Iterator[str]:
    """A login role of its own with USAGE on `schema` and `grants` on its tables (and its sequences' reads), dropped
    afterwards."""
    role = f"audit_role_{uuid.uuid4().hex[:10]}"
    admin.execute(f"CREATE ROLE {role} LOGIN")
    try:
        admin.execute(f"GRANT USAGE ON SCHEMA {schema} TO {role}")
        admin.execute(f"GRANT {grants} ON ALL TABLES IN SCHEMA {schema} TO {role}")
        if grants != "SELECT":
            admin.execute(f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {role}")
        yield role
    finally:
        admin.execute(f"DROP OWNED BY {role}")
        admin.execute(f"DROP ROLE {role}")


def _as(url: str, role: str) -> str:
    return url.replace("postgres@", f"{role}@", 1)


_READ_ONLY_SESSION = "&options=-c%20default_transaction_read_only%3Don"


@pytest.mark.parametrize("reader", ["a role granted SELECT only", "a read-only session"])
def test_a_reader_that_may_not_upgrade_an_older_schema_reads_it_as_it_is_and_its_writes_name_the_upgrade(
        pg, reader: str, capsys) -> None:
    """Opening a schema an older Reprise made upgrades it (DDL): a reporting role granted SELECT only, or a session
    that is read-only (a hot standby), failed every read entry point at open ("permission denied for database" /
    "cannot execute CREATE SCHEMA in a read-only transaction"). It reads the schema as it is (the deleted ids of a
    live persistence_ids by the rows' xmin), leaves it unchanged, and a write names the upgrade, whose SQL works."""
    from actors.cli import main

    url, app = pg
    with open_journal(url) as journal:
        assert journal.write_messages([_event(p, n, "t") for p in ("a", "b") for n in (1, 2)]) == [None] * 4
        journal.delete_messages_to("a", MAX_SEQUENCE_NR)
        delete = journal._db.q["delete"]  # type: ignore[attr-defined]
    with psycopg.connect(SERVER, autocommit=True) as admin, _role(admin, app, "SELECT") as role:
        _make_old(admin, app)
        mine = _as(url, role) if reader.startswith("a role") else url + _READ_ONLY_SESSION
        with open_journal(mine) as r, open_snapshot_store(mine) as snapshots:
            assert [e.payload for e in r.replay_messages("b")] == ["b-1", "b-2"]
            assert r.highest_sequence_nr("a") == 2
            assert list(r.current_persistence_ids()) == ["a", "b"]
            assert [(e.persistence_id, e.sequence_nr) for e in r.events_by_tag("t")] == [("b", 1), ("b", 2)]
            assert snapshots.load("b") is None
            poll = r._persistence_ids_poller()  # type: ignore[attr-defined]
            assert set(poll()) == {"a", "b"}
            wait_for(lambda: not set(poll()) & {"a", "b"}, 30)  # incremental once the writes in flight have ended
            admin.execute(f"INSERT INTO {app}.journal (persistence_id, sequence_nr, record, checksum) "
                          "SELECT 'c', 1, record, checksum FROM " + f"{app}.journal LIMIT 1")
            admin.execute(delete, {"p": "c", "to": MAX_SEQUENCE_NR})  # c: written and deleted between two polls
            assert "c" in set(poll())
            with pytest.raises(JournalError) as refused:
                r.check_writable()
            with pytest.raises(JournalError, match="lacks tags_ordering, highest_sequence_nr_inserted_xid"):
                r.write_messages([_event("d", 1, "t")])
            with pytest.raises(JournalError, match="lacks tags_ordering"):
                snapshots.check_writable()
        for command in ("ls", "show b", "tail", "verify"):
            name, *rest = command.split()
            assert main(["journal", name, mine, *rest]) == 0, capsys.readouterr().err
        printed = capsys.readouterr().out
        assert "b-2" in printed and "ok" in printed, printed
        assert _relations(admin, app) == _OLD_RELATIONS, "a reader changed the schema"
        message = str(refused.value)
        assert "open it with a role that owns its tables" in message, message
        admin.execute(message.split("run as that role: ", 1)[1])  # the SQL it names upgrades the schema
        assert _relations(admin, app) == _OLD_RELATIONS | {"tags_ordering", "highest_sequence_nr_inserted_xid"}


def test_a_writer_that_may_not_upgrade_an_older_schema_is_refused_naming_it_until_an_owner_has_upgraded_it_meanwhile(
        pg) -> None:
    """A writer role granted DML but owning no table opened an older schema and failed with "permission denied"; now
    its start (check_writable) and writes name the missing upgrade. An owner opening it meanwhile upgrades it while
    a reader's live persistence_ids runs (on the old layout's xmin scan): the reader misses no id, and the writer
    then writes without being reopened."""
    url, app = pg
    with open_journal(url) as journal:
        assert journal.write_messages([_event("a", 1, "t")]) == [None]
    with psycopg.connect(SERVER, autocommit=True) as admin, \
            _role(admin, app, "SELECT") as reader_role, \
            _role(admin, app, "SELECT, INSERT, UPDATE, DELETE") as writer_role:
        _make_old(admin, app)
        with open_journal(_as(url, writer_role)) as writer, open_journal(_as(url, reader_role)) as reader:
            with pytest.raises(JournalError, match="writing refused .* lacks tags_ordering, "
                                                   "highest_sequence_nr_inserted_xid, which this role may not add"):
                writer.check_writable()
            with pytest.raises(JournalError, match="write refused .*open it with a role that owns its tables"):
                writer.write_messages([_event("w", 1, "t")])
            with pytest.raises(JournalError, match="delete refused"):
                writer.delete_messages_to("a", 1)
            assert writer.highest_sequence_nr("w") == 0, "a refused write stored nothing"
            ids = Reader(reader.persistence_ids(live=True, poll_interval=0.05))
            try:
                wait_for(lambda: ids.got == ["a"], 20)
                with open_journal(url) as owner:  # upgrades it (the reader's polls wait on its lock, then go on)
                    assert owner.write_messages([_event("c", 1, "t")]) == [None]
                    owner.delete_messages_to("c", MAX_SEQUENCE_NR)
                assert _relations(admin, app) == _OLD_RELATIONS | {"tags_ordering", "highest_sequence_nr_inserted_xid"}
                writer.check_writable()
                assert writer.write_messages([_event("w", 1, "t")]) == [None]
                wait_for(lambda: set(ids.got) == {"a", "c", "w"}, 20)
            finally:
                ids.stop()


@pytest.mark.parametrize("password", ["pa/ss-Secret1", "pa?ss-Secret1", "pa#ss-Secret1", "se%zzSecret1"])
def test_a_password_not_percent_encoded_is_in_no_error_and_no_display(password: str) -> None:
    # libpq's and Reprise's errors quoted such passwords, whole or in part: "cannot connect to PostgreSQL at
    # test/ss-Secret1@127.0.0.1/test", "invalid URI query parameter: \"ss-Secret1@...\"", "invalid percent-encoded
    # token: \"se%zzSecret1\"", and redact_url shows them as they are.
    url = f"postgresql://test:{password}@127.0.0.1:5432/test"
    assert "Secret1" not in (redact_url(url) or "")
    with pytest.raises((JournalError, InvalidUrl)) as caught:
        open_journal(url).close()
    text = f"{caught.value} {caught.value.__cause__!r}"
    assert "Secret1" not in text, text
    assert "percent-encode" in text, text


def _socket_directory() -> str:
    """The test server's first unix socket directory (asked over TCP); skips when it has none."""
    with psycopg.connect(SERVER, connect_timeout=10) as conn:
        row = conn.execute("SHOW unix_socket_directories").fetchone()
    directories = [d.strip() for d in (row[0] if row else "").split(",") if d.strip().startswith("/")]
    if not directories:
        pytest.skip("the test PostgreSQL server listens on no unix socket")
    return directories[0]


@pytest.mark.parametrize("where", ["socket", "127.0.0.1"])
def test_a_url_whose_host_is_a_parameter_opens_its_journal_and_shows_no_password(where: str, postgres_url) -> None:  # noqa: F811
    # postgresql:///db?host=... (no host in the authority: libpq takes ?host=, a socket directory or an address)
    # became "postgresql:/test?host=..." for libpq, which refused it: "invalid connection option".
    host = _socket_directory() if where == "socket" else "127.0.0.1"
    schema = f"audit_pg_{uuid.uuid4().hex[:10]}"
    urls = [f"postgresql:///test?host={host}&user=postgres&password=pw-Secret1&schema={schema}",
            f"postgresql://postgres:pw-Secret1@/test?host={host}&schema={schema}",
            f"postgres://postgres@/test?schema={schema}&host={host}"]
    try:
        for n, url in enumerate(urls, 1):
            shown = redact_url(url) or ""
            assert "Secret1" not in shown and host in shown and f"schema={schema}" in shown, shown
            with open_journal(url) as journal:
                assert journal.write_messages([_event("p", n, "t")]) == [None]
                assert [r.sequence_nr for r in journal.replay_messages("p", 1, n, n)] == list(range(1, n + 1))
            assert missing_journal(url) is None
        with pytest.raises(JournalError) as caught:  # (an error names the host the URL gives, and no password)
            open_journal(urls[0].replace("/test?", "/no_such_db?")).close()
        text = f"{caught.value} {caught.value.__cause__!r}"
        assert f"at {host}/no_such_db" in text and "Secret1" not in text, text
    finally:
        drop_schema(urls[0])

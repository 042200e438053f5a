"""Today's new entry points fed what users get wrong, and attacked: each bad input fails with a clear error.

The journal query API, the journal's Spark source options (parsed without a JVM: the Spark read fails
with the same message, tests/spark_bridge/test_source.py), SQLite schema 2 at open, the metrics
endpoint, Projections and their offset stores.
"""

from __future__ import annotations

import datetime
import http.client
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

import actors
from actors.system import free_port, tagged_pids
from journal import (
    AtomicWrite,
    EventEnvelope,
    InvalidQuery,
    Journal,
    JournalError,
    PersistentRepr,
    open_journal,
)
from persistence import EventsByTag, GetProjectionState, PersistentActor, Projection
from tests.actors.sample import Echo, Ping, Pong
from tests.actors.test_security import listening_sockets
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

FIXTURES = Path(__file__).parent / "journal" / "fixtures"
ROOT = str(Path(__file__).parent.parent)


# ---- handlers, importable by name in every actor process ------------------------------------------

def ignore(envelope: EventEnvelope) -> None:
    """At-least-once: handle nothing."""


def fail_on_second(envelope: EventEnvelope) -> None:
    """At-least-once: the second event of a tag cannot be handled."""
    if envelope.sequence_nr == 2:
        raise RuntimeError(f"cannot handle {envelope.persistence_id}#{envelope.sequence_nr}")


def into_read_model(conn: sqlite3.Connection, envelope: EventEnvelope) -> None:
    """Exactly-once: one row per event in the offset store's database."""
    conn.execute("CREATE TABLE IF NOT EXISTS seen (event_offset INTEGER PRIMARY KEY)")
    conn.execute("INSERT INTO seen VALUES (?)", (envelope.offset,))


# ---- helpers ----------------------------------------------------------------------------------------

def write_tagged(url: str, n: int, tag: str = "t", pid: str = "p") -> None:
    """n events of one id, each tagged `tag`."""
    with open_journal(url) as j:
        j.write_messages([AtomicWrite([PersistentRepr({"n": i}, i, pid, tags=frozenset({tag}))])
                          for i in range(1, n + 1)])


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.fixture
def umask_022() -> Iterator[None]:
    """The usual user umask (files 0644 unless the code says otherwise), restored after the test."""
    old = os.umask(0o022)
    try:
        yield
    finally:
        os.umask(old)


# ---- the journal query API ------------------------------------------------------------------------

@pytest.fixture(params=["memory", "sqlite"])
def query_journal(request, tmp_path) -> Iterator[Journal]:
    url = f"memory://user-paths-{uuid.uuid4().hex}" if request.param == "memory" \
        else f"sqlite:///{tmp_path}/j.db"
    write_tagged(url, 3)
    with open_journal(url) as j:
        yield j


@pytest.mark.parametrize(("call", "named"), [
    (lambda j: j.events_between("0", "3"), "from_offset"),  # offsets read from a file or a CLI as text
    (lambda j: j.events_between(0, None), "to_offset"),
    (lambda j: j.events_between(-1, 3), "from_offset"),
    (lambda j: j.events_between(0.5, 3), "from_offset"),
    (lambda j: j.events_between(True, 3), "from_offset"),
    (lambda j: j.events_between(0, 3, tag=["t"]), "tag"),
    (lambda j: j.events_between(0, 3, tag=""), "tag"),
    (lambda j: j.newest_offset(tag=5), "tag"),
    (lambda j: j.all_events("2"), "offset"),
    (lambda j: j.events_by_tag(None), "tag"),  # read every event of every tag before the check
    (lambda j: j.events_by_tag("t", offset=None), "offset"),
    (lambda j: j.events_by_tag("t", gap_timeout="5"), "gap_timeout"),
    (lambda j: j.all_events(poll_interval=0), "poll_interval"),
    (lambda j: j.events_reader("2").read(10), "offset"),
    (lambda j: j.events_reader(0, tag="").read(10), "tag"),
    (lambda j: j.events_reader(0).read(0), "limit"),
    (lambda j: j.events_by_persistence_id("a", "2"), "from_sequence_nr"),  # (raised while iterating, before)
    (lambda j: j.events_by_persistence_id("a", 1, "2"), "to_sequence_nr"),
    (lambda j: j.events_by_persistence_id("a", -3), "from_sequence_nr"),
    (lambda j: j.events_by_persistence_id("a", 1.5), "from_sequence_nr"),
    (lambda j: j.events_by_persistence_id(None), "persistence_id"),  # (an empty result, before)
    (lambda j: j.events_by_persistence_id(42), "persistence_id"),  # (PostgreSQL: a JournalError while iterating)
])
def test_query_arguments_of_the_wrong_type_are_refused_at_the_call_naming_them(query_journal, call, named) -> None:
    with pytest.raises(InvalidQuery, match=named) as info:
        list(call(query_journal))
    assert isinstance(info.value, ValueError)
    assert [e.offset for e in query_journal.events_between(0, 3, tag="t")] == [1, 2, 3]  # right ones still work


def test_a_sqlite_journal_of_a_newer_schema_is_refused_naming_both_versions(tmp_path) -> None:
    url = f"sqlite:///{tmp_path}/j.db"
    write_tagged(url, 1)
    with sqlite3.connect(tmp_path / "j.db") as db:
        db.execute("PRAGMA user_version = 7")
    with pytest.raises(JournalError, match=r"schema 7, written by a newer Reprise; this one reads schemas up to 2"):
        open_journal(url)


def test_a_migrated_schema_1_journal_is_made_0600(tmp_path, umask_022) -> None:
    path = tmp_path / "old.db"
    shutil.copy(FIXTURES / "schema1.db", path)
    path.chmod(0o644)  # as an older Reprise, or a copy, may have left it
    with open_journal(f"sqlite:///{path}") as j:
        assert list(j.all_events())
        modes = {p.name: mode(p) for p in tmp_path.iterdir()}
    assert modes and set(modes.values()) == {0o600}, modes


# ---- the Spark source's options (the read fails with these messages: test_source.py) ----------------

def test_a_misspelt_source_option_is_refused_instead_of_reading_every_event(tmp_path) -> None:
    from spark_bridge.source import JournalSourceError, parse_options

    write_tagged(f"sqlite:///{tmp_path}/j.db", 1)
    for typo in ("persistenceid", "tags", "partition"):
        with pytest.raises(JournalSourceError, match=f"unknown option '{typo}'.*persistence_id"):
            parse_options({"url": f"sqlite:///{tmp_path}/j.db", typo: "x"})
    with pytest.raises(JournalSourceError, match=r'reads no path: give the journal as \.option\("url"'):
        parse_options({"url": f"sqlite:///{tmp_path}/j.db", "path": f"{tmp_path}/j.db"})  # .load(path)


def test_a_source_url_naming_no_journal_file_is_refused_and_creates_none(tmp_path) -> None:
    from pyspark.sql.types import LongType, StructField, StructType

    from spark_bridge.source import JournalDataSource, JournalSourceError

    source = JournalDataSource({"url": f"sqlite:///{tmp_path}/jounral.db"})  # what spark.read...load() makes
    schema = StructType([StructField("offset", LongType())])
    for plan in (source.reader, source.streamReader):
        with pytest.raises(JournalSourceError, match=r'option "url".*there is no journal file .*jounral\.db'):
            plan(schema)
    assert not list(tmp_path.iterdir())


def test_a_misspelt_postgresql_schema_is_refused_by_the_source_and_the_cli_and_creates_none(postgres_url,
                                                                                           capsys) -> None:
    import psycopg
    from pyspark.sql.types import LongType, StructField, StructType

    from actors.cli import main as reprise
    from journal import open_journal
    from journal.postgres import drop_schema
    from spark_bridge.source import JournalDataSource, JournalSourceError

    good = f"{postgres_url}?schema=rp_exists_{uuid.uuid4().hex[:8]}"
    typo = f"{postgres_url}?schema=rp_exsits_{uuid.uuid4().hex[:8]}"
    open_journal(good).close()  # a journal schema that exists, so the error can list it
    try:
        source = JournalDataSource({"url": typo})
        with pytest.raises(JournalSourceError, match=r"there is no journal schema 'rp_exsits_.*journal schemas in "
                                                     r"that database: .*rp_exists_.*check the \?schema="):
            source.reader(StructType([StructField("offset", LongType())]))
        assert reprise(["journal", "ls", typo]) == 2
        err = capsys.readouterr().err
        assert "there is no journal schema 'rp_exsits_" in err and "?schema=" in err, err
        assert reprise(["journal", "ls", good]) == 0
        schema = typo.rpartition("schema=")[2]
        with psycopg.connect(postgres_url) as conn:
            assert conn.execute("SELECT count(*) FROM information_schema.schemata WHERE schema_name = %s",
                                (schema,)).fetchone() == (0,), "a reader created the misspelt schema"
    finally:
        drop_schema(good)


def test_a_relative_source_url_is_made_absolute_for_the_executors(tmp_path, monkeypatch) -> None:
    from spark_bridge.source import parse_options

    write_tagged(f"sqlite:///{tmp_path}/j.db", 1)
    monkeypatch.chdir(tmp_path)
    assert parse_options({"url": "sqlite://j.db?torn_wal=accept"}).url == f"sqlite://{tmp_path}/j.db?torn_wal=accept"


# ---- the metrics endpoint -------------------------------------------------------------------------

def request(port: int, method: str, path: str) -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    try:
        conn.request(method, path)
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def test_the_metrics_endpoint_serves_get_of_metrics_and_nothing_else(base, make_system) -> None:
    port = free_port("127.0.0.1")
    make_system(base, metrics_port=port)
    status, body = request(port, "GET", "/metrics")
    assert status == 200 and b"reprise_status_ok 1.0" in body
    assert request(port, "HEAD", "/metrics") == (200, b"")
    for path in ("/", "/etc/passwd", "/../metrics", "/metrics/", "/favicon.ico"):
        status, body = request(port, "GET", path)
        assert (status, body) == (404, b"not found: the metrics are at /metrics\n"), path
    for method in ("POST", "PUT", "DELETE", "OPTIONS"):
        status, body = request(port, method, "/metrics")
        assert status == 405 and b"reprise" not in body, method


def test_a_metrics_port_equal_to_the_admin_port_is_refused_naming_both(base, make_system) -> None:
    port = free_port("127.0.0.1")
    with pytest.raises(actors.ConfigError, match=f"metrics_port {port} is the admin_port"):
        make_system(base, admin_port=port, metrics_port=port)
    if base == "multiproc":
        system = make_system(base)
        with pytest.raises(actors.ConfigError, match="is the admin_port"):
            actors.connect(system.admin_port, metrics_port=system.admin_port)


# ---- what a default system with a projection and a bridge listens on, and the files it makes --------

def test_a_default_system_with_a_projection_and_a_bridge_opens_no_other_port(make_system, tmp_path) -> None:
    from spark_bridge import start_bridge

    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(Echo, "/user/echo")
    system.spawn(Projection, "/user/projection", kwargs=dict(
        source=EventsByTag("t"), handler="tests.test_user_paths:ignore", offset_store=f"sqlite:///{tmp_path}/o.db"))
    start_bridge(system)
    assert system.ask("/user/echo", Ping(1)) == Pong(1, "/user/echo")
    sockets = listening_sockets(tagged_pids(system.tag))
    assert {ip for (ip, _), _ in sockets.values()} == {"127.0.0.1"}, sockets
    # Thespian's own: one listening socket per process (admin, logger, guardian, node agent, each host);
    # an endpoint opened without opt-in (metrics, HTTP) would be a second one in some process.
    holders = [pid for _, pids in sockets.values() for pid in pids]
    assert len(holders) == len(set(holders)) >= 7, sockets


@pytest.mark.parametrize("base", ["local", "multiproc"])  # (multiproc hosts run with umask 077; local ones do not)
def test_new_sqlite_files_of_projections_are_0600_whatever_the_umask(base, make_system, tmp_path, umask_022) -> None:
    journal = f"sqlite:///{tmp_path}/j.db"
    write_tagged(journal, 2)
    system = make_system(base, journal=journal)
    system.spawn(Projection, "/user/alo", kwargs=dict(
        source=EventsByTag("t"), handler="tests.test_user_paths:ignore", offset_store=f"sqlite:///{tmp_path}/alo.db",
        save_after_envelopes=1))
    system.spawn(Projection, "/user/eo", kwargs=dict(
        source=EventsByTag("t"), handler="tests.test_user_paths:into_read_model",
        offset_store=f"sqlite:///{tmp_path}/eo.db", exactly_once=True))
    for path in ("/user/alo", "/user/eo"):
        wait_for(lambda path=path: system.ask(path, GetProjectionState()).stored_offset == 2, timeout=30)
    modes = {p.name: oct(mode(p)) for p in tmp_path.iterdir() if p.name.endswith((".db", "-wal", "-shm"))}
    assert {"alo.db", "eo.db", "j.db"} <= set(modes)
    assert set(modes.values()) == {"0o600"}, modes


# ---- Projections fed what users get wrong ----------------------------------------------------------

def test_a_misspelt_projection_option_fails_the_spawn_naming_it(base, make_system, tmp_path) -> None:
    # (in the caller, naming the one meant: it was a traceback from the host process)
    system = make_system(base)
    offsets = f"sqlite:///{tmp_path}/o.db"  # (memory:// is refused on multiproc: each host process has its own)
    with pytest.raises(actors.ConfigError, match="Projection cannot be made with these args/kwargs: .*unexpected "
                                                 "keyword argument 'save_after_envelope' \\(did you mean "
                                                 "save_after_envelopes\\?\\); its parameters are source, "):
        system.spawn(Projection, "/user/p", kwargs=dict(
            source=EventsByTag("t"), handler="tests.test_user_paths:ignore", offset_store=offsets,
            save_after_envelope=10))
    with pytest.raises(actors.ConfigError, match="missing a required argument: 'offset_store'"):
        system.spawn(Projection, "/user/p", kwargs=dict(source=EventsByTag("t"), handler="tests.test_user_paths:ignore"))
    with pytest.raises(actors.SpawnFailed, match="exactly_once must be True or False, got 'no'"):
        system.spawn(Projection, "/user/p", kwargs=dict(
            source=EventsByTag("t"), handler="tests.test_user_paths:ignore", offset_store=offsets,
            exactly_once="no"))


def test_a_projection_source_journal_of_the_wrong_scheme_fails_the_spawn_naming_it(base, make_system,
                                                                                    tmp_path) -> None:
    system = make_system(base)
    offsets = f"sqlite:///{tmp_path}/o.db"
    with pytest.raises(actors.SpawnFailed, match=r"unsupported journal URL 'sqlite:/j\.db'.*sqlite:///abs/path\.db"):
        system.spawn(Projection, "/user/p", kwargs=dict(
            source=EventsByTag("t", journal="sqlite:/j.db"), handler="tests.test_user_paths:ignore",
            offset_store=offsets))


def test_a_projection_source_journal_naming_no_journal_fails_the_spawn_and_creates_none(base, make_system,
                                                                                       tmp_path) -> None:
    # A misspelt path opened (so created) an empty journal, and the projection reported lag 0 forever.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db")
    offsets = f"sqlite:///{tmp_path}/o.db"
    typo = tmp_path / "jounral.db"
    with pytest.raises(actors.SpawnFailed, match=f"EventsByTag\\(journal='sqlite:///{typo}'\\): there is no journal "
                                                 "file .*check the URL"):
        system.spawn(Projection, "/user/p", kwargs=dict(
            source=EventsByTag("t", journal=f"sqlite:///{typo}"), handler="tests.test_user_paths:ignore",
            offset_store=offsets))
    assert not typo.exists()
    # The system's own journal may not exist before its writers' first event: that is not refused.
    system.spawn(Projection, "/user/p", kwargs=dict(source=EventsByTag("t"), handler="tests.test_user_paths:ignore",
                                                    offset_store=offsets))
    assert system.ask("/user/p", GetProjectionState()).lag == 0


def test_exactly_once_with_a_memory_offset_store_fails_the_spawn(base, make_system) -> None:
    system = make_system(base)
    # (multiproc refuses any memory:// store in the caller, ConfigError; local in the host, for exactly_once)
    with pytest.raises((actors.SpawnFailed, actors.ConfigError), match="offset_store"):
        system.spawn(Projection, "/user/p", kwargs=dict(
            source=EventsByTag("t"), handler="tests.test_user_paths:into_read_model", offset_store="memory://o",
            exactly_once=True))


def test_a_handler_that_raises_is_reported_and_its_event_is_not_passed(base, make_system, tmp_path) -> None:
    journal = f"sqlite:///{tmp_path}/j.db"
    write_tagged(journal, 3)
    system = make_system(base, journal=journal)
    system.spawn(Projection, "/user/p", kwargs=dict(
        source=EventsByTag("t"), handler="tests.test_user_paths:fail_on_second",
        offset_store=f"sqlite:///{tmp_path}/o.db", save_after_envelopes=1),
        backoff=dict(min=0.2, max=0.5, random_factor=0.0))
    errors = wait_for(lambda: [e for e in system.errors().recent if e.path == "/user/p"], timeout=30)
    assert "RuntimeError: cannot handle p#2" in errors[0].reason
    with open_journal(journal) as j:
        first, second = [e.offset for e in j.events_by_tag("t")][:2]
    with sqlite3.connect(tmp_path / "o.db") as db:
        stored = db.execute("SELECT current_offset FROM projection_offset_store").fetchall()
    assert stored in ([], [(first,)]), stored  # never past the event that failed
    assert all(offset < second for (offset,) in stored)


# ---- a cleanly stopped system leaves its SQLite journal whole in its .db file -------------------------

STOP_CLEANLY = """
import sys
import actors
from tests.persistence.fixtures import Ops
if __name__ == "__main__":
    with actors.start(sys.argv[1], journal=f"sqlite:///{sys.argv[2]}") as system:
        system.spawn("tests.persistence.fixtures:Scripted", "/user/s", entities=True)
        for i in range(40):
            assert system.ask(f"/user/s/{i % 4}", Ops(str(i), ("p:x",))) == f"{i}-x-{i // 4 + 1}"
    print("acknowledged")
"""


@pytest.mark.parametrize("base", ["local", "multiproc"])
def test_a_cleanly_stopped_system_leaves_its_sqlite_journal_whole_in_the_db_file(base, tmp_path) -> None:
    # Processes exited without closing the journal: every event stayed in the -wal beside a 4 KiB .db (until
    # the next open), and a copy of the .db alone, as users make backups, held no events at all.
    path = tmp_path / "j.db"
    done = subprocess.run([sys.executable, "-c", STOP_CLEANLY, base, str(path)], capture_output=True, text=True,
                          timeout=100, cwd=ROOT)
    assert done.returncode == 0 and "acknowledged" in done.stdout, done.stderr
    assert sorted(os.listdir(tmp_path)) == ["j.db"]
    copy = tmp_path / "copy"
    copy.mkdir()
    shutil.copy(path, copy / "j.db")
    journal = open_journal(f"sqlite:///{copy / 'j.db'}")
    try:
        events = [[r.payload for r in journal.replay_messages(f"/user/s/{k}", 1, 100, 100)] for k in range(4)]
    finally:
        journal.close()
    assert events == [[f"{i}-x" for i in range(k, 40, 4)] for k in range(4)]


# ---- a receive_recover that takes RecoveryCompleted for an event ------------------------------------

class SumsEveryReplayedMessage(PersistentActor):
    """A newcomer's receive_recover: it treats every message it gets as an event, and RecoveryCompleted,
    which comes last (Akka's), has no `amount`."""

    def receive_recover(self, event: object) -> None:
        self.balance = getattr(self, "balance", 0) + event.amount  # type: ignore[attr-defined]

    def receive_command(self, command: object, sender: str | None) -> None:
        self.tell(sender, command)


def errors_settled(system: actors.System) -> object:
    """A condition for wait_for: the system's error count, once it did not move between two polls."""
    seen: list[int] = []

    def settled() -> int | None:
        seen.append(system.errors().count)
        return seen[-1] if len(seen) > 1 and seen[-1] == seen[-2] else None
    return settled


def test_an_entity_failing_on_recovery_completed_stops_after_max_restarts_instead_of_restarting_for_ever(
        base, make_system, tmp_path) -> None:
    # Each failed instance told itself a restart at its path; the tells outlived it, so every later instance took
    # an earlier one's for its own and told one more, and the last made the entity again after its stop for too
    # many restarts: ~450 restarts a second without end, and a multiproc shutdown that waited 30 s and killed it.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(SumsEveryReplayedMessage, "/user/accounts", entities=True, max_restarts=3)
    with pytest.raises((actors.ActorFailed, actors.MessageUndelivered)):
        system.ask("/user/accounts/1", "hello", timeout=30)
    count = wait_for(errors_settled(system), timeout=20, interval=0.5)
    assert count <= 3 * (3 + 2), system.errors().recent
    assert any("RecoveryCompleted" in e.reason and "amount" in e.reason for e in system.errors().recent)
    started = time.monotonic()
    system.shutdown()
    assert time.monotonic() - started < 10


# ---- an ask whose command's event the journal rejects ------------------------------------------------

class PersistsWhatItIsTold(PersistentActor):
    """Persists each command as its event and replies with it once stored."""

    def receive_command(self, command: object, sender: str | None) -> None:
        self.persist(command, lambda event: self.tell(sender, event))


class RepliesToRejections(PersistsWhatItIsTold):
    """Handles rejections itself (Akka's onPersistRejected), replying to the command's sender."""

    def on_persist_rejected(self, cause: BaseException, event: object, sequence_nr: int) -> None:
        self.tell(self.sender, f"rejected #{sequence_nr}")


def test_an_ask_whose_event_the_journal_rejects_fails_at_once_naming_the_value(base, make_system, tmp_path) -> None:
    # The handler never runs, so no reply came: the ask waited out its whole timeout (60 s by default) and said
    # only "no reply"; why was in system.errors() alone.
    system = make_system(base, journal=f"sqlite:///{tmp_path}/j.db")
    system.spawn(PersistsWhatItIsTold, "/user/accounts", entities=True)
    started = time.monotonic()
    with pytest.raises(actors.ActorFailed, match="SerializationError: .*datetime.datetime: store primitives"):
        system.ask("/user/accounts/1", {"at": datetime.datetime(2026, 1, 1)}, timeout=30)
    with pytest.raises(actors.ActorFailed, match="SerializationError: .*outside msgpack's 64-bit range"):
        system.ask("/user/accounts/1", 2 ** 70, timeout=30)
    assert time.monotonic() - started < 10
    assert system.ask("/user/accounts/1", {"amount": 3}) == {"amount": 3}  # the actor goes on (Akka)
    # An actor that handles rejections answers them itself: its answer is the ask's.
    system.spawn(RepliesToRejections, "/user/careful", entities=True)
    assert system.ask("/user/careful/1", {"at": datetime.datetime(2026, 1, 1)}, timeout=30) == "rejected #1"


# ---- spawn's class and arguments, as newcomers give them ---------------------------------------------

def test_a_class_or_arguments_the_host_process_cannot_get_fail_the_spawn_naming_them(base, make_system) -> None:
    # A class defined in a function, a lock or a lambda among the arguments: the multiproc base raised Thespian's
    # raw pickling error (AttributeError: Can't pickle local object ...) from deep in its transport, and the local
    # base took them, so code tried on it failed only on the real one. A dotted name ('module.Class', as topology
    # files take) failed in the host process with a traceback of ModuleNotFoundError.
    system = make_system(base)

    class Nested(Echo):
        pass

    with pytest.raises(actors.UnpicklableMessage, match="Nested is defined inside a function: .*define it at the "
                                                        "top level of a module"):
        system.spawn(Nested, "/user/echo")
    with pytest.raises(actors.UnpicklableMessage, match="spawn's kwargs cannot be sent to the host process "
                                                        r"\(TypeError: cannot pickle '_thread.lock' object\)"):
        system.spawn(Echo, "/user/echo", kwargs={"lock": threading.Lock()})
    with pytest.raises(actors.UnpicklableMessage, match="spawn's args cannot be sent .*lambda"):
        system.spawn(Echo, "/user/echo", args=(lambda: 1,))
    with pytest.raises(actors.ConfigError, match="cls 'tests.actors.sample.Echo' must name its class as "
                                                 r"'module:Class' \(e.g. 'tests.actors.sample:Echo'\)"):
        system.spawn("tests.actors.sample.Echo", "/user/echo")
    with pytest.raises(actors.ConfigError, match="cls 'Echo' must name its class as 'module:Class':"):
        system.spawn("Echo", "/user/echo")
    # Nothing was spawned: the path is free for the right spawn.
    system.spawn("tests.actors.sample:Echo", "/user/echo")
    assert system.ask("/user/echo", Ping(1)) == Pong(1, "/user/echo")

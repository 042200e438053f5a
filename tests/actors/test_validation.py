"""Bad configuration fails at once with an error naming the value and the fix; lifecycle edges."""

from __future__ import annotations

import json
import logging
import os
import pickle
import re
import signal
import stat
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import actors
from actors import ConfigError, RepriseError, SpawnCause, SpawnFailed, SystemNotRunning
from actors.messages import HostReady, Spawned
from actors.system import kill_tagged, tagged_pids
from journal import SnapshotMetadata, open_journal, open_snapshot_store
from tests.actors.refusal import start_refused
from tests.actors.sample import Echo, Ping, Pong
from tests.actors.validation_sample import Connector, RefusesToStart, Tally, Ticking
from tests.conftest import SESSION_TOKEN, start_system, stop_system
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

BAD_START = [
    ({"journal": "sqllite:///tmp/x.db"}, ["'sqllite:///tmp/x.db'", "did you mean sqlite://", "memory://", "postgresql://"]),
    ({"journal": "foo://"}, ["'foo://'", "unsupported scheme 'foo'", "sqlite://"]),
    ({"snapshot_store": "journal.db"}, ["snapshot_store 'journal.db' is a file path", "give sqlite://journal.db "]),
    ({"snapshot_store": "journal:db"}, ["snapshot_store", "must be a URL"]),
    ({"journal": "sqlite:///data/{shard}.db"}, ["{shard}", "spawn's own"]),
    ({"journal": "sqlite://"}, ["names no file"]),
    ({"peers": ("db.example.com",)}, ["peers", "'db.example.com'", "IP address"]),
    ({"peers": "10.0.0.1"}, ["peers must be a list of IP addresses"]),
    ({"log_level": "LOUD"}, ["log_level", "WARNING", "'LOUD'"]),
    ({"start_timeout": 0}, ["start_timeout must be > 0"]),
    ({"start_timeout": -1.0}, ["start_timeout must be > 0"]),
    ({"admin_port": 70000}, ["admin_port", "1..65535"]),
    ({"bind": "localhost"}, ["bind must be an IP address"]),
    ({"leader": "10.0.0.5"}, ["leader must be 'IP:PORT'"]),
    ({"node": ""}, ["node must be a non-empty name"]),
]


def _must_refuse(base: str, tmp_path, **kwargs) -> ConfigError:
    try:
        system = start_system(base, tmp_path, **kwargs)
    except ConfigError as e:
        return e
    stop_system(system)
    pytest.fail(f"actors.start({kwargs}) was accepted")


@pytest.mark.parametrize(("kwargs", "expected"), BAD_START, ids=[str(k) for k, _ in BAD_START])
def test_start_refuses_bad_configuration(base, tmp_path, kwargs, expected) -> None:
    error = _must_refuse(base, tmp_path, **kwargs)
    assert isinstance(error, ValueError) and isinstance(error, RepriseError)
    for text in expected:
        assert text in str(error)


def test_a_secret_file_that_is_no_path_or_in_a_missing_directory_is_refused_naming_it(tmp_path) -> None:
    # secret_file=123 raised "TypeError: expected str, bytes or os.PathLike object, not int", and a secret file the
    # leader was to create in a directory that does not exist "[Errno 2] No such file or directory": neither named
    # secret_file (in a topology file, the user wrote neither the word nor the path).
    for base in ("local", "multiproc"):
        error = _must_refuse(base, tmp_path, secret_file=123)
        assert "secret_file must be a file path" in str(error) and "123" in str(error), error
    missing = tmp_path / "no-such-dir" / "secret"
    with pytest.raises(RepriseError) as failed:
        start_system("multiproc", tmp_path, secret_file=str(missing))
    assert f"secret_file {missing}" in str(failed.value) and "does not exist" in str(failed.value), failed.value
    assert not missing.parent.exists()


@pytest.mark.parametrize("name", ["journal", "snapshot_store"])
def test_an_in_memory_store_is_refused_on_the_multiproc_base_and_kept_on_the_local_one(tmp_path, name) -> None:
    """Each host process would get its own empty memory:// store: a query or projection elsewhere reads nothing."""
    url = f"memory://refused-{uuid.uuid4().hex[:6]}"
    error = _must_refuse("multiproc", tmp_path, **{name: url})
    for text in (f"{name}={url!r}", "one process's memory", "sqlite:///abs/path.db", "local base"):
        assert text in str(error)
    system = start_system("multiproc", tmp_path)
    try:
        with pytest.raises(ConfigError, match=f"{name}='memory://x' lives in one process's memory"):
            system.spawn(Echo, "/user/echo", **{name: "memory://x"})
        assert system.status().hosts.get("/user/echo") is None  # nothing was started
    finally:
        stop_system(system)
    local = start_system("local", tmp_path, **{name: url})
    try:
        local.spawn(Echo, "/user/echo", **{name: "memory://x"})  # one process: its memory is shared
        assert local.ask("/user/echo", Ping(1), timeout=10) == Pong(1, "/user/echo")
    finally:
        stop_system(local)


def test_start_error_never_shows_a_password(base, tmp_path) -> None:
    error = _must_refuse(base, tmp_path, journal="postgresq://app:hunter2@db/test")
    assert "hunter2" not in str(error) and "app:***@db" in str(error)


def test_start_normalises_log_level(tmp_path) -> None:
    system = start_system("local", tmp_path, log_level="info")
    try:
        assert system.config["log_level"] == "INFO"
    finally:
        stop_system(system)


BAD_SPAWN = [
    ({"passivate_after": 0}, "passivate_after must be > 0"),
    ({"passivate_after": -5}, "passivate_after must be > 0"),
    ({"passivate_after": float("nan")}, "passivate_after must be a number"),
    ({"passivate_after": True}, "passivate_after must be a number"),
    ({"max_restarts": -1}, "max_restarts must be >= 0"),
    ({"max_restarts": 1.5}, "max_restarts must be an integer"),
    ({"restart_window": 0}, "restart_window must be > 0"),
    ({"linger": -0.1}, "linger must be >= 0"),
    ({"batch_cap": 0}, "batch_cap must be >= 1"),
    ({"timeout": 0}, "timeout must be > 0"),
    ({"journal": "sqllite:///x/{shard}.db"}, "did you mean sqlite://"),
    ({"snapshot_store": "sqlite:///x/{node}.db"}, "the only placeholder"),
]


@pytest.mark.parametrize(("kwargs", "expected"), BAD_SPAWN, ids=[str(k) for k, _ in BAD_SPAWN])
def test_spawn_refuses_bad_options(system, kwargs, expected) -> None:
    with pytest.raises(ConfigError) as caught:
        system.spawn(Echo, "/user/echoes", entities=True, **kwargs)
    assert expected in str(caught.value)
    # Nothing was spawned: the path is still free.
    system.spawn(Echo, "/user/echoes", entities=True)
    assert system.ask("/user/echoes/1", Ping(1), timeout=30) == Pong(1, "/user/echoes/1")


@pytest.mark.parametrize(("path", "expected"), [
    ("/system/orders", ["/system is reserved", "/user/orders", "system_actor_of"]),
    ("/system/spark-bridge", ["/system is reserved", "/user/spark-bridge", "spark_bridge.start_bridge"]),
    ("/temp/orders", ["/temp is reserved", "clients' reply paths", "/user/orders"]),
    ("/temp/0123456789ab/x", ["/temp is reserved", "/user/0123456789ab/x"]),
])
def test_spawn_refuses_the_reserved_roots_naming_the_user_path_to_use(system, path, expected) -> None:
    # Akka keeps /system and /temp for itself; spawn took both, and an actor at /temp/<id> sat where a client's
    # replies are routed (every client is /temp/<12 hex digits>).
    for entities in (False, True):
        with pytest.raises(actors.InvalidPath) as caught:
            system.spawn(Echo, path, entities=entities)
        assert all(needle in str(caught.value) for needle in expected), str(caught.value)
    assert path not in system.status().hosts  # nothing was spawned
    user_path = "/user/" + path.split("/", 2)[2]
    system.spawn(Echo, user_path)  # the fix the error names works
    assert system.ask(user_path, Ping(1), timeout=30) == Pong(1, user_path)


def test_a_system_actor_is_spawned_below_system_with_system_actor_of_only(system) -> None:
    assert system.system_actor_of(Echo, "/system/echo") == "/system/echo"
    assert system.ask("/system/echo", Ping(2), timeout=30) == Pong(2, "/system/echo")
    for path in ("/user/echo", "/temp/echo"):
        with pytest.raises(actors.InvalidPath, match="a system actor's path is below /system"):
            system.system_actor_of(Echo, path)
    with pytest.raises(actors.PathTaken):
        system.system_actor_of(Echo, "/system/guardian")
    with pytest.raises(actors.InvalidPath, match="/system is reserved"):  # (the flag did not outlive the call)
        system.spawn(Echo, "/system/other")


@pytest.mark.parametrize("entities", [False, True])
def test_spawn_fails_with_the_store_error_when_its_journal_cannot_be_opened(system, tmp_path, entities) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the journal's directory should be")
    url = f"sqlite:///{blocker}/journal.db"
    with pytest.raises(SpawnFailed) as caught:
        system.spawn(Tally, "/user/tally", entities=entities, journal=url, timeout=60)
    message = str(caught.value)
    assert "Tally cannot open its journal" in message and str(blocker) in message
    # The failed host released its path; a good journal works.
    system.spawn(Tally, "/user/tally", entities=entities, journal=f"sqlite:///{tmp_path}/ok.db")
    target = "/user/tally/a" if entities else "/user/tally"
    assert system.ask(target, 5, timeout=30) == 5


@pytest.mark.parametrize("key", ["journal", "snapshot_store"])
def test_spawn_failed_carries_what_failed_typed_from_the_host_to_the_client(system, tmp_path, key) -> None:
    # The CLI chose its hint by matching "cannot open its (journal|snapshot store) URL: " in the message the host
    # process sent as text: any rewording lost the hint. The host's SpawnFailed.cause now crosses to the client.
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the store's directory should be")
    url = f"sqlite:///{blocker}/{key}.db"
    stores = {"journal": f"sqlite:///{tmp_path}/ok.db", key: url}
    with pytest.raises(SpawnFailed) as caught:
        system.spawn(Tally, "/user/tally", timeout=60, **stores)
    assert caught.value.cause == SpawnCause(key, url), caught.value
    # (its text is unchanged: the cause is beside it, not in it)
    assert f"Tally cannot open its {key.replace('_', ' ')} {url}: " in str(caught.value)


def test_typed_causes_unpickle_from_before_their_fields() -> None:
    # The fields that replaced matching messages (SystemNotRunning.nothing_listens, LeaderUnreachable.member_runs,
    # SecretUnavailable.secret_file, SerializationError.unknown_manifest, SpawnCause.store_error,
    # HostInfo.last_cause): an instance pickled by a version without them (reduced to its text alone, or a
    # dataclass without the key) loads with the default, and a new one keeps its value.
    from actors import SecretUnavailable
    from actors.errors import LeaderUnreachable
    from actors.messages import HostInfo
    from journal import SerializationError

    class Old:
        def __init__(self, reduced: tuple[object, ...]) -> None:
            self.reduced = reduced

        def __reduce__(self) -> tuple[object, ...]:
            return self.reduced

    for cls, field, default, given in ((SystemNotRunning, "nothing_listens", False, True),
                                       (LeaderUnreachable, "member_runs", True, False),
                                       (SecretUnavailable, "secret_file", None, "/run/x/secret"),
                                       (SerializationError, "unknown_manifest", None, "app.Event")):
        old = pickle.loads(pickle.dumps(Old((cls, ("it failed",)))))
        assert type(old) is cls and str(old) == "it failed" and getattr(old, field) == default, cls
        new = pickle.loads(pickle.dumps(cls("it failed", given)))
        assert type(new) is cls and str(new) == "it failed" and getattr(new, field) == given, cls
    for make, field in ((lambda: SpawnCause("journal", "sqlite:///j.db"), "store_error"),
                        (lambda: HostInfo("running", 0, 1, False), "last_cause")):
        value = make()
        object.__delattr__(value, field)  # (as an older version pickles it: no such key in its state)
        assert field not in value.__dict__
        loaded = pickle.loads(pickle.dumps(value))
        assert loaded == make() and getattr(loaded, field) is None, loaded


def test_spawn_failed_unpickles_with_and_without_its_cause() -> None:
    # A SpawnFailed, HostReady or Spawned pickled by a process without the field (an older version) still loads.
    class Old:
        def __init__(self, reduced: tuple[object, ...]) -> None:
            self.reduced = reduced

        def __reduce__(self) -> tuple[object, ...]:
            return self.reduced

    for old in ((SpawnFailed, ("it failed",)), (SpawnFailed, ("it failed",), {"note": 1})):
        loaded = pickle.loads(pickle.dumps(Old(old)))
        assert type(loaded) is SpawnFailed and str(loaded) == "it failed" and loaded.cause is None
    for message in (HostReady("/user/x", "e"), Spawned("/user/x", "e")):
        object.__delattr__(message, "cause")  # (as an older version pickles it: no such field in its state)
        assert "cause" not in message.__dict__
        loaded = pickle.loads(pickle.dumps(message))
        assert loaded == type(message)("/user/x", "e") and loaded.cause is None
    cause = SpawnCause("snapshot_store", "postgresql://u:***@h/db")
    new = pickle.loads(pickle.dumps(SpawnFailed("it failed", cause)))
    assert str(new) == "it failed" and new.cause == cause


def test_path_taken_is_the_guardians_refusal_not_a_failure_quoting_its_words(system) -> None:
    # The client raised PathTaken for any failed spawn whose text held "already served": an actor whose own error
    # quoted those words was told its path is taken (and the Spark bridge, which catches PathTaken, took the path
    # for served). The guardian's refusal now carries SpawnCause("path_taken", the path that serves it).
    why = "the queue is already served by another consumer"
    with pytest.raises(SpawnFailed, match=f"RuntimeError: {why}") as caught:
        system.spawn(RefusesToStart, "/user/q", args=(why,), timeout=60)
    assert type(caught.value) is SpawnFailed and caught.value.cause is None, caught.value
    system.spawn(Echo, "/user/e")
    for path in ("/user/e", "/user/e/below"):
        with pytest.raises(actors.PathTaken, match=f"^path {path} is already served by /user/e; stop that actor "
                                                   "first or choose another path$"):
            system.spawn(Echo, path)
    assert system.ask("/user/e", Ping(3)).n == 3


@pytest.mark.multiproc
def test_a_restart_that_cannot_open_its_journal_says_so_typed_in_status_and_the_cli(make_system, tmp_path,
                                                                                      capsys) -> None:
    # A first start that could not open its journal failed its spawn with SpawnFailed.cause; a restart that could
    # not (its journal's directory gone) kept only the text, "failed to start: Tally cannot open its journal ...":
    # the guardian dropped HostReady.cause, and `reprise status` gave no fix. HostInfo.last_cause now carries it.
    from actors.cli import main

    store = tmp_path / "store"
    store.mkdir()
    url = f"sqlite:///{store}/journal.db"
    system = make_system("multiproc")
    system.spawn(Tally, "/user/tally", journal=url, backoff=(0.05, 0.2, 0))
    assert system.ask("/user/tally", 5, timeout=30) == 5
    before = system.status().hosts["/user/tally"]
    assert before.last_cause is None and before.pid
    os.replace(store, tmp_path / "moved")
    store.write_text("a file where the journal's directory was")
    os.kill(before.pid, signal.SIGKILL)
    host = wait_for(lambda: (h := system.status().hosts["/user/tally"]).last_cause is not None and h, 30)
    assert host.last_cause == SpawnCause("journal", url), host
    assert host.state in ("backoff", "restarting") and f"Tally cannot open its journal {url}: " in host.last_exit, host
    assert main(["status", "--port", str(system.admin_port)]) == 0
    out = capsys.readouterr().out
    assert f"(hint: `reprise journal ls {url}` opens it alone; its URL is [system] journal = " in out, out
    assert main(["status", "--port", str(system.admin_port), "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["hosts"]["/user/tally"]
    assert shown["last_cause"] == {"kind": "journal", "where": url, "store_error": None}, shown
    store.unlink()
    os.replace(tmp_path / "moved", store)  # the fix: it starts again, with what it had stored
    assert system.ask("/user/tally", 5, timeout=30) == 10
    assert system.status().hosts["/user/tally"].state == "running"


def test_spawn_of_a_persistent_actor_without_a_journal_says_none_is_configured(base, make_system, tmp_path) -> None:
    # It said "Tally cannot open its journal None: RuntimeError: no journal configured ... (fix the journal URL, or
    # the file's directory, permissions or server it names)": there was no URL to fix.
    system = make_system(base, snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    with pytest.raises(SpawnFailed, match=r"Tally persists events and no journal is configured: give one with "
                                          r"actors.start\(journal=URL\)") as caught:
        system.spawn(Tally, "/user/tally", timeout=60)
    assert "None" not in str(caught.value)
    assert caught.value.cause == SpawnCause("no_journal")
    system.spawn(Tally, "/user/tally", journal=f"sqlite:///{tmp_path}/ok.db")  # the fix it names works
    assert system.ask("/user/tally", 5, timeout=30) == 5


# Writes one event of "/user/tally" and waits to be SIGKILLed: its journal keeps its -wal and -shm beside it.
CRASHED_WRITER = """
import sys, time
from journal import AtomicWrite, PersistentRepr, open_journal
journal = open_journal(sys.argv[1])
assert journal.write_messages([AtomicWrite([PersistentRepr(5, 1, "/user/tally")])]) == [None]
print("written", flush=True)
time.sleep(600)
"""


@pytest.fixture
def read_only_journal(tmp_path):
    """The URL of a journal that a crashed writer left (with its -wal and -shm) on a tmpfs remounted read-only."""
    with _tmpfs(tmp_path / "ro", "size=8m", "a read-only journal") as path:
        url = f"sqlite:///{path}/journal.db"
        writer = subprocess.Popen([sys.executable, "-c", CRASHED_WRITER, url], stdout=subprocess.PIPE, cwd=ROOT)
        assert writer.stdout is not None and writer.stdout.readline() == b"written\n"
        writer.kill()
        writer.wait()
        assert {"journal.db-wal", "journal.db-shm"} <= set(os.listdir(path))
        subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True)
        yield url


@contextmanager
def _tmpfs(path: Path, options: str, tried: str) -> Iterator[Path]:
    """A tmpfs mounted (with `options`) on the new directory `path` meanwhile; skips loudly where none can be."""
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True).returncode:
        pytest.skip(f"NOT RUN: cannot mount a tmpfs here (needs root and mount); {tried} was not tried")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def test_spawn_fails_naming_a_journal_that_can_be_read_but_not_written(system, read_only_journal) -> None:
    # A journal on a read-only file system opened, the spawn succeeded, and every persist failed afterwards.
    with pytest.raises(SpawnFailed, match=r"Tally cannot open its journal .*can be read but not written: this "
                                          r"process may not write its file .*read-only file system"):
        system.spawn(Tally, "/user/tally", journal=read_only_journal, timeout=60)


@pytest.fixture
def read_only_dir(tmp_path):
    """An empty directory on a tmpfs mounted read-only."""
    with _tmpfs(tmp_path / "ro", "size=1m,ro", "a read-only directory") as path:
        yield path


def test_a_new_journal_in_a_read_only_directory_fails_the_spawn_naming_the_file_and_the_directory(
        system, read_only_dir) -> None:
    # It said "OSError: [Errno 30] Read-only file system: '<dir>/.reprise-4242-1398.new'": a name of Reprise's
    # own temporary file, not the journal's.
    url = f"sqlite://{read_only_dir}/journal.db"
    with pytest.raises(SpawnFailed, match=rf"cannot create the SQLite file {read_only_dir}/journal.db: {read_only_dir} "
                                          r"is on a read-only file system: give a path on a writable one") as e:
        system.spawn(Tally, "/user/tally", journal=url, timeout=60)
    assert ".reprise-" not in str(e.value), e.value
    from persistence import OffsetStoreError, open_offset_store

    with pytest.raises(OffsetStoreError, match=f"cannot create the SQLite file {read_only_dir}/offsets.db: "
                                               f"{read_only_dir} is on a read-only file system"):
        open_offset_store(f"sqlite://{read_only_dir}/offsets.db")


@pytest.mark.parametrize("key", ["journal", "snapshot_store"])
def test_a_store_in_a_directory_that_does_not_exist_fails_the_spawn_naming_it_and_makes_nothing(
        system, tmp_path, key) -> None:
    # The directory was made silently (os.makedirs): a misspelt one (sqlite:///srv/dtaa/bank.db for /srv/data) started
    # an empty journal, and the actors recovered to an empty state as if nothing had ever been persisted.
    missing = tmp_path / "dtaa" / "sub"
    stores = {"journal": f"sqlite:///{tmp_path}/ok.db", key: f"sqlite:///{missing}/bank.db"}
    with pytest.raises(SpawnFailed, match=rf"cannot create the SQLite file {missing}/bank.db: its directory {missing} "
                                          rf"does not exist: fix the path if it is misspelt, or create the directory "
                                          rf"\(mkdir -p {missing}\)"):
        system.spawn(Tally, "/user/tally", timeout=60, **stores)
    assert not (tmp_path / "dtaa").exists()
    missing.mkdir(parents=True)  # the fix it names works
    system.spawn(Tally, "/user/tally", timeout=60, **stores)
    assert system.ask("/user/tally", 5, timeout=30) == 5


def test_a_journal_behind_the_snapshot_it_recovers_from_is_warned_about_naming_both_stores(base, make_system, tmp_path,
                                                                                           caplog) -> None:
    # The journal URL changed between runs (bank.db -> bnak.db), the snapshot store's did not: the actor recovered the
    # snapshot's state without the acknowledged events after it (they are in the old journal) and went on numbering
    # from the snapshot's sequence nr in the new one. Nothing said so.
    caplog.set_level(logging.WARNING, logger="reprise.persistence")
    old, new, snapshots = (f"sqlite://{tmp_path}/{name}.db" for name in ("bank", "bnak", "snapshots"))
    first = make_system(base, journal=old, snapshot_store=snapshots)
    first.spawn(Tally, "/user/tally")
    assert [first.ask("/user/tally", n, timeout=30) for n in (1, 2, 3)] == [1, 3, 6]
    stop_system(first)
    store = open_snapshot_store(snapshots)
    try:
        store.save(SnapshotMetadata("/user/tally", 2), "the state after event 2")  # (as save_snapshot stores it)
    finally:
        store.close()
    second = make_system(base, journal=new, snapshot_store=snapshots)
    second.spawn(Tally, "/user/tally")
    assert second.ask("/user/tally", 10, timeout=30) == 10  # (Tally takes no snapshot offer)

    def logged() -> str:
        if base == "local":
            return caplog.text
        with open(os.path.join(second.run_dir, "actors.log")) as f:  # (written by Thespian's logger process)
            return f.read()

    said = "/user/tally recovered from a snapshot at sequence nr 2, but its journal"
    text = wait_for(lambda: (t := logged()) and said in t and t, 10)
    (line,) = [line for line in text.splitlines() if said in line]
    assert "WARNING" in line and f"its journal sqlite://{tmp_path}/bnak.db holds events only up to 0: that journal " \
        f"is not the one the snapshot store sqlite://{tmp_path}/snapshots.db was written with" in line, line
    journal = open_journal(old)  # nothing acknowledged was lost: the old journal holds its three events
    try:
        assert journal.highest_sequence_nr("/user/tally") == 3
    finally:
        journal.close()


@pytest.mark.postgres
def test_spawn_fails_when_postgres_is_unreachable_and_hides_the_password(make_system, base, postgres_url) -> None:
    system = make_system(base, journal="postgresql://postgres:hunter2@127.0.0.1:1/test")
    with pytest.raises(SpawnFailed) as caught:
        system.spawn(Tally, "/user/tally", timeout=60)
    message = str(caught.value)
    assert "cannot connect to PostgreSQL" in message and "postgres:***@127.0.0.1:1/test" in message
    assert "hunter2" not in message


def test_calls_after_shutdown_raise_system_not_running(make_system, base) -> None:
    system = make_system(base)
    system.spawn(Echo, "/user/echo")
    probe = system.probe()
    system.shutdown()
    calls = {
        "tell": lambda: system.tell("/user/echo", Ping(1)),
        "ask": lambda: system.ask("/user/echo", Ping(1)),
        "status": system.status,
        "dead_letters": system.dead_letters,
        "spawn": lambda: system.spawn(Echo, "/user/other"),
        "stop": lambda: system.stop("/user/echo"),
        "probe": lambda: probe.receive(0.1),
    }
    for name, call in calls.items():
        with pytest.raises(SystemNotRunning, match="was shut down") as caught:
            call()
        assert isinstance(caught.value, ConnectionError), name


@pytest.mark.multiproc
def test_own_run_dir_is_removed_on_clean_shutdown() -> None:
    tag = f"{SESSION_TOKEN}-rundir-{uuid.uuid4().hex[:6]}-"
    system = actors.start("multiproc", tag=tag)
    try:
        run_dir = system.run_dir
        assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
        system.spawn(Echo, "/user/echo")
        assert system.ask("/user/echo", Ping(1), timeout=30) == Pong(1, "/user/echo")
    finally:
        system.shutdown()
        kill_tagged(tag)
    assert not os.path.exists(run_dir)


@pytest.mark.multiproc
def test_reprise_down_removes_the_run_dir_it_did_not_create_either() -> None:
    """`actors.shutdown(port)` (what `reprise down` runs) removes a temporary run dir too."""
    tag = f"{SESSION_TOKEN}-down-{uuid.uuid4().hex[:6]}-"
    system = actors.start("multiproc", tag=tag)
    try:
        run_dir = system.run_dir
        actors.shutdown(system.admin_port)
    finally:
        kill_tagged(tag)
    assert not os.path.exists(run_dir)


@pytest.mark.multiproc
def test_given_run_dir_is_made_private_and_kept(tmp_path) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o755)
    os.chmod(run_dir, 0o755)
    for name in ("actors.log", "thespian.log"):  # left by an earlier run, readable by everyone
        (run_dir / name).write_text("from an earlier run\n")
        os.chmod(run_dir / name, 0o644)
    old_log = run_dir / "actors.log"
    tag = f"{SESSION_TOKEN}-private-{uuid.uuid4().hex[:6]}-"
    system = actors.start("multiproc", tag=tag, run_dir=str(run_dir), log_level="INFO")
    try:
        system.spawn(Echo, "/user/echo")
        assert system.ask("/user/echo", Ping(1), timeout=30) == Pong(1, "/user/echo")
        assert stat.S_IMODE(os.stat(run_dir).st_mode) == 0o700
        names = sorted(os.listdir(run_dir))
        assert {"actors.log", "boot.log", "thespian.log"} <= set(names)
        modes = {name: oct(stat.S_IMODE(os.stat(run_dir / name).st_mode)) for name in names}
        assert set(modes.values()) == {oct(0o600)}, modes
    finally:
        system.shutdown()
        kill_tagged(tag)
    assert run_dir.is_dir() and old_log.read_text().startswith("from an earlier run")


def test_a_run_dir_that_is_a_link_or_holds_a_link_or_another_users_file_is_refused(tmp_path) -> None:
    # A run dir another user made first (or links planted in it) let that user read the system's logs and
    # make its boot.log overwrite a file of the user who starts the system (root's, for root).
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    os.chmod(victim, 0o644)
    run_dir = tmp_path / "run"
    run_dir.mkdir(mode=0o700)
    (run_dir / "boot.log").symlink_to(victim)
    refused(run_dir, r"boot.log \(in run_dir .*\) is a symbolic link .*: remove it")
    assert victim.read_text() == "precious\n" and stat.S_IMODE(os.stat(victim).st_mode) == 0o644
    linked = tmp_path / "linked"
    linked.symlink_to(run_dir)
    refused(linked, "run_dir .*linked is a symbolic link")
    (run_dir / "boot.log").unlink()
    (run_dir / "actors.log").mkdir()
    refused(run_dir, "actors.log .* is not a regular file")
    if os.geteuid() != 0:
        return  # (giving files to another user needs root)
    (run_dir / "actors.log").rmdir()
    (run_dir / "actors.log").write_text("")
    os.chown(run_dir / "actors.log", 65534, 65534)
    refused(run_dir, "actors.log .* belongs to uid 65534, not to this user")
    squatted = tmp_path / "squatted"
    squatted.mkdir(mode=0o777)
    os.chmod(squatted, 0o777)
    os.chown(squatted, 65534, 65534)
    refused(squatted, "run_dir .*squatted belongs to uid 65534.*choose a directory of your own")
    assert stat.S_IMODE(os.stat(squatted).st_mode) == 0o777 and os.listdir(squatted) == []


def refused(run_dir, match: str) -> None:
    """Assert that a multiproc system with `run_dir` is refused with a SpawnFailed matching `match`."""
    try:
        system = actors.start("multiproc", run_dir=str(run_dir))
    except SpawnFailed as exc:
        assert re.search(match, str(exc)), str(exc)
        return
    system.shutdown()
    pytest.fail(f"a system started with run_dir {run_dir}")


@pytest.mark.parametrize("base", ["local", "multiproc"])
def test_a_misspelt_or_unknown_start_option_is_refused_naming_the_one_meant(base) -> None:
    # start() took any keyword into the system's config: metric_port= started a system without metrics.
    for options, message in (({"metric_port": 9464}, "unknown option metric_port=9464: did you mean metrics_port?"),
                             ({"log_levl": "DEBUG"}, "unknown option log_levl='DEBUG': did you mean log_level?"),
                             ({"node_timout": 1.0}, "did you mean node_timeout?"),
                             ({"qwxyz": 1}, "unknown option qwxyz=1: the options are admin_port, "),
                             ({"stash_capacity": -1}, "stash_capacity must be an int of at least 1"),
                             ({"stash_capacity": 0}, "stash_capacity must be an int of at least 1"),
                             ({"recovery_event_timeout": 0}, "recovery_event_timeout must be a number of seconds"),
                             ({"internal_stash_overflow_strategy": "bounce"},
                              "internal_stash_overflow_strategy must be \"throw\", \"drop\"")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            start_refused(base, **options)


@pytest.mark.timeout(60)
def test_a_spawn_on_a_node_that_never_joined_fails_at_once_naming_the_nodes(system) -> None:
    # It waited for a Thespian system that would never come: AskTimeout after 60 s, the host "backing off".
    started = time.monotonic()
    with pytest.raises(SpawnFailed, match=r"cannot start /user/x: no node named 'leadr' has joined this system "
                                          r"\(did you mean 'leader'\?\); nodes now: leader up"):
        system.spawn(Echo, "/user/x", node="leadr", timeout=30)
    assert time.monotonic() - started < 10
    system.spawn(Echo, "/user/x", node="leader")  # the path is free, and the right name works
    assert system.ask("/user/x", Ping(1)) == Pong(1, "/user/x")


def test_other_thespian_versions_are_refused_at_import(tmp_path) -> None:
    fake = tmp_path / "site" / "thespian-4.0.2.dist-info"
    fake.mkdir(parents=True)
    (fake / "METADATA").write_text("Metadata-Version: 2.1\nName: thespian\nVersion: 4.0.2\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path / "site"), ROOT]))
    done = subprocess.run([sys.executable, "-c", "import actors"], env=env, capture_output=True, text=True,
                          timeout=60)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("actors.errors.ThespianVersionError:"), done.stderr
    assert "installed thespian is 4.0.2" in last and "thespian==4.0.1" in last
    with open(os.path.join(ROOT, "pyproject.toml")) as f:
        assert '"thespian==4.0.1"' in f.read()


# ---- starting a system inside an actor-system process -------------------------------------------

TOUR = '''
from dataclasses import dataclass
import actors

@dataclass(frozen=True)          # messages are frozen dataclasses in importable modules
class Deposit:
    amount: int

class Account(actors.Actor):     # the same class works as one actor or as many entities
    def pre_start(self):
        self.balance = 0
    def receive(self, message, sender):
        if isinstance(message, Deposit):
            self.balance += message.amount
        elif message == "balance":
            self.tell(sender, self.balance)

with actors.start("multiproc") as system:                       # or "local" (in-process, for tests)
    system.spawn(Account, "/user/accounts", entities=True)      # one Account per /user/accounts/<id>
    system.tell("/user/accounts/42", Deposit(10))
    assert system.ask("/user/accounts/42", "balance") == 10
'''
MAX_PROCESSES = 40  # the tour needs ~5; the fork bomb it caused reached ~2,400


def _marked(mark: bytes) -> list[int]:
    """Pids of processes whose environment carries `mark` (everything the test's command started)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                with open(f"/proc/{entry}/environ", "rb") as f:
                    if mark in f.read():
                        found.append(int(entry))
            except OSError:
                continue
    return found


def _kill_marked(mark: bytes) -> None:
    """Stop (so they cannot fork again), then kill, every marked process until none is left."""
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        pids = _marked(mark)
        if not pids:
            return
        for sig in (signal.SIGSTOP, signal.SIGKILL):
            for pid in pids:
                try:
                    os.kill(pid, sig)
                except OSError:
                    pass
        time.sleep(0.05)


@pytest.mark.multiproc
def test_importing_a_module_that_starts_a_system_fails_instead_of_forking(tmp_path) -> None:
    module = f"tour_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{module}.py").write_text(TOUR)
    mark = f"REPRISE_TOUR_TEST={uuid.uuid4().hex}"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, str(tmp_path)]))
    env["REPRISE_TOUR_TEST"] = mark.partition("=")[2]
    proc = subprocess.Popen([sys.executable, "-c", f"import {module}"], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    most = 0
    try:
        deadline = time.monotonic() + 90
        while proc.poll() is None and time.monotonic() < deadline:
            most = max(most, len(_marked(mark.encode())))
            assert most <= MAX_PROCESSES, f"importing the tour started {most} processes (a fork bomb)"
            time.sleep(0.05)
        assert proc.poll() is not None, "importing the tour did not finish within 90 s"
        stderr = proc.communicate(timeout=10)[1]
    finally:
        proc.kill()
        _kill_marked(mark.encode())
    assert proc.returncode != 0
    last = stderr.strip().splitlines()[-1]
    assert "UnpicklableMessage" in last and "actors.start() was called inside an actor-system process" in last
    assert 'if __name__ == "__main__":' in last
    # The system the import itself started was shut down by its `with` block, not killed here.
    assert _marked(mark.encode()) == []


@pytest.mark.multiproc
@pytest.mark.parametrize("port", ["1900", 0, 70000, True])
def test_connect_refuses_a_port_that_is_no_port_saying_what_to_give(port) -> None:
    # It said "(or None for a free port)": connect attaches to a running system, and refuses None.
    with pytest.raises(ConfigError) as refused:
        actors.connect(port)
    assert str(refused.value) == (f"admin_port must be an integer in 1..65535: the port of a running system's admin, "
                                  f"e.g. actors.connect(1900), got {port!r}")


def test_connect_inside_an_actor_is_refused(make_system) -> None:
    system = make_system("multiproc")
    system.spawn(Connector, "/user/connector")
    reply = system.ask("/user/connector", ("connect", system.admin_port), timeout=30)
    assert reply.startswith("RepriseError: actors.connect() was called inside an actor-system process")
    assert 'if __name__ == "__main__":' in reply
    assert tagged_pids(system.tag)  # the system itself is unharmed


def test_ask_and_status_refuse_a_timeout_that_is_not_positive(system) -> None:
    system.spawn(Echo, "/user/echo")
    for call in (lambda: system.ask("/user/echo", Ping(1), timeout=0), lambda: system.status(timeout=-1),
                 lambda: system.stop("/user/echo", timeout=0)):
        with pytest.raises(ConfigError, match="timeout must be > 0"):
            call()
    assert system.ask("/user/echo", Ping(2), timeout=30) == Pong(2, "/user/echo")


def test_a_repeating_timer_needs_a_positive_interval(system) -> None:
    system.spawn(Ticking, "/user/ticking")
    for interval in (0, -1.0):
        reply = system.ask("/user/ticking", ("every", interval), timeout=30)
        assert reply.startswith("ConfigError: interval must be > 0"), reply
    assert system.ask("/user/ticking", ("every", 0.05), timeout=30) == "scheduled"

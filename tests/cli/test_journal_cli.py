"""`reprise journal ...` against real SQLite journals written with the journal API."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
from dataclasses import dataclass

import pytest

from actors.cli import main
from journal import (
    AtomicWrite,
    PersistentRepr,
    open_journal,
    register_type,
    register_upcaster,
    unregister_type,
)

pytestmark = pytest.mark.timeout(60)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture
def url(tmp_path) -> str:
    """A journal with three events for "acct-1" and two for "acct-2"."""
    url = f"sqlite://{tmp_path}/journal.db"
    with open_journal(url) as j:
        for pid, n in (("acct-1", 3), ("acct-2", 2)):
            assert j.write_messages([AtomicWrite([PersistentRepr({"amount": seq * 10}, seq, pid)])
                                     for seq in range(1, n + 1)]) == [None] * n
    return url


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def test_ls_lists_ids_with_highest_sequence_nr_and_count(url, capsys) -> None:
    code, out, _ = run(capsys, "journal", "ls", url)
    assert code == 0
    rows = [line.split() for line in out.splitlines()[1:]]
    assert rows == [["acct-1", "3", "3"], ["acct-2", "2", "2"]]


def test_show_from_and_limit(url, capsys) -> None:
    code, out, _ = run(capsys, "journal", "show", url, "acct-1", "--from", "2", "--limit", "1")
    assert code == 0
    lines = out.splitlines()
    assert len(lines) == 1 and lines[0].split()[0] == "2" and "'amount': 20" in lines[0]
    code, out, _ = run(capsys, "journal", "show", url, "acct-1")
    assert [line.split()[0] for line in out.splitlines()] == ["1", "2", "3"]


def test_show_of_an_unknown_id_fails_with_a_hint(url, capsys) -> None:
    code, _, err = run(capsys, "journal", "show", url, "nobody")
    assert code == 1 and "nobody" in err and "hint:" in err


def journal_of_a_class_not_registered_here(tmp_path, cls: type, manifest: str,
                                           events: list[tuple[str, object]]) -> str:
    """The URL of a new journal holding `events` (persistence id, event; numbered per id) written by `cls` under
    `manifest`, which is unregistered again: this process reads them as another one that lacks the class would."""
    url = f"sqlite://{tmp_path}/journal.db"
    register_type(cls, manifest=manifest)
    try:
        with open_journal(url) as j:
            seqs: dict[str, int] = {}
            for pid, event in events:
                seqs[pid] = seqs.get(pid, 0) + 1
                assert j.write_messages([AtomicWrite([PersistentRepr(event, seqs[pid], pid)])]) == [None]
    finally:
        unregister_type(cls)
    return url


@dataclass(frozen=True)
class Unreadable:
    n: int


def test_show_of_an_event_whose_class_is_not_registered_hints_at_import(tmp_path, capsys) -> None:
    # The hint was the library's (journal.register_type), not the command's own --import MODULE.
    url = journal_of_a_class_not_registered_here(tmp_path, Unreadable, "nosuchapp.events.Unreadable",
                                                 [("acct", Unreadable(1))])
    code, out, err = run(capsys, "journal", "show", url, "acct")
    assert code == 1 and "unknown manifest 'nosuchapp.events.Unreadable'" in err
    assert "(hint: pass --import MODULE for the module that registers the event classes" in err, err
    assert out.split()[:2] == ["1", "UNREADABLE:"], out  # (in its place, as verify labels it)


def test_verify_names_a_few_records_of_each_unreadable_cause_and_counts_the_rest(tmp_path, capsys) -> None:
    # A journal of 111,561 events of one class not imported printed 111,561 UNREADABLE lines, all of one cause, the
    # summary and its hint scrolled far out of sight.
    events = [(f"acct-{k % 3}", Unreadable(k)) for k in range(500)]
    url = journal_of_a_class_not_registered_here(tmp_path, Unreadable, "nosuchapp.events.Unreadable", events)
    code, out, err = run(capsys, "journal", "verify", url)
    assert code == 1 and "500 unreadable" in err and "--import MODULE" in err, err
    lines = out.splitlines()
    assert len(lines) <= 5, out
    assert [line.split()[1] for line in lines[:3]] == ["persistence_id=acct-0", "persistence_id=acct-1",
                                                       "persistence_id=acct-2"], out
    assert "497 more records unreadable for the same cause" in lines[3] and "nosuchapp.events.Unreadable" in lines[3], out


@dataclass(frozen=True)
class Charged:
    cents: int


def test_an_event_its_upcaster_cannot_build_is_unreadable_not_corrupt(tmp_path, capsys) -> None:
    # verify said CORRUPT and told the user to restore a backup or delete the ids: the bytes were intact.
    url = journal_of_a_class_not_registered_here(tmp_path, Charged, "billing.Charged",
                                                 [("customer-1", Charged(1)), ("customer-1", Charged(2))])

    @dataclass(frozen=True)
    class ChargedV2:
        cents: int
        currency: str

    register_type(ChargedV2, manifest="billing.Charged", version=2)
    register_upcaster("billing.Charged", 1, lambda values: [values[0], DEFAULT_CURRENCY])  # noqa: F821 (the bug)
    try:
        code, out, err = run(capsys, "journal", "verify", url)
        assert code == 1 and out.count("UNREADABLE persistence_id=customer-1") == 2 and "CORRUPT" not in out, out
        assert "the upcaster of 'billing.Charged' from version 1 to 2 failed" in out, out
        assert "2 unreadable (hint: the stored bytes are intact" in err and "backup" not in err, err
        code, out, err = run(capsys, "journal", "show", url, "customer-1")
        assert code == 1 and [line.split()[:2] for line in out.splitlines()] == [["1", "UNREADABLE:"],
                                                                                ["2", "UNREADABLE:"]], out
        assert "an event cannot be read" in err and "the stored bytes are intact" in err, err
    finally:
        unregister_type(ChargedV2)


def test_the_import_hint_follows_the_unknown_manifest_not_an_error_quoting_the_words(tmp_path, capsys) -> None:
    # verify and show chose the --import hint when every unreadable record's reason held "unknown manifest": an
    # upcaster whose own error quoted the words was told to import a module, which was there. Problem now carries
    # `intact` and `unknown_manifest` (and SerializationError.unknown_manifest) from where the record was read.
    import journal

    url = journal_of_a_class_not_registered_here(tmp_path, Charged, "billing.Charged", [("customer-1", Charged(1))])

    @dataclass(frozen=True)
    class ChargedV2:
        cents: int
        currency: str

    def upcast(values: list) -> list:
        raise LookupError("unknown manifest of currencies: no default currency configured")

    register_type(ChargedV2, manifest="billing.Charged", version=2)
    register_upcaster("billing.Charged", 1, upcast)
    try:
        (problem,) = journal.verify(url).problems
        assert problem.intact and problem.unknown_manifest is None, problem
        for argv in (["verify", url], ["show", url, "customer-1"]):
            code, out, err = run(capsys, "journal", *argv)
            assert code == 1 and "unknown manifest of currencies" in out, (argv, out)
            assert "--import" not in err and "the stored bytes are intact, but the registered class or its upcaster " \
                "cannot build them" in err, (argv, err)
    finally:
        unregister_type(ChargedV2)
    (problem,) = journal.verify(url).problems  # (not registered at all: the import is the fix)
    assert problem.intact and problem.unknown_manifest == "billing.Charged", problem
    code, _, err = run(capsys, "journal", "verify", url)
    assert code == 1 and "(hint: pass --import MODULE for the module that registers the event classes" in err, err


def test_tail_prints_the_most_recent_events_oldest_first(url, capsys) -> None:
    code, out, _ = run(capsys, "journal", "tail", url, "-n", "2")
    assert code == 0
    assert [line.split()[3] for line in out.splitlines()] == ["acct-2#1", "acct-2#2"]


def test_url_defaults_to_the_environment(url, capsys, monkeypatch) -> None:
    monkeypatch.setenv("REPRISE_JOURNAL", url)
    code, out, _ = run(capsys, "journal", "ls")
    assert code == 0 and "acct-2" in out
    code, out, _ = run(capsys, "journal", "show", "acct-2")
    assert code == 0 and len(out.splitlines()) == 2


def test_verify_ok(url, capsys) -> None:
    code, out, _ = run(capsys, "journal", "verify", url)
    assert code == 0 and "checked 5 records" in out and out.rstrip().endswith("ok")


def test_verify_names_the_corrupt_record(url, capsys) -> None:
    db = sqlite3.connect(url[len("sqlite://"):])
    with db:
        db.execute("UPDATE journal SET checksum = checksum + 1 WHERE persistence_id = 'acct-2' AND sequence_nr = 2")
    db.close()
    code, out, err = run(capsys, "journal", "verify", url)
    assert code == 1
    assert "persistence_id=acct-2 sequence_nr=2" in out
    assert "acct-1" not in out and "1 corrupt" in err


def test_show_and_tail_print_the_records_around_a_corrupt_one_and_name_it(url, capsys) -> None:
    # Both printed nothing at all when one record of what they read was corrupt: the operator looking into a
    # damaged journal saw none of the intact records around it.
    db = sqlite3.connect(url[len("sqlite://"):])
    with db:
        db.execute("UPDATE journal SET checksum = checksum + 1 WHERE persistence_id = 'acct-1' AND sequence_nr = 2")
    db.close()
    code, out, err = run(capsys, "journal", "show", url, "acct-1")
    lines = out.splitlines()
    assert code == 1 and [line.split()[0] for line in lines] == ["1", "2", "3"], out
    assert "'amount': 10" in lines[0] and "'amount': 30" in lines[2]
    assert "CORRUPT: corrupted event: persistence id 'acct-1', sequence nr 2" in lines[1], out
    assert "a record cannot be read" in err and "(hint: run `reprise journal verify URL`" in err, err
    code, out, err = run(capsys, "journal", "tail", url, "-n", "4")
    lines = out.splitlines()
    assert code == 1 and [re.search(r"acct-\d#\d", line)[0] for line in lines] == [
        "acct-1#2", "acct-1#3", "acct-2#1", "acct-2#2"], out
    assert "CORRUPT" in lines[0] and "'amount': 20" in lines[3]
    assert "a record cannot be read" in err, err
    code, out, err = run(capsys, "journal", "tail", url, "-n", "2")  # (the intact ones alone: no error)
    assert code == 0 and "CORRUPT" not in out and not err


def test_verify_of_a_file_sqlite_cannot_read_on_names_where_and_does_not_send_the_user_to_verify(tmp_path,
                                                                                                capsys) -> None:
    # A damaged page stopped the scan with JournalCorruption, and verify's own error said: run verify.
    url = f"sqlite://{tmp_path}/journal.db"
    with open_journal(url) as j:
        assert not any(j.write_messages([AtomicWrite([PersistentRepr("x" * 200, seq, f"acct-{seq % 7}")])
                                         for seq in range(1, 3001)]))
    assert not os.path.exists(f"{tmp_path}/journal.db-wal")  # (closed: everything is in the file)
    with open(f"{tmp_path}/journal.db", "r+b") as f:
        f.seek(100_000)
        damaged = bytes(b ^ 0xFF for b in f.read(64))
        f.seek(100_000)
        f.write(damaged)
    code, out, err = run(capsys, "journal", "verify", url)
    assert code == 1
    assert "CORRUPT storage: " in out, out
    assert "corrupt (hint: restore the journal from a backup" in err and "journal verify" not in err, err


@pytest.mark.parametrize("argv, needle", [
    (["journal", "ls", "foo://x"], "unsupported journal URL"),
    (["journal", "tail", "sqlite:///no/such/journal.db"], "no journal file"),
    (["journal", "verify"], "no journal URL given"),
    (["journal", "ls", "memory://x"], "a memory:// journal lives inside the process that made it"),
])
def test_bad_input_is_one_line_with_a_hint_and_exit_2(argv, needle, capsys, monkeypatch) -> None:
    monkeypatch.delenv("REPRISE_JOURNAL", raising=False)
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert err.count("\n") == 1 and err.startswith("reprise: error: ") and needle in err and "(hint: " in err


def test_output_into_a_closed_pipe_ends_quietly(tmp_path) -> None:
    # `reprise journal tail URL | head -1` reported "BrokenPipeError: [Errno 32] Broken pipe" and exited 1.
    url = f"sqlite://{tmp_path}/journal.db"
    with open_journal(url) as j:
        assert not any(j.write_messages([AtomicWrite([PersistentRepr("x" * 100, seq, "acct")])
                                         for seq in range(1, 5001)]))
    done = subprocess.run(["bash", "-o", "pipefail", "-c", f'"{sys.executable}" -m actors.cli journal show {url} '
                           "acct | head -1"], capture_output=True, text=True, timeout=60, cwd=ROOT)
    assert done.returncode == 141 and done.stdout.count("\n") == 1, (done.returncode, done.stdout, done.stderr)
    assert done.stderr == "", done.stderr


def test_usage_errors_exit_2_and_help_exists_everywhere(capsys) -> None:
    with pytest.raises(SystemExit) as e:
        main(["journal", "show"])
    assert e.value.code == 2 and "hint:" in capsys.readouterr().err
    for argv in (["--help"], ["up", "--help"], ["down", "--help"], ["status", "--help"], ["node", "--help"],
                 ["journal", "--help"], ["journal", "verify", "--help"], ["bench", "--help"]):
        with pytest.raises(SystemExit) as e:
            main(argv)
        assert e.value.code == 0
        assert "usage: reprise" in capsys.readouterr().out


def test_a_file_that_is_not_a_database(tmp_path, capsys) -> None:
    # It was called a corrupt journal ("restore the journal from a backup"): it was never one.
    path = tmp_path / "garbage.db"
    path.write_bytes(b"not a database at all" * 400)
    for command in ("verify", "ls"):
        code, _, err = run(capsys, "journal", command, f"sqlite://{path}")
        assert code == 1 and "is not a SQLite database, so not a Reprise journal" in err, err
    assert path.read_bytes() == b"not a database at all" * 400


def test_reading_commands_leave_another_application_s_database_as_it_was(tmp_path, capsys) -> None:
    # ls/show/tail/verify opened it as a journal: switched it to WAL, added the journal's tables, and verify then
    # said "ok"; a table of its own named `journal` failed with "no such column: persistence_id".
    for name, schema in (("app.db", "CREATE TABLE users (name TEXT)"), ("own.db", "CREATE TABLE journal (entry TEXT)")):
        path = tmp_path / name
        with sqlite3.connect(path) as db:
            db.execute(schema)
        before = path.read_bytes()
        for argv in (["ls"], ["show", "p"], ["tail"], ["verify"]):
            code, _, err = run(capsys, "journal", argv[0], f"sqlite://{path}", *argv[1:])
            assert code == 1 and "is a SQLite database but not a Reprise journal" in err, (argv, err)
            assert "nothing was changed" in err and "hint: check the URL" in err
        assert path.read_bytes() == before and not os.path.exists(f"{path}-wal")
        with pytest.raises(Exception, match="not a Reprise journal"):
            open_journal(f"sqlite://{path}")  # (a system's journal= too: it would write into it)


@pytest.mark.parametrize("argv, needle", [
    (["journal", "ls", "sqlite://:memory:"], "a journal in SQLite's memory would be one connection's"),
    (["journal", "show", "URL", ""], "the persistence id is empty"),
    (["journal", "show", "URL", "\udcff"], "is not valid UTF-8 text"),
    (["journal", "tail", "URL", "-n", "100000000000000000000"], "is not a whole number from 0 to"),
    (["journal", "tail", "URL", "-n", "-3"], "is not a whole number from 0 to"),
    (["journal", "ls", "URL?foo=1"], "unknown sqlite journal option(s) ['foo']"),
    (["journal", "ls", "URL", "--import", ""], "--import '': cannot import it (ValueError"),
])
def test_more_bad_input_is_refused_naming_it(url, argv, needle, capsys, tmp_path, monkeypatch) -> None:
    # An empty id hit the journal's internal row ("corrupted event"), -n 10**20 an OverflowError, -n -3 printed
    # nothing, sqlite://:memory: made a file named ":memory:" and an --import error did not name --import.
    monkeypatch.chdir(tmp_path)
    try:
        code = main([a.replace("URL", url) for a in argv])
    except SystemExit as usage:  # (argparse's own usage errors)
        code = usage.code
    err = capsys.readouterr().err
    assert code == 2 and needle in err, err
    assert not os.path.exists(tmp_path / ":memory:")


def test_verify_and_show_read_both_record_formats(tmp_path, capsys) -> None:
    """A journal written before issue 16 (format 1, tests/journal/fixtures) and written on today (format 2)."""
    import shutil

    from tests.journal import fixture_types
    from tests.journal.test_format1_fixture import FIXTURE

    path = tmp_path / "format1.db"
    shutil.copyfile(FIXTURE, path)
    url = f"sqlite://{path}"
    code, out, _ = run(capsys, "journal", "verify", url)
    assert code == 0 and "checked 15 records and 3 snapshots: ok" in out
    code, out, _ = run(capsys, "journal", "show", url, "fixture-2", "--from", "3", "--limit", "1")
    assert code == 0 and "{Renamed(amount=8, currency='EUR')}" in out  # version 1 objects, upcast
    with open_journal(url) as j:
        assert j.write_messages([AtomicWrite([PersistentRepr(fixture_types.Leaf(4, b"n", 0.5), 6, "fixture-2")])]) == [None]
    code, out, _ = run(capsys, "journal", "show", url, "fixture-2", "--from", "3")
    lines = out.splitlines()
    assert code == 0 and [line.split()[0] for line in lines] == ["3", "4", "5", "6"]
    assert "Leaf(amount=4, note=b'n', ratio=0.5)" in lines[-1]
    code, out, _ = run(capsys, "journal", "verify", url)
    assert code == 0 and "checked 16 records and 3 snapshots: ok" in out
    db = sqlite3.connect(path)
    with db:  # a corrupt record of either format is named
        db.execute("UPDATE journal SET checksum = checksum + 1 WHERE persistence_id = 'fixture-2' AND sequence_nr IN (1, 6)")
    db.close()
    code, out, _ = run(capsys, "journal", "verify", url)
    assert code == 1 and "sequence_nr=1" in out and "sequence_nr=6" in out and "sequence_nr=2" not in out


def test_a_journal_on_a_read_only_file_system_is_named_so(url, tmp_path) -> None:
    # "open failed on ...: unable to open database file": a WAL journal needs its -wal and -shm beside it, so even
    # reading it needs a writable directory; the error now says that, and what to do.
    source, mount = tmp_path / "src", tmp_path / "ro"
    source.mkdir()
    mount.mkdir()
    os.replace(url[len("sqlite://"):], source / "journal.db")
    reprise = os.path.join(os.path.dirname(sys.executable), "reprise")
    script = (f"mount --bind {source} {mount} && mount -o remount,bind,ro {mount} && "
              f"{reprise} journal ls sqlite://{mount}/journal.db")
    done = subprocess.run(["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT)
    if "Operation not permitted" in done.stderr or "unshare: " in done.stderr:
        pytest.skip(f"a read-only mount needs unshare -m and mount (root): {done.stderr.strip()}")
    assert done.returncode == 1 and "can be read but not written" in done.stderr, done.stderr
    assert "a read-only file system" in done.stderr


def test_a_postgresql_role_without_rights_is_told_which_rights(postgres_url, capsys) -> None:
    # "cannot connect to PostgreSQL ...: permission denied for schema" came with the hint "check the host, port
    # and database of the URL": it had connected.
    import uuid

    import psycopg

    from journal.postgres import drop_schema

    name = f"reprise_rights_{uuid.uuid4().hex[:8]}"
    with open_journal(f"{postgres_url}?schema={name}") as j:
        assert j.write_messages([AtomicWrite([PersistentRepr("x", 1, "p")])]) == [None]
    admin = psycopg.connect(postgres_url, autocommit=True)
    try:
        admin.execute(f"CREATE ROLE {name} LOGIN")
        url = postgres_url.replace("postgres@", f"{name}@", 1) + f"?schema={name}"
        for grant in (None, f"GRANT USAGE ON SCHEMA {name} TO {name}"):
            if grant:
                admin.execute(grant)
            code, _, err = run(capsys, "journal", "ls", url)
            assert code in (1, 2) and "permission denied" in err, err
            assert "the PostgreSQL role needs USAGE on the journal's schema and SELECT on its tables" in err, err
    finally:
        drop_schema(f"{postgres_url}?schema={name}")
        admin.execute(f"DROP OWNED BY {name}")
        admin.execute(f"DROP ROLE IF EXISTS {name}")
        admin.close()


def test_events_of_reprise_s_own_types_are_read_without_import(tmp_path) -> None:
    # A DurableDelivery sender's journal holds only Reprise's own DeliveriesSent / DeliveriesConfirmed (of plain
    # messages): `reprise journal verify` called every record UNREADABLE, "unknown manifest
    # 'reprise.persistence.DeliveriesConfirmed' ... register it with journal.register_type", and exited 1, since the
    # manifest names no importable module and nothing in the CLI had imported persistence. No --import could help
    # short of naming Reprise's own package.
    from persistence.durable import DeliveriesConfirmed, DeliveriesSent
    from persistence.idempotent import AppliedBatch

    url = f"sqlite://{tmp_path}/journal.db"
    with open_journal(url) as j:
        events = [("/user/teller", DeliveriesSent((1, 2), ("/user/acct/1",), ("a", "b"))),
                  ("/user/teller", DeliveriesConfirmed((1, 2))),
                  ("/user/acct/1", AppliedBatch(("/user/teller",), (1, 2), ("a", "b")))]
        seqs: dict[str, int] = {}
        for pid, event in events:
            seqs[pid] = seqs.get(pid, 0) + 1
            assert j.write_messages([AtomicWrite([PersistentRepr(event, seqs[pid], pid)])]) == [None]
    for argv in (["verify", url], ["show", url, "/user/teller"], ["tail", url]):
        done = subprocess.run([sys.executable, "-m", "actors.cli", "journal", *argv], capture_output=True,
                              text=True, timeout=60, cwd=tmp_path, env={**os.environ, "PYTHONPATH": ROOT})
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
        assert "UNREADABLE" not in done.stdout + done.stderr, (argv, done.stdout, done.stderr)
    assert "DeliveriesConfirmed(delivery_ids=(1, 2)" in done.stdout, done.stdout


def test_show_takes_the_persistence_id_before_the_url_as_the_readme_wrote_it(url, capsys) -> None:
    # The README wrote `reprise journal show PID [URL]`; the command takes `show [URL] PID`, and `show acct-1 URL`
    # failed with "unsupported journal URL 'acct-1'" although a URL was given.
    code, out, err = run(capsys, "journal", "show", "acct-1", url)
    assert code == 0, err
    assert [line.split()[0] for line in out.splitlines()] == ["1", "2", "3"]


def test_show_of_an_id_with_a_control_character_and_no_events_says_it_holds_one(url, capsys) -> None:
    # (in either order of its arguments) "no events for persistence id 'acct\\x01-1'" alone left a mistyped or
    # misquoted id to be guessed at; actor paths refuse such characters, so it is the likely cause.
    for args in (("journal", "show", url, "acct\x01-1"), ("journal", "show", "acct\x01-1", url)):
        code, _, err = run(capsys, *args)
        assert code == 1 and "no events for persistence id 'acct\\\\x01-1' (it holds a control or invisible " \
                             "character, which no actor path holds)" in err, err
    code, _, err = run(capsys, "journal", "show", url, "acct-9")
    assert code == 1 and "control" not in err, err

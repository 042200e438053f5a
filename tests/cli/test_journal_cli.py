"""`reprise journal ...` against real SQLite journals written with the journal API."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from dataclasses import dataclass

import pytest

from actors.cli import main
from journal import AtomicWrite, PersistentRepr, open_journal, register_type, unregister_type

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


@dataclass(frozen=True)
class Unreadable:
    n: int


def test_show_of_an_event_whose_class_is_not_registered_hints_at_import(tmp_path, capsys) -> None:
    # The hint was the library's (journal.register_type), not the command's own --import MODULE.
    url = f"sqlite://{tmp_path}/journal.db"
    register_type(Unreadable, manifest="nosuchapp.events.Unreadable")
    try:
        with open_journal(url) as j:
            assert j.write_messages([AtomicWrite([PersistentRepr(Unreadable(1), 1, "acct")])]) == [None]
    finally:
        unregister_type(Unreadable)
    code, _, err = run(capsys, "journal", "show", url, "acct")
    assert code == 1 and "unknown manifest 'nosuchapp.events.Unreadable'" in err
    assert "(hint: pass --import MODULE for the module that registers the event classes" in err, err


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
    path = tmp_path / "garbage.db"
    path.write_bytes(b"not a database at all" * 400)
    code, out, _ = run(capsys, "journal", "verify", f"sqlite://{path}")
    assert code == 1 and out.startswith("CORRUPT storage: ")
    code, _, err = run(capsys, "journal", "ls", f"sqlite://{path}")
    assert code == 1 and "JournalCorruption" in err and "journal verify" in err


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

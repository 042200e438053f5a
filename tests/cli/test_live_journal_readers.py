"""Reading a live SQLite journal from other processes loses nothing the live system writes afterwards.

The accounts topology runs on the multi-process base with its journal and snapshot store on one SQLite file
(as every shipped topology does). While it runs, every CLI command that opens the journal (`reprise status`,
`reprise journal ls|show|tail|verify`) and a plain `sqlite3` reader run against it from other processes, with
acknowledged deposits fed between them. Each reader's close once let SQLite believe it was the file's last
user (the live hosts' locks had been dropped by a raw open/close of the file): it checkpointed and unlinked
the WAL the hosts went on appending to, and every later acknowledged write vanished with it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from examples.accounts.client import balances, expected_balances
from examples.accounts.model import FeedDeposits
from journal import open_journal, sqlite_wal
from tests.drills.test_sigkill import ACCOUNTS, FEEDER, N_ACCOUNTS, spawn_topology
from tests.waiting import wait_for

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(180)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
CHUNK = 40
# A reader in another process that knows nothing of Reprise: Python's sqlite3, opened and closed.
PLAIN_READER = "import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); " \
               "print(c.execute('SELECT count(*) FROM journal').fetchone()[0]); c.close()"


def feed(system, start: int) -> int:
    """Feed deposits start .. start+CHUNK-1, acknowledged once journaled; wait until all are confirmed."""
    system.ask(FEEDER, FeedDeposits(start, CHUNK, N_ACCOUNTS), timeout=30)
    wait_for(lambda: system.ask(FEEDER, "stats", timeout=10).unconfirmed == 0, timeout=30, interval=0.05)
    return start + CHUNK


def run(*argv: str) -> subprocess.CompletedProcess:
    done = subprocess.run(list(argv), cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, f"{argv}: {done.stdout}{done.stderr}"
    return done


def rows_seen_by_a_fresh_reader(path: str) -> int:
    return int(run(sys.executable, "-c", PLAIN_READER, path).stdout)


def test_cli_commands_and_a_plain_sqlite_reader_on_a_live_journal_lose_no_acknowledged_write(make_system, tmp_path):
    path = f"{tmp_path}/journal.db"
    url = f"sqlite:///{path}"
    system = make_system("multiproc", journal=url, snapshot_store=url)
    spawn_topology(system, str(tmp_path))
    fed = feed(system, 0)
    imports = ("--import", "examples.accounts.model")
    readers = [
        (REPRISE, "status", "--port", str(system.admin_port)),
        (REPRISE, "journal", "ls", url, *imports),
        (REPRISE, "journal", "show", url, f"{ACCOUNTS}/3", *imports),
        (REPRISE, "journal", "tail", url, "-n", "5", *imports),
        (REPRISE, "journal", "verify", url, *imports),
        (sys.executable, "-c", PLAIN_READER, path),
    ]
    for argv in readers:
        out = run(*argv).stdout
        if "verify" in argv:
            assert out.rstrip().endswith(": ok"), out
        if "status" in argv:
            assert f"journal       {url}  (" in out, out  # it opened the journal to size it
        fed = feed(system, fed)  # written after the reader closed: must land in the live WAL, not a dead one

    live_rows = rows_seen_by_a_fresh_reader(path)
    system.shutdown()
    with open_journal(url) as j:
        assert j.verify().ok
        stored = sum(s.event_count for s in j.summaries())
    assert rows_seen_by_a_fresh_reader(path) == live_rows  # nothing the live system had written vanished
    assert stored > 0

    again = make_system("multiproc", journal=url, snapshot_store=url)
    spawn_topology(again, str(tmp_path))
    expected = expected_balances(fed, N_ACCOUNTS)
    assert balances(again, sorted(expected)) == expected  # every acknowledged deposit, after a restart


def reprise_in(cwd: str, *argv: str) -> subprocess.CompletedProcess:
    """The installed `reprise` running this checkout's code, in `cwd`."""
    return subprocess.run([REPRISE, *argv], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ROOT})


def test_status_prints_the_journal_s_data_not_the_space_its_wal_reserves_ahead(make_system, tmp_path):
    # journal.sqlite writes zeros ahead of a growing WAL (256 KiB at least, up to twice its size): status counted
    # them, 1.1 MiB for a journal of 95 KiB (a 4 KiB database and 90 KiB of WAL frames).
    path = f"{tmp_path}/journal.db"
    url = f"sqlite:///{path}"
    system = make_system("multiproc", journal=url, snapshot_store=url)
    spawn_topology(system, str(tmp_path))
    fed = feed(system, 0)
    done = reprise_in(ROOT, "status", "--port", str(system.admin_port), "--json")
    assert done.returncode == 0, done.stderr
    with open(path + "-wal", "rb") as f:
        wal = f.read()
    scanned = sqlite_wal.scan(wal)
    assert not isinstance(scanned, str), scanned
    data = os.path.getsize(path) + scanned.valid_end  # (nothing was written in between: the feed had settled)
    assert len(wal) > scanned.valid_end + 100_000, "the WAL has space written ahead (else this test shows nothing)"
    assert json.loads(done.stdout)["journal_bytes"] == data
    text = reprise_in(ROOT, "status", "--port", str(system.admin_port)).stdout
    assert f"journal       {url}  ({data / 1024:.1f} KiB)" in text, text
    fed = feed(system, fed)
    expected = expected_balances(fed, N_ACCOUNTS)
    assert balances(system, sorted(expected)) == expected  # (status read the live journal: nothing lost)


@pytest.mark.parametrize("command", [["ls"], ["show", "PID"], ["tail"], ["verify"]])
def test_a_file_path_for_a_journal_url_is_refused_naming_the_sqlite_url(make_system, tmp_path, command):
    # `reprise journal ls bank.db` said only "unsupported journal URL 'bank.db'" and listed URL shapes.
    url = f"sqlite://{tmp_path}/bank.db"  # (tmp_path is absolute: three slashes)
    system = make_system("multiproc", journal=url, snapshot_store=url)
    spawn_topology(system, str(tmp_path))
    fed = feed(system, 0)
    imports = ("--import", "examples.accounts.model")
    argv = [arg.replace("PID", f"{ACCOUNTS}/3") for arg in command]
    for given, suggested in (("bank.db", "sqlite://bank.db"), (f"{tmp_path}/bank.db", url)):
        done = reprise_in(str(tmp_path), "journal", argv[0], given, *argv[1:], *imports)
        assert done.returncode == 2, done
        assert done.stderr.count("\n") == 1 and f"'{given}' is a file path, not a journal URL" in done.stderr
        assert f"give {suggested} " in done.stderr, done.stderr
        works = reprise_in(str(tmp_path), "journal", argv[0], suggested, *argv[1:], *imports)
        assert works.returncode == 0, works  # the URL it suggests reads the live journal
    fed = feed(system, fed)
    expected = expected_balances(fed, N_ACCOUNTS)
    assert balances(system, sorted(expected)) == expected

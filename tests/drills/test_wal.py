"""Journal-corruption drills on the accounts topology: a WAL cut mid-record, and a record's bytes flipped.

In both, accounts written by a real multi-process system are recovered by a new system from the damaged
journal: the spawn (for a damaged WAL) or recovery (for a damaged record) refuses with JournalCorruption (nothing is silently dropped or misread), and
`reprise journal verify URL` exits 1 naming what is corrupt: the WAL frame for a torn WAL (which
record a torn frame held cannot be known), the persistence id and sequence number for a bad record.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import struct
import subprocess
import sys
from pathlib import Path

import pytest

import actors
from examples.accounts.client import expected_balances
from examples.accounts.model import FeedDeposits
from journal import sqlite_wal
from tests.drills.sample import RecoveryRefused, ReportingAccount
from tests.drills.test_sigkill import ACCOUNTS, FEEDER, N_ACCOUNTS, spawn_topology
from tests.waiting import wait_for

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(120)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
DEPOSITS = 60  # account 3 gets deposits 17, 37 and 57: its events are sequence nrs 1..3


def write_accounts(make_system, directory) -> actors.System:
    """Run the accounts topology on a journal in `directory` until DEPOSITS deposits are applied and confirmed."""
    os.makedirs(directory)
    url = f"sqlite:///{directory}/journal.db"
    system = make_system("multiproc", journal=url, snapshot_store=url)
    spawn_topology(system, directory)
    system.ask(FEEDER, FeedDeposits(0, DEPOSITS, N_ACCOUNTS), timeout=30)
    wait_for(lambda: system.ask(FEEDER, "stats", timeout=10).unconfirmed == 0, timeout=30, interval=0.1)
    return system


def recover(make_system, url: str, account: int) -> tuple[actors.System, actors.Probe]:
    """A new system on the damaged journal; wake account `account` (its recovery runs on first message)."""
    system = make_system("multiproc", journal=url, snapshot_store=url)
    observer = system.probe()
    system.spawn(ReportingAccount, ACCOUNTS, entities=True, kwargs={"report_to": observer.path})
    observer.tell(f"{ACCOUNTS}/{account}", "balance")
    return system, observer


def crash_image(make_system, tmp_path) -> Path:
    """The journal files as they are on disk while a system runs (its last commits only in the WAL)."""
    live = write_accounts(make_system, tmp_path / "live")
    crash = tmp_path / "crash"
    crash.mkdir()
    for suffix in ("", "-wal"):
        shutil.copy(tmp_path / "live" / f"journal.db{suffix}", crash / f"journal.db{suffix}")
    live.shutdown()
    return crash


def refused_at_spawn(make_system, url: str) -> str:
    """A new system on the damaged journal: spawning the accounts fails with the store's JournalCorruption."""
    system = make_system("multiproc", journal=url, snapshot_store=url)
    with pytest.raises(actors.SpawnFailed) as failed:
        system.spawn(ReportingAccount, ACCOUNTS, entities=True, kwargs={"report_to": "/user/nobody"})
    message = str(failed.value)
    assert "JournalCorruption" in message, message
    return message


def verify(url: str, *extra: str) -> subprocess.CompletedProcess:
    return subprocess.run([REPRISE, "journal", "verify", url, *extra], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)


def test_a_wal_cut_mid_record_is_refused_at_spawn_and_named_by_verify(make_system, tmp_path):
    crash = crash_image(make_system, tmp_path)
    wal = crash / "journal.db-wal"
    found = sqlite_wal.scan(wal.read_bytes())
    assert not isinstance(found, str), found
    page_size, end = found.page_size, found.valid_end  # (past the end: zeros written ahead of the WAL)
    assert end > 32 + 24 + page_size, "the crash image must have frames in its WAL"
    os.truncate(wal, end - (24 + page_size) // 2)  # the last frame cut in half: a torn write or a cut copy
    torn = os.path.getsize(wal)

    url = f"sqlite:///{crash}/journal.db"
    # The host opens its store when it starts, so the damage fails the spawn instead of a later recovery.
    assert "ends inside frame" in refused_at_spawn(make_system, url)
    assert os.path.getsize(wal) == torn, "SQLite must not have rolled the torn transaction back"

    checked = verify(url)
    assert checked.returncode == 1, checked.stdout
    assert checked.stdout.startswith("CORRUPT storage: refusing to open")
    assert "journal.db-wal ends inside frame" in checked.stdout and "1 corrupt" in checked.stderr


def test_a_flipped_byte_in_a_record_is_refused_by_recovery_and_named_by_verify(make_system, tmp_path):
    live = write_accounts(make_system, tmp_path / "live")
    live.shutdown()
    db = tmp_path / "live" / "journal.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")  # every record into the database file itself
    # Its last record (deposits applied in one group commit share one event, so the count varies).
    seq, record = conn.execute("SELECT sequence_nr, record FROM journal WHERE persistence_id = ? "
                               "ORDER BY sequence_nr DESC LIMIT 1", (f"{ACCOUNTS}/3",)).fetchone()
    conn.close()
    data = bytearray(db.read_bytes())
    at = data.find(record)
    assert at > 0 and data.find(record, at + 1) == -1, "the record's bytes must be found once in the file"
    data[at + len(record) // 2] ^= 0xFF  # one bit pattern flipped on disk, as a bad sector would
    db.write_bytes(bytes(data))

    url = f"sqlite:///{db}"
    system, observer = recover(make_system, url, 3)
    refused = observer.receive(timeout=30)
    assert isinstance(refused, RecoveryRefused) and refused.error == "JournalCorruption"
    assert (refused.persistence_id, refused.sequence_nr) == (f"{ACCOUNTS}/3", seq)
    assert f"persistence id '{ACCOUNTS}/3', sequence nr {seq}" in refused.message
    # The other accounts are intact and recover their exact balances.
    expected = expected_balances(DEPOSITS, N_ACCOUNTS)
    assert system.ask(f"{ACCOUNTS}/4", "balance", timeout=30) == ("4", expected["4"])

    checked = verify(url, "--import", "examples.accounts.model")
    assert checked.returncode == 1, checked.stdout + checked.stderr
    corrupt = [line for line in checked.stdout.splitlines() if line.startswith("CORRUPT")]
    assert len(corrupt) == 1 and corrupt[0].startswith(f"CORRUPT persistence_id={ACCOUNTS}/3 sequence_nr={seq}: ")
    assert "1 corrupt" in checked.stderr


def test_a_flipped_bit_mid_wal_is_refused_at_spawn_and_named_by_verify(make_system, tmp_path):
    # SQLite's recovery stops silently at the first frame whose checksum fails: every later acknowledged
    # transaction would vanish (and their sequence numbers be handed out again), with verify saying ok.
    crash = crash_image(make_system, tmp_path)
    wal = crash / "journal.db-wal"
    data = bytearray(wal.read_bytes())
    page_size = struct.unpack(">I", data[8:12])[0]
    frames = (len(data) - 32) // (24 + page_size)
    commits = [i for i in range(1, frames + 1) if struct.unpack(">I", data[32 + (i - 1) * (24 + page_size) + 4:][:4])[0]]
    assert len(commits) > 3, "the crash image must hold several committed transactions in its WAL"
    frame = commits[len(commits) // 2]  # the commit frame of a transaction mid-WAL
    data[32 + (frame - 1) * (24 + page_size) + 24 + page_size // 3] ^= 0x01
    wal.write_bytes(bytes(data))

    url = f"sqlite:///{crash}/journal.db"
    message = refused_at_spawn(make_system, url)
    assert f"frame {frame} of {wal}" in message and "torn_wal=accept" in message

    checked = verify(url, "--import", "examples.accounts.model")
    assert checked.returncode == 1, checked.stdout
    assert checked.stdout.startswith("CORRUPT storage: refusing to open") and f"frame {frame} of" in checked.stdout
    assert "1 corrupt" in checked.stderr

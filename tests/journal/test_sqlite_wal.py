"""A damaged SQLite WAL is refused at open (naming the frame) instead of silently cut short by SQLite's recovery.

Crash images are copies of a live journal's files (its last commits only in the WAL), with or without the
-shm file (SQLite's WAL index, which a process crash leaves behind). What a crash legitimately leaves (an
unfinished last transaction) must still open.
"""

from __future__ import annotations

import os
import shutil
import signal
import struct
import subprocess
import sys
import threading

import pytest

import journal
from actors.cli import main
from journal import AtomicWrite, JournalCorruption, PersistentRepr, open_journal
from journal.sqlite import _wal_refusal
from journal.sqlite_wal import FRAME_HEADER, WAL_HEADER, checksum, in_use_elsewhere, scan

pytestmark = pytest.mark.timeout(120)

EVENTS = 100
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def _seqs(j: journal.Journal, pid: str = "p") -> list[int]:
    return [r.sequence_nr for r in j.replay_messages(pid)]


def _crash_image(tmp_path, *, shm: bool) -> tuple[str, str]:
    """A copy of a live journal holding EVENTS acknowledged events, one transaction each, all in the WAL."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    with open_journal(f"sqlite://{src}/j.db") as j:
        for n in range(1, EVENTS + 1):
            assert j.write_messages([AtomicWrite([PersistentRepr(f"e-{n}", n, "p")])]) == [None]
        dst.mkdir()
        for suffix in ("", "-wal") + (("-shm",) if shm else ()):
            shutil.copyfile(f"{j.path}{suffix}", f"{dst}/j.db{suffix}")
    return f"sqlite://{dst}/j.db", f"{dst}/j.db-wal"


def _frames(wal: str) -> tuple[int, list[int]]:
    """(page size, the numbers of the commit frames) of a WAL; past its frames, zeros written ahead of it."""
    data = open(wal, "rb").read()
    s = scan(data)
    assert not isinstance(s, str) and s.valid == s.committed
    page = s.page_size
    assert not data[s.valid_end:].strip(b"\0")
    commits = [i for i in range(1, s.valid + 1)
               if struct.unpack(">I", data[WAL_HEADER + (i - 1) * (FRAME_HEADER + page) + 4:][:4])[0]]
    return page, commits


def _flip(path: str, offset: int) -> None:
    with open(path, "r+b") as f:
        f.seek(offset)
        byte = f.read(1)[0]
        f.seek(offset)
        f.write(bytes([byte ^ 0x10]))


def _verify_cli(url: str, capsys) -> tuple[int, str]:
    code = main(["journal", "verify", url])
    return code, capsys.readouterr().out


@pytest.mark.parametrize("big_endian", [False, True], ids=["little-endian", "big-endian"])
@pytest.mark.parametrize("size", [8, 1032, 65544])
def test_the_checksum_is_sqlites(big_endian, size) -> None:
    # SQLite's own definition, a loop per pair of words; the module's closed form must agree with it.
    data = (bytes(range(256)) * (size // 256 + 1))[:size]
    s0, s1 = 123, 0xFFFFFFF0
    for i in range(0, len(data), 8):
        a, b = struct.unpack(">II" if big_endian else "<II", data[i:i + 8])
        s0 = (s0 + a + s1) & 0xFFFFFFFF
        s1 = (s1 + b + s0) & 0xFFFFFFFF
    assert checksum(data, 123, 0xFFFFFFF0, big_endian=big_endian) == (s0, s1)


@pytest.mark.parametrize("shm", [False, True], ids=["wal-only", "with-shm"])
def test_a_flipped_bit_mid_wal_is_refused_naming_the_frame(tmp_path, capsys, shm) -> None:
    url, wal = _crash_image(tmp_path, shm=shm)
    page, commits = _frames(wal)
    frame = commits[len(commits) // 2] - 1  # a frame of a transaction in the middle, not its commit frame
    _flip(wal, WAL_HEADER + (frame - 1) * (FRAME_HEADER + page) + FRAME_HEADER + page // 2)  # in its page
    size = os.path.getsize(wal)
    with pytest.raises(JournalCorruption, match=rf"frame {frame} of .*j\.db-wal") as err:
        open_journal(url)
    assert "torn_wal=accept" in str(err.value)
    assert os.path.getsize(wal) == size
    report = journal.verify(url)
    assert not report.ok and f"frame {frame} of" in report.problems[0].reason
    code, out = _verify_cli(url, capsys)
    assert code == 1 and out.startswith("CORRUPT storage: refusing to open") and f"frame {frame} of" in out
    with open_journal(url + "?torn_wal=accept") as j:  # what SQLite keeps: the transactions before the frame
        kept = _seqs(j)
        assert kept == list(range(1, len(kept) + 1)) and 0 < len(kept) < EVENTS


def test_a_wal_cut_at_a_frame_boundary_mid_transaction_is_refused_when_the_wal_index_says_it_was_committed(
        tmp_path, capsys) -> None:
    url, wal = _crash_image(tmp_path, shm=True)
    page, commits = _frames(wal)
    assert commits[-1] - commits[-2] > 1, "the last transaction must span several frames"
    os.truncate(wal, WAL_HEADER + (commits[-1] - 1) * (FRAME_HEADER + page))  # its commit frame cut off
    with pytest.raises(JournalCorruption, match=rf"frame {commits[-1]} of .*missing.*frames up to {commits[-1]} "
                                                r"were committed"):
        open_journal(url)
    code, out = _verify_cli(url, capsys)
    assert code == 1 and f"frame {commits[-1]} of" in out
    with open_journal(url + "?torn_wal=accept") as j:
        assert _seqs(j) == list(range(1, EVENTS))


def test_a_zero_length_database_file_beside_a_wal_is_refused(tmp_path, capsys) -> None:
    url, wal = _crash_image(tmp_path, shm=False)
    _, commits = _frames(wal)
    os.truncate(wal[:-len("-wal")], 0)
    with pytest.raises(JournalCorruption, match=rf"is empty or missing but its WAL holds committed transactions up "
                                                rf"to frame {commits[-1]} of"):
        open_journal(url)
    assert os.path.getsize(wal) > 0  # SQLite would have deleted it
    code, out = _verify_cli(url, capsys)
    assert code == 1 and "is empty or missing" in out
    with open_journal(url + "?torn_wal=accept") as j:
        assert _seqs(j) == []  # accepting means SQLite's choice: the WAL is dropped


def test_a_damaged_wal_header_is_refused(tmp_path) -> None:
    url, wal = _crash_image(tmp_path, shm=False)
    _flip(wal, 12)  # the checkpoint sequence number: SQLite would ignore the whole WAL
    with pytest.raises(JournalCorruption, match="header of .* fails its checksum"):
        open_journal(url)


def test_a_crash_mid_transaction_still_opens(tmp_path) -> None:
    # A writer killed (SIGKILL) in the middle of a transaction whose pages already spilled into the WAL:
    # valid frames after the last commit and no commit frame. Nothing acknowledged is lost, so it opens.
    path = f"{tmp_path}/j.db"
    script = f"""
import os, signal
from journal import AtomicWrite, PersistentRepr, open_journal
j = open_journal("sqlite://{path}")
for n in range(1, 21):
    j.write_messages([AtomicWrite([PersistentRepr(n, n, "p")])])
conn = j._h.c.conn
conn.execute("PRAGMA cache_size=10")  # spill the transaction's pages into the WAL before its commit
conn.execute("BEGIN IMMEDIATE")
conn.executemany("INSERT INTO journal (persistence_id, sequence_nr, record, checksum) VALUES ('q', ?, ?, 0)",
                 [(n, os.urandom(3000)) for n in range(1, 200)])
os.kill(os.getpid(), signal.SIGKILL)
"""
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == -signal.SIGKILL, done.stderr
    s = scan(open(path + "-wal", "rb").read())
    assert s.valid > s.committed > 0, "the crash must have left uncommitted frames after the last commit"
    with open_journal(f"sqlite://{path}") as j:
        assert _seqs(j) == list(range(1, 21)) and _seqs(j, "q") == []


def test_a_live_writer_is_never_mistaken_for_a_damaged_wal(tmp_path) -> None:
    # Another process commits big transactions (WAL restarts included) while this one opens the file again
    # and again, each time as its first connection (the only time the -shm is read), and walks the WAL as
    # `verify` does.
    path = f"{tmp_path}/j.db"
    url = f"sqlite://{path}"
    with open_journal(url):
        pass
    script = f"""
import os, sys
from journal import AtomicWrite, PersistentRepr, open_journal
j = open_journal("{url}")
j._h.c.conn.execute("PRAGMA wal_autocheckpoint=50")  # a checkpoint, and so a WAL restart, every few commits
n = 0
for k in range(400):
    j.write_messages([AtomicWrite([PersistentRepr(os.urandom(4000), n + i, "w")]) for i in range(1, 11)])
    n += 10
print(n)
"""
    writer = subprocess.Popen([sys.executable, "-c", script], cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT},
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    opened, generations, live, verdicts = 0, set(), set(), set()
    try:
        while writer.poll() is None:
            live.add(in_use_elsewhere(path))
            verdicts.add(_wal_refusal(path, use_shm=False))  # verify's walk: no -shm, so no liveness check
            with open_journal(url) as j:
                j.highest_sequence_nr("w")
                with open(path + "-wal", "rb") as f:  # SQLite holds no locks on the -wal file itself
                    generations.add(f.read(16)[12:16])  # the checkpoint sequence number
            opened += 1
        out, err = writer.communicate(timeout=60)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait()
    assert writer.returncode == 0, err
    assert opened > 5 and len(generations) > 1, (opened, generations)
    assert True in live and verdicts == {None}, (live, verdicts)
    with open_journal(url) as j:
        assert j.highest_sequence_nr("w") == int(out) == 4000


def test_verify_of_an_open_journal_does_not_disturb_it(tmp_path) -> None:
    # In-process verify walks the WAL (never the -shm) under the connection's lock while writes go on.
    url = f"sqlite://{tmp_path}/j.db"
    with open_journal(url) as j:
        stop = threading.Event()

        def write() -> None:
            n = 0
            while not stop.is_set():
                n += 1
                j.write_messages([AtomicWrite([PersistentRepr(n, n, "w")])])

        t = threading.Thread(target=write)
        t.start()
        try:
            reports = [j.verify() for _ in range(5)]
        finally:
            stop.set()
            t.join()
        assert all(r.ok for r in reports)


@pytest.mark.parametrize("shm", [False, True], ids=["wal-only", "with-shm"])
def test_a_frame_cut_mid_write_after_the_last_commit_opens_only_when_the_wal_index_proves_it_uncommitted(
        tmp_path, shm) -> None:
    url, wal = _crash_image(tmp_path, shm=shm)
    page, commits = _frames(wal)
    salts = open(wal, "rb").read(24)[16:24]
    torn = struct.pack(">II", 2, 0) + salts + struct.pack(">II", 0, 0) + bytes(page // 2)
    end = WAL_HEADER + commits[-1] * (FRAME_HEADER + page)
    os.truncate(wal, end)  # as the file was before zeros were written ahead of it: a WAL that SQLite appends to
    with open(wal, "ab") as f:  # a writer killed between a new frame's header and the rest of its page
        f.write(torn)
    if shm:
        with open_journal(url) as j:
            assert _seqs(j) == list(range(1, EVENTS + 1))  # every acknowledged event
    else:
        with pytest.raises(JournalCorruption, match=rf"ends inside frame {commits[-1] + 1} "):
            open_journal(url)


@pytest.mark.parametrize("shm", [False, True], ids=["wal-only", "with-shm"])
def test_a_frame_cut_mid_write_over_the_zeros_written_ahead_opens_with_every_acknowledged_event(tmp_path, shm) -> None:
    # With zeros written ahead of the WAL (journal/sqlite.py), a commit overwrites them: a writer killed mid-frame
    # leaves a frame whose page is half written, with zeros after it, not a file that ends inside a frame.
    url, wal = _crash_image(tmp_path, shm=shm)
    page, commits = _frames(wal)
    size = os.path.getsize(wal)
    end = WAL_HEADER + commits[-1] * (FRAME_HEADER + page)
    assert size >= end + 2 * (FRAME_HEADER + page), "the image must have zeros written ahead of its frames"
    salts = open(wal, "rb").read(24)[16:24]
    with open(wal, "r+b") as f:
        f.seek(end)
        f.write(struct.pack(">II", 2, 0) + salts + struct.pack(">II", 0, 0) + os.urandom(page // 2))
    assert os.path.getsize(wal) == size
    assert journal.verify(url).ok
    with open_journal(url) as j:
        assert _seqs(j) == list(range(1, EVENTS + 1))

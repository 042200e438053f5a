"""SQLite-specific behaviour: URLs and options, torn WAL, truncated file, busy writers, file modes."""

from __future__ import annotations

import logging
import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import threading
import time

import pytest

import journal
from journal import AtomicWrite, JournalCorruption, JournalError, PersistentRepr, open_journal, sqlite_wal
from tests.forking import in_forked_child

PAGE = 4096


def _write(j: journal.Journal, pid: str, seqs: range) -> None:
    assert j.write_messages([AtomicWrite([PersistentRepr(f"e-{n}", n, pid)]) for n in seqs]) == [None] * len(seqs)


def _seqs(j: journal.Journal, pid: str) -> list[int]:
    return [r.sequence_nr for r in j.replay_messages(pid)]


def test_absolute_and_relative_urls_create_private_files(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "rel").mkdir()
    with open_journal("sqlite://rel/relative.db") as j:
        _write(j, "p", range(1, 3))
    assert stat.S_IMODE(os.stat(tmp_path / "rel" / "relative.db").st_mode) == 0o600
    with open_journal(f"sqlite://{tmp_path}/abs.db") as j:
        assert j.path == f"{tmp_path}/abs.db"
    with open_journal("sqlite://rel/relative.db") as j:
        assert _seqs(j, "p") == [1, 2]


def test_a_file_in_a_directory_that_does_not_exist_is_refused_naming_it_and_a_new_one_is_logged(tmp_path,
                                                                                                     caplog) -> None:
    # The directory was made silently: a misspelt one started an empty journal. A new file (in a directory that exists)
    # is made, and says so at INFO naming it: where a misspelt file name shows.
    missing = tmp_path / "dtaa"
    for opener in (open_journal, journal.open_snapshot_store):
        with pytest.raises(JournalError, match=rf"cannot create the SQLite file {missing}/j.db: its directory "
                                               rf"{missing} does not exist: .* \(mkdir -p {missing}\)"):
            opener(f"sqlite://{missing}/j.db")
        assert not missing.exists()
    with caplog.at_level(logging.INFO, logger="reprise.journal"):
        with open_journal(f"sqlite://{tmp_path}/bnak.db"):
            pass
        with open_journal(f"sqlite://{tmp_path}/bnak.db"):  # (it exists now: nothing to say)
            pass
    created = [r.getMessage() for r in caplog.records if "created the new SQLite file" in r.getMessage()]
    assert created == [f"created the new SQLite file {tmp_path}/bnak.db (nothing was at that path; if you meant an "
                       "existing journal or offset store, fix the URL)"], caplog.text


def test_files_are_0600_even_with_a_permissive_umask(tmp_path) -> None:
    old = os.umask(0)
    try:
        with open_journal(f"sqlite://{tmp_path}/j.db") as j:
            _write(j, "p", range(1, 4))
            files = [j.path + s for s in ("", "-wal", "-shm")]
            modes = {f: stat.S_IMODE(os.stat(f).st_mode) for f in files}
    finally:
        os.umask(old)
    assert modes == {f: 0o600 for f in files}


@pytest.mark.timeout(60)
@pytest.mark.parametrize("planted", ["", "-wal", "-shm", "link", "fifo"])
def test_a_file_another_user_planted_where_the_journal_goes_is_refused_naming_its_owner(tmp_path, planted) -> None:
    # A journal named in a directory others may write in (/tmp: sticky, world-writable) opened whatever another
    # user had put there first: their file (or -wal/-shm) took this user's events, which they could read and
    # rewrite, or a symbolic link of theirs pointing at such a file.
    if os.geteuid() != 0:
        pytest.skip("NOT RUN: needs root to give a file to user nobody")
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)  # (as /tmp)
    path = shared / "j.db"
    if planted in ("-wal", "-shm", "fifo"):
        with open_journal(f"sqlite://{path}") as j:  # this user's journal, closed cleanly: no -wal, -shm left
            _write(j, "p", range(1, 3))
    theirs = shared / {"link": "their.db", "fifo": "j.db-wal"}.get(planted, f"j.db{planted}")
    if planted == "fifo":
        os.mkfifo(theirs)  # (the open blocked on it for good: no writer ever comes)
    else:
        theirs.touch()
    os.chmod(theirs, 0o666)
    os.chown(theirs, 65534, 65534)
    if planted == "link":
        os.symlink(theirs, path)
        os.lchown(path, 65534, 65534)
    with pytest.raises(JournalError, match=f"{theirs} belongs to uid 65534.*could read and rewrite"):
        open_journal(f"sqlite://{path}")
    assert theirs.stat().st_size == 0  # (nothing of ours went into it)
    os.unlink(theirs)
    with open_journal(f"sqlite://{path}") as j:  # (once it is gone, the journal opens)
        _write(j, "q", range(1, 2))


def test_a_journal_in_a_directory_another_user_may_replace_its_files_in_is_refused(tmp_path) -> None:
    # Its files could be this user's, and still be swapped for another user's between two checks (or opens).
    shared = tmp_path / "open"
    shared.mkdir()
    os.chmod(shared, 0o777)  # (no sticky bit: anyone may rename and remove anyone's files in it)
    with pytest.raises(JournalError, match=f"its directory {shared} may be written by every user .*chmod o-w"):
        open_journal(f"sqlite://{shared}/j.db")
    assert os.listdir(shared) == []
    if os.geteuid() == 0:
        theirs = tmp_path / "theirs"
        theirs.mkdir()
        os.chown(theirs, 65534, 65534)
        with pytest.raises(JournalError, match=f"its directory {theirs} belongs to uid 65534"):
            open_journal(f"sqlite://{theirs}/j.db")
    os.chmod(shared, 0o1777)  # (as /tmp: its files stay their owners')
    with open_journal(f"sqlite://{shared}/j.db") as j:
        _write(j, "p", range(1, 2))


def test_a_journal_file_other_users_may_write_is_refused(tmp_path) -> None:
    path = tmp_path / "j.db"
    with open_journal(f"sqlite://{path}") as j:
        _write(j, "p", range(1, 3))
    os.chmod(path, 0o666)
    with pytest.raises(JournalError, match=f"{path} may be written by other users .*chmod 600 {path}"):
        open_journal(f"sqlite://{path}")
    os.chmod(path, 0o600)
    with open_journal(f"sqlite://{path}") as j:
        assert _seqs(j, "p") == [1, 2]


def test_unknown_scheme_and_options_are_refused(tmp_path) -> None:
    with pytest.raises(ValueError, match=r"sqlite://.*memory://.*postgresql://"):
        open_journal("mysql://localhost/db")
    with pytest.raises(ValueError, match="sqlite://, memory://, postgresql://"):
        journal.open_snapshot_store("no-scheme:at-all")
    with pytest.raises(ValueError, match="'no-scheme-at-all' is a file path, .* give sqlite://no-scheme-at-all "):
        journal.open_snapshot_store("no-scheme-at-all")
    with pytest.raises(ValueError, match="unknown sqlite journal option"):
        open_journal(f"sqlite://{tmp_path}/j.db?synchronus=NORMAL")
    with pytest.raises(ValueError, match="synchronous must be one of"):
        open_journal(f"sqlite://{tmp_path}/j.db?synchronous=OFF")


def test_synchronous_is_full_by_default_and_normal_on_request(tmp_path) -> None:
    with open_journal(f"sqlite://{tmp_path}/j.db") as j:
        assert j.pragma("synchronous") == 2 and j.pragma("journal_mode") == "wal"
    with open_journal(f"sqlite://{tmp_path}/j.db?synchronous=NORMAL") as j:
        assert j.pragma("synchronous") == 1


def test_a_group_commit_of_many_ids_neither_spills_nor_checkpoints_every_time(tmp_path) -> None:
    with open_journal(f"sqlite://{tmp_path}/j.db") as j:
        assert j.pragma("cache_size") == -16384 and j.pragma("wal_autocheckpoint") == 4000
        assert j.pragma("synchronous") == 2  # durability as configured


def test_memory_journals_are_shared_by_name() -> None:
    a, b, c = open_journal("memory://shared-x"), open_journal("memory://shared-x"), open_journal("memory://other-x")
    try:
        _write(a, "p", range(1, 3))
        assert _seqs(b, "p") == [1, 2] and _seqs(c, "p") == []
    finally:
        for j in (a, b, c):
            j.close()
        journal.memory.drop_memory_store("shared-x")


def _torn_copy(tmp_path, cut: int) -> tuple[str, str]:
    """A copy of a journal whose WAL holds three transactions (e 1-3, 4-6, 7-9), cut `cut` bytes short."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir()
    with open_journal(f"sqlite://{src}/j.db") as j:
        for start in (1, 4, 7):
            _write(j, "p", range(start, start + 3))
        dst.mkdir()
        for suffix in ("", "-wal"):  # copied while open: the transactions are still only in the WAL
            shutil.copyfile(f"{j.path}{suffix}", f"{dst}/j.db{suffix}")
    wal = f"{dst}/j.db-wal"
    end = _frames_end(wal)  # (past it: zeros written ahead of the growing WAL)
    assert (end - 32) % (24 + PAGE) == 0 and end > 32 + 6 * (24 + PAGE)
    os.truncate(wal, end - cut)
    return f"sqlite://{dst}/j.db", wal


def _frames_end(wal: str) -> int:
    """The offset where the frames SQLite's recovery reads in `wal` end."""
    with open(wal, "rb") as f:
        found = sqlite_wal.scan(f.read())
    assert not isinstance(found, str), found
    return found.valid_end


def test_a_wal_cut_mid_record_is_refused_not_silently_rolled_back(tmp_path) -> None:
    url, wal = _torn_copy(tmp_path, (24 + PAGE) // 2)
    size = os.path.getsize(wal)
    with pytest.raises(JournalCorruption, match="ends inside frame") as err:
        open_journal(url)
    assert "torn_wal=accept" in str(err.value)
    assert os.path.getsize(wal) == size  # refused before SQLite could recover (and drop) anything
    report = journal.verify(url)
    assert not report.ok and "ends inside frame" in report.problems[0].reason
    with open_journal(url + "?torn_wal=accept") as j:
        assert _seqs(j, "p") == [1, 2, 3, 4, 5, 6]  # the torn transaction is gone whole: no hole, no half write
        assert j.highest_sequence_nr("p") == 6
        _write(j, "p", range(7, 8))
        assert _seqs(j, "p") == list(range(1, 8))


def _crash_image_of_single_writes(tmp_path, n: int) -> tuple[str, str]:
    """A copy of a journal taken while it was open after `n` writes of one event each (a crash's files)."""
    src, dst = tmp_path / "src", tmp_path / "dst"
    src.mkdir(parents=True)
    with open_journal(f"sqlite://{src}/j.db") as j:
        for k in range(1, n + 1):
            _write(j, "p", range(k, k + 1))
        dst.mkdir()
        for suffix in ("", "-wal"):
            shutil.copyfile(f"{j.path}{suffix}", f"{dst}/j.db{suffix}")
    return f"sqlite://{dst}/j.db", f"{dst}/j.db-wal"


def test_a_growing_wal_is_written_ahead_with_zeros_and_its_crash_image_opens_with_every_event(tmp_path) -> None:
    # Commits then overwrite the WAL instead of appending to it (journal/sqlite.py: _write_wal_ahead).
    url, wal = _crash_image_of_single_writes(tmp_path, 300)
    end, size = _frames_end(wal), os.path.getsize(wal)
    with open(wal, "rb") as f:
        ahead = f.read()[end:]
    assert size > end + 2 * (24 + PAGE) and size >= 256 * 1024 and not ahead.strip(b"\0"), (end, size)
    assert (size - 32) % (24 + PAGE) == 0  # whole frames: no torn frame at the end
    assert journal.verify(url).ok
    with open_journal(url) as j:
        assert _seqs(j, "p") == list(range(1, 301))
        _write(j, "p", range(301, 302))
        assert _seqs(j, "p") == list(range(1, 302))


def test_zeros_written_ahead_and_cut_by_a_crash_are_not_taken_for_a_torn_record(tmp_path) -> None:
    url, wal = _crash_image_of_single_writes(tmp_path, 50)
    end = _frames_end(wal)
    # A crash while the zeros were written: the file ends inside a frame of zeros (here 100 bytes into it).
    os.truncate(wal, end + (24 + PAGE) + 100)
    assert journal.verify(url).ok
    with open_journal(url) as j:
        assert _seqs(j, "p") == list(range(1, 51))
    # Ten bytes of zeros could be the start of a frame SQLite wrote (its page number's high bytes): refused.
    url, wal = _crash_image_of_single_writes(tmp_path / "again", 50)
    os.truncate(wal, _frames_end(wal) + 10)
    with pytest.raises(JournalCorruption, match="ends inside frame"):
        open_journal(url)


def test_a_writer_sigkilled_while_its_wal_grows_loses_no_acknowledged_event(tmp_path) -> None:
    # Past a few doublings of the zeros written ahead: every event whose write returned is there after the kill.
    path = f"{tmp_path}/j.db"
    script = (
        "import sys\n"
        "from journal import AtomicWrite, PersistentRepr, open_journal\n"
        f"j = open_journal('sqlite://{path}')\n"
        "n = 0\n"
        "while True:\n"
        "    n += 1\n"
        "    j.write_messages([AtomicWrite([PersistentRepr(f'e-{n}', n, 'p')])])\n"
        "    print(n, flush=True)\n"
    )
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    writer = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True, cwd=root)
    acknowledged = 0
    try:
        assert writer.stdout is not None
        for line in writer.stdout:
            acknowledged = int(line)
            if acknowledged >= 1500:
                break
    finally:
        writer.kill()
        writer.wait(10)
    assert acknowledged >= 1500, "the writer stopped before 1,500 writes"
    acknowledged = max([acknowledged, *map(int, writer.stdout.read().split())])  # (printed before the kill)
    writer.stdout.close()
    assert os.path.getsize(path + "-wal") > 1 << 20  # it grew past 1 MiB, written ahead several times
    with open_journal(f"sqlite://{path}") as j:
        stored = _seqs(j, "p")
    # Every acknowledged event; at most the one whose write was under way at the kill besides.
    assert stored[:acknowledged] == list(range(1, acknowledged + 1)) and len(stored) - acknowledged <= 1


def test_a_wal_cut_at_a_frame_boundary_is_an_unacknowledged_transaction(tmp_path) -> None:
    url, _ = _torn_copy(tmp_path, 24 + PAGE)  # whole frames only: indistinguishable from a crash before fsync
    with open_journal(url) as j:
        assert _seqs(j, "p") == [1, 2, 3, 4, 5, 6]  # SQLite drops the transaction that lost its commit frame
        assert j.highest_sequence_nr("p") == 6


def test_a_truncated_database_file_raises_journal_corruption(tmp_path) -> None:
    path = f"{tmp_path}/j.db"
    with open_journal(f"sqlite://{path}") as j:
        _write(j, "p", range(1, 2001))
    size = os.path.getsize(path)
    os.truncate(path, size - 3 * PAGE - PAGE // 2)
    with pytest.raises(JournalCorruption) as err:
        with open_journal(f"sqlite://{path}") as j:
            _seqs(j, "p")
    assert "corrupt" in str(err.value)
    report = journal.verify(f"sqlite://{path}")
    assert not report.ok


def test_a_writer_waits_for_the_write_lock_and_fails_clearly_when_it_never_comes(tmp_path) -> None:
    path = f"{tmp_path}/j.db"
    with open_journal(f"sqlite://{path}?busy_timeout=0.3") as j:
        blocker = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
        blocker.execute("BEGIN IMMEDIATE")
        with pytest.raises(JournalError, match="write lock"):
            _write(j, "p", range(1, 2))
        releaser = threading.Timer(0.1, lambda: blocker.execute("ROLLBACK"))
        releaser.start()
        try:
            with open_journal(f"sqlite://{path}?busy_timeout=10") as patient:
                _write(patient, "p", range(1, 3))
        finally:
            releaser.join()
            blocker.close()
        assert _seqs(j, "p") == [1, 2]


_WRITER = """
import os, sys, time, journal
from journal import AtomicWrite, PersistentRepr
j = journal.open_journal(sys.argv[1])
open(sys.argv[4] + "-" + sys.argv[2], "w").close()  # ready
while not os.path.exists(sys.argv[4]):  # every writer opened the file: go together
    time.sleep(0.001)
first = time.monotonic()
for n in range(1, int(sys.argv[3]) + 1):
    assert j.write_messages([AtomicWrite([PersistentRepr(f"e-{n}", n, sys.argv[2])])]) == [None]
print(first, time.monotonic())
j.close()
"""


def test_processes_writing_one_file_at_once_each_commit_every_event_once_in_order(tmp_path) -> None:
    url, go = f"sqlite://{tmp_path}/j.db", tmp_path / "go"
    with open_journal(url) as j:  # created before the writers start
        _write(j, "seed", range(1, 2))
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    writers = [subprocess.Popen([sys.executable, "-c", _WRITER, url, f"w{k}", "300", str(go)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True, env=env) for k in range(3)]
    ready = [tmp_path / f"go-w{k}" for k in range(3)]
    deadline = time.monotonic() + 60
    while not all(r.exists() for r in ready) and time.monotonic() < deadline and all(w.poll() is None for w in writers):
        time.sleep(0.01)
    go.touch()
    outs = [w.communicate(timeout=120) for w in writers]
    assert all(w.returncode == 0 for w in writers), [o[1] for o in outs]
    spans = [tuple(map(float, o[0].split())) for o in outs]
    # (CLOCK_MONOTONIC is one clock for all processes) the writers' commits overlapped: they took turns at the lock
    assert max(start for start, _ in spans) < min(end for _, end in spans), spans
    with open_journal(url) as j:
        for k in range(3):
            assert _seqs(j, f"w{k}") == list(range(1, 301))
        assert _seqs(j, "seed") == [1]


_STEADY_WRITER = """
import os, sys, time, journal
from journal import AtomicWrite, PersistentRepr
j = journal.open_journal(sys.argv[1])
stamps = []
while not os.path.exists(sys.argv[2]):
    n = len(stamps) + 1
    assert j.write_messages([AtomicWrite([PersistentRepr(n, n, "steady")])]) == [None]
    stamps.append(time.monotonic())
    if n == 1:
        print("ready", flush=True)
    time.sleep(0.005)  # a busy host's pace: a group commit, then the next batch from its socket
print(" ".join(map(str, stamps)))
j.close()
"""


@pytest.mark.timeout(120)
def test_a_long_delete_lets_another_process_write_meanwhile(tmp_path) -> None:
    # A day of a Spark bridge's batches, pruned at once after a dead driver's run was discarded, is gigabytes: as one
    # transaction that delete held the write lock past other processes' busy timeout, and their writes failed.
    url, stop = f"sqlite://{tmp_path}/j.db", tmp_path / "stop"
    blob = os.urandom(100_000)
    with open_journal(url) as j:
        for i in range(1, 1501, 50):
            writes = [AtomicWrite([PersistentRepr(blob, n, "bridge")]) for n in range(i, i + 50)]
            assert j.write_messages(writes) == [None] * 50
        writer = subprocess.Popen([sys.executable, "-c", _STEADY_WRITER, url, str(stop)], stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": os.getcwd()})
        try:
            assert writer.stdout.readline().strip() == "ready", writer.stderr.read()
            began = time.monotonic()
            j.delete_messages_to("bridge", 1500)
            ended = time.monotonic()
        finally:
            stop.touch()
            out, err = writer.communicate(timeout=60)
        assert writer.returncode == 0, err
        stamps = [float(s) for s in out.split()]
        # (CLOCK_MONOTONIC is one clock for all processes) As one transaction, the delete let the other process
        # commit nothing until its COMMIT (most of the call; the WAL's checkpoint follows it).
        first_half = [s for s in stamps if began < s < (began + ended) / 2]
        assert len(first_half) >= 3, (f"{len(first_half)} writes of the other process in the first half of the "
                                      f"{ended - began:.2f} s delete")
        assert _seqs(j, "bridge") == [] and j.highest_sequence_nr("bridge") == 1500
        assert _seqs(j, "steady") == list(range(1, len(stamps) + 1))


def test_snapshot_store_shares_the_journal_file(tmp_path) -> None:
    url = f"sqlite://{tmp_path}/j.db"
    with open_journal(url) as j, journal.open_snapshot_store(url) as s:
        _write(j, "p", range(1, 4))
        md = s.save(journal.SnapshotMetadata("p", 3), {"state": (1, 2)})
        assert s.load("p").snapshot == {"state": (1, 2)} and s.load("p").metadata == md
        report = j.verify()
    assert report.ok and (report.records_checked, report.snapshots_checked) == (3, 1)


def _rows_seen_by_another_process(path: str) -> int:
    script = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
              "print(c.execute('SELECT count(*) FROM journal').fetchone()[0]); c.close()")
    done = subprocess.run([sys.executable, "-c", script, path], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return int(done.stdout)


def test_another_process_opening_and_closing_the_file_loses_no_later_write(tmp_path) -> None:
    # Journal and snapshot store of one process on one file, as every shipped topology has them. Opening the
    # store once did a raw open/close of the file, dropping the journal connection's locks: the next process
    # to close the file believed itself the last user, checkpointed and unlinked the WAL still in use.
    url = f"sqlite://{tmp_path}/j.db"
    with open_journal(url) as j, journal.open_snapshot_store(url) as s:
        _write(j, "p", range(1, 2))
        s.save(journal.SnapshotMetadata("p", 1), "state")
        assert _rows_seen_by_another_process(j.path) == 1  # a plain sqlite3 reader, opened and closed
        done = subprocess.run([sys.executable, "-c", f"import journal; journal.open_journal({url!r}).close()"],
                              capture_output=True, text=True, timeout=60,
                              env={**os.environ, "PYTHONPATH": os.getcwd()})
        assert done.returncode == 0, done.stderr
        _write(j, "p", range(2, 3))  # acknowledged
        assert _rows_seen_by_another_process(j.path) == 2
        assert os.path.exists(j.path + "-wal")
    with open_journal(url) as j:
        assert _seqs(j, "p") == [1, 2]


def test_a_file_created_while_the_journal_of_the_process_opens_it_keeps_the_journal_s_locks(tmp_path,
                                                                                          monkeypatch) -> None:
    # create_private_file (a projection's SQLite offset store calls it outside the registry's lock) created the
    # file at its path and closed that descriptor after fchmod. The journal of the same process, opening the
    # file meanwhile (a persistent actor starting in another thread of the host), found it and connected: the
    # close dropped the journal connection's locks, and the next process to close the file took itself for
    # the last, checkpointed and unlinked the WAL still in use: the next acknowledged write was lost.
    from journal.sqlite import create_private_file

    path = f"{tmp_path}/j.db"
    opened: list[journal.Journal] = []
    fchmod = os.fchmod

    def fchmod_then_the_journal_opens(fd: int, mode: int) -> None:
        fchmod(fd, mode)
        if not opened and os.path.lexists(path):  # the other thread's turn, between the fchmod and the close
            opened.append(open_journal(f"sqlite://{path}"))

    monkeypatch.setattr(os, "fchmod", fchmod_then_the_journal_opens)
    create_private_file(path)
    monkeypatch.undo()
    j = opened[0] if opened else open_journal(f"sqlite://{path}")
    with j:
        _write(j, "p", range(1, 2))
        assert _rows_seen_by_another_process(path) == 1  # a plain sqlite3 reader, opened and closed
        _write(j, "p", range(2, 3))  # acknowledged
        assert _rows_seen_by_another_process(path) == 2
        assert os.path.exists(path + "-wal")
    with open_journal(f"sqlite://{path}") as j:
        assert _seqs(j, "p") == [1, 2]
    assert sorted(os.listdir(tmp_path)) == ["j.db"]  # (nothing left beside it)


def test_journal_and_snapshot_store_of_a_process_share_one_connection(tmp_path) -> None:
    url = f"sqlite://{tmp_path}/j.db"
    j, s = open_journal(url), journal.open_snapshot_store(url)
    (tmp_path / "sub").mkdir()  # (the kernel resolves sub/.. only through a directory that exists)
    other = open_journal(f"sqlite://{tmp_path}/./sub/../j.db?synchronous=NORMAL&busy_timeout=5")
    try:
        assert j._h.c is s._h.c is other._h.c
        assert (j.pragma("synchronous"), other.pragma("synchronous")) == (2, 1)  # each keeps its own settings
        j.close()
        j.close()  # idempotent: gives up its share once
        _write(other, "p", range(1, 3))
        s.save(journal.SnapshotMetadata("p", 2), "state")
        assert s.load("p").snapshot == "state"
        with pytest.raises(JournalError, match="is closed"):
            j.highest_sequence_nr("p")
    finally:
        other.close()
        conn = s._h.c.conn
        s.close()
    with pytest.raises(sqlite3.ProgrammingError):  # the last user closed the connection
        conn.execute("SELECT 1")


def test_a_new_file_is_created_0600_whatever_the_umask(tmp_path) -> None:
    old = os.umask(0o277)  # would leave the owner read-only
    try:
        with open_journal(f"sqlite://{tmp_path}/j.db") as j:
            _write(j, "p", range(1, 3))
            modes = {sfx: stat.S_IMODE(os.stat(j.path + sfx).st_mode) for sfx in ("", "-wal", "-shm")}
    finally:
        os.umask(old)
    assert modes == {"": 0o600, "-wal": 0o600, "-shm": 0o600}


def test_a_forked_child_is_refused_the_journal_its_parent_has_open_and_told_how_to_start_it(tmp_path) -> None:
    # SQLite keeps its POSIX lock records per file in process memory; a fork copies them, so a child's new
    # connection to a file its parent has open takes no real locks. Another process could then checkpoint and
    # remove the WAL the child writes to: before this refusal, a child's acknowledged event was gone for a
    # fresh process once the parent had closed and a third process had opened and closed the journal.
    url = f"sqlite://{tmp_path}/j.db"
    other = f"sqlite://{tmp_path}/other.db"
    with open_journal(url) as j:
        _write(j, "p", range(1, 2))

        def open_again() -> str:
            with open_journal(url) as child:
                _write(child, "p", range(2, 3))
            return "wrote"

        def use_the_parents() -> str:
            _write(j, "p", range(2, 3))
            return "wrote"

        def close_the_parents() -> str:
            j.close()  # (must not close the parent's connection: that could checkpoint under it)
            return "closed"

        def open_another_file() -> str:
            with open_journal(other) as child:
                _write(child, "q", range(1, 3))
                return f"wrote {_seqs(child, 'q')}"

        for work in (open_again, use_the_parents):
            said = in_forked_child(work)
            assert said.startswith("JournalError: ") and "forked" in said and "'spawn'" in said, said
        assert in_forked_child(close_the_parents) == "closed"
        assert in_forked_child(open_another_file) == "wrote [1, 2]"
        _write(j, "p", range(2, 4))  # the parent goes on as before
        assert _seqs(j, "p") == [1, 2, 3]
    with open_journal(url) as j, open_journal(other) as o:
        assert _seqs(j, "p") == [1, 2, 3]
        assert _seqs(o, "q") == [1, 2]

    def reopen_after_the_parent_closed() -> str:
        with open_journal(url) as child:
            return str(_seqs(child, "p"))

    assert in_forked_child(reopen_after_the_parent_closed) == "[1, 2, 3]"


def test_a_bit_flipped_in_a_stored_sequence_nr_is_corruption_not_another_event(tmp_path) -> None:
    path = f"{tmp_path}/j.db"
    with open_journal(f"sqlite://{path}") as j:
        _write(j, "p", range(1, 4))
    db = sqlite3.connect(path)
    try:  # bit 40 of event 2's sequence nr, as a damaged disk page would turn it
        db.execute("UPDATE events SET sequence_nr = sequence_nr | (1 << 40) WHERE sequence_nr = 2")
        db.commit()
    finally:
        db.close()
    with open_journal(f"sqlite://{path}") as j:
        with pytest.raises(JournalCorruption) as err:
            _seqs(j, "p")
        assert (err.value.persistence_id, err.value.sequence_nr) == ("p", 2**40 + 2)
        assert [(p.persistence_id, p.sequence_nr) for p in j.verify().problems] == [("p", 2**40 + 2)]


def test_verify_reports_events_whose_integer_persistence_id_was_damaged(tmp_path) -> None:
    """An event whose integer id names no persistence id, or became 0 (the tombstone's), is seen by no replay
    or query: verify must name it rather than call the journal ok with the event silently gone."""
    path = f"{tmp_path}/j.db"
    with open_journal(f"sqlite://{path}") as j:
        _write(j, "a", range(1, 4))
        _write(j, "b", range(1, 4))
        j.delete_messages_to("b", 1)
    db = sqlite3.connect(path)
    try:  # one flipped bit each: a's id (1) to 0; b's id (2) to 10, which is no id
        db.execute("UPDATE events SET pid = 0 WHERE ordering = 2")
        db.execute("UPDATE events SET pid = pid | 8 WHERE ordering = 5")
        db.commit()
    finally:
        db.close()
    with open_journal(f"sqlite://{path}") as j:
        assert (_seqs(j, "a"), _seqs(j, "b")) == ([1, 3], [3])
        problems = j.verify().problems
        assert [p.reason for p in problems if "offset 2 " in p.reason and "sequence nr 2" in p.reason] != []
        assert [p.reason for p in problems if "offset 5 " in p.reason and "sequence nr 2" in p.reason] != []
        assert len(problems) == 2, problems
        _write(j, "a", range(4, 5))
        j.delete_messages_to("a", 4)  # (the newest: a tombstone of its own, which verify takes for one)
        assert len(j.verify().problems) == 2

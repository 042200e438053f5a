"""Reading a SQLite WAL the way SQLite's recovery does, to refuse a WAL that recovery would silently cut short.

Format (https://www.sqlite.org/walformat.html). Header, 32 bytes big-endian: magic (0x377f0682: checksums
over little-endian words, 0x377f0683: big-endian), version, page size, checkpoint seq, salt-1, salt-2,
checksum-1, checksum-2 (over the first 24 bytes). Then frames: a 24-byte header (page number, commit size
- the database size in pages after a commit, nonzero only in a transaction's last frame - salt-1, salt-2,
checksum-1, checksum-2) and one page. A frame's checksum continues the previous frame's (the header's for
frame 1) over the frame header's first 8 bytes and the page: for each pair of 32-bit words (a, b),
s0 += a + s1, s1 += b + s0 (mod 2**32).

SQLite's recovery (walIndexRecover) replays frames from 1 while each carries the header's salts and a
matching checksum, up to the last commit frame among them, and silently ignores everything after the
first frame that fails. That is right for what a crash leaves; it is silent data loss for anything else.
The rule here (`scan` finds the facts, `problem` judges them):

* When the -shm file (SQLite's WAL index, which survives a process crash) is intact and belongs to this
  WAL (same salts), it says which frames were committed (mxFrame; a write is acknowledged only after
  that): the WAL is refused if any of them fails or is missing (a flipped bit, a WAL cut at a frame
  boundary), and anything after them - an unfinished transaction, a partial frame - is what a crash
  leaves, accepted (SQLite drops it; it was never acknowledged).
* Without such an index (a power loss, a copy without the -shm), a frame that fails its checksum or
  salts is refused when the frames after it, with the header's salts, chain correctly from it (from its
  stored checksum or the one it should have had) up to a commit frame: committed transactions follow a
  damaged frame, which a crash cannot produce. Frames that do not chain are left over from an earlier
  transaction or WAL generation, ignored as SQLite does. A WAL cut inside a frame is refused (its
  transaction was never acknowledged, but nothing proves it; `torn_wal=accept` says "that was a crash"),
  unless the cut frame is zeros, at least as far as a frame header's salts (16 bytes): the zeros
  journal.sqlite writes ahead of a growing WAL, cut by a crash while it wrote them, where no frame of
  SQLite's ever was (a frame SQLite wrote, cut after its salts, is not zeros); whole frames after the last
  commit that end without one are a crash mid-transaction, accepted.
* Always: a WAL header that fails its checksum is refused when frame 1 chains from it (SQLite would
  ignore the whole WAL); a database file of zero bytes beside a WAL with committed frames is refused
  (SQLite would delete the WAL).
* A database another process has open is not walked: its WAL index is live and SQLite runs no recovery.

Known limits: without the -shm, damage to the very last commit frame looks like a crash before that
commit and is accepted, and a kill between SQLite writing a commit frame and rewriting the checksums of
pages written twice in that transaction (only transactions larger than the page cache) is refused
although nothing acknowledged was lost (`torn_wal=accept` opens it).
"""

from __future__ import annotations

import fcntl
import os
import struct
import sys
from array import array
from collections.abc import Callable
from dataclasses import dataclass
from operator import mul

__all__ = ["WalScan", "checksum", "frames_end", "in_use_elsewhere", "problem", "read_shm_header", "scan"]

WAL_HEADER = 32
FRAME_HEADER = 24
_MAGIC = {0x377F0682: False, 0x377F0683: True}  # magic -> checksums over big-endian words
_MASK = 0xFFFFFFFF
_NATIVE_BIG = sys.byteorder == "big"


def _fibonacci(n: int) -> list[int]:
    g = [0, 1]
    while len(g) < n:
        g.append((g[-1] + g[-2]) & _MASK)
    return g


_SHIFT = 80  # a sum of 16,386 products of two 32-bit values (a 64 KiB page) stays below 2**79
_coefficients: dict[int, tuple[list[int], int, int, int]] = {}


def _coeffs(n_words: int) -> tuple[list[int], int, int, int]:
    # SQLite's checksum is linear: over N word pairs x_0..x_{2N-1} from (s0, s1) it is
    #   s0' = F(2N-1) s0 + F(2N) s1 + sum F(2N-1-i) x_i,   s1' = F(2N) s0 + F(2N+1) s1 + sum F(2N-i) x_i
    # (F: Fibonacci numbers mod 2**32). Both sums come out of one dot product with the two coefficients
    # packed into one integer: about 20 times faster than SQLite's loop in Python.
    c = _coefficients.get(n_words)
    if c is None:
        g = _fibonacci(n_words + 2)
        packed = [g[n_words - 1 - i] | g[n_words - i] << _SHIFT for i in range(n_words)]
        c = (packed, g[n_words - 1], g[n_words], g[n_words + 1])
        _coefficients[n_words] = c
    return c


def checksum(data: bytes | memoryview, s0: int, s1: int, big_endian: bool) -> tuple[int, int]:
    """SQLite's WAL checksum of `data` (a multiple of 8 bytes) continuing from (s0, s1)."""
    words = array("I", data)
    if big_endian != _NATIVE_BIG:
        words.byteswap()
    packed, f_prev, f_n, f_next = _coeffs(len(words))
    both = sum(map(mul, packed, words))
    return ((f_prev * s0 + f_n * s1 + both) & _MASK, (f_n * s0 + f_next * s1 + (both >> _SHIFT)) & _MASK)


@dataclass(frozen=True, slots=True)
class WalScan:
    """What SQLite's recovery would make of a WAL file (frames are numbered from 1, as SQLite does)."""

    size: int  # bytes
    page_size: int
    salts: bytes  # the header's salt-1 and salt-2, as stored
    frames: int  # whole frames in the file
    torn_bytes: int  # bytes of a partial frame at the end
    valid: int  # frames 1..valid chain correctly: what recovery reads
    committed: int  # the last commit frame among them: what recovery keeps (0: nothing)
    header_ok: bool  # the header's own checksum matches
    continued_to: int  # > 0: frames after frame valid+1 chain on from it up to this commit frame

    @property
    def valid_end(self) -> int:
        """The byte where frames 1..valid end (past it: a partial frame, stale frames or zeros written ahead)."""
        return WAL_HEADER + self.valid * (FRAME_HEADER + self.page_size)


def _frame(wal: bytes, i: int, page_size: int) -> memoryview:
    start = WAL_HEADER + (i - 1) * (FRAME_HEADER + page_size)
    return memoryview(wal)[start:start + FRAME_HEADER + page_size]


def _frame_checksum(frame: memoryview, s0: int, s1: int, big: bool) -> tuple[int, int]:
    return checksum(bytes(frame[:8]) + bytes(frame[FRAME_HEADER:]), s0, s1, big)


def _chain(wal: bytes, first: int, frames: int, page_size: int, salts: bytes, starts: list[tuple[int, int]],
           big: bool) -> int:
    """The last commit frame reached by chaining from frame `first` on, from any of `starts`; 0 if none."""
    for s0, s1 in starts:
        last_commit = 0
        for i in range(first, frames + 1):
            f = _frame(wal, i, page_size)
            if bytes(f[8:16]) != salts:
                break
            s0, s1 = _frame_checksum(f, s0, s1, big)
            if struct.unpack(">II", f[16:24]) != (s0, s1):
                break
            if struct.unpack(">I", f[4:8])[0]:
                last_commit = i
        if last_commit:
            return last_commit
    return 0


def scan(wal: bytes) -> WalScan | str:
    """Walk the frames of WAL contents `wal`; a string says why it has no usable header."""
    size = len(wal)
    if size < WAL_HEADER:
        return f"is {size} bytes, shorter than a WAL header: it was cut before its first frame"
    magic, _, page_size = struct.unpack(">III", wal[:12])
    if magic not in _MAGIC:
        return f"has no valid WAL header (magic {magic:#x}): every transaction in it would be lost"
    if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
        return f"has an impossible page size {page_size} in its header: every transaction in it would be lost"
    big = _MAGIC[magic]
    salts = wal[16:24]
    stored = struct.unpack(">II", wal[24:32])
    computed = checksum(wal[:24], 0, 0, big)
    frames, torn = divmod(size - WAL_HEADER, FRAME_HEADER + page_size)
    header_ok = computed == stored
    valid = committed = continued = 0
    if header_ok:
        s0, s1 = stored
        for i in range(1, frames + 1):
            f = _frame(wal, i, page_size)
            if bytes(f[8:16]) != salts:
                c = _frame_checksum(f, s0, s1, big)
                continued = _chain(wal, i + 1, frames, page_size, salts, [c], big)
                break
            c = _frame_checksum(f, s0, s1, big)
            frame_stored = struct.unpack(">II", f[16:24])
            if frame_stored != c:
                continued = _chain(wal, i + 1, frames, page_size, salts, [frame_stored, c], big)
                break
            s0, s1 = c
            valid = i
            if struct.unpack(">I", f[4:8])[0]:
                committed = i
    elif frames:
        continued = _chain(wal, 1, frames, page_size, salts, [stored, computed], big)
    return WalScan(size, page_size, salts, frames, torn, valid, committed, header_ok, continued)


def frames_end(wal_path: str) -> int:
    """Where the frames of the WAL at `wal_path` end: its header and the frames with its salts, in bytes (0 when
    it is missing or has no header). Past that are zeros journal.sqlite wrote ahead, or frames of an earlier
    generation of a reused WAL: space, not data. Reads only frame headers; takes no lock."""
    try:
        fd = os.open(wal_path, os.O_RDONLY | os.O_CLOEXEC)  # (SQLite locks no byte of the -wal: closing drops none)
    except FileNotFoundError:
        return 0
    try:
        head = os.pread(fd, WAL_HEADER, 0)
        if len(head) < WAL_HEADER or struct.unpack(">I", head[:4])[0] not in _MAGIC:
            return 0
        page_size = struct.unpack(">I", head[8:12])[0]
        if page_size < 512 or page_size > 65536 or page_size & (page_size - 1):
            return 0
        salts, frame = head[16:24], FRAME_HEADER + page_size
        end = WAL_HEADER
        while os.pread(fd, 8, end + 8) == salts and len(os.pread(fd, 1, end + frame - 1)) == 1:
            end += frame  # (a whole frame with this generation's salts)
        return end
    finally:
        os.close(fd)


def read_shm_header(shm: bytes) -> tuple[int, bytes] | None:
    """(mxFrame, salts) from an intact -shm wal-index header, or None (absent, torn, uninitialised)."""
    if len(shm) < 96 or shm[:48] != shm[48:96]:
        return None
    hdr = shm[:48]
    version, _, _, is_init = struct.unpack("=IIIB", hdr[:13])
    if not is_init or version != 3007000:
        return None
    # The wal-index header's checksum is over native-order words (it never leaves this machine).
    if checksum(hdr[:40], 0, 0, _NATIVE_BIG) != struct.unpack("=II", hdr[40:48]):
        return None
    (mx_frame,) = struct.unpack("=I", hdr[16:20])
    return mx_frame, bytes(hdr[32:40])


_SHM_DMS = 128  # SQLite's unix VFS: every connection holds a read lock on this byte of the -shm (its "DMS")
_FLOCK = "hhqqi4x"  # Linux's struct flock on 64-bit: l_type, l_whence, l_start, l_len, l_pid


def _dms_held(fd: int) -> bool | None:
    if not sys.platform.startswith("linux") or struct.calcsize(_FLOCK) != 32:
        return None
    # F_GETLK only asks: it takes no lock, so it cannot disturb SQLite's own locking.
    answer = fcntl.fcntl(fd, fcntl.F_GETLK, struct.pack(_FLOCK, fcntl.F_WRLCK, os.SEEK_SET, _SHM_DMS, 1, 0))
    l_type: int = struct.unpack(_FLOCK, answer)[0]
    return l_type != fcntl.F_UNLCK


def in_use_elsewhere(db_path: str) -> bool | None:
    """Whether another process has `db_path` open in WAL mode (None: cannot tell on this platform).

    Opens and closes the -shm: only when no connection of this process has the database open.
    """
    try:
        fd = os.open(db_path + "-shm", os.O_RDONLY | os.O_CLOEXEC)
    except FileNotFoundError:
        return False
    try:
        return _dms_held(fd)
    finally:
        os.close(fd)


def problem(db_path: str, *, use_shm: bool) -> str | None:
    """Why SQLite would silently lose committed transactions of `db_path`'s WAL (see the module doc), or None.

    `use_shm` reads the -shm file: only when no connection of this process has the database open, since
    closing any descriptor of a file drops this process's POSIX locks on it, SQLite's among them. With it, a
    database another process has open is not walked at all: its connections share the WAL index in the
    -shm, and SQLite runs no recovery (the step that drops frames) while that index is live.
    """
    wal_path = db_path + "-wal"
    shm = None
    if use_shm:
        try:
            fd = os.open(db_path + "-shm", os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            pass
        else:
            try:
                if _dms_held(fd):
                    return None
                shm = read_shm_header(os.pread(fd, 136, 0))
            finally:
                os.close(fd)
    try:
        with open(wal_path, "rb") as f:
            wal = f.read()
    except FileNotFoundError:
        return None
    if not wal:
        return None
    s = scan(wal)
    if isinstance(s, str):
        return f"{wal_path} {s}"
    frame_bytes = FRAME_HEADER + s.page_size

    def at(i: int) -> str:
        return f"frame {i} of {wal_path} (byte {WAL_HEADER + (i - 1) * frame_bytes})"

    if not s.header_ok:
        if s.continued_to:
            return (f"the header of {wal_path} fails its checksum although frames 1-{s.continued_to} chain from it: "
                    f"SQLite would ignore the whole WAL, {s.continued_to} frames of committed transactions")
        return None
    if shm is not None and shm[1] == s.salts:  # the WAL index of this very WAL generation
        mx_frame = shm[0]
        if mx_frame > s.committed:
            if s.valid >= mx_frame:
                where, why = at(mx_frame), "is not a commit frame"
            elif s.valid + 1 > s.frames:
                where, why = f"frame {s.valid + 1} of {wal_path}", "is missing (the WAL was cut)"
            else:
                where, why = at(s.valid + 1), "fails its checksum"
            return (f"{where} {why}, but SQLite's WAL index ({db_path}-shm) says frames up to {mx_frame} were "
                    f"committed: SQLite would silently drop every committed transaction from frame "
                    f"{s.committed + 1} on")
        # Every frame the index calls committed is intact. Whatever follows (a partial frame, a commit whose
        # checksums were still being rewritten) was never published, so never acknowledged: a crash left it.
        return _empty_database(db_path, s, at)
    if s.continued_to:
        return (f"{at(s.valid + 1)} fails its checksum but frames up to commit frame {s.continued_to} chain on from "
                f"it: the WAL is damaged and SQLite would silently drop every transaction from frame {s.valid + 1} on")
    if s.torn_bytes and not _zeros_written_ahead(wal, s.torn_bytes):
        whole = s.frames
        return (f"{wal_path} ends inside frame {whole + 1} (byte {WAL_HEADER + whole * frame_bytes}, "
                f"{s.torn_bytes} of {frame_bytes} bytes present): a record was cut mid-write and SQLite would "
                f"silently drop its transaction")
    return _empty_database(db_path, s, at)


_SALTS_END = 16  # a frame header's bytes up to its salts (page number, commit size, salt-1, salt-2)


def _zeros_written_ahead(wal: bytes, torn: int) -> bool:
    """Whether the partial frame at the end of `wal` (`torn` bytes) is zeros, far enough to hold a frame's salts."""
    return torn >= _SALTS_END and not wal[-torn:].strip(b"\0")


def _empty_database(db_path: str, s: WalScan, at: Callable[[int], str]) -> str | None:
    if not s.committed:
        return None
    try:
        empty = os.path.getsize(db_path) == 0
    except FileNotFoundError:
        empty = True
    if empty:
        return (f"{db_path} is empty or missing but its WAL holds committed transactions up to {at(s.committed)}: "
                f"SQLite would delete the WAL and every transaction in it")
    return None

"""PROFILE.md §37: what an fdatasync costs after a 4 KiB write that appends, that overwrites, and that follows a stat.

    python bench/profiling/wal_fsync_micro.py [DIR] [N]

A SQLite WAL is appended to until it first reaches wal_autocheckpoint; an fdatasync after an append also commits
the file's new size. On kernels with fine-grained ("multigrain") timestamps a stat of the file makes the next write
update its mtime, so the fdatasync after it commits the file system's journal too; lseek does not.
"""

import os
import sys
import time

DIR = sys.argv[1] if len(sys.argv) > 1 else "/tmp"
N = int(sys.argv[2]) if len(sys.argv) > 2 else 1500
FRAME = 24 + 4096  # a WAL frame: its header and one page
path = os.path.join(DIR, f"wal_fsync_micro.{os.getpid()}")


def run(kind: str) -> float:
    """µs per write + fdatasync of one frame, for kind: append, overwrite, overwrite+stat, overwrite+lseek."""
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        if kind != "append":
            os.pwrite(fd, bytes(FRAME * N), 0)
            os.fdatasync(fd)
        block = os.urandom(FRAME)
        t = time.perf_counter()
        for i in range(N):
            if kind == "overwrite+stat":
                os.stat(path)
            elif kind == "overwrite+lseek":
                os.lseek(fd, 0, os.SEEK_END)
            os.pwrite(fd, block, i * FRAME)
            os.fdatasync(fd)
        return (time.perf_counter() - t) / N * 1e6
    finally:
        os.close(fd)
        os.unlink(path)


for _ in range(3):
    print("  ".join(f"{k} {run(k):.0f} µs" for k in ("append", "overwrite", "overwrite+stat", "overwrite+lseek")))

"""Running a piece of a test in a forked child of the test's process."""

from __future__ import annotations

import os
from collections.abc import Callable


def in_forked_child(work: Callable[[], str]) -> str:
    """Run `work()` in a forked child: what it returned, or its error's type and message ("Type: message")."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            try:
                result = work()
            except BaseException as e:  # (reported to the parent, whatever it is)
                result = f"{type(e).__name__}: {e}"
            os.write(write, result.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        said = f.read()
    os.waitpid(pid, 0)
    return said

"""Thespian's own log of a client process (one attached by actors.start or actors.connect), kept private.

Thespian appends its warnings and errors (peer addresses, the types and origins of messages it failed to send)
to `$TMPDIR/thespian.log` unless THESPLOG_FILE names another file: one file for every user of the machine,
created with the umask's mode (0644 here), so any local user could read what a client's sends did. The
system's own processes log into its private run dir (actors.start sets their THESPLOG_FILE); a client
process now logs into `$TMPDIR/reprise-<uid>/thespian.log`, in a directory only its user can enter. That
file outlives any one system (a client may attach to several, or to one on another machine), and Thespian
keeps it small (it moves a file over 50 KB to `.old`).
"""

from __future__ import annotations

import builtins
import os
import stat
import tempfile
from typing import Any

from thespian.system import utilis

NAME = "thespian.log"


def private_dir() -> str:
    """This user's private directory for client logs, `$TMPDIR/reprise-<uid>` (0700), made if missing.

    A directory of that name that is not this user's own, or that others may enter, was not made here (another
    user can create names in a shared temp dir first): a fresh private directory is used instead.
    """
    path = os.path.join(tempfile.gettempdir(), f"reprise-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    st = os.lstat(path)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or st.st_mode & 0o077:
        return tempfile.mkdtemp(prefix=f"reprise-{os.getuid()}-")
    return path


_path: str | None = None  # the file chosen, kept while its directory exists (a fallback is made once, not per call)


def keep_private() -> str | None:
    """Point this process's Thespian log at a private file; None if THESPLOG_FILE names the user's own."""
    global _path
    if os.environ.get("THESPLOG_FILE"):
        return None
    if _path is None or not os.path.isdir(os.path.dirname(_path)):
        _path = os.path.join(private_dir(), NAME)
    fd = os.open(_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)  # (one an earlier version, or a rotation before the one below, made 0644)
    finally:
        os.close(fd)
    # (Thespian reads THESPLOG_FILE into these on its first log line and never again)
    utilis._thesplog_file, utilis._thesplog_old_file = _path, _path + ".old"
    utilis.open = _open_log  # (the name its log writer looks up)
    return _path


def _open_log(file: Any, mode: str = "r", *args: Any, **kwargs: Any) -> Any:
    """`open` as Thespian's log writer sees it: the new file it starts once it moved a full one (over 50 KB) to
    `.old` is created 0600 too, not with this process's umask."""
    if mode == "a" and isinstance(file, str):
        return builtins.open(os.open(file, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o600), mode,
                             *args, **kwargs)
    return builtins.open(file, mode, *args, **kwargs)

"""A JVM class-data archive (CDS) for local SparkSessions: a fresh driver JVM maps Spark's classes instead of
loading and verifying them one by one.

    local_session("job", class_archive=".venv/spark-classes.jsa")   # built once (~25 s) when missing or stale

Measured (bench/PROFILE.md §29): a fresh session and the demo's first feed, 1M rows: session start about 4 s
shorter, the first job's staging 0.8-1.5 s shorter, the JVM's CPU 1.0-1.2 s lower.

The JVM trusts what it maps: the archive is written by this module only, to a temporary name, and renamed
into place once its JVM exited cleanly (a truncated archive crashes the JVM that maps it). A key beside it
(`<path>.key`) names the java, pyspark and JVM options it was built with; another key means a rebuild.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import Any

from actors import RepriseError

BUILD_TIMEOUT = 300.0


class ClassArchiveError(RepriseError, RuntimeError):
    """The class archive could not be built: the message says why and what to do."""


def _java() -> str:
    """The java that pyspark's spark-submit runs (JAVA_HOME first, then PATH), resolved to its file."""
    home = os.environ.get("JAVA_HOME")
    found = os.path.join(home, "bin", "java") if home else shutil.which("java")
    if not found or not os.path.exists(found):
        raise ClassArchiveError("no java found (set JAVA_HOME or put java on PATH): Spark needs one anyway")
    return os.path.realpath(found)


def archive_key(jvm_options: str) -> str:
    """What an archive depends on: the java binary and its JVM library, pyspark's version and jars, the JVM's options."""
    import pyspark

    java = _java()
    # An update of the JDK may keep the launcher and replace libjvm.so, which the archive is bound to.
    libjvm = os.path.join(os.path.dirname(os.path.dirname(java)), "lib", "server", "libjvm.so")
    binaries = [f"{b}:{os.stat(b).st_size}:{int(os.stat(b).st_mtime)}" for b in (java, libjvm) if os.path.exists(b)]
    jars = os.path.join(os.path.dirname(pyspark.__file__), "jars")
    names = sorted(os.listdir(jars)) if os.path.isdir(jars) else []
    parts = [*binaries, pyspark.__version__, jars, *names, jvm_options]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()


def archive_is_current(path: str, jvm_options: str) -> bool:
    """True when `path` holds an archive built by this module with the same key."""
    try:
        with open(f"{path}.key", encoding="utf-8") as f:
            recorded = json.load(f).get("key")
    except (OSError, ValueError):
        return False
    return os.path.isfile(path) and recorded == archive_key(jvm_options)


def jvm_path(path: str) -> str:
    """`path` made absolute for a JVM option; Spark splits those options at spaces, so none are allowed."""
    absolute = os.path.abspath(path)
    if any(c.isspace() for c in absolute):
        raise ClassArchiveError(f"class_archive {absolute!r} contains whitespace, which Spark's JVM options cannot "
                                f"carry: choose a path without spaces")
    return absolute


def ensure_class_archive(path: str, jvm_options: str, announce: Callable[[str], None] | None = None) -> str:
    """`path` made absolute, holding a current archive: built first when missing or stale (`announce(path)` then)."""
    archive = jvm_path(path)
    refuse_shared(archive)
    if not archive_is_current(archive, jvm_options):
        if announce is not None:
            announce(archive)
        build_class_archive(archive, jvm_options)
    return archive


def refuse_shared(path: str) -> None:
    """ClassArchiveError if another user could put an archive at `path` (or a link where its build writes)."""
    me = os.geteuid()
    directory = os.path.dirname(path)
    for name, what in ((directory, "its directory"), (path, "the archive"), (f"{path}.key", "its key")):
        try:
            st = os.lstat(name)
        except OSError:
            continue  # (missing: made here, private)
        if st.st_uid not in (me, 0) or (name != directory and st.st_uid != me):
            raise ClassArchiveError(f"class_archive {path}: {what} {name} belongs to uid {st.st_uid}, not to this "
                                    "user: the driver JVM maps the archive and trusts it; give a path in a directory "
                                    "of your own")
        if stat.S_IMODE(st.st_mode) & (stat.S_IWGRP | stat.S_IWOTH):
            raise ClassArchiveError(f"class_archive {path}: {what} {name} may be written by other users (mode "
                                    f"{stat.S_IMODE(st.st_mode):o}), who could put their own archive (or a link "
                                    "where its build writes) there for the driver JVM to map: give a path in a "
                                    "directory of your own, e.g. .venv/spark-classes.jsa")


_SCRATCH = "REPRISE_CLASS_ARCHIVE_SCRATCH"  # build_class_archive's scratch directory, for the child's JVM
# (its own variable: a user's SPARK_LOCAL_DIRS may list several directories, which java.io.tmpdir cannot take)


def build_class_archive(path: str, jvm_options: str, timeout: float = BUILD_TIMEOUT) -> str:
    """Build the archive at `path` in a fresh JVM (a child process runs a small local job); returns `path`."""
    path = jvm_path(path)
    directory = os.path.dirname(path)
    # 0700, not the umask's (0777 under umask 000): whoever may write there may replace the archive the JVM trusts.
    os.makedirs(directory, mode=0o700, exist_ok=True)
    # Spark's scratch directories go to a directory removed afterwards: the JVM leaves them behind when it exits
    # to write the archive, and when a timeout kills it. So do the child's own temporary files (TMPDIR): PySpark
    # makes a directory while its JVM starts and removes it only if it is not killed meanwhile.
    with tempfile.TemporaryFile(mode="w+", encoding="utf-8") as log, \
            tempfile.TemporaryDirectory(prefix="reprise-class-archive-") as scratch:
        # A session of its own, so that a timeout kills the child's JVM too, not only the child.
        child = subprocess.Popen([sys.executable, "-m", "spark_bridge.class_archive", path, jvm_options],
                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True,
                                 env={**os.environ, "SPARK_LOCAL_DIRS": scratch, _SCRATCH: scratch,
                                      "TMPDIR": scratch})
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            _kill_group(child.pid)
            child.wait()
            _remove_partial(path, child.pid)
            raise ClassArchiveError(f"building the class archive {path} took over {timeout:.0f} s; run "
                                    f"`python -m spark_bridge.class_archive {path}` to see why, or pass "
                                    f"class_archive=None") from None
        if code != 0:
            _remove_partial(path, child.pid)
            log.seek(0)
            tail = log.read()[-2000:]
            raise ClassArchiveError(f"building the class archive {path} failed (exit {code}); pass "
                                    f"class_archive=None to run without one. Its output ended:\n{tail}")
    return path


def _kill_group(group: int, timeout: float = 30.0) -> None:
    """SIGKILL process group `group` and wait until none of its members is alive (zombies aside)."""
    os.killpg(group, signal.SIGKILL)
    # SIGKILL is delivered at once but a JVM with many threads and a large heap takes a while to exit; until it
    # has, it still writes to the scratch directory and the partial archive removed next (CI saw its pid after).
    deadline = time.monotonic() + timeout
    while _live_members(group) and time.monotonic() < deadline:
        time.sleep(0.02)


def _live_members(group: int) -> list[int]:
    """The pids of this machine's processes in process group `group` that are not zombies."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                state, _ppid, pgrp = f.read().rsplit(")", 1)[1].split()[:3]
        except OSError:
            continue  # exited meanwhile
        if int(pgrp) == group and state != "Z":
            found.append(int(entry))
    return found


def _partial(path: str, pid: int) -> str:
    return f"{path}.{pid}.partial"


def _remove_partial(path: str, pid: int) -> None:
    for leftover in (_partial(path, pid), f"{_partial(path, pid)}.key"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(leftover)


def _train(path: str, jvm_options: str) -> None:
    """Run a local job like a feed's (column expressions, mapInArrow, an aggregate) and dump its classes."""
    from spark_bridge.session import local_session

    path = jvm_path(path)
    partial = _partial(path, os.getpid())
    java = f"{jvm_options} -XX:ArchiveClassesAtExit={partial}"
    scratch = os.environ.get(_SCRATCH)
    if scratch:  # spark-submit makes a spark-* directory in java.io.tmpdir as it starts
        java = f"{java} -Djava.io.tmpdir={scratch}"
    options: dict[str, Any] = {"spark.driver.extraJavaOptions": java}
    session = local_session("reprise-class-archive", lean_jvm=False, **options)
    gateway = session.sparkContext._gateway
    try:
        df = session.range(0, 20_000, numPartitions=2).selectExpr(
            "id", "cast(id % 97 as string) as key", "cast(id * 31 % 97 + 1 as long) as amount",
        ).selectExpr("id", "key", "amount", "concat('/user/x/', key) as path")
        schema = "rows long, first string"
        df.mapInArrow(_arrow_probe, schema).collect()
        df.groupBy("key").agg({"amount": "sum"}).collect()
        df.rdd.mapPartitions(lambda rows: [sum(1 for _ in rows)]).collect()
    finally:
        session.stop()
    # The archive is written as the JVM exits, which it does once its stdin closes (pyspark's contract).
    gateway.proc.stdin.close()
    code = gateway.proc.wait(BUILD_TIMEOUT)
    if code != 0 or not os.path.isfile(partial) or os.path.getsize(partial) == 0:
        raise ClassArchiveError(f"the JVM exited with {code} and left no archive at {partial}")
    os.chmod(partial, 0o600)
    key = os.open(f"{partial}.key", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    os.fchmod(key, 0o600)  # (whatever the umask)
    with open(key, "w", encoding="utf-8") as f:
        json.dump({"key": archive_key(jvm_options)}, f)
    # The key goes last: an archive without a current key is rebuilt, never half-trusted.
    os.replace(partial, path)
    os.replace(f"{partial}.key", f"{path}.key")


def _arrow_probe(batches: Iterator[Any]) -> Iterator[Any]:  # pragma: no cover - runs in a Spark Python worker
    import pyarrow as pa

    for batch in batches:
        first = batch.column(1)[0].as_py() if batch.num_rows else ""
        yield pa.RecordBatch.from_arrays([pa.array([batch.num_rows], pa.int64()), pa.array([first], pa.string())],
                                         names=["rows", "first"])


def main(argv: list[str] | None = None) -> int:
    """`python -m spark_bridge.class_archive PATH [JVM_OPTIONS]`: build the archive at PATH."""
    from spark_bridge.session import LEAN_JVM

    args = sys.argv[1:] if argv is None else argv
    if not args or len(args) > 2:
        print("usage: python -m spark_bridge.class_archive PATH [JVM_OPTIONS]", file=sys.stderr)
        return 2
    _train(args[0], args[1] if len(args) == 2 else LEAN_JVM)
    print(f"class archive written: {args[0]}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

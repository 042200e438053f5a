"""local_session(class_archive=...): the archive is built once, atomically and private, then Spark's classes come
from it; a stale or foreign archive is rebuilt, a failed build leaves nothing behind and says why."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import tempfile

import pytest

from spark_bridge.class_archive import ClassArchiveError, archive_is_current, build_class_archive, jvm_path
from spark_bridge.session import LEAN_JVM
from tests.spark_bridge.conftest import ROOT
from tests.waiting import wait_for

pytest.importorskip("pyspark.sql")

# A child process: the test session's own SparkContext already runs in this one, with other JVM options.
JOB = """
import sys
from spark_bridge import local_session
spark = local_session("class-archive-test", class_archive=sys.argv[1], import_paths=(sys.argv[2],))
total = spark.range(0, 1000, numPartitions=2).selectExpr("id % 7 as k").groupBy("k").count().collect()
print("groups", len(total))
spark.stop()
"""


def _job(archive: str, env: dict[str, str] | None = None) -> str:
    # Spark's scratch files beside the archive (a SIGKILLed job's would stay in /tmp).
    local = os.path.join(os.path.dirname(archive), "spark-local")
    done = subprocess.run([sys.executable, "-c", JOB, archive, ROOT], cwd=ROOT, capture_output=True, text=True,
                          timeout=240, env={**os.environ, "SPARK_LOCAL_DIRS": local, **(env or {})})
    assert done.returncode == 0, done.stderr[-3000:]
    assert "groups 7" in done.stdout
    return done.stdout


@pytest.mark.timeout(300)
def test_a_session_builds_its_class_archive_once_and_then_loads_sparks_classes_from_it(tmp_path):
    archive = str(tmp_path / "spark.jsa")
    _job(archive)
    assert stat.S_IMODE(os.stat(archive).st_mode) == 0o600
    assert stat.S_IMODE(os.stat(f"{archive}.key").st_mode) == 0o600  # (it was the umask's: 0644 here)
    assert archive_is_current(archive, LEAN_JVM)
    assert not [p for p in os.listdir(tmp_path) if "partial" in p], "a partial archive was left behind"
    built = os.stat(archive).st_mtime_ns

    log = tmp_path / "classes.log"
    _job(archive, {"JAVA_TOOL_OPTIONS": f"-Xlog:class+load=info:file={log}"})
    assert os.stat(archive).st_mtime_ns == built, "a current archive was built again"
    loaded = log.read_text()
    assert "org.apache.spark.SparkContext source: shared objects file (top)" in loaded, \
        "SparkContext was not loaded from the class archive"


def test_an_archive_without_its_key_or_built_for_other_options_is_not_current(tmp_path):
    archive = tmp_path / "spark.jsa"
    archive.write_bytes(b"not an archive")
    assert not archive_is_current(str(archive), LEAN_JVM)  # no key: never trusted
    from spark_bridge.class_archive import archive_key

    (tmp_path / "spark.jsa.key").write_text(json.dumps({"key": archive_key(LEAN_JVM)}))
    assert archive_is_current(str(archive), LEAN_JVM)
    assert not archive_is_current(str(archive), "-XX:+UseSerialGC")
    (tmp_path / "spark.jsa.key").write_text("{broken")
    assert not archive_is_current(str(archive), LEAN_JVM)
    archive.unlink()
    (tmp_path / "spark.jsa.key").write_text(json.dumps({"key": archive_key(LEAN_JVM)}))
    assert not archive_is_current(str(archive), LEAN_JVM)


@pytest.mark.timeout(120)
def test_a_failed_build_says_why_and_leaves_no_archive(tmp_path):
    archive = str(tmp_path / "spark.jsa")
    # (Spark's launcher adds -XX:+IgnoreUnrecognizedVMOptions: an unknown option would not fail; a heap of 2 MB does)
    with pytest.raises(ClassArchiveError, match="JAVA_GATEWAY_EXITED") as failed:
        build_class_archive(archive, "-Xmx2m", timeout=100)
    assert "class_archive=None" in str(failed.value)
    assert os.listdir(tmp_path) == []


@pytest.mark.timeout(120)
def test_the_directory_a_build_makes_is_private_whatever_the_umask(tmp_path):
    # It was made with the umask's mode: 0777 under umask 000, so any user could replace the archive, which the
    # next driver JVM maps and trusts.
    archive = str(tmp_path / "new" / "spark.jsa")
    old = os.umask(0)
    try:
        with pytest.raises(ClassArchiveError, match="JAVA_GATEWAY_EXITED"):
            build_class_archive(archive, "-Xmx2m", timeout=100)  # (fails fast: the directory is made first)
    finally:
        os.umask(old)
    assert stat.S_IMODE(os.stat(tmp_path / "new").st_mode) == 0o700


def test_an_archive_in_a_directory_others_may_write_is_refused_before_any_jvm_starts(tmp_path):
    # /tmp, say: another user could put an archive there with a key that reads current (the driver JVM maps it), or
    # a link at the predictable name the build's JVM writes to. It was used.
    from spark_bridge.class_archive import ensure_class_archive

    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o1777)
    with pytest.raises(ClassArchiveError, match=f"its directory {shared} may be written by other users"):
        ensure_class_archive(str(shared / "spark.jsa"), LEAN_JVM)
    assert os.listdir(shared) == []


def test_a_path_with_spaces_is_refused_before_any_jvm_starts(tmp_path):
    with pytest.raises(ClassArchiveError, match="whitespace"):
        jvm_path(str(tmp_path / "my archives" / "spark.jsa"))


@pytest.mark.timeout(60)
def test_a_build_over_its_timeout_is_killed_with_its_jvm_and_leaves_nothing(tmp_path, monkeypatch):
    archive = str(tmp_path / "spark.jsa")
    # This process's temporary files and the child's go to `temp`: nothing may be left there either (PySpark's
    # driver makes a directory there while its JVM starts and removes it only if it is not killed meanwhile).
    temp = tmp_path / "temp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    with pytest.raises(ClassArchiveError, match="took over 4 s"):
        build_class_archive(archive, LEAN_JVM, timeout=4)
    assert os.listdir(tmp_path) == ["temp"]
    assert os.listdir(temp) == [], "the killed build left temporary files"
    # The child's JVM named the partial archive on its command line: none may still run.
    alive = subprocess.run(["pgrep", "-f", f"ArchiveClassesAtExit={archive}"], capture_output=True, text=True)
    assert alive.stdout.strip() == "", f"the build's JVM outlived its timeout: pids {alive.stdout.split()}"


@pytest.mark.timeout(30)
def test_a_killed_group_is_waited_for_until_no_member_lives_and_its_unreaped_zombies_do_not_count():
    from spark_bridge.class_archive import _kill_group, _live_members

    # A leader and a grandchild in a group of their own, as the build's python and its JVM are.
    leader = subprocess.Popen(["sh", "-c", "sleep 300 & exec sleep 300"], start_new_session=True)
    try:
        wait_for(lambda: len(_live_members(leader.pid)) == 2, timeout=10)
        _kill_group(leader.pid)
        # Not reaped yet: the leader is a zombie of this process, which must not keep the wait (or the test) going.
        assert _live_members(leader.pid) == []
        with open(f"/proc/{leader.pid}/stat") as f:
            assert f.read().rsplit(")", 1)[1].split()[0] == "Z"
    finally:
        leader.kill()
        leader.wait()


def test_the_key_changes_with_the_jvm_library_even_when_the_launcher_stays(tmp_path, monkeypatch):
    from spark_bridge.class_archive import archive_key

    home = tmp_path / "jdk"
    (home / "bin").mkdir(parents=True)
    (home / "lib" / "server").mkdir(parents=True)
    (home / "bin" / "java").write_text("launcher")
    libjvm = home / "lib" / "server" / "libjvm.so"
    libjvm.write_text("jvm build 1")
    os.utime(libjvm, (1_700_000_000, 1_700_000_000))
    monkeypatch.setenv("JAVA_HOME", str(home))
    before = archive_key(LEAN_JVM)
    assert archive_key(LEAN_JVM) == before
    libjvm.write_text("jvm build 22")  # an update: another size and mtime, the same launcher
    assert archive_key(LEAN_JVM) != before
    assert archive_key("-XX:+UseSerialGC") != archive_key(LEAN_JVM)


def test_a_current_archive_is_prepared_without_a_build_and_the_cli_explains_its_usage(tmp_path, monkeypatch):
    from spark_bridge.class_archive import archive_key
    from spark_bridge.session import prepare_class_archive

    (tmp_path / "spark.jsa").write_bytes(b"built earlier")
    (tmp_path / "spark.jsa.key").write_text(json.dumps({"key": archive_key(LEAN_JVM)}))
    monkeypatch.chdir(tmp_path)
    announced: list[str] = []
    assert prepare_class_archive("spark.jsa", announce=announced.append) == str(tmp_path / "spark.jsa")
    assert announced == [] and (tmp_path / "spark.jsa").read_bytes() == b"built earlier"

    usage = subprocess.run([sys.executable, "-m", "spark_bridge.class_archive"], cwd=ROOT, capture_output=True,
                           text=True, timeout=60)
    assert usage.returncode == 2 and "usage: python -m spark_bridge.class_archive PATH" in usage.stderr

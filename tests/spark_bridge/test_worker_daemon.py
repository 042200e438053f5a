"""local_session's Python workers fork from spark_bridge.worker_daemon: pyspark from its installed package (cached
bytecode), not from the zips Spark puts first on their path; zips of another pyspark stay."""

from __future__ import annotations

import os
import sys

import pytest

from spark_bridge.worker_daemon import redundant_zips

pytest.importorskip("pyspark.sql")


def _where(batches):  # runs in a Spark Python worker
    import pyarrow as pa
    import pyspark

    for _ in batches:
        pass
    main = sys.modules["__main__"]
    daemon = getattr(getattr(main, "__spec__", None), "name", None) or ""
    zips = ";".join(p for p in sys.path if p.endswith(".zip") and "pyspark" in p)
    yield pa.RecordBatch.from_arrays([pa.array([pyspark.__file__]), pa.array([daemon]), pa.array([zips])],
                                     names=["pyspark", "daemon", "zips"])


def test_workers_of_a_local_session_import_the_installed_pyspark_not_sparks_zip(spark):
    import pyspark

    found = spark.range(0, 10, numPartitions=2).mapInArrow(_where, "pyspark string, daemon string, zips string")
    for row in found.collect():
        assert row.daemon == "spark_bridge.worker_daemon"
        assert ".zip" not in row.pyspark and row.pyspark == pyspark.__file__
        assert row.zips == ""


def _package(root, name: str, version: str | None = None) -> None:
    os.makedirs(root / name, exist_ok=True)
    (root / name / "__init__.py").write_text("")
    if version:
        (root / name / "version.py").write_text(f'__version__ = "{version}"\n')


def test_only_the_zips_of_the_installed_pyspark_and_py4j_are_redundant(tmp_path):
    site = tmp_path / "site"
    _package(site, "pyspark")
    _package(site, "py4j", "0.10.9.9")
    lib = site / "pyspark" / "python" / "lib"
    lib.mkdir(parents=True)
    ours, py4j, other = str(lib / "pyspark.zip"), str(lib / "py4j-0.10.9.9-src.zip"), str(tmp_path / "pyspark.zip")
    assert redundant_zips([ours, py4j, other, str(site)]) == [ours, py4j]
    # A py4j of another version than the zip's: its zip stays.
    assert redundant_zips([ours, str(lib / "py4j-0.10.9.7-src.zip"), str(site)]) == [ours]
    # No installed pyspark outside the zips: nothing is redundant.
    assert redundant_zips([ours, py4j, str(tmp_path / "empty")]) == []


def test_workers_start_the_daemon_only_when_they_run_this_python_and_find_reprise(monkeypatch, tmp_path):
    from spark_bridge.session import workers_import_reprise

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    monkeypatch.setenv("PYSPARK_PYTHON", sys.executable)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(tmp_path), root]))
    assert workers_import_reprise()
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))
    assert not workers_import_reprise()  # (this checkout is not installed in the interpreter: only found by path)
    monkeypatch.setenv("PYTHONPATH", root)
    monkeypatch.setenv("PYSPARK_PYTHON", str(tmp_path / "another-python"))
    assert not workers_import_reprise()


def test_the_daemon_starts_no_thread_before_it_forks_its_workers():
    import subprocess

    from tests.spark_bridge.conftest import ROOT

    # As Spark starts it (python -m, so the spark_bridge package is imported first), minus the fork loop.
    probe = ("import os, sys\n"
             "import spark_bridge.worker_daemon as daemon\n"
             "daemon.prepare('pyspark.worker')\n"
             "import pyspark.daemon\n"
             "print(len(os.listdir('/proc/self/task')), sorted(m for m in ('numpy', 'pyarrow', 'pandas') if m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=60,
                          env={**os.environ, "PYTHONPATH": ROOT})
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.split(None, 1) == ["1", "[]\n"], f"threads and thread-starting modules before the fork: {done.stdout}"

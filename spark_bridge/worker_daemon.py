"""pyspark's worker daemon (`spark.python.daemon.module`, set by the session helpers), started with pyspark and py4j
imported from their installed packages instead of the zips Spark puts first on the workers' path.

Spark prepends `pyspark.zip` and `py4j-*-src.zip` to every Python worker's PYTHONPATH. Modules in those zips are
compiled from source in every daemon and every forked worker (a zip holds no cached bytecode), and each worker's
first task calls `importlib.invalidate_caches()`, which re-reads both zips' directories in Python. On a cold
local feed that was a fifth of the workers' samples (bench/PROFILE.md §29). When the interpreter has the same
pyspark installed (the zip is inside that package: a pip install) the zips are dropped from the path, and
`pyspark.worker` is imported once here, before the daemon forks its workers, as Spark 2's daemon did.
"""

from __future__ import annotations

import importlib.machinery
import os
import sys


def _installed(package: str, paths: list[str]) -> str | None:
    """The directory of `package` found on `paths` (not in a zip), or None."""
    spec = importlib.machinery.PathFinder.find_spec(package, paths)
    locations = list(spec.submodule_search_locations or []) if spec else []
    return locations[0] if locations else None


def redundant_zips(path: list[str]) -> list[str]:
    """The entries of `path` that are Spark's zips of a pyspark (and py4j) this interpreter has installed."""
    plain = [p for p in path if not p.endswith(".zip")]
    pyspark_dir = _installed("pyspark", plain)
    if pyspark_dir is None:
        return []
    spark_lib = os.path.realpath(os.path.join(pyspark_dir, "python", "lib"))
    # py4j's zip only goes when py4j of the same version is installed too (a pyspark dependency).
    py4j_zip = f"py4j-{_py4j_version(plain)}-src.zip"
    return [entry for entry in path if os.path.basename(entry) in ("pyspark.zip", py4j_zip)
            and os.path.realpath(os.path.dirname(entry)) == spark_lib]


def _py4j_version(paths: list[str]) -> str | None:
    found = _installed("py4j", paths)
    if found is None:
        return None
    try:
        with open(os.path.join(found, "version.py"), encoding="utf-8") as f:
            text = f.read()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("__version__"):
            return line.split("=", 1)[1].strip().strip("'\"")
    return None


def prepare(worker_module: str) -> None:
    """Drop the redundant zips and import the worker module before the daemon forks. pyspark's own daemon imports
    it in each forked worker instead, because a thread started by an import (pandas', pyarrow's, a BLAS's) would
    not survive the fork: neither this package nor pyspark.worker may start one (tests/spark_bridge/test_worker_daemon.py)."""
    for entry in redundant_zips(sys.path):
        sys.path.remove(entry)
    importlib.import_module(worker_module)


def main() -> None:
    """Prepare, then run pyspark's daemon."""
    prepare(sys.argv[1] if len(sys.argv) > 1 else "pyspark.worker")
    from pyspark.daemon import manager

    manager()


if __name__ == "__main__":
    main()

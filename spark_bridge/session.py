"""SparkSessions set up for feeding actors: a local one for one machine, and one on a standalone cluster."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

from actors import RepriseError

# The driver JVM's own start-up dominates a local job on a small machine: its JIT compilers alone took
# ~10 s of CPU on 2 cores. C1 only (no C2) and the serial collector halved the JVM's CPU and the wall
# time of a 1M-row local job (measured: 30 s -> 15 s of JVM CPU); the work here is in Python anyway.
LEAN_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


# Python workers forked from it import pyspark from its installed package, not Spark's zips (spark_bridge.worker_daemon).
WORKER_DAEMON = "spark_bridge.worker_daemon"


def workers_import_reprise() -> bool:
    """True when local Python workers run this interpreter and find this spark_bridge: on their PYTHONPATH (as
    `import_paths` put it there) or installed in the interpreter. Only then may they start WORKER_DAEMON."""
    import site

    python = os.environ.get("PYSPARK_PYTHON", sys.executable)
    if os.path.realpath(python) != os.path.realpath(sys.executable):
        return False
    root = os.path.realpath(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    paths = os.environ.get("PYTHONPATH", "").split(os.pathsep) + site.getsitepackages()
    return any(p and os.path.realpath(p) == root for p in paths)


class SessionError(RepriseError, ValueError):
    """A session helper was asked for something it cannot give: the message says what to change."""


def _builder(master: str, app_name: str, shuffle_partitions: int, import_paths: tuple[str, ...],
             driver_host: str) -> Any:
    """A builder whose Python workers run this interpreter with `import_paths` on PYTHONPATH."""
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in [*import_paths, os.environ.get("PYTHONPATH", "")] if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    return (SparkSession.builder.master(master).appName(app_name)
            .config("spark.driver.bindAddress", driver_host).config("spark.driver.host", driver_host)
            .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(shuffle_partitions))
            .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"]))


def _finish(builder: Any, conf: dict[str, str]) -> Any:
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def _driver_options(lean_jvm: bool) -> str:
    return LEAN_JVM if lean_jvm else ""


def prepare_class_archive(path: str, lean_jvm: bool = True, announce: Callable[[str], None] | None = None) -> str:
    """The class archive `local_session(class_archive=path, lean_jvm=...)` maps, built now when missing or stale
    (`announce(path)` first): for callers that build it before they start timing a job."""
    from spark_bridge.class_archive import ensure_class_archive

    return ensure_class_archive(path, _driver_options(lean_jvm), announce)


def local_session(app_name: str, master: str = "local[2]", shuffle_partitions: int = 4, lean_jvm: bool = True,
                  import_paths: tuple[str, ...] = (), class_archive: str | None = None, **conf: str) -> Any:
    """A SparkSession bound to loopback whose Python workers run this interpreter and import `import_paths`.

    Workers unpickle destination functions and message classes by module name, so the project must be on
    their path: `import_paths` are prepended to PYTHONPATH (driver and executors). `conf` adds Spark
    settings (dots as in Spark: pass them with `**{"spark.x": "v"}`). Reuses a running session.
    When the workers can import Reprise, they fork from WORKER_DAEMON: pyspark from its installed package with
    cached bytecode, not recompiled from Spark's zips in every worker (a third less of their CPU on a cold feed).
    `class_archive` names a file for a JVM class-data archive of Spark's classes (spark_bridge.class_archive):
    built there first (once, ~25 s, in a child process) when missing or built for another java or pyspark,
    then mapped by the driver JVM, which starts ~4 s sooner and runs its first job ~1 s faster.
    """
    from pyspark import SparkContext

    builder = _builder(master, app_name, shuffle_partitions, import_paths, "127.0.0.1")
    if workers_import_reprise():
        builder = builder.config("spark.python.daemon.module", WORKER_DAEMON)
    options = _driver_options(lean_jvm)
    if class_archive is not None and SparkContext._active_spark_context is None:
        archive = prepare_class_archive(class_archive, lean_jvm)
        options = f"{options} -XX:SharedArchiveFile={archive}".strip()
    if options:
        builder = builder.config("spark.driver.extraJavaOptions", options)
    return _finish(builder, conf)


def cluster_session(master_url: str, app_name: str, executor_memory: str = "512m", executor_cores: int = 1,
                    shuffle_partitions: int = 4, lean_jvm: bool = True, import_paths: tuple[str, ...] = (),
                    driver_host: str = "127.0.0.1", **conf: str) -> Any:
    """A SparkSession on the standalone cluster at `master_url` (spark://host:port), its driver on `driver_host`.

    As `local_session`, but executors run in the workers' JVMs: they get this interpreter
    (spark.pyspark.python; it must exist at the same path on every worker host) and `import_paths` on
    PYTHONPATH, `executor_memory` and `executor_cores` each, and the lean JVM options too. The driver binds
    to loopback unless `driver_host` names an address the workers can reach. Refuses to hand back a
    running session of another master: one SparkContext per process.
    """
    from pyspark import SparkContext

    if not master_url.startswith("spark://"):
        raise SessionError(f"cluster_session: master_url must be a standalone master's spark://host:port, got "
                           f"{master_url!r} (for local mode use local_session)")
    running = SparkContext._active_spark_context
    if running is not None and running.master != master_url:
        raise SessionError(f"cluster_session: this process already runs a SparkContext on {running.master!r}; "
                           f"stop it first (one SparkContext per process) or run the cluster's driver in "
                           f"another process")
    builder = (_builder(master_url, app_name, shuffle_partitions, import_paths, driver_host)
               .config("spark.pyspark.python", sys.executable)
               .config("spark.executor.memory", executor_memory).config("spark.executor.cores", str(executor_cores)))
    if lean_jvm:
        builder = (builder.config("spark.driver.extraJavaOptions", LEAN_JVM)
                   .config("spark.executor.extraJavaOptions", LEAN_JVM))
    return _finish(builder, conf)

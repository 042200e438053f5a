"""A local SparkSession set up for feeding actors from one machine (examples, tests, benchmarks)."""

from __future__ import annotations

import os
import sys
from typing import Any

# The driver JVM's own start-up dominates a local job on a small machine: its JIT compilers alone took
# ~10 s of CPU on 2 cores. C1 only (no C2) and the serial collector halved the JVM's CPU and the wall
# time of a 1M-row local job (measured: 30 s -> 15 s of JVM CPU); the work here is in Python anyway.
LEAN_JVM = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def local_session(app_name: str, master: str = "local[2]", shuffle_partitions: int = 4, lean_jvm: bool = True,
                  import_paths: tuple[str, ...] = (), **conf: str) -> Any:
    """A SparkSession bound to loopback whose Python workers run this interpreter and import `import_paths`.

    Workers unpickle destination functions and message classes by module name, so the project must be on
    their path: `import_paths` are prepended to PYTHONPATH (driver and executors). `conf` adds Spark
    settings (dots as in Spark: pass them with `**{"spark.x": "v"}`). Reuses a running session.
    """
    from pyspark.sql import SparkSession

    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    paths = [p for p in [*import_paths, os.environ.get("PYTHONPATH", "")] if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys(paths))
    builder = (SparkSession.builder.master(master).appName(app_name)
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", str(shuffle_partitions))
               .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"]))
    if lean_jvm:
        builder = builder.config("spark.driver.extraJavaOptions", LEAN_JVM)
    for key, value in conf.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session

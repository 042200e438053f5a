"""One local SparkSession for the whole spark_bridge test session, and systems with a running bridge."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="session")
def spark():
    """A local[2,3] SparkSession (2 threads, 3 attempts per task) bound to loopback, stopped at session end."""
    pyspark_sql = pytest.importorskip("pyspark.sql")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    # Python workers must import test modules (destination actors, message callables) by path.
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in [ROOT, os.environ.get("PYTHONPATH", "")] if p)
    session = (pyspark_sql.SparkSession.builder.master("local[2,3]").appName("reprise-spark-bridge-tests")
               .config("spark.driver.bindAddress", "127.0.0.1").config("spark.driver.host", "127.0.0.1")
               .config("spark.ui.enabled", "false").config("spark.sql.shuffle.partitions", "4")
               .config("spark.executorEnv.PYTHONPATH", os.environ["PYTHONPATH"])
               .getOrCreate())
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()


@pytest.fixture
def make_bridged(make_system, tmp_path):
    """Factory: a multiproc system with SQLite journals, account entities, optionally a ledger, and a bridge."""
    from spark_bridge import BRIDGE_PATH, start_bridge
    from tests.spark_bridge.sample import Account, Ledger

    def make(account=Account, ledger: bool = False, bridge=None):
        system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/journal.db",
                             snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
        kwargs = {}
        if ledger:
            system.spawn(Ledger, path="/user/ledger")
            kwargs["ledger"] = "/user/ledger"
        system.spawn(account, path="/user/accounts", entities=True, kwargs=kwargs)
        if bridge is None:
            start_bridge(system)
        else:
            system.spawn(bridge, path=BRIDGE_PATH)
        return system
    return make


@pytest.fixture
def bridged(make_bridged):
    """A multiproc system with in-memory account entities (confirming each row) and the bridge running."""
    return make_bridged()

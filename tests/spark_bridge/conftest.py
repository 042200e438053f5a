"""One local SparkSession for the whole spark_bridge test session, and systems with a running bridge."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.spark_bridge.journals import fresh_schema

ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture(scope="session")
def spark(tmp_path_factory):
    """A local[2,3] SparkSession (2 threads, 3 attempts per task) bound to loopback, stopped at session end."""
    pytest.importorskip("pyspark.sql")
    from spark_bridge import local_session

    # Python workers must import test modules (destination actors, message callables) by path. Spark's scratch
    # files go with the session's other temporary files, not to /tmp.
    session = local_session("reprise-spark-bridge-tests", "local[2,3]", import_paths=(ROOT,),
                            **{"spark.local.dir": str(tmp_path_factory.mktemp("spark-local"))})
    yield session
    session.stop()


@pytest.fixture(params=["sqlite", "postgresql"])
def journal_url(request, tmp_path) -> Iterator[str]:
    """A fresh, empty journal: a SQLite file, or a PostgreSQL schema dropped afterwards."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/journal.db"
        return
    yield from fresh_schema(request.getfixturevalue("postgres_url"))


@pytest.fixture
def make_bridged(make_system, tmp_path):
    """Factory: a multiproc system with SQLite journals (or `journal`, also its snapshot store), account entities,
    optionally a ledger, and a bridge."""
    from spark_bridge import BRIDGE_PATH, start_bridge
    from tests.spark_bridge.sample import Account, Ledger

    def make(account=Account, ledger: bool = False, bridge=None, journal: str | None = None):
        system = make_system("multiproc", journal=journal or f"sqlite:///{tmp_path}/journal.db",
                             snapshot_store=journal or f"sqlite:///{tmp_path}/snapshots.db")
        kwargs = {}
        if ledger:
            system.spawn(Ledger, path="/user/ledger")
            kwargs["ledger"] = "/user/ledger"
        system.spawn(account, path="/user/accounts", entities=True, kwargs=kwargs)
        if bridge is None:
            start_bridge(system)
        else:
            system.system_actor_of(bridge, path=BRIDGE_PATH)
        return system
    return make


@pytest.fixture
def bridged(make_bridged):
    """A multiproc system with in-memory account entities (confirming each row) and the bridge running."""
    return make_bridged()

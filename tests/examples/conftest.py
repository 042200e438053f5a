"""A session-wide local SparkSession for the example tests (the pattern of tests/spark_bridge/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """examples.streaming's local session (loopback, workers can import the project), stopped at the end."""
    pytest.importorskip("pyspark.sql")
    from examples.streaming import spark_session

    # getOrCreate hands one session to every conftest of the run: configure it as tests/spark_bridge
    # does (3 attempts per task: its task-retry test needs them), whichever conftest comes first.
    session = spark_session("local[2,3]")
    yield session
    session.stop()

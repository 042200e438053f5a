"""A session-wide local SparkSession for the example tests (the pattern of tests/spark_bridge/conftest.py)."""

from __future__ import annotations

import pytest


@pytest.fixture(scope="session")
def spark():
    """examples.streaming's local[2] session (loopback, workers can import the project), stopped at the end."""
    pytest.importorskip("pyspark.sql")
    from examples.streaming import spark_session

    session = spark_session()
    yield session
    session.stop()

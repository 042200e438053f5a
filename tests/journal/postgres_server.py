"""The PostgreSQL server the tests use: skip loudly when absent, fail when REPRISE_REQUIRE_POSTGRES=1."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator

import psycopg
import pytest

from journal.postgres import drop_schema

SERVER = os.environ.get("REPRISE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")


def _server_problem() -> str | None:
    try:
        with psycopg.connect(SERVER, connect_timeout=3) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as e:
        return f"PostgreSQL at {SERVER} is not available: {e}".strip()
    return None


@pytest.fixture
def postgres_url() -> Iterator[str]:
    """A journal URL on a fresh schema (dropped afterwards): tests and runs never see each other's rows."""
    problem = _server_problem()
    if problem is not None:
        if os.environ.get("REPRISE_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"REPRISE_REQUIRE_POSTGRES=1 but {problem}")
        pytest.skip(f"SKIPPING POSTGRESQL TESTS: {problem} (set REPRISE_REQUIRE_POSTGRES=1 to make this fail)")
    url = f"{SERVER}?schema=reprise_test_{uuid.uuid4().hex[:12]}"
    yield url
    drop_schema(url)

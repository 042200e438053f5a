"""Fresh journals for the spark_bridge tests: PostgreSQL schemas made and dropped per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator


def fresh_schema(base: str) -> Iterator[str]:
    """The URL of a new PostgreSQL schema on `base`, dropped afterwards."""
    from journal.postgres import drop_schema

    url = f"{base}{'&' if '?' in base else '?'}schema=src_{uuid.uuid4().hex[:12]}"
    yield url
    drop_schema(url)

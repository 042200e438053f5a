"""Persistence fixtures: a system on each base with a fresh SQLite journal and snapshot store."""

from __future__ import annotations

import pytest


@pytest.fixture
def psystem(base, make_system, tmp_path):
    """A system on `base` whose journal and snapshot store are SQLite files in tmp_path."""
    return make_system(base, journal=f"sqlite:///{tmp_path}/journal.db",
                       snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")

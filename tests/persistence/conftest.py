"""Persistence fixtures: a system on each base with a fresh SQLite journal and snapshot store."""

from __future__ import annotations

import uuid

import pytest

from tests.conftest import BASES, start_system, stop_system


@pytest.fixture
def psystem(base, make_system, tmp_path):
    """A system on `base` whose journal and snapshot store are SQLite files in tmp_path."""
    return make_system(base, journal=f"sqlite:///{tmp_path}/journal.db",
                       snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")


@pytest.fixture(scope="module", params=BASES)
def shared_psystem(request, tmp_path_factory):
    """One system per base for a whole module, SQLite journal and snapshot store; cases use distinct ids."""
    tmp = tmp_path_factory.mktemp("shared")
    system = start_system(request.param, tmp, journal=f"sqlite:///{tmp}/journal.db",
                          snapshot_store=f"sqlite:///{tmp}/snapshots.db")
    try:
        yield system
    finally:
        stop_system(system)


@pytest.fixture(scope="module")
def ps(shared_psystem):
    """The module's shared system with the Spec entity host at /user/spec (tests/persistence/spec_actors.py)."""
    from tests.persistence.spec_actors import Spec

    shared_psystem.spawn(Spec, path="/user/spec", entities=True, kwargs={"client": shared_psystem.prefix})
    return shared_psystem


@pytest.fixture(scope="module")
def fs(shared_psystem):
    """The module's shared system with the Endpoint destinations at /user/ep/<kind>-<n> (beyond_actors.py)."""
    from tests.persistence.beyond_actors import Endpoint

    shared_psystem.spawn(Endpoint, path="/user/ep", entities=True, kwargs={"client": shared_psystem.prefix})
    return shared_psystem


@pytest.fixture(params=["sqlite", "postgresql"])
def projection_stores(request, tmp_path) -> tuple[str, str]:
    """(journal URL, offset store URL) on one kind of database, for the projection tests. Name it before
    `make_system` in a test's arguments: its PostgreSQL schemas are dropped after the systems stopped (dropped while a
    projection ran, the store was made again, and left)."""
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/journal.db", f"sqlite:///{tmp_path}/read-model.db"
    from journal.postgres import drop_schema

    server = request.getfixturevalue("postgres_url")
    journal, store = (f"{server}?schema=proj_{kind}_{uuid.uuid4().hex[:8]}" for kind in ("j", "r"))
    request.addfinalizer(lambda: (drop_schema(journal), drop_schema(store)))
    return journal, store

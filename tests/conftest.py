"""Shared fixtures: real actor systems on both bases, with leak checks that fail the run."""

from __future__ import annotations

import itertools
import os
import uuid

import pytest

import actors
from actors.system import kill_tagged, tagged_pids

# Every multiproc system started by this test session carries this token in its command line.
SESSION_TOKEN = f"reprise-test-{uuid.uuid4().hex[:10]}"
_counter = itertools.count(1)
_leaks: list[str] = []

BASES = ["local", "multiproc"]


def start_system(base: str, tmp_path, **kwargs) -> actors.System:
    """Start a system for a test: own free admin port, own run dir, a unique tag."""
    if base == "local":
        return actors.start("local", **kwargs)
    n = next(_counter)
    run_dir = tmp_path / f"run-{n}"
    return actors.start("multiproc", tag=f"{SESSION_TOKEN}-{n}-", run_dir=str(run_dir), **kwargs)


def stop_system(system: actors.System) -> None:
    """Shut a system down and record (and kill) any process it left behind."""
    try:
        system.shutdown()
    finally:
        if system.tag:
            left = tagged_pids(system.tag)
            if left:
                _leaks.append(f"{system.tag}: {left}")
                kill_tagged(system.tag)


@pytest.fixture
def make_system(tmp_path):
    """Factory: make_system(base, **start_kwargs) -> System, shut down after the test."""
    started: list[actors.System] = []

    def make(base: str, **kwargs) -> actors.System:
        system = start_system(base, tmp_path, **kwargs)
        started.append(system)
        return system

    yield make
    for system in reversed(started):
        stop_system(system)


@pytest.fixture(params=BASES)
def base(request) -> str:
    """Each test using it runs on the in-process base and on the multi-process TCP base."""
    return request.param


@pytest.fixture
def system(base, make_system) -> actors.System:
    """A fresh actor system on `base`."""
    return make_system(base)


@pytest.fixture(scope="session")
def postgres_url() -> str:
    """The test PostgreSQL server's URL; skips loudly (or fails under REPRISE_REQUIRE_POSTGRES=1)."""
    import socket

    url = os.environ.get("REPRISE_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
    try:
        socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
    except OSError as exc:
        reason = f"PostgreSQL is not reachable on 127.0.0.1:5432 ({exc}); PostgreSQL tests NOT RUN"
        if os.environ.get("REPRISE_REQUIRE_POSTGRES") == "1":
            pytest.fail(reason + " but REPRISE_REQUIRE_POSTGRES=1", pytrace=False)
        pytest.skip(reason)
    return url


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if any actor-system process of this session survived."""
    survivors = tagged_pids(SESSION_TOKEN)
    if survivors:
        kill_tagged(SESSION_TOKEN)
        _leaks.append(f"at session end: {survivors}")
    if _leaks:
        print("\nLEAKED actor-system processes (killed now):\n  " + "\n  ".join(_leaks))
        session.exitstatus = 1

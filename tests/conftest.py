"""Shared fixtures: real actor systems on both bases, with leak checks that fail the run."""

from __future__ import annotations

import itertools
import os
import shutil
import tempfile
import uuid

import pytest

import actors
from actors.system import default_port_range, kill_tagged, tagged_pids

# Every multiproc system started by this test run carries RUN_TOKEN in its tag, and by this process (one
# pytest-xdist worker, or the whole serial run) SESSION_TOKEN. Workers inherit RUN_TOKEN from the controller's
# environment (it imports this file first), and write their leaks to LEAKS_DIR for the controller to report:
# a worker's own exit status does not reach the run's.
RUN_TOKEN = os.environ.setdefault("REPRISE_TEST_RUN", f"reprise-test-{uuid.uuid4().hex[:10]}")
SESSION_TOKEN = f"{RUN_TOKEN}-{os.environ.get('PYTEST_XDIST_WORKER', 'main')}"
LEAKS_DIR = os.path.join(tempfile.gettempdir(), f"{RUN_TOKEN}-leaks")
_counter = itertools.count(1)
_leaks: list[str] = []

BASES = ["local", "multiproc"]


def start_system(base: str, tmp_path, **kwargs) -> actors.System:
    """Start a system for a test: own free admin port, own run dir, a unique tag."""
    if base == "local":
        return actors.start("local", **kwargs)
    n = next(_counter)
    run_dir = tmp_path / f"run-{n}"
    kwargs.setdefault("tag", f"{SESSION_TOKEN}-{n}-")  # (a test's own tag should start with SESSION_TOKEN too)
    return actors.start("multiproc", run_dir=str(run_dir), **kwargs)


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


def pg_schema_url(request, prefix: str) -> str:
    """A journal URL on a fresh schema of the test PostgreSQL server (skips loudly without one), dropped after the
    test: after its systems' shutdown, as finalizers run in reverse order of the fixtures."""
    from journal.postgres import drop_schema

    url = f"{request.getfixturevalue('postgres_url')}?schema={prefix}_{uuid.uuid4().hex[:10]}"
    request.addfinalizer(lambda: drop_schema(url))
    return url


def _port_range_of_this_worker() -> None:
    """Give each pytest-xdist worker a slice of the ports Reprise picks (REPRISE_PORT_RANGE, inherited by the
    processes it starts): a test chose two ports, started one system, and another worker's system took the
    second port meanwhile (`admin port ... is already in use`, with three workers)."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if not worker.startswith("gw") or "REPRISE_PORT_RANGE" in os.environ:
        return
    count = max(int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), 1)
    index = int(worker[2:]) % count  # (a worker xdist replaced gets the next number)
    ports = default_port_range()
    span = len(ports) // count
    os.environ["REPRISE_PORT_RANGE"] = f"{ports.start + index * span}-{ports.start + (index + 1) * span - 1}"


_port_range_of_this_worker()


# The files that take longest (seconds of one worker in a CI run on a slow VM, three workers on two cores), longest
# first. `make test` passes --no-loadscope-reorder, so pytest-xdist hands files out in collection order: by default
# it takes the files with most tests first, and these (few, long tests) came last, one worker busy with them while
# the others idled (869 -> 831 s with three workers; bench/PROFILE.md §35). A file missing here only runs later;
# the order changes no outcome.
LONGEST_FILES = (
    "tests/spark_bridge/test_feed.py",  # 250 s
    "tests/spark_bridge/test_source.py",  # 242
    "tests/spark_bridge/test_sink.py",  # 186
    "tests/examples/test_demo.py",  # 184 (builds the demo's class archive in a new .venv)
    "tests/spark_bridge/test_class_archive.py",  # 157
    "tests/spark_bridge/test_cluster.py",  # 116
    "tests/spark_bridge/test_bridges.py",  # 87
    "tests/examples/test_cluster_netns.py",  # 85
    "tests/torture/test_torture.py",  # 78
    "tests/examples/test_multi_host.py",  # 62
)


def pytest_collection_modifyitems(config, items):
    """Put the files of LONGEST_FILES first, in that order (the rest keep theirs)."""
    rank = {name: k for k, name in enumerate(LONGEST_FILES)}
    items.sort(key=lambda item: rank.get(item.nodeid.partition("::")[0], len(rank)))


def pytest_sessionfinish(session, exitstatus):
    """Fail the run if any actor-system process of this run survived (under xdist: the controller reports)."""
    survivors = tagged_pids(f"{SESSION_TOKEN}-", prefix=True)
    if survivors:
        kill_tagged(f"{SESSION_TOKEN}-", prefix=True)
        _leaks.append(f"at session end: {survivors}")
    if hasattr(session.config, "workerinput"):  # an xdist worker: the controller reads it after every worker ended
        if _leaks:
            os.makedirs(LEAKS_DIR, exist_ok=True)
            with open(os.path.join(LEAKS_DIR, SESSION_TOKEN), "w") as f:
                f.write("\n".join(_leaks))
        return
    survivors = tagged_pids(f"{RUN_TOKEN}-", prefix=True)  # (any worker's, too)
    if survivors:
        kill_tagged(f"{RUN_TOKEN}-", prefix=True)
        _leaks.append(f"at the end of the run: {survivors}")
    if os.path.isdir(LEAKS_DIR):
        for name in sorted(os.listdir(LEAKS_DIR)):
            with open(os.path.join(LEAKS_DIR, name)) as f:
                _leaks.append(f"{name}: {f.read()}")
        shutil.rmtree(LEAKS_DIR, ignore_errors=True)
    if _leaks:
        print("\nLEAKED actor-system processes (killed now):\n  " + "\n  ".join(_leaks))
        session.exitstatus = 1

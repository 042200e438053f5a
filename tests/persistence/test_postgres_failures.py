"""Dropped PostgreSQL connections (pg_terminate_backend) under a top-level PersistentActor and an entity host:
both keep working, nothing acknowledged is lost (issue 12 item 7). Real server, both bases."""

from __future__ import annotations

import threading
import uuid

import psycopg
import pytest

from journal.postgres import drop_schema
from tests.persistence.pg_actors import Add, Counter
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

SINGLE, ENTITY = "/user/single", "/user/counters/1"


@pytest.fixture
def pg(postgres_url):
    """(journal URL with its own schema and application_name, that application_name)."""
    name = f"reprise_super_{uuid.uuid4().hex[:10]}"
    url = f"{postgres_url}?schema={name}&application_name={name}"
    yield url, name
    drop_schema(url)


def _terminate(admin: psycopg.Connection, app: str) -> int:
    """Terminate every backend of `app` (the journal's pooled connections); returns how many."""
    rows = admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                         (app,)).fetchall()
    return len(rows)


def _acks(probe, count: int) -> set[int]:
    got = probe.receive_many(count, 30)
    assert all(kind == "ack" for kind, _ in got), got
    return {n for _, n in got}


def _send(probe, numbers: range) -> None:
    for n in numbers:
        probe.tell(SINGLE, Add(n))
        probe.tell(ENTITY, Add(n))


def test_terminated_backends_neither_stop_actors_nor_lose_acknowledged_events(base, make_system, pg, postgres_url):
    url, app = pg
    system = make_system(base, journal=url, snapshot_store=url)
    system.spawn(Counter, SINGLE, backoff=(0.05, 0.2, 0))
    system.spawn(Counter, "/user/counters", entities=True)
    probe = system.probe()
    acked: set[int] = set()
    with psycopg.connect(postgres_url, autocommit=True) as admin:
        _send(probe, range(0, 10))
        acked |= _acks(probe, 20)

        # 1. Idle pooled connections dropped by the server: the pool checks them before use.
        assert _terminate(admin, app) >= 1
        _send(probe, range(10, 20))
        acked |= _acks(probe, 20)
        assert system.status().hosts[SINGLE].restarts == 0

        # 2. A write in flight when its backend is terminated: the persist fails (outcome unknown), the
        # top-level actor stops and is restarted with backoff, the entity stops and comes back on demand.
        lock = psycopg.connect(postgres_url)
        lock.execute(f"LOCK TABLE {app}.journal IN ACCESS EXCLUSIVE MODE")

        def terminate_the_waiting_writers() -> None:
            wait_for(lambda: admin.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s AND wait_event_type = 'Lock'",
                (app,)).fetchone()[0] >= 1, 30)
            _terminate(admin, app)
            lock.commit()  # releases the lock

        killer = threading.Thread(target=terminate_the_waiting_writers)
        killer.start()
        _send(probe, range(100, 101))
        killer.join(40)
        lock.close()
        assert not killer.is_alive()
        host = wait_for(lambda: (h := system.status().hosts[SINGLE]).restarts >= 1 and h.state == "running" and h, 30)
        assert "persist failed" in host.last_exit
        _send(probe, range(20, 30))
        later = []
        while len([n for n in later if n != 100]) < 20:  # the write of 100 may or may not have been acked
            kind, n = probe.receive(30)
            later.append(n)
        acked |= set(later)
        assert set(range(30)) <= acked
    for path in (SINGLE, ENTITY):
        values = probe.system.ask(path, "values", 30)
        assert set(range(30)) <= set(values), (path, sorted(set(range(30)) - set(values)))
        assert len(values) == len(set(values)), f"{path} applied an event twice"

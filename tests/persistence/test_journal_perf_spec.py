"""Akka's JournalPerfSpec (reference §4.2) on every backend and both bases: 10 000 events persisted with
persist_async, 10 000 with persist, then recovered, each in exactly increasing order.

Akka's spec runs each measure 10 times and prints the average; only completion within its await and the order
are asserted. Here each measure runs once and nothing is timed: a bounded wait for the last event, and the
actor's own order check (PerfBench reports the first event out of order)."""

from __future__ import annotations

import itertools
import uuid

import pytest

from tests.conftest import pg_schema_url
from tests.persistence.conformance_actors import PerfBench

pytestmark = pytest.mark.timeout(180)
EVENTS_COUNT = 10_000
_ids = itertools.count(1)


@pytest.fixture(params=["memory", "sqlite", "postgresql"])
def journal_url(request, tmp_path, base):
    if request.param == "memory":
        if base != "local":
            pytest.skip("memory:// is one process's memory: the local base only")
        return f"memory://perf-{uuid.uuid4().hex}"
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/journal.db"
    return pg_schema_url(request, "perf")


def test_persist_async_persist_and_recover_10000_events_in_order(journal_url, base, make_system):
    system = make_system(base, journal=journal_url)
    system.spawn(PerfBench, path="/user/bench", entities=True, kwargs={"client": system.prefix})
    name = f"bench-{next(_ids)}"
    probe, path = system.probe(name), f"/user/bench/{name}"
    sent = 0
    for kind in ("pa", "p"):  # "measure: persistAsync()-ing 10000 events", then "persist()-ing"
        probe.tell(path, ("expect", EVENTS_COUNT))
        if kind == "pa":
            assert probe.receive(30) == ("recovered", 0, None)
        assert probe.receive(30) == ("expecting", sent + EVENTS_COUNT)
        system.tell_many([(path, (kind, sent + i)) for i in range(1, EVENTS_COUNT + 1)], probe.path)
        sent += EVENTS_COUNT
        assert probe.receive(120) == ("done", sent, None)
    system.stop(path)
    probe.tell(path, ("expect", 0))  # "measure: recovering 10000 events" (here all 20 000)
    assert probe.receive(120) == ("recovered", sent, None)
    assert probe.receive(30) == ("expecting", sent)

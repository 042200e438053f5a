"""What long-running feeds leave behind grows with live state, not with the number of feeds (tasks, micro-batches).

No Spark: the task side (`_Publisher`) runs in this process against a real bridge, and a probe speaks the driver's
protocol, as in test_staged.py. Sizes are counted after N operations (no timings).
"""

from __future__ import annotations

import os

import pytest

from spark_bridge import BRIDGE_PATH, start_bridge
from spark_bridge.feed import _connection, _connections, _Publisher, make_plan

pytestmark = pytest.mark.timeout(120)


def test_a_worker_s_cached_connection_keeps_no_probe_of_a_finished_task(make_system, tmp_path):
    """A Spark Python worker is reused for many tasks, and attaches once (feed._connections); each task made a probe
    on that connection for its bridge's answers and never closed it: the client kept every task's probe path and
    mailbox (late answers to resends queued in it) for the worker's life, one per task of every feed."""
    from tests.spark_bridge.sample import Account

    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/journal.db",
                         snapshot_store=f"sqlite:///{tmp_path}/snapshots.db")
    system.spawn(Account, path="/user/accounts", entities=True)
    start_bridge(system)
    plan = make_plan("127.0.0.1", int(system.admin_port), "f", "to", None, None, 100, 4, 30.0, "persisted")
    worker = _connection("127.0.0.1", int(system.admin_port))  # the worker's cached attachment, as a task's
    try:
        before = len(worker._listening_paths)
        for task in range(40):
            pub = _Publisher(plan, "f", task, f"{plan.run}/{task}")
            assert pub.system is worker
            pub.send(0, ["/user/accounts/a0"], [{"amount": 1, "txid": task}], None, None)
            assert pub.finish() == (task, f"{plan.run}/{task}", 1, 0, 0, BRIDGE_PATH)
        assert len(worker._listening_paths) == before, sorted(worker._listening_paths)
        assert not [p for p in worker._mailbox if "spark-feed-" in p]
    finally:
        _connections.pop((os.getpid(), "127.0.0.1", int(system.admin_port)), None)
        worker.close()

"""PROFILE.md §26: a table host's restart after SIGKILL: when status() loses the old pid, shows the new one, and the
host answers again (three kills in a row: the guardian's backoff doubles from 0.2 s).

    PYTHONPATH=$PWD python bench/profiling/restart_time.py ROWS   # ROWS journaled first (TableAccounts, 5,000 ids)
"""

import os
import random
import signal
import sys
import tempfile
import time

import actors
from bench.entities import HOST, TableAccounts, feed

rows = int(sys.argv[1])
with tempfile.TemporaryDirectory() as d, actors.start("multiproc", journal=f"sqlite:///{d}/j.db",
                                                      snapshot_store=f"sqlite:///{d}/s.db") as system:
    system.spawn(TableAccounts, HOST, entities=True, passivate_after=3600.0)
    probe = system.probe()
    rng = random.Random(1)
    feed(system, probe, [(rng.randrange(5000), i + 1) for i in range(rows)], 2000, 4)
    for _ in range(3):
        pid = system.status().hosts[HOST].pid
        started = time.monotonic()
        os.kill(pid, signal.SIGKILL)
        gone_at = None
        while True:
            host = system.status().hosts.get(HOST)
            now = time.monotonic() - started
            if gone_at is None and (host is None or host.pid != pid):
                gone_at = now
            if host is not None and host.pid and host.pid != pid:
                break
            time.sleep(0.005)
        system.ask(f"{HOST}/1", "cpu", timeout=60)
        print(f"rows {rows}: status without the old pid {gone_at:.3f} s, new pid {now:.3f} s, "
              f"first answer {time.monotonic() - started:.3f} s")

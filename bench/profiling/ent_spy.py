"""Run bench.entities with py-spy attached to the entity host process over the measured rounds only
(SPY_OUT=file; SPY_OUT unset: no py-spy); touching /tmp/prof/gc-trigger makes every process write its GC time (site/sitecustomize.py)."""

import os
import signal
import subprocess
import sys
import time

from bench import entities
from bench.profiling.spy import record

OUT = os.environ.get("SPY_OUT")
_state = {}


def toggle(system, local):
    if "pid" not in _state:
        pid = _state["pid"] = system.status().hosts[entities.HOST].pid
        if OUT:
            _state["p"] = record(pid, OUT, rate=os.environ.get("SPY_RATE", "1000"),
                                 extra=["--native"] if os.environ.get("SPY_NATIVE") else [], stderr=subprocess.PIPE)
            time.sleep(1.0)  # py-spy attaches
        open("/tmp/prof/gc-trigger", "w").write(str(time.time()))
    else:
        open("/tmp/prof/gc-trigger", "w").write(str(time.time()))
        # a little more work so that the host collects (and writes its GC figures) after the touch
        time.sleep(0.5)  # the watcher threads poll every 0.1 s
        if OUT:
            p = _state.pop("p")
            p.send_signal(signal.SIGINT)
            p.wait(30)
        print("host pid", _state["pid"], "py-spy ->", OUT, file=sys.stderr)


entities._toggle_host_profile = toggle
os.environ.setdefault("REPRISE_BENCH_PROFILE", "x")  # makes run() call toggle; the host never gets "profile"
sys.exit(entities.main())

"""Profiling aid (not part of Reprise): every process counts its GC time; touching /tmp/prof/gc-trigger makes
each process append its GC time since the previous touch to /tmp/prof/gc-<pid>.txt (a watcher thread,
restarted in forked children, polls the trigger every 0.1 s)."""

import gc
import os
import threading
import time

TRIGGER = "/tmp/prof/gc-trigger"
_t = {"start": 0.0, "total": 0.0, "n": [0, 0, 0], "gen_t": [0.0, 0.0, 0.0]}


def _cb(phase, info):
    if phase == "start":
        _t["start"] = time.perf_counter()
        return
    d = time.perf_counter() - _t["start"]
    _t["total"] += d
    g = info["generation"]
    _t["n"][g] += 1
    _t["gen_t"][g] += d


def _mtime():
    try:
        return os.stat(TRIGGER).st_mtime_ns
    except OSError:
        return None


def _watch():
    seen = _mtime()
    while True:
        time.sleep(0.1)
        m = _mtime()
        if m != seen:
            seen = m
            with open(f"/tmp/prof/gc-{os.getpid()}.txt", "a") as f:
                f.write(
                    f"{time.time():.3f} gc_s={_t['total']:.4f} n={_t['n']} "
                    f"per_gen_s={[round(x, 4) for x in _t['gen_t']]} cpu={sum(os.times()[:2]):.3f}\n"
                )
            _t["total"] = 0.0
            _t["n"] = [0, 0, 0]
            _t["gen_t"] = [0.0, 0.0, 0.0]


def _start():
    threading.Thread(target=_watch, daemon=True, name="gc-prof").start()


gc.callbacks.append(_cb)
os.register_at_fork(after_in_child=_start)
_start()

"""Ctrl-C while `actors.start("multiproc")` is still booting the system leaves nothing behind.

The admin daemonises itself and forks the system's processes while `start` waits for the boot command: an
interrupt then killed only that command, and the admin, the guardian and their processes ran on with nobody
holding their port or knowing it (no `with` block had been entered), beside a run dir nobody would remove.
"""

from __future__ import annotations

import glob
import itertools
import os
import signal
import subprocess
import sys
from collections.abc import Callable

import pytest

from actors.system import kill_tagged, tagged_pids
from tests.conftest import SESSION_TOKEN
from tests.waiting import wait_for

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(150)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_n = itertools.count(1)

# A user's script: start a system on SQLite and use it inside a `with` block.
SCRIPT = """
import sys
from collections.abc import Callable
import actors
with actors.start("multiproc", journal=sys.argv[1], tag=sys.argv[2]) as system:
    print("READY", flush=True)
    sys.stdin.read()
"""


def _default_sigint() -> None:
    """The child takes SIGINT as a terminal's Ctrl-C would reach it (a shell may have left it ignored)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _interrupt_while_booting(tmp_path, tag: str, booted: int) -> tuple[str, list[int]]:
    """Run SCRIPT, send its process group SIGINT once `booted` processes of its system exist; its output and
    the processes of the system still running afterwards (bounded wait for them to go)."""
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=ROOT)
    proc = subprocess.Popen([sys.executable, "-c", SCRIPT, f"sqlite:///{tmp_path}/j.db", tag], cwd=ROOT, env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_default_sigint)
    try:
        wait_for(lambda: len(tagged_pids(tag)) >= booted or proc.poll() is not None, 60)
        os.killpg(proc.pid, signal.SIGINT)  # (the whole group, as Ctrl-C in a terminal does)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    try:
        wait_for(lambda: not tagged_pids(tag), 10)
    except AssertionError:
        pass  # (reported by the caller, with the pids)
    return out, tagged_pids(tag)


@pytest.mark.parametrize("booted", [1, 3], ids=["boot-command-running", "admin-forking"])
def test_ctrl_c_while_start_boots_a_multiproc_system_leaves_no_process_and_no_run_dir(tmp_path, booted) -> None:
    # The moment is read off the system's own processes (1: the boot command, 3: the admin has forked), and
    # retried in the rare case the start finished first (the script then says READY).
    for _attempt in range(3):
        tag = f"{SESSION_TOKEN}-interrupted-{next(_n)}-"
        try:
            out, left = _interrupt_while_booting(tmp_path, tag, booted)
        finally:
            killed = kill_tagged(tag)
        if "READY" in out:
            continue
        assert "KeyboardInterrupt" in out, out
        assert left == [] and killed == [], f"an interrupted start left the processes {left or killed} running"
        assert glob.glob(f"{tmp_path}/reprise-*") == [], "an interrupted start left its run dir"
        return
    pytest.skip("the system started before every interrupt landed")


def _signalled_when(proc: subprocess.Popen[str], tag: str, ready: Callable[[], bool], signal_it: Callable[[], None],
                    interval: float = 0.02) -> tuple[str, str, list[int]]:
    """Once `ready()`, `signal_it()`; then the process's stdout, stderr and the tagged processes it left (killed)."""
    try:
        wait_for(ready, 60, interval=interval)
        signal_it()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        left = tagged_pids(tag)
        kill_tagged(tag)
    return out, err, left


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_reprise_up_terminated_while_it_starts_the_system_stops_what_had_started(tmp_path, signum) -> None:
    # `up` handled SIGTERM and SIGHUP only once it waited: before, they ended it at once (a supervisor stopping
    # it right after starting it), and the system it was starting ran on with nobody to stop it.
    topology = tmp_path / "topo.toml"
    topology.write_text('[system]\njournal = "sqlite://j.db"\n\n[[entities]]\npath = "/user/t"\n'
                        'class = "tests.actors.validation_sample:Tally"\nshards = 2\n')
    tag = f"{SESSION_TOKEN}-terminated-up-{next(_n)}-"
    proc = subprocess.Popen([sys.executable, "-m", "actors.cli", "up", str(topology), "--tag", tag], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err, left = _signalled_when(proc, tag, lambda: len(tagged_pids(tag)) >= 3 or proc.poll() is not None,
                                     lambda: proc.send_signal(signum))  # (once the admin has forked)
    assert "running;" not in out, "the signal came after the start: nothing tested"
    assert left == [], f"`reprise up` {signal.Signals(signum).name}ed while starting left {left} running"
    assert proc.returncode == 128 + signum and "while starting: stopped what had started" in err, (out, err)


REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
# C extensions the `reprise` script maps while it imports actors.cli, in this order, all after actors/__init__
# installed its Ctrl-C guard (actors/cli_interrupt.py), then one (`_sqlite3`) that only `up` itself loads.
IMPORT_MARKERS = ["_socket.", "_cmsgpack.", "_pickle.", "_ssl.", "_queue.", "_sqlite3."]


def _mapped(pid: int, marker: str) -> bool:
    try:
        with open(f"/proc/{pid}/maps") as f:
            return marker in f.read()
    except OSError:  # (it ended)
        return True


@pytest.mark.parametrize("marker", IMPORT_MARKERS)
def test_ctrl_c_while_reprise_up_imports_exits_130_with_one_line_and_no_traceback(tmp_path, marker) -> None:
    # A Ctrl-C in the first ~0.4 s of `reprise up` (the console script importing actors.cli, before main()
    # runs) printed a Python traceback through importlib and exited with SIGINT's status.
    topology = tmp_path / "topo.toml"
    topology.write_text('[system]\njournal = "sqlite://j.db"\n\n[[actor]]\npath = "/user/echo"\n'
                        'class = "tests.actors.sample:Echo"\n')
    tag = f"{SESSION_TOKEN}-import-interrupted-{next(_n)}-"
    env = dict(os.environ, TMPDIR=str(tmp_path), PYTHONPATH=ROOT)
    proc = subprocess.Popen([REPRISE, "up", str(topology), "--tag", tag], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=_default_sigint)
    out, err, left = _signalled_when(proc, tag, lambda: _mapped(proc.pid, marker),  # (the import got that far)
                                     lambda: os.killpg(proc.pid, signal.SIGINT), interval=0.001)
    assert "running;" not in out, "the interrupt came after the start: nothing tested"
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert proc.returncode == 130, (proc.returncode, out, err)
    if marker != "_sqlite3.":  # (before main(): nothing started; `up` itself exits 130 quietly)
        assert err == "reprise: interrupted while starting; nothing was started\n", err
    assert left == [], f"an interrupted `reprise up` left {left} running"

"""A process standing for a stopped system's admin in exit: its command line still names the system's port and
run dir, and its listening socket takes connections for `hold` seconds after the first one, then closes.

That is what a client attaching as a system stops can meet: the run dir removed (secret and all) while the port
still answers for a moment (shutdown waits a bounded time for it to close before it removes the run dir).
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from actors.system import free_port

_SCRIPT = """
import socket, sys, time
port, hold = int(sys.argv[3]), float(sys.argv[6])
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("127.0.0.1", port))
s.listen(16)
s.settimeout(0.02)
print("listening", flush=True)
first = None
while first is None or time.monotonic() < first + hold:
    try:
        connection, _ = s.accept()
    except socket.timeout:
        continue
    connection.close()
    first = first or time.monotonic()
s.close()
print("closed", flush=True)
time.sleep(600)
"""


@contextmanager
def exiting_admin(run_dir: str, hold: float = 1.0) -> Iterator[tuple[int, subprocess.Popen[str]]]:
    """(port, process) of such a process for a system whose run dir is `run_dir`; killed on exit."""
    port = free_port()
    env = dict(os.environ, REPRISE_BIND="127.0.0.1", THESPIAN_BASE_IPADDR="127.0.0.1")
    proc = subprocess.Popen([sys.executable, "-c", _SCRIPT, "actors.boot", "--port", str(port), "--run-dir", run_dir,
                             str(hold)], env=env, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline() == "listening\n"
        yield port, proc
    finally:
        proc.kill()
        proc.wait(10)

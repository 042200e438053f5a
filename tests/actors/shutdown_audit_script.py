"""A user's script for tests/actors/test_shutdown_audit.py: a multiproc system in a `with` block, one host busy in a
long handler, waiting to be interrupted (Ctrl-C). Prints the pid of a second, idle host, then "ready"."""

from __future__ import annotations

import sys
import time

import actors
from tests.actors.shutdown_audit_actors import Slow


def main(tag: str, run_dir: str) -> None:
    """Run until interrupted; the `with` block's end shuts the system down."""
    with actors.start("multiproc", tag=tag, run_dir=run_dir) as system:
        system.spawn(Slow, "/user/busy")
        system.spawn(Slow, "/user/idle")
        system.tell("/user/busy", ("sleep", 600.0))  # (a handler that does not end while the test runs)
        print(system.status().hosts["/user/idle"].pid, flush=True)
        print("ready", flush=True)
        time.sleep(600.0)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])

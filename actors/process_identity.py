"""Which process a client is, so that the guardian can tell, on the same machine, that it has ended.

A client that ends attached without `close()` (a Spark Python worker: pyspark's forked workers end with os._exit,
idle ones are killed) leaves its /temp route in the guardian's directory, published to every host, until a message
to it bounces; one route per worker process that ever attached. The guardian cannot ping a client to find out (an
idle client runs no transport: a send to it waits, and would take a live client for dead), but on its own machine
it can look: a process is named by its pid and start time (pids are reused) within one kernel boot and one pid
namespace (a client in another container shares the boot, not the pids). Elsewhere, or without /proc, nothing is
known and the route stays until a send to it bounces, as before.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from functools import cache

__all__ = ["ProcessIdentity", "this_process"]


@dataclass(frozen=True)
class ProcessIdentity:
    """A process: `pid` started at `start` (clock ticks after boot) in the pid namespace and boot `space` names."""

    space: str
    pid: int
    start: int

    def is_gone(self) -> bool:
        """True only when this process can see that one has ended: same boot and pid namespace, and no live (not
        zombie) process `pid` that started at `start`."""
        if self.space != _space():
            return False
        found = _start_of(self.pid)
        return found is None or found != self.start


def this_process() -> ProcessIdentity | None:
    """This process's identity, or None where it cannot be read (no /proc)."""
    space, start = _space(), _start_of(os.getpid())
    return None if not space or start is None else ProcessIdentity(space, os.getpid(), start)


@cache
def _space() -> str:
    """The kernel boot and the pid namespace of this process ("" when unknown): pids mean the same within them."""
    try:
        with open("/proc/sys/kernel/random/boot_id") as f:
            boot = f.read().strip()
        return f"{boot} {os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return ""


def _start_of(pid: int) -> int | None:
    """The start time of the live (not zombie) process `pid`, or None if there is none."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    # (after the command: state is field 3 of stat(5), starttime field 22)
    return None if fields[0] in ("Z", "X") else int(fields[19])

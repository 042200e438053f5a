"""Finding the actor systems of this machine (and network namespace) by their admin's command line.

Every admin and actor process keeps the command line of `python -m actors.boot --port N --tag TAG
--run-dir DIR`, so a system's tag and run dir can be read from any of them, given its admin port.
"""

from __future__ import annotations

import os


def boot_option(admin_port: int, option: str) -> str | None:
    """The value of `option` (e.g. "--tag") on the boot command line of the local system on `admin_port`."""
    needle = b"\0--port\0" + str(admin_port).encode() + b"\0"
    flag = option.encode()
    # Each network namespace may run its own system on the same port: only ours counts.
    my_ns = _net_namespace("self")
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"actors.boot" not in cmdline or needle not in cmdline:
            continue
        parts = cmdline.split(b"\0")
        if flag not in parts[:-1]:
            continue
        if my_ns is not None and _net_namespace(entry) not in (my_ns, None):
            continue
        return os.fsdecode(parts[parts.index(flag) + 1])
    return None


def _net_namespace(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None

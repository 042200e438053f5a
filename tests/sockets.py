"""The sockets this test process holds: to check that a failed call left none open."""

from __future__ import annotations

import os


def socket_inodes() -> set[str]:
    """The inodes of the sockets this process holds open."""
    inodes = set()
    for fd in os.listdir("/proc/self/fd"):
        try:
            target = os.readlink(f"/proc/self/fd/{fd}")
        except OSError:
            continue  # (the listing's own descriptor)
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    return inodes


def listening_ports() -> set[int]:
    """The TCP ports this process listens on (a client endpoint each, and whatever else it opened)."""
    inodes = socket_inodes()
    ports = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[3] == "0A" and fields[9] in inodes:  # (0A: LISTEN)
                    ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports

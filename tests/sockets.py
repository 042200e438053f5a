"""The sockets this test process (or another) holds: to check that a failed call left none open, or what waits in them."""

from __future__ import annotations

import os


def socket_inodes(pid: int | str = "self") -> set[str]:
    """The inodes of the sockets this process (or the process `pid`) holds open."""
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
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


def unread_bytes(pid: int) -> int:
    """How many bytes wait, unread, in the receive queues of the TCP sockets of the process `pid`."""
    inodes = socket_inodes(pid)
    unread = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as rows:
            for row in list(rows)[1:]:
                fields = row.split()
                if fields[9] in inodes:
                    unread += int(fields[4].split(":")[1], 16)  # (tx_queue:rx_queue)
    return unread

"""Free TCP ports for tests that start several listeners at once."""

from __future__ import annotations

import socket
from contextlib import ExitStack


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct TCP ports nothing listens on right now.

    Calling `actors.free_port()` several times in a row can return the same port twice (the kernel hands a
    closed ephemeral port out again), and two nodes given one admin port refuse to start: every socket is
    held open until all are chosen, so the ports differ.
    """
    with ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for s in sockets:
            s.bind((host, 0))
        return [s.getsockname()[1] for s in sockets]

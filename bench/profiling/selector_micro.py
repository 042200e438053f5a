"""One pass of Thespian's TCPTransport loop over 6 sockets: a fresh epoll selector (Thespian 4.0.1) against
actors.thespian_fixes.PollPass (one poll(2) call), µs a pass (PROFILE.md §24).

    PYTHONPATH=. .venv/bin/python bench/profiling/selector_micro.py [PASSES]
"""

import selectors
import socket
import sys
import time

from actors.thespian_fixes import PollPass

passes = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
pairs = [socket.socketpair() for _ in range(5)]
readers = [a.fileno() for a, _ in pairs]
writers = [pairs[0][1].fileno()]


def one_pass(make) -> None:
    """What TCPTransport._runWithExpiry does with its selector in one pass."""
    sel = make()
    for fd in readers:
        sel.register(fd, selectors.EVENT_READ)
    for fd in writers:
        sel.register(fd, selectors.EVENT_WRITE)
    rrecv, rsend = [], []
    for key, event in sel.select(0):
        if event & selectors.EVENT_READ:
            rrecv.append(key.fd)
        if event & selectors.EVENT_WRITE:
            rsend.append(key.fd)
    sel.close()


for _ in range(2):
    for name, make in (("epoll selector per pass (Thespian)", selectors.DefaultSelector), ("PollPass", PollPass)):
        t = time.perf_counter()
        for _ in range(passes):
            one_pass(make)
        print(f"{name:38s} {(time.perf_counter() - t) / passes * 1e6:6.2f} µs a pass")

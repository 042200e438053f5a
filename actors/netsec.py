"""Network defaults Thespian lacks: listen on loopback only, and accept only configured peers.

Thespian binds every actor socket to 0.0.0.0. Reprise binds to `REPRISE_BIND` (default 127.0.0.1) and,
in multi-host mode, closes connections from addresses not in `REPRISE_PEERS` (comma-separated IPs).
The settings travel in the environment so that every forked admin and actor process applies them.

A client process (actors.connect) lists no peers: it also accepts the addresses of the nodes whose actors it
knows (`hear_from`, fed from its directory). Thespian sends a reply back over the connection it came on only
while that connection is idle; otherwise it opens a new one, from the replying node to the client. A node that
joined after the client's last directory fetch is refused at first: the client sees the refusal (`take_refused`),
fetches its directory again, and the node's next retry of that send gets in.

A connection that has not delivered an authenticated frame yet costs the process a file descriptor and a
share of every pass of Thespian's loop, which it would keep for up to 7 minutes (Thespian's limit per frame):
any local user could open thousands and slow a host a hundredfold (2,800 took 70% of a core, idle) or exhaust
its descriptors. A process keeps at most MAX_UNAUTHENTICATED of them; a new one closes the oldest. A peer whose
first frame is cut off that way retries (Thespian retries every send), once the flood stops.

These only narrow who can connect: any local user can reach loopback, and any process on a peer can
reach the peer's ports. What keeps them from running code through Thespian's unpickling is the
authenticated transport (actors/auth.py): no frame is unpickled without the system's secret.
"""

from __future__ import annotations

import logging
import math
import os
import time
from collections.abc import Callable, Iterable
from typing import Any

log = logging.getLogger("reprise.netsec")

_applied = False
_heard: set[str] = set()  # node addresses this process accepts besides REPRISE_PEERS (see hear_from)
_refused: set[str] = set()  # addresses refused since take_refused() last took them
# A stranger connecting in a loop would write a warning per attempt: one per address per WARN_EVERY seconds
# instead, with the count of those not logged since.
WARN_EVERY = 60.0
_warned: dict[str, tuple[float, int]] = {}  # address -> (when it was last logged, refusals not logged since)
MAX_UNAUTHENTICATED = 100  # accepted connections per process that have not sent an authenticated frame yet
_flood_warned = -math.inf  # time.monotonic() of the last warning that MAX_UNAUTHENTICATED was passed


def bind_address() -> str:
    """The address actor sockets listen on."""
    return os.environ.get("REPRISE_BIND", "127.0.0.1")


def allowed_peers() -> frozenset[str]:
    """Remote addresses allowed to connect (loopback and the bind address always are)."""
    raw = os.environ.get("REPRISE_PEERS", "")
    peers = {p.strip() for p in raw.split(",") if p.strip()}
    return frozenset(peers | _heard | {"127.0.0.1", bind_address()})


def hear_from(addresses: Iterable[object]) -> None:
    """Accept connections from the machines of these Thespian actor addresses too (a client's nodes)."""
    for address in addresses:
        name = getattr(getattr(address, "addressDetails", None), "sockname", None)
        if isinstance(name, tuple) and name and isinstance(name[0], str):
            _heard.add(name[0])


def refused_pending() -> bool:
    """True if a connection was refused since `take_refused` was last called."""
    return bool(_refused)


def take_refused() -> frozenset[str]:
    """The addresses refused since the last call (a client then checks its directory for them)."""
    taken = frozenset(_refused)
    _refused.difference_update(taken)
    return taken


def _warn_refused(address: str, now: float | None = None) -> None:
    """Log a refused connection, at most once per address every WARN_EVERY seconds."""
    now = time.monotonic() if now is None else now
    last, unlogged = _warned.get(address, (None, 0))
    if last is not None and now - last < WARN_EVERY:
        _warned[address] = (last, unlogged + 1)
        return
    if len(_warned) >= 256 and address not in _warned:
        _warned.clear()  # (bounded: many strangers cost a warning each again, never memory)
    _warned[address] = (now, 0)
    more = f" ({unlogged} more refused since the last warning)" if unlogged else ""
    log.warning("refused a connection from %s: not an allowed peer (REPRISE_PEERS)%s", address, more)


def _unauthenticated(incoming: Any) -> bool:
    """Whether an accepted connection has not delivered an authenticated frame (its sender is still unknown)."""
    return getattr(getattr(incoming, "fromAddress", None), "addressDetails", None) is None


def _close_oldest_unauthenticated(incoming_sockets: dict[int, Any]) -> None:
    """Close the oldest accepted connections without an authenticated frame beyond MAX_UNAUTHENTICATED."""
    # (the dict is in accept order: Thespian replaces an entry in place when a frame follows another)
    strangers = [fd for fd, incoming in incoming_sockets.items() if _unauthenticated(incoming)]
    excess = len(strangers) - MAX_UNAUTHENTICATED
    if excess <= 0:
        return
    for fd in strangers[:excess]:
        incoming_sockets.pop(fd).close()
    global _flood_warned
    now = time.monotonic()
    if now - _flood_warned >= WARN_EVERY:  # (a flood would otherwise write a line per connection)
        _flood_warned = now
        log.warning("more than %d connections sent no authenticated frame: closing the oldest (a flood of "
                    "connections from a process without the system's secret?)", MAX_UNAUTHENTICATED)


def apply() -> None:
    """Patch Thespian's TCP transport once per process (idempotent)."""
    global _applied
    if _applied:
        return
    from thespian.system.transport import IPBase, TCPTransport

    def bind_args(self: Any) -> tuple[tuple[str, int]]:
        host, port = self.bindname[0], self.bindname[1]
        if host in ("", "0.0.0.0"):
            host = bind_address()
        return ((host, port),)

    IPBase.IPActorAddress.bindArgs = property(bind_args)

    original_new_socket = TCPTransport.TCPTransport.new_socket
    original_accept = TCPTransport.TCPTransport._acceptNewIncoming

    def new_socket(self: Any, op: Callable[..., object], *args: object, **kwargs: object) -> Any:
        result = original_new_socket(self, op, *args, **kwargs)
        if getattr(op, "__name__", "") == "accept" and result[1][0] not in allowed_peers():
            self._reprise_refused = result
        return result

    def accept_new_incoming(self: Any) -> None:
        # Let Thespian accept as usual, then drop a refused peer's socket before anything is read
        # from it. (Raising inside accept sends Thespian's admin down an error path that kills it.)
        self._reprise_refused = None
        original_accept(self)
        refused, self._reprise_refused = self._reprise_refused, None
        if refused is not None:
            sock, peer = refused
            _warn_refused(peer[0])
            if len(_refused) < 64:  # (only clients take them: an actor process must not grow one per stranger)
                _refused.add(peer[0])
            self._incomingSockets.pop(sock.fileno(), None)
            sock.close()
        if len(self._incomingSockets) > MAX_UNAUTHENTICATED:
            _close_oldest_unauthenticated(self._incomingSockets)

    TCPTransport.TCPTransport.new_socket = new_socket
    TCPTransport.TCPTransport._acceptNewIncoming = accept_new_incoming
    _applied = True

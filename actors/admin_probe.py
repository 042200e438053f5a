"""Whether an admin reads frames signed with our secret: one Thespian frame, answered at once.

A wrong secret is otherwise told only after Thespian's attach has retried its query for ~12 s (the admin
drops a frame whose HMAC fails; to Thespian's client that is silence). This speaks Thespian 4.0.1's TCP
framing (`<length>>` + body, answered by an ACK or ACK+DATAERR), like `tls.probe` does for the handshake.
"""

from __future__ import annotations

import enum
import socket
import time
from typing import cast

from thespian.actors import ActorAddress

from . import auth
from . import tls as tls_module


class Verdict(enum.Enum):
    """What the process on an admin port did with a frame signed with our secret."""

    READS = "reads"  # ACKed it: a Thespian admin of the system that secret belongs to
    REFUSES = "refuses"  # ACK+DATAERR: a Thespian admin that cannot read it (another secret, not Reprise's)
    SILENT = "silent"  # accepted the connection, answered nothing within the wait (busy, stopped, or hung)
    FOREIGN = "foreign"  # answered, or hung up, as no Thespian admin does (another program; a TLS server)
    UNTRIED = "untried"  # the probe could not be made (e.g. an IPv6 host): Thespian's attach decides


def signed_probe(host: str, admin_port: int, secret: bytes, tls: tls_module.TlsConfig | None,
                 wait: float) -> Verdict:
    """Whether the admin on host:port reads a frame signed with `secret` (see Verdict), within `wait` seconds.

    Thespian's transport ACKs every frame it reads and answers one it cannot read (here: its HMAC fails)
    with ACK+DATAERR, at once, once it gets to it; Thespian's own attach instead retries its query for
    ~12 s whatever the answer (or its absence), then says nothing of why. The probe is Thespian's
    QueryExists from a throwaway listening address; the admin's QueryAck (on the same connection or a new
    one) is read and ACKed so its send succeeds.
    """
    from thespian.system.messages.admin import QueryExists
    from thespian.system.transport.IPBase import TCPv4ActorAddress
    from thespian.system.transport.streamBuffer import ackDataErrMsg, ackMsg

    deadline = time.monotonic() + wait
    with socket.socket() as listener:
        try:
            listener.bind((host, 0))  # (an IPv6 host: untried; Thespian's attach is IPv4 anyway)
            listener.listen(1)
            conn = socket.create_connection((host, admin_port), timeout=wait)
        except OSError:
            return Verdict.UNTRIED
        me = ActorAddress(TCPv4ActorAddress(host, listener.getsockname()[1], external=True))
        body = auth.sign(secret, (me, QueryExists()), admin_port)
        try:
            if tls is not None:
                conn = tls_module.client_context(tls).wrap_socket(conn)
            conn.sendall(b"%d>" % len(body) + body)
            ack = _read_frame(conn, deadline)
            if ack is None and time.monotonic() >= deadline:
                return Verdict.SILENT  # (a frame, or a refusal, would have come back already)
            if ack is None or ack not in (ackMsg, ackDataErrMsg):
                return Verdict.FOREIGN
            if ack == ackDataErrMsg:
                return Verdict.REFUSES
            _answer_query_ack(conn, listener, ackMsg, min(deadline, time.monotonic() + 1.0))
            return Verdict.READS
        except OSError:
            return Verdict.UNTRIED
        finally:
            conn.close()


def _answer_query_ack(conn: socket.socket, listener: socket.socket, ack: bytes, deadline: float) -> None:
    """ACK the admin's QueryAck to the probe (best effort), so the admin logs no failed send."""
    import selectors
    import ssl

    pending = isinstance(conn, ssl.SSLSocket) and conn.pending() > 0  # (already decrypted: select cannot see it)
    if pending:
        ready = [conn]
    else:
        # (a selector, not select.select: that refuses descriptors past 1024, which a client process holding many
        # files or sockets has: connect() failed "filedescriptor out of range in select()")
        with selectors.DefaultSelector() as selector:
            selector.register(conn, selectors.EVENT_READ)
            selector.register(listener, selectors.EVENT_READ)
            ready = [cast(socket.socket, key.fileobj) for key, _ in selector.select(max(0.0, deadline - time.monotonic()))]
    if listener in ready:
        back, _ = listener.accept()
        with back:
            if _read_frame(back, deadline) is not None:
                back.sendall(ack)
    elif ready and _read_frame(conn, deadline) is not None:
        conn.sendall(ack)


_FRAME_MAX = 1 << 20
"""The largest frame the probe reads (an ACK, or the admin's QueryAck: a few hundred bytes)."""


def _read_frame(sock: socket.socket, deadline: float) -> bytes | None:
    """One whole Thespian frame (`<length>>` + body) as sent, or None if it does not arrive by `deadline`.

    Reads no further than the frame: the admin may send its next one right behind it.
    """
    data = b""
    size: int | None = None
    while size is None or len(data) < size:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        sock.settimeout(left)
        try:
            chunk = sock.recv(1 if size is None else size - len(data))
        except OSError:  # (TimeoutError, and a TLS socket's SSLError)
            return None
        if not chunk:
            return None
        data += chunk
        if size is None and chunk == b">":
            if not data[:-1].isdigit():
                return None
            size = len(data) + int(data[:-1])
            if size > _FRAME_MAX:
                # (whoever holds the port claimed it: recv() of that size would allocate it, gigabytes)
                return None
        elif size is None and len(data) > 20:
            return None  # no Thespian frame header
    return data

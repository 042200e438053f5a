"""Authenticated Thespian transport: no frame is unpickled unless it carries the system's secret.

Thespian 4.0.1's multiprocTCPBase unpickles whatever arrives on an actor's or admin's port, so anyone
who could connect could run code as the system's user. Here, as with `multiprocessing.connection`'s
authkey, every process of a system knows a per-system secret (32 random bytes, kept in a 0600 file in
the run dir), and every frame Thespian sends carries `HMAC-SHA256(secret, pickle)` before the pickle. The receive
path checks the tag with `hmac.compare_digest` before `pickle.loads`; a frame that fails is dropped
(Thespian answers it with its data-error ACK and closes the connection). Thespian's two fixed ACK
frames are recognised by their exact bytes and never unpickled.

Thespian buffers a whole frame, of the size its `<size>>` header claims, before anything reads it: any local
user could make any process of a system hold gigabytes (until the kernel's OOM killer picked one). So a frame
first carries a MAC of its size (keyed BLAKE2s of "reprise-frame <size>"), checked as soon as its 32 bytes arrive: a frame
without it is dropped after at most one read (1 MB, Thespian's largest) and its connection closed. The body
follows, with its own tag: `size tag + HMAC-SHA256(secret, pickle) + pickle`.

An HMAC on every frame (not a handshake per connection) survives Thespian's connection reuse and costs
one pass of SHA-256 over bytes that were just pickled. The HMAC's key is derived from the secret and the port the
frame is sent to (the receiver's listening port), and a process accepts only frames for its own ports: any local
user can listen on the port of an actor process that died (a SIGKILLed host, until it restarts elsewhere) and
collect what was still sent there, and those frames were accepted as they were by every other process of the
system. A captured frame can still be replayed to the port it was sent to, by someone who can read the traffic
or who holds that port later: use a private network between hosts.

Actor processes fork from `actors.boot`, which loads the secret before the ActorSystem starts, so they
inherit it; clients (`actors.connect`, the CLI, Spark executors) load it from the run dir of the local
admin on that port (of this user's processes only), or from `secret_file=`. Tested against the pinned Thespian 4.0.1.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
import os
import pickle
import secrets
import stat
from typing import Any

from .errors import RepriseError
from .local_systems import boot_option, foreign_boot_owner, listen_address
from .thespian_types import Intent

log = logging.getLogger("reprise.auth")

SECRET_BYTES = 32
SECRET_NAME = "secret"
_TAG = hashlib.sha256().digest_size

_accepted: list[bytes] = []  # a client attached to several systems accepts each one's frames
_signing: bytes | None = None  # what transports created from now on sign with
_unauthenticated = False  # benchmarks only: sign nothing, accept unsigned frames
_applied = False
_control: dict[bytes, str] = {}
_CONTROL_MAX = 64
_ports: dict[int, int] = {}  # listening port of each live transport of this process -> transports on it
_port_keys: dict[tuple[bytes, int], bytes] = {}  # (secret, port) -> the HMAC key of frames sent to that port


class AuthenticationFailed(RepriseError, ConnectionError):
    """A frame did not carry a valid HMAC of the system's secret (it was dropped unread)."""


class SecretUnavailable(RepriseError, PermissionError):
    """The system's secret file is missing, unreadable, malformed or readable by other users.

    `secret_file` is the file at fault when it is the one given that is wrong (missing, unreadable, not a file,
    another user's, shared, not a secret), None when no secret was found to read (no local admin to take it from).
    """

    secret_file: str | None = None  # (also what an instance pickled before the field existed unpickles with)

    def __init__(self, text: str, secret_file: str | None = None) -> None:
        super().__init__(text)
        self.secret_file = secret_file

    def __reduce__(self) -> tuple[type[SecretUnavailable], tuple[str, str | None]]:
        return type(self), (str(self), self.secret_file)


class MissingSecret(RepriseError, ValueError):
    """A convention member was started without the leader's secret (`secret_file=`)."""


def new_secret() -> bytes:
    """A fresh random secret."""
    return secrets.token_bytes(SECRET_BYTES)


def write_secret(path: str, secret: bytes) -> str:
    """Write `secret` as hex to `path` with mode 0600 (replacing the file atomically); returns the path."""
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        os.fchmod(fd, 0o600)  # the umask cannot widen it, but be explicit
        os.write(fd, secret.hex().encode() + b"\n")
        os.fsync(fd)
    finally:
        os.close(fd)
    os.replace(tmp, path)
    return path


def read_secret(path: str) -> bytes:
    """The secret in `path`; refuses files other users own or may read (as ssh does with private keys)."""
    try:
        # O_NONBLOCK: a FIFO (another user's, at a path in a shared directory) would block the open forever,
        # before the checks below could refuse it; on a regular file it changes nothing.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise SecretUnavailable(f"secret file {path} does not exist; copy the system's secret file there "
                                "(the leader's secret_file, or <run dir>/secret of the system)", path) from None
    except PermissionError:
        raise SecretUnavailable(f"cannot read the secret file {path}: permission denied; run as the user that "
                                "started the actor system, or pass secret_file= a copy this user may read",
                                path) from None
    try:
        st = os.fstat(fd)
        raw = os.read(fd, 4096) if stat.S_ISREG(st.st_mode) else b""
    finally:
        os.close(fd)
    if not stat.S_ISREG(st.st_mode):
        raise SecretUnavailable(f"secret file {path} is not a file (a directory?): give the secret file itself, "
                                "e.g. <run dir>/secret", path)
    mode = st.st_mode
    if st.st_uid != os.geteuid():
        # Whoever owns the file can rewrite it, and a secret signs what this process will unpickle: a secret
        # file of another user would let that user run code here (root reads any file, so root most of all).
        raise SecretUnavailable(
            f"secret file {path} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}): its owner "
            "could run code in every client that uses it. Run as the user that started the actor system, or "
            f"use a copy you own (e.g. `install -m 600 {path} ~/system.secret` and pass secret_file= that)", path)
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise SecretUnavailable(f"secret file {path} is accessible to other users (mode {stat.S_IMODE(mode):o}); "
                                f"run `chmod 600 {path}`", path)
    try:
        secret = bytes.fromhex(raw.decode("ascii").strip())
    except (UnicodeDecodeError, ValueError):
        secret = b""
    if len(secret) < 16:
        raise SecretUnavailable(f"secret file {path} does not hold a secret (expected at least 32 hex digits); "
                                "copy it from the leader, or delete it and let the leader create a new one", path)
    return secret


def ensure_secret(path: str, create: bool) -> bytes:
    """Read the secret at `path`; if it does not exist and `create`, make a new one there first."""
    if create and not os.path.exists(path):
        try:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:
            pass  # someone else created it meanwhile: read theirs
        except OSError as e:  # (its directory missing or not writable: say which option names it)
            where = os.path.dirname(path)
            why = (f"its directory {where} does not exist" if not os.path.isdir(where) else
                   f"it cannot be created there ({e.strerror})")
            raise SecretUnavailable(f"secret_file {path}: {why}; create the directory, or give secret_file= a "
                                    "path in a directory you can write (the leader creates the file)") from None
        else:
            with os.fdopen(fd, "w") as f:
                f.write(new_secret().hex() + "\n")
    return read_secret(path)


def find_secret_file(admin_port: int, host: str | None = None) -> str:
    """The secret file of the local actor system whose admin listens on `admin_port` (on `host`, if given).

    Found through the admin's command line (`actors.boot --port N --run-dir DIR`), among this user's processes
    in this network namespace (each namespace may run its own system on the same port).
    """
    run_dir = boot_option(admin_port, "--run-dir", host)
    if run_dir is not None:
        return os.path.join(run_dir, SECRET_NAME)
    other = foreign_boot_owner(admin_port)
    if other is not None:
        raise SecretUnavailable(
            f"the local Reprise admin on port {admin_port} runs as uid {other}, not as this user (uid "
            f"{os.geteuid()}): its secret is not looked for (a process of another user may only claim to be that "
            "system's admin). Run as the user that started the system, or pass secret_file= a copy of its secret "
            "that you own")
    elsewhere = listen_address(admin_port) if host is not None else None
    if elsewhere is not None:
        raise SecretUnavailable(f"the local Reprise admin on port {admin_port} listens on {elsewhere}, not on {host}: "
                                f"give host={elsewhere!r} (`--host {elsewhere}`)")
    raise SecretUnavailable(f"found no local Reprise admin on port {admin_port} to take the secret from; pass "
                            "secret_file= (the system's <run dir>/secret, or the secret_file it was started with)")


def use_secret(secret: bytes) -> None:
    """Sign with `secret` in transports created from now on, and accept frames signed with it."""
    global _signing
    if len(secret) < 16:
        raise ValueError("an actor-system secret must be at least 16 bytes")
    # First: every received frame is checked against the accepted secrets in order, and a client attached again
    # after each restart of its system (a new secret each start) checked each frame against every earlier one first.
    if secret in _accepted:
        _accepted.remove(secret)
    _accepted.insert(0, secret)
    _signing = secret
    apply()


def allow_unauthenticated() -> None:
    """Benchmarks only: transports created from now on sign nothing, and unsigned frames are accepted."""
    global _signing, _unauthenticated
    _signing, _unauthenticated = None, True
    apply()


def size_tag(key: bytes, size: int) -> bytes:
    """The tag that opens a frame body of `size` bytes: checked before the receiver buffers the rest."""
    # Keyed BLAKE2s (a MAC by design, 32 bytes as the body's HMAC): 0.55 µs against HMAC-SHA256's 1.6, paid on
    # every frame by its sender and its receiver (request/response round trips were ~6% slower with the HMAC).
    return hashlib.blake2s(b"reprise-frame %d" % size, key=key[:32]).digest()


def port_key(key: bytes, port: int) -> bytes:
    """The HMAC key of frames sent to `port`: a frame collected on one port is refused on every other."""
    derived = _port_keys.get((key, port))
    if derived is None:
        if len(_port_keys) >= 1024:
            _port_keys.clear()  # (bounded: a client attached to many systems in turn derives them again)
        derived = _port_keys[key, port] = hashlib.blake2s(b"reprise-port %d" % port, key=key[:32]).digest()
    return derived


def sign(key: bytes, obj: object, port: int) -> bytes:
    """One authenticated Thespian frame body for the process listening on `port`: the size tag, the pickle's
    HMAC-SHA256 tag (keyed for that port), then the pickle."""
    body = pickle.dumps(obj)
    return size_tag(key, 2 * _TAG + len(body)) + hmac.digest(port_key(key, port), body, "sha256") + body


def size_is_signed(size: int, head: bytes) -> bool:
    """Whether `head` (a frame body's first bytes) opens with a size tag of a secret this process holds."""
    if len(head) < _TAG:
        return False
    tag = head[:_TAG]
    return any(hmac.compare_digest(size_tag(key, size), tag) for key in _accepted)


def verify_and_load(data: bytes) -> object:
    """Unpickle a received frame body only if its tag verifies under a secret this process holds."""
    if len(data) <= _CONTROL_MAX:  # (hashing every large frame for this lookup would cost a pass over it)
        control = _control.get(data)
        if control is not None:
            return control  # Thespian's ACK frames: constants, recognised without unpickling anything
    if len(data) > 2 * _TAG:
        view = memoryview(data)
        tag, body = view[_TAG:2 * _TAG], view[2 * _TAG:]  # (the size tag before them was checked on arrival)
        for key in _accepted:
            for port in _ports:
                if hmac.compare_digest(hmac.digest(port_key(key, port), body, "sha256"), tag):
                    return pickle.loads(body)
    if _unauthenticated:
        return pickle.loads(data)
    raise AuthenticationFailed("dropped a frame without a valid HMAC of this actor system's secret "
                               "(an unauthenticated or foreign sender)")


class _Serializer:
    """Stands in for the `pickle` module Thespian's TCP transport calls `loads` on."""

    loads = staticmethod(verify_and_load)

    @staticmethod
    def dumps(obj: object) -> bytes:
        raise AuthenticationFailed("Reprise signs frames in TCPTransport.serializer; nothing else may send")


def target_port(address: object) -> int:
    """The port a Thespian TCP actor address listens on (what a frame sent there is signed for)."""
    sockname = getattr(getattr(address, "addressDetails", None), "sockname", None)
    if not isinstance(sockname, tuple) or len(sockname) < 2 or not isinstance(sockname[1], int):
        raise AuthenticationFailed(f"cannot sign a frame for {address!r}: not a TCP actor address")
    return sockname[1]


def _forget_inherited_ports() -> None:
    # A forked process (Thespian forks every actor process) listens on none of its parent's ports: frames for them
    # are not for it (a child of a host that died would otherwise take what was collected on the host's port).
    _ports.clear()


def apply() -> None:
    """Patch Thespian's TCP transport once per process (idempotent); forked actor processes inherit it."""
    global _applied
    if _applied:
        return
    from thespian.system.transport import TCPTransport as tcp
    from thespian.system.transport import streamBuffer

    os.register_at_fork(after_in_child=_forget_inherited_ports)
    for packet in (streamBuffer.ackPacket, streamBuffer.ackDataErrPacket):
        _control[pickle.dumps(packet)] = packet
    original_init = tcp.TCPTransport.__init__

    def init(self: Any, *args: object, **kwargs: object) -> None:
        if _signing is None and not _unauthenticated:
            raise SecretUnavailable("this process holds no actor-system secret; attach with actors.connect(port) "
                                    "or start a system with actors.start")
        self._reprise_key = _signing  # fixed per transport: a later start() must not re-key live ones
        original_init(self, *args, **kwargs)
        port = self.socket.getsockname()[1]
        self._reprise_port = port
        _ports[port] = _ports.get(port, 0) + 1

    original_close = tcp.TCPTransport.close

    def close(self: Any) -> None:
        port = getattr(self, "_reprise_port", None)
        if port is not None:
            self._reprise_port = None
            if _ports.get(port, 0) > 1:
                _ports[port] -= 1
            else:
                _ports.pop(port, None)
        original_close(self)

    def serializer(self: Any, intent: Intent) -> bytes:
        key = getattr(self, "_reprise_key", _signing)
        obj = (self.myAddress, intent.message)
        body = pickle.dumps(obj) if key is None else sign(key, obj, target_port(intent.targetAddr))
        return b"%d>" % len(body) + body

    original_add_more = streamBuffer.ReceiveBuffer.addMore

    def add_more(self: Any, buf: bytes) -> None:
        original_add_more(self, buf)
        size = self._size
        # Frames up to _CONTROL_MAX bytes (Thespian's ACKs) are bounded anyway; every other frame must prove it
        # comes from a holder of the secret before more than one read of it is kept.
        if (size is not None and size > _CONTROL_MAX and self._blen >= _TAG
                and not getattr(self, "_reprise_sized", False) and not _unauthenticated):
            if not size_is_signed(size, bytes(self._buf[:_TAG])):
                self._buf, self._extra = b"", b""  # (freed now, not when Thespian drops the buffer)
                raise AuthenticationFailed(f"dropped a {size}-byte frame whose size is not signed with this "
                                           "actor system's secret (an unauthenticated or foreign sender)")
            self._reprise_sized = True

    tcp.TCPTransport.__init__ = init
    tcp.TCPTransport.close = close
    tcp.TCPTransport.serializer = serializer
    tcp.serializer = _Serializer
    streamBuffer.ReceiveBuffer.addMore = add_more
    _applied = True

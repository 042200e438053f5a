"""Optional mutual TLS on every TCP connection of an actor system (Thespian's transport, patched).

With `actors.start(..., tls=TlsConfig(cert, key, ca))` (or `tls_cert=`, `tls_key=`, `tls_ca=`), every
socket a process of that system opens or accepts speaks TLS (1.2 or later): admin, actors, clients, and
the convention between a leader and its members. Both ends present a certificate and verify the other's
against `ca` (CERT_REQUIRED on both sides). Hostnames are NOT checked: peers are addressed by IP, and
any holder of a certificate signed by `ca` (and of its key) is a peer. Use a CA dedicated to one system.

Thespian 4.0.1's TCPTransport runs non-blocking sockets under select(). TLS runs inside them through
an `ssl.SSLObject` on memory BIOs, so that no step ever blocks an actor's loop:

* `TlsSocket` (a `socket.socket`) replaces every connected socket: client sockets are made by the
  patched `TCPTransport.new_socket`, server sockets by the listening socket's `accept`. Its `send` and
  `recv` encrypt and decrypt; while the handshake is not finished they raise EAGAIN, as a plain
  non-blocking socket does when it is not ready.
* A selector shim (Thespian's loop looks up `selectors.DefaultSelector` in its module) drives
  connects and handshakes itself, flushes ciphertext the kernel did not take, and reports a socket
  readable when decrypted data waits in user space (which select() cannot see), or writable only once
  its handshake is done.

Nothing is sent in clear on a TLS system's sockets: a socket that is not (yet) connected never falls
back to plain TCP. The HMAC of actors/auth.py still signs every frame inside the TLS stream. A process
that refuses a handshake logs a warning (once a minute per address; the admin's go to boot.log in the
run dir). Processes that never use TLS leave Thespian unpatched. Tested against the pinned Thespian 4.0.1.
"""

from __future__ import annotations

import errno
import json
import logging
import os
import selectors as _selectors
import socket
import ssl
import stat
import time
import weakref
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from _typeshed import FileDescriptorLike

from .errors import ConfigError, RepriseError
from .thespian_fixes import PollPass

log = logging.getLogger("reprise.tls")

TLS_NAME = "tls.json"  # in a system's run dir: where its TLS files are, for local clients
_CHUNK = 256 * 1024  # plaintext taken per send
_HIGH_WATER = 256 * 1024  # ciphertext waiting for the kernel above which send takes no more
_SMALL = 64  # Thespian's ACK frames: always taken (their send's return value is ignored)
_READ = 65536  # per recv: larger buffers are mmap()ed and unmapped by malloc on every call

_current: _Contexts | None = None  # what transports created from now on use
_applied = False
_live: weakref.WeakValueDictionary[int, TlsSocket] = weakref.WeakValueDictionary()
failures: list[str] = []  # recent handshake failures of this process, newest last (for error messages)
_FAILURES_KEPT = 20
_LOG_EVERY = 60.0  # seconds between warnings about one peer address (a flood must not fill the log)
_logged: dict[str, float] = {}  # address -> when its last handshake failure was logged (at most _LOGGED_KEPT)
_LOGGED_KEPT = 256


class TlsError(RepriseError, ConnectionError):
    """A TLS handshake failed, or a client and a system disagree about TLS."""


@dataclass(frozen=True)
class TlsConfig:
    """PEM files: this process's certificate and private key, and the CA that signs every peer's."""

    cert: str
    key: str
    ca: str


class _Contexts:
    """The server and client SSLContexts of one TlsConfig."""

    def __init__(self, config: TlsConfig) -> None:
        self.config = config
        self.server = _context(config, ssl.PROTOCOL_TLS_SERVER)
        self.client = _context(config, ssl.PROTOCOL_TLS_CLIENT)


def client_context(config: TlsConfig) -> ssl.SSLContext:
    """The SSLContext a client of a system with `config` connects with (its certificate, the CA's trust)."""
    return _context(config, ssl.PROTOCOL_TLS_CLIENT)


def _context(config: TlsConfig, protocol: int) -> ssl.SSLContext:
    ctx = ssl.SSLContext(protocol)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.verify_mode = ssl.CERT_REQUIRED
    ctx.check_hostname = False  # peers are addressed by IP: trust is the CA's (see the module docstring)
    try:
        ctx.load_cert_chain(config.cert, config.key)
    except ssl.SSLError as e:
        if "KEY_VALUES_MISMATCH" in str(e) or "key values mismatch" in str(e):
            raise ConfigError(f"tls_key {config.key} is not the private key of tls_cert {config.cert}; pass the "
                              "key the certificate was made for") from None
        raise ConfigError(f"cannot load tls_cert {config.cert} / tls_key {config.key}: {e.reason or e}; both must "
                          "be PEM files (an unencrypted private key)") from None
    try:
        ctx.load_verify_locations(cafile=config.ca)
    except ssl.SSLError as e:
        raise ConfigError(f"tls_ca {config.ca} holds no PEM CA certificate ({e.reason or e})") from None
    return ctx


def tls_config(tls: TlsConfig | None = None, tls_cert: str | None = None, tls_key: str | None = None,
               tls_ca: str | None = None) -> TlsConfig | None:
    """The TlsConfig named by `tls=` or by all three of `tls_cert=`, `tls_key=`, `tls_ca=` (None: no TLS)."""
    given = {"tls_cert": tls_cert, "tls_key": tls_key, "tls_ca": tls_ca}
    named = {k: v for k, v in given.items() if v is not None}
    if tls is not None:
        if named:
            raise ConfigError(f"pass either tls=TlsConfig(...) or tls_cert/tls_key/tls_ca, not both (got tls= and "
                              f"{sorted(named)})")
        if not isinstance(tls, TlsConfig):
            raise ConfigError(f"tls must be an actors.TlsConfig(cert=..., key=..., ca=...), got {tls!r}")
        return tls
    if not named:
        return None
    if len(named) != 3:
        missing = sorted(set(given) - set(named))
        raise ConfigError(f"TLS needs all three of tls_cert, tls_key and tls_ca; {', '.join(missing)} missing")
    for key, value in named.items():
        if not isinstance(value, str | os.PathLike):
            raise ConfigError(f"{key} must be a file path, got {value!r}")
    return TlsConfig(os.fspath(tls_cert), os.fspath(tls_key), os.fspath(tls_ca))  # type: ignore[arg-type]


def check(config: TlsConfig) -> TlsConfig:
    """Validate `config` (files readable, key private, key matches cert, cert signed by ca); absolute paths."""
    config = TlsConfig(*(os.path.abspath(os.fspath(p)) for p in (config.cert, config.key, config.ca)))
    for name, path in (("tls_cert", config.cert), ("tls_key", config.key), ("tls_ca", config.ca)):
        try:
            with open(path, "rb") as f:
                mode = os.fstat(f.fileno()).st_mode
                f.read(1)
        except FileNotFoundError:
            raise ConfigError(f"{name} {path} does not exist; give the path of a PEM file") from None
        except PermissionError:
            raise ConfigError(f"{name} {path} is not readable by this user; fix its owner or mode") from None
        except IsADirectoryError:
            raise ConfigError(f"{name} {path} is a directory; give the path of a PEM file") from None
        if name == "tls_key" and mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"tls_key {path} is accessible to other users (mode {stat.S_IMODE(mode):o}); "
                              f"run `chmod 600 {path}`")
    contexts = _Contexts(config)
    _self_handshake(contexts)
    return config


def _self_handshake(contexts: _Contexts) -> None:
    """Handshake this config with itself in memory: proves that `ca` signs `cert` before anything starts."""
    c_in, c_out, s_in, s_out = ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO(), ssl.MemoryBIO()
    client = contexts.client.wrap_bio(c_in, c_out, server_side=False)
    server = contexts.server.wrap_bio(s_in, s_out, server_side=True)
    done = [False, False]
    try:
        for _ in range(10):
            for i, (obj, out, peer_in) in enumerate(((client, c_out, s_in), (server, s_out, c_in))):
                if not done[i]:
                    try:
                        obj.do_handshake()
                        done[i] = True
                    except ssl.SSLWantReadError:
                        pass
                peer_in.write(out.read())
            if all(done):
                server.read(1) if server.pending() else None
                return
    except ssl.SSLError as e:
        c = contexts.config
        raise ConfigError(f"tls_cert {c.cert} is not accepted by tls_ca {c.ca} ({e.reason or e}); every process of "
                          "a system needs a certificate signed by the system's CA") from None
    raise ConfigError("the TLS self-check did not complete; check tls_cert, tls_key and tls_ca")


def use(config: TlsConfig | None) -> None:
    """Make transports created from now on in this process use `config` (None: plain TCP)."""
    global _current
    _current = None if config is None else _Contexts(config)
    if _current is not None:
        apply()  # a process that never uses TLS keeps Thespian's transport unpatched


def current() -> TlsConfig | None:
    """The TlsConfig transports created now would use."""
    return None if _current is None else _current.config


def write_config(run_dir: str, config: TlsConfig | None) -> None:
    """Record the system's TLS files in its run dir (mode 0600), so local clients find them."""
    path = os.path.join(run_dir, TLS_NAME)
    if config is None:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        json.dump(asdict(config), f)


def read_config(run_dir: str) -> TlsConfig | None:
    """The TLS files a system recorded in its run dir, or None when it runs without TLS."""
    try:
        with open(os.path.join(run_dir, TLS_NAME)) as f:
            return TlsConfig(**json.load(f))
    except FileNotFoundError:
        return None


def note_failure(message: str) -> None:
    """Remember a handshake failure (newest last) for the error a client raises."""
    failures.append(message)
    del failures[:-_FAILURES_KEPT]


def probe(host: str, port: int, config: TlsConfig | None, timeout: float = 3.0,
          unreachable_ok: bool = False, verdict: bool = True) -> str | None:
    """Why a client with `config` cannot talk to the admin on host:port at the TLS level, or None if it can
    (or, with `unreachable_ok`, if nothing answers there). `verdict=False` skips waiting (0.5 s) for the
    server's judgement of our certificate, which TLS 1.3 sends after the handshake."""
    try:
        raw = socket.create_connection((host, port), timeout=timeout)
    except OSError as e:
        return None if unreachable_ok else f"cannot connect to {host}:{port}: {e}"
    with raw:
        if config is None:
            # A TLS server answers a ClientHello; a Thespian admin reads it as a broken frame (harmless).
            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
            ctx.check_hostname, ctx.verify_mode = False, ssl.CERT_NONE
            try:
                with ctx.wrap_socket(raw) as s:
                    s.version()
                return (f"the system on {host}:{port} uses TLS; pass tls_cert=, tls_key=, tls_ca= (a certificate "
                        "signed by its CA), or --tls-cert/--tls-key/--tls-ca")
            except ssl.SSLError as e:
                if "WRONG_VERSION_NUMBER" in str(e) or "wrong version number" in str(e) or "record layer" in str(e):
                    return None  # it answered in clear: not TLS
                if isinstance(e, ssl.SSLEOFError) or "UNEXPECTED_EOF" in str(e):
                    return None  # it hung up on the ClientHello (a plain admin dropping a broken frame): not TLS
                return (f"the system on {host}:{port} uses TLS ({e.reason}); pass tls_cert=, tls_key=, tls_ca= "
                        "(a certificate signed by its CA)")
            except OSError:
                return None
        contexts = _Contexts(config)
        try:
            with contexts.client.wrap_socket(raw) as s:
                # TLS 1.3: the server judges our certificate after our Finished; its alert, if any, follows at
                # once. Nothing is sent: a Thespian frame would be logged as broken there.
                s.settimeout(0.5)
                try:
                    if verdict:
                        s.recv(1)
                except TimeoutError:
                    pass
                except ssl.SSLError as e:
                    return (f"the system on {host}:{port} refused this client's certificate {config.cert} "
                            f"({e.reason}); it needs one signed by the system's CA")
        except ssl.SSLCertVerificationError as e:
            return (f"the certificate of the system on {host}:{port} is not signed by tls_ca {config.ca} "
                    f"({e.verify_message})")
        except (ssl.SSLError, TimeoutError, ConnectionResetError) as e:
            # A Thespian admin without TLS answers a ClientHello in clear, or waits for the rest of a "frame".
            if isinstance(e, TimeoutError):
                # Silence is either a plain admin waiting for the rest of a "frame", or a TLS admin that is
                # busy or stopped (SIGSTOP): both are possible, so both are said.
                return (f"the system on {host}:{port} did not complete a TLS handshake within {timeout} s: it does "
                        "not use TLS (then connect without tls_cert/tls_key/tls_ca), or its admin is busy or "
                        "stopped (then try again)")
            if isinstance(e, ConnectionResetError | ssl.SSLEOFError) or any(
                    s in str(e) for s in ("WRONG_VERSION_NUMBER", "wrong version number", "record layer")):
                return (f"the system on {host}:{port} does not use TLS (it did not complete a TLS handshake); "
                        "connect without tls_cert/tls_key/tls_ca")
            return f"TLS handshake with {host}:{port} failed: {e.reason or e}"
        except OSError as e:
            return f"TLS handshake with {host}:{port} failed: {e}"
    return None


# ---- the socket ---------------------------------------------------------------------------------------

class TlsSocket(socket.socket):
    """A non-blocking TCP socket whose send/recv carry TLS (an SSLObject on memory BIOs)."""

    def __init__(self, family: int = -1, type: int = -1, proto: int = -1, fileno: int | None = None, *,
                 contexts: _Contexts, server_side: bool) -> None:
        super().__init__(family, type, proto, fileno)
        self._contexts = contexts
        self._server_side = server_side
        self._in, self._out = ssl.MemoryBIO(), ssl.MemoryBIO()
        self._obj: ssl.SSLObject | None = None
        self._done = False  # handshake finished
        self._wbuf = bytearray()  # ciphertext the kernel has not taken yet
        self._rbuf = bytearray()  # plaintext not yet returned by recv
        self._eof = False
        self._heard = False  # received any bytes (an empty connection closing is no failure)
        self._error: OSError | None = None
        _live[self.fileno()] = self

    # Thespian calls only these on a connected socket (plus setsockopt, setblocking, fileno, getsockname).
    def send(self, data: Any, flags: int = 0) -> int:  # Any: socket.send's buffer type, which has no len()
        """Encrypt up to _CHUNK bytes of `data`; EAGAIN while the handshake runs or the kernel lags far behind."""
        try:
            if not self._ready():
                raise BlockingIOError(errno.EAGAIN, "TLS handshake in progress")
            self._flush()
            if len(self._wbuf) >= _HIGH_WATER and len(data) > _SMALL:
                return 0  # Thespian stays in its send step and waits for writability (the shim flushes then)
            chunk = memoryview(data)[:_CHUNK]
            self._obj.write(chunk)  # type: ignore[union-attr]
            self._flush()
            return len(chunk)
        except ssl.SSLError as e:
            # Thespian handles a reset connection everywhere it sends; other errors in its ACK path escape its loop.
            raise ConnectionResetError(errno.ECONNRESET, f"TLS connection failed: {e}") from e

    def sendall(self, data: Any, flags: int = 0) -> None:  # pragma: no cover - Thespian does not use it
        """Not supported on a non-blocking TLS socket."""
        raise OSError(errno.EOPNOTSUPP, "sendall on a Reprise TLS socket")

    def recv(self, bufsize: int, flags: int = 0) -> bytes:
        """Up to `bufsize` decrypted bytes; b'' at end of stream; EAGAIN when nothing is decrypted yet."""
        if not self._rbuf:
            if not self._ready():
                if self._eof:
                    return b""
                raise BlockingIOError(errno.EAGAIN, "TLS handshake in progress")
            self._fill()
            if not self._rbuf:
                if self._eof:
                    return b""
                raise BlockingIOError(errno.EAGAIN, "no complete TLS record yet")
        out = bytes(self._rbuf[:bufsize])
        del self._rbuf[:bufsize]
        return out

    def close(self) -> None:
        """Try once to hand remaining ciphertext to the kernel, then close."""
        if self.fileno() >= 0:
            if _live.get(self.fileno()) is self:
                del _live[self.fileno()]
            if self._wbuf and self._error is None:
                try:
                    self._flush()
                except OSError:
                    pass
        super().close()

    def detach(self) -> int:
        """Give up the descriptor (and its TLS state)."""
        if _live.get(self.fileno()) is self:
            del _live[self.fileno()]
        return super().detach()

    # ---- internals ---------------------------------------------------------------------------------
    def _ready(self) -> bool:
        """Advance connect and handshake as far as possible without blocking; True once data can flow."""
        if self._error is not None:
            raise self._error
        if self._done:
            return True
        try:
            if self._obj is None and not self._start():
                return False
            self._pull()
            while True:
                try:
                    self._obj.do_handshake()  # type: ignore[union-attr]
                    self._done = True
                    break
                except ssl.SSLWantReadError:
                    self._flush()
                    if not self._pull():
                        return False
            self._flush()
            return True
        except ssl.SSLError as e:
            self._fail(e)
            try:
                self._flush()  # the alert: the peer learns why (e.g. "unknown ca") instead of seeing a bare EOF
            except OSError:
                pass
            raise
        except OSError as e:
            if e.errno in (errno.EAGAIN, errno.ENOTCONN):
                raise
            self._error = e
            raise

    def _start(self) -> bool:
        """Create the SSLObject once the TCP connection is up; False while a client's connect runs."""
        if not self._server_side:
            err = self.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
            if err:
                self._error = OSError(err, os.strerror(err))
                raise self._error
            try:
                self.getpeername()
            except OSError as e:
                if e.errno == errno.ENOTCONN:
                    return False  # connect still in progress: nothing may be sent yet, least of all in clear
                raise
        ctx = self._contexts.server if self._server_side else self._contexts.client
        self._obj = ctx.wrap_bio(self._in, self._out, server_side=self._server_side)
        return True

    def _pull(self) -> bool:
        """Move what the kernel has into the TLS object; True if anything (or end of stream) arrived."""
        got = False
        while not self._eof:
            try:
                data = super().recv(_READ)
            except BlockingIOError:
                break
            except InterruptedError:
                continue
            if not data:
                self._eof = True
                self._in.write_eof()
                return True
            self._heard = got = True
            self._in.write(data)
            if len(data) < _READ:
                break
        return got

    def _flush(self) -> bool:
        """Hand pending ciphertext to the kernel; True when none is left."""
        if self._out.pending:
            self._wbuf += self._out.read()
        while self._wbuf:
            try:
                sent = super().send(self._wbuf)
            except BlockingIOError:
                return False
            except InterruptedError:
                continue
            del self._wbuf[:sent]
        return True

    def _fill(self) -> None:
        """Decrypt everything available into the plaintext buffer."""
        self._pull()  # drains the kernel's buffer: an incomplete record waits for the next readiness
        while True:
            try:
                data = self._obj.read(_READ)  # type: ignore[union-attr]
            except ssl.SSLWantReadError:
                break
            except (ssl.SSLZeroReturnError, ssl.SSLEOFError):
                self._eof = True
                break
            except ssl.SSLError as e:
                self._fail(e)
                raise
            if not data:
                break
            self._rbuf += data
        self._flush()  # TLS 1.3 session tickets and key updates

    def _fail(self, error: ssl.SSLError) -> None:
        self._error = error
        if isinstance(error, ssl.SSLEOFError) and not self._heard:
            return  # a connection closed before it said anything (Thespian's self-wakeup connects do)
        try:
            host, port = self.getpeername()[:2]
            peer = f"{host}:{port}"
        except OSError:
            peer = "an unknown peer"
        side = "from" if self._server_side else "to"
        message = f"TLS handshake {side} {peer} failed: {getattr(error, 'reason', None) or error}"
        note_failure(message)
        if not self._server_side:
            log.info("%s", message)  # the client's caller raises a TlsError that says why
            return
        now, key = time.monotonic(), peer.rsplit(":", 1)[0]
        if now - _logged.get(key, float("-inf")) >= _LOG_EVERY:
            if len(_logged) >= _LOGGED_KEPT and key not in _logged:
                _logged.clear()  # (bounded: many failing addresses cost a warning each again, never memory)
            _logged[key] = now
            log.warning("%s (further failures from this address are not logged for %d s)", message, _LOG_EVERY)

    # ---- for the selector shim -----------------------------------------------------------------------
    def _interest(self, wanted: int) -> tuple[int, bool]:
        """(kernel events to wait for, whether `wanted` can be reported without waiting)."""
        if (self._done and wanted & _selectors.EVENT_READ and not self._rbuf and self._error is None
                and (self._in.pending or self._obj.pending())):  # type: ignore[union-attr]
            # Records already pulled from the kernel (e.g. with the handshake's last flight): select() will
            # not report them again, so decrypt them now.
            try:
                self._fill()
            except OSError as e:
                self._error = self._error or e  # reported to Thespian below, which then closes the socket
        if self._error is not None or (wanted & _selectors.EVENT_READ and (self._rbuf or self._eof)):
            return 0, True
        if self._obj is None:
            events = _selectors.EVENT_WRITE if not self._server_side else _selectors.EVENT_READ
        elif not self._done:
            events = _selectors.EVENT_READ
        else:
            events = wanted
        if self._wbuf or self._out.pending:
            events |= _selectors.EVENT_WRITE
        return events, False

    def _on_ready(self, events: int, wanted: int) -> int:
        """Act on kernel readiness; the events of `wanted` to report to Thespian."""
        try:
            if events & _selectors.EVENT_WRITE and (self._wbuf or self._out.pending):
                self._flush()
            if not self._done and not self._ready():
                return 0
            if wanted & _selectors.EVENT_READ and (events & _selectors.EVENT_READ or self._obj.pending()):  # type: ignore[union-attr]
                self._fill()
        except BlockingIOError:
            return 0
        except OSError as e:
            if self._error is None:
                self._error = e
            return wanted
        report = 0
        if wanted & _selectors.EVENT_READ and (self._rbuf or self._eof or self._error is not None):
            report |= _selectors.EVENT_READ
        if wanted & _selectors.EVENT_WRITE and (self._error is not None or len(self._wbuf) < _HIGH_WATER):
            report |= _selectors.EVENT_WRITE
        return report


class TlsListener(socket.socket):
    """The listening socket: accepts connections as server-side TlsSockets."""

    def __init__(self, *args: Any, contexts: _Contexts, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._contexts = contexts

    def accept(self) -> tuple[TlsSocket, Any]:
        """Accept a connection; its TLS handshake runs later, without blocking, in the transport's loop."""
        fd, addr = self._accept()  # type: ignore[attr-defined]  # (socket.socket's, untyped)
        sock = TlsSocket(self.family, self.type, self.proto, fileno=fd, contexts=self._contexts, server_side=True)
        return sock, addr


class _Selector:
    """Stands in for selectors.DefaultSelector in Thespian's TCP transport (see the module docstring)."""

    def __init__(self) -> None:
        self._wanted: dict[int, int] = {}
        self._objs: dict[int, FileDescriptorLike] = {}

    def register(self, fileobj: FileDescriptorLike, events: int, data: object = None) -> _selectors.SelectorKey:
        """Record interest in `events` on `fileobj`."""
        fd = fileobj if isinstance(fileobj, int) else fileobj.fileno()
        self._wanted[fd] = self._wanted.get(fd, 0) | events
        self._objs[fd] = fileobj
        return _selectors.SelectorKey(fileobj, fd, events, data)

    def select(self, timeout: float | None = None) -> list[tuple[_selectors.SelectorKey, int]]:
        """Like DefaultSelector.select, with TLS sockets reported as ready only when Thespian can use them."""
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        while True:
            ready: dict[int, int] = {}
            inner = PollPass()  # (one poll(2), not an epoll selector made and closed per pass: thespian_fixes)
            try:
                for fd, wanted in self._wanted.items():
                    sock = _live.get(fd)
                    if sock is None:
                        inner.register(fd, wanted)
                        continue
                    events, now = sock._interest(wanted)
                    if now:
                        ready[fd] = wanted
                    elif events:
                        inner.register(fd, events)
                wait = 0.0 if ready else (None if deadline is None else max(0.0, deadline - time.monotonic()))
                for key, events in inner.select(wait):
                    sock = _live.get(key.fd)
                    report = events if sock is None else sock._on_ready(events, self._wanted[key.fd])
                    if report:
                        ready[key.fd] = ready.get(key.fd, 0) | report
            finally:
                inner.close()
            if ready or (deadline is not None and time.monotonic() >= deadline):
                return [(_selectors.SelectorKey(self._objs[fd], fd, ev, None), ev) for fd, ev in ready.items()]

    def close(self) -> None:
        """Forget every registration."""
        self._wanted.clear()
        self._objs.clear()


class _SelectorsModule:
    """What Thespian's TCPTransport module sees as `selectors`."""

    EVENT_READ = _selectors.EVENT_READ
    EVENT_WRITE = _selectors.EVENT_WRITE
    DefaultSelector = _Selector


def apply() -> None:
    """Patch Thespian's TCP transport once per process (idempotent); forked actor processes inherit it."""
    global _applied
    if _applied:
        return
    from thespian.system.transport import TCPTransport as tcp

    original_init = tcp.TCPTransport.__init__
    original_new_socket = tcp.TCPTransport.new_socket

    def init(self: Any, *args: object, **kwargs: object) -> None:
        self._reprise_tls = _current  # fixed per transport, like its HMAC key: a later use() must not change it
        original_init(self, *args, **kwargs)
        if self._reprise_tls is not None:
            plain = self.socket
            self.socket = TlsListener(plain.family, plain.type, plain.proto, fileno=plain.detach(),
                                      contexts=self._reprise_tls)

    def new_socket(self: Any, op: Callable[..., object], *args: object, **kwargs: object) -> Any:
        contexts = getattr(self, "_reprise_tls", None)
        if contexts is not None and op is socket.socket:
            def op(*a: Any, **kw: Any) -> TlsSocket:
                return TlsSocket(*a, contexts=contexts, server_side=False, **kw)
        return original_new_socket(self, op, *args, **kwargs)

    tcp.TCPTransport.__init__ = init
    tcp.TCPTransport.new_socket = new_socket
    # Only Thespian's TCP transport module sees the shim; for plain sockets it is a DefaultSelector.
    tcp.selectors = _SelectorsModule
    _applied = True

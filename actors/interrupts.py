"""Ctrl-C in a client's call into Thespian: raised where Thespian's transport can take it.

Thespian's TCP transport is not written for an exception raised at any bytecode: a KeyboardInterrupt while it
acknowledged a frame or sent one left a socket it had taken out of its tables open and unlisted (the peer host
waiting on it for good), or its exclusive-processing flag set: the client's next asks timed out, and the `with`
block's shutdown waited its whole timeout and killed the system (6 of 30 Ctrl-Cs of a client in a tell/ask loop;
tests/actors/test_ctrl_c.py).

While the main thread is inside a client call (`guarded()`), a signal whose handler is Python's (SIGINT, and
SIGTERM or SIGHUP when the program handles them in Python: `reprise up`'s Terminated) runs that handler
at once only where no Thespian state is half-changed: outside Thespian's frames, or in the poll(2) between two
passes of its loop (thespian_fixes.PollPass.select, one loop deep). Anywhere else it is held, and run at the
next such poll or when the call returns: within one pass of the loop (milliseconds). Outside a client call,
and in other threads, nothing changes: the handler installed in front of the program's (from the first client
call until the System closes, and again if the program replaces it) calls the program's at once. Inside `held()`
(connect making its client endpoint) nothing is a safe point: what was held runs when the outermost call ends.
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

import thespian

Handler = Callable[[int, FrameType | None], Any]

_SIGNALS = tuple(getattr(signal, name) for name in ("SIGINT", "SIGTERM", "SIGHUP") if hasattr(signal, name))
_MAIN = threading.main_thread().ident
# The C module's: signal.getsignal tries to make each handler an enum member (an exception per callable: ~2 us,
# at every outermost client call).
_getsignal: Callable[[int], object] = importlib.import_module("_signal").getsignal
_THESPIAN_DIR = os.path.abspath(thespian.__path__[0]) + os.sep

pending: list[int] = []
"""Signals held until the next safe point (read by thespian_fixes.PollPass.select on every pass)."""
_previous: dict[int, Handler] = {}
_depth = 0  # nesting of guarded() in the main thread
_holding = 0  # nesting of held() in the main thread: no safe point inside, not even Thespian's polls
_codes: tuple[Any, Any] | None = None  # (TCPTransport._runWithExpiry, PollPass.select) code objects


class guarded:  # noqa: N801 - used as `with interrupts.guarded():`, like a function
    """Around a client's call into Thespian (a no-op outside the main thread): signals are held while Thespian
    state is half-changed, and what was held runs when the outermost one ends."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _depth
        if threading.get_ident() != _MAIN:
            return
        if _depth == 0:
            _install()
        _depth += 1

    def __exit__(self, *exc: object) -> None:
        global _depth
        if threading.get_ident() != _MAIN or _depth == 0:
            return
        _depth -= 1
        if _depth == 0 and pending:
            deliver(sys._getframe(1))


class held(guarded):  # noqa: N801 - used as `with interrupts.held():`
    """As guarded, but signals are held until the outermost guarded() ends, through Thespian's polls too: for a call
    whose result must not be lost (a client endpoint being made, which an exception from inside would leave open,
    unreachable, taking connections it never reads). Only around calls that end soon by themselves."""

    __slots__ = ()

    def __enter__(self) -> None:
        global _holding
        super().__enter__()
        if threading.get_ident() == _MAIN:
            _holding += 1

    def __exit__(self, *exc: object) -> None:
        global _holding
        if threading.get_ident() == _MAIN and _holding:
            _holding -= 1
        super().__exit__(*exc)


def _install() -> None:
    """Put `_handler` in front of each Python-level handler of _SIGNALS (again if the program replaced it)."""
    for signum in _SIGNALS:
        current = _getsignal(signum)
        if current is _handler or not callable(current):  # (SIG_IGN, SIG_DFL, or one set from C: left alone)
            continue
        _previous[signum] = current
        signal.signal(signum, _handler)


def release() -> None:
    """Give each signal its program's handler back (a System closed); guarded() puts ours back when used again."""
    if threading.get_ident() != _MAIN:
        return
    for signum, handler in list(_previous.items()):
        if signal.getsignal(signum) is _handler:
            signal.signal(signum, handler)
        del _previous[signum]


def _handler(signum: int, frame: FrameType | None) -> None:
    if _depth and (_holding or not _safe(frame)):
        if signum not in pending:  # (the same signal twice before a safe point is one, as Python's own are)
            pending.append(signum)
        return
    _run(signum, frame)


def deliver(frame: FrameType | None) -> None:
    """Run the held signals' handlers (the first that raises ends it: its exception is the call's)."""
    held = list(pending)
    pending.clear()
    for signum in held:
        _run(signum, frame)


def deliver_at_poll(frame: FrameType | None) -> None:
    """PollPass.select, with signals held: run their handlers if this poll is a safe point."""
    if not _holding and _safe(frame):
        deliver(frame)


def _run(signum: int, frame: FrameType | None) -> None:
    handler = _previous.get(signum, signal.default_int_handler if signum == signal.SIGINT else None)
    if handler is not None:
        handler(signum, frame)


def _safe(frame: FrameType | None) -> bool:
    """Whether an exception raised in `frame` leaves Thespian's state whole: no Thespian frame below it, or it is
    the poll between two passes of the transport's loop, not inside another pass (a drain run from a pass)."""
    run_code, poll_code = _codes or _load_codes()
    at_poll = frame is not None and frame.f_code is poll_code
    runs = 0
    thespian = False
    while frame is not None:
        code = frame.f_code
        if code is run_code:
            runs += 1
        elif code.co_filename.startswith(_THESPIAN_DIR):
            thespian = True
        frame = frame.f_back
    return runs == 1 and at_poll if runs or thespian else True


def _load_codes() -> tuple[Any, Any]:
    global _codes
    from thespian.system.transport.TCPTransport import TCPTransport

    from .thespian_fixes import PollPass

    _codes = (TCPTransport._runWithExpiry.__code__, PollPass.select.__code__)
    return _codes

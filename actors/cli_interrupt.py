"""Ctrl-C while the `reprise` command is still importing (its first ~0.4 s): one line and exit code 130.

The console script imports actors.cli before main() runs, so a KeyboardInterrupt raised in those imports
reached no handler of the CLI: Python printed a traceback through importlib. actors/__init__ imports this
module first, which runs `guard_imports`; main() calls `release` before it does anything.
"""

from __future__ import annotations

import os
import signal
import sys
from types import FrameType

INTERRUPTED = 130  # (128 + SIGINT, as a shell reports a command Ctrl-C ended)
SCRIPT = "reprise"


def _interrupted(signum: int, frame: FrameType | None) -> None:
    # Nothing has started yet (no system, no file written): leave at once, without a traceback.
    sys.stderr.write(f"{SCRIPT}: interrupted while starting; nothing was started\n")
    raise SystemExit(INTERRUPTED)


def guard_imports() -> None:
    """In the `reprise` console script only (not in programs that import actors): Ctrl-C until `release`
    exits with a line and code 130 instead of a traceback. A SIGINT left ignored (a background job) stays so."""
    main = sys.modules.get("__main__")
    if os.path.basename(getattr(main, "__file__", None) or "") != SCRIPT:
        return
    if signal.getsignal(signal.SIGINT) is signal.default_int_handler:
        signal.signal(signal.SIGINT, _interrupted)


def release() -> None:
    """From here on Ctrl-C raises KeyboardInterrupt as usual: the commands stop what they started on it."""
    if signal.getsignal(signal.SIGINT) is _interrupted:
        signal.signal(signal.SIGINT, signal.default_int_handler)


guard_imports()  # (at import: actors/__init__ imports this module before anything else)

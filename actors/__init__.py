"""Actors: systems, paths, entity hosts, batched transport, timers and dead letters on Thespian.

    import actors
    with actors.start("multiproc") as system:
        system.spawn(Ledger, path="/user/ledger")
        system.spawn(Account, path="/user/accounts", entities=True)
        system.tell("/user/accounts/42", Deposit(10))
"""

from . import netsec, thespian_fixes
from .actor import Actor
from .errors import (
    AskTimeout,
    InvalidPath,
    PathTaken,
    RepriseError,
    SpawnFailed,
    SystemNotRunning,
    UnpicklableMessage,
)
from .messages import DeadLetter, DeadLetters, HostInfo, Scatter, SystemStatus
from .paths import validate_path
from .system import Probe, System, connect, free_port, shutdown, start
from .timers import Timer

netsec.apply()
thespian_fixes.apply()

__all__ = [
    "Actor", "AskTimeout", "DeadLetter", "DeadLetters", "HostInfo", "InvalidPath", "PathTaken", "Probe",
    "RepriseError", "Scatter", "SpawnFailed", "System", "SystemNotRunning", "SystemStatus", "Timer",
    "UnpicklableMessage", "connect", "free_port", "shutdown", "start", "validate_path",
]

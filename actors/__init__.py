"""Actors: systems, paths, entity hosts, batched transport, timers and dead letters on Thespian.

    import actors
    with actors.start("multiproc") as system:
        system.spawn(Ledger, path="/user/ledger")
        system.spawn(Account, path="/user/accounts", entities=True)
        system.tell("/user/accounts/42", Deposit(10))
"""

# cli_interrupt first: importing it makes a Ctrl-C while the `reprise` command imports the rest exit quietly.
# thespian_fixes refuses any Thespian but the pinned one.
from . import cli_interrupt, netsec, thespian_fixes  # noqa: F401
from .actor import Actor
from .auth import AuthenticationFailed, MissingSecret, SecretUnavailable
from .context import ActorContext
from .error_log import ActorError, Errors
from .errors import (
    ActorFailed,
    AskTimeout,
    ConfigError,
    InvalidPath,
    MessageNotSent,
    MessageUndelivered,
    PathTaken,
    RepriseError,
    SendTimeout,
    SpawnCause,
    SpawnFailed,
    SystemNotRunning,
    UnpicklableMessage,
)
from .lifecycle import Lifecycle
from .messages import DeadLetter, DeadLetters, HostInfo, Move, Scatter, SystemStatus
from .paths import validate_path
from .supervision import Backoff, InvalidBackoff
from .system import Probe, System, connect, free_port, shutdown, start
from .timers import Timer
from .tls import TlsConfig, TlsError

netsec.apply()
thespian_fixes.apply()

__all__ = [
    "Actor", "ActorContext", "ActorError", "ActorFailed", "AskTimeout", "Backoff", "ConfigError",
    "DeadLetter", "DeadLetters", "Errors", "HostInfo", "InvalidBackoff", "InvalidPath", "Lifecycle",
    "MessageNotSent", "MessageUndelivered", "Move", "PathTaken", "Probe", "RepriseError", "Scatter", "SendTimeout", "SpawnCause", "SpawnFailed", "System",
    "SystemNotRunning", "SystemStatus", "Timer", "UnpicklableMessage", "connect", "free_port", "shutdown",
    "start", "validate_path", "AuthenticationFailed", "MissingSecret", "SecretUnavailable", "TlsConfig",
    "TlsError",
]

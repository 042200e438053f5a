"""Errors raised by the actors layer; each names what was wrong and how to fix it.

Every one subclasses `RepriseError`, Reprise's single error root. It is defined in journal/errors.py, the
bottom layer, so that journal, actors, persistence and spark_bridge errors all share it without an
upward import; `actors.RepriseError` is that same class, re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from journal.errors import RepriseError

__all__ = [
    "ActorFailed", "AskTimeout", "ConfigError", "InvalidPath", "MessageNotSent", "PathTaken", "RepriseError",
    "SendTimeout", "SpawnCause", "SpawnFailed", "SystemNotRunning", "ThespianVersionError", "UnpicklableMessage",
]


class InvalidPath(RepriseError, ValueError):
    """A path is malformed, or a wildcard was given where one destination is meant."""


class PathTaken(RepriseError):
    """A spawn asked for a path (or a prefix of it) that another actor already serves."""


class SystemNotRunning(RepriseError, ConnectionError):
    """Nothing listens on the admin port that `actors.connect` was given.

    `nothing_listens` is True when no process at all listens at that address (not: one listening elsewhere, an
    admin without a guardian, a closed handle), so callers act on it without matching the message's wording.
    """

    nothing_listens: bool = False  # (also what an instance pickled before the field existed unpickles with)

    def __init__(self, text: str, nothing_listens: bool = False) -> None:
        super().__init__(text)
        self.nothing_listens = nothing_listens

    def __reduce__(self) -> tuple[type[SystemNotRunning], tuple[str, bool]]:
        return type(self), (str(self), self.nothing_listens)


class LeaderUnreachable(SystemNotRunning):
    """A member node's leader does not answer (down or unreachable).

    From `actors.connect`: the member itself runs (`member_runs`), and `actors.shutdown` (`reprise down`) still
    stops it. From `actors.start` of a member (`member_runs` False): nothing listens at the leader's address,
    and nothing of the member was started.
    """

    member_runs: bool = True  # (as SystemNotRunning.nothing_listens: the default for older pickles)

    def __init__(self, text: str, member_runs: bool = True) -> None:
        super().__init__(text)
        self.member_runs = member_runs

    def __reduce__(self) -> tuple[type[LeaderUnreachable], tuple[str, bool]]:
        return type(self), (str(self), self.member_runs)


class AskTimeout(RepriseError, TimeoutError):
    """No reply arrived within the `ask` timeout."""


class UnpicklableMessage(RepriseError, TypeError):
    """A message cannot cross a process boundary (not picklable, or defined in `__main__`)."""


@dataclass(frozen=True)
class SpawnCause:
    """What a spawn failed on, for callers that act on it (the CLI's hint) without parsing the message.

    kind "journal" / "snapshot_store": that store could not be opened (`where`: its URL, credentials redacted);
    "no_journal": a persistent actor had no journal URL at all; "admin_port": the system's admin port is taken
    (`where`: the port); "path_taken": another actor serves the path or a prefix of it (`where`: that path).
    `store_error` says, for "journal" / "snapshot_store", what the store refused with when the fix differs:
    "access_denied" (the database role lacks a GRANT), "not_a_journal" (the URL names another application's file).
    """

    kind: Literal["journal", "snapshot_store", "no_journal", "admin_port", "path_taken"]
    where: str = ""
    store_error: Literal["access_denied", "not_a_journal"] | None = None


class SpawnFailed(RepriseError):
    """The actor system could not start the requested actor or entity host.

    `cause` says what failed when it is known (None otherwise); it crosses process boundaries with the error
    (host -> guardian -> client), so callers read it instead of matching the message's wording.
    """

    cause: SpawnCause | None = None  # (also what an instance pickled before the field existed unpickles with)

    def __init__(self, text: str, cause: SpawnCause | None = None) -> None:
        super().__init__(text)
        self.cause = cause

    def __reduce__(self) -> tuple[type[SpawnFailed], tuple[str, SpawnCause | None]]:
        return type(self), (str(self), self.cause)


class ConfigError(RepriseError, ValueError):
    """A configuration value (of start, spawn or a topology file) is invalid; the message says which and why."""


class ThespianVersionError(RepriseError, ImportError):
    """The installed Thespian is not the version whose internals actors/thespian_fixes.py patches."""


class MessageNotSent(RepriseError, ConnectionError):
    """A `tell` (or `ask`) could not hand its message to the actor system: it was not sent; retrying is safe."""


class SendTimeout(RepriseError, TimeoutError):
    """The message's host did not take it in time.

    `may_be_delivered` False: it was not sent (it waited behind an earlier message to the same host, still not
    acknowledged, or its connection did not complete or took only part of it; it was withdrawn): retrying is safe.
    True: it was written whole to the host's connection and never acknowledged; it stays there and may still be
    delivered (retrying may deliver it twice). If that host's process is then found gone, the message is rerouted
    through the guardian (held for the host's next process), as a tell that finds it gone is; if the transport
    gives it up (no acknowledgement within Thespian's transmit period), the client logs a warning naming it.
    """

    def __init__(self, text: str, may_be_delivered: bool = True) -> None:
        super().__init__(text)
        self.may_be_delivered = may_be_delivered

    def __reduce__(self) -> tuple[type[SendTimeout], tuple[str, bool]]:
        return type(self), (str(self), self.may_be_delivered)


class MessageUndelivered(AskTimeout):
    """The message of an `ask` became a dead letter (no actor serves its path, the actor stopped, ...): no reply
    will come, and the ask says so at once instead of at its timeout. `path` is the target, `reason` the dead
    letter's. An AskTimeout, so that code handling a missing reply handles this one too."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"the message to {path} was not delivered (a dead letter): {reason}")
        self.path = path
        self.reason = reason

    def __reduce__(self) -> tuple[type[MessageUndelivered], tuple[str, str]]:
        return type(self), (self.path, self.reason)


class ActorFailed(RepriseError):
    """The actor handling an `ask` raised on that very message (it restarts as usual).

    `remote_type` is the exception's type name in the actor, `remote_message` its message, `path` the actor.
    """

    def __init__(self, path: str, remote_type: str, remote_message: str) -> None:
        super().__init__(f"actor {path} failed on this message: {remote_type}: {remote_message}")
        self.path = path
        self.remote_type = remote_type
        self.remote_message = remote_message

    def __reduce__(self) -> tuple[type[ActorFailed], tuple[str, str, str]]:
        return type(self), (self.path, self.remote_type, self.remote_message)

"""Warnings for snapshot and delete failures a persistent actor class does not handle (Akka's Eventsourced.unhandled).

In Akka an unhandled SaveSnapshotFailure, DeleteSnapshotFailure, DeleteSnapshotsFailure or DeleteMessagesFailure
is logged as a warning; a handled one is not. A Python receive_command has no "isDefinedAt": here a class handles
one of these replies when its own code names the reply's type (`isinstance(message, DeleteMessagesFailure)`,
`type(message) is ...`, `case DeleteMessagesFailure():`) in a method of any class of its MRO, or in a function of
their modules that such a method calls; PersistentActor's and Actor's own methods do not count (they make the
replies, or pass them on). Code that names none of them (the usual `if`/`elif` over the actor's own commands)
leaves the failure unhandled: the warning is all anyone hears of it, and the actor goes on, as in Akka.
"""

from __future__ import annotations

import functools
import inspect
import logging
from typing import Any

from persistence.bytecode import reachable_code
from persistence.messages import (
    DeleteMessagesFailure,
    DeleteSnapshotFailure,
    DeleteSnapshotsFailure,
    SaveSnapshotFailure,
)

log = logging.getLogger("reprise.persistence")

FAILURES = (SaveSnapshotFailure, DeleteSnapshotFailure, DeleteSnapshotsFailure, DeleteMessagesFailure)
# Where PersistentActor and Actor live: their methods create the failures (delete_messages names
# DeleteMessagesFailure) or only pass messages on, so naming a type there handles nothing.
_NOT_HANDLERS = ("persistence.persistent_actor", "actors.")


def _functions_of(value: object) -> object:
    """The plain function behind a function, staticmethod or classmethod; None for anything else (a class
    attribute may be any object, even one that raises on every attribute read: the actors' DETACHED context)."""
    if isinstance(value, staticmethod | classmethod):
        value = value.__func__
    return inspect.unwrap(value) if inspect.isfunction(value) else None


@functools.cache
def _command_names(cls: type) -> frozenset[str]:
    """Every name the methods of `cls` read (globals and attributes), with the module functions they call.

    All its methods, not only those receive_command calls by name: a dispatch through getattr (`cmd_<kind>`)
    reaches methods no call names. Computed once per class, when the first of these failures reaches one."""
    def ours(function: object) -> bool:
        return not (getattr(function, "__module__", None) or "").startswith(_NOT_HANDLERS)

    def follow(name: str, namespace: dict[str, Any]) -> object:
        called = _functions_of(namespace.get(name))  # on_delete(self, message): a helper of its module
        return called if inspect.isfunction(called) and ours(called) else None

    methods = [f for klass in cls.__mro__ for f in map(_functions_of, vars(klass).values()) if f is not None and ours(f)]
    names: set[str] = set()
    for code in reachable_code(methods, follow):
        if code is not None:
            names.update(code.co_names)
    return frozenset(names)


def handles(cls: type, failure: type) -> bool:
    """True if the command code of `cls` names `failure` (a reply type of FAILURES): it handles it."""
    return failure.__name__ in _command_names(cls)


def warn_if_unhandled(actor: object, message: object) -> None:
    """Log Akka's warning for `message`, one of FAILURES told to `actor`, unless the actor's class handles it."""
    kind = type(message)
    if handles(type(actor), kind):
        return
    pid = getattr(actor, "persistence_id", "?")
    hint = f"(handle {kind.__name__} in receive_command to act on it)"
    if isinstance(message, DeleteMessagesFailure):
        log.warning("Failed to deleteMessages toSequenceNr [%d] for persistenceId [%s] due to [%s: %s] %s",
                    message.to_sequence_nr, pid, type(message.cause).__name__, message.cause, hint)
    elif isinstance(message, SaveSnapshotFailure | DeleteSnapshotFailure):
        what = "saveSnapshot" if isinstance(message, SaveSnapshotFailure) else "deleteSnapshot"
        log.warning("Failed to %s given metadata [%s] due to: [%s: %s] %s", what, message.metadata,
                    type(message.cause).__name__, message.cause, hint)
    elif isinstance(message, DeleteSnapshotsFailure):
        log.warning("Failed to deleteSnapshots given criteria [%s] for persistenceId [%s] due to: [%s: %s] %s",
                    message.criteria, pid, type(message.cause).__name__, message.cause, hint)

"""Reprise's error root, and the exceptions raised by journals, snapshot stores and the serializer.

`RepriseError` lives here, in the bottom layer, so that the errors of every layer above can subclass
it with a downward arrow only; the actors package re-exports this very class as `actors.RepriseError`.
"""

from __future__ import annotations


class RepriseError(Exception):
    """Base class of every error Reprise raises on purpose (each also keeps the builtin base users catch)."""


class JournalError(RepriseError):
    """A journal or snapshot-store operation failed, or its outcome is unknown (I/O, lost connection)."""


class NotAJournal(JournalError):
    """The URL names a store that is not a Reprise journal (another application's file, or no database at all)."""


class JournalAccessDenied(JournalError):
    """The database refused this role an operation on the journal (PostgreSQL's insufficient_privilege): a
    missing GRANT, not a fault of the journal."""


class JournalCorruption(JournalError):
    """A stored record failed its integrity check; names the persistence id and sequence number."""

    def __init__(self, message: str, persistence_id: str | None = None, sequence_nr: int | None = None):
        super().__init__(message)
        self.persistence_id = persistence_id
        self.sequence_nr = sequence_nr


class SequenceNrTaken(JournalError):
    """A write_messages call stored nothing: a sequence number of `persistence_ids` is stored already (another
    writer of those ids?) or appears twice in the call. The writes of other persistence ids may go again."""

    def __init__(self, message: str, persistence_ids: tuple[str, ...] = ()):
        super().__init__(message)
        self.persistence_ids = persistence_ids

    def __reduce__(self) -> tuple[type[SequenceNrTaken], tuple[str, tuple[str, ...]]]:
        return type(self), (str(self), self.persistence_ids)


class SerializationError(JournalError):
    """A payload could not be serialized, or a stored payload could not be deserialized.

    `unknown_manifest` is the stored type name no class is registered for, when that is why (None otherwise):
    the fix is then to import the module that registers it, which callers read here, not in the wording.
    """

    unknown_manifest: str | None = None  # (also what an instance pickled before the field existed unpickles with)

    def __init__(self, message: str, unknown_manifest: str | None = None) -> None:
        super().__init__(message)
        self.unknown_manifest = unknown_manifest

    def __reduce__(self) -> tuple[type[SerializationError], tuple[str, str | None]]:
        return type(self), (str(self), self.unknown_manifest)


class InvalidQuery(RepriseError, ValueError):
    """A journal query was given an argument of the wrong type or range (an offset, a tag, a timeout)."""


class InvalidUrl(RepriseError, ValueError):
    """A journal or snapshot-store URL is malformed, or its scheme is not registered.

    `problem` says what is wrong and `fix` (when given) what to give instead; str() is "problem: fix".
    """

    def __init__(self, problem: str, fix: str | None = None) -> None:
        super().__init__(f"{problem}: {fix}" if fix else problem)
        self.problem = problem
        self.fix = fix

"""Exceptions raised by journals, snapshot stores and the serializer."""

from __future__ import annotations


class JournalError(Exception):
    """A journal or snapshot-store operation failed, or its outcome is unknown (I/O, lost connection)."""


class JournalCorruption(JournalError):
    """A stored record failed its integrity check; names the persistence id and sequence number."""

    def __init__(self, message: str, persistence_id: str | None = None, sequence_nr: int | None = None):
        super().__init__(message)
        self.persistence_id = persistence_id
        self.sequence_nr = sequence_nr


class SerializationError(JournalError):
    """A payload could not be serialized, or a stored payload could not be deserialized."""

"""The data model shared by journals and snapshot stores (Akka's PersistentRepr, AtomicWrite, ...)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, ClassVar

MAX_SEQUENCE_NR = 2**63 - 1
"""Akka's Long.MaxValue: 'no upper bound' for sequence numbers, counts and timestamps."""

_NO_TAGS: frozenset[str] = frozenset()


@dataclass(frozen=True, eq=False)
class PersistentRepr:
    """One stored event; equality ignores `timestamp` and `metadata` (as in Akka)."""

    payload: Any
    sequence_nr: int = 0
    persistence_id: str = ""
    manifest: str = ""
    writer_uuid: str = ""
    timestamp: int = 0
    tags: frozenset[str] = _NO_TAGS
    metadata: Any = None

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, PersistentRepr):
            return NotImplemented
        return (
            self.sequence_nr == other.sequence_nr
            and self.persistence_id == other.persistence_id
            and self.payload == other.payload
            and self.manifest == other.manifest
            and self.writer_uuid == other.writer_uuid
            and self.tags == other.tags
        )

    def __hash__(self) -> int:
        return hash((self.persistence_id, self.sequence_nr, self.manifest, self.writer_uuid))

    def with_timestamp(self, timestamp: int) -> PersistentRepr:
        """Return a copy stamped with `timestamp` (ms since the epoch)."""
        return PersistentRepr(
            self.payload, self.sequence_nr, self.persistence_id, self.manifest, self.writer_uuid,
            timestamp, self.tags, self.metadata,
        )


def replayed_repr(payload: object, sequence_nr: int, persistence_id: str, manifest: str, writer_uuid: str,
                  timestamp: int, tags: frozenset[str], metadata: object, _extra: object = None) -> PersistentRepr:
    """Build a PersistentRepr without the frozen __init__ (twice as fast; the replay hot path). (`_extra` is
    ignored: journal.records' decode loop passes queries their offset there.)"""
    r = _new(PersistentRepr)
    _set(r, "__dict__", {"payload": payload, "sequence_nr": sequence_nr, "persistence_id": persistence_id,
                         "manifest": manifest, "writer_uuid": writer_uuid, "timestamp": timestamp,
                         "tags": tags, "metadata": metadata})
    return r


_new = object.__new__
_set = object.__setattr__


@dataclass(frozen=True, slots=True)
class AtomicWrite:
    """Reprs of one persistence id that are stored all together or not at all."""

    payload: tuple[PersistentRepr, ...]

    def __init__(self, payload: Iterable[PersistentRepr]):
        reprs = tuple(payload)
        if not reprs:
            raise ValueError("payload of AtomicWrite must not be empty!")
        pid = reprs[0].persistence_id
        if not pid:
            raise ValueError("AtomicWrite needs a persistence id: PersistentRepr.persistence_id is empty")
        for r in reprs:
            if r.persistence_id != pid:
                raise ValueError(
                    f"AtomicWrite must contain messages for the same persistenceId, "
                    f"yet different persistenceIds found: {sorted({x.persistence_id for x in reprs})}"
                )
        object.__setattr__(self, "payload", reprs)

    @property
    def persistence_id(self) -> str:
        """The persistence id shared by all reprs."""
        return self.payload[0].persistence_id

    @property
    def lowest_sequence_nr(self) -> int:
        """The sequence number of the first repr."""
        return self.payload[0].sequence_nr

    @property
    def highest_sequence_nr(self) -> int:
        """The sequence number of the last repr."""
        return self.payload[-1].sequence_nr

    @property
    def size(self) -> int:
        """The number of reprs."""
        return len(self.payload)


@dataclass(frozen=True, slots=True, order=True)
class SnapshotMetadata:
    """Identifies a snapshot; ordering by (pid, seq nr, timestamp) makes the greatest the youngest."""

    persistence_id: str
    sequence_nr: int
    timestamp: int = 0
    metadata: Any = field(default=None, compare=False)


@dataclass(frozen=True, slots=True)
class SnapshotSelectionCriteria:
    """Inclusive bounds selecting snapshots by sequence number and timestamp."""

    max_sequence_nr: int = MAX_SEQUENCE_NR
    max_timestamp: int = MAX_SEQUENCE_NR
    min_sequence_nr: int = 0
    min_timestamp: int = 0

    LATEST: ClassVar[SnapshotSelectionCriteria]
    NONE: ClassVar[SnapshotSelectionCriteria]

    def matches(self, md: SnapshotMetadata) -> bool:
        """True when `md` lies within all four bounds."""
        return (
            self.min_sequence_nr <= md.sequence_nr <= self.max_sequence_nr
            and self.min_timestamp <= md.timestamp <= self.max_timestamp
        )

    def limit(self, to_sequence_nr: int) -> SnapshotSelectionCriteria:
        """Cap max_sequence_nr at `to_sequence_nr` (what the snapshot actor does before loading)."""
        return SnapshotSelectionCriteria(
            min(self.max_sequence_nr, to_sequence_nr), self.max_timestamp,
            self.min_sequence_nr, self.min_timestamp,
        )


SnapshotSelectionCriteria.LATEST = SnapshotSelectionCriteria()
SnapshotSelectionCriteria.NONE = SnapshotSelectionCriteria(max_sequence_nr=0, max_timestamp=0)


@dataclass(frozen=True, slots=True)
class SelectedSnapshot:
    """A loaded snapshot with its metadata."""

    metadata: SnapshotMetadata
    snapshot: Any


@dataclass(frozen=True, slots=True)
class EventEnvelope:
    """An event read by a persistence query; `offset` resumes the query after this event."""

    offset: int
    persistence_id: str
    sequence_nr: int
    event: Any
    timestamp: int
    tags: frozenset[str] = field(default=_NO_TAGS)


@dataclass(frozen=True, slots=True)
class PersistenceIdSummary:
    """One line of `ls`: a persistence id, its highest sequence number and how many events are stored."""

    persistence_id: str
    highest_sequence_nr: int
    event_count: int


@dataclass(frozen=True, slots=True)
class Problem:
    """One finding of `verify`: what is wrong with which record."""

    persistence_id: str | None
    sequence_nr: int | None
    reason: str
    intact: bool = False
    """True when the stored bytes are intact (their checksum holds) but this process cannot build the object (its
    class not registered here, or an upcaster failing): not corruption."""
    unknown_manifest: str | None = None
    """The stored type name no class is registered for here, when that is why it is not buildable."""


@dataclass(frozen=True, slots=True)
class VerifyReport:
    """The result of re-reading every record and checking its checksum."""

    records_checked: int
    snapshots_checked: int
    problems: tuple[Problem, ...]

    @property
    def ok(self) -> bool:
        """True when no problem was found."""
        return not self.problems

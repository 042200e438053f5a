"""Event journal and snapshot store: SQLite (default), in-memory, PostgreSQL; msgpack; a shipped TCK.

    from journal import open_journal, AtomicWrite, PersistentRepr
    j = open_journal("sqlite:///var/lib/app/journal.db")   # or any scheme given to register_scheme
    j.write_messages([AtomicWrite([PersistentRepr("evt", sequence_nr=1, persistence_id="p")])])

Persistence query (every backend): `persistence_ids()`, `events_by_persistence_id(pid, from, to)` and
`events_by_tag(tag, offset)` and `all_events(offset)` yield EventEnvelopes; with `live=True` they keep
following new events until the returned Query is closed (`with j.events_by_tag("t", last, live=True) as q:
for e in q: ...`). `newest_offset(tag=None)` and `events_between(from, to, tag=None)` read offset ranges;
`events_reader(offset, tag=None).read(limit)` reads what is readable now, never waiting (for timers).
"""

from journal.api import EventReader, Journal, Query, SnapshotStore
from journal.errors import (
    InvalidQuery,
    InvalidUrl,
    JournalAccessDenied,
    JournalCorruption,
    JournalError,
    NotAJournal,
    RepriseError,
    SequenceNrTaken,
    SerializationError,
)
from journal.model import (
    MAX_SEQUENCE_NR,
    AtomicWrite,
    EventEnvelope,
    PersistenceIdSummary,
    PersistentRepr,
    Problem,
    SelectedSnapshot,
    SnapshotMetadata,
    SnapshotSelectionCriteria,
    VerifyReport,
)
from journal.registry import register_scheme, registered_schemes, unregister_scheme
from journal.serialization import register_type, register_upcaster, unregister_type
from journal.urls import SCHEMES, missing_journal, open_journal, open_snapshot_store


def verify(url: str) -> VerifyReport:
    """Re-read every record of the journal (and snapshots) at `url`; report corruption by pid and seq nr."""
    try:
        j = open_journal(url)
    except JournalCorruption as e:
        return VerifyReport(0, 0, (Problem(e.persistence_id, e.sequence_nr, str(e)),))
    with j:
        return j.verify()


__all__ = [
    "MAX_SEQUENCE_NR",
    "SCHEMES",
    "AtomicWrite",
    "EventEnvelope",
    "EventReader",
    "InvalidQuery",
    "InvalidUrl",
    "Journal",
    "JournalAccessDenied",
    "JournalCorruption",
    "JournalError",
    "NotAJournal",
    "PersistenceIdSummary",
    "PersistentRepr",
    "Problem",
    "Query",
    "RepriseError",
    "SequenceNrTaken",
    "SelectedSnapshot",
    "SerializationError",
    "SnapshotMetadata",
    "SnapshotSelectionCriteria",
    "SnapshotStore",
    "VerifyReport",
    "missing_journal",
    "open_journal",
    "open_snapshot_store",
    "register_scheme",
    "register_type",
    "registered_schemes",
    "register_upcaster",
    "unregister_scheme",
    "unregister_type",
    "verify",
]

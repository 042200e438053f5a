"""The abstract `Journal` and `SnapshotStore`: Akka's plugin contracts as synchronous Python.

A backend implements a few storage primitives (`_store`, `_read`, ...); the contract logic that must
behave identically everywhere (serialization and rejections, timestamps, replay bounds, checksums,
snapshot selection) lives here once.
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence

from journal.errors import JournalCorruption, JournalError, SerializationError
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
from journal.records import (
    EncodedBatch,
    StoredRow,
    check_row,
    decode_row,
    decode_rows,
    decode_snapshot,
    encode_snapshot,
    encode_writes,
)

__all__ = ["Journal", "SnapshotStore", "now_millis"]

TaggedRow = tuple[int, str, int, bytes, int]
"""(offset, persistence_id, sequence_nr, record bytes, checksum): one event of a tag or tail query."""


def now_millis() -> int:
    """Wall-clock milliseconds since the epoch (Akka's timestamp unit)."""
    return time.time_ns() // 1_000_000


class Journal(ABC):
    """An event journal: write AtomicWrites, replay by persistence id, delete, and query by tag."""

    replay_chunk: int = 1000
    """Rows fetched per round trip while replaying: replay streams, it never loads a whole id."""

    # --- the plugin contract ----------------------------------------------------------------------

    def write_messages(self, messages: Sequence[AtomicWrite]) -> list[BaseException | None]:
        """Store a batch in one transaction; one result per AtomicWrite (None = stored, exception = rejected)."""
        batch, results = encode_writes(messages, now_millis())
        if batch.rows:
            self._store(batch)
        return results

    def replay_messages(
        self, persistence_id: str, from_sequence_nr: int = 1, to_sequence_nr: int = MAX_SEQUENCE_NR,
        max: int = MAX_SEQUENCE_NR,  # noqa: A002  (Akka's parameter name)
    ) -> Iterator[PersistentRepr]:
        """Stored events with from <= seq nr <= to, ascending, at most `max`; from == -1 means only the last."""
        if max <= 0:
            return iter(())
        if from_sequence_nr == -1:
            highest = self.highest_sequence_nr(persistence_id)
            if highest == 0 or to_sequence_nr < highest:
                return iter(())
            from_sequence_nr = highest
        if from_sequence_nr > to_sequence_nr:
            return iter(())
        return self._replay(persistence_id, from_sequence_nr if from_sequence_nr > 0 else 0, to_sequence_nr, max)

    def _replay(self, pid: str, start: int, end: int, limit: int) -> Iterator[PersistentRepr]:
        chunk = self.replay_chunk
        while limit > 0:
            rows = self._read(pid, start, end, chunk if limit > chunk else limit)
            if not rows:
                return
            yield from decode_rows(pid, rows)
            if len(rows) < chunk:
                return
            limit -= len(rows)
            start = rows[-1][0] + 1

    def highest_sequence_nr(self, persistence_id: str, from_sequence_nr: int = 0) -> int:
        """The highest sequence number ever stored for the id (0 if none), never lowered by deletes."""
        return self._highest(persistence_id)

    @abstractmethod
    def delete_messages_to(self, persistence_id: str, to_sequence_nr: int) -> None:
        """Delete all events with seq nr <= to (2**63 - 1 deletes all) without lowering the highest."""

    @abstractmethod
    def close(self) -> None:
        """Release connections; a closed journal must not be used again."""

    # --- persistence query (read side) ------------------------------------------------------------

    @abstractmethod
    def current_persistence_ids(self) -> Iterator[str]:
        """Every persistence id that has ever been written (sorted)."""

    def events_by_tag(self, tag: str, offset: int = 0) -> Iterator[EventEnvelope]:
        """Events carrying `tag` with a global offset > `offset`, in offset order; resume from the last offset."""
        while True:
            rows = self._read_tag(tag, offset, self.replay_chunk)
            yield from self._envelopes(rows)
            if len(rows) < self.replay_chunk:
                return
            offset = rows[-1][0]

    # --- tooling (used by `reprise journal ...`) ---------------------------------------------------

    def storage_bytes(self) -> int | None:
        """Bytes the journal occupies on disk (for `reprise status`); None when the backend cannot tell."""
        return None

    @abstractmethod
    def summaries(self) -> list[PersistenceIdSummary]:
        """`ls`: every persistence id with its highest sequence number and number of stored events."""

    def show(self, persistence_id: str, from_sequence_nr: int = 1, max: int = MAX_SEQUENCE_NR,  # noqa: A002
             ) -> Iterator[PersistentRepr]:
        """`show pid --from N`: the stored events of one id from N on."""
        return self.replay_messages(persistence_id, from_sequence_nr, MAX_SEQUENCE_NR, max)

    def tail(self, n: int = 10) -> list[EventEnvelope]:
        """`tail`: the `n` most recently written events of all ids, oldest first."""
        if n <= 0:
            return []
        return list(self._envelopes(sorted(self._read_tail(n))))

    def verify(self) -> VerifyReport:
        """Re-read every event and snapshot and check it; report each bad record by id and sequence number."""
        problems = list(self._verify_storage())
        count = 0
        for pid, seq, blob, ck in self._read_all():
            count += 1
            reason = check_row(pid, seq, blob, ck)
            if reason is not None:
                problems.append(Problem(pid, seq, reason))
        snapshots = 0
        for pid, seq, blob, ck in self._read_all_snapshots():
            snapshots += 1
            try:
                decode_snapshot(pid, seq, bytes(blob), ck)
            except (JournalCorruption, SerializationError) as e:
                problems.append(Problem(pid, seq, f"snapshot: {e}"))
        return VerifyReport(count, snapshots, tuple(problems))

    def __enter__(self) -> Journal:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- what a backend implements ----------------------------------------------------------------

    @abstractmethod
    def _store(self, batch: EncodedBatch) -> None:
        """Store all rows in one transaction; raise JournalError (naming pid and seq nr for a duplicate)."""

    @abstractmethod
    def _read(self, persistence_id: str, start: int, end: int, limit: int) -> Sequence[StoredRow]:
        """Up to `limit` stored rows with start <= seq nr <= end, ascending."""

    @abstractmethod
    def _highest(self, persistence_id: str) -> int:
        """The highest sequence number ever stored, deletes included."""

    @abstractmethod
    def _read_tag(self, tag: str, offset: int, limit: int) -> Sequence[TaggedRow]:
        """Up to `limit` tagged events with offset > `offset`, ascending by offset."""

    @abstractmethod
    def _read_tail(self, n: int) -> Sequence[TaggedRow]:
        """The `n` events with the greatest offsets, in any order."""

    @abstractmethod
    def _read_all(self) -> Iterator[tuple[str, int, bytes, int]]:
        """Every stored event as (pid, seq nr, bytes, checksum), for verify."""

    def _read_all_snapshots(self) -> Iterator[tuple[str, int, bytes, int]]:
        """Every snapshot stored alongside the journal as (pid, seq nr, bytes, checksum), for verify."""
        return iter(())

    def _verify_storage(self) -> Iterator[Problem]:
        """Backend-level integrity findings (e.g. SQLite's integrity_check)."""
        return iter(())

    # --- shared helpers ---------------------------------------------------------------------------

    @staticmethod
    def _envelopes(rows: Sequence[TaggedRow]) -> Iterator[EventEnvelope]:
        for offset, pid, seq, blob, ck in rows:
            r = decode_row(pid, seq, blob, ck)
            yield EventEnvelope(offset, pid, seq, r.payload, r.timestamp, r.tags)

    def _duplicate_error(self, batch: EncodedBatch, cause: BaseException | None = None) -> JournalError:
        """Name the (pid, seq nr) that made a write fail its unique key (after the transaction rolled back)."""
        seen: set[tuple[str, int]] = set()
        by_pid: dict[str, list[int]] = {}
        for pid, seq, _, _ in batch.rows:
            if (pid, seq) in seen:
                return JournalError(f"write rejected: sequence nr {seq} of persistence id {pid!r} "
                                    f"appears twice in one write_messages call")
            seen.add((pid, seq))
            by_pid.setdefault(pid, []).append(seq)
        for pid, seqs in by_pid.items():
            stored = {row[0] for row in self._read(pid, min(seqs), max(seqs), MAX_SEQUENCE_NR)}
            dups = sorted(stored.intersection(seqs))
            if dups:
                return JournalError(
                    f"write failed: sequence nr {dups[0]} of persistence id {pid!r} already exists "
                    f"(another writer uses this persistence id?); nothing of this batch was stored")
        return JournalError(f"write failed on a unique key: {cause}")


class SnapshotStore(ABC):
    """A snapshot store: save, load the youngest matching snapshot, delete."""

    def save(self, metadata: SnapshotMetadata, snapshot: object) -> SnapshotMetadata:
        """Store `snapshot` (overwriting one at the same pid and seq nr); return the metadata with its timestamp."""
        md = SnapshotMetadata(metadata.persistence_id, metadata.sequence_nr, now_millis(), metadata.metadata)
        blob, ck = encode_snapshot(md.persistence_id, md.sequence_nr, md.metadata, snapshot)
        self._save(md, blob, ck)
        return md

    def load(self, persistence_id: str,
             criteria: SnapshotSelectionCriteria = SnapshotSelectionCriteria.LATEST) -> SelectedSnapshot | None:
        """The youngest snapshot matching `criteria`, or None; a matching snapshot that cannot be read raises."""
        row = self._load(persistence_id, criteria)
        if row is None:
            return None
        seq, ts, blob, ck = row
        meta, snapshot = decode_snapshot(persistence_id, seq, bytes(blob), ck)
        return SelectedSnapshot(SnapshotMetadata(persistence_id, seq, ts, meta), snapshot)

    @abstractmethod
    def delete(self, metadata: SnapshotMetadata) -> None:
        """Delete the snapshot at (pid, seq nr); a timestamp of 0 matches any timestamp."""

    @abstractmethod
    def delete_matching(self, persistence_id: str, criteria: SnapshotSelectionCriteria) -> None:
        """Delete every snapshot of the id matching `criteria`."""

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    def __enter__(self) -> SnapshotStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @abstractmethod
    def _save(self, metadata: SnapshotMetadata, blob: bytes, ck: int) -> None:
        """Insert or replace the snapshot row of (pid, seq nr)."""

    @abstractmethod
    def _load(self, persistence_id: str,
              criteria: SnapshotSelectionCriteria) -> tuple[int, int, bytes, int] | None:
        """(seq nr, timestamp, bytes, checksum) of the youngest matching snapshot, or None."""

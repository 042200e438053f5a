"""In-memory journal and snapshot store for tests: `memory://name` instances are shared within one process.

Payloads are serialized exactly as in the durable backends (like Akka's test-serialization), so
rejections, unknown manifests and round trips behave the same.
"""

from __future__ import annotations

import bisect
import itertools
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field

from journal.api import Journal, SnapshotStore, TaggedRow
from journal.errors import JournalError
from journal.model import PersistenceIdSummary, SnapshotMetadata, SnapshotSelectionCriteria
from journal.records import EncodedBatch, StoredRow

__all__ = ["MemoryJournal", "MemorySnapshotStore", "drop_memory_store"]


_Row = tuple[int, bytes, int, int]
"""(sequence nr, record, checksum, global offset) of one stored event."""


@dataclass
class _Events:
    seqs: list[int] = field(default_factory=list)  # sorted, parallel to rows
    rows: list[_Row] = field(default_factory=list)
    highest: int = 0


@dataclass
class _Store:
    lock: threading.RLock = field(default_factory=threading.RLock)
    events: dict[str, _Events] = field(default_factory=dict)  # never removed: a deleted id keeps its highest
    first_written: list[str] = field(default_factory=list)  # the ids of `events`, in the order they were created
    offsets: dict[int, tuple[str, int, bytes, int]] = field(default_factory=dict)  # offset -> row, insertion order
    tags: dict[str, list[int]] = field(default_factory=dict)  # tag -> ascending offsets
    next_offset: itertools.count[int] = field(default_factory=lambda: itertools.count(1))
    snapshots: dict[str, dict[int, tuple[int, bytes, int]]] = field(default_factory=dict)  # seq -> (ts, blob, ck)


_stores: dict[str, _Store] = {}
_stores_lock = threading.Lock()
_anonymous = itertools.count(1)


def _named_store(name: str) -> _Store:
    if not name:
        name = f"\0anonymous-{next(_anonymous)}"  # `memory://` alone: a private store
    with _stores_lock:
        return _stores.setdefault(name, _Store())


def drop_memory_store(name: str) -> None:
    """Forget all events and snapshots of `memory://name`."""
    with _stores_lock:
        _stores.pop(name, None)


class MemoryJournal(Journal):
    """A journal held in process memory."""

    durable = False

    def __init__(self, name: str = ""):
        self._s = _named_store(name)
        self._closed = False

    def _check_open(self) -> None:
        if self._closed:
            raise JournalError("journal is closed")

    def _store(self, batch: EncodedBatch) -> None:
        self._check_open()
        s = self._s
        with s.lock:
            seen: set[tuple[str, int]] = set()
            for pid, seq, _, _ in batch.rows:
                ev = s.events.get(pid)
                i = bisect.bisect_left(ev.seqs, seq) if ev else 0
                if (pid, seq) in seen or (ev and i < len(ev.seqs) and ev.seqs[i] == seq):
                    raise self._duplicate_error(batch)
                seen.add((pid, seq))
            offsets: dict[tuple[str, int], int] = {}
            for pid, seq, blob, ck in batch.rows:
                ev = s.events.get(pid)
                if ev is None:
                    ev = s.events[pid] = _Events()
                    s.first_written.append(pid)
                offset = next(s.next_offset)
                offsets[(pid, seq)] = offset
                i = bisect.bisect_left(ev.seqs, seq)
                ev.seqs.insert(i, seq)
                ev.rows.insert(i, (seq, blob, ck, offset))
                if seq > ev.highest:
                    ev.highest = seq
                s.offsets[offset] = (pid, seq, blob, ck)
            for tag, pid, seq in batch.tag_rows:
                s.tags.setdefault(tag, []).append(offsets[(pid, seq)])

    def _read(self, persistence_id: str, start: int, end: int, limit: int) -> Sequence[StoredRow]:
        self._check_open()
        with self._s.lock:
            return [(seq, blob, ck) for seq, blob, ck, _ in self._slice(persistence_id, start, end, limit)]

    def _slice(self, persistence_id: str, start: int, end: int, limit: int) -> list[_Row]:
        """The rows of `persistence_id` with start <= sequence nr <= end, at most `limit` (call holding the lock)."""
        ev = self._s.events.get(persistence_id)
        if ev is None:
            return []
        i = bisect.bisect_left(ev.seqs, start)
        return ev.rows[i:min(bisect.bisect_right(ev.seqs, end), i + limit)]

    def _highest(self, persistence_id: str) -> int:
        self._check_open()
        ev = self._s.events.get(persistence_id)
        return ev.highest if ev else 0

    def delete_messages_to(self, persistence_id: str, to_sequence_nr: int) -> None:
        """Delete all events with seq nr <= to (2**63 - 1 deletes all) without lowering the highest."""
        self._check_open()
        s = self._s
        with s.lock:
            ev = s.events.get(persistence_id)
            if ev is None:
                return
            j = bisect.bisect_right(ev.seqs, to_sequence_nr)
            gone = {row[3] for row in ev.rows[:j]}
            del ev.seqs[:j], ev.rows[:j]
            for offset in gone:
                del s.offsets[offset]
            for tag, offsets in s.tags.items():
                s.tags[tag] = [o for o in offsets if o not in gone]

    def current_persistence_ids(self) -> Iterator[str]:
        """Every persistence id that has ever been written (sorted)."""
        self._check_open()
        with self._s.lock:
            return iter(sorted(self._s.events))

    def _persistence_ids_poller(self) -> Callable[[], Iterable[str]]:
        """Each poll of a live persistence_ids returns the ids created since the poll before (ids are never removed,
        so a count of those returned is where to go on from), not the whole listing."""
        done = 0

        def poll() -> list[str]:
            nonlocal done
            self._check_open()
            with self._s.lock:
                new = self._s.first_written[done:]
            done += len(new)
            return new
        return poll

    def _read_tag(self, tag: str, offset: int, limit: int, upto: int) -> Sequence[TaggedRow]:
        # Offsets are drawn and stored under the store's lock: they appear in offset order (no horizon).
        self._check_open()
        s = self._s
        with s.lock:
            offsets = s.tags.get(tag, [])
            i = bisect.bisect_right(offsets, offset)
            j = min(bisect.bisect_right(offsets, upto), i + limit)
            return [(o, *s.offsets[o]) for o in offsets[i:j]]

    def _read_ordered(self, offset: int, limit: int, upto: int) -> Sequence[TaggedRow]:
        self._check_open()
        s = self._s
        with s.lock:
            offsets = list(s.offsets)  # ascending: drawn and inserted in order under the lock
            i = bisect.bisect_right(offsets, offset)
            j = min(bisect.bisect_right(offsets, upto), i + limit)
            return [(o, *s.offsets[o]) for o in offsets[i:j]]

    def _newest(self, tag: str | None) -> int:
        self._check_open()
        s = self._s
        with s.lock:
            if tag is None:  # (the dict's last key, not a copy of all of them: every current query asks this)
                return next(reversed(s.offsets), 0)
            offsets = s.tags.get(tag, [])
            return offsets[-1] if offsets else 0

    def _read_events(self, persistence_id: str, start: int, end: int, limit: int) -> Sequence[TaggedRow]:
        self._check_open()
        with self._s.lock:
            return [(o, persistence_id, seq, blob, ck) for seq, blob, ck, o in self._slice(persistence_id, start, end, limit)]

    def _read_tail(self, n: int) -> Sequence[TaggedRow]:
        self._check_open()
        s = self._s
        with s.lock:
            return [(o, *s.offsets[o]) for o in list(s.offsets)[-n:]]

    def _read_all(self) -> Iterator[tuple[str, int, bytes, int]]:
        with self._s.lock:
            rows = [(pid, seq, blob, ck) for pid, ev in sorted(self._s.events.items())
                    for seq, blob, ck, _ in ev.rows]
        return iter(rows)

    def _read_all_snapshots(self) -> Iterator[tuple[str, int, int, bytes, int]]:
        with self._s.lock:
            rows = [(pid, seq, ts, blob, ck) for pid, snaps in sorted(self._s.snapshots.items())
                    for seq, (ts, blob, ck) in sorted(snaps.items())]
        return iter(rows)

    def summaries(self) -> list[PersistenceIdSummary]:
        """`ls`: every persistence id with its highest sequence number and number of stored events."""
        with self._s.lock:
            return [PersistenceIdSummary(pid, ev.highest, len(ev.rows))
                    for pid, ev in sorted(self._s.events.items())]

    def close(self) -> None:
        """Detach from the named store (its contents stay for other instances of the same name)."""
        self._closed = True

    def corrupt(self, persistence_id: str, sequence_nr: int, position: int = -1) -> None:
        """Flip one byte of a stored event (for corruption-detection tests)."""
        with self._s.lock:
            ev = self._s.events[persistence_id]
            i = ev.seqs.index(sequence_nr)
            seq, blob, ck, offset = ev.rows[i]
            b = bytearray(blob)
            b[position] ^= 0xFF
            ev.rows[i] = (seq, bytes(b), ck, offset)
            self._s.offsets[offset] = (persistence_id, seq, bytes(b), ck)


class MemorySnapshotStore(SnapshotStore):
    """A snapshot store held in process memory (shares the named store with `MemoryJournal`)."""

    durable = False

    def __init__(self, name: str = ""):
        self._s = _named_store(name)

    def _save(self, metadata: SnapshotMetadata, blob: bytes, ck: int) -> None:
        with self._s.lock:
            self._s.snapshots.setdefault(metadata.persistence_id, {})[metadata.sequence_nr] = (
                metadata.timestamp, blob, ck)

    def _load(self, persistence_id: str,
              criteria: SnapshotSelectionCriteria) -> tuple[int, int, bytes, int] | None:
        with self._s.lock:
            snaps = self._s.snapshots.get(persistence_id, {})
            for seq in sorted(snaps, reverse=True):
                ts, blob, ck = snaps[seq]
                if criteria.matches(SnapshotMetadata(persistence_id, seq, ts)):
                    return seq, ts, blob, ck
        return None

    def _younger(self, persistence_id: str, after: int, to: int) -> Sequence[tuple[int, int, bytes, int]]:
        with self._s.lock:
            snaps = self._s.snapshots.get(persistence_id, {})
            return [(seq, *snaps[seq]) for seq in sorted(snaps) if after < seq <= to]

    def _delete_range(self, persistence_id: str, min_sequence_nr: int, max_sequence_nr: int) -> None:
        with self._s.lock:
            snaps = self._s.snapshots.get(persistence_id, {})
            for seq in [seq for seq in snaps if min_sequence_nr <= seq <= max_sequence_nr]:
                del snaps[seq]

    def _delete_keys(self, what: str, persistence_id: str, keys: list[tuple[int, int]]) -> None:
        with self._s.lock:
            snaps = self._s.snapshots.get(persistence_id, {})
            for seq, ts in keys:
                found = snaps.get(seq)
                if found is not None and ts in (0, found[0]):
                    del snaps[seq]

    def close(self) -> None:
        """Nothing to release."""

    def corrupt_timestamp(self, persistence_id: str, sequence_nr: int, bit: int) -> None:
        """Flip one bit of a stored snapshot's timestamp (for corruption-detection tests)."""
        with self._s.lock:
            snaps = self._s.snapshots[persistence_id]
            ts, blob, ck = snaps[sequence_nr]
            snaps[sequence_nr] = (ts ^ (1 << bit), blob, ck)

    def corrupt(self, persistence_id: str, sequence_nr: int, position: int = -1) -> None:
        """Flip one byte of a stored snapshot (for corruption-detection tests)."""
        with self._s.lock:
            snaps = self._s.snapshots[persistence_id]
            ts, blob, ck = snaps[sequence_nr]
            b = bytearray(blob)
            b[position] ^= 0xFF
            snaps[sequence_nr] = (ts, bytes(b), ck)

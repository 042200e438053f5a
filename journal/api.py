"""The abstract `Journal` and `SnapshotStore`: Akka's plugin contracts as synchronous Python.

A backend implements a few storage primitives (`_store`, `_read`, ...); the contract logic that must
behave identically everywhere (serialization and rejections, timestamps, replay bounds, checksums,
snapshot selection) lives here once.
"""

from __future__ import annotations

import logging
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Generator, Iterable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial
from typing import TypeVar

from journal.errors import InvalidQuery, JournalCorruption, JournalError, SequenceNrTaken, SerializationError
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
    check_snapshot,
    decode_envelopes,
    decode_rows,
    decode_snapshot,
    encode_snapshot,
    encode_writes,
    problem_of,
)

__all__ = ["EventReader", "Journal", "OrderingHorizon", "Query", "SnapshotStore", "now_millis"]

_log = logging.getLogger(__name__)
T = TypeVar("T")
R = TypeVar("R")

TaggedRow = tuple[int, str, int, bytes, int]
"""(offset, persistence_id, sequence_nr, record bytes, checksum): one event of a tag or tail query."""

OrderingBatch = tuple[Sequence[int], tuple[int, int] | None]
"""What an OrderingHorizon fetches: the next stored offsets (ascending) and, when the database can tell,
(xmin, xmax) of the snapshot they were read in (PostgreSQL's pg_current_snapshot())."""

_GAP_RECHECK = 0.05
"""Seconds between two looks at a gap that may still be in flight (a query waits on it, bounded)."""
_XID_GRACE = 0.25
"""A plain INSERT draws its offset a moment before PostgreSQL gives its transaction an id; until then the
snapshot does not list it as running. Reprise's writes take the id first (journal.postgres's "insert"), so
this margin is for writers that do not (an older Reprise on the same schema): a gap's transaction horizon
is only taken this long after the gap was first seen (see OrderingHorizon)."""


def now_millis() -> int:
    """Wall-clock milliseconds since the epoch (Akka's timestamp unit)."""
    return time.time_ns() // 1_000_000


def _check_seconds(name: str, value: float, most: float) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value <= most:
        raise InvalidQuery(f"{name} must be > 0 and <= {most} seconds, got {value!r}")
    return value


def _check_offset(name: str, value: object) -> int:
    """`value` if it is an int >= 0 (a global offset; 0: from the start), else InvalidQuery naming `name`."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise InvalidQuery(f"{name} must be a global offset: an int >= 0 (0: from the first event; resume from "
                           f"the offset of the last envelope handled), got {value!r}")
    return value


def _check_tag(value: object, optional: bool) -> str | None:
    """`value` if it is a non-empty str (or None where `optional`), else InvalidQuery."""
    if value is None and optional:
        return value
    if isinstance(value, str) and value:
        return _storable_text("tag", value)
    what = "a non-empty str (None: every event)" if optional else "a non-empty str, as returned by tags_for"
    raise InvalidQuery(f"tag must be {what}, got {value!r}")


def _storable_text(name: str, value: str) -> str:
    """`value`, or InvalidQuery for a text no write can hold (a NUL, a lone surrogate): no event has it, and the
    database drivers' own errors for it (PostgreSQL refuses a NUL, SQLite a surrogate) would name neither."""
    try:
        value.encode()
    except UnicodeEncodeError:
        raise InvalidQuery(f"{name} {value!r} holds a lone surrogate, which no journal stores (writes refuse it)") from None
    if "\x00" in value:
        raise InvalidQuery(f"{name} {value!r} holds a NUL character, which no journal stores (writes refuse it)")
    return value


class Query(Iterator[T]):
    """The results of a persistence query, read lazily; `close()` ends it, from any thread.

    A live query (`live=True`) never ends by itself: it waits `poll_interval` between looks for new
    events. While it waits it holds no database connection, but it keeps the journal in use: close the
    query before the journal. Use it as a context manager, or call `close()` from another thread to
    stop a consumer blocked in `next()` (it returns within one poll interval, with StopIteration).
    """

    def __init__(self, body: Callable[[threading.Event], Generator[T, None, None]]):
        self._stop = threading.Event()
        self._body = body(self._stop)

    def __iter__(self) -> Iterator[T]:
        # The generator itself: a for loop then skips this class's __next__ (3% of a query's time).
        # close() still ends it: the generator looks at `_stop` whenever it waits.
        return self._body

    def __next__(self) -> T:
        if self._stop.is_set():
            raise StopIteration
        return next(self._body)

    def close(self) -> None:
        """End the query (idempotent); a `next()` running in another thread returns within one poll interval."""
        self._stop.set()
        try:
            self._body.close()
        except ValueError:  # the generator is running in another thread: it sees `_stop` at its next wait
            pass

    @property
    def closed(self) -> bool:
        """True once `close()` was called."""
        return self._stop.is_set()

    def __enter__(self) -> Query[T]:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


@dataclass
class _Gap:
    """Missing offsets up to `limit`, first seen at `since` (monotonic seconds)."""

    limit: int
    since: float
    horizon: int | None = None  # xmax of a snapshot taken >= _XID_GRACE after `since`


class OrderingHorizon:
    """The highest offset at or below which no event can still appear: Akka JDBC's JournalSequenceActor.

    Offsets are drawn when a transaction inserts, but become visible when it commits. On PostgreSQL
    two writers commit in any order, so a reader that saw offset 11 may later see 10 appear: reading
    "everything after my last offset" would skip 10 forever. Like akka-persistence-jdbc, a query reads
    only up to `settled`: the end of the run of offsets without a gap. A gap (a missing offset below a
    visible one) is a write still in flight, a rolled-back write, or deleted events; the horizon waits
    on it until either
    - the transactions that were running _XID_GRACE after it was first seen have all ended (a later
      snapshot's xmin passed that snapshot's xmax), and the offsets are still missing: then they never
      will appear. This settles rolled-back writes and deleted events in about _XID_GRACE, where Akka
      waits out its timeout. (It needs the INSERT that drew a missing offset to have its transaction id
      by then: Reprise's writes take it before they draw, other writers within _XID_GRACE.) Or
    - `gap_timeout` passed (Akka: query-delay 1 s x max-tries 10): the gap is skipped as a rolled-back
      write, with a warning naming it. So a write transaction that takes longer than `gap_timeout` to
      commit is missed by the query (while it runs it keeps xmin back: only the timeout ends the wait).
    """

    def __init__(self, fetch: Callable[[int, int], OrderingBatch], start: int, gap_timeout: float,
                 batch: int = 10_000, clock: Callable[[], float] = time.monotonic):
        self.settled = start
        self._fetch = fetch
        self._timeout = gap_timeout
        self._batch = batch
        self._clock = clock
        self._given_up = start  # every offset <= this that is still missing never will appear
        self._expected = start
        self._gap: _Gap | None = None

    @property
    def waiting(self) -> bool:
        """True while a gap holds the horizon back."""
        return self._gap is not None

    def expect(self, offset: int) -> None:
        """`offset` was stored (a current query's target): offsets up to it that are missing are gaps too."""
        self._expected = max(self._expected, offset)

    def poll(self) -> int:
        """Read the stored offsets after `settled` and advance it as far as no gap prevents; return it."""
        while True:
            orderings, snapshot = self._fetch(self.settled, self._batch)
            self._age_gap(snapshot)
            s = self.settled
            blocked = False
            for o in orderings:
                if o != s + 1 and o - 1 > self._given_up:
                    blocked = True
                    break
                s = o
            full = len(orderings) == self._batch
            if not blocked and not full:
                s = max(s, self._given_up)  # nothing is visible above s: what is given up is behind us
                blocked = self._expected > s
            self.settled = s
            if blocked:
                top = max(orderings[-1] if orderings else 0, self._expected)
                if self._gap is None or self._gap.limit <= s:
                    self._gap = _Gap(top, self._clock())
                return s
            self._gap = None
            if not full:
                return s

    def _age_gap(self, snapshot: tuple[int, int] | None) -> None:
        gap = self._gap
        if gap is None:
            return
        now = self._clock()
        if snapshot is not None:
            xmin, xmax = snapshot
            if gap.horizon is None:
                if now - gap.since >= _XID_GRACE:
                    gap.horizon = xmax
            elif xmin >= gap.horizon:
                self._give_up(gap)
                return
        if now - gap.since >= self._timeout:
            _log.warning("offsets after %d up to %d did not appear within gap_timeout=%ss: skipped as rolled "
                         "back (a write transaction that commits later is missed by this query; raise "
                         "gap_timeout if writes can take that long)", self.settled, gap.limit, self._timeout)
            self._give_up(gap)

    def _give_up(self, gap: _Gap) -> None:
        self._given_up = max(self._given_up, gap.limit)
        self._gap = None


class EventReader:
    """Reads the events (of a tag, or all) after an offset in offset order, a batch per `read()`, never waiting.

    Each `read(limit)` returns what is safely readable now: on a backend whose writers commit out of
    offset order (PostgreSQL) it stops below the first offset still in flight and remembers that gap
    (its OrderingHorizon) for the next call, so an event that commits late with a smaller offset is
    never skipped. A gap follows OrderingHorizon's rule: settled once the transactions that could fill
    it have ended, or skipped with a warning after `gap_timeout`. Made by `Journal.events_reader`; one
    consumer thread at a time, and only while its journal is open.
    """

    def __init__(self, journal: Journal, tag: str | None, offset: int, horizon: OrderingHorizon | None):
        self.tag = tag
        self.offset = offset
        """The greatest offset returned so far (the start offset before the first event)."""
        self._journal = journal
        self._horizon = horizon
        self._after = offset  # every event at or below this has been returned
        self._upto = offset if horizon is not None else MAX_SEQUENCE_NR

    @property
    def waiting(self) -> bool:
        """True while a write in flight (a gap below a visible offset) holds the reader back: read again soon."""
        return self._horizon is not None and self._horizon.waiting

    def read(self, limit: int) -> list[EventEnvelope]:
        """Up to `limit` events after the last one returned that can be read now; [] when there are none yet."""
        if not isinstance(limit, int) or isinstance(limit, bool) or limit < 1:
            raise InvalidQuery(f"limit must be an int >= 1 (events per read), got {limit!r}")
        horizon = self._horizon
        if horizon is not None and self._after >= self._upto:
            self._upto = horizon.poll()  # one look (more while offsets come in full batches); never a wait
        rows = self._journal._rows_after(self.tag, self._after, limit, self._upto)
        if rows:
            self._after = self.offset = rows[-1][0]
        if horizon is not None and len(rows) < limit:
            self._after = max(self._after, self._upto)  # every event up to the horizon has been read
        return decode_envelopes(rows)


DELETE_SLICE = 0.05
"""Seconds one transaction of a long delete should take: a day of a Spark bridge's batches (gigabytes, pruned at
once after a dead driver's run was discarded) in one transaction held the write lock past other processes' busy
timeout, and their writes failed; run inside a command, it held every other entity of the host as long."""


def paced_slices(delete_slice: Callable[[int], bool], rows: int, began: float) -> Iterator[float]:
    """The slices of a delete after its first (of `rows` events, begun at perf_counter `began`): each yields the
    pause before it, then runs `delete_slice(rows)`, which deletes the next `rows` events and says whether more are
    left. Each slice is as large as fits in DELETE_SLICE at the last one's pace (a tenth of it at least)."""
    more = True
    while more:
        # A pause between slices: other processes' writers waiting for the lock get it (SQLite's busy handler looks
        # for a free lock only now and then, every 100 ms after a while), and a host whose entity deletes reads its
        # mailbox (a wakeup already due comes before the mailbox on Thespian's TCP base).
        took = time.perf_counter() - began
        rows = max(16, min(rows * 4, int(rows * DELETE_SLICE / max(took, DELETE_SLICE / 10))))
        yield min(took, DELETE_SLICE) / 4
        began = time.perf_counter()
        more = delete_slice(rows)


class Journal(ABC):
    """An event journal: write AtomicWrites, replay by persistence id, delete, and query by tag."""

    replay_chunk: int = 1000
    """Rows fetched per round trip while replaying: replay streams, it never loads a whole id."""
    durable: bool = True
    """False: its events are gone when its process ends (memory://)."""

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

    def delete_in_steps(self, persistence_id: str, to_sequence_nr: int) -> Iterator[float]:
        """delete_messages_to in steps, for a caller that must not block meanwhile (an entity host, whose other
        entities wait while it deletes): this call runs the first step, each `next()` one more, yielding the seconds
        to pause before the next one. The bound is fixed by this call: events written after it are kept. A failure
        raises where it happened, the events up to some sequence nr deleted. The whole delete in one step here; a
        journal whose long deletes take long overrides it."""
        self.delete_messages_to(persistence_id, to_sequence_nr)
        return iter(())

    @abstractmethod
    def close(self) -> None:
        """Release connections; a closed journal must not be used again."""

    def check_writable(self) -> None:
        """Raise JournalError if this process could open the journal but cannot write it (a read-only file or file
        system); a writer checks this when it starts rather than at its first event. Default: nothing to check."""
        return None

    # --- persistence query (read side) ------------------------------------------------------------

    poll_interval: float = 1.0
    """Seconds a live query waits between looks for new events (a query's `poll_interval` overrides it)."""
    gap_timeout: float = 10.0
    """Seconds a query waits on a missing offset before skipping it as a rolled-back write (OrderingHorizon)."""

    @abstractmethod
    def current_persistence_ids(self) -> Iterator[str]:
        """Every persistence id that has ever been written (sorted)."""

    def persistence_ids(self, live: bool = False, poll_interval: float | None = None) -> Query[str]:
        """Every persistence id ever written (sorted); live: then each new one as it is first written."""
        interval = self._interval(poll_interval)

        def body(stop: threading.Event) -> Generator[str, None, None]:
            if not live:
                yield from self.current_persistence_ids()
                return
            seen: set[str] = set()
            poll = self._persistence_ids_poller()
            while True:
                new = sorted(set(poll()).difference(seen))
                seen.update(new)
                yield from new
                if stop.wait(interval):
                    return
        return Query(body)

    def _persistence_ids_poller(self) -> Callable[[], Iterable[str]]:
        """For a live persistence_ids: a function whose first call returns every id written so far, and each later
        call at least every id first written since the previous one (any order; ids already returned may come
        again). Default: every id, each time."""
        return self.current_persistence_ids

    def events_by_persistence_id(
        self, persistence_id: str, from_sequence_nr: int = 0, to_sequence_nr: int = MAX_SEQUENCE_NR,
        live: bool = False, poll_interval: float | None = None,
    ) -> Query[EventEnvelope]:
        """Events of one id with from <= seq nr <= to, ascending; live: follow new ones until `to` is reached.

        Current (live=False): the events stored when the query starts (up to the id's highest sequence nr
        then, or `to` if lower), then the query ends. Each envelope's offset is the event's global offset
        (as in events_by_tag). One id has one writer, so its sequence numbers commit in order: resume with
        from = the last sequence nr + 1.
        """
        if not isinstance(persistence_id, str) or not persistence_id:
            raise InvalidQuery(f"persistence_id must be a non-empty str, got {persistence_id!r}")
        _storable_text("persistence_id", persistence_id)
        for name, value in (("from_sequence_nr", from_sequence_nr), ("to_sequence_nr", to_sequence_nr)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 0:
                raise InvalidQuery(f"{name} must be a sequence number: an int >= 0, got {value!r}")
        interval = self._interval(poll_interval)
        chunk = self.replay_chunk

        def body(stop: threading.Event) -> Generator[EventEnvelope, None, None]:
            start, end = max(from_sequence_nr, 0), to_sequence_nr
            if not live and start <= end:
                # As Akka's current queries (r2dbc: to = min(to, the highest read first)): bounded only by a
                # short chunk, it also returned events the actor wrote while it ran, and never ended while
                # the actor wrote as fast as it read.
                end = min(end, self._highest(persistence_id))
            while start <= end:
                rows = self._read_events(persistence_id, start, end, chunk)
                yield from decode_envelopes(rows)
                if rows:
                    start = rows[-1][2] + 1
                if len(rows) < chunk and (not live or stop.wait(interval)):
                    return
        return Query(body)

    def events_by_tag(self, tag: str, offset: int = 0, live: bool = False, poll_interval: float | None = None,
                      gap_timeout: float | None = None) -> Query[EventEnvelope]:
        """Events carrying `tag` with a global offset > `offset`, in offset order; resume from the last offset.

        Current (live=False): the events stored when the query starts, then the query ends. On a backend
        whose writers can commit out of offset order (PostgreSQL) it first waits for the writes in
        flight below the newest offset (bounded by `gap_timeout`, see OrderingHorizon), so a resumed
        query never skips an event that committed after it read a later one.
        Live: keeps following new events, looking every `poll_interval` seconds, until closed.
        """
        return self._by_offset(_check_tag(tag, False), _check_offset("offset", offset), None, live, poll_interval,
                               gap_timeout)

    def all_events(self, offset: int = 0, live: bool = False, poll_interval: float | None = None,
                   gap_timeout: float | None = None) -> Query[EventEnvelope]:
        """Every event of every id with a global offset > `offset`, in offset order: events_by_tag without a tag."""
        return self._by_offset(None, _check_offset("offset", offset), None, live, poll_interval, gap_timeout)

    def events_between(self, from_offset: int, to_offset: int, tag: str | None = None,
                       gap_timeout: float | None = None) -> Query[EventEnvelope]:
        """The events (of `tag`, or all) with from_offset < offset <= to_offset, in offset order; then it ends.

        Two reads of one range give the same events: on PostgreSQL the query first waits for the writes
        in flight below `to_offset` (as events_by_tag does; writes above it are not waited for), so a
        range read after `newest_offset()` returned `to_offset` never misses an event that commits late,
        even when the events at `to_offset` were deleted since.
        """
        return self._by_offset(_check_tag(tag, True), _check_offset("from_offset", from_offset),
                               _check_offset("to_offset", to_offset), False, None, gap_timeout)

    def events_reader(self, offset: int = 0, tag: str | None = None,
                      gap_timeout: float | None = None) -> EventReader:
        """A reader of the events (of `tag`, or all) after `offset` that never waits: see EventReader.

        For a consumer driven by its own timer (a Projection), where a live query would block it.
        """
        offset, tag = _check_offset("offset", offset), _check_tag(tag, True)
        timeout = _check_seconds("gap_timeout", self.gap_timeout if gap_timeout is None else gap_timeout, 86400)
        return EventReader(self, tag, offset, self._ordering_horizon(offset, timeout))

    def newest_offset(self, tag: str | None = None) -> int:
        """The greatest global offset of a stored event (carrying `tag`, if given); 0 when there is none."""
        return self._newest(_check_tag(tag, True))

    def _by_offset(self, tag: str | None, offset: int, to_offset: int | None, live: bool,
                   poll_interval: float | None, gap_timeout: float | None) -> Query[EventEnvelope]:
        """The events of `tag` (None: all) with offset < o <= to_offset (None: no bound), by offset."""
        interval = self._interval(poll_interval)
        timeout = _check_seconds("gap_timeout", self.gap_timeout if gap_timeout is None else gap_timeout, 86400)
        chunk = self.replay_chunk
        end = MAX_SEQUENCE_NR if to_offset is None else to_offset

        def read(after: int, limit: int, upto: int) -> Sequence[TaggedRow]:
            return self._rows_after(tag, after, limit, upto)

        def body(stop: threading.Event) -> Generator[EventEnvelope, None, None]:
            after, last = offset, end
            horizon = self._ordering_horizon(after, timeout)
            if not live and horizon is not None and to_offset is not None:
                # A range's end may come from an earlier newest_offset() (a Spark micro-batch's), whose events were
                # deleted since while a write below them is still in flight: bounded by the newest offset stored
                # (now below that write's), the range ended without it, and its reader moved on past it for good.
                # The highest offset drawn bounds every write in flight; each offset up to it commits or is
                # settled by the horizon as never to appear.
                last = min(end, self._max_drawn())
            elif not live:
                # A current query ends with the events stored when it starts. Bounded only by a short chunk, it
                # also returned events written while it ran (on PostgreSQL, all that committed while it waited on
                # a write in flight), and never ended while writers kept pace with it.
                last = min(end, self._newest(None))
            if after >= last:
                return
            target = 0
            if horizon is not None and not live:
                target = last
                horizon.expect(target)
            upto = min(horizon.poll(), last) if horizon is not None else last
            while True:
                rows = read(after, chunk, upto)
                yield from decode_envelopes(rows)
                if rows:
                    after = rows[-1][0]
                if len(rows) == chunk:
                    continue
                if horizon is None:
                    if not live or stop.wait(interval):
                        return
                    continue
                after = max(after, upto)  # every event up to the horizon has been read
                if not live and upto >= target:
                    return
                while (new := horizon.poll()) <= upto:
                    wait = _GAP_RECHECK if horizon.waiting or not live else interval
                    if stop.wait(wait):
                        return
                upto = min(new, last)
        return Query(body)

    def _rows_after(self, tag: str | None, after: int, limit: int, upto: int) -> Sequence[TaggedRow]:
        """Up to `limit` events (of `tag`, or all) with after < offset <= upto, by offset."""
        rows = self._read_tag(tag, after, limit, upto) if tag is not None else self._read_ordered(after, limit, upto)
        if rows and rows[-1][0] > upto:  # a backend may read past `upto` where it never needs a horizon
            rows = [r for r in rows if r[0] <= upto]
        return rows

    def _interval(self, poll_interval: float | None) -> float:
        return _check_seconds("poll_interval", self.poll_interval if poll_interval is None else poll_interval, 60)

    def _ordering_horizon(self, offset: int, gap_timeout: float) -> OrderingHorizon | None:
        """None when offsets become visible in offset order (one writer at a time); else the query's horizon."""
        return None

    def _max_ordering(self) -> int:
        """The greatest offset stored now (only asked by backends that return an OrderingHorizon)."""
        raise NotImplementedError

    def _max_drawn(self) -> int:
        """The greatest offset any write has drawn so far, committed, in flight, rolled back or deleted (only asked
        by backends that return an OrderingHorizon)."""
        raise NotImplementedError

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
        return decode_envelopes(sorted(self._read_tail(n)))

    def show_readable(self, persistence_id: str, from_sequence_nr: int = 1, max: int = MAX_SEQUENCE_NR,  # noqa: A002
                      ) -> Iterator[PersistentRepr | Problem]:
        """`show`, with a Problem in place of each event that cannot be read (corrupt, or its class unknown here)
        instead of stopping there: an operator looking into a damaged journal sees what is around it."""
        start, limit, chunk = from_sequence_nr if from_sequence_nr > 0 else 0, max, self.replay_chunk
        while limit > 0:
            rows = self._read(persistence_id, start, MAX_SEQUENCE_NR, min(chunk, limit))
            if not rows:
                return
            try:
                yield from decode_rows(persistence_id, rows)
            except (JournalCorruption, SerializationError):  # (rare: then each row of the chunk on its own)
                for row in rows:
                    yield _one_or_problem(partial(decode_rows, persistence_id), row, persistence_id, row[0])
            if len(rows) < chunk:
                return
            limit -= len(rows)
            start = rows[-1][0] + 1

    def tail_readable(self, n: int = 10) -> list[EventEnvelope | Problem]:
        """`tail`, with a Problem in place of each event that cannot be read (see show_readable)."""
        rows = sorted(self._read_tail(n)) if n > 0 else []
        try:
            return list(decode_envelopes(rows))
        except (JournalCorruption, SerializationError):
            return [_one_or_problem(decode_envelopes, row, row[1], row[2]) for row in rows]

    def verify(self) -> VerifyReport:
        """Re-read every event and snapshot and check it; report each bad record by id and sequence number."""
        problems = list(self._verify_storage())
        count = 0
        last = None
        try:
            for pid, seq, blob, ck in self._read_all():
                count += 1
                last = (pid, seq)
                problem = check_row(pid, seq, blob, ck)
                if problem is not None:
                    problems.append(problem)
        except JournalCorruption as e:  # the storage itself cannot be read on: say where, and go on to snapshots
            after = f" after persistence_id={last[0]} sequence_nr={last[1]}" if last else ""
            problems.append(Problem(None, None, f"cannot read the events on{after} ({count} read): {e}"))
        snapshots = 0
        try:
            for pid, seq, ts, blob, ck in self._read_all_snapshots():
                snapshots += 1
                try:
                    decode_snapshot(pid, seq, ts, bytes(blob), ck)
                except (JournalCorruption, SerializationError) as e:  # (the latter intact: not buildable here)
                    problems.append(problem_of(pid, seq, e, "snapshot: "))
        except JournalCorruption as e:
            problems.append(Problem(None, None, f"cannot read the snapshots on ({snapshots} read): {e}"))
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
    def _read_tag(self, tag: str, offset: int, limit: int, upto: int) -> Sequence[TaggedRow]:
        """Up to `limit` tagged events with `offset` < offset <= `upto`, ascending by offset; fewer only when no
        more are stored up to `upto` (a query takes a short chunk for its end: a tag whose event is gone must not
        make one)."""

    @abstractmethod
    def _read_ordered(self, offset: int, limit: int, upto: int) -> Sequence[TaggedRow]:
        """Up to `limit` events of every id with `offset` < offset <= `upto`, ascending by offset."""

    @abstractmethod
    def _newest(self, tag: str | None) -> int:
        """The greatest offset of a stored event (of `tag`, if given), 0 if none."""

    @abstractmethod
    def _read_events(self, persistence_id: str, start: int, end: int, limit: int) -> Sequence[TaggedRow]:
        """Up to `limit` events of the id with start <= seq nr <= end, ascending, each with its offset."""

    @abstractmethod
    def _read_tail(self, n: int) -> Sequence[TaggedRow]:
        """The `n` events with the greatest offsets, in any order."""

    @abstractmethod
    def _read_all(self) -> Iterator[tuple[str, int, bytes, int]]:
        """Every stored event as (pid, seq nr, bytes, checksum), for verify."""

    def _read_all_snapshots(self) -> Iterator[tuple[str, int, int, bytes, int]]:
        """Every snapshot stored alongside the journal as (pid, seq nr, timestamp, bytes, checksum), for verify."""
        return iter(())

    def _verify_storage(self) -> Iterator[Problem]:
        """Backend-level integrity findings (e.g. SQLite's integrity_check)."""
        return iter(())

    # --- shared helpers ---------------------------------------------------------------------------

    def _duplicate_error(self, batch: EncodedBatch, cause: BaseException | None = None) -> JournalError:
        """Name the (pid, seq nr) that made a write fail its unique key (after the transaction rolled back), and
        every persistence id of the batch that did (SequenceNrTaken.persistence_ids)."""
        seen: set[tuple[str, int]] = set()
        by_pid: dict[str, list[int]] = {}
        twice: list[tuple[str, int]] = []
        for pid, seq, _, _ in batch.rows:
            if (pid, seq) in seen:
                twice.append((pid, seq))
            seen.add((pid, seq))
            by_pid.setdefault(pid, []).append(seq)
        if twice:
            pid, seq = twice[0]
            return SequenceNrTaken(f"write rejected: sequence nr {seq} of persistence id {pid!r} appears twice in one "
                                   "write_messages call", tuple(dict.fromkeys(p for p, _ in twice)))
        taken: list[tuple[str, int]] = []
        for pid, seqs in by_pid.items():
            stored = {row[0] for row in self._read(pid, min(seqs), max(seqs), MAX_SEQUENCE_NR)}
            dups = sorted(stored.intersection(seqs))
            if dups:
                taken.append((pid, dups[0]))
        if taken:
            pid, seq = taken[0]
            more = f" (and {len(taken) - 1} more persistence ids)" if len(taken) > 1 else ""
            return SequenceNrTaken(
                f"write failed: sequence nr {seq} of persistence id {pid!r} already exists{more} (another writer "
                "uses this persistence id?); nothing of this batch was stored", tuple(p for p, _ in taken))
        return JournalError(f"write failed on a unique key: {cause}")


class SnapshotStore(ABC):
    """A snapshot store: save, load the youngest matching snapshot, delete."""

    durable: bool = True
    """False: its snapshots are gone when its process ends (memory://)."""

    def save(self, metadata: SnapshotMetadata, snapshot: object) -> SnapshotMetadata:
        """Store `snapshot` (overwriting one at the same pid and seq nr); return the metadata with its timestamp."""
        md = SnapshotMetadata(metadata.persistence_id, metadata.sequence_nr, now_millis(), metadata.metadata)
        blob, ck = encode_snapshot(md.persistence_id, md.sequence_nr, md.timestamp, md.metadata, snapshot)
        self._save(md, blob, ck)
        return md

    def load(self, persistence_id: str,
             criteria: SnapshotSelectionCriteria = SnapshotSelectionCriteria.LATEST) -> SelectedSnapshot | None:
        """The youngest snapshot matching `criteria`, or None; a matching snapshot that cannot be read raises."""
        row = self._load(persistence_id, criteria)
        if _bounds_timestamps(criteria):
            # The younger snapshots in the bounds were passed over for their timestamps: one flipped out of the
            # bounds would make this load return an older snapshot (and a recovery replay events since deleted).
            after = criteria.min_sequence_nr - 1 if row is None else row[0]
            for seq, ts, blob, ck in self._younger(persistence_id, after, criteria.max_sequence_nr):
                check_snapshot(persistence_id, seq, ts, bytes(blob), ck)
        if row is None:
            return None
        seq, ts, blob, ck = row
        meta, snapshot = decode_snapshot(persistence_id, seq, ts, bytes(blob), ck)
        return SelectedSnapshot(SnapshotMetadata(persistence_id, seq, ts, meta), snapshot)

    def delete(self, metadata: SnapshotMetadata) -> None:
        """Delete the snapshot at (pid, seq nr); a timestamp of 0 matches any timestamp (else it is checked)."""
        pid, seq, ts = metadata.persistence_id, metadata.sequence_nr, metadata.timestamp
        self._delete_keys("delete snapshot", pid, [(seq, 0)] if ts == 0 else self._verified(pid, seq, seq, ts, ts))

    def delete_matching(self, persistence_id: str, criteria: SnapshotSelectionCriteria) -> None:
        """Delete every snapshot of the id matching `criteria` (timestamps checked when it bounds them)."""
        lo, hi = criteria.min_sequence_nr, criteria.max_sequence_nr
        if _bounds_timestamps(criteria):
            keys = self._verified(persistence_id, lo, hi, criteria.min_timestamp, criteria.max_timestamp)
            self._delete_keys("delete snapshots", persistence_id, keys)
        else:
            self._delete_range(persistence_id, lo, hi)

    def _delete_range(self, persistence_id: str, min_sequence_nr: int, max_sequence_nr: int) -> None:
        """Delete the id's snapshots with sequence nrs in the bounds (a store overrides this and _delete_keys, or
        delete and delete_matching)."""
        raise NotImplementedError(f"{type(self).__qualname__} implements neither delete_matching nor _delete_range")

    def _delete_keys(self, what: str, persistence_id: str, keys: list[tuple[int, int]]) -> None:
        """Delete the snapshots (seq nr, timestamp; 0: any) in one transaction; one saved over since keeps its new
        timestamp (`what` names the operation in errors)."""
        raise NotImplementedError(f"{type(self).__qualname__} implements neither delete nor _delete_keys")

    @abstractmethod
    def close(self) -> None:
        """Release connections."""

    def check_writable(self) -> None:
        """Raise JournalError if this process could open the store but cannot write it (see Journal's)."""
        return None

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

    def _younger(self, persistence_id: str, after: int, to: int) -> Sequence[tuple[int, int, bytes, int]]:
        """(seq nr, timestamp, bytes, checksum) of the snapshots with after < seq nr <= to (load checks that they
        were passed over for their real timestamps). Default: none (a store that cannot tell)."""
        return ()

    def _verified(self, persistence_id: str, min_sequence_nr: int, max_sequence_nr: int, min_timestamp: int,
                  max_timestamp: int) -> list[tuple[int, int]]:
        """(seq nr, timestamp) of the snapshots in the sequence nr bounds whose timestamp, checked against its
        checksum, is in the timestamp bounds: what a delete by timestamp removes (by key and that timestamp).

        The stored timestamp is beside the checksummed bytes: a flipped bit made a delete keep the snapshot it
        named, or remove one the bounds excluded (the newest, say). A snapshot that fails its check raises
        JournalCorruption and nothing is deleted: its timestamp cannot be told."""
        keys: list[tuple[int, int]] = []
        for seq, ts, blob, ck in self._younger(persistence_id, min_sequence_nr - 1, max_sequence_nr):
            try:
                check_snapshot(persistence_id, seq, ts, bytes(blob), ck)
            except JournalCorruption as e:
                raise JournalCorruption(
                    f"{e}; deleting snapshots by timestamp needs it: nothing was deleted (delete this one by its "
                    "sequence nr alone: delete(SnapshotMetadata(persistence_id, sequence_nr)), timestamp 0)",
                    persistence_id, seq) from e
            if min_timestamp <= ts <= max_timestamp:
                keys.append((seq, ts))
        return keys


def _bounds_timestamps(criteria: SnapshotSelectionCriteria) -> bool:
    """Whether `criteria` selects by timestamp (then loads and deletes check the timestamps they compare)."""
    return criteria.min_timestamp > 0 or criteria.max_timestamp < MAX_SEQUENCE_NR


def _one_or_problem(decode: Callable[[Sequence[R]], Sequence[T]], row: R, persistence_id: str, sequence_nr: int) -> T | Problem:
    """`row` decoded, or the Problem naming the record when it cannot be read."""
    try:
        return decode([row])[0]
    except (JournalCorruption, SerializationError) as e:
        return problem_of(persistence_id, sequence_nr, e)

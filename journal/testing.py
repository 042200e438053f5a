"""The shipped TCK: Akka's JournalSpec (19 cases) and SnapshotStoreSpec (13 cases) for this API, plus
Reprise's own cases (tags, concurrency, corruption, permissions, serialization, upcasting).

A backend runs it by subclassing with a `journal_url` / `snapshot_url` fixture that gives a fresh,
empty store, and by setting the capability flags::

    class TestMyJournal(JournalSpec):
        supports_rejecting_non_serializable_objects = True

        @pytest.fixture
        def journal_url(self, tmp_path):
            return f"mybackend://{tmp_path}/j"

Optional hooks (`corrupt_event`, `corrupt_snapshot`, `journal_files`) enable the corruption and
permission cases; without them those cases skip. The numbers in test docstrings are the reference's
(akka-persistence.md §4.1 / §4.3).
"""

from __future__ import annotations

import contextlib
import itertools
import multiprocessing
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from journal.api import EventReader, Journal, SnapshotStore
from journal.errors import InvalidQuery, JournalCorruption, JournalError, SequenceNrTaken, SerializationError
from journal.model import (
    MAX_SEQUENCE_NR,
    AtomicWrite,
    EventEnvelope,
    PersistentRepr,
    SelectedSnapshot,
    SnapshotMetadata,
    SnapshotSelectionCriteria,
)
from journal.serialization import register_type, register_upcaster, unregister_type
from journal.urls import open_journal, open_snapshot_store

__all__ = ["JournalSpec", "SnapshotStoreSpec", "TckPayload", "TckRef"]

MAX = MAX_SEQUENCE_NR
_counter = itertools.count(1)


@register_type(manifest="reprise.tck.TckRef")
@dataclass(frozen=True)
class TckRef:
    """Stands in for the ActorRef inside Akka's TestPayload: a nested registered type."""

    path: str


@register_type(manifest="reprise.tck.TckPayload")
@dataclass(frozen=True)
class TckPayload:
    """A payload that only round-trips through real serialization (registered, nested, tuples, bytes)."""

    ref: TckRef
    values: tuple[int, ...] = (1, 2, 3)
    data: dict[str, object] = field(default_factory=lambda: {"k": [1.5, b"\x00\xff", None, True]})


class NotSerializable:
    """An object the journal must reject (unregistered class)."""

    def __eq__(self, other: object) -> bool:
        return isinstance(other, NotSerializable)

    __hash__ = object.__hash__


def _fresh_pid() -> str:
    return f"p-{next(_counter)}-{uuid.uuid4().hex[:8]}"


def _repr(pid: str, n: int, writer: str, payload: object = None) -> PersistentRepr:
    return PersistentRepr(f"a-{n}" if payload is None else payload, n, pid, writer_uuid=writer)


def _must_load(store: SnapshotStore, persistence_id: str,
               criteria: SnapshotSelectionCriteria = SnapshotSelectionCriteria.LATEST) -> SelectedSnapshot:
    """store.load(...), failing the test when it finds no snapshot."""
    loaded = store.load(persistence_id, criteria)
    assert loaded is not None, f"expected a snapshot of {persistence_id!r} matching {criteria}, found none"
    return loaded


def write_in_child(url: str, pids: list[str], events: int, per_call: int, start: object) -> None:
    """Body of a child process of the concurrency case: write `events` per pid, `per_call` AtomicWrites a call."""
    start.wait(30)  # type: ignore[attr-defined]
    with open_journal(url) as j:
        todo = [AtomicWrite([PersistentRepr(f"{pid}-{n}", n, pid, writer_uuid="child")])
                for n in range(1, events + 1) for pid in pids]
        for i in range(0, len(todo), per_call):
            results = j.write_messages(todo[i:i + per_call])
            if any(r is not None for r in results):
                raise SystemExit(f"unexpected rejection: {results}")


def contend_in_child(url: str, pid: str, name: str, rounds: int, barrier: Any, results: Any) -> None:
    """Body of a writer of the one-id case: each round, read the highest sequence nr (as a recovery does) when the
    other writer does, then write the next 1 or 3 events (one AtomicWrite); report what each write got."""
    got: list[tuple[int, int, str]] = []  # (round, first sequence nr, "ok" or "SequenceNrTaken: message")
    with open_journal(url) as j:
        for r in range(rounds):
            barrier.wait(30)
            first = j.highest_sequence_nr(pid) + 1
            barrier.wait(30)  # (both read before either writes: each round, both write the same numbers)
            size = 1 if r % 2 == 0 else 3
            write = AtomicWrite([PersistentRepr(f"{name}-{r}-{k}", first + k, pid, writer_uuid=name)
                                 for k in range(size)])
            try:
                rejected = j.write_messages([write])
            except SequenceNrTaken as e:
                got.append((r, first, f"SequenceNrTaken: {e}"))
                continue
            except JournalError as e:
                got.append((r, first, f"{type(e).__name__}: {e}"))
                continue
            got.append((r, first, "ok" if rejected == [None] else f"rejected: {rejected}"))
    results.put((name, got))


def write_tagged_in_child(url: str, pids: list[str], events: int, tag: str, start: object) -> None:
    """Body of a writer of the live-query case: `events` per pid, one event a call, every other one tagged."""
    start.wait(30)  # type: ignore[attr-defined]
    with open_journal(url) as j:
        for n in range(1, events + 1):
            for pid in pids:
                tags = frozenset({tag}) if n % 2 else frozenset()
                results = j.write_messages([AtomicWrite([PersistentRepr(f"{pid}-{n}", n, pid, tags=tags)])])
                if results != [None]:
                    raise SystemExit(f"unexpected rejection: {results}")


def write_delete_rewrite_in_child(url: str, pids: list[str], start: object) -> None:
    """Body of a writer of the live persistence_ids case: new ids, some several to a call; every third id's events
    all deleted once written, and every sixth's written again after that."""
    start.wait(30)  # type: ignore[attr-defined]
    with open_journal(url) as j:
        for i in range(0, len(pids), 4):
            group = pids[i:i + 4]
            first = [AtomicWrite([PersistentRepr(f"{p}-1", 1, p, writer_uuid="child")]) for p in group]
            for write in ([first[0]], first[1:]):  # (one id alone, then three in one call)
                if write and j.write_messages(write) != [None] * len(write):
                    raise SystemExit(f"unexpected rejection of {write}")
            for n, p in enumerate(group, i):
                if n % 3 == 0:
                    j.delete_messages_to(p, MAX_SEQUENCE_NR)
                if n % 6 == 0 and j.write_messages([AtomicWrite([PersistentRepr(f"{p}-2", 2, p)])]) != [None]:
                    raise SystemExit(f"unexpected rejection of {p}'s second event")


def _in_forked_child(work: Any) -> str:
    """Run `work()` in a forked child: what it returned, or "Type: message" of its error ("" if it died)."""
    import os
    import signal

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            signal.alarm(30)  # a child that hangs dies, and the parent reads "" instead of waiting for ever
            try:
                result = str(work())
            except BaseException as e:  # (reported to the parent, whatever it is)
                result = f"{type(e).__name__}: {e}"
            os.write(write, result.encode())
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read) as f:
        said = f.read()
    os.waitpid(pid, 0)
    return said


def _refused_to_a_forked_child(said: str) -> bool:
    return said.startswith("JournalError: ") and "forked" in said and "'spawn'" in said


def _forked_child_keeps_the_rule(uses: tuple[Any, ...], close: Any, reopen: Any, reopened: str) -> str:
    """In forked children: each of `uses` is refused (JournalError naming 'spawn'), `close` returns "closed", and
    `reopen` (a store the child opens itself) returns `reopened` or is refused the same way; what reopen said."""
    for work in uses:
        said = _in_forked_child(work)
        assert _refused_to_a_forked_child(said), f"{work.__name__} in a forked child: {said!r}"
    assert _in_forked_child(close) == "closed"
    said = _in_forked_child(reopen)
    assert said == reopened or _refused_to_a_forked_child(said), said
    return said


def _keys(envelopes: Iterator[EventEnvelope] | list[EventEnvelope]) -> list[tuple[str, int]]:
    return [(e.persistence_id, e.sequence_nr) for e in envelopes]


def _until(condition: Callable[[], object], timeout: float, what: str) -> None:
    """Wait (bounded) until `condition()` is true; fail naming `what` otherwise."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"not within {timeout} s: {what}")
        time.sleep(0.01)


class QueryCollector(threading.Thread):
    """Runs a query (or a polled EventReader) in a thread, collecting what it yields until stopped."""

    def __init__(self, query: Any):
        super().__init__(daemon=True)
        self.query = query
        self.got: list[Any] = []
        self.error: BaseException | None = None
        self.done = threading.Event()
        self._stop_reader = threading.Event()
        self.start()

    def run(self) -> None:
        """Collect the query's items until it ends (a reader: until stopped)."""
        try:
            if isinstance(self.query, EventReader):
                while not self._stop_reader.is_set():
                    batch = self.query.read(7)  # (a small batch: several reads per test)
                    self.got += batch
                    if not batch:
                        self._stop_reader.wait(0.01)
            else:
                for item in self.query:
                    self.got.append(item)
        except BaseException as e:  # noqa: BLE001  (reported by the test)
            self.error = e
        finally:
            self.done.set()

    def stop(self) -> None:
        """End the query (or the reader's loop) and wait for the thread."""
        self._stop_reader.set()
        if not isinstance(self.query, EventReader):
            self.query.close()
        self.join(30)
        assert not self.is_alive(), "a query did not end within 30 s of close()"
        assert self.error is None, f"the query failed: {self.error!r}"


class JournalSpec:
    """Akka's JournalSpec (cases 1-19) plus Reprise's journal cases."""

    supports_rejecting_non_serializable_objects: bool | None = None  # no default, as in Akka: must be set
    supports_serialization: bool = True
    supports_metadata: bool = False
    supports_replay_only_last: bool = False
    supports_atomic_persist_all_of_several_events: bool = True
    supports_multiple_processes: bool = False
    """The store at `journal_url` can be opened by other OS processes (enables the concurrency case)."""

    # --- what a backend provides ------------------------------------------------------------------

    @pytest.fixture
    def journal_url(self) -> str:
        """URL of a fresh, empty journal; override in the backend's subclass."""
        raise NotImplementedError("subclasses of JournalSpec provide a `journal_url` fixture")

    @pytest.fixture
    def journal(self, journal_url: str) -> Iterator[Journal]:
        j = open_journal(journal_url)
        yield j
        j.close()

    def corrupt_event(self, journal: Journal, journal_url: str, pid: str, sequence_nr: int) -> Journal:
        """Damage the stored bytes of one event; return the journal to read it with (it may reopen)."""
        pytest.skip(f"{type(self).__name__} gives no way to damage a stored event")

    def journal_files(self, journal: Journal) -> list[str]:
        """Paths of the files that hold the journal (for the permission case); [] = not file based."""
        return []

    def remove_event_behind_the_journal(self, journal: Journal, journal_url: str, pid: str, sequence_nr: int) -> None:
        """Delete one stored event in the store itself, leaving its tags (as an operator's SQL DELETE would)."""
        pytest.skip(f"{type(self).__name__} gives no way to delete an event behind the journal's back")

    @contextlib.contextmanager
    def commits_held(self, journal: Journal, journal_url: str, persistence_id: str
                     ) -> Iterator[Callable[[], bool] | None]:
        """While the block runs, a write of `persistence_id` (from any process) draws its offsets and then waits
        before it commits, while other writes commit with later offsets; yields a function telling whether such a
        write is waiting now. None (the default): the backend's writers commit one at a time in offset order
        (SQLite, memory), so no write can be held that way, and the concurrency cases run without it."""
        yield None

    # --- fixture: [1] [2] [3] [4,5] (or five single writes) ---------------------------------------

    @pytest.fixture
    def pid(self) -> str:
        return _fresh_pid()

    @pytest.fixture
    def writer(self) -> str:
        return str(uuid.uuid4())

    @pytest.fixture(autouse=True)
    def _write_fixture_messages(self, journal: Journal, pid: str, writer: str) -> None:
        reprs = [_repr(pid, n, writer) for n in range(1, 6)]
        if self.supports_atomic_persist_all_of_several_events:
            writes = [AtomicWrite([r]) for r in reprs[:3]] + [AtomicWrite(reprs[3:])]
        else:
            writes = [AtomicWrite([r]) for r in reprs]
        assert journal.write_messages(writes) == [None] * len(writes)

    def expect(self, j: Journal, pid: str, writer: str, frm: int, to: int, mx: int,
               seqs: list[int], highest: int) -> None:
        """Replay(frm, to, mx) yields exactly the events `seqs` and the highest is `highest` (RM.., RS)."""
        assert list(j.replay_messages(pid, frm, to, mx)) == [_repr(pid, n, writer) for n in seqs]
        assert j.highest_sequence_nr(pid, max(0, frm - 1)) == highest

    # --- JournalSpec: mandatory cases 1-15 --------------------------------------------------------

    def test_replay_all_messages(self, journal: Journal, pid: str, writer: str) -> None:
        """1: Replay(1, MaxLong, MaxLong) -> RM(1..5), RS(5)."""
        self.expect(journal, pid, writer, 1, MAX, MAX, [1, 2, 3, 4, 5], 5)

    def test_replay_messages_using_a_lower_sequence_number_bound(
            self, journal: Journal, pid: str, writer: str) -> None:
        """2: Replay(3, MaxLong, MaxLong) -> RM(3..5), RS(5)."""
        self.expect(journal, pid, writer, 3, MAX, MAX, [3, 4, 5], 5)

    def test_replay_messages_using_an_upper_sequence_number_bound(
            self, journal: Journal, pid: str, writer: str) -> None:
        """3: Replay(1, 3, MaxLong) -> RM(1..3), RS(5)."""
        self.expect(journal, pid, writer, 1, 3, MAX, [1, 2, 3], 5)

    def test_replay_messages_using_a_count_limit(self, journal: Journal, pid: str, writer: str) -> None:
        """4: Replay(1, MaxLong, 3) -> RM(1..3), RS(5)."""
        self.expect(journal, pid, writer, 1, MAX, 3, [1, 2, 3], 5)

    def test_replay_messages_using_a_lower_and_upper_sequence_number_bound(
            self, journal: Journal, pid: str, writer: str) -> None:
        """5: Replay(2, 3, MaxLong) -> RM(2), RM(3), RS(5)."""
        self.expect(journal, pid, writer, 2, 3, MAX, [2, 3], 5)

    def test_replay_messages_using_a_lower_and_upper_sequence_number_bound_and_a_count_limit(
            self, journal: Journal, pid: str, writer: str) -> None:
        """6: Replay(2, 5, 2) -> RM(2), RM(3), RS(5)."""
        self.expect(journal, pid, writer, 2, 5, 2, [2, 3], 5)

    def test_replay_a_single_if_lower_sequence_number_bound_equals_upper_sequence_number_bound(
            self, journal: Journal, pid: str, writer: str) -> None:
        """7: Replay(2, 2, MaxLong) -> RM(2), RS(5)."""
        self.expect(journal, pid, writer, 2, 2, MAX, [2], 5)

    def test_replay_a_single_message_if_count_limit_equals_1(
            self, journal: Journal, pid: str, writer: str) -> None:
        """8: Replay(2, 4, 1) -> RM(2), RS(5)."""
        self.expect(journal, pid, writer, 2, 4, 1, [2], 5)

    def test_not_replay_messages_if_count_limit_equals_0(
            self, journal: Journal, pid: str, writer: str) -> None:
        """9: Replay(2, 4, 0) -> RS(5) only."""
        self.expect(journal, pid, writer, 2, 4, 0, [], 5)

    def test_not_replay_messages_if_lower_sequence_number_bound_is_greater_than_upper(
            self, journal: Journal, pid: str, writer: str) -> None:
        """10: Replay(3, 2, MaxLong) -> RS(5) only."""
        self.expect(journal, pid, writer, 3, 2, MAX, [], 5)

    def test_not_replay_messages_if_the_persistent_actor_has_not_yet_written_messages(
            self, journal: Journal, writer: str) -> None:
        """11: Replay(0, MaxLong, MaxLong) of "non-existing-pid" -> RS(0) only."""
        self.expect(journal, "non-existing-pid", writer, 0, MAX, MAX, [], 0)

    def test_retrieve_highest_sequence_nr_without_replaying_events(
            self, journal: Journal, pid: str, writer: str) -> None:
        """12: Replay(0, 0, 1) -> RS(5), no RM."""
        self.expect(journal, pid, writer, 0, 0, 1, [], 5)

    def test_not_replay_permanently_deleted_messages_range_deletion(
            self, journal: Journal, pid: str, writer: str) -> None:
        """13: DeleteMessagesTo(3) then Replay(1, MaxLong, MaxLong) -> RM(4), RM(5)."""
        journal.delete_messages_to(pid, 3)
        self.expect(journal, pid, writer, 1, MAX, MAX, [4, 5], 5)

    def test_not_reset_highest_sequence_nr_after_message_deletion(
            self, journal: Journal, pid: str, writer: str) -> None:
        """14: Replay(0..) -> RM(1..5), RS(5); DeleteMessagesTo(3); Replay(0..) -> RM(4), RM(5), RS(5)."""
        self.expect(journal, pid, writer, 0, MAX, MAX, [1, 2, 3, 4, 5], 5)
        journal.delete_messages_to(pid, 3)
        self.expect(journal, pid, writer, 0, MAX, MAX, [4, 5], 5)

    def test_not_reset_highest_sequence_nr_after_journal_cleanup(
            self, journal: Journal, pid: str, writer: str) -> None:
        """15: Replay(0..) -> RM(1..5), RS(5); DeleteMessagesTo(MaxLong); Replay(0..) -> RS(5) only."""
        self.expect(journal, pid, writer, 0, MAX, MAX, [1, 2, 3, 4, 5], 5)
        journal.delete_messages_to(pid, MAX)
        self.expect(journal, pid, writer, 0, MAX, MAX, [], 5)

    # --- JournalSpec: optional cases 16-19 --------------------------------------------------------

    def test_reject_non_serializable_events(self, journal: Journal, pid: str, writer: str) -> None:
        """16: one call with single writes 6, 7 (not serializable), 8 -> 6 and 8 stored, 7 rejected."""
        if self.supports_rejecting_non_serializable_objects is None:
            pytest.fail(f"{type(self).__name__} must set supports_rejecting_non_serializable_objects")
        if not self.supports_rejecting_non_serializable_objects:
            pytest.skip("supports_rejecting_non_serializable_objects is off")
        bad = NotSerializable()
        writes = [AtomicWrite([_repr(pid, 6, writer, "b-6")]), AtomicWrite([_repr(pid, 7, writer, bad)]),
                  AtomicWrite([_repr(pid, 8, writer, "b-8")])]
        results = journal.write_messages(writes)
        assert len(results) == 3
        assert results[0] is None and results[2] is None
        assert isinstance(results[1], SerializationError)
        assert list(journal.replay_messages(pid, 6)) == [_repr(pid, 6, writer, "b-6"), _repr(pid, 8, writer, "b-8")]
        assert journal.highest_sequence_nr(pid) == 8

    def test_serialize_events(self, journal: Journal, pid: str, writer: str) -> None:
        """17: TestPayload at 6 round-trips through serialization; RS(h >= 6)."""
        if not self.supports_serialization:
            pytest.skip("supports_serialization is off")
        payload = TckPayload(TckRef("reprise://sys/user/probe#42"))
        assert journal.write_messages([AtomicWrite([_repr(pid, 6, writer, payload)])]) == [None]
        replayed = list(journal.replay_messages(pid, 6, MAX, MAX))
        assert replayed == [_repr(pid, 6, writer, payload)]
        assert replayed[0].payload == payload and type(replayed[0].payload.values) is tuple
        assert replayed[0].payload is not payload
        assert journal.highest_sequence_nr(pid) >= 6

    def test_return_metadata(self, journal: Journal, pid: str, writer: str) -> None:
        """18: an event written with metadata "meta-data" replays with it; RS(6)."""
        if not self.supports_metadata:
            pytest.skip("supports_metadata is off")
        r = PersistentRepr("b-6", 6, pid, writer_uuid=writer, metadata="meta-data")
        assert journal.write_messages([AtomicWrite([r])]) == [None]
        replayed = list(journal.replay_messages(pid, 6, 6, 1))
        assert replayed == [r] and replayed[0].metadata == "meta-data"
        assert journal.highest_sequence_nr(pid) == 6

    def test_replay_only_last_when_from_sequence_nr_is_minus_1(
            self, journal: Journal, pid: str, writer: str) -> None:
        """19: Replay(-1, MaxLong, MaxLong) -> RM(5), RS(5)."""
        if not self.supports_replay_only_last:
            pytest.skip("supports_replay_only_last is off")
        self.expect(journal, pid, writer, -1, MAX, MAX, [5], 5)

    # --- Reprise: the write contract ---------------------------------------------------------------

    def test_storage_bytes_is_unknown_or_counts_what_was_written(
            self, journal: Journal, pid: str, writer: str) -> None:
        size = journal.storage_bytes()
        assert size is None or size > 0, "a journal holding events reports None (unknown) or a positive size"

    def test_atomic_write_invariants(self, pid: str) -> None:
        with pytest.raises(ValueError, match="must not be empty"):
            AtomicWrite([])
        with pytest.raises(ValueError, match="needs a persistence id"):
            AtomicWrite([PersistentRepr("a", 1)])
        with pytest.raises(ValueError, match="same persistenceId"):
            AtomicWrite([PersistentRepr("a", 1, pid), PersistentRepr("b", 2, pid + "x")])
        aw = AtomicWrite([PersistentRepr("a", n, pid) for n in (2, 3, 4)])
        assert (aw.lowest_sequence_nr, aw.highest_sequence_nr, aw.size, aw.persistence_id) == (2, 4, 3, pid)

    def test_write_stamps_timestamps_and_equality_ignores_them(
            self, journal: Journal, pid: str, writer: str) -> None:
        import time

        before = time.time_ns() // 1_000_000
        assert journal.write_messages([AtomicWrite([_repr(pid, 6, writer)])]) == [None]
        after = time.time_ns() // 1_000_000
        (r,) = journal.replay_messages(pid, 6)
        assert before <= r.timestamp <= after
        assert r == _repr(pid, 6, writer) and r.with_timestamp(1) == r
        assert r != _repr(pid, 6, writer, "other")

    def test_atomic_write_with_one_unserializable_event_is_rejected_whole(
            self, journal: Journal, pid: str, writer: str) -> None:
        if not self.supports_atomic_persist_all_of_several_events:
            pytest.skip("supports_atomic_persist_all_of_several_events is off")
        other = _fresh_pid()
        bad = AtomicWrite([_repr(pid, 6, writer), _repr(pid, 7, writer, NotSerializable()), _repr(pid, 8, writer)])
        good = AtomicWrite([_repr(other, 1, writer), _repr(other, 2, writer)])
        results = journal.write_messages([bad, good])
        assert isinstance(results[0], SerializationError) and results[1] is None
        assert journal.highest_sequence_nr(pid) == 5
        assert list(journal.replay_messages(pid, 6)) == []
        assert list(journal.replay_messages(other)) == [_repr(other, 1, writer), _repr(other, 2, writer)]

    def test_rejection_names_the_type_and_how_to_register_it(
            self, journal: Journal, pid: str, writer: str) -> None:
        @dataclass(frozen=True)
        class Unregistered:
            x: int

        (result,) = journal.write_messages([AtomicWrite([_repr(pid, 6, writer, {"nested": [Unregistered(1)]})])])
        assert isinstance(result, SerializationError)
        assert "Unregistered" in str(result) and "register_type" in str(result)
        assert pid in str(result) and "6" in str(result)
        assert journal.highest_sequence_nr(pid) == 5

    @pytest.mark.parametrize("tags,named,fix", [
        (frozenset({"ok", "a\x00b"}), "'a\\x00b'", "NUL"),  # PostgreSQL text cannot hold it
        (frozenset({42}), "42", "str tags"),  # SQLite and PostgreSQL found it as '42', memory did not
        (frozenset({""}), "''", "str tags"),  # events_by_tag refuses "": no query could find it
        (frozenset({"x\udcff"}), "'x\\udcff'", "UTF-8"),  # a lone surrogate: not encodable
        (["ok"], "list", "frozenset"),  # a list may repeat a tag
    ], ids=["nul", "int", "empty", "surrogate", "list"])
    def test_a_write_with_a_tag_no_backend_can_store_is_rejected_alone(
            self, journal: Journal, writer: str, tags: Any, named: str, fix: str) -> None:
        # A tag no backend stores (or finds) rejects that write only, on every backend alike (Akka's
        # onPersistRejected): PostgreSQL failed the whole batch on a NUL, and other actors' events with it.
        a, bad, b, t = _fresh_pid(), _fresh_pid(), _fresh_pid(), f"t-{uuid.uuid4().hex[:6]}"
        good = frozenset({t})
        writes = [AtomicWrite([PersistentRepr("a-1", 1, a, writer_uuid=writer, tags=good)]),
                  AtomicWrite([PersistentRepr("bad-1", 1, bad, writer_uuid=writer, tags=good),
                               PersistentRepr("bad-2", 2, bad, writer_uuid=writer, tags=tags)]),
                  AtomicWrite([PersistentRepr("b-1", 1, b, writer_uuid=writer, tags=good)])]
        results = journal.write_messages(writes)
        assert results[0] is None and results[2] is None, results
        assert isinstance(results[1], SerializationError)
        message = str(results[1])
        assert f"persistence id {bad!r}, sequence nr 2" in message and named in message and fix in message, message
        assert journal.highest_sequence_nr(bad) == 0 and list(journal.replay_messages(bad)) == []
        assert _keys(journal.events_by_tag(t)) == [(a, 1), (b, 1)]
        assert [e.tags for e in journal.events_by_persistence_id(b)] == [good]
        assert list(journal.events_by_tag("42")) == []  # the int tag is not stored as the text '42' either
        # Rejected again when written again (nothing about it was cached), and a fine retry is stored.
        assert isinstance(journal.write_messages(writes[1:2])[0], SerializationError)
        retry = AtomicWrite([PersistentRepr("bad-1", 1, bad, writer_uuid=writer, tags=good)])
        assert journal.write_messages([retry]) == [None]
        assert _keys(journal.events_by_tag(t)) == [(a, 1), (b, 1), (bad, 1)]

    @pytest.mark.parametrize("bad,named,fix", [
        ("bad-\udcff", "'bad-\\udcff'", "UTF-8"),  # from os.fsdecode of a file name that is not UTF-8
        ("bad\x00id", "'bad\\x00id'", "NUL"),  # PostgreSQL text cannot hold it
        (42, "42", "str"),
    ], ids=["surrogate", "nul", "int"])
    def test_a_write_with_a_persistence_id_no_backend_can_store_is_rejected_alone(
            self, journal: Journal, writer: str, bad: Any, named: str, fix: str) -> None:
        # The id's checksum seed was computed outside the per-write try: a surrogate raised a raw
        # UnicodeEncodeError out of write_messages and the other writes of the batch were dropped.
        a, b = _fresh_pid(), _fresh_pid()
        writes = [AtomicWrite([_repr(a, 1, writer)]), AtomicWrite([_repr(bad, 1, writer)]),
                  AtomicWrite([_repr(b, 1, writer)])]
        for _ in range(2):  # rejected again the second time: a rejected id is not remembered as checked
            results = journal.write_messages(writes[1:2])
            assert isinstance(results[0], SerializationError), results
        results = journal.write_messages(writes)
        assert results[0] is None and results[2] is None, results
        assert isinstance(results[1], SerializationError)
        message = str(results[1])
        assert f"persistence id {named}, sequence nr 1" in message and fix in message, message
        assert list(journal.replay_messages(a)) == [_repr(a, 1, writer)]
        assert list(journal.replay_messages(b)) == [_repr(b, 1, writer)]
        assert bad not in set(journal.current_persistence_ids())

    @pytest.mark.parametrize("bad", [-1, MAX + 1, False], ids=["negative", "beyond-max", "bool"])
    def test_a_write_with_a_sequence_nr_no_backend_can_store_is_rejected_alone(
            self, journal: Journal, writer: str, bad: Any) -> None:
        # A negative number was stored and acknowledged but never replayed (replay starts at 0); one beyond a
        # 64-bit int, or a bool, failed the whole batch on PostgreSQL and SQLite, and every other write with it.
        a, p, b = _fresh_pid(), _fresh_pid(), _fresh_pid()
        writes = [AtomicWrite([_repr(a, 1, writer)]), AtomicWrite([_repr(p, 1, writer), _repr(p, bad, writer)]),
                  AtomicWrite([_repr(b, 1, writer)])]
        results = journal.write_messages(writes)
        assert results[0] is None and results[2] is None, results
        assert isinstance(results[1], SerializationError), results
        assert f"persistence id {p!r}, sequence nr {bad!r}" in str(results[1]) and "sequence nr must be" in str(
            results[1]), results[1]
        assert journal.highest_sequence_nr(p) == 0 and list(journal.replay_messages(p)) == []
        assert list(journal.replay_messages(a)) == [_repr(a, 1, writer)]
        assert list(journal.replay_messages(b)) == [_repr(b, 1, writer)]

    @pytest.mark.parametrize("bad", ["acct-\udcff", "acct-\x00"])
    def test_a_query_for_an_id_or_tag_no_write_can_hold_is_refused_naming_it(self, journal: Journal, bad: str) -> None:
        # The drivers' own errors came out instead (SQLite a UnicodeEncodeError, PostgreSQL a refused NUL).
        with pytest.raises(InvalidQuery, match="which no journal stores"):
            list(journal.events_by_persistence_id(bad))
        with pytest.raises(InvalidQuery, match="which no journal stores"):
            list(journal.events_by_tag(bad))

    def test_unknown_manifest_on_replay_raises_a_clear_error(
            self, journal: Journal, pid: str, writer: str) -> None:
        manifest = f"reprise.tck.Ephemeral-{uuid.uuid4().hex}"

        @dataclass(frozen=True)
        class Ephemeral:
            x: int

        register_type(Ephemeral, manifest=manifest)
        try:
            assert journal.write_messages([AtomicWrite([_repr(pid, 6, writer, Ephemeral(1))])]) == [None]
        finally:
            unregister_type(manifest)
        with pytest.raises(SerializationError, match="unknown manifest") as err:
            list(journal.replay_messages(pid, 1))
        assert manifest in str(err.value) and pid in str(err.value) and "sequence nr 6" in str(err.value)

    def test_upcaster_turns_an_old_version_into_the_current_class(
            self, journal: Journal, pid: str, writer: str) -> None:
        manifest = f"reprise.tck.Renamed-{uuid.uuid4().hex}"

        @dataclass(frozen=True)
        class NameV1:
            full_name: str

        @dataclass(frozen=True)
        class NameV3:
            first: str
            last: str
            title: str

        register_type(NameV1, manifest=manifest, version=1)
        try:
            assert journal.write_messages([AtomicWrite([_repr(pid, 6, writer, NameV1("Ada Lovelace"))])]) == [None]
        finally:
            unregister_type(manifest)
        register_type(NameV3, manifest=manifest, version=3)
        try:
            register_upcaster(manifest, 1, lambda f: f[0].split(" ", 1))
            register_upcaster(manifest, 2, lambda f: [*f, "Countess"])
            (r,) = journal.replay_messages(pid, 6)
            assert r.payload == NameV3("Ada", "Lovelace", "Countess")
        finally:
            unregister_type(manifest)

    def test_duplicate_sequence_nr_raises_a_journal_error_naming_it(
            self, journal: Journal, pid: str, writer: str) -> None:
        other = _fresh_pid()
        with pytest.raises(SequenceNrTaken, match=rf"sequence nr 4 of persistence id '{pid}'") as caught:
            journal.write_messages([AtomicWrite([_repr(other, 1, writer)]),
                                    AtomicWrite([_repr(pid, 4, writer, "overwrite?")])])
        # It names every id whose number was taken, so that a caller can write the others' again.
        assert caught.value.persistence_ids == (pid,)
        self.expect(journal, pid, writer, 1, MAX, MAX, [1, 2, 3, 4, 5], 5)
        assert journal.highest_sequence_nr(other) == 0  # the batch was one transaction: nothing stored
        with pytest.raises(SequenceNrTaken, match=rf"sequence nr 7 of persistence id '{other}' appears twice") as again:
            journal.write_messages([AtomicWrite([_repr(other, 7, writer)]), AtomicWrite([_repr(other, 7, writer)])])
        assert again.value.persistence_ids == (other,)

    def test_concurrent_writer_reusing_a_sequence_nr_gets_a_clear_error(
            self, journal: Journal, journal_url: str, pid: str, writer: str) -> None:
        with open_journal(journal_url) as second:
            assert second.write_messages([AtomicWrite([_repr(pid, 6, "second")])]) == [None]
            with pytest.raises(JournalError, match=rf"sequence nr 6 of persistence id '{pid}'"):
                journal.write_messages([AtomicWrite([_repr(pid, 6, writer)])])
        assert [r.writer_uuid for r in journal.replay_messages(pid, 6)] == ["second"]

    def test_write_after_deleting_everything_continues_the_sequence(
            self, journal: Journal, pid: str, writer: str) -> None:
        journal.delete_messages_to(pid, MAX)
        journal.delete_messages_to("never-written-" + pid, MAX)
        assert journal.write_messages([AtomicWrite([_repr(pid, 6, writer)])]) == [None]
        self.expect(journal, pid, writer, 1, MAX, MAX, [6], 6)
        assert journal.highest_sequence_nr("never-written-" + pid) == 0

    # --- Reprise: replay streaming and bounds ------------------------------------------------------

    def test_replay_streams_across_chunks(self, journal: Journal, writer: str) -> None:
        pid = _fresh_pid()
        n = 2 * journal.replay_chunk + 77
        writes = [AtomicWrite([_repr(pid, i, writer)]) for i in range(1, n + 1)]
        for i in range(0, n, 500):
            assert journal.write_messages(writes[i:i + 500]) == [None] * len(writes[i:i + 500])
        stream = journal.replay_messages(pid)
        assert next(stream) == _repr(pid, 1, writer)
        assert [r.sequence_nr for r in stream] == list(range(2, n + 1))
        chunk = journal.replay_chunk
        got = [r.sequence_nr for r in journal.replay_messages(pid, chunk - 3, n - 5, chunk + 10)]
        assert got == list(range(chunk - 3, 2 * chunk + 7))
        assert [r.sequence_nr for r in journal.replay_messages(pid, 1, MAX, chunk)] == list(range(1, chunk + 1))

    @settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.differing_executors])
    @given(frm=st.integers(-1, 8), to=st.integers(0, 8) | st.just(MAX), mx=st.integers(0, 7) | st.just(MAX))
    def test_replay_bounds_match_a_model(
            self, journal: Journal, pid: str, writer: str, frm: int, to: int, mx: int) -> None:
        if frm == -1 and not self.supports_replay_only_last:
            frm = 0
        model = [n for n in range(1, 6) if frm <= n <= to][:mx] if frm != -1 else ([5] if to >= 5 and mx else [])
        assert [r.sequence_nr for r in journal.replay_messages(pid, frm, to, mx)] == model

    # --- Reprise: read side and tooling -------------------------------------------------------------

    def test_events_by_tag_is_ordered_and_resumable(self, journal: Journal, writer: str) -> None:
        a, b = _fresh_pid(), _fresh_pid()
        t, u = f"t-{uuid.uuid4().hex[:6]}", f"u-{uuid.uuid4().hex[:6]}"

        def ev(pid: str, n: int, *tags: str) -> AtomicWrite:
            return AtomicWrite([PersistentRepr(f"{pid}-{n}", n, pid, writer_uuid=writer, tags=frozenset(tags))])

        for w in (ev(a, 1, t), ev(b, 1, t, u), ev(a, 2, u), ev(b, 2, t)):
            assert journal.write_messages([w]) == [None]
        envs = list(journal.events_by_tag(t))
        assert [(e.persistence_id, e.sequence_nr) for e in envs] == [(a, 1), (b, 1), (b, 2)]
        assert envs[0].offset < envs[1].offset < envs[2].offset
        assert envs[1].event == f"{b}-1" and envs[1].tags == frozenset({t, u}) and envs[1].timestamp > 0
        assert [(e.persistence_id, e.sequence_nr) for e in journal.events_by_tag(t, envs[1].offset)] == [(b, 2)]
        assert [(e.persistence_id, e.sequence_nr) for e in journal.events_by_tag(u)] == [(b, 1), (a, 2)]
        journal.delete_messages_to(a, 1)
        assert [(e.persistence_id, e.sequence_nr) for e in journal.events_by_tag(t)] == [(b, 1), (b, 2)]
        assert journal.write_messages([ev(a, 3, t)]) == [None]
        later = list(journal.events_by_tag(t, envs[2].offset))
        assert [(e.persistence_id, e.sequence_nr) for e in later] == [(a, 3)] and later[0].offset > envs[2].offset
        assert list(journal.events_by_tag("no-such-tag")) == []

    def test_offsets_are_never_reused_after_deleting_the_newest_events(
            self, journal: Journal, writer: str) -> None:
        a, b, t = _fresh_pid(), _fresh_pid(), f"t-{uuid.uuid4().hex[:6]}"
        for pid in (a, b):
            writes = [AtomicWrite([PersistentRepr(n, n, pid, writer_uuid=writer, tags=frozenset({t}))])
                      for n in (1, 2)]
            assert journal.write_messages(writes) == [None, None]
        seen = [e.offset for e in journal.events_by_tag(t)]
        journal.delete_messages_to(b, MAX)  # b's events are the newest in the journal
        journal.delete_messages_to(a, 1)
        assert journal.write_messages([AtomicWrite([PersistentRepr(3, 3, a, tags=frozenset({t}))])]) == [None]
        (new,) = journal.events_by_tag(t, seen[-1])
        assert (new.persistence_id, new.sequence_nr) == (a, 3) and new.offset > seen[-1]
        assert [(e.persistence_id, e.sequence_nr) for e in journal.tail(2)] == [(a, 2), (a, 3)]
        assert b in set(journal.current_persistence_ids())
        assert {s.persistence_id: s.event_count for s in journal.summaries()}[b] == 0
        assert "" not in set(journal.current_persistence_ids())
        assert journal.verify().ok

    def test_deleting_the_empty_persistence_id_changes_nothing(self, journal: Journal, writer: str) -> None:
        # No write can have the id '' (AtomicWrite refuses it); a backend may use it for rows of its own (SQLite's
        # tombstone keeping the newest offset): deleting it must neither remove them nor make '' an id.
        a = _fresh_pid()
        assert journal.write_messages([AtomicWrite([PersistentRepr(n, n, a, writer_uuid=writer)]) for n in (1, 2)]
                                      ) == [None, None]
        newest = journal.newest_offset()
        journal.delete_messages_to(a, MAX)  # a held the newest offset
        journal.delete_messages_to("", MAX)
        assert journal.highest_sequence_nr("") == 0 and list(journal.replay_messages("")) == []
        assert "" not in set(journal.current_persistence_ids())
        assert "" not in {s.persistence_id for s in journal.summaries()}
        assert journal.write_messages([AtomicWrite([PersistentRepr(3, 3, a, writer_uuid=writer)])]) == [None]
        assert [e.offset for e in journal.events_by_persistence_id(a)][0] > newest
        assert journal.verify().ok

    def test_deleting_many_events_removes_them_and_their_tags_and_keeps_the_highest_and_the_newest_offset(
            self, journal: Journal, writer: str) -> None:
        # Enough events that a backend deleting in slices (SQLite) needs several.
        a, t = _fresh_pid(), f"t-{uuid.uuid4().hex[:6]}"
        writes = [AtomicWrite([PersistentRepr(n, n, a, writer_uuid=writer, tags=frozenset({t}))])
                  for n in range(1, 3001)]
        for i in range(0, len(writes), 500):
            assert journal.write_messages(writes[i:i + 500]) == [None] * 500
        newest = [e.offset for e in journal.events_by_tag(t)][-1]
        journal.delete_messages_to(a, 2000)
        assert [r.sequence_nr for r in journal.replay_messages(a)] == list(range(2001, 3001))
        assert [e.sequence_nr for e in journal.events_by_tag(t)] == list(range(2001, 3001))
        journal.delete_messages_to(a, MAX)
        assert list(journal.replay_messages(a)) == [] and list(journal.events_by_tag(t)) == []
        assert journal.highest_sequence_nr(a) == 3000
        assert journal.write_messages([AtomicWrite([PersistentRepr(1, 3001, a, tags=frozenset({t}))])]) == [None]
        (again,) = journal.events_by_tag(t)
        assert again.sequence_nr == 3001 and again.offset > newest
        assert journal.verify().ok

    def test_current_persistence_ids(self, journal: Journal, pid: str, writer: str) -> None:
        other = _fresh_pid()
        assert journal.write_messages([AtomicWrite([_repr(other, 1, writer)])]) == [None]
        journal.delete_messages_to(other, MAX)
        ids = list(journal.current_persistence_ids())
        assert pid in ids and other in ids and ids == sorted(ids)

    # --- Reprise: persistence query ----------------------------------------------------------------

    def test_events_by_persistence_id_is_bounded_and_carries_global_offsets(
            self, journal: Journal, pid: str, writer: str) -> None:
        other = _fresh_pid()
        assert journal.write_messages([AtomicWrite([_repr(other, 1, writer)])]) == [None]
        envs = list(journal.events_by_persistence_id(pid))
        assert _keys(envs) == [(pid, n) for n in range(1, 6)]
        assert [e.event for e in envs] == [f"a-{n}" for n in range(1, 6)] and all(e.timestamp > 0 for e in envs)
        assert [e.offset for e in envs] == sorted(e.offset for e in envs)
        (newest,) = journal.events_by_persistence_id(other)
        assert newest.offset > envs[-1].offset
        tail = {(e.persistence_id, e.sequence_nr): e.offset for e in journal.tail(6)}
        assert {(e.persistence_id, e.sequence_nr): e.offset for e in envs} == {k: tail[k] for k in _keys(envs)}
        assert _keys(journal.events_by_persistence_id(pid, 2, 4)) == [(pid, 2), (pid, 3), (pid, 4)]
        assert _keys(journal.events_by_persistence_id(pid, 5, 5)) == [(pid, 5)]
        assert list(journal.events_by_persistence_id(pid, 4, 3)) == []
        assert list(journal.events_by_persistence_id("never-written-" + pid)) == []
        journal.delete_messages_to(pid, 2)
        assert _keys(journal.events_by_persistence_id(pid, 0)) == [(pid, 3), (pid, 4), (pid, 5)]

    def test_query_envelopes_carry_what_replay_returns(self, journal: Journal, writer: str) -> None:
        # (events of two ids interleaved, so one chunk of events_by_tag holds several runs of one id)
        a, b = _fresh_pid(), _fresh_pid()
        t = f"t-{uuid.uuid4().hex[:6]}"
        order = [(a, 1), (b, 1), (b, 2), (a, 2), (a, 3), (b, 3)]
        for pid, n in order:
            tags = frozenset({t, f"{pid}-{n}"}) if n != 2 else frozenset({t})
            assert journal.write_messages([AtomicWrite([PersistentRepr(
                {"n": n, "pid": pid}, n, pid, writer_uuid=writer, tags=tags)])]) == [None]
        replayed = {(r.persistence_id, r.sequence_nr): r for pid in (a, b) for r in journal.replay_messages(pid)}
        by_tag = list(journal.events_by_tag(t))
        by_id = list(journal.events_by_persistence_id(a)) + list(journal.events_by_persistence_id(b))
        assert _keys(by_tag) == order and _keys(by_id) == [(a, 1), (a, 2), (a, 3), (b, 1), (b, 2), (b, 3)]
        offsets = {(e.persistence_id, e.sequence_nr): e.offset for e in journal.tail(len(order))}
        for e in by_tag + by_id:
            r = replayed[(e.persistence_id, e.sequence_nr)]
            assert type(e) is EventEnvelope
            assert (e.event, e.timestamp, e.tags) == (r.payload, r.timestamp, r.tags)
            assert e.offset == offsets[(e.persistence_id, e.sequence_nr)]

    def test_events_by_persistence_id_streams_across_chunks(self, journal: Journal, writer: str) -> None:
        pid = _fresh_pid()
        n = journal.replay_chunk + 13
        writes = [AtomicWrite([_repr(pid, i, writer)]) for i in range(1, n + 1)]
        assert journal.write_messages(writes) == [None] * n
        got = list(journal.events_by_persistence_id(pid))
        assert [e.sequence_nr for e in got] == list(range(1, n + 1))
        assert len({e.offset for e in got}) == n

    def test_live_events_by_persistence_id_follows_new_events_until_to(
            self, journal: Journal, pid: str, writer: str) -> None:
        with journal.events_by_persistence_id(pid, 4, 7, live=True, poll_interval=0.02) as q:
            assert [next(q).sequence_nr for _ in range(2)] == [4, 5]
            assert journal.write_messages([AtomicWrite([_repr(pid, 6, writer)]),
                                           AtomicWrite([_repr(pid, 7, writer), _repr(pid, 8, writer)])]
                                          ) == [None, None]
            assert [e.sequence_nr for e in q] == [6, 7]  # ends at `to`: the iteration terminates

    def test_live_events_by_tag_follows_new_events_and_close_ends_it(
            self, journal: Journal, writer: str) -> None:
        a, t = _fresh_pid(), f"t-{uuid.uuid4().hex[:6]}"

        def ev(n: int, *tags: str) -> AtomicWrite:
            return AtomicWrite([PersistentRepr(f"{a}-{n}", n, a, writer_uuid=writer, tags=frozenset(tags))])

        assert journal.write_messages([ev(1, t), ev(2)]) == [None, None]
        q = journal.events_by_tag(t, live=True, poll_interval=0.02)
        first = next(q)
        assert (first.sequence_nr, first.event) == (1, f"{a}-1")
        assert journal.write_messages([ev(3, t), ev(4), ev(5, t)]) == [None, None, None]
        assert [next(q).sequence_nr for _ in range(2)] == [3, 5]
        # A consumer blocked in next() (no new events) is ended by close() from another thread.
        closer = threading.Timer(0.2, q.close)
        closer.start()
        t0 = time.monotonic()
        assert list(q) == []
        assert time.monotonic() - t0 < 10, "close() did not end the live query within 10 s"
        closer.join()
        assert q.closed and list(q) == []
        # Resuming from the last offset seen gives exactly what came after it.
        assert journal.write_messages([ev(6, t)]) == [None]
        with journal.events_by_tag(t, first.offset, live=True, poll_interval=0.02) as resumed:
            assert [next(resumed).sequence_nr for _ in range(3)] == [3, 5, 6]

    def test_live_persistence_ids_yields_each_id_once_then_new_ones(
            self, journal: Journal, pid: str, writer: str) -> None:
        assert list(journal.persistence_ids()) == list(journal.current_persistence_ids())
        with journal.persistence_ids(live=True, poll_interval=0.02) as q:
            before = [next(q) for _ in range(len(list(journal.current_persistence_ids())))]
            assert pid in before and len(set(before)) == len(before)
            new = _fresh_pid()
            assert journal.write_messages([AtomicWrite([_repr(new, 1, writer)]),
                                           AtomicWrite([_repr(pid, 6, writer)])]) == [None, None]
            assert next(q) == new

    @pytest.mark.timeout(60)
    def test_live_persistence_ids_yields_each_id_once_across_chunks_and_deletes(
            self, journal: Journal, writer: str) -> None:
        """A live persistence_ids may read only the events written since its last polls (PostgreSQL): every id
        still comes exactly once, ids of more events than a chunk, and an id whose events were all deleted before a
        poll could read them."""
        journal.replay_chunk = 2
        known = set(journal.current_persistence_ids())
        ids = QueryCollector(journal.persistence_ids(live=True, poll_interval=0.02))
        expected = set(known)
        try:
            _until(lambda: set(ids.got) >= known, 30, "the ids written before it started")
            for _ in range(5):
                batch = [_fresh_pid() for _ in range(7)]
                assert journal.write_messages([AtomicWrite([_repr(p, n, writer)]) for p in batch for n in (1, 2)]
                                              ) == [None] * 14
                gone = _fresh_pid()
                assert journal.write_messages([AtomicWrite([_repr(gone, 1, writer)])]) == [None]
                journal.delete_messages_to(gone, MAX)
                expected |= {*batch, gone}
                _until(lambda: set(ids.got) >= expected, 30, "the new ids")  # noqa: B023  (called at once, in the loop)
        finally:
            ids.stop()
        assert sorted(ids.got) == sorted(expected), "each id exactly once"

    @pytest.mark.timeout(180)
    def test_live_persistence_ids_with_concurrent_writers_yields_every_id_exactly_once(
            self, journal: Journal, journal_url: str, pid: str, writer: str) -> None:
        """Writers in other processes (threads where the store is process-local) and this one create ids while a live
        persistence_ids polls often: every id comes exactly once, including ids whose events were all deleted right
        after they were written (before a poll could see them, or after), ids written again after such a delete,
        and an id of before the query deleted and written again while it runs."""
        known = set(journal.current_persistence_ids())
        groups = [[f"w{g}-{n}-{_fresh_pid()}" for n in range(120)] for g in range(3)]  # (group 0: this process)
        ids = QueryCollector(journal.persistence_ids(live=True, poll_interval=0.002))
        processes: list[multiprocessing.process.BaseProcess] = []
        threads: list[threading.Thread] = []
        failed: list[BaseException] = []

        def write(group: list[str], go: Any) -> None:
            try:
                write_delete_rewrite_in_child(journal_url, group, go)
            except BaseException as e:  # noqa: BLE001  (reported by the test)
                failed.append(e)
        try:
            _until(lambda: set(ids.got) >= known, 30, "the ids written before it started")
            if self.supports_multiple_processes:
                ctx = multiprocessing.get_context("spawn")
                go: Any = ctx.Event()
                processes += [ctx.Process(target=write_delete_rewrite_in_child, args=(journal_url, g, go))
                              for g in groups[1:]]
                for proc in processes:
                    proc.start()
            else:
                go = threading.Event()
                threads += [threading.Thread(target=write, args=(g, go)) for g in groups[1:]]
            threads.append(threading.Thread(target=write, args=(groups[0], go)))
            for th in threads:
                th.start()
            go.set()
            journal.delete_messages_to(pid, MAX)
            assert journal.write_messages([AtomicWrite([_repr(pid, 6, writer)])]) == [None]
            for proc in processes:
                proc.join(120)
            for th in threads:
                th.join(120)
            assert [proc.exitcode for proc in processes] == [0] * len(processes)
            assert not any(th.is_alive() for th in threads) and failed == []
            expected = known | {p for g in groups for p in g}
            assert set(journal.current_persistence_ids()) == expected
            _until(lambda: set(ids.got) >= expected, 30, "every id written")
        finally:
            ids.stop()
        assert sorted(ids.got) == sorted(expected), "each id exactly once"

    def test_current_events_by_tag_reads_many_chunks_in_offset_order(self, journal: Journal, writer: str) -> None:
        t = f"t-{uuid.uuid4().hex[:6]}"
        pids = [_fresh_pid() for _ in range(3)]
        n = journal.replay_chunk + 50
        writes = [AtomicWrite([PersistentRepr(i, i, pid, writer_uuid=writer,
                                              tags=frozenset({t}) if i % 2 else frozenset())])
                  for i in range(1, n + 1) for pid in pids]
        for i in range(0, len(writes), 1000):
            assert journal.write_messages(writes[i:i + 1000]) == [None] * len(writes[i:i + 1000])
        got = list(journal.events_by_tag(t))
        assert sorted(_keys(got)) == sorted((pid, i) for i in range(1, n + 1, 2) for pid in pids)
        offsets = [e.offset for e in got]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        middle = got[len(got) // 2]
        assert _keys(journal.events_by_tag(t, middle.offset)) == _keys(got[len(got) // 2 + 1:])

    @pytest.mark.timeout(60)
    def test_tags_of_events_deleted_behind_the_journal_cut_no_tag_query_short(
            self, journal: Journal, journal_url: str, writer: str) -> None:
        """A tag whose event was deleted by hand (SQL on the store) made a tag chunk read short, and every tag
        query took that for its end: it skipped the events after it, up to its horizon (a current query ended
        without them, a live one and an events_reader passed them for good)."""
        a, b, c, t = _fresh_pid(), _fresh_pid(), _fresh_pid(), f"t-{uuid.uuid4().hex[:6]}"
        writes = [AtomicWrite([PersistentRepr(n, n, p, writer_uuid=writer, tags=frozenset() if p == c else frozenset({t}))])
                  for p, last in ((a, 4), (b, 3), (c, 1)) for n in range(1, last + 1)]
        assert journal.write_messages(writes) == [None] * len(writes)
        for p, n in ((a, 2), (a, 3), (b, 3)):  # b-3: the tag's newest (c-1 after it keeps offsets from reuse)
            self.remove_event_behind_the_journal(journal, journal_url, p, n)
        expected = [(a, 1), (a, 4), (b, 1), (b, 2)]
        journal.replay_chunk = 2  # the first chunk [a-1, (a-2's tag)] reads one event of two
        assert _keys(journal.events_by_tag(t)) == expected
        assert _keys(journal.events_between(0, journal.newest_offset(), tag=t)) == expected
        # The tag's newest offset is its newest stored event's (b-3's tag named a gone event: a projection's lag
        # never reached 0).
        assert journal.newest_offset(t) == list(journal.events_by_tag(t))[-1].offset
        first = next(iter(journal.events_by_tag(t)))
        assert _keys(journal.events_by_tag(t, first.offset)) == expected[1:]  # a first chunk of only a-2, a-3's tags
        reader, read = journal.events_reader(tag=t), list[EventEnvelope]()
        deadline = time.monotonic() + 20
        while len(read) < len(expected) and time.monotonic() < deadline:
            batch = reader.read(2)
            read += batch
            if not batch:
                threading.Event().wait(0.02)  # the reader never waits itself: a gap (the deleted events) settles
        assert _keys(read) == expected
        with journal.events_by_tag(t, live=True, poll_interval=0.02) as q:
            closer = threading.Timer(20, q.close)  # bounds the wait for an event the query passed
            closer.start()
            try:
                live = [next(q, None) for _ in expected]
            finally:
                closer.cancel()
        assert [k for k in _keys(e for e in live if e is not None)] == expected

    def test_newest_offset_and_events_between_read_offset_ranges(
            self, journal: Journal, pid: str, writer: str) -> None:
        a, b, t = _fresh_pid(), _fresh_pid(), f"t-{uuid.uuid4().hex[:6]}"
        writes = [AtomicWrite([PersistentRepr(f"{p}-{n}", n, p, writer_uuid=writer,
                                              tags=frozenset({t}) if p == a else frozenset())])
                  for n in (1, 2, 3) for p in (a, b)]
        assert journal.write_messages(writes) == [None] * 6
        everything = list(journal.all_events())
        offsets = [e.offset for e in everything]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets) == 11  # the fixture's 5 too
        assert _keys(everything[-6:]) == [(p, n) for n in (1, 2, 3) for p in (a, b)]
        assert journal.newest_offset() == offsets[-1]
        tagged = [e.offset for e in everything if e.persistence_id == a]
        assert journal.newest_offset(t) == tagged[-1] and journal.newest_offset("no-such-tag") == 0
        assert _keys(journal.events_between(0, offsets[-1])) == _keys(everything)
        lo, hi = offsets[5], offsets[8]
        assert _keys(journal.events_between(lo, hi)) == _keys(everything[6:9])
        assert _keys(journal.events_between(lo, hi, tag=t)) == [
            (e.persistence_id, e.sequence_nr) for e in everything[6:9] if e.persistence_id == a]
        assert list(journal.events_between(hi, hi)) == [] and list(journal.events_between(hi, lo)) == []
        assert _keys(journal.all_events(lo)) == _keys(everything[6:])
        # A range ending mid-chunk stops at its end (backends may fetch a chunk past it).
        journal.replay_chunk = 2
        assert _keys(journal.events_between(0, hi)) == _keys(everything[:9])
        assert [e.offset for e in journal.events_between(0, hi, tag=t)] == [o for o in tagged if o <= hi]
        # Deleting the newest events lowers the newest offset to the newest event still stored.
        journal.delete_messages_to(b, MAX)
        journal.delete_messages_to(a, MAX)
        assert journal.newest_offset() == offsets[4] and journal.newest_offset(t) == 0
        assert _keys(journal.events_between(0, offsets[-1])) == _keys(everything[:5])

    def test_events_reader_reads_batches_without_waiting_and_resumes_where_it_stopped(
            self, journal: Journal, pid: str, writer: str) -> None:
        a, b, t = _fresh_pid(), _fresh_pid(), f"t-{uuid.uuid4().hex[:6]}"

        def ev(p: str, n: int) -> AtomicWrite:
            return AtomicWrite([PersistentRepr(n, n, p, writer_uuid=writer, tags=frozenset({t}) if p == a else frozenset())])

        assert journal.write_messages([ev(p, n) for n in (1, 2, 3) for p in (a, b)]) == [None] * 6
        tagged, start = journal.events_reader(tag=t), journal.newest_offset() - 6
        everything = journal.events_reader(start)
        assert (tagged.tag, tagged.offset, everything.offset) == (t, 0, start)
        got = [tagged.read(2), tagged.read(2), tagged.read(2)]
        assert [_keys(g) for g in got] == [[(a, 1), (a, 2)], [(a, 3)], []]
        assert tagged.offset == got[1][0].offset == journal.newest_offset(t) and not tagged.waiting
        assert _keys(everything.read(100)) == [(p, n) for n in (1, 2, 3) for p in (a, b)]
        assert everything.read(100) == [] and everything.offset == journal.newest_offset()
        # New events: each reader goes on after the last event it returned, as a fresh one from that offset would.
        assert journal.write_messages([ev(b, 4), ev(a, 4)]) == [None, None]
        (new,) = tagged.read(10)
        assert (new.persistence_id, new.sequence_nr, new.tags) == (a, 4, frozenset({t})) and tagged.offset == new.offset
        assert _keys(everything.read(1)) == [(b, 4)] and _keys(everything.read(1)) == [(a, 4)]
        assert _keys(journal.events_reader(got[0][0].offset, tag=t).read(10)) == [(a, 2), (a, 3), (a, 4)]
        for bad in (0, -1, 1.5, True):
            with pytest.raises(ValueError, match="limit must be an int >= 1"):
                tagged.read(bad)  # type: ignore[arg-type]
        with pytest.raises(ValueError, match="gap_timeout must be > 0"):
            journal.events_reader(tag=t, gap_timeout=0)

    def test_live_all_events_follows_new_events_of_every_id(self, journal: Journal, pid: str, writer: str) -> None:
        other = _fresh_pid()
        with journal.all_events(journal.newest_offset(), live=True, poll_interval=0.02) as q:
            assert journal.write_messages([AtomicWrite([_repr(other, 1, writer)]),
                                           AtomicWrite([_repr(pid, 6, writer)])]) == [None, None]
            got = [next(q), next(q)]
        assert _keys(got) == [(other, 1), (pid, 6)] and got[0].offset < got[1].offset
        assert got[1].offset == journal.newest_offset()

    def test_query_arguments_are_checked(self, journal: Journal, pid: str) -> None:
        for bad in (0, -1, 61):
            with pytest.raises(ValueError, match="poll_interval must be > 0"):
                journal.events_by_tag("t", live=True, poll_interval=bad)
        with pytest.raises(ValueError, match="gap_timeout must be > 0"):
            journal.events_by_tag("t", gap_timeout=0)
        with pytest.raises(ValueError, match="poll_interval"):
            journal.events_by_persistence_id(pid, poll_interval=0)
        with pytest.raises(ValueError, match="gap_timeout must be > 0"):
            journal.events_between(0, 10, gap_timeout=-1)
        with pytest.raises(ValueError, match="poll_interval must be > 0"):
            journal.all_events(live=True, poll_interval=0)

    @pytest.mark.timeout(120)
    def test_live_events_by_tag_with_concurrent_writers_skips_and_repeats_nothing(
            self, journal: Journal, journal_url: str) -> None:
        """Writers in other processes (threads where the store is process-local) commit while a live query
        follows the tag: it sees every tagged event once, in offset order (OrderingHorizon on PostgreSQL)."""
        t = f"t-{uuid.uuid4().hex[:6]}"
        groups = [[_fresh_pid() for _ in range(2)] for _ in range(3)]
        events = 40
        expected = {(pid, n) for g in groups for pid in g for n in range(1, events + 1, 2)}
        processes: list[multiprocessing.process.BaseProcess] = []
        threads: list[threading.Thread] = []
        if self.supports_multiple_processes:
            ctx = multiprocessing.get_context("spawn")
            start_processes = ctx.Event()
            processes += [ctx.Process(target=write_tagged_in_child, args=(journal_url, g, events, t, start_processes))
                          for g in groups]
            go = start_processes.set
        else:
            start_threads = threading.Event()
            threads += [threading.Thread(target=write_tagged_in_child, args=(journal_url, g, events, t, start_threads))
                        for g in groups]
            go = start_threads.set
        q = journal.events_by_tag(t, live=True, poll_interval=0.01)
        stopper = threading.Timer(90, q.close)  # bounds the wait if an event never shows up
        stopper.start()
        try:
            for p in processes:
                p.start()
            for th in threads:
                th.start()
            go()
            seen: list[EventEnvelope] = []
            for env in q:
                seen.append(env)
                if len(seen) == len(expected):
                    break
            for p in processes:
                p.join(60)
            for th in threads:
                th.join(60)
        finally:
            stopper.cancel()
            q.close()
        assert [p.exitcode for p in processes] == [0] * len(processes)
        assert len(seen) == len(expected), f"live query saw {len(seen)} of {len(expected)} events"
        assert set(_keys(seen)) == expected
        offsets = [e.offset for e in seen]
        assert offsets == sorted(offsets) and len(set(offsets)) == len(offsets)
        assert _keys(journal.events_by_tag(t)) == _keys(seen)

    @pytest.mark.timeout(60)
    def test_a_current_query_ends_with_the_events_stored_when_it_started(self, journal: Journal, writer: str) -> None:
        """A current all_events / events_by_tag read on past the newest offset of its start as long as its chunks
        came full: it returned events written while it ran, and never ended while writers kept pace with it."""
        a, t = _fresh_pid(), f"t-{uuid.uuid4().hex[:6]}"

        def ev(n: int) -> AtomicWrite:
            return AtomicWrite([PersistentRepr(n, n, a, writer_uuid=writer, tags=frozenset({t}))])

        assert journal.write_messages([ev(n) for n in (1, 2, 3)]) == [None] * 3
        start = journal.newest_offset() - 3
        journal.replay_chunk = 2
        for query in (journal.all_events(start), journal.events_by_tag(t)):
            with query:
                first = next(query)  # the query has started: what it returns is fixed now
                n = journal.highest_sequence_nr(a)
                assert journal.write_messages([ev(n + 1), ev(n + 2)]) == [None, None]  # while it runs
                assert _keys([first, *query]) == [(a, k) for k in range(1, n + 1)]
        assert [e.sequence_nr for e in journal.events_by_tag(t)] == [1, 2, 3, 4, 5, 6, 7]

    @pytest.mark.timeout(60)
    def test_a_current_events_by_persistence_id_ends_with_the_events_stored_when_it_started(
            self, journal: Journal, pid: str, writer: str) -> None:
        """It read on while its chunks came full: it returned the events the actor wrote while it ran, and never
        ended while the actor wrote as fast as it read. Bounded by the id's highest sequence nr at its start, or by
        `to_sequence_nr` where that is lower (Akka's current queries)."""
        journal.replay_chunk = 2
        for frm, to in ((0, MAX), (2, MAX), (3, 7)):
            with journal.events_by_persistence_id(pid, frm, to) as query:
                first = next(query)  # the query has started: what it returns is fixed now
                n = journal.highest_sequence_nr(pid)
                assert journal.write_messages([AtomicWrite([_repr(pid, n + 1, writer)]),
                                               AtomicWrite([_repr(pid, n + 2, writer)])]) == [None, None]
                assert [first.sequence_nr, *(e.sequence_nr for e in query)] == list(range(max(frm, 1), min(n, to) + 1))
        assert [e.sequence_nr for e in journal.events_by_persistence_id(pid, 3, 7)] == [3, 4, 5, 6, 7]
        journal.delete_messages_to(pid, MAX)  # the highest stays: nothing stored, and the bound is no lower
        assert list(journal.events_by_persistence_id(pid)) == []
        assert journal.write_messages([AtomicWrite([_repr(pid, 12, writer)])]) == [None]
        assert [e.sequence_nr for e in journal.events_by_persistence_id(pid, 0)] == [12]

    @pytest.mark.timeout(120)
    def test_a_range_read_waits_for_a_write_in_flight_below_its_end_after_the_newest_events_were_deleted(
            self, journal: Journal, journal_url: str, writer: str) -> None:
        """A write of `a` is held before its COMMIT while `b` commits a later offset, the range's end (as the Spark
        source's micro-batch takes it from newest_offset()), and then deletes it. The range read bounded itself by
        the newest offset stored, now below a's: it ended at once without a's event, and a consumer moving on from
        the range's end never saw it. It must wait for a's write and return its event, as a second read does. The
        live queries by offset started before deliver a's event, and c's written after, each once."""
        a, b, c = _fresh_pid(), _fresh_pid(), _fresh_pid()
        start = journal.newest_offset()
        outcome: list[object] = []
        live = [QueryCollector(journal.all_events(start, live=True, poll_interval=0.02, gap_timeout=60)),
                QueryCollector(journal.events_reader(start, gap_timeout=60))]
        read: QueryCollector | None = None
        try:
            with open_journal(journal_url) as other:  # the held write has its own connections
                with self.commits_held(journal, journal_url, a) as held:
                    early = threading.Thread(target=lambda: outcome.append(other.write_messages([
                        AtomicWrite([_repr(a, 1, writer)])])))
                    early.start()
                    if held is None:
                        early.join(30)  # (nothing can be held here: a's write commits first)
                    else:
                        _until(held, 30, f"the write of {a} waiting before its commit")
                    assert journal.write_messages([AtomicWrite([_repr(b, 1, writer)])]) == [None]
                    end = journal.newest_offset()
                    journal.delete_messages_to(b, MAX)  # the newest event: the newest offset stored is now below a's
                    read = QueryCollector(journal.events_between(start, end, gap_timeout=60))
                    if held is not None:
                        # A negative shown over a window: while a's write is open, the range that holds it cannot end.
                        assert not read.done.wait(0.5), _keys(read.got)
                        assert read.got == [] and [q.got for q in live] == [[], []]
                early.join(30)
            assert outcome == [[None]]
            _until(read.done.is_set, 30, "the range read ending")
            assert journal.write_messages([AtomicWrite([_repr(c, 1, writer)])]) == [None]
            _until(lambda: all(len(q.got) >= 2 for q in live), 30, "the live queries seeing a's and c's events")
        finally:
            for q in [*live, *([read] if read else [])]:
                q.stop()
        assert _keys(read.got) == [(a, 1)], "the range read ended without the event of the write in flight below its end"
        assert _keys(journal.events_between(start, end)) == [(a, 1)]
        assert [_keys(q.got) for q in live] == [[(a, 1), (c, 1)]] * 2

    @pytest.mark.timeout(120)
    def test_live_queries_neither_skip_nor_repeat_an_event_committing_after_a_later_offset(
            self, journal: Journal, journal_url: str, writer: str) -> None:
        """A write of a new id `a` draws its offset and is held before its COMMIT while a write of `b` (a later
        offset) commits. Every live query (all_events, events_by_tag, an events_reader, events_by_persistence_id,
        persistence_ids) and a current all_events started meanwhile deliver a's event exactly once; those that go
        by offset deliver it before b's (a consumer resuming from b's offset would never see it). The current
        query ends with the events stored when it started: not c's, which committed while it waited on a's."""
        a, b, c, t = _fresh_pid(), _fresh_pid(), _fresh_pid(), f"t-{uuid.uuid4().hex[:6]}"

        def ev(p: str) -> AtomicWrite:
            return AtomicWrite([PersistentRepr(f"{p}-1", 1, p, writer_uuid=writer, tags=frozenset({t}))])

        start, known = journal.newest_offset(), set(journal.current_persistence_ids())
        by_offset = {"all_events": QueryCollector(journal.all_events(start, live=True, poll_interval=0.02, gap_timeout=60)),
                     "events_by_tag": QueryCollector(journal.events_by_tag(t, live=True, poll_interval=0.02, gap_timeout=60)),
                     "events_reader": QueryCollector(journal.events_reader(start, gap_timeout=60))}
        by_id = {p: QueryCollector(journal.events_by_persistence_id(p, live=True, poll_interval=0.02)) for p in (a, b, c)}
        ids = QueryCollector(journal.persistence_ids(live=True, poll_interval=0.02))
        collectors = [*by_offset.values(), *by_id.values(), ids]
        outcome: list[object] = []
        current: QueryCollector | None = None
        try:
            with open_journal(journal_url) as other:  # the held write has its own connections
                with self.commits_held(journal, journal_url, a) as held:
                    early = threading.Thread(target=lambda: outcome.append(other.write_messages([ev(a)])))
                    early.start()
                    if held is None:
                        early.join(30)  # (nothing can be held here: a's write commits first)
                    else:
                        _until(held, 30, f"the write of {a} waiting before its commit")
                    assert journal.write_messages([ev(b)]) == [None]
                    current = QueryCollector(journal.all_events(start, gap_timeout=60))
                    _until(lambda: by_id[b].got and b in ids.got, 30, f"the live queries of {b} seeing its event")
                    if held is not None:
                        # A negative shown over a window: while a's write is open, nothing goes past its offset.
                        assert not current.done.wait(0.5), _keys(current.got)
                        assert {k: _keys(c.got) for k, c in by_offset.items()} == {k: [] for k in by_offset}
                        assert by_id[a].got == [] and a not in ids.got
                    # c commits after the current query started (and, held, while it waits on a): not one of its events.
                    assert journal.write_messages([ev(c)]) == [None]
                early.join(30)
            assert outcome == [[None]]
            _until(lambda: all(len(c.got) == 3 for c in by_offset.values()), 30, "every query by offset seeing 3 events")
            _until(lambda: all(c.got for c in by_id.values()) and {a, b, c} <= set(ids.got), 30,
                   "every live query by id seeing its event")
            _until(current.done.is_set, 30, "the current all_events ending")
        finally:
            for collector in [*collectors, *([current] if current else [])]:
                collector.stop()
        for name, collector in by_offset.items():
            assert _keys(collector.got) == [(a, 1), (b, 1), (c, 1)], name
            offsets = [e.offset for e in collector.got]
            assert offsets == sorted(set(offsets)), name
        assert current is not None and _keys(current.got) == [(a, 1), (b, 1)], _keys(current.got)
        assert {p: _keys(q.got) for p, q in by_id.items()} == {p: [(p, 1)] for p in (a, b, c)}
        assert sorted(ids.got) == sorted(known | {a, b, c}), "persistence_ids: each id exactly once"

    @pytest.mark.timeout(180)
    def test_live_queries_with_concurrent_writers_deliver_every_event_once_in_order(
            self, journal: Journal, journal_url: str) -> None:
        """Writers in other processes (threads where the store is process-local), one per group of ids, commit
        while live queries follow them: events_by_persistence_id of each id, persistence_ids, all_events, an
        events_reader and events_by_tag each deliver every committed event once, in sequence nr order per id and
        in offset order where they go by offset. A write of one group is held before its commit while the other
        groups commit later offsets (where the backend can hold one: see commits_held)."""
        t = f"t-{uuid.uuid4().hex[:6]}"
        groups = [[_fresh_pid() for _ in range(2)] for _ in range(3)]
        pids = [p for g in groups for p in g]
        events = 30
        start, known = journal.newest_offset(), set(journal.current_persistence_ids())
        by_offset = {"all_events": QueryCollector(journal.all_events(start, live=True, poll_interval=0.02, gap_timeout=60)),
                     "events_reader": QueryCollector(journal.events_reader(start, gap_timeout=60)),
                     "events_by_tag": QueryCollector(journal.events_by_tag(t, live=True, poll_interval=0.02, gap_timeout=60))}
        by_id = {p: QueryCollector(journal.events_by_persistence_id(p, live=True, poll_interval=0.02)) for p in pids}
        ids = QueryCollector(journal.persistence_ids(live=True, poll_interval=0.02))
        collectors = [*by_offset.values(), *by_id.values(), ids]
        processes: list[multiprocessing.process.BaseProcess] = []
        threads: list[threading.Thread] = []
        try:
            with self.commits_held(journal, journal_url, groups[0][0]) as held:
                if self.supports_multiple_processes:
                    ctx = multiprocessing.get_context("spawn")
                    gos: list[Any] = [ctx.Event() for _ in groups]
                    processes += [ctx.Process(target=write_tagged_in_child, args=(journal_url, g, events, t, go))
                                  for g, go in zip(groups, gos, strict=True)]
                    for proc in processes:
                        proc.start()
                else:
                    gos = [threading.Event() for _ in groups]
                    threads += [threading.Thread(target=write_tagged_in_child, args=(journal_url, g, events, t, go))
                                for g, go in zip(groups, gos, strict=True)]
                    for th in threads:
                        th.start()
                gos[0].set()
                if held is not None:
                    # Group 0's first write draws its offset and waits; the other groups start only then, so every
                    # offset they commit meanwhile is a later one.
                    _until(held, 60, f"the first write of {groups[0][0]} waiting before its commit")
                for go in gos[1:]:
                    go.set()
                if held is not None:
                    _until(lambda: all(len(by_id[p].got) >= 5 for g in groups[1:] for p in g), 60,
                           "the other groups' events committing")
                    during = {k: list(c.got) for k, c in by_offset.items()}
                    later = max(by_id[p].got[-1].offset for g in groups[1:] for p in g)
            for proc in processes:
                proc.join(120)
            for th in threads:
                th.join(120)
            assert [proc.exitcode for proc in processes] == [0] * len(processes)
            _until(lambda: all(len(by_id[p].got) == events for p in pids), 60, "every id's live query complete")
            _until(lambda: len(by_offset["all_events"].got) >= events * len(pids)
                   and len(by_offset["events_reader"].got) >= events * len(pids)
                   and len(by_offset["events_by_tag"].got) >= len(range(1, events + 1, 2)) * len(pids)
                   and set(pids) <= set(ids.got), 60, "every live query complete")
            stored = list(journal.all_events(start))  # what is committed, read once everything has
        finally:
            for collector in collectors:
                collector.stop()
        assert sorted(_keys(stored)) == sorted((p, n) for p in pids for n in range(1, events + 1))
        if held is not None:
            first = next(e.offset for e in stored if (e.persistence_id, e.sequence_nr) == (groups[0][0], 1))
            assert later > first, "the scenario needs later offsets committed while the held write was open"
            assert all(e.offset < first for got in during.values() for e in got), {
                k: [e.offset for e in got] for k, got in during.items()}
        tagged = [e for e in stored if t in e.tags]
        for name, collector, expected in (("all_events", by_offset["all_events"], stored),
                                          ("events_reader", by_offset["events_reader"], stored),
                                          ("events_by_tag", by_offset["events_by_tag"], tagged)):
            assert [(e.offset, e.persistence_id, e.sequence_nr) for e in collector.got] == [
                (e.offset, e.persistence_id, e.sequence_nr) for e in expected], f"{name}: skipped, repeated or reordered"
        for p in pids:
            assert [e.sequence_nr for e in by_id[p].got] == list(range(1, events + 1)), p
            assert [e.offset for e in by_id[p].got] == [e.offset for e in stored if e.persistence_id == p], p
        assert sorted(ids.got) == sorted(known | set(pids)), "persistence_ids: each id exactly once"

    def test_ls_show_and_tail(self, journal: Journal, pid: str, writer: str) -> None:
        journal.delete_messages_to(pid, 2)
        summary = {s.persistence_id: s for s in journal.summaries()}[pid]
        assert (summary.highest_sequence_nr, summary.event_count) == (5, 3)
        assert [r.sequence_nr for r in journal.show(pid, 4)] == [4, 5]
        other = _fresh_pid()
        assert journal.write_messages([AtomicWrite([_repr(other, 1, writer)])]) == [None]
        tail = journal.tail(3)
        assert [(e.persistence_id, e.sequence_nr) for e in tail] == [(pid, 4), (pid, 5), (other, 1)]
        assert tail[-1].event == "a-1" and journal.tail(0) == []

    def test_verify_finds_nothing_wrong_in_a_healthy_journal(self, journal: Journal, pid: str) -> None:
        report = journal.verify()
        assert report.ok, report.problems
        assert report.records_checked >= 5

    # --- Reprise: integrity, permissions, concurrency -----------------------------------------------

    def test_corrupted_event_raises_journal_corruption_naming_pid_and_seq(
            self, journal: Journal, journal_url: str, pid: str, writer: str) -> None:
        journal = self.corrupt_event(journal, journal_url, pid, 3)
        try:
            assert list(journal.replay_messages(pid, 1, 2)) == [_repr(pid, 1, writer), _repr(pid, 2, writer)]
            assert _keys(journal.events_by_persistence_id(pid, 1, 2)) == [(pid, 1), (pid, 2)]
            for read in (lambda: list(journal.replay_messages(pid)),
                         lambda: list(journal.events_by_persistence_id(pid))):
                with pytest.raises(JournalCorruption) as err:
                    read()
                assert (err.value.persistence_id, err.value.sequence_nr) == (pid, 3)
                assert pid in str(err.value) and "sequence nr 3" in str(err.value)
            problems = journal.verify().problems
            assert [(p.persistence_id, p.sequence_nr) for p in problems] == [(pid, 3)]
        finally:
            journal.close()

    def test_journal_files_are_private(self, journal: Journal, pid: str) -> None:
        import os
        import stat

        files = [f for f in self.journal_files(journal) if os.path.exists(f)]
        if not files:
            pytest.skip(f"{type(self).__name__} is not file based")
        for f in files:
            mode = stat.S_IMODE(os.stat(f).st_mode)
            assert mode & 0o077 == 0, f"{f} has mode {oct(mode)}"

    @pytest.mark.timeout(120)
    def test_two_processes_writing_different_ids_lose_and_duplicate_nothing(
            self, journal: Journal, journal_url: str) -> None:
        if not self.supports_multiple_processes:
            pytest.skip(f"{type(self).__name__} cannot be shared between processes")
        ctx = multiprocessing.get_context("spawn")
        start = ctx.Event()
        groups = [[_fresh_pid() for _ in range(3)] for _ in range(2)]
        events = 60
        children = [ctx.Process(target=write_in_child, args=(journal_url, g, events, 4, start)) for g in groups]
        for c in children:
            c.start()
        start.set()
        for c in children:
            c.join(100)
        assert [c.exitcode for c in children] == [0, 0]
        for pid in itertools.chain.from_iterable(groups):
            replayed = list(journal.replay_messages(pid))
            assert [r.sequence_nr for r in replayed] == list(range(1, events + 1))
            assert [r.payload for r in replayed] == [f"{pid}-{n}" for n in range(1, events + 1)]
            assert journal.highest_sequence_nr(pid) == events


    @pytest.mark.timeout(120)
    def test_two_processes_writing_one_id_one_wins_each_number_the_other_is_refused_and_nothing_acked_is_lost(
            self, journal: Journal, journal_url: str) -> None:
        """Two OS processes write one persistence id (two systems running one entity): each round both read the
        highest sequence nr, then both write the next numbers (1 event, or 3 in one AtomicWrite). One write wins
        each round; the other is refused with SequenceNrTaken naming the id and number, none of its events stored
        (not a part of an AtomicWrite); the journal holds every acknowledged event as written, in order."""
        if not self.supports_multiple_processes:
            pytest.skip(f"{type(self).__name__} cannot be shared between processes")
        ctx = multiprocessing.get_context("spawn")
        barrier, results = ctx.Barrier(2), ctx.Queue()
        pid, rounds = _fresh_pid(), 20
        children = [ctx.Process(target=contend_in_child, args=(journal_url, pid, name, rounds, barrier, results))
                    for name in ("a", "b")]
        for c in children:
            c.start()
        got = dict(results.get(timeout=100) for _ in children)
        for c in children:
            c.join(30)
        assert [c.exitcode for c in children] == [0, 0]
        acked: list[tuple[str, int, int]] = []  # (writer, round, first sequence nr)
        for r in range(rounds):
            (ra, first_a, a), (rb, first_b, b) = got["a"][r], got["b"][r]
            assert ra == rb == r and first_a == first_b, (got["a"][r], got["b"][r])
            assert sorted([a == "ok", b == "ok"]) == [False, True], f"round {r}: one wins, one is refused: {a!r}, {b!r}"
            refusal = b if a == "ok" else a
            assert refusal.startswith("SequenceNrTaken: ") and f"sequence nr {first_a} of persistence id '{pid}'" in refusal, refusal
            acked.append(("a" if a == "ok" else "b", r, first_a))
        expected = [(writer, first + k, f"{writer}-{r}-{k}") for writer, r, first in acked
                    for k in range(1 if r % 2 == 0 else 3)]
        stored = [(e.writer_uuid, e.sequence_nr, e.payload) for e in journal.replay_messages(pid)]
        assert stored == expected
        assert journal.highest_sequence_nr(pid) == expected[-1][1]

    @pytest.mark.timeout(120)
    def test_a_forked_child_is_refused_its_parents_journal_and_closing_it_there_leaves_the_parents_alone(
            self, journal: Journal, journal_url: str, pid: str, writer: str) -> None:
        """A store that other processes share holds OS resources (SQLite's file locks, PostgreSQL's sockets) that
        a fork copies: the child must not use its parent's journal (JournalError naming 'spawn'), closing it
        there must leave the parent's connections alone, and a journal the child opens itself either works or
        is refused the same way."""
        if not self.supports_multiple_processes:
            pytest.skip(f"{type(self).__name__} cannot be shared between processes")
        other = _fresh_pid()

        def write() -> str:
            return str(journal.write_messages([AtomicWrite([_repr(pid, 6, writer)])]))

        def read() -> str:
            return str(journal.highest_sequence_nr(pid))

        def close() -> str:
            journal.close()
            return "closed"

        def reopen() -> str:
            with open_journal(journal_url) as mine:
                return str(mine.write_messages([AtomicWrite([_repr(other, 1, writer)])]))

        said = _forked_child_keeps_the_rule((write, read), close, reopen, "[None]")
        assert journal.write_messages([AtomicWrite([_repr(pid, 6, writer)])]) == [None]
        assert [r.sequence_nr for r in journal.replay_messages(pid)] == [1, 2, 3, 4, 5, 6]
        assert [r.sequence_nr for r in journal.replay_messages(other)] == ([1] if said == "[None]" else [])

    # --- Conformance audit: the plugin contract of reference §3.2 beyond the TCK's cases -----------------
    # (A block of its own: cases other audits add to this class go above or below it.)

    def test_the_from_hint_of_highest_sequence_nr_is_only_a_hint(self, journal: Journal, pid: str) -> None:
        """§3.2 (4): fromSequenceNr is a search hint (the snapshot's seq nr): above the highest it changes nothing."""
        assert [journal.highest_sequence_nr(pid, hint) for hint in (0, 3, 5, 10, MAX)] == [5] * 5
        assert journal.highest_sequence_nr("never-written-" + pid, 10) == 0

    def test_deleting_beyond_the_highest_deletes_all_and_keeps_the_highest(
            self, journal: Journal, pid: str, writer: str) -> None:
        """§3.2 (2): DeleteMessagesTo(n > highest) deletes everything and never lowers the highest."""
        journal.delete_messages_to(pid, 0)  # nothing is <= 0
        self.expect(journal, pid, writer, 1, MAX, MAX, [1, 2, 3, 4, 5], 5)
        journal.delete_messages_to(pid, 100)
        self.expect(journal, pid, writer, 1, MAX, MAX, [], 5)
        if self.supports_replay_only_last:
            self.expect(journal, pid, writer, -1, MAX, MAX, [], 5)  # the last event is gone too

    def test_the_highest_sequence_nr_survives_deleting_everything_and_reopening(
            self, journal: Journal, journal_url: str, pid: str, writer: str) -> None:
        """§3.2 (2, 4): the highest is stored, not derived from the events left: a reopened journal still has it,
        so a recovering actor goes on at 6 instead of reusing 1..5 (a query's offsets past them would skip it)."""
        journal.delete_messages_to(pid, MAX)
        with open_journal(journal_url) as reopened:
            self.expect(reopened, pid, writer, 0, MAX, MAX, [], 5)
            assert reopened.write_messages([AtomicWrite([_repr(pid, 6, writer)])]) == [None]
        self.expect(journal, pid, writer, 1, MAX, MAX, [6], 6)

    def test_a_replay_count_limit_counts_events_not_sequence_nrs_across_a_deleted_range(
            self, journal: Journal, pid: str, writer: str) -> None:
        """§3.2 (3): at most `max` *events* with from <= seq nr <= to: a range deleted before `from` or a gap in it
        (a rejected write's number) uses none of the count."""
        journal.delete_messages_to(pid, 2)
        self.expect(journal, pid, writer, 1, MAX, 2, [3, 4], 5)
        assert journal.write_messages([AtomicWrite([_repr(pid, 8, writer)])]) == [None]  # 6, 7: a gap
        self.expect(journal, pid, writer, 5, MAX, 2, [5, 8], 8)
        self.expect(journal, pid, writer, 6, 7, MAX, [], 8)

    def test_events_of_one_batch_replay_in_sequence_nr_order_per_persistence_id(
            self, journal: Journal, pid: str, writer: str) -> None:
        """§3.2 (1): one call's AtomicWrites of several ids interleaved: each id replays its own, in order."""
        other = _fresh_pid()
        writes = [AtomicWrite([_repr(other, 1, writer)]), AtomicWrite([_repr(pid, 6, writer), _repr(pid, 7, writer)]),
                  AtomicWrite([_repr(other, 2, writer), _repr(other, 3, writer)]), AtomicWrite([_repr(pid, 8, writer)])]
        assert journal.write_messages(writes) == [None] * 4
        self.expect(journal, pid, writer, 5, MAX, MAX, [5, 6, 7, 8], 8)
        self.expect(journal, other, writer, 1, MAX, MAX, [1, 2, 3], 3)


class SnapshotStoreSpec:
    """Akka's SnapshotStoreSpec (cases 1-13) plus Reprise's snapshot cases."""

    supports_serialization: bool = True
    supports_metadata: bool = False
    supports_multiple_processes: bool = False
    """The store at `snapshot_url` can be opened by other OS processes (enables the forked-child case)."""

    @pytest.fixture
    def snapshot_url(self) -> str:
        """URL of a fresh, empty snapshot store; override in the backend's subclass."""
        raise NotImplementedError("subclasses of SnapshotStoreSpec provide a `snapshot_url` fixture")

    @pytest.fixture
    def store(self, snapshot_url: str) -> Iterator[SnapshotStore]:
        s = open_snapshot_store(snapshot_url)
        yield s
        s.close()

    def corrupt_snapshot(self, store: SnapshotStore, snapshot_url: str, pid: str, sequence_nr: int
                         ) -> SnapshotStore:
        """Damage the stored bytes of one snapshot; return the store to read it with (it may reopen)."""
        pytest.skip(f"{type(self).__name__} gives no way to damage a stored snapshot")

    def corrupt_snapshot_timestamp(self, store: SnapshotStore, snapshot_url: str, pid: str, sequence_nr: int,
                                   bit: int) -> SnapshotStore:
        """Flip bit `bit` of one snapshot's stored timestamp; return the store to read it with (it may reopen)."""
        pytest.skip(f"{type(self).__name__} gives no way to damage a stored timestamp")

    @pytest.fixture
    def pid(self) -> str:
        return _fresh_pid()

    @pytest.fixture
    def md(self, store: SnapshotStore, pid: str) -> list[SnapshotMetadata]:
        """Fixture: snapshots "s-1".."s-5" saved at seq nrs 11..15; md(i) = the returned metadata."""
        return [store.save(SnapshotMetadata(pid, 10 + i), f"s-{i}") for i in range(1, 6)]

    @staticmethod
    def load(store: SnapshotStore, pid: str, criteria: SnapshotSelectionCriteria,
             to_sequence_nr: int = MAX) -> SelectedSnapshot | None:
        """What the snapshot actor does for LoadSnapshot(pid, criteria, toSequenceNr)."""
        if criteria == SnapshotSelectionCriteria.NONE:
            return None
        return store.load(pid, criteria.limit(to_sequence_nr))

    # --- SnapshotStoreSpec: mandatory cases 1-11 --------------------------------------------------

    @pytest.mark.parametrize("bad", [-1, MAX + 1, True], ids=["negative", "beyond-max", "bool"])
    def test_a_snapshot_at_a_sequence_nr_no_backend_can_store_is_refused_naming_it(
            self, store: SnapshotStore, pid: str, bad: Any) -> None:
        # Beyond a 64-bit int SQLite raised a raw OverflowError; a negative one was stored where no recovery looks.
        with pytest.raises(SerializationError, match="the sequence nr must be an int from 0 to"):
            store.save(SnapshotMetadata(pid, bad), "s")
        assert store.load(pid) is None

    def test_not_load_a_snapshot_given_an_invalid_persistence_id(
            self, store: SnapshotStore, md: list[SnapshotMetadata]) -> None:
        """1: Load("invalid", Latest) -> None."""
        assert self.load(store, "invalid", SnapshotSelectionCriteria.LATEST) is None

    def test_not_load_a_snapshot_given_non_matching_timestamp_criteria(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """2: Load(pid, Latest with maxTimestamp = 100) -> None."""
        assert self.load(store, pid, SnapshotSelectionCriteria(max_timestamp=100)) is None

    def test_not_load_a_snapshot_given_non_matching_sequence_number_criteria(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """3: Load(pid, criteria(maxSeq 7)) -> None; Load(pid, Latest, toSeq 7) -> None."""
        assert self.load(store, pid, SnapshotSelectionCriteria(max_sequence_nr=7)) is None
        assert self.load(store, pid, SnapshotSelectionCriteria.LATEST, 7) is None

    def test_load_the_most_recent_snapshot(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """4: Load(pid, Latest) -> (md(4), "s-5")."""
        assert self.load(store, pid, SnapshotSelectionCriteria.LATEST) == SelectedSnapshot(md[4], "s-5")

    def test_load_the_most_recent_snapshot_matching_an_upper_sequence_number_bound(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """5: Load(pid, criteria(13)) and Load(pid, Latest, 13) -> (md(2), "s-3")."""
        assert self.load(store, pid, SnapshotSelectionCriteria(max_sequence_nr=13)) == SelectedSnapshot(md[2], "s-3")
        assert self.load(store, pid, SnapshotSelectionCriteria.LATEST, 13) == SelectedSnapshot(md[2], "s-3")

    def test_load_the_most_recent_snapshot_matching_upper_sequence_number_and_timestamp_bounds(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """6: Load(pid, criteria(13, md(2).ts)); Load(pid, Latest with maxTimestamp md(2).ts, 13) -> md(2)."""
        expected = SelectedSnapshot(md[2], "s-3")
        assert self.load(store, pid, SnapshotSelectionCriteria(13, md[2].timestamp)) == expected
        assert self.load(store, pid, SnapshotSelectionCriteria(max_timestamp=md[2].timestamp), 13) == expected

    def test_delete_a_single_snapshot_identified_by_sequence_nr_in_snapshot_metadata(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """7: DeleteSnapshot(md(2) with timestamp 0); Load(pid, criteria(13)) -> (md(1), "s-2")."""
        store.delete(SnapshotMetadata(pid, md[2].sequence_nr, 0))
        assert self.load(store, pid, SnapshotSelectionCriteria(max_sequence_nr=13)) == SelectedSnapshot(md[1], "s-2")

    def test_delete_all_snapshots_matching_upper_sequence_number_and_timestamp_bounds(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """8: DeleteSnapshots(criteria(13, md(2).ts)) -> nothing <= 13 left; criteria(14, md(3).ts) -> md(3)."""
        store.delete_matching(pid, SnapshotSelectionCriteria(13, md[2].timestamp))
        assert self.load(store, pid, SnapshotSelectionCriteria(13, md[2].timestamp)) is None
        assert self.load(store, pid, SnapshotSelectionCriteria(14, md[3].timestamp)) == SelectedSnapshot(md[3], "s-4")

    def test_not_delete_snapshots_with_non_matching_upper_timestamp_bounds(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """9: DeleteSnapshots(criteria(14, md(3).ts - 1)) leaves md(3)."""
        store.delete_matching(pid, SnapshotSelectionCriteria(14, md[3].timestamp - 1))
        assert self.load(store, pid, SnapshotSelectionCriteria(14, md[3].timestamp)) == SelectedSnapshot(md[3], "s-4")

    def test_save_and_overwrite_snapshot_with_same_sequence_number(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """10: SaveSnapshot(md(4), "s-5-modified") -> seq 15; Load(criteria(15)) -> "s-5-modified"."""
        saved = store.save(md[4], "s-5-modified")
        assert saved.sequence_nr == 15 and saved.persistence_id == pid
        loaded = self.load(store, pid, SnapshotSelectionCriteria(max_sequence_nr=15))
        assert loaded is not None
        assert (loaded.snapshot, loaded.metadata.sequence_nr) == ("s-5-modified", 15)

    def test_save_bigger_size_snapshot(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """11: SaveSnapshot((pid, 100), "0" * 10000) succeeds."""
        saved = store.save(SnapshotMetadata(pid, 100), "0" * 10000)
        assert saved.sequence_nr == 100
        assert _must_load(store, pid).snapshot == "0" * 10000

    # --- SnapshotStoreSpec: optional cases 12-13 --------------------------------------------------

    def test_serialize_snapshots(self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """12: TestPayload saved at (pid, 100) loads equal."""
        if not self.supports_serialization:
            pytest.skip("supports_serialization is off")
        payload = TckPayload(TckRef("reprise://sys/user/probe#7"))
        store.save(SnapshotMetadata(pid, 100), payload)
        loaded = self.load(store, pid, SnapshotSelectionCriteria.LATEST)
        assert loaded is not None and loaded.metadata.sequence_nr == 100
        assert loaded.metadata.persistence_id == pid and loaded.snapshot == payload

    def test_store_metadata(self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """13: "snap" saved at (pid, 100) with metadata "fictional metadata" loads with it."""
        if not self.supports_metadata:
            pytest.skip("supports_metadata is off")
        store.save(SnapshotMetadata(pid, 100, metadata="fictional metadata"), "snap")
        loaded = self.load(store, pid, SnapshotSelectionCriteria.LATEST)
        assert loaded is not None and loaded.snapshot == "snap" and loaded.metadata.sequence_nr == 100
        assert loaded.metadata.metadata == "fictional metadata"

    # --- Reprise ---------------------------------------------------------------------------------

    def test_save_stamps_the_timestamp_in_milliseconds(self, store: SnapshotStore, pid: str) -> None:
        import time

        before = time.time_ns() // 1_000_000
        saved = store.save(SnapshotMetadata(pid, 1), "x")
        assert before <= saved.timestamp <= time.time_ns() // 1_000_000
        assert _must_load(store, pid).metadata == saved

    def test_does_not_confuse_europe_with_europeitaly(self, store: SnapshotStore) -> None:
        suffix = uuid.uuid4().hex[:6]
        store.save(SnapshotMetadata(f"europe{suffix}", 1), "eu")
        store.save(SnapshotMetadata(f"europeitaly{suffix}", 2), "it")
        assert _must_load(store, f"europe{suffix}").snapshot == "eu"
        store.delete_matching(f"europe{suffix}", SnapshotSelectionCriteria.LATEST)
        assert store.load(f"europe{suffix}") is None
        assert _must_load(store, f"europeitaly{suffix}").snapshot == "it"

    def test_criteria_none_selects_nothing_and_latest_everything(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        assert store.load(pid, SnapshotSelectionCriteria.NONE) is None
        assert _must_load(store, pid, SnapshotSelectionCriteria.LATEST).metadata == md[4]
        assert _must_load(store, pid, SnapshotSelectionCriteria(min_sequence_nr=12, max_sequence_nr=12)).snapshot == "s-2"
        assert store.load(pid, SnapshotSelectionCriteria(min_sequence_nr=16)) is None

    def test_delete_with_a_different_timestamp_keeps_the_snapshot(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        store.delete(SnapshotMetadata(pid, 15, md[4].timestamp + 1))
        assert _must_load(store, pid).metadata == md[4]
        store.delete(md[4])
        assert _must_load(store, pid).metadata == md[3]

    def test_unserializable_snapshot_is_refused(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        with pytest.raises(SerializationError, match="NotSerializable"):
            store.save(SnapshotMetadata(pid, 100), {"x": NotSerializable()})
        assert _must_load(store, pid).metadata == md[4]

    def test_snapshot_with_unknown_manifest_raises_instead_of_returning_none(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        manifest = f"reprise.tck.EphemeralSnapshot-{uuid.uuid4().hex}"

        @dataclass(frozen=True)
        class State:
            x: int

        register_type(State, manifest=manifest)
        try:
            store.save(SnapshotMetadata(pid, 100), State(1))
        finally:
            unregister_type(manifest)
        with pytest.raises(SerializationError, match="unknown manifest"):
            store.load(pid)
        assert _must_load(store, pid, SnapshotSelectionCriteria(max_sequence_nr=99)).snapshot == "s-5"

    def test_corrupted_snapshot_raises_instead_of_returning_none(
            self, store: SnapshotStore, snapshot_url: str, pid: str, md: list[SnapshotMetadata]) -> None:
        store = self.corrupt_snapshot(store, snapshot_url, pid, 15)
        try:
            with pytest.raises(JournalCorruption) as err:
                store.load(pid)
            assert (err.value.persistence_id, err.value.sequence_nr) == (pid, 15)
            assert _must_load(store, pid, SnapshotSelectionCriteria(max_sequence_nr=14)).snapshot == "s-4"
        finally:
            store.close()

    @pytest.mark.timeout(120)
    def test_a_forked_child_is_refused_its_parents_store_and_closing_it_there_leaves_the_parents_alone(
            self, store: SnapshotStore, snapshot_url: str, pid: str, md: list[SnapshotMetadata]) -> None:
        """As JournalSpec's case: a forked child may not use its parent's store; closing it there is harmless."""
        if not self.supports_multiple_processes:
            pytest.skip(f"{type(self).__name__} cannot be shared between processes")
        other = _fresh_pid()

        def save() -> str:
            return str(store.save(SnapshotMetadata(pid, 100), "child").sequence_nr)

        def load() -> str:
            return str(store.load(pid))

        def close() -> str:
            store.close()
            return "closed"

        def reopen() -> str:
            mine = open_snapshot_store(snapshot_url)
            try:
                return str(mine.save(SnapshotMetadata(other, 1), "child").sequence_nr)
            finally:
                mine.close()

        said = _forked_child_keeps_the_rule((save, load), close, reopen, "1")
        assert _must_load(store, pid).metadata == md[4]
        assert store.save(SnapshotMetadata(pid, 16), "s-6").sequence_nr == 16
        assert _must_load(store, pid).snapshot == "s-6"
        assert (store.load(other) is not None) == (said == "1")

    @pytest.mark.parametrize("younger", [True, False], ids=["flipped-younger", "flipped-older"])
    def test_a_flipped_bit_in_a_stored_timestamp_is_corruption_not_another_snapshot(
            self, store: SnapshotStore, snapshot_url: str, pid: str, md: list[SnapshotMetadata], younger: bool) -> None:
        """The timestamp is stored beside the checksummed bytes: flipped younger, a load bounded by max_timestamp
        passed the newest snapshot over and returned an older one (a recovery from it then replays events that may
        have been deleted since); flipped older, it returned the newest where the bound excluded it."""
        ts = md[4].timestamp
        bit = 50 if younger else ts.bit_length() - 1  # far beyond any bound, or below the others' timestamps
        assert ((ts ^ (1 << bit)) > ts) == younger
        store = self.corrupt_snapshot_timestamp(store, snapshot_url, pid, 15, bit)
        try:
            bounded = SnapshotSelectionCriteria(max_timestamp=ts if younger else md[3].timestamp)
            for criteria in (bounded, SnapshotSelectionCriteria.LATEST):
                with pytest.raises(JournalCorruption, match="timestamp") as err:
                    store.load(pid, criteria)
                assert (err.value.persistence_id, err.value.sequence_nr) == (pid, 15)
            assert _must_load(store, pid, SnapshotSelectionCriteria(max_sequence_nr=14)).metadata == md[3]
        finally:
            store.close()

    @pytest.mark.parametrize("how", ["delete", "delete_matching"])
    def test_a_delete_by_timestamp_checks_the_stored_timestamp(
            self, store: SnapshotStore, snapshot_url: str, pid: str, md: list[SnapshotMetadata], how: str) -> None:
        """Deletes compared the stored timestamp without its checksum: with a bit of the newest snapshot's timestamp
        flipped low, delete_matching(max_timestamp=the one before) removed the newest snapshot too, and delete(its
        metadata) kept it while reporting success. Now the delete raises JournalCorruption naming it, deleting
        nothing; a delete without timestamp bounds still removes it."""
        ts = md[4].timestamp
        store = self.corrupt_snapshot_timestamp(store, snapshot_url, pid, 15, ts.bit_length() - 1)  # now the oldest
        try:
            with pytest.raises(JournalCorruption, match="nothing was deleted") as err:
                if how == "delete":
                    store.delete(md[4])
                else:
                    store.delete_matching(pid, SnapshotSelectionCriteria(max_timestamp=md[3].timestamp))
            assert (err.value.persistence_id, err.value.sequence_nr) == (pid, 15)
            with pytest.raises(JournalCorruption):
                store.load(pid)  # the damaged newest snapshot is still there
            assert _must_load(store, pid, SnapshotSelectionCriteria(max_sequence_nr=14)).metadata == md[3]
            # Sound snapshots are deleted by timestamp as before; the damaged one by sequence nr alone.
            store.delete(md[3])
            store.delete_matching(pid, SnapshotSelectionCriteria(max_sequence_nr=12, max_timestamp=md[1].timestamp))
            store.delete(SnapshotMetadata(pid, 15))
            assert _must_load(store, pid).metadata == md[2]
        finally:
            store.close()

    def test_a_snapshot_of_the_format_before_the_timestamp_was_checksummed_still_loads(
            self, store: SnapshotStore, pid: str) -> None:
        from journal.serialization import FORMAT_FLAT, checksum, key_seed, thread_packer

        for seq in (1, 2):  # as the release before format 3 wrote them: [2, metadata, snapshot], key and bytes only
            blob = thread_packer()([FORMAT_FLAT, None, f"old-{seq}"])
            store._save(SnapshotMetadata(pid, seq, 1000 * seq), blob, checksum(key_seed(pid), seq, blob))
        assert _must_load(store, pid).snapshot == "old-2"
        assert _must_load(store, pid, SnapshotSelectionCriteria(max_timestamp=1999)) == SelectedSnapshot(
            SnapshotMetadata(pid, 1, 1000), "old-1")

    # --- Conformance audit: the plugin contract of reference §3.3 beyond the TCK's cases -----------------
    # (A block of its own: cases other audits add to this class go above or below it.)

    def test_the_lower_bounds_of_the_criteria_select(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """§3.3: a snapshot matches iff minSeq <= seq nr <= maxSeq and minTs <= timestamp <= maxTs (inclusive)."""
        assert _must_load(store, pid, SnapshotSelectionCriteria(min_timestamp=md[0].timestamp)).metadata == md[4]
        assert _must_load(store, pid, SnapshotSelectionCriteria(min_timestamp=md[4].timestamp)).metadata == md[4]
        assert store.load(pid, SnapshotSelectionCriteria(min_timestamp=md[4].timestamp + 1)) is None
        assert _must_load(store, pid, SnapshotSelectionCriteria(max_sequence_nr=13, min_sequence_nr=13)).metadata == md[2]
        assert store.load(pid, SnapshotSelectionCriteria(max_sequence_nr=12, min_sequence_nr=13)) is None

    def test_a_delete_by_criteria_keeps_what_its_lower_bounds_exclude(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """§3.3 (4): DeleteSnapshots deletes the matching snapshots only, lower bounds included."""
        store.delete_matching(pid, SnapshotSelectionCriteria(max_sequence_nr=14, min_sequence_nr=13))
        assert [_must_load(store, pid, SnapshotSelectionCriteria(max_sequence_nr=n)).metadata for n in (12, 14, 15)
                ] == [md[1], md[1], md[4]]
        store.delete_matching(pid, SnapshotSelectionCriteria(min_timestamp=md[4].timestamp + 1))
        assert _must_load(store, pid).metadata == md[4]
        store.delete_matching(pid, SnapshotSelectionCriteria(min_timestamp=md[0].timestamp, max_timestamp=md[4].timestamp))
        assert store.load(pid) is None

    def test_deleting_what_is_not_there_is_no_error(
            self, store: SnapshotStore, pid: str, md: list[SnapshotMetadata]) -> None:
        """§3.3 (3, 4): a delete that matches nothing succeeds (the actor gets DeleteSnapshot(s)Success)."""
        store.delete(SnapshotMetadata(pid, 99))
        store.delete(SnapshotMetadata("never-saved-" + pid, 11, md[0].timestamp))
        store.delete_matching("never-saved-" + pid, SnapshotSelectionCriteria.LATEST)
        store.delete_matching(pid, SnapshotSelectionCriteria(max_sequence_nr=10))
        assert _must_load(store, pid).metadata == md[4] and store.load("never-saved-" + pid) is None

    def test_a_snapshot_at_sequence_nr_0_is_saved_and_selected_up_to_0(self, store: SnapshotStore, pid: str) -> None:
        """§2.9 (SnapshotRecoveryLocalStoreSpec): an actor without events may snapshot at 0; Recovery(toSequenceNr
        = 0) selects it (criteria capped at 0), while SnapshotSelectionCriteria.NONE selects nothing."""
        saved = store.save(SnapshotMetadata(pid, 0), "empty")
        assert self.load(store, pid, SnapshotSelectionCriteria.LATEST, 0) == SelectedSnapshot(saved, "empty")
        assert self.load(store, pid, SnapshotSelectionCriteria.NONE, 0) is None

    def test_saved_snapshots_are_there_for_a_reopened_store(
            self, store: SnapshotStore, snapshot_url: str, pid: str, md: list[SnapshotMetadata]) -> None:
        """§3.3 (2): a save is done when the store has it: another instance of the same URL loads it."""
        with open_snapshot_store(snapshot_url) as reopened:
            assert _must_load(reopened, pid) == SelectedSnapshot(md[4], "s-5")
            reopened.delete(SnapshotMetadata(pid, 15))
        assert _must_load(store, pid).metadata == md[3]

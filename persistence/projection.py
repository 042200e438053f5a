"""Projections: an actor that feeds the events of a tag to a handler and remembers how far it got.

    system.spawn(Projection, "/user/balances", kwargs=dict(
        source=EventsByTag("deposit"),                 # the host's journal, or EventsByTag(tag, journal=URL)
        handler="myapp.read_model:apply_deposits",     # or the function itself (importable by name)
        offset_store="sqlite:///var/read-model.db",
        exactly_once=True, group_size=100))

As in Akka Projections:
- at-least-once (default): `handler(envelope)`, and the offset is saved after `save_after_envelopes`
  events or `save_after_duration` seconds, whichever comes first (Akka: 100 and 250 ms). After a crash
  the events handled since the last save are handled again.
- exactly-once: `handler(conn, envelope)` runs inside a transaction of the offset store's database
  (a sqlite3 or psycopg connection) that also stores the offset: both commit, or neither.
- grouped (`group_size`): the handler gets a list of up to `group_size` envelopes, or fewer once the
  first of them waited `group_within` seconds (Akka: 20 and 500 ms).

The actor never blocks on the journal: a timer drives it, and each tick takes at most `batch` events from
the journal's EventReader (`Journal.events_reader`), which returns what is readable now. On PostgreSQL it
stops below a write still in flight and the projection looks again soon (no late-committing event is
skipped; a gap older than gap_timeout is skipped with a warning, OrderingHorizon's rule). It ticks again
at once while a tick got a full batch, else after `poll_interval`. A handler exception fails the actor;
the host restarts it and it resumes from the stored offset.
`System.status()` / `reprise status` show the host's counter `projection_lag`: the newest offset of the
tag in the journal (`Journal.newest_offset(tag)`, asked once per status request) minus the stored offset.
"""

from __future__ import annotations

import importlib
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from actors import Actor
from journal import EventEnvelope, EventReader, Journal, RepriseError, missing_journal
from journal.urls import file_path_fix, redact_url
from persistence.offset_store import OffsetConflict, OffsetStore, OffsetStoreError, open_offset_store
from persistence.plugins import journal_for

__all__ = ["EventsByTag", "GetProjectionState", "Projection", "ProjectionError", "ProjectionState"]

Handler = Callable[..., object]


class ProjectionError(RepriseError, ValueError):
    """A projection was configured wrongly (its source, handler, offset store or options)."""


class ProjectionHandlerError(RepriseError, RuntimeError):
    """A projection's handler raised: names the event (persistence id, sequence nr, offset); the cause is chained."""


@dataclass(frozen=True)
class EventsByTag:
    """A projection's source: the events tagged `tag` in the journal at `journal` (None: the host's journal).

    `gap_timeout` (seconds, None: the journal's): how long a PostgreSQL write in flight may hold the reader back
    before its offset is skipped as rolled back (the projection never waits on it: it reads again later).
    """

    tag: str
    journal: str | None = None
    gap_timeout: float | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.tag, str) or not self.tag:
            raise ProjectionError(f"EventsByTag needs a non-empty tag (as returned by tags_for), got {self.tag!r}")
        if self.journal is not None and not isinstance(self.journal, str):
            raise ProjectionError(f"EventsByTag journal must be a journal URL or None, got {self.journal!r}")


@dataclass(frozen=True)
class GetProjectionState:
    """Ask a projection for its ProjectionState."""


@dataclass(frozen=True)
class ProjectionState:
    """A projection's progress: offsets stored, handled and read, and the newest offset of its tag in the journal.

    `newest_offset` is asked of the journal when the state is (`Journal.newest_offset(tag)`): `lag` is exact,
    including the events the projection has not read yet.
    """

    projection_id: str
    stored_offset: int
    handled_offset: int
    read_offset: int
    newest_offset: int

    @property
    def lag(self) -> int:
        """Offsets of the tag in the journal beyond the stored offset (0: caught up)."""
        return max(0, self.newest_offset - self.stored_offset)


@dataclass(frozen=True)
class _Tick:
    """The projection's own timer: read and handle the next batch."""


_TICK = _Tick()
_GAP_RECHECK = 0.05
"""Seconds until the next tick while a write in flight holds the reader back (it usually commits in ms)."""


def _resolve_handler(handler: Handler | str) -> Handler:
    if callable(handler):
        return handler
    if not isinstance(handler, str):
        raise ProjectionError(f"handler must be a function or 'module:function', got {handler!r}")
    module_name, sep, name = handler.partition(":") if ":" in handler else handler.rpartition(".")
    if not module_name or not name:
        raise ProjectionError(f"handler {handler!r} must be written 'module:function' or 'module.function'")
    try:
        obj: Any = importlib.import_module(module_name)
        for part in name.split("."):
            obj = getattr(obj, part)
    except (ImportError, AttributeError) as e:
        raise ProjectionError(f"handler {handler!r} cannot be imported: {e}") from None
    if not callable(obj):
        raise ProjectionError(f"handler {handler!r} is not callable")
    return cast(Handler, obj)


def _source(source: EventsByTag | Mapping[str, Any]) -> EventsByTag:
    if isinstance(source, EventsByTag):
        return source
    if isinstance(source, Mapping):  # a topology file's table: source = { tag = "deposit" }
        try:
            return EventsByTag(**source)
        except TypeError as e:
            raise ProjectionError(f"source {dict(source)!r}: {e} (keys: tag, journal, gap_timeout)") from None
    raise ProjectionError(f"source must be EventsByTag(tag, journal=None) or a table with a tag, got {source!r}")


def _positive(name: str, value: object, integer: bool, hint: str) -> None:
    ok = isinstance(value, int) if integer else isinstance(value, int | float)
    if not ok or isinstance(value, bool) or cast(float, value) <= 0:
        raise ProjectionError(f"{name} must be a positive {'int' if integer else 'number'} ({hint}), got {value!r}")


class Projection(Actor):
    """Feeds the events of a tag to `handler` in offset order, storing its offset in `offset_store`."""

    def __init__(self, source: EventsByTag | Mapping[str, Any], handler: Handler | str, offset_store: str, *,
                 projection_id: str | None = None, exactly_once: bool = False,
                 save_after_envelopes: int = 100, save_after_duration: float = 0.25,
                 group_size: int | None = None, group_within: float = 0.5,
                 batch: int = 1000, poll_interval: float = 1.0) -> None:
        self.source = _source(source)
        self.handler = _resolve_handler(handler)
        fix = file_path_fix(offset_store, "offset store")
        if fix is not None:  # (offset_store="read-model.db")
            raise ProjectionError(f"offset_store {offset_store!r} is a file path, not a URL: {fix}")
        if not isinstance(offset_store, str) or "://" not in offset_store:
            raise ProjectionError(f"offset_store must be a URL such as sqlite:///abs/read-model.db or "
                                  f"postgresql://user@host/db?schema=name, got {offset_store!r}")
        self.offset_store_url = offset_store
        if projection_id is not None and (not isinstance(projection_id, str) or not projection_id):
            raise ProjectionError(f"projection_id must be a non-empty string (default: the actor's path), "
                                  f"got {projection_id!r}")
        self.projection_id = projection_id
        if not isinstance(exactly_once, bool):  # ("no" would be true)
            raise ProjectionError(f"exactly_once must be True or False, got {exactly_once!r}")
        self.exactly_once = exactly_once
        if self.exactly_once and offset_store.startswith("memory://"):
            # Refused here, not at the first event: there is no transaction to put the handler's writes in.
            raise ProjectionError(f"exactly_once=True needs an offset_store whose database the handler writes in "
                                  f"(sqlite:///abs/read-model.db or postgresql://...), got {offset_store!r}")
        _positive("save_after_envelopes", save_after_envelopes, True, "events handled between two offset saves")
        _positive("save_after_duration", save_after_duration, False, "seconds between two offset saves")
        if group_size is not None:
            _positive("group_size", group_size, True, "envelopes per handler call; None: one at a time")
        _positive("group_within", group_within, False, "seconds a partial group waits for more envelopes")
        _positive("batch", batch, True, "events read per tick")
        _positive("poll_interval", poll_interval, False, "seconds between two looks for new events")
        self.save_after_envelopes = save_after_envelopes
        self.save_after_duration = float(save_after_duration)
        self.group_size = group_size
        self.group_within = float(group_within)
        self.batch = batch
        self.poll_interval = float(poll_interval)

    # --- lifecycle ---------------------------------------------------------------------------------

    def pre_start(self) -> None:
        """Open the journal and the offset store, load the stored offset and start reading."""
        self.name = self.projection_id or self.path
        own = cast("str | None", self.config.get("journal"))
        url = self.source.journal or own
        if not url:
            raise ProjectionError(f"projection {self.name}: no journal to read: give EventsByTag(tag, journal=URL) "
                                  "or start the system with journal=URL")
        if url != own:  # (the system's own journal is its writers': it may not exist before their first event)
            why = missing_journal(url)
            if why is not None:  # opening it would create an empty journal, read as "nothing to do" forever
                raise ProjectionError(f"projection {self.name}: EventsByTag(journal={redact_url(url)!r}): {why}; "
                                      "check the URL (or start what writes that journal first)")
        self._journal: Journal = journal_for(url)
        self._store: OffsetStore | None = open_offset_store(self.offset_store_url)
        self.stored = self.handled = self.read = self._store.load(self.name)
        self._unsaved = 0
        self._saved_at = time.monotonic()
        self._group: list[EventEnvelope] = []
        self._group_since = 0.0
        self._reader: EventReader = self._journal.events_reader(self.read, self.source.tag, self.source.gap_timeout)
        self.schedule_once(0.0, _TICK)

    def post_stop(self) -> None:
        """At-least-once: store the offset of what was handled; then close the offset store."""
        store = getattr(self, "_store", None)
        if store is None:
            return
        try:
            if self._unsaved:
                self._save()
        finally:
            self._store = None
            store.close()

    def receive(self, message: Any, sender: str | None) -> None:
        """Ticks of its own timer; GetProjectionState is answered with a ProjectionState."""
        if message is _TICK or isinstance(message, _Tick):
            self._tick()
        elif isinstance(message, GetProjectionState):
            if sender is not None:
                self.tell(sender, self.state())

    def state(self) -> ProjectionState:
        """Where this projection is (one query of the journal: its newest offset of the tag)."""
        newest = max(self._journal.newest_offset(self.source.tag), self.read)
        return ProjectionState(self.name, self.stored, self.handled, self.read, newest)

    def stats(self) -> dict[str, int]:
        """`projection_lag` for System.status() / `reprise status`: the journal's newest offset of the tag
        minus the stored offset (one query per status request, none per event)."""
        return {"projection_lag": self.state().lag} if hasattr(self, "stored") else {}

    # --- the work ----------------------------------------------------------------------------------

    def _tick(self) -> None:
        # One reader for the projection's life: its ordering horizon remembers a gap (and how old it is) from
        # one tick to the next, and scans the journal's offsets once during a catch-up, not once per batch.
        envelopes = self._reader.read(self.batch)
        if envelopes:
            self.read = envelopes[-1].offset
        now = time.monotonic()
        if self.group_size is None and not self.exactly_once:
            self._handle_each(envelopes)
        elif self.group_size is None:
            for envelope in envelopes:
                self._handle([envelope])
        else:
            if envelopes and not self._group:
                self._group_since = now
            self._group.extend(envelopes)
            size = self.group_size
            while len(self._group) >= size:
                group, self._group = self._group[:size], self._group[size:]
                self._handle(group)
                self._group_since = now
            if self._group and now - self._group_since >= self.group_within:
                group, self._group = self._group, []
                self._handle(group)
        now = time.monotonic()  # handling took time
        if self._unsaved and now - self._saved_at >= self.save_after_duration:
            self._save()
        delay = 0.0 if len(envelopes) == self.batch else self.poll_interval
        if self._reader.waiting:
            delay = min(delay, _GAP_RECHECK)
        if self._group:
            delay = min(delay, max(0.0, self._group_since + self.group_within - now))
        if self._unsaved:
            delay = min(delay, max(0.0, self._saved_at + self.save_after_duration - now))
        self.schedule_once(delay, _TICK)

    def _handle(self, envelopes: list[EventEnvelope]) -> None:
        try:
            self._apply(envelopes)
        except (OffsetConflict, ProjectionHandlerError):
            raise  # (each says what happened itself)
        except Exception as e:
            # The offset store's own failure: starting or committing the transaction, or saving the offset.
            assert self._store is not None
            raise OffsetStoreError(f"projection {self.name}: the offset store {redact_url(self._store.url)} failed "
                                   f"(the offset was not stored; exactly-once: nor the handler's writes): "
                                   f"{type(e).__name__}: {e}; restarted, the projection opens it again and goes on "
                                   "from the stored offset") from e

    def _failed(self, envelopes: list[EventEnvelope], e: Exception) -> ProjectionHandlerError:
        # The host reports the message it was handling, which is only the projection's own timer tick:
        # say which event the handler failed on. The projection restarts from its stored offset.
        first = envelopes[0]
        more = f" (first of a group of {len(envelopes)})" if len(envelopes) > 1 else ""
        return ProjectionHandlerError(
            f"projection {self.name}: the handler failed on event {first.persistence_id} #{first.sequence_nr} "
            f"(offset {first.offset}){more}: {type(e).__name__}: {e}")

    def _handle_each(self, envelopes: list[EventEnvelope]) -> None:
        """At-least-once, one envelope a call: _apply's bookkeeping once per run of envelopes up to the next save
        instead of once per envelope (the offset is saved after the same envelopes as one by one)."""
        handler = self.handler
        start, n = 0, len(envelopes)
        while start < n:
            end = min(n, start + max(1, self.save_after_envelopes - self._unsaved))
            k = start
            try:
                for k in range(start, end):
                    handler(envelopes[k])
            except Exception as e:
                if k > start:  # the envelopes before k were handled: a stop saves up to there
                    self.handled = envelopes[k - 1].offset
                    self._unsaved += k - start
                raise self._failed([envelopes[k]], e) from e
            self._handled_up_to(envelopes[end - 1].offset, end - start)
            start = end

    def _apply(self, envelopes: list[EventEnvelope]) -> None:
        arg: object = envelopes if self.group_size is not None else envelopes[0]
        offset = envelopes[-1].offset
        if self.exactly_once:
            assert self._store is not None
            # expected: another instance of this projection on the same store must not apply these events too
            with self._store.transaction(self.name, offset, expected=self.stored) as conn:
                try:
                    self.handler(conn, arg)
                except Exception as e:
                    handler = f"the exactly-once handler {getattr(self.handler, '__module__', '?')}." \
                              f"{getattr(self.handler, '__qualname__', repr(self.handler))}"
                    raise self._failed(envelopes, self._store.handler_failure(conn, e, handler)) from e
            self.stored = self.handled = offset
            return
        try:
            self.handler(arg)
        except Exception as e:
            raise self._failed(envelopes, e) from e
        self._handled_up_to(offset, len(envelopes))

    def _handled_up_to(self, offset: int, count: int) -> None:
        """At-least-once: `count` more envelopes handled, up to `offset`; saved every save_after_envelopes."""
        self.handled = offset
        self._unsaved += count
        if self._unsaved >= self.save_after_envelopes:
            self._save()

    def _save(self) -> None:
        assert self._store is not None
        self._store.save(self.name, self.handled)
        self.stored = self.handled
        self._unsaved = 0
        self._saved_at = time.monotonic()

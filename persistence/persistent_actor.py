"""PersistentActor: event sourcing with Akka's persist/defer ordering, stashing, recovery and failures."""

from __future__ import annotations

import dataclasses
import inspect
import logging
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any, Literal, cast

from actors import Actor, ConfigError
from actors.error_log import ask_failure, is_ask, one_line
from actors.host import FAILED_ON
from journal import (
    MAX_SEQUENCE_NR,
    AtomicWrite,
    Journal,
    PersistentRepr,
    SelectedSnapshot,
    SnapshotMetadata,
    SnapshotSelectionCriteria,
    SnapshotStore,
)
from journal.errors import JournalAccessDenied, NotAJournal, RepriseError
from persistence.bytecode import reachable_code
from persistence.coordinator import WriteResults, coordinator_for
from persistence.deletes import DELETE_STEP, Deletes
from persistence.messages import (
    DeleteMessagesFailure,
    DeleteMessagesSuccess,
    DeleteSnapshotFailure,
    DeleteSnapshotsFailure,
    DeleteSnapshotsSuccess,
    DeleteSnapshotSuccess,
    Recovery,
    RecoveryCompleted,
    ReplyToStrategy,
    SaveSnapshotFailure,
    SaveSnapshotSuccess,
    SnapshotOffer,
)
from persistence.plugins import journal_for, snapshot_store_for
from persistence.store_options import check_actor_default, check_actor_setting
from persistence.unhandled import warn_if_unhandled

log = logging.getLogger("reprise.persistence")

Handler = Callable[[Any], object]  # Any: a user's handler takes the event type it persisted


def _store_error(e: BaseException) -> Literal["access_denied", "not_a_journal"] | None:
    """What a store that would not open refused with, when its fix differs (SpawnCause.store_error)."""
    if isinstance(e, JournalAccessDenied):
        return "access_denied"
    return "not_a_journal" if isinstance(e, NotAJournal) else None


def _url(config: Mapping[str, object], key: str) -> str | None:
    """The journal or snapshot store URL in the system configuration (`str | None` in actors.start)."""
    return cast("str | None", config.get(key))


class IllegalStateError(RepriseError, RuntimeError):
    """An operation not allowed in the actor's current state (e.g. persisting during replay)."""


class RecoveryTimedOut(RepriseError, RuntimeError):
    """Recovery got no snapshot or event within recovery_event_timeout (Akka's RecoveryTimedOut)."""


class StashOverflowError(RepriseError, RuntimeError):
    """A command did not fit into the internal stash (stash_capacity) under the "throw" strategy."""


_STRATEGIES = ("throw", "drop")


class _RestartAfterRecovery:
    """Told to self when the RecoveryCompleted handler failed, so that the restart happens without a command.

    It carries the failure: only the instance that failed with it raises it. Told to the path, it reaches later
    instances too (and makes one when the entity stopped meanwhile), which must not take it for their own: each
    such instance failed again and told one more, and an entity stopped after max_restarts was made again by the
    last one, restarting without end."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Call:
    """One element of an actor's journal batch, with the sender and stashing mode of the call that queued it.

    A write holds its AtomicWrite and `handler` runs once per event (the events are the reprs' payloads:
    all events of one persist_all share handler, sender and stashing); a deferral has no AtomicWrite and
    `handler` runs once with `event`. One object per call keeps the host's garbage collector out of the
    way: a group commit keeps every queued entry alive until its handlers have run.
    """

    __slots__ = ("atomic", "event", "handler", "sender", "stashing")

    def __init__(self, atomic: AtomicWrite | None, event: object, handler: Handler, sender: str | None,
                 stashing: bool) -> None:
        self.atomic = atomic
        self.event = event
        self.handler = handler
        self.sender = sender
        self.stashing = stashing


class _OneWrite(AtomicWrite):
    """An AtomicWrite of one event that is also its own batch entry: `handler(event)` runs once it is stored.

    The fast path of a host of many entities, where each entity persists one event per group commit
    (IdempotentReceiver.persist_applied): one object instead of a _Call and an AtomicWrite, and `event`
    is what the handler gets (the stored payload wraps it). The coordinator reads `atomic` (itself) and
    hands it to the journal as any AtomicWrite. Never stashing (persist_applied is asynchronous).
    """

    __slots__ = ("event", "handler", "sender")
    event: Any
    handler: Handler
    sender: str | None
    stashing = False

    @property
    def atomic(self) -> _OneWrite:
        """The write to journal: this object itself."""
        return self


class _OneEvent(_OneWrite):
    """An _OneWrite queued by persist or persist_async of one untagged event (the common call): one object
    instead of a _Call and an AtomicWrite per event, handled by the same fast path. A class of its own, so
    that mixins that gather their compact events into the last _OneWrite of a batch (IdempotentReceiver)
    never take it for one of theirs; `stashing` as the call says."""

    __slots__ = ("stashing",)  # (a slot where _OneWrite has its class attribute False)


# Its slots' descriptors: setting a slot through them costs ~2/3 of object.__setattr__ by name (4 per _OneWrite).
_set_payload, _set_event, _set_handler, _set_sender = (getattr(_OneWrite, name).__set__
                                                       for name in ("payload", "event", "handler", "sender"))
_set_stashing = getattr(_OneEvent, "stashing").__set__  # noqa: B009  (the slot's descriptor, not the inherited False)

_Entry = _Call | _OneWrite
"""An element of an actor's journal batch (what `_take_batch` returns and `_on_write_results` gets back)."""


_NO_TAGS: frozenset[str] = frozenset()


def _repr(payload: Any, sequence_nr: int, persistence_id: str, writer_uuid: str,
          tags: frozenset[str] = _NO_TAGS) -> PersistentRepr:
    """A PersistentRepr to write, without the frozen __init__ (one object.__setattr__ per field: half the
    cost), as journal.model.replayed_repr does on the read side: the same fields and defaults."""
    r = _new(PersistentRepr)
    _set(r, "__dict__", {"payload": payload, "sequence_nr": sequence_nr, "persistence_id": persistence_id,
                         "manifest": "", "writer_uuid": writer_uuid, "timestamp": 0, "tags": tags,
                         "metadata": None})
    return r


def _atomic(reprs: tuple[PersistentRepr, ...]) -> AtomicWrite:
    """An AtomicWrite of reprs one actor numbered under its one persistence id, known non-empty: without
    AtomicWrite's re-checks of exactly that (half the cost of building it)."""
    atomic = _new(AtomicWrite)
    _set(atomic, "payload", reprs)
    return atomic


_new = object.__new__
_set = object.__setattr__


_LIBRARY = ("actors.", "persistence.", "journal.", "spark_bridge.")


def _passes_on(cls: type, method: object) -> bool:
    """True if `method` (an override of receive or receive_batch) may hand a message on: it calls a `receive` or
    `receive_batch` attribute (super()'s, or self.receive), also from a nested function or from a method of the
    class or a function of its module that it calls, or dispatches by getattr; anything that is not plain Python
    code passes (what it calls cannot be seen)."""
    def follow(name: str, namespace: dict[str, Any]) -> object:
        # the user's own helpers it calls (self._dispatch(...), dispatch(self, ...))
        called = inspect.getattr_static(cls, name, None) or namespace.get(name)
        called = getattr(called, "__func__", called)  # (staticmethod, classmethod)
        return called if inspect.isfunction(called) and not called.__module__.startswith(_LIBRARY) else None

    for code in reachable_code([inspect.unwrap(method)], follow):  # type: ignore[arg-type]
        if code is None:
            return True
        names = code.co_names
        if "receive" in names or "receive_batch" in names or "getattr" in names:
            return True
    return False


class PersistentActor(Actor):
    """An event-sourced actor: implement `receive_recover(event)` and `receive_command(message, sender)`.

    Methods named `mixin_*` are the hooks through which mixins (AtLeastOnceDelivery, IdempotentReceiver,
    ...) add behaviour: an application actor does not define methods with that prefix.
    """

    journal_url: str | None = None
    """Overrides the system's `journal` URL for this class."""
    snapshot_store_url: str | None = None
    """Overrides the system's `snapshot_store` URL for this class."""
    recovery: Recovery = Recovery()
    _replayed_to = 0  # the sequence nr recovery replayed up to (its snapshot's, or its last event's)
    recovery_event_timeout: float | None = None
    """Seconds recovery may wait for the snapshot or the next event (None: config key, else Akka's 30 s).
    Journals are called synchronously, so a stall is detected when the call returns: recovery then fails."""
    snapshot_is_optional: bool = False
    """True: a snapshot that cannot be loaded is skipped and all events are replayed (Akka's option)."""
    snapshot_max_load_attempts: int = 3
    """Unreadable snapshots are skipped for older ones this many times before recovery fails (it fails sooner when
    none older is left: never recovered as if there were no snapshot, unless snapshot_is_optional)."""
    stash_capacity: int | None = None
    """At most this many commands wait in the internal stash (None: config key, else unbounded)."""
    internal_stash_overflow_strategy: str | ReplyToStrategy | None = None
    """For a command that does not fit: "throw" (StashOverflowError, the actor restarts; the default),
    "drop" (to dead letters) or ReplyToStrategy(response) (the response goes to the sender)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Refuse an override of `receive` (or `receive_batch`) that never hands messages on to the inherited one."""
        super().__init_subclass__(**kwargs)
        for name in ("receive", "receive_batch"):
            own = cls.__dict__.get(name)
            if own is not None and not _passes_on(cls, own):
                # Checked once per class: an override that swallows what it does not know would silently lose the
                # persistence layer's own messages (AtLeastOnceDelivery's RedeliveryTick: nothing is ever resent;
                # DurableDelivery's confirmations; the restart after a failed RecoveryCompleted handler) and the
                # stashing of commands behind persist.
                raise TypeError(
                    f"{cls.__qualname__}.{name} overrides PersistentActor.{name} without calling super().{name}(...) "
                    f"(nor self.receive): a persistent actor's {name} stashes commands behind persist and handles the "
                    "messages of the persistence layer and its mixins (AtLeastOnceDelivery's RedeliveryTick, "
                    "DurableDelivery's confirmations, restarts), which would be swallowed silently. Handle commands "
                    "in receive_command(message, sender) instead, or pass every message you do not handle yourself "
                    f"to super().{name}(...)")

    # ---- what the user implements ---------------------------------------------------------------

    @classmethod
    def open_resources(cls, config: Mapping[str, object]) -> None:
        """Open this class's journal and snapshot store when its host starts, so a bad one fails the spawn."""
        from actors.errors import SpawnCause, SpawnFailed
        from journal.urls import redact_url

        for what, own, key, opener in (("journal", cls.journal_url, "journal", journal_for),
                                       ("snapshot store", cls.snapshot_store_url, "snapshot_store", snapshot_store_for)):
            if not (own is None or isinstance(own, str)):
                continue  # a property computed per instance: it is opened on recovery
            url = own or _url(config, key)
            if not url and what == "journal":  # (a snapshot store is optional; "cannot open its journal None" was not)
                raise SpawnFailed(f"{cls.__qualname__} persists events and no journal is configured: give one with "
                                  "actors.start(journal=URL), a topology's [system] journal = \"sqlite:///path.db\" "
                                  "(or the actor's own journal =), spawn(..., journal=URL), or journal_url on the "
                                  "class", SpawnCause("no_journal"))
            try:
                opener(url).check_writable()  # (a read-only file opens, then every persist would fail)
            except Exception as e:
                raise SpawnFailed(f"{cls.__qualname__} cannot open its {what} {redact_url(url)}: {type(e).__name__}: "
                                  f"{redact_url(str(e))} (fix the {key} URL, or the file's directory, "
                                  "permissions or server it names)",
                                  SpawnCause("journal" if key == "journal" else "snapshot_store", redact_url(url) or "",
                                             _store_error(e))) from None

    def receive_recover(self, event: Any) -> None:
        """Apply a replayed event, a SnapshotOffer or RecoveryCompleted (side-effect free)."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        """Handle a command (and the snapshot/delete replies)."""
        raise NotImplementedError(f"{type(self).__name__} must implement receive_command(message, sender)")

    def on_persist_failure(self, cause: BaseException, event: Any, sequence_nr: int) -> None:
        """Called when a write failed (outcome unknown); the actor is stopped afterwards."""
        log.error("Failed to persist event type [%s] with sequence number [%d] for persistenceId [%s]: %s",
                  type(event).__name__, sequence_nr, self.persistence_id, cause)

    def _event_rejected(self, event: object) -> None:
        """Undo bookkeeping done for an event the journal rejected (a mixin hook; see IdempotentReceiver)."""

    def on_persist_rejected(self, cause: BaseException, event: Any, sequence_nr: int) -> None:
        """Called when the journal rejected an event (definitely not stored); the actor goes on."""
        log.error("Rejected to persist event type [%s] with sequence number [%d] for persistenceId [%s]: %s",
                  type(event).__name__, sequence_nr, self.persistence_id, cause)

    def on_recovery_failure(self, cause: BaseException, event: Any | None) -> None:
        """Called when recovery failed; the actor is stopped afterwards."""
        if event is not None:
            log.error("Exception in receive_recover when replaying event type [%s] with sequence number [%d] "
                      "for persistenceId [%s]: %s", type(event).__name__, self.last_sequence_nr,
                      self.persistence_id, cause)
        else:
            log.error("Persistence failure when replaying events for persistenceId [%s]. Last known sequence "
                      "number [%d]: %s", self.persistence_id, self.last_sequence_nr, cause)

    @property
    def persistence_id(self) -> str:
        """The journal key of this actor; defaults to its path."""
        return self.path

    def tags_for(self, event: Any) -> Iterable[str]:
        """Tags stored with `event` when it is persisted, for `Journal.events_by_tag`; none by default."""
        return ()

    # ---- state ----------------------------------------------------------------------------------
    last_sequence_nr: int = 0
    sender: str | None = None
    _recovery_running: bool = True
    _dead: bool = False
    _dead_because: str = "stopped"  # (set by _die: the dead letters of commands that come after say why)
    _replaced: bool = False
    _stop_called: bool = False  # (stop() was called: read per handler, where the stop_requested property costs 0.1 µs)
    _confirm_follows: tuple[str, int] | None = None  # (origin, delivery id) while the handler of an apply_and_confirm runs:
    # a deliver() there is refused (see IdempotentReceiver.apply_and_confirm)
    _deletes: Deletes | None = None  # its delete_messages calls not complete yet (made on the first)
    _in_write_handler: bool = False  # a handler of a stored write runs (persist, persist_all, ..., persist_applied): a
    # DurableDelivery refuses deliver() there (see DurableDelivery.persist_and_deliver)
    _wrote: bool = False  # the command, deferral or receive_batch running now queued a write of the user's (persist...,
    # persist_applied, ...): a DurableDelivery refuses deliver() in a deferral it queues behind it (see _queue_defer)

    @property
    def snapshot_sequence_nr(self) -> int:
        """The sequence number a snapshot saved now is stored under (= last_sequence_nr)."""
        return self.last_sequence_nr

    @property
    def snapshots_outlast_events(self) -> bool:
        """True when the snapshot store keeps snapshots as long as the journal keeps events, so that deleting the
        events a snapshot covers (delete_messages) loses nothing: not with memory:// snapshots of a durable journal."""
        snapshots, journal = self._snapshots, self._journal
        return snapshots is not None and journal is not None and (snapshots.durable or not journal.durable)

    @property
    def recovery_running(self) -> bool:
        """True until recovery has finished (also in pre_start)."""
        return self._recovery_running

    @property
    def recovery_finished(self) -> bool:
        """True once recovery has finished."""
        return not self._recovery_running

    @property
    def pending_handlers(self) -> int:
        """How many persist and defer handlers have not run yet (0: everything persisted is durable)."""
        return self._pending

    def read_events(self, from_sequence_nr: int, to_sequence_nr: int, max_events: int = MAX_SEQUENCE_NR) -> Iterator[Any]:
        """Read this actor's events `from_sequence_nr`..`to_sequence_nr` back from its journal, in order.

        For state too large to keep in memory: an event recovery saw and the actor let go of. Only after
        recovery has opened the journal; events not durable yet (handlers pending) are not there.
        """
        if self._journal is None:
            raise IllegalStateError(f"{type(self).__name__}.read_events: the journal is opened by recovery; "
                                    "call it from receive_recover or later")
        replay = self._journal.replay_messages(self.persistence_id, from_sequence_nr, to_sequence_nr, max_events)
        return (repr_.payload for repr_ in replay)

    # ---- the hooks for mixins --------------------------------------------------------------------
    # For classes that add behaviour to every persistent actor that inherits them (AtLeastOnceDelivery,
    # DurableDelivery, IdempotentReceiver, spark_bridge's FeedReceiver), not for application actors:
    # those implement receive_recover and receive_command. An override calls super() for whatever it
    # does not handle itself, so that several mixins stack. The `mixin_` prefix keeps them apart from
    # an application's own method names: do not use it for anything else.

    def mixin_init(self) -> None:
        """Set up the mixin's state: called on every new instance (also after a restart), before pre_start
        and recovery, with the actor's own state already reset. Call super().mixin_init() first."""

    def mixin_command(self, message: Any, sender: str | None) -> None:
        """Handle one command, in arrival order, once no stashing persist holds it back: handle the mixin's
        own message types here and pass every other message to super(), which hands it to receive_command."""
        self.sender = sender
        self.receive_command(message, sender)

    def mixin_recover_event(self, event: Any) -> None:
        """Apply one replayed event, and RecoveryCompleted at the end: consume the mixin's own events and
        pass every other event (unwrapped, if the mixin wraps the user's) to super(), which hands it to
        receive_recover. Side-effect free, as receive_recover."""
        self.receive_recover(event)

    def mixin_recover_snapshot(self, offer: SnapshotOffer) -> None:
        """Apply the snapshot offered at the start of recovery: if it is the mixin's wrapper (see
        mixin_wrap_snapshot), restore the mixin's part and pass on a SnapshotOffer of the inner snapshot;
        anything else goes to super() as it is."""
        self.receive_recover(offer)

    def mixin_tags(self, stored: object) -> frozenset[str]:
        """The tags of `stored`, an event as journaled: `tags_for` of the user's event(s) in it. A mixin that
        journals a wrapper (IdempotentReceiver's AppliedBatch) unwraps it and calls super() per event."""
        tags = self.tags_for(stored)
        if isinstance(tags, str) or not all(isinstance(t, str) and t for t in tags):
            raise TypeError(f"{type(self).__name__}.tags_for({type(stored).__name__}) must return an iterable of "
                            f"non-empty str, got {tags!r}")
        return frozenset(tags)

    def mixin_wrap_snapshot(self, snapshot: object) -> object:
        """Return what save_snapshot stores for the user's `snapshot`: the mixin's state together with
        super().mixin_wrap_snapshot(snapshot), in a wrapper that mixin_recover_snapshot recognises."""
        return snapshot

    # ---- lifecycle (wrapping the user's hooks) -----------------------------------------------
    def _init_persistence(self) -> None:
        self.last_sequence_nr = 0
        self._seq_alloc = 0
        self._recovery_running = True
        self._writer_uuid = uuid.uuid4().hex
        self._batch: list[_Entry] | tuple[()] = ()  # () while nothing is queued: no list per idle actor
        self._contributors: list[Callable[[], None]] | tuple[()] = ()  # see _contribute; () when none (no list per actor)
        self._pending = 0
        self._stashing = 0
        # () until a command is stashed: an empty deque is 760 bytes, a third of an idle entity (PROFILE.md §27).
        self._stash: deque[tuple[object, str | None]] | tuple[()] = ()
        self.sender = None
        self._coordinator = coordinator_for(self.context)
        self._journal: Journal | None = None  # opened by recovery
        self._snapshots: SnapshotStore | None = None
        self._stash_limit, self._overflow = self._stash_settings()
        self._failed_after_recovery: BaseException | None = None
        # Checked once: an actor that tags nothing pays nothing per event.
        self._tagging = type(self).tags_for is not PersistentActor.tags_for

    def _stash_settings(self) -> tuple[int | None, str | ReplyToStrategy]:
        cap = self.stash_capacity if self.stash_capacity is not None else self.config.get("stash_capacity")
        strategy = self.internal_stash_overflow_strategy or self.config.get("internal_stash_overflow_strategy")
        strategy = strategy or "throw"
        if self.stash_capacity is not None:  # the class's own: its ConfigError names Class.stash_capacity
            check_actor_setting(type(self).__name__, "stash_capacity", cap)
        elif cap is not None:  # the system's default (start checked it too)
            check_actor_default("stash_capacity", cap)
        if strategy not in _STRATEGIES and not isinstance(strategy, ReplyToStrategy):
            # (a ConfigError: the spawn's SpawnFailed is its one line, not a ValueError's traceback from the host)
            raise ConfigError(f"internal_stash_overflow_strategy of {type(self).__name__} must be \"throw\", "
                             f"\"drop\" or ReplyToStrategy(response), got {strategy!r}")
        if self.recovery_event_timeout is not None:  # (0 or below failed every recovery at once, after the spawn)
            check_actor_setting(type(self).__name__, "recovery_event_timeout", self.recovery_event_timeout)
        return cast("int | None", cap), strategy

    def around_pre_start(self) -> None:
        self._init_persistence()
        self.mixin_init()
        self.pre_start()
        self._recover()

    def around_post_stop(self) -> None:
        # Written now, not at the host's next group commit: a new instance of this id may start before that
        # (a command right behind the stop) and must recover these events, or it reuses their sequence numbers
        # (Akka's journal has the old instance's write before the new one's replay).
        self._write_now("stopped")
        self._finish_deletes(told=False)
        # As in Akka: commands still stashed behind a persist when the actor stops become dead letters.
        stash, self._stash = self._stash, ()
        for message, sender in stash:
            self.context.dead_letter(sender, self.path, message,
                                     "persistent actor stopped before handling it (stashed behind a persist)")
        super().around_post_stop()

    def around_post_restart(self, error: BaseException) -> None:
        self._init_persistence()
        self.mixin_init()
        self.post_restart(error)
        self._recover()

    def restart_carryover(self) -> list[tuple[object, str | None]]:
        # Events persisted before the failure are still written (Akka flushes in the error path); their
        # handlers are not run on this instance: the new one gets them through replay.
        # (before _replaced is set: _take_batch yields nothing for a replaced actor; the failed command's asker was
        # told its error already)
        self._write_now("failed", self.sender)
        self._finish_deletes(told=True)
        self._replaced = True
        carry, self._stash = list(self._stash), ()
        return carry

    def _write_now(self, why: str, told: str | None = None) -> None:
        """Write the events queued by this instance, which goes away (their handlers do not run), before the next
        instance of this persistence id can recover; a write that fails is reported (and its askers but `told` told)."""
        try:
            batch = self._take_batch()
        except Exception as exc:  # (a mixin's flush runs user code: tags_for) nothing of the round is written
            batch, self._batch = [], ()
            self.context.report_error(self.path, f"events persisted just before it {why} were not written "
                                                 f"({type(exc).__name__}: {exc})")
        writes = [atomic for e in batch if (atomic := e.atomic) is not None]
        if not writes:
            return
        try:
            results: WriteResults = cast(Journal, self._journal).write_messages(writes)  # (writes imply recovery)
        except Exception as exc:
            results = exc
        self._written_after_stop(results, why, batch, told)

    def keep_alive(self) -> bool:
        return super().keep_alive() or bool(self._stash) or self._pending > 0 or bool(self._contributors) \
            or bool(self._deletes)

    # ---- recovery -----------------------------------------------------------------------------
    def _recover(self) -> None:
        event = None
        try:
            pid = self.persistence_id
            if not isinstance(pid, str) or not pid.strip():
                raise ValueError(f"persistenceId cannot be empty for PersistentActor {type(self).__name__}"
                                 if isinstance(pid, str) else
                                 f"requirement failed: persistenceId is [None] for PersistentActor {self.path}"
                                 if pid is None else
                                 f"persistence_id must be a str, got {type(pid).__name__} {pid!r} for PersistentActor "
                                 f"{self.path} (e.g. persistence_id = \"account-42\", or a property returning one)")
            self._journal = journal_for(self.journal_url or _url(self.config, "journal"))
            self._snapshots = snapshot_store_for(self.snapshot_store_url or _url(self.config, "snapshot_store"))
            rec = self.recovery
            snapshot_nr = 0
            timeout = self.recovery_event_timeout
            if timeout is None:
                timeout = float(cast(float, self.config.get("recovery_event_timeout", 30.0)))
            criteria = rec.from_snapshot.limit(rec.to_sequence_nr)
            # stop() in pre_start, Akka's context.stop there: the actor takes no more, not even its recovery.
            if rec.from_snapshot != SnapshotSelectionCriteria.NONE and not self._stop_called:
                started = time.monotonic()
                selected = self._load_snapshot(pid, criteria)
                if time.monotonic() - started > timeout:
                    raise RecoveryTimedOut(f"Recovery timed out, didn't get snapshot within {timeout} s")
                if selected is not None:
                    self.last_sequence_nr = snapshot_nr = selected.metadata.sequence_nr
                    # An offer whose handler throws is on_recovery_failure(cause, None), as in Akka: the hook's
                    # event is the replayed event that failed, and an offer is none.
                    self.mixin_recover_snapshot(SnapshotOffer(selected.metadata, selected.snapshot))
            # An idle timeout between events (Akka #20698), not a bound on the whole replay.
            idle_since = time.monotonic()
            replay = () if self._stop_called else self._journal.replay_messages(
                pid, self.last_sequence_nr + 1, rec.to_sequence_nr, rec.replay_max)
            for repr_ in replay:
                if time.monotonic() - idle_since > timeout:
                    raise RecoveryTimedOut(f"Recovery timed out, didn't get event within {timeout} s, highest "
                                           f"sequence number seen {self.last_sequence_nr}")
                event = repr_.payload
                if repr_.sequence_nr > self.last_sequence_nr:
                    self.last_sequence_nr = repr_.sequence_nr
                self.mixin_recover_event(event)
                event = None
                if self._stop_called:  # (one attribute read per replayed event: the whole cost on this hot loop)
                    # stop() in receive_recover, Akka's context.stop: a stopped actor takes no more messages, and
                    # each replayed event is one (replaying on applied the rest to an actor that asked to stop).
                    break
                idle_since = time.monotonic()
            if self._stop_called:
                # stop() in pre_start or receive_recover: the RecoverySuccess (AtLeastOnceDelivery's resends) and
                # RecoveryCompleted are never handled either.
                self._stopped_in_recovery()
                return
            highest = self._journal.highest_sequence_nr(pid)
            if time.monotonic() - idle_since > timeout:
                raise RecoveryTimedOut(f"Recovery timed out, didn't get event within {timeout} s, highest "
                                       f"sequence number seen {self.last_sequence_nr}")
            if highest < snapshot_nr:
                self._warn_journal_behind_snapshot(snapshot_nr, highest)
            self._replayed_to = self.last_sequence_nr  # (below highest: a partial recovery, or deleted events)
            self.last_sequence_nr = self._seq_alloc = max(highest, self.last_sequence_nr)
            self._on_replay_success()
        except Exception as exc:
            self._recovery_failed(exc, event)
            return
        self._recovery_running = False
        try:
            self.mixin_recover_event(RecoveryCompleted())
        except Exception as exc:
            # Not a recovery failure (Akka): the actor goes to its supervisor, here a restart, and the
            # commands that wait survive it. The host restarts actors from receive, hence the self-tell.
            self._failed_after_recovery = exc
            try:  # (the host names the message a failure came from: this one's, not the restart's self-tell)
                setattr(exc, FAILED_ON, "RecoveryCompleted")
            except AttributeError:  # (an exception type with __slots__: named after the message that raises it)
                pass
            self._tell_self(_RestartAfterRecovery(exc))
        if self._stop_called:  # stop() in the RecoveryCompleted handler
            self._failed_after_recovery = None
            self._stopped_in_recovery()

    def _warn_journal_behind_snapshot(self, snapshot_nr: int, highest: int) -> None:
        """Warn that the journal holds fewer events than the snapshot it recovered from had seen (a journal keeps its
        highest sequence nr through deletes): most likely not the journal the snapshots were taken with."""
        from journal.urls import redact_url

        # (a journal URL changed between runs, the snapshot store's kept: the actor recovered the snapshot's state
        # without the acknowledged events after it, which are in the other journal, and went on numbering its new
        # events from the snapshot's, in this one; nothing said so)
        log.warning("%s recovered from a snapshot at sequence nr %d, but its journal %s holds events only up to %d: "
                    "that journal is not the one the snapshot store %s was written with (a changed journal URL?), and "
                    "the events persisted after the snapshot are not in it; point the actor back at its journal",
                    self.persistence_id, snapshot_nr, redact_url(self.journal_url or _url(self.config, "journal")),
                    highest, redact_url(self.snapshot_store_url or _url(self.config, "snapshot_store")))

    def _stopped_in_recovery(self) -> None:
        """stop() was called during recovery (Akka's context.stop): the actor stops now, writing what it persisted
        (not a failure), and takes no command: the one that started it is a dead letter (the host hands it over
        once recovery returns), as are those after it."""
        self.context.stop_entity(self, "stopped")
        self._dead, self._dead_because = True, "stopped during recovery"

    def _load_snapshot(self, pid: str, criteria: SnapshotSelectionCriteria) -> SelectedSnapshot | None:
        """The youngest loadable snapshot: an unreadable one is skipped for an older one (Akka's local store), and
        the load fails when none of those it tried could be read."""
        attempts = 0
        failure: Exception | None = None
        while True:
            try:
                selected = cast(SnapshotStore, self._snapshots).load(pid, criteria)  # (recovery opened it)
            except Exception as exc:
                attempts += 1
                seq = getattr(exc, "sequence_nr", None)
                log.error("Error loading snapshot [%s] of persistenceId [%s] (attempt %d of %d): %s",
                          seq, pid, attempts, self.snapshot_max_load_attempts, exc)
                if seq is None or seq <= criteria.min_sequence_nr or attempts >= self.snapshot_max_load_attempts:
                    self._no_snapshot_loaded(pid, exc)
                    return None
                failure = exc
                criteria = dataclasses.replace(criteria, max_sequence_nr=seq - 1)
                continue
            if selected is None and failure is not None:
                # Every snapshot tried was unreadable and none older is left: as in Akka, the load fails. Taken for
                # "no snapshot", recovery replayed only the events left, and those a snapshot covers are often
                # deleted: a silently wrong state.
                self._no_snapshot_loaded(pid, failure)
                return None
            return selected

    def _no_snapshot_loaded(self, pid: str, failure: Exception) -> None:
        """No snapshot could be loaded: recovery fails with `failure`, unless snapshots are optional (then it returns,
        and recovery replays all events)."""
        if not self.snapshot_is_optional:
            raise failure
        log.info("No snapshot loaded for persistenceId [%s] (snapshot_is_optional): replaying all events", pid)

    def _on_replay_success(self) -> None:
        """Called after replay, before RecoveryCompleted (AtLeastOnceDelivery resends here)."""

    def _recovery_failed(self, cause: BaseException, event: object) -> None:
        try:
            self.on_recovery_failure(cause, event)
        except Exception:
            log.exception("on_recovery_failure of %s failed", self.path)
        self.context.report_error(self.path, f"stopped: recovery failed: {type(cause).__name__}: {cause}")
        self._die(f"recovery failed: {one_line(cause)}")

    def _die(self, reason: str) -> None:
        self._dead = True
        self._dead_because = reason
        self.context.stop_entity(self, reason)

    # ---- message entry point --------------------------------------------------------------------
    def receive(self, message: object, sender: str | None) -> None:
        """The actors entry point: commands wait in the stash while a stashing persist is pending."""
        # (A _RestartAfterRecovery is looked at only off the common path: three checks per command, as before it
        # carried its failure.)
        if self._dead:
            if type(message) is not _RestartAfterRecovery:  # (an earlier instance's is no one's dead letter)
                self.context.dead_letter(sender, self.path, message,
                                         f"persistent actor stopped: {self._dead_because}")
            return
        failed = self._failed_after_recovery
        if failed is not None:
            if type(message) is _RestartAfterRecovery:
                if message.error is not failed:
                    return  # an earlier instance's (replaced or stopped since)
            else:
                self._stashed(message, sender)  # carried over to the new incarnation
            self._failed_after_recovery = None
            raise failed
        if type(message) is _RestartAfterRecovery:
            return  # an earlier instance's, or this one's whose failure was raised already
        if message is DELETE_STEP:  # (its timer: ahead of the stash, which holds commands, not the journal's work)
            cast(Deletes, self._deletes).step()
            return
        if self._stashing or self._stash:
            if self._stash_limit is not None and len(self._stash) >= self._stash_limit:
                self._stash_overflow(message, sender)
                return
            self._stashed(message, sender)
            if not self._stashing:
                self._drain_stash()
            return
        if type(self).mixin_command is _BASE_MIXIN_COMMAND:  # (no mixin's: its call inlined, once per command)
            self.sender = sender
            self.receive_command(message, sender)
        else:
            self.mixin_command(message, sender)

    def _stashed(self, message: object, sender: str | None) -> None:
        """Put a command in the stash, making the deque on the first one."""
        stash = self._stash
        if type(stash) is not deque:
            stash = self._stash = deque()
        stash.append((message, sender))

    def _stash_overflow(self, message: object, sender: str | None) -> None:
        strategy = self._overflow
        if strategy == "drop":
            self.context.dead_letter(sender, self.path, message, "internal stash of a persistent actor is full")
        elif isinstance(strategy, ReplyToStrategy):
            self.tell(cast(str, sender), strategy.response)  # (None: the host dead-letters it)
        else:
            raise StashOverflowError(
                f"Couldn't enqueue {type(message).__name__} to the internal stash of {self.path}: it holds "
                f"stash_capacity={self._stash_limit} commands (raise stash_capacity, or set "
                f"internal_stash_overflow_strategy to \"drop\" or ReplyToStrategy(response))")

    def _drain_stash(self) -> None:
        """Run stashed commands in order until one blocks again (Akka's unstash-to-front)."""
        host = self.context
        while self._stash and not self._stashing and not self._replaced and not self._dead:
            message, sender = self._stash.popleft()
            try:
                self.mixin_command(message, sender)
            except Exception as exc:
                host.report_failure(self, exc, message, sender)
                return
            if self.stop_requested:
                host.stop_entity(self, "stopped")
                return
        if not self._stash:
            self._stash = ()  # drained: an entity that stashed once does not keep the deque

    def stop(self) -> None:
        """Stop this actor once the current message (or persist handler) has been handled: the handlers queued
        after it do not run (their events are written)."""
        self._stop_called = True
        super().stop()

    # ---- persist family -----------------------------------------------------------------------
    def persist(self, event: object, handler: Handler) -> None:
        """Store `event`, then call `handler(event)`; no command is handled in between."""
        self._queue_write((event,), handler, True)

    def persist_all(self, events: Iterable[object], handler: Handler) -> None:
        """Store `events` atomically, then call `handler` for each; commands wait (empty = no-op)."""
        self._queue_write(tuple(events), handler, True)

    def persist_async(self, event: object, handler: Handler) -> None:
        """Store `event`, then call `handler(event)`; commands keep flowing meanwhile."""
        self._queue_write((event,), handler, False)

    def persist_all_async(self, events: Iterable[object], handler: Handler) -> None:
        """Store `events` atomically without stashing commands; handlers still run in call order."""
        self._queue_write(tuple(events), handler, False)

    def defer(self, event: object, handler: Handler) -> None:
        """Call `handler(event)` after every pending handler (now if none); commands wait."""
        self._queue_defer(event, handler, True)

    def defer_async(self, event: object, handler: Handler) -> None:
        """Call `handler(event)` after every pending handler (now if none); commands keep flowing."""
        self._queue_defer(event, handler, False)

    def _queue_write(self, events: tuple[object, ...], handler: Handler, stashing: bool) -> None:
        if self._contributors:
            self._before_commit()  # what mixins gathered earlier goes first, as it was called first
        if self._recovery_running:
            raise IllegalStateError("Cannot persist during replay. Events can be persisted when receiving "
                                    "RecoveryCompleted or later.")
        n = len(events)
        if not n:
            return
        pid, writer, seq = self.persistence_id, self._writer_uuid, self._seq_alloc
        if self._tagging:
            tag = self.mixin_tags
            reprs: tuple[PersistentRepr, ...] = tuple([_repr(e, seq + k, pid, writer, tag(e))
                                                       for k, e in enumerate(events, 1)])
        elif n == 1 and pid:  # persist / persist_async, and every compact event: one _OneEvent, no _Call
            event = events[0]
            self._seq_alloc = seq + 1
            write = _new(_OneEvent)
            _set_payload(write, (_repr(event, seq + 1, pid, writer),))
            _set_event(write, event)
            _set_handler(write, handler)
            _set_sender(write, self.sender)
            _set_stashing(write, stashing)
            self._queue_entry(write, 1, stashing)
            return
        else:
            reprs = tuple([_repr(e, seq + k, pid, writer) for k, e in enumerate(events, 1)])
        self._seq_alloc = seq + n
        # recovery checked the persistence id; AtomicWrite still raises its own error if it went empty since.
        atomic = _atomic(reprs) if pid else AtomicWrite(reprs)
        self._queue_entry(_Call(atomic, None, handler, self.sender, stashing), n, stashing)

    def _queue_one(self, payload: Any, event: Any, handler: Handler) -> None:
        """Queue `payload` as one persist_async write whose handler gets `event` (an _OneWrite: the fast path
        of compact-event mixins). The caller checked that recovery finished and nothing is contributed."""
        seq = self._seq_alloc + 1
        # (the default persistence_id is the path: read without the property's call, once per entity and commit)
        pid = self.path if type(self).persistence_id is _PATH_IS_ID else self.persistence_id
        reprs = (_repr(payload, seq, pid, self._writer_uuid, self.mixin_tags(payload) if self._tagging else _NO_TAGS),)
        if not pid:
            AtomicWrite(reprs)  # raises its error for an id that went empty since recovery checked it
        self._seq_alloc = seq
        write = _new(_OneWrite)
        _set_payload(write, reprs)
        _set_event(write, event)
        _set_handler(write, handler)
        _set_sender(write, self.sender)
        self._queue_entry(write, 1, False)

    def _queue_defer(self, event: object, handler: Handler, stashing: bool) -> None:
        if self._contributors:
            self._before_commit()
        if self._recovery_running:
            raise IllegalStateError("Cannot defer during replay. Events can be deferred when receiving "
                                    "RecoveryCompleted or later.")
        if self._pending == 0:
            handler(event)
            return
        self._queue_entry(_Call(None, event, handler, self.sender, stashing), 1, stashing)

    def _queue_entry(self, entry: _Entry, pending: int, stashing: bool) -> None:
        """Add `entry` (`pending` handlers to run) to this round's writes and have the coordinator commit it."""
        if self._batch:
            self._batch.append(entry)
        else:  # the round's first: no list is kept between rounds (PROFILE.md §27)
            self._batch = [entry]
        self._pending += pending
        if stashing:
            self._stashing += pending
        self._coordinator.enqueue(self)

    # ---- the before-commit hook of mixins that journal compact events ---------------------------
    def _contribute(self, flush: Callable[[], None]) -> None:
        """Have `flush()` called before anything else is queued, and before the actor's batch is committed.

        For mixins that gather many calls into one compact event per group commit (IdempotentReceiver,
        DurableDelivery): call this when the first call of a round is gathered; `flush` then queues the
        event with `_queue_write`. Contributions are flushed in the order they were made, so the journal
        and the handlers keep the order of the calls; while one is waiting the host keeps the actor alive.
        """
        contributors = self._contributors
        if contributors:
            contributors.append(flush)  # (non-empty: a list)
        else:
            self._contributors = [flush]
            self._coordinator.enqueue(self)

    def _before_commit(self) -> None:
        contributors, self._contributors = self._contributors, ()
        for flush in contributors:
            flush()

    def _withdraw(self, entry: _Entry) -> None:
        """Account for a taken entry that will not reach `_on_write_results` (compact.split_rejected
        queues its items again one by one)."""
        self._done(entry)

    # ---- called by the coordinator ------------------------------------------------------------
    def _take_batch(self) -> list[_Entry]:
        contributors = self._contributors
        if contributors:  # _before_commit inlined: this runs once per actor and group commit
            self._contributors = ()
            for flush in contributors:
                flush()
        batch, self._batch = self._batch, ()
        # A stopped instance's queued events are still written (Akka writes what was persisted before a
        # stop); their handlers do not run (_written_after_stop). A failed or replaced one's are not.
        if self._replaced or self._dead or not batch:
            return []
        return batch

    def _written_after_stop(self, results: WriteResults, why: str = "stopped", batch: list[_Entry] | None = None,
                            told: str | None = None) -> None:
        """The group commit of events this instance persisted before it stopped is done: handlers do not run on
        a stopped actor (as in Akka), but a write that failed is reported, or nobody would hear of it: the log, and
        each asker of `batch` (but `told`) whose write failed, at once rather than at its timeout."""
        writes = [e for e in batch or () if e.atomic is not None]
        if isinstance(results, BaseException):
            what = f"{type(results).__name__}: {results}"
            failed = [(e, results) for e in writes]
        elif results and any(r is not None for r in results):
            rejected = [r for r in results if r is not None]
            what = f"{len(rejected)} rejected: {type(rejected[0]).__name__}: {rejected[0]}"
            failed = [(e, r) for e, r in zip(writes, results, strict=False) if r is not None]
        else:
            return
        self.context.report_error(self.path, f"events persisted just before it {why} were not written ({what})")
        done = {told} if told is not None else set()
        for entry, failure in failed:
            self._tell_askers([entry], failure, done)

    def _on_write_results(self, batch: list[_Entry], results: WriteResults) -> None:
        """One committed batch's results: mixins override this to handle their rejections, and call super(). A round
        whose writes were all stored goes straight to `_run_handlers` (the coordinator calls it)."""
        self._run_handlers(batch, results)

    def _run_handlers(self, batch: list[_Entry], results: WriteResults) -> None:
        """Run handlers in call order for one committed batch, then let waiting commands in."""
        host = self.context
        # None: every write stored (the usual round), or deferrals only.
        failure = results if results is not None and isinstance(results, BaseException) else None
        # (read only when there were results, and no failure; an annotation, not typing.cast: a call per entity and
        # commit)
        per_write: list[BaseException | None] = results  # type: ignore[assignment]
        stored = results is None
        wi = 0
        for entry in batch:
            if self._replaced or self._dead or self._stop_called:
                # A handler stopped it (stop()): as in Akka, where each handler is a message of its own and a stopped
                # actor takes no more, the later handlers do not run (their events are written: replay has them).
                break
            if not self._stashing and self._stash:
                # As in Akka: waiting commands run as soon as no stashing handler is pending, ahead of the
                # remaining persist_async/defer_async handlers (PersistentActorSpec "handle new messages
                # before deferAsync handler is called").
                self._drain_stash()
                if self._replaced or self._dead or self.stop_requested:
                    return
            if (type(entry) is _OneWrite or type(entry) is _OneEvent) and (stored or (failure is None
                                                                              and per_write[wi] is None)):
                # The fast path: one stored event, its handler gets the event it was queued with.
                wi += 1
                self.last_sequence_nr = entry.payload[0].sequence_nr
                self.sender = entry.sender
                self._in_write_handler = True
                try:
                    entry.handler(entry.event)
                except Exception as exc:
                    self._in_write_handler = False
                    self._done(entry)
                    host.report_failure(self, exc, entry.payload[0].payload, entry.sender)
                    return
                self._in_write_handler = False
                # Popped after the handler ran, as in _invoke.
                self._pending -= 1
                if entry.stashing:
                    self._stashing -= 1
                continue
            atomic = entry.atomic
            if atomic is None:
                if not self._invoke(entry, entry.event):
                    return
                continue
            if failure is not None:
                first = atomic.payload[0]
                self.sender = entry.sender
                try:
                    self.on_persist_failure(failure, first.payload, first.sequence_nr)
                except Exception:
                    log.exception("on_persist_failure of %s failed", self.path)
                host.report_error(self.path, f"stopped: persist of {type(first.payload).__name__} (sequence nr "
                                             f"{first.sequence_nr}) failed: {type(failure).__name__}: {failure}")
                # No handler from here on runs (the actor stops): every asker waiting on one of them fails now, not
                # at its timeout, and not only the sender of this first write.
                self._tell_askers(batch[next(i for i, e in enumerate(batch) if e is entry):], failure)
                self._die("persist failed")
                return
            result = None if stored else per_write[wi]
            wi += 1
            if result is None:
                self._in_write_handler = True
                for repr_ in atomic.payload:
                    if self._stop_called:  # (an earlier event's handler of this persist_all stopped it)
                        break
                    self.last_sequence_nr = repr_.sequence_nr
                    if not self._invoke(entry, repr_.payload):
                        self._in_write_handler = False
                        return
                self._in_write_handler = False
            else:
                for repr_ in atomic.payload:
                    if self._stop_called:  # (the hook stopped it at an earlier event: as in Akka, no more calls)
                        break
                    self.last_sequence_nr = repr_.sequence_nr
                    self._done(entry)
                    self.sender = entry.sender
                    event = repr_.payload
                    self._event_rejected(event)
                    # An asking client gets no reply from a handler that did not run: its ask fails now (as on a
                    # persist failure) instead of at its timeout, unless the actor handles rejections itself.
                    replies = type(self).on_persist_rejected is PersistentActor.on_persist_rejected
                    host.report_error(self.path, f"persist of {type(event).__name__} (sequence nr "
                                                 f"{repr_.sequence_nr}) rejected: {type(result).__name__}: {result}",
                                      entry.sender if replies else None, result)
                    try:
                        self.on_persist_rejected(result, event, repr_.sequence_nr)
                    except Exception as exc:
                        host.report_failure(self, exc, event, entry.sender)
                        return
        if self._replaced or self._dead:
            return
        if self._stop_called:
            host.stop_entity(self, "stopped")
            return
        if not self._stashing and self._stash:
            self._drain_stash()

    def _done(self, entry: _Entry) -> None:
        self._pending -= 1
        if entry.stashing:
            self._stashing -= 1

    def _tell_askers(self, entries: list[_Entry], failure: BaseException, told: set[str] | None = None) -> None:
        """Fail at once, with `failure`, each asking client (once, and none in `told`, which gets those told now)
        whose reply waited on one of `entries`."""
        if told is None:
            told = set()
        for entry in entries:
            for asker in self._askers_of(entry):
                if asker is not None and asker not in told and is_ask(asker):
                    told.add(asker)
                    self.context.route(self.path, asker, ask_failure(self.path, failure))

    def _askers_of(self, entry: _Entry) -> Iterable[str | None]:
        """The senders whose replies wait on `entry`'s handler: its command's; a mixin whose one event holds the
        work of several commands (DurableDelivery's DeliveriesSent, a table's commit) adds theirs."""
        return (entry.sender,)

    def _invoke(self, entry: _Entry, event: object) -> bool:
        """Run the entry's handler for one event with its command's sender; False if it failed (the actor
        is restarting)."""
        self.sender = entry.sender
        try:
            entry.handler(event)
        except Exception as exc:
            self._done(entry)
            self.context.report_failure(self, exc, event, entry.sender)
            return False
        # Popped after the handler ran, as in Akka: a defer from inside a handler queues behind it.
        self._done(entry)
        return True

    # ---- snapshots and deletes ------------------------------------------------------------------
    def _tell_self(self, message: object) -> None:
        self.context.route_to_self(self, message)

    def _tell_failure(self, failure: SaveSnapshotFailure | DeleteSnapshotFailure | DeleteSnapshotsFailure |
                      DeleteMessagesFailure) -> None:
        """Tell self a snapshot or delete failure, warning (as Akka does) when the class has no handler for it."""
        warn_if_unhandled(self, failure)
        self._tell_self(failure)

    def save_snapshot(self, snapshot: object) -> None:
        """Store `snapshot` at snapshot_sequence_nr; SaveSnapshotSuccess/Failure arrives as a command."""
        md = SnapshotMetadata(self.persistence_id, self.snapshot_sequence_nr)
        try:
            # (None before recovery: the AttributeError is reported as a SaveSnapshotFailure)
            self._tell_self(SaveSnapshotSuccess(cast(SnapshotStore, self._snapshots).save(md, self.mixin_wrap_snapshot(snapshot))))
        except Exception as exc:
            self.context.report_error(self.path, f"save_snapshot at sequence nr {md.sequence_nr} failed: "
                                                 f"{type(exc).__name__}: {exc}")
            self._tell_failure(SaveSnapshotFailure(md, exc))

    def delete_snapshot(self, sequence_nr: int) -> None:
        """Delete the snapshot at `sequence_nr`; DeleteSnapshotSuccess/Failure arrives as a command."""
        md = SnapshotMetadata(self.persistence_id, sequence_nr, 0)
        try:
            cast(SnapshotStore, self._snapshots).delete(md)
            self._tell_self(DeleteSnapshotSuccess(md))
        except Exception as exc:
            self._tell_failure(DeleteSnapshotFailure(md, exc))

    def delete_snapshots(self, criteria: SnapshotSelectionCriteria) -> None:
        """Delete every snapshot matching `criteria`; DeleteSnapshotsSuccess/Failure arrives as a command."""
        try:
            cast(SnapshotStore, self._snapshots).delete_matching(self.persistence_id, criteria)
            self._tell_self(DeleteSnapshotsSuccess(criteria))
        except Exception as exc:
            self._tell_failure(DeleteSnapshotsFailure(criteria, exc))

    def delete_messages(self, to_sequence_nr: int) -> None:
        """Delete events up to `to_sequence_nr` (<= last_sequence_nr, or MAX); the reply arrives as a command.

        The delete runs one journal transaction per turn of the host (persistence.deletes), so the host's other
        entities are served meanwhile; the events this actor persists after the call are never deleted by it."""
        if to_sequence_nr != MAX_SEQUENCE_NR and to_sequence_nr > self.last_sequence_nr:
            self._tell_failure(DeleteMessagesFailure(RuntimeError(
                f"toSequenceNr [{to_sequence_nr}] must be less than or equal to lastSequenceNr "
                f"[{self.last_sequence_nr}]"), to_sequence_nr))
            return
        if self._deletes is None:
            if self._journal is None:
                self._tell_failure(DeleteMessagesFailure(IllegalStateError(
                    f"{type(self).__name__}.delete_messages: the journal is opened by recovery; call it from "
                    "receive_recover or later"), to_sequence_nr))
                return
            self._deletes = Deletes(self._journal, self.persistence_id, self._schedule_delete_step, self._delete_done)
        self._deletes.add(to_sequence_nr)

    def _schedule_delete_step(self, pause: float) -> None:
        if not self.context.schedule(pause, None, DELETE_STEP, self).active:
            # A stopped instance's (delete_messages from post_stop): no turn of its comes, the rest runs now.
            self._finish_deletes(told=False)

    def _delete_done(self, reply: DeleteMessagesSuccess | DeleteMessagesFailure) -> None:
        if isinstance(reply, DeleteMessagesFailure):
            self._tell_failure(reply)
        else:
            self._tell_self(reply)

    def _finish_deletes(self, told: bool) -> None:
        """This instance goes away: run its deletes to their end now (a next instance must not recover events they
        delete later). Their replies reach the next instance when `told` (a restart: Akka's ActorRef outlives it),
        else dead letters (it stopped)."""
        deletes, self._deletes = self._deletes, None
        if not deletes:
            return
        for reply in deletes.finish_now():
            if told:
                self._delete_done(reply)
                continue
            if isinstance(reply, DeleteMessagesFailure):
                self.context.report_error(self.path, f"delete_messages({reply.to_sequence_nr}) failed after the actor "
                                                     f"stopped: {type(reply.cause).__name__}: {reply.cause}")
            self.context.dead_letter(self.path, self.path, reply, "persistent actor stopped before its "
                                                                  "delete_messages completed")


_PATH_IS_ID = PersistentActor.__dict__["persistence_id"]  # (the default persistence_id property: the path)
_BASE_MIXIN_COMMAND = PersistentActor.mixin_command

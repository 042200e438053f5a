"""EntityTable: the event-sourced entities of one host kept as rows of one persistent actor.

    class Accounts(EntityTable):
        def empty_state(self):
            return 0

        def command_handler(self, entity_id, state, command):
            if isinstance(command, Deposit):
                self.reply(self.sender, Confirm(command.delivery_id))  # once durable; a duplicate's again
                return [Deposited(command.amount)] if self.apply_once(command.origin, command.delivery_id) else []
            if command == "balance":
                self.reply(self.sender, state)
            return []

        def event_handler(self, state, event):
            return state + event.amount

    system.spawn(Accounts, "/user/accounts", entities=True)       # then tell /user/accounts/42 as usual

Akka Typed's shape (an empty state, a command handler returning events, an event handler returning the
next state), run over every message an incoming batch carries for any entity of the host, with no actor
instance, timers or passivation per entity. The events of one group commit are journaled as *one*
TableCommit (its columns: entity ids, events, delivery marks) under the table's persistence id, instead of
one record per entity: the per-entity record and its index page were most of an entity's cost per message
(bench/PROFILE.md §18). Replies wait until every event persisted before them is durable.
"""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any

from actors.error_log import ActorFailure, is_ask
from actors.errors import UnpicklableMessage
from journal import MAX_SEQUENCE_NR, Journal, SnapshotSelectionCriteria, register_type, register_upcaster
from journal.errors import SerializationError
from journal.serialization import (
    STORABLE_TYPES,
    check_storable,
    deserialize,
    ints_decoded,
    ints_encoded,
    repeats_decoded,
    repeats_encoded,
    run_decoded,
    run_encoded,
    serialize,
    store_values_with,
)
from persistence.idempotent import (
    DedupKept,
    SeenIds,
    _dedup_rejected,
    ask_to_settle,
    forget_up_to,
    malformed_settled,
    mark_applied,
    merge_dedup,
    newest_snapshot_after,
    seen_ids,
    settle,
)
from persistence.messages import (
    Confirm,
    DeleteSnapshotsFailure,
    DeleteSnapshotsSuccess,
    SaveSnapshotFailure,
    SaveSnapshotSuccess,
    Settled,
    SnapshotOffer,
)
from persistence.persistent_actor import PersistentActor, _Entry

log = logging.getLogger("reprise.persistence")

_MISSING = object()


# A command's events are looked up in STORABLE_TYPES (scalars, and each registered class once one of its values
# encoded) as the handler returns them: a set lookup per event, where encoding each one (about 2 µs) would cost a
# large part of its row. So an event the journal cannot store fails its command alone instead of the commit of the
# whole batch. Not caught so: a value the journal cannot encode in an event of a class found storable before (an
# int beyond 64 bits, an unregistered object in a field); the commit is then rejected and the table stops
# (_event_rejected).
def _check_storable(event: object) -> None:
    """Raise SerializationError (failing the command) for an event the journal cannot store."""
    try:
        check_storable(event)
    except SerializationError as exc:
        raise SerializationError(f"its event cannot be journaled, so the command was dropped: {exc}") from None


@register_type(manifest="reprise.persistence.TableCommit", version=2)
@dataclass(frozen=True, slots=True)
class TableCommit:
    """What one entity table persisted in one group commit, as columns: `events[k]` of entity
    `entity_ids[k]`, in order; deliveries `(origins[j], delivery_ids[j])` applied with them; `shards`, the
    shard count the table was spawned with (its entities' rows are in the shard that count chose); `columns`,
    what a layer over the table journals with the commit (spark_bridge.FeedTable: its follow-ups), serialized
    (journal.serialization.serialize): readers of the journal (projections, entity_events) skip it undecoded."""

    shards: int
    entity_ids: tuple[str, ...]
    events: tuple[object, ...]
    origins: tuple[str, ...]
    delivery_ids: tuple[int, ...]
    columns: bytes | None = None


def _stored(c: TableCommit) -> list[object]:
    """TableCommit as stored (version 2): its columns as runs, so a commit of N rows costs about N entity ids
    and N small values, not N copies of the event's manifest and the origin's path: the entity ids, the events
    as `run_encoded` runs, the origins as `repeats_encoded` pairs, the delivery ids as `ints_encoded`
    differences. Version 1 stored each column as a tuple (66 bytes a row for the demo's deposits, 7 now); it is
    read through the upcaster below."""
    return [c.shards, list(c.entity_ids), run_encoded(c.events), repeats_encoded(c.origins),
            ints_encoded(c.delivery_ids), c.columns]


def _from_stored(stored: list[Any]) -> list[Any]:
    shards, ids, events, origins, delivery_ids, columns = stored
    return [shards, tuple(ids), run_decoded(events), repeats_decoded(origins), ints_decoded(delivery_ids), columns]


def _stored_from_version_1(fields: list[Any]) -> list[Any]:
    # (commits stored before `columns` existed have five fields)
    return _stored(TableCommit(*fields))


store_values_with(TableCommit, _stored, _from_stored)
register_upcaster("reprise.persistence.TableCommit", 1, _stored_from_version_1)


@register_type(manifest="reprise.persistence.TableSnapshot")
@dataclass(frozen=True)
class TableSnapshot:
    """Every entity's state and the table's dedup state {origin: SeenIds.state()}, taken with no write in flight;
    `columns`, a layer's own state (mixin_snapshot_columns), or None."""

    shards: int
    states: dict[str, object]
    dedup: dict[str, tuple[int, tuple[tuple[int, int], ...]]]
    columns: object = None


@dataclass(frozen=True, slots=True)
class _EntityBatch:
    """The messages of one host batch for the table's entities, handed through PersistentActor.receive (so a
    table that stopped or stashes treats them as any command)."""

    items: list[tuple[str, Any, str | None]]


class EntityTable(PersistentActor):
    """Entities as rows: implement `empty_state()`, `command_handler(entity_id, state, command)` and
    `event_handler(state, event)`; spawn with `entities=True`.

    - `command_handler` returns the events to persist for the entity (a list or tuple; None or [] for none).
      Each is applied at once with `event_handler`, so the entity's next command sees it; `self.sender` is
      the command's sender and `self.entity_path` the entity's path meanwhile.
    - `self.reply(to, message)` sends `message` once every event persisted so far is durable (Akka Typed's
      thenReply); `self.tell` sends at once, so it must not reveal state that is not durable yet.
    - `self.apply_once(origin, delivery_id)`: True the first time the table sees that delivery (recorded
      with this command's events, so across restarts too), False for a duplicate. Delivery ids must be
      unique per origin across the table's entities, as `deliver()` and the Spark bridge number them.
    - A command (or its events' `event_handler`) that raises is dropped: none of its events are persisted,
      its entity keeps its state, its `apply_once` marks are forgotten, its replies are not sent; the error
      is reported for the entity's path (`system.errors()`; an asking client gets ActorFailed), and the
      other messages go on. So is a command returning an event the journal cannot store (an unregistered
      class: Akka's persist rejection, for that entity alone), found before its entity's state takes it; the
      table checks a registered class once, so a value the journal cannot encode in an event of a class found
      storable before (an int beyond 64 bits) still rejects the whole commit. A rejected commit or a failed
      write stops the table; the next message starts it again from the journal (Akka's persist failure), so
      state never runs ahead of what is stored.
    - Recovery: the newest TableSnapshot (one every `snapshot_every` commits, taken when no write is in
      flight; older ones are deleted), then the TableCommits after it. `entity_events()` reads one entity's
      history back. States are values: return a new state instead of changing the old one in place. The dedup
      state outlives `delete_messages` (journaled first, DedupKept) and is recovered whole by a partial recovery.
    - Per entity there is no instance: no timers, no passivation (every state stays in memory), and
      `system.stop(entity path)` returns at once, changing nothing. Messages to the table's own path go to
      `receive_command`. The shard count is part of what is stored: a table recovers only with the same one.
    """

    snapshot_every: int | None = 1000
    """Save a TableSnapshot after this many commits (when no write is in flight); None: never."""
    settle_after_gaps: int | None = 64
    """As IdempotentReceiver's: `confirm` asks the origin for its settled watermark once the table's dedup state
    of that origin gained this many gaps (ids it never sees: a sender's deliveries to other destinations, or to the
    other shards); a DurableDelivery answers `Settled` and the gaps below it are dropped. None: never ask."""
    _settle_asked: dict[str, int] | None = None  # origin -> its gaps when last asked (made on the first ask)

    # ---- what the user implements ---------------------------------------------------------------
    def empty_state(self) -> Any:
        """The state of an entity that has no events yet."""
        return None

    def command_handler(self, entity_id: str, state: Any, command: Any) -> list[Any] | tuple[Any, ...] | None:
        """Decide on one command to the entity: return the events to persist (None or [] for none)."""
        raise NotImplementedError(f"{type(self).__name__} must implement command_handler(entity_id, state, command)")

    def event_handler(self, state: Any, event: Any) -> Any:
        """Return the entity's state after `event` (also on replay: no side effects)."""
        raise NotImplementedError(f"{type(self).__name__} must implement event_handler(state, event)")

    def committed(self, commit: TableCommit) -> None:
        """Called once `commit` is durable, after its replies: e.g. one cumulative confirm per origin."""

    def receive_command(self, message: Any, sender: str | None) -> None:
        """Messages to the table's own path (not to one of its entities): dead letters unless overridden."""
        self.context.dead_letter(sender, self.path, message, f"{type(self).__name__} is an EntityTable: it handles "
                                 "messages to its entities (path/<id>); override receive_command for its own path")

    # ---- hooks for layers over the table (spark_bridge.FeedTable), not for applications -------------
    mixin_table_messages: frozenset[type] = frozenset()
    """Message types addressed to an entity that are the layer's own (mixin_table_message handles them)."""
    mixin_marks: bool = False
    """True: mixin_mark() is called before each command and mixin_undo(mark) when the command fails."""

    def mixin_table_message(self, entity_id: str, message: Any, sender: str | None) -> None:
        """Handle a message of one of `mixin_table_messages`, in its place among the entities' commands."""

    def mixin_mark(self) -> object:
        """What mixin_undo needs to forget what the coming command adds to the layer's columns."""
        return None

    def mixin_undo(self, mark: object) -> None:
        """Forget what the failed command added to the layer's columns since `mark`."""

    def mixin_commit_columns(self) -> object | None:
        """The layer's columns for the commit being queued (stored in TableCommit.columns), or None; a layer that
        gathers some resets them here and may call when_durable for what waits on the commit."""
        return None

    def mixin_recover_columns(self, columns: object) -> None:
        """Recover the layer's columns of one stored commit (after its events)."""

    def mixin_snapshot_columns(self) -> object | None:
        """The layer's state for a TableSnapshot (taken with no write in flight), or None."""
        return None

    def mixin_recover_snapshot_columns(self, columns: object) -> None:
        """Restore the layer's state from a TableSnapshot."""

    # ---- what command handlers call ---------------------------------------------------------------
    def reply(self, to: str | None, message: object) -> None:
        """Send `message` to `to` once every event persisted so far (this command's too) is durable."""
        self._after.append((to, message))

    def when_durable(self, action: Callable[[Any], object], arg: object) -> None:
        """Call `action(arg)` once every event persisted so far (this command's too) is durable, in order with
        replies; not at all if this command fails (for layers: spark_bridge.FeedTable confirms rows so)."""
        self._after.append((action, arg))

    def apply_once(self, origin: str, delivery_id: int) -> bool:
        """True the first time this table sees delivery `delivery_id` from `origin`; False for a duplicate."""
        seen = self._seen.get(origin)
        if seen is None or type(delivery_id) is not int or delivery_id < 1:  # (checks and a first origin)
            if not mark_applied(self._seen, origin, delivery_id):
                return False
        elif not seen.add(delivery_id):  # (mark_applied's usual case, without its call: once per row)
            return False
        self._origins.append(origin)
        self._delivery_ids.append(delivery_id)
        return True

    def confirm(self, origin: str, delivery_id: int) -> None:
        """Reply Confirm(delivery_id) to the command's sender once durable (as `reply`), asking `origin` for its
        settled watermark once settle_after_gaps gaps built up, so that the dedup state stays bounded."""
        limit = self.settle_after_gaps
        seen = self._seen.get(origin)
        settle_for = ""
        if limit is not None and seen is not None and seen.range_count >= limit:
            if self._settle_asked is None:
                self._settle_asked = {}
            settle_for = origin if ask_to_settle(seen, self._settle_asked, origin, limit) else ""
        self._after.append((self.sender, Confirm(delivery_id, settle_for)))

    def forget_applied_up_to(self, origin: str, delivery_id: int) -> None:
        """Take every delivery id <= `delivery_id` from `origin` as applied, keeping no memory of each (for an
        origin that promised never to deliver them again: the Spark bridge's settled watermark). Not journaled: after
        recovery only the watermark of the TableSnapshot holds, and every delivery applied is known again (as
        IdempotentReceiver.forget_applied_up_to)."""
        forget_up_to(self._seen, origin, delivery_id)

    @property
    def entity_path(self) -> str:
        """The path of the entity whose command is being handled."""
        return self.path + "/" + self._entity

    def state_of(self, entity_id: str) -> Any:
        """The entity's current state (empty_state() if it has none); includes events not durable yet."""
        state = self._states.get(entity_id, _MISSING)
        return self.empty_state() if state is _MISSING else state

    def entity_count(self) -> int:
        """How many entities have a state here."""
        return len(self._states)

    def entity_states(self) -> Mapping[str, Any]:
        """Every entity's current state by id (read only; includes events not durable yet)."""
        return MappingProxyType(self._states)

    # ---- the table's machinery ---------------------------------------------------------------------
    @property
    def persistence_id(self) -> str:
        """The host's key: its path, or the shard's name for one shard of a sharded table."""
        return self.context.key

    def stats(self) -> dict[str, int]:
        return {"table_entities": len(self._states)}

    def dedup_size(self) -> int:
        """How many ranges the dedup state keeps above the low watermarks of its origins (the gaps' count)."""
        return sum(s.range_count for s in self._seen.values())

    def mixin_init(self) -> None:
        super().mixin_init()
        self._states: dict[str, Any] = {}
        self._seen: dict[str, SeenIds] = {}
        # The columns of the commit being gathered (one per group commit) and its replies.
        self._ids: list[str] = []
        self._events: list[object] = []
        self._origins: list[str] = []
        self._delivery_ids: list[int] = []
        # What waits for the commit: (path, message) replies and (action, arg) calls, in call order.
        self._after: list[tuple[str | None | Callable[[Any], object], object]] = []
        self._entity = ""
        self._unwritten = 0  # commits whose write has not completed
        self._rejected = False  # a commit was rejected: the table is stopping (see _event_rejected)
        # The replies of each commit not written yet (by the commit's id): a rejected commit fails its asks with them.
        self._replies_of: dict[int, list[tuple[str | None | Callable[[Any], object], object]]] = {}
        self._commits_since_snapshot = 0
        # A round's batches are gathered into one commit, queued when the coordinator takes the round's writes
        # (_flush_round): a commit queued per batch could be stored right after a rejected one of the same round,
        # decided on its state. _gathering: a round's commit is being gathered; _applying: a batch is being run.
        self._gathering = False
        self._applying = False

    def receive_entities(self, messages: list[tuple[str, Any, str | None]]) -> None:
        self.receive(_EntityBatch(messages), None)

    def mixin_command(self, message: Any, sender: str | None) -> None:
        kind = type(message)
        if kind is _EntityBatch:
            self._apply(message.items)
        elif kind is SaveSnapshotSuccess:
            # The newest snapshot is all recovery needs: older ones would only fill the store.
            self.delete_snapshots(SnapshotSelectionCriteria(max_sequence_nr=message.metadata.sequence_nr - 1))
        elif kind in (SaveSnapshotFailure, DeleteSnapshotsSuccess, DeleteSnapshotsFailure):
            pass  # (a failed save was reported by save_snapshot; the next one comes snapshot_every commits later)
        elif kind is Settled:  # (the answer to a confirm's ask, sent to the table's path: its replies come from there)
            if malformed_settled(message):
                self.context.dead_letter(sender, self.path, message, "a Settled needs origin (str) and low (int), as "
                                         "DurableDelivery sends it: nothing was forgotten")
            else:
                settle(self._seen, self._settle_asked, message)
        else:
            super().mixin_command(message, sender)
            if self._after or self._delivery_ids:
                self._gather()  # (receive_command replied, or marked a delivery: not only with the next batch)

    def _apply(self, items: list[tuple[str, Any, str | None]]) -> None:
        """Run the command handler over the batch; its events join the round's commit (_flush_round)."""
        states, ids, events = self._states, self._ids, self._events
        handle, apply, empty = self.command_handler, self.event_handler, self.empty_state
        protocol, layered = self.mixin_table_messages, self.mixin_marks
        # (the gathering lists stay the same objects until _flush, at the round's end: bound once)
        marked_ids, after = self._delivery_ids, self._after
        get, storable = states.get, STORABLE_TYPES
        layer: object = None
        self._applying = True
        for entity_id, command, sender in items:
            if protocol and type(command) in protocol:
                self.mixin_table_message(entity_id, command, sender)
                continue
            self.sender = sender
            self._entity = entity_id
            state = get(entity_id, _MISSING)
            if state is _MISSING:
                state = empty()
            # (events are appended only once all of a command's applied: len(events) marks them at a failure)
            marks, n_after = len(marked_ids), len(after)
            if layered:
                layer = self.mixin_mark()
            try:
                produced = handle(entity_id, state, command)
                if produced:
                    if type(produced) is list or type(produced) is tuple:
                        # (each event checked storable before the entity's state is set: a later command of
                        # the entity never sees one the journal would refuse; after event_handler, whose error
                        # comes first)
                        if len(produced) == 1:  # (the usual case: no loop)
                            event = produced[0]
                            state = apply(state, event)
                            if type(event) not in storable:
                                _check_storable(event)
                            states[entity_id] = state
                            ids.append(entity_id)
                            events.append(event)
                        else:
                            for event in produced:
                                state = apply(state, event)
                                if type(event) not in storable:
                                    _check_storable(event)
                            ids.extend([entity_id] * len(produced))
                            events.extend(produced)
                            states[entity_id] = state
                    else:
                        raise TypeError(f"{type(self).__name__}.command_handler must return a list or tuple of events "
                                        f"(or None), got {type(produced).__name__}: return [event]")
                elif produced is not None and type(produced) is not list and type(produced) is not tuple:
                    # (0, {} or "" would otherwise pass for "no events" where the handler meant one)
                    raise TypeError(f"{type(self).__name__}.command_handler must return a list or tuple of events "
                                    f"(or None), got {type(produced).__name__} {produced!r}: return [event]")
            except Exception as exc:
                self._undo(marks, len(events), n_after)
                if layered:
                    self.mixin_undo(layer)
                self._command_failed(entity_id, command, sender, exc)
        self._entity = ""
        self._applying = False
        self._gather()

    def _gather(self) -> None:
        """Have what was gathered queued as (part of) the round's commit when the round's writes are taken."""
        if not self._gathering:
            self._gathering = True
            self._contribute(self._flush_round)

    def _flush_round(self) -> None:
        """Queue what the round's batches gathered as one commit (the coordinator is taking the round's writes)."""
        self._gathering = False
        if self._applying or self._dead or self._replaced:
            # A batch raised midway (the table is restarting and its queued writes are being taken): none of the
            # round's gathered work is queued, and none of it was acknowledged. Its senders' retries apply it.
            return
        self._flush()
        if self.stop_requested:  # (columns that cannot be journaled: nobody else looks at the stop now)
            self.context.stop_entity(self, "stopped")

    def _undo(self, marks: int, n_events: int, n_after: int) -> None:
        """Forget what a failed command did: its events, its delivery marks, its replies."""
        del self._ids[n_events:], self._events[n_events:], self._after[n_after:]
        for origin, delivery_id in zip(self._origins[marks:], self._delivery_ids[marks:], strict=True):
            self._seen[origin].discard(delivery_id)
        del self._origins[marks:], self._delivery_ids[marks:]

    def _command_failed(self, entity_id: str, command: object, sender: str | None, exc: Exception) -> None:
        path = self.path + "/" + entity_id
        if self.context.report_error(path, f"failed on {type(command).__name__}: {type(exc).__name__}: {exc}",
                                     sender, exc):
            log.error("entity %s of table %s failed on %s (the command was dropped, its state kept): %s\n%s",
                      entity_id, self.persistence_id, type(command).__name__, exc,
                      "".join(traceback.format_exception(exc)))

    def _flush(self) -> None:
        """Queue the gathered columns as one TableCommit; replies go out once it (and all before it) is durable.
        Called once per group commit (_flush_round)."""
        layer = self.mixin_commit_columns()
        replies = self._after
        columns = None
        if layer is not None:
            try:
                columns = serialize(layer)
            except SerializationError as exc:
                self._after = []
                self._rejected = True
                self._fail_asks(replies, f"the table's columns of its commit cannot be journaled ({exc})")
                self.context.report_error(self.path, f"stopped: {type(self).__name__}'s columns of a commit cannot be "
                                                     f"journaled ({exc}); the table recovers on its next message")
                self.stop()
                return
        if self._events or self._delivery_ids or columns is not None:
            commit = TableCommit(self.context.shards, tuple(self._ids), tuple(self._events), tuple(self._origins),
                                 tuple(self._delivery_ids), columns)
            self._ids, self._events, self._origins, self._delivery_ids, self._after = [], [], [], [], []
            self._unwritten += 1
            if replies:
                self._replies_of[id(commit)] = replies
            self.persist_async(commit, _Committed(self, replies))
        elif replies:
            self._after = []
            self.defer_async(replies, self._send_unless_rejected)

    def _send(self, after: list[tuple[str | None | Callable[[Any], object], object]]) -> None:
        route, me = self.context.route, self.path
        start, k = 0, 0
        while start < len(after):
            try:
                for k in range(start, len(after)):
                    to, message = after[k]
                    if type(to) is str:
                        route(me, to, message)
                    elif to is None:
                        self.context.dead_letter(me, "<no sender>", message, "reply to a message that had no sender")
                    else:
                        to(message)  # type: ignore[operator]  # (an action of when_durable)
                return
            except UnpicklableMessage as exc:
                # One reply that cannot travel must not cost the replies (and confirms) after it theirs.
                self.context.report_error(me, f"a reply to {after[k][0]} was not sent (its command's events are "
                                              f"durable): {exc}")
                start = k + 1

    def _fail_asks(self, replies: list[tuple[str | None | Callable[[Any], object], object]], why: str) -> None:
        """Fail at once the asks among `replies` that will not be answered (the other senders' retries recover)."""
        for to, _ in replies:
            if type(to) is str and is_ask(to):
                self.context.route(self.path, to, ActorFailure(self.path, "CommitRejected", why))

    def _send_unless_rejected(self, after: list[tuple[str | None | Callable[[Any], object], object]]) -> None:
        if not self._rejected:  # (see _committed)
            self._send(after)

    def _committed(self, commit: TableCommit,
                   replies: list[tuple[str | None | Callable[[Any], object], object]]) -> None:
        self._unwritten -= 1
        self._replies_of.pop(id(commit), None)
        if self._rejected:
            # A commit before this one in the same write was rejected (the table stops once this write's
            # handlers ran): this one's replies may reveal the rejected events' effects, so none is sent; its
            # senders' retries find it applied once the table has recovered. An ask gets no retry: it fails now.
            self._fail_asks(replies, "an earlier commit in the same write was rejected; the table recovers on its "
                                     "next message, and this command's events are stored: ask again")
            return
        if replies:
            self._send(replies)
        self.committed(commit)
        self._commits_since_snapshot += 1
        every = self.snapshot_every
        if every is not None and self._commits_since_snapshot >= every and not self._unwritten and not self._gathering:
            # Only with nothing in flight or gathered: the states then hold exactly the events up to last_sequence_nr.
            self._commits_since_snapshot = 0
            self.save_snapshot(TableSnapshot(self.context.shards, dict(self._states),
                                             {o: s.state() for o, s in self._seen.items()},
                                             self.mixin_snapshot_columns()))

    def delete_messages(self, to_sequence_nr: int) -> None:
        """Delete commits up to `to_sequence_nr` (PersistentActor.delete_messages), once the dedup state they hold is
        journaled after them (DedupKept, as IdempotentReceiver's): a restart then takes the redeliveries of the deleted
        commits' deliveries for duplicates still. The entities' states go with the commits unless a TableSnapshot
        covers them. A journal that rejects that state deletes nothing (DeleteMessagesFailure)."""
        if self._recovery_running or not self._seen or (
                to_sequence_nr != MAX_SEQUENCE_NR and to_sequence_nr > self.last_sequence_nr):
            super().delete_messages(to_sequence_nr)  # (nothing applied yet, or its error: as PersistentActor's)
            return
        # Bounded at the handled commits: one queued or gathered meanwhile keeps its own event, and its marks are left
        # out of the state kept (its write may fail or be rejected: the redeliveries must apply then).
        to = min(to_sequence_nr, self.last_sequence_nr)
        in_flight = list(zip(self._origins, self._delivery_ids, strict=True))
        for entry in self._batch or ():
            for repr_ in entry.atomic.payload if entry.atomic is not None else ():
                commit = repr_.payload
                if type(commit) is TableCommit:
                    in_flight += zip(commit.origins, commit.delivery_ids, strict=True)
        seen = {o: s.state() for o, s in self._seen.items()}
        if in_flight:
            copies = {o: SeenIds(*state) for o, state in seen.items()}
            for origin, delivery_id in in_flight:
                copies[origin].discard(delivery_id)
            seen = {o: c.state() for o, c in copies.items()}
        delete = super().delete_messages
        # (Deleted only once the state is durable: a crash or a failed write in between deletes nothing.)
        self.persist_async(DedupKept(seen, to), lambda _: delete(to))

    def _askers_of(self, entry: _Entry) -> Iterable[str | None]:
        # A commit's handler holds the replies of every command of its round, to any entity: a failed write fails
        # each of their askers, not only the entry's sender (the round's last command's). (A round without events
        # defers its replies with no write of its own: no write of it fails.)
        askers = super()._askers_of(entry)
        handler = entry.handler
        if type(handler) is not _Committed:
            return askers
        return (*askers, *(to for to, _ in handler.replies if type(to) is str))

    def _event_rejected(self, event: object) -> None:
        # The journal refused the commit (an event that passed _check_storable, as one of a class stored before,
        # holds a value it cannot encode): the states already hold its events, so the table stops and its next
        # message recovers it from what is stored.
        if type(event) is TableCommit:
            self._unwritten -= 1
            self._rejected = True
            self.context.report_error(self.path, f"stopped: the journal rejected a commit of {len(event.events)} "
                                                 "events (see the host's log); the table recovers on its next message")
            self._fail_asks(self._replies_of.pop(id(event), []),
                            "the journal rejected the table's commit holding this command's events (an event it "
                            "cannot serialize? see system.errors()); nothing of it is stored")
            self.stop()
        elif type(event) is DedupKept:
            self._tell_failure(_dedup_rejected(type(self).__name__, event.to_sequence_nr))
        super()._event_rejected(event)

    # ---- recovery ---------------------------------------------------------------------------------
    def mixin_recover_snapshot(self, offer: SnapshotOffer) -> None:
        snap = offer.snapshot
        if type(snap) is TableSnapshot:
            self._check_shards(snap.shards)
            self._states = dict(snap.states)
            self._seen = {o: SeenIds(low, tuple(ranges)) for o, (low, ranges) in snap.dedup.items()}
            if snap.columns is not None:
                self.mixin_recover_snapshot_columns(snap.columns)
            return
        super().mixin_recover_snapshot(offer)

    def mixin_recover_event(self, event: Any) -> None:
        if type(event) is TableCommit:
            self._check_shards(event.shards)
            states, apply, empty = self._states, self.event_handler, self.empty_state
            for entity_id, e in zip(event.entity_ids, event.events, strict=True):
                state = states.get(entity_id, _MISSING)
                states[entity_id] = apply(empty() if state is _MISSING else state, e)
            seen = self._seen
            for origin, delivery_id in zip(event.origins, event.delivery_ids, strict=True):
                seen_ids(seen, origin).add(delivery_id)
            if event.columns is not None:
                self.mixin_recover_columns(deserialize(event.columns))
            return
        if type(event) is DedupKept:
            merge_dedup(self._seen, event.dedup)
            return
        super().mixin_recover_event(event)

    def _on_replay_success(self) -> None:
        # A partial recovery (Recovery.none(), to_sequence_nr, replay_max): the commits after it hold the rest of the
        # dedup state (as for IdempotentReceiver); the states stay what the user's recovery asked for.
        if self._replayed_to < self.last_sequence_nr:
            start, seen = self._replayed_to + 1, self._seen
            selected = newest_snapshot_after(self, self._replayed_to)
            if selected is not None and type(selected.snapshot) is TableSnapshot:
                merge_dedup(seen, selected.snapshot.dedup)
                start = selected.metadata.sequence_nr + 1
            for event in self.read_events(start, self.last_sequence_nr):
                if type(event) is TableCommit:
                    for origin, delivery_id in zip(event.origins, event.delivery_ids, strict=True):
                        seen_ids(seen, origin).add(delivery_id)
                elif type(event) is DedupKept:
                    merge_dedup(seen, event.dedup)
        super()._on_replay_success()

    def _check_shards(self, stored: int) -> None:
        if stored != self.context.shards:
            raise ValueError(f"entity table {self.persistence_id} was written with shards={stored} and is spawned "
                             f"with shards={self.context.shards}: each shard holds the rows of the entities that "
                             f"count chose; spawn it with shards={stored}")

    def mixin_tags(self, stored: object) -> frozenset[str]:
        # Tags are asked of the users' events, not of the commit that journals them together. tags_for mostly
        # returns one of a few constants: each distinct answer is checked (by super) once per commit.
        if type(stored) is TableCommit:
            tag, check = self.tags_for, super().mixin_tags
            answers: dict[object, frozenset[str]] = {}
            tags: set[str] = set()
            for e in stored.events:
                answer = tag(e)
                try:
                    checked = answers.get(answer)
                except TypeError:  # (an unhashable answer: checked every time)
                    tags.update(check(e))
                    continue
                if checked is None:
                    checked = answers[answer] = check(e)
                    tags.update(checked)
            return frozenset(tags)
        if type(stored) is DedupKept:  # (the table's bookkeeping, not an event of the user's)
            return frozenset()
        return super().mixin_tags(stored)


class _Committed:
    """A commit's persist handler: its replies, then maybe a snapshot (a class: no closure per commit)."""

    __slots__ = ("table", "replies")

    def __init__(self, table: EntityTable, replies: list[tuple[str | None | Callable[[Any], object], object]]) -> None:
        self.table = table
        self.replies = replies

    def __call__(self, commit: TableCommit) -> None:
        self.table._committed(commit, self.replies)


def entity_events(journal: Journal, table_path: str, entity_id: str, shards: int = 1) -> Iterator[tuple[int, Any]]:
    """(n, event) for each event of entity `entity_id` of the table at `table_path`, in order; n counts the
    entity's own events from 1 (its sequence numbers). Reads the whole shard's journal: for inspection."""
    from actors.paths import shard_key, shard_of

    pid = shard_key(table_path, shard_of(f"{table_path}/{entity_id}", table_path, shards), shards)
    if not journal.highest_sequence_nr(pid):
        _refuse_another_shard_count(journal, table_path, shards)
    n = 0
    with journal.events_by_persistence_id(pid) as query:
        for envelope in query:
            commit = envelope.event
            if type(commit) is not TableCommit:
                continue
            if commit.shards != shards:
                # (the shard read exists under this count too, but holds other entities: its events would read
                # as none)
                raise ValueError(f"entity_events: the table {table_path} was written with shards={commit.shards}, "
                                 f"not {shards}: pass shards={commit.shards}")
            for owner, event in zip(commit.entity_ids, commit.events, strict=True):
                if owner == entity_id:
                    n += 1
                    yield n, event


def _refuse_another_shard_count(journal: Journal, table_path: str, shards: int) -> None:
    """ValueError when the journal holds the table under another shard count than `shards` (its events would
    silently read as none)."""
    ids = [p for p in journal.current_persistence_ids() if p == table_path or p.startswith(f"{table_path} [shard ")]
    stored = len(ids) if ids and ids != [table_path] else 1 if ids else 0
    if stored and ((stored == 1) != (shards == 1) or stored > shards):
        raise ValueError(f"entity_events: the journal holds the table {table_path} as "
                         f"{'one host' if stored == 1 else f'{stored} or more shards'}, not {shards}: pass the shards= "
                         f"it was spawned with{'' if stored == 1 else f', e.g. shards={stored}'}")
    for pid in ids[:1]:
        # A shard that exists says the count (the shard asked for may be one the table never had: shard 2 of 3
        # for a table of 2, whose events would read as none).
        with journal.events_by_persistence_id(pid) as query:
            written = next((e.event.shards for e in query if type(e.event) is TableCommit), shards)
        if written != shards:
            raise ValueError(f"entity_events: the table {table_path} was written with shards={written}, not "
                             f"{shards}: pass shards={written}")


__all__ = ["EntityTable", "TableCommit", "TableSnapshot", "entity_events"]

"""DurableDelivery: AtLeastOnceDelivery that journals its own sent/confirmed events and snapshots.

The events are compact: everything delivered (or confirmed) between two group commits of the host is
journaled as one `DeliveriesSent` (one `DeliveriesConfirmed`) event, queued just before the actor's
batch is written, or earlier when the actor persists or defers something itself (so the journal and the
handlers keep the order of the calls). A message still leaves only once its sent event is durable.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NoReturn, cast

from journal import MAX_SEQUENCE_NR, AtomicWrite, register_type
from persistence.compact import expand, inherited_requeues, same_or_each, split_rejected
from persistence.coordinator import WriteResults
from persistence.delivery import _GONE, _UNSENT, AtLeastOnceDelivery, _Delivery, check_destination
from persistence.messages import (
    AtLeastOnceDeliverySnapshot,
    Confirm,
    ConfirmDeliveries,
    ConfirmUpTo,
    DeleteMessagesFailure,
    Settled,
    SnapshotOffer,
    UnconfirmedDelivery,
)
from persistence.persistent_actor import IllegalStateError, _Entry


@register_type(manifest="reprise.persistence.DeliveriesSent")
@dataclass(frozen=True)
class DeliveriesSent:
    """Deliveries journaled together: `messages[k]` to `destinations[k]` (or the only one) as `delivery_ids[k]`."""

    delivery_ids: tuple[int, ...]
    destinations: tuple[str, ...]
    messages: tuple[object, ...]

    def __len__(self) -> int:
        return len(self.delivery_ids)

    def entries(self) -> list[tuple[int, str, object]]:
        """(delivery id, destination, message) of every delivery in the event."""
        ids = self.delivery_ids
        return list(zip(ids, expand(self.destinations, len(ids)), self.messages, strict=True))


@register_type(manifest="reprise.persistence.DeliveriesConfirmed")
@dataclass(frozen=True)
class DeliveriesConfirmed:
    """Confirmations journaled together: these ids, and every id <= `up_to` (0: none)."""

    delivery_ids: tuple[int, ...] = ()
    up_to: int = 0

    def __len__(self) -> int:
        return len(self.delivery_ids) + (1 if self.up_to else 0)

    def singles(self) -> list[DeliveriesConfirmed]:
        """Each confirmation on its own: one event per id, then the cumulative one (if any)."""
        each = [DeliveriesConfirmed((i,)) for i in self.delivery_ids]
        return [*each, DeliveriesConfirmed((), self.up_to)] if self.up_to else each


# The one-event-per-delivery forms written by earlier versions; still replayed.
@register_type(manifest="reprise.persistence.DeliverySent")
@dataclass(frozen=True)
class DeliverySent:
    delivery_id: int
    destination: str
    message: object


@register_type(manifest="reprise.persistence.DeliveryConfirmed")
@dataclass(frozen=True)
class DeliveryConfirmed:
    delivery_id: int
    up_to: bool = False


@register_type(manifest="reprise.persistence.DeliveriesKept")
@dataclass(frozen=True)
class DeliveriesKept:
    """The delivery state (unconfirmed deliveries, delivery id counter) journaled before a delete_messages up to
    `to_sequence_nr`, which deletes the events it was replayed from; replay adds it to what the events left hold."""

    delivery: AtLeastOnceDeliverySnapshot
    to_sequence_nr: int


@register_type(manifest="reprise.persistence.DurableSnapshot")
@dataclass(frozen=True)
class DurableSnapshot:
    delivery: AtLeastOnceDeliverySnapshot
    state: object


_DELIVERY_EVENTS = frozenset({DeliveriesSent, DeliveriesConfirmed, DeliveriesKept, DeliverySent, DeliveryConfirmed})


class DurableDelivery(AtLeastOnceDelivery):
    """deliver() journals the delivery before sending; Confirm/ConfirmUpTo/ConfirmDeliveries are journaled too.

    Deliveries that an event of yours decides go with it in one write: persist_and_deliver (deliver() from a persist
    handler, or from a defer handler that waits for a persist, raises IllegalStateError: the replay restores the
    event, never a delivery journaled after it).

    The delivery state (unconfirmed deliveries, the delivery id counter) is recovered in full whatever `recovery`
    says: a partial one (Recovery.none(), to_sequence_nr, replay_max) limits what receive_recover sees, and the
    delivery events after it are read too, so no journaled delivery is dropped and no delivery id is used twice."""

    # The senders of a queued DeliveriesSent's deliveries by its first delivery id, when they differ (rare: commands of
    # several senders delivered in one round); None until the first (no dict per idle actor).
    _senders_of: dict[int, tuple[str | None, ...]] | None = None
    # The same for a queued DeliveriesConfirmed, by its sequence nr: the sender of each of its items (DeliveriesConfirmed
    # .singles()), when they differ (e.g. askers of one round confirming, or sinks confirming each other's round).
    _confirmers_of: dict[int, tuple[str | None, ...]] | None = None
    # Deliveries given up (max_delivery_attempts) whose dead-letter forward is being journaled, by the forward's delivery
    # id: (the given-up delivery's id, the delivery, the sender then). Confirmed (journaled) once the forward is durable;
    # unconfirmed again if it is rejected. None until the first.
    _dead_lettering: dict[int, tuple[int, _Delivery, str | None]] | None = None

    def mixin_init(self) -> None:
        super().mixin_init()
        self._senders_of = None
        self._confirmers_of = None
        self._dead_lettering = None
        # delivered, sent event not queued yet: (delivery id, delivery, the sender of the command that delivered it)
        self._unjournaled: list[tuple[int, _Delivery, str | None]] = []
        self._confirmed_ids: list[int] = []  # confirmed, confirmed event not queued yet
        self._confirmed_by: list[str | None] = []  # the sender of the command that confirmed each of those
        self._confirmed_up_to = 0
        self._up_to_by: str | None = None  # the sender of the command that confirmed up to _confirmed_up_to
        self._journaling = False  # something above waits to be journaled (a before-commit contribution is made)
        # The command or handler running now queued a write of its own (persist..., persist_and_deliver, an
        # application): a deferral it queues then runs once that write is durable (see _queue_defer).
        self._wrote = False

    def deliver(self, destination: str, id_to_message: Callable[[int], object]) -> int:
        """Journal the delivery (asynchronously: commands keep flowing), then send it until confirmed.

        Journaled in this round's group commit, after the command returns: reply to the command from `defer` (it runs
        once the delivery is durable; not at all if its write failed), or use `persist_and_deliver`. Not from a persist
        handler, nor from a defer handler queued behind a persist (IllegalStateError): there the event is durable
        already and the delivery would be written after it. A defer handler that runs at once (nothing pending) or
        waits only for deliveries and confirms may deliver, as a command does.

        A message the journal rejects (it cannot be stored) is reported, never sent, and the deferral still runs (as
        Akka's defer after a rejected persist): an asking client's ask fails with the rejection, but a sender that
        tells gets the reply. To tell it apart, reply from `defer` and check the returned ids are in
        `unconfirmed_ids()` (a rejected one has left it), or reply from persist_and_deliver's handler (not called).
        """
        if self._recovery_running:
            raise RuntimeError("DurableDelivery replays its own deliveries; do not call deliver during replay")
        if self._confirm_follows is not None:
            self._refuse_deliver()
        if self._in_write_handler:
            self._refuse_deliver_after_write()
        check_destination(destination)
        if len(self._unconfirmed) >= self.max_unconfirmed_messages:
            self._too_many_unconfirmed()
        self._delivery_seq += 1
        self._delivered += 1
        delivery_id = self._delivery_seq
        d = self._unconfirmed[delivery_id] = _Delivery(destination, id_to_message(delivery_id), _UNSENT, 0)
        if not self._journaling:
            self._start_journaling()
        self._unjournaled.append((delivery_id, d, self.sender))
        return delivery_id

    def _refuse_deliver_after_write(self) -> NoReturn:
        """Raise IllegalStateError for a deliver() from a persist handler (or a deferral behind one), naming the safe
        ways."""
        raise IllegalStateError(
            f"deliver() from a persist handler of {type(self).__name__} (a DurableDelivery), or from a defer handler "
            "queued behind a persist (it runs once the event is durable): use "
            "persist_and_deliver(event, [(destination, id_to_message), ...], handler) in the command instead (a relay: "
            "apply_and_forward), which writes the event and its deliveries together. Here the event is durable already "
            "and the delivery would be journaled in a later write: lost for good if that write failed or the host died "
            "in between (DurableDelivery's replay restores its own deliveries, not those your events imply). Or, Akka's "
            "way, subclass AtLeastOnceDelivery and deliver() from the event's handler in receive_recover too")

    def persist_and_deliver(self, event: object, deliveries: Sequence[tuple[str, Callable[[int], object]]],
                            handler: Callable[[Any], object], asynchronous: bool = False) -> list[int]:
        """Persist `event` and deliver `id_to_message(delivery_id)` to each `destination` of `deliveries` in one atomic
        write; once it is durable, send them (until confirmed) and call `handler(event)`. Returns the delivery ids.

        A failed write (the actor stops) or a crash before it stores neither; a journal that rejects the event or a
        message stores neither (both reported, `handler` not called). Commands wait for `handler`, as for `persist`
        (with `asynchronous`, as for `persist_async`, they keep flowing).
        """
        if self._recovery_running:
            raise IllegalStateError("Cannot persist during replay. Events can be persisted when receiving "
                                    "RecoveryCompleted or later.")
        if not deliveries:
            self._queue_write((event,), handler, not asynchronous)
            return []
        sent = self._deliveries_to_journal(deliveries)

        def stored(payload: object) -> None:
            # Once per event of the write, in order: the deliveries first (sent now), then the event.
            if payload is sent:
                self._on_sent(sent)
            else:
                handler(payload)

        self._queue_write((sent, event), stored, not asynchronous)
        return list(sent.delivery_ids)

    def _deliveries_to_journal(self, deliveries: Sequence[tuple[str, Callable[[int], object]]]) -> DeliveriesSent:
        """deliver() for a caller that journals the deliveries itself, in one AtomicWrite with its own event
        (persist_and_deliver, IdempotentReceiver.apply_and_forward): numbered and unconfirmed now, sent by
        `_on_sent(event)` once stored. Nothing is numbered if a destination or a message fails."""
        if self._confirm_follows is not None:
            self._refuse_deliver()
        for pair in deliveries:
            if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and callable(pair[1])):
                raise TypeError(f"{type(self).__name__}: each delivery is a (destination, id_to_message) pair, e.g. "
                                f"[('/user/sink', lambda delivery_id: Forward(delivery_id, payload))], got {pair!r}")
            check_destination(pair[0])
        n = len(deliveries)
        if len(self._unconfirmed) + n > self.max_unconfirmed_messages:
            self._too_many_unconfirmed()
        first = self._delivery_seq + 1
        ids = tuple(range(first, first + n))
        messages = tuple([id_to_message(i) for i, (_, id_to_message) in zip(ids, deliveries, strict=True)])
        destinations = tuple([destination for destination, _ in deliveries])
        self._delivery_seq += n
        self._delivered += n
        unconfirmed = self._unconfirmed
        for i, destination, message in zip(ids, destinations, messages, strict=True):
            unconfirmed[i] = _Delivery(destination, message, _UNSENT, 0)
        return DeliveriesSent(ids, same_or_each(destinations), messages)

    def deliver_many(self, delivery_ids: Sequence[int], destinations: Sequence[str], messages: Sequence[object],
                     send: Callable[[], None] | None = None) -> None:
        """Not for DurableDelivery, which numbers and journals its deliveries itself: call deliver() per message."""
        raise TypeError(f"{type(self).__name__} is a DurableDelivery: it numbers and journals its own deliveries, "
                        "so deliver_many (caller-numbered, journaled by the caller) does not apply; call deliver() "
                        "for each message (they are journaled together), or subclass AtLeastOnceDelivery")

    def set_delivery_snapshot(self, snapshot: AtLeastOnceDeliverySnapshot) -> None:
        """Replace the delivery state, during recovery only (from a SnapshotOffer: DurableDelivery's own snapshots do)."""
        if not self._recovery_running:
            self._refuse_live_state("set_delivery_snapshot")
        super().set_delivery_snapshot(snapshot)

    def restore_unconfirmed(self, delivery_ids: Sequence[int], destinations: Sequence[str],
                            messages: Sequence[object]) -> None:
        """Take these deliveries as unconfirmed, during recovery only (see AtLeastOnceDelivery.restore_unconfirmed)."""
        if not self._recovery_running:
            self._refuse_live_state("restore_unconfirmed")
        super().restore_unconfirmed(delivery_ids, destinations, messages)

    def _refuse_live_state(self, what: str) -> NoReturn:
        """Raise IllegalStateError for a delivery state set outside recovery, naming what to use instead."""
        # Not journaled: gone at the next restart (or back there, if a confirm it implies was), and
        # set_delivery_snapshot replaced the map, dropping the deliveries whose sent event was being written
        # (their write then durable: resent after a restart only, and never confirmed live).
        raise IllegalStateError(
            f"{what}() outside recovery on {type(self).__name__} (a DurableDelivery): its delivery state is journaled "
            "by DurableDelivery itself (and held by its snapshots), and a state set here would not be: lost at the "
            "next restart, and deliveries being journaled now would be dropped. Call deliver() for each message to "
            "send (journaled, ids numbered for you), and confirm_delivery() / confirm_deliveries() for those to drop; "
            "or subclass AtLeastOnceDelivery to keep the delivery state in your own events and snapshots")

    def get_delivery_snapshot(self) -> AtLeastOnceDeliverySnapshot:
        """The delivery state to snapshot, with the deliveries given up whose dead-letter forward is being written."""
        snap = super().get_delivery_snapshot()
        if not self._dead_lettering:
            return snap
        # (Unconfirmed until their forward is durable: the forward, in flight, is after the snapshot's sequence nr,
        # and if it is rejected the delivery is unconfirmed again, with no event after the snapshot to restore it.)
        given_up = [UnconfirmedDelivery(i, d.destination, d.message) for i, d, _ in self._dead_lettering.values()]
        return AtLeastOnceDeliverySnapshot(snap.current_delivery_id, tuple(
            sorted((*snap.unconfirmed_deliveries, *given_up), key=lambda u: u.delivery_id)))

    def confirm_deliveries(self, delivery_ids: Sequence[int]) -> list[Any]:
        """Confirm many deliveries, journaled as one event; per id its message (None: not unconfirmed)."""
        get = self._unconfirmed.get
        found = [get(i, _GONE).message for i in delivery_ids]
        self._confirm_many(delivery_ids)
        return found

    def confirm_delivery(self, delivery_id: int) -> bool:
        """Confirm and journal it; True the first time."""
        if not super().confirm_delivery(delivery_id):
            return False
        if not self._recovery_running:
            if not self._journaling:
                self._start_journaling()
            self._confirmed_ids.append(delivery_id)
            self._confirmed_by.append(self.sender)
        return True

    def confirm_deliveries_up_to(self, delivery_id: int, destination: str | None = None) -> int:
        """Cumulative confirm (of the deliveries to `destination` only, if given), journaled as one event."""
        if destination is not None:
            # (journaled as the ids it confirmed: DeliveriesConfirmed.up_to covers every destination)
            ids = self.unconfirmed_up_to(delivery_id, destination)
            self._confirm_many(ids)
            return len(ids)
        n = super().confirm_deliveries_up_to(delivery_id)
        if n and not self._recovery_running:
            if not self._journaling:
                self._start_journaling()
            # Journaled as at most the newest id now: the round's DeliveriesSent is replayed before its
            # DeliveriesConfirmed, so an up_to above it would also confirm, on replay, a delivery made after this
            # call in the same round (a higher id, unconfirmed live): after a restart it was never redelivered.
            up_to = min(delivery_id, self._delivery_seq)
            if up_to > self._confirmed_up_to:
                self._confirmed_up_to, self._up_to_by = up_to, self.sender
        return n

    def _confirm_many(self, delivery_ids: Sequence[int]) -> None:
        if type(self).confirm_delivery is not DurableDelivery.confirm_delivery:
            for delivery_id in delivery_ids:  # a subclass hooks into confirm_delivery: call it for each
                self.confirm_delivery(delivery_id)
            return
        pop = self._unconfirmed.pop
        done = [i for i in delivery_ids if pop(i, None) is not None]
        if done:
            if not self._unconfirmed:
                self._stop_timer()
            if not self._recovery_running:
                if not self._journaling:
                    self._start_journaling()
                self._confirmed_ids.extend(done)
                self._confirmed_by.extend([self.sender] * len(done))

    def redeliver_now(self, delivery_id: int) -> bool:
        """Resend `delivery_id` at once; one whose sent event is not durable yet goes out when it is."""
        d = self._unconfirmed.get(delivery_id)
        if d is not None and d.timestamp == _UNSENT and not self._recovery_running:
            return True
        return super().redeliver_now(delivery_id)

    # ---- journaling the compact events ----------------------------------------------------------
    def _start_journaling(self) -> None:
        """The first delivery or confirm of a round: journal the round's before the next write or commit."""
        self._journaling = True
        self._contribute(self._journal_deliveries)

    def _journal_deliveries(self) -> None:
        """Queue what was delivered and confirmed since the last call as (at most) two events."""
        self._journaling = False
        pending = self._unjournaled
        if pending:
            self._unjournaled = []
            sent = DeliveriesSent(tuple([i for i, _, _ in pending]),
                                  same_or_each(tuple([d.destination for _, d, _ in pending])),
                                  tuple([d.message for _, d, _ in pending]))
            senders = [s for _, _, s in pending]
            first = senders[0]
            if senders.count(first) != len(senders):
                # Commands of several senders delivered this round: a rejection (split per delivery) or a failure of
                # the write is reported to each command's own sender, not to whichever was current at the flush.
                if self._senders_of is None:
                    self._senders_of = {}
                self._senders_of[sent.delivery_ids[0]] = tuple(senders)
            self._queue_own(first, sent, self._on_sent)
        if self._confirmed_ids or self._confirmed_up_to:
            event = DeliveriesConfirmed(tuple(self._confirmed_ids), self._confirmed_up_to)
            confirmers = self._confirmed_by  # (one per item of the event, in DeliveriesConfirmed.singles() order)
            if event.up_to:
                confirmers.append(self._up_to_by)
            self._confirmed_ids, self._confirmed_by, self._confirmed_up_to, self._up_to_by = [], [], 0, None
            # Under the sender of the command that confirmed, not whichever is current at the flush (at the group
            # commit: the round's last message's), which a failure or a rejection of the write was reported to.
            first = confirmers[0]
            self._queue_own(first, event, self._on_confirmed)
            if confirmers.count(first) != len(confirmers):
                if self._confirmers_of is None:
                    self._confirmers_of = {}
                self._confirmers_of[self._seq_alloc] = tuple(confirmers)  # (the event's sequence nr)

    def _queue_own(self, sender: str | None, event: object, handler: Callable[[Any], object]) -> None:
        """Queue one of this mixin's events as written for `sender` (its rejection or failure is reported there)."""
        current, self.sender = self.sender, sender
        try:
            super()._queue_write((event,), handler, False)  # (not a write of the user's: a deferral behind it may deliver)
        finally:
            self.sender = current

    def _on_sent(self, event: DeliveriesSent) -> None:
        # Durable now: send each delivery once (a confirm may already have removed it).
        if self._senders_of:
            self._senders_of.pop(event.delivery_ids[0], None)
        unconfirmed, route, me = self._unconfirmed, self.context.route, self.path
        now = time.monotonic()
        sent = False
        for delivery_id in event.delivery_ids:
            d = unconfirmed.get(delivery_id)
            if d is not None and d.attempt == 0:
                route(me, d.destination, d.message)
                d.timestamp = now
                d.attempt = 1
                sent = True
        if sent:
            self._ensure_timer()
        if self._dead_lettering:
            for delivery_id in event.delivery_ids:
                given_up = self._dead_lettering.pop(delivery_id, None)
                if given_up is not None:  # its dead-letter forward is durable: the given-up delivery is confirmed now
                    self._confirm_given_up(*given_up)

    def _confirm_given_up(self, delivery_id: int, d: _Delivery, sender: str | None) -> None:
        """Journal the confirm of `delivery_id`, given up (removed already), as a confirm of `sender`'s command."""
        current, self.sender = self.sender, sender
        try:
            self._unconfirmed[delivery_id] = d  # (confirm_delivery journals the removal of an unconfirmed one, and a
            self.confirm_delivery(delivery_id)  # subclass hooking it sees it)
        finally:
            self.sender = current

    def _on_confirmed(self, _: DeliveriesConfirmed) -> None:
        # Durable now (its handler runs with last_sequence_nr at its event).
        if self._confirmers_of:
            self._confirmers_of.pop(self.last_sequence_nr, None)

    def _on_write_results(self, batch: list[_Entry], results: WriteResults) -> None:
        if isinstance(results, list) and any(r is not None for r in results):  # rejections are rare
            batch, results = split_rejected(self, batch, results, self._compact_requeues())
            for entry, result in zip([e for e in batch if e.atomic is not None], results, strict=True):
                event = cast(AtomicWrite, entry.atomic).payload[0].payload  # (only entries with a write)
                if result is not None and type(event) is DeliveriesSent:
                    for delivery_id in event.delivery_ids:  # (one, or those of a persist_and_deliver)
                        self._unconfirmed.pop(delivery_id, None)
                        if self._dead_lettering and delivery_id in self._dead_lettering:
                            self._dead_letter_rejected(delivery_id, result)
        super()._on_write_results(batch, results)

    def _dead_letter_rejected(self, forward_id: int, cause: BaseException) -> None:
        """The journal rejected the dead-letter forward `forward_id` of a delivery given up: the delivery is unconfirmed
        again (given up, and forwarded, again once overdue), never confirmed with its forward lost; and it is said."""
        delivery_id, d, _ = cast("dict[int, tuple[int, _Delivery, str | None]]", self._dead_lettering).pop(forward_id)
        d.timestamp = time.monotonic()  # (tried again a redeliver interval from now, not at once at every tick)
        self._unconfirmed[delivery_id] = d
        self._sort_unconfirmed()
        self._ensure_timer()
        self.context.report_error(self.path, (
            f"the dead-letter forward of delivery {delivery_id} (to {d.destination}, given up after {d.attempt} "
            f"attempts) to {self.dead_letter_path} was rejected by the journal ({type(cause).__name__}: {cause}): the "
            "delivery stays unconfirmed and is given up and forwarded again once overdue"))

    def _askers_of(self, entry: _Entry) -> Iterable[str | None]:
        # A DeliveriesSent holds the deliveries of every command of its round (each deferring its reply behind it), a
        # DeliveriesConfirmed the confirms.
        askers = super()._askers_of(entry)
        atomic = entry.atomic
        if atomic is None or not (self._senders_of or self._confirmers_of):
            return askers
        first = atomic.payload[0]
        t = type(event := first.payload)
        if t is DeliveriesSent and self._senders_of:
            return (*askers, *self._senders_of.get(event.delivery_ids[0], ()))
        if t is DeliveriesConfirmed and self._confirmers_of:
            return (*askers, *self._confirmers_of.get(first.sequence_nr, ()))
        return askers

    def _compact_requeues(self) -> dict[type, Callable[[_Entry], None]]:
        """The requeue of each compact event type of this actor's mixins (see compact.split_rejected)."""
        requeues = inherited_requeues(super())
        requeues[DeliveriesSent] = self._requeue_deliveries
        requeues[DeliveriesConfirmed] = self._requeue_confirms
        return requeues

    def _requeue_confirms(self, entry: _Entry) -> None:
        # Each confirmation again as an event of its own, under the sender of the command that confirmed it: only those
        # the journal cannot store are rejected (each reported to its confirmer); the others are durable (rejected
        # with them, a restart resent what was confirmed). (Replayed after the round's DeliveriesSent still: an up_to
        # covers no id above the newest at its call.)
        first = cast(AtomicWrite, entry.atomic).payload[0]
        senders = self._confirmers_of.pop(first.sequence_nr, None) if self._confirmers_of else None
        for k, item in enumerate(cast(DeliveriesConfirmed, first.payload).singles()):
            self._queue_own(senders[k] if senders else entry.sender, item, self._on_confirmed)

    def _requeue_deliveries(self, entry: _Entry) -> None:
        # Only the deliveries that cannot be stored are rejected (and given up: never sent). (A name of its own:
        # in an actor that is also an IdempotentReceiver, a shared name resolved to one mixin's method for both.)
        event = cast(AtomicWrite, entry.atomic).payload[0].payload
        # Each delivery again under the sender of the command that delivered it (see _journal_deliveries).
        senders = self._senders_of.pop(event.delivery_ids[0], None) if self._senders_of else None
        for k, (delivery_id, destination, message) in enumerate(event.entries()):
            if delivery_id in self._unconfirmed:
                self._queue_own(senders[k] if senders else entry.sender,
                                DeliveriesSent((delivery_id,), (destination,), (message,)), self._on_sent)

    # ---- deletes: the events deleted are the delivery state ------------------------------------------
    def delete_messages(self, to_sequence_nr: int) -> None:
        """Delete events up to `to_sequence_nr` (PersistentActor.delete_messages; MAX_SEQUENCE_NR: up to
        last_sequence_nr), once the delivery state they hold is journaled after them (DeliveriesKept): a restart
        then neither loses an unconfirmed delivery nor gives a new one an id used already. The reply arrives as a
        command; a journal that rejects that state deletes nothing (DeleteMessagesFailure)."""
        if self._recovery_running or not self._delivery_seq or (
                to_sequence_nr != MAX_SEQUENCE_NR and to_sequence_nr > self.last_sequence_nr):
            super().delete_messages(to_sequence_nr)  # (nothing delivered yet, or its error: as PersistentActor's)
            return
        # Bounded at the handled events: one durable meanwhile (a delivery whose sent event is in flight: not in the
        # state kept, which get_delivery_snapshot leaves out) is kept.
        to = min(to_sequence_nr, self.last_sequence_nr)
        delete = super().delete_messages
        # (Deleted only once the state is durable: a crash or a failed write in between deletes nothing.)
        self._queue_own(self.sender, DeliveriesKept(self.get_delivery_snapshot(), to), lambda _: delete(to))

    def _event_rejected(self, event: object) -> None:
        if type(event) is DeliveriesKept:
            self._tell_failure(DeleteMessagesFailure(RuntimeError(
                f"the journal rejected the delivery state of {type(self).__name__} journaled before deleting events up "
                f"to {event.to_sequence_nr}: nothing was deleted (the deleted events would have taken its unconfirmed "
                "deliveries and delivery ids with them)"), event.to_sequence_nr))
        super()._event_rejected(event)

    # ---- deferrals behind a write: deliver() there is refused, as in a persist handler ----------------
    def _queue_write(self, events: tuple[object, ...], handler: Callable[[Any], object], stashing: bool) -> None:
        self._wrote = True  # (every write but this mixin's own events, which call super()'s; persist_applied marks its own)
        super()._queue_write(events, handler, stashing)

    def _take_batch(self) -> list[_Entry]:
        batch = super()._take_batch()
        # Taken before the host's next message: a mark left by a receive_batch override's own writes (no mixin_command
        # around them), by a persist handler's or by the flushes above refuses nothing in a later command or batch.
        self._wrote = False
        return batch

    def _queue_defer(self, event: object, handler: Callable[[Any], object], stashing: bool) -> None:
        """Queue a deferral whose handler, if it waits for a write of the user's queued by the same command or
        handler (or runs inside a persist handler's wait), refuses deliver() as a persist handler does."""
        if self._contributors:
            self._before_commit()  # (the round's deliveries are queued first, as they were called first)
        if self._pending and not self._recovery_running:  # (nothing pending: it runs at once, as a command)
            handler = self._deferral(handler, self._in_write_handler or self._wrote)
        super()._queue_defer(event, handler, stashing)

    def _deferral(self, handler: Callable[[Any], object], after_write: bool) -> Callable[[Any], object]:
        """`handler`, run as a deferral: deliver() in it is refused if it runs `after_write` (an event is durable
        that the delivery would be journaled after), and the writes it queues are its own."""
        def deferred(event: object) -> object:
            # Queued behind a persist, a deferral runs once its event is durable and acknowledged by its handler:
            # a delivery journaled now is written after that event (lost for good if this write fails or the host
            # dies first; measured: 4 of 4 deliveries of 2 acknowledged orders with a failing write). One queued
            # behind deliveries only has nothing acknowledged that the delivery could be lost behind.
            outer, outer_wrote = self._in_write_handler, self._wrote
            self._in_write_handler, self._wrote = after_write, False
            try:
                return handler(event)
            finally:
                self._in_write_handler, self._wrote = outer, outer_wrote
        return deferred

    # ---- commands and recovery ------------------------------------------------------------------
    def mixin_command(self, message: Any, sender: str | None) -> None:
        # A new command: a deferral it queues is behind a write of its own only if it persists. Restored after it: a
        # receive_batch override that hands it over keeps the mark of its own writes (those of its deferrals).
        outer, self._wrote = self._wrote, False
        try:
            self._durable_command(message, sender)
        finally:
            self._wrote = outer

    def _durable_command(self, message: Any, sender: str | None) -> None:
        t = type(message)
        if t is ConfirmDeliveries:
            self._confirm_many(message.delivery_ids)
        elif t is Confirm:
            self.confirm_delivery(message.delivery_id)
            if message.settle_for and sender is not None:
                self._answer_settled(message.settle_for, sender)
        elif t is ConfirmUpTo:
            # A destination's cumulative confirm covers what was delivered to it (RabbitMQ's multiple=true covers
            # its channel's deliveries): the ids of other destinations below it stay unconfirmed.
            if sender is None:
                self.context.dead_letter(sender, self.path, message, "a ConfirmUpTo confirms the deliveries to its "
                                         "sender's path, and this one has no sender: send it from the destination")
            else:
                self.confirm_deliveries_up_to(message.delivery_id, sender)
        else:
            super().mixin_command(message, sender)

    def settled_low(self) -> int:
        """The settled watermark: no id <= it will be delivered again (each is confirmed or was never used: ids
        are numbered upwards, and the lowest unconfirmed one bounds it)."""
        low = min(self._unconfirmed, default=self._delivery_seq + 1)
        if self._dead_lettering:  # (given up, their confirm not journaled until their forward is: not settled yet)
            low = min(low, *[delivery_id for delivery_id, _, _ in self._dead_lettering.values()])
        return low - 1

    def _answer_settled(self, origin: str, receiver: str) -> None:
        """Tell `receiver` the settled watermark once the confirms made so far are durable: a confirm that a crash
        lost would have the id redelivered, to a receiver that took it as seen."""
        settled = Settled(origin, self.settled_low())
        self.defer_async(settled, lambda s: self.tell(receiver, s))

    def mixin_tags(self, stored: object) -> frozenset[str]:
        if type(stored) in _DELIVERY_EVENTS:  # (Reprise's bookkeeping, not an event of the user's)
            return frozenset()
        return super().mixin_tags(stored)

    def mixin_recover_event(self, event: Any) -> None:
        if type(event) in _DELIVERY_EVENTS:
            self._recover_delivery_event(event)
        else:
            super().mixin_recover_event(event)

    def _on_replay_success(self) -> None:
        # A partial recovery (Recovery.none(), to_sequence_nr, replay_max) stopped short of the journal's end: the
        # delivery events after it are the delivery state too. Without them the id counter was too low (a new
        # delivery took an id used already, which a receiver's dedup drops as a duplicate: lost) and the deliveries
        # journaled there were never resent.
        if self._replayed_to < self.last_sequence_nr:
            for event in self.read_events(self._replayed_to + 1, self.last_sequence_nr):
                if type(event) in _DELIVERY_EVENTS:
                    self._recover_delivery_event(event)
        super()._on_replay_success()

    def _recover_delivery_event(self, event: Any) -> None:
        """Replay one of DurableDelivery's own events into the delivery state."""
        t = type(event)
        if t is DeliveriesSent:
            back = time.monotonic() - self._interval(0)
            unconfirmed = self._unconfirmed
            if event.delivery_ids[0] <= self._delivery_seq:
                self._unsorted = True  # (a rejected round requeued behind a later one: sorted at the end of replay)
            for delivery_id, destination, message in event.entries():
                unconfirmed[delivery_id] = _Delivery(destination, message, back, 0)
            self._delivery_seq = max(self._delivery_seq, event.delivery_ids[-1])
        elif t is DeliveriesConfirmed:
            if event.up_to:
                super().confirm_deliveries_up_to(event.up_to)
            pop = self._unconfirmed.pop
            for delivery_id in event.delivery_ids:
                pop(delivery_id, None)
        elif t is DeliveriesKept:
            snap = event.delivery
            self._delivery_seq = max(self._delivery_seq, snap.current_delivery_id)
            back = time.monotonic() - self._interval(0)
            unconfirmed = self._unconfirmed
            for u in snap.unconfirmed_deliveries:  # (each unconfirmed when it was journaled: a confirm follows it)
                if u.delivery_id not in unconfirmed:
                    unconfirmed[u.delivery_id] = _Delivery(u.destination, u.message, back, 0)
            # Ascending ids, as Akka's bursts resend them: a delivery whose sent event was in flight at the delete
            # (a higher id) is replayed before this state. (Sorted once, at the end of replay.)
            self._unsorted = True
        elif t is DeliverySent:
            if event.delivery_id <= self._delivery_seq:
                self._unsorted = True
            self._delivery_seq = max(self._delivery_seq, event.delivery_id)
            self._unconfirmed[event.delivery_id] = _Delivery(
                event.destination, event.message, time.monotonic() - self._interval(0), 0)
        elif t is DeliveryConfirmed:
            if event.up_to:
                super().confirm_deliveries_up_to(event.delivery_id)
            else:
                super().confirm_delivery(event.delivery_id)

    def mixin_recover_snapshot(self, offer: SnapshotOffer) -> None:
        snap = offer.snapshot
        if isinstance(snap, DurableSnapshot):
            self.set_delivery_snapshot(snap.delivery)
            offer = SnapshotOffer(offer.metadata, snap.state)
        super().mixin_recover_snapshot(offer)

    def mixin_wrap_snapshot(self, snapshot: object) -> object:
        return DurableSnapshot(self.get_delivery_snapshot(), super().mixin_wrap_snapshot(snapshot))

    def _exhausted(self, delivery_id: int, d: _Delivery) -> None:
        # Journal the removal as a confirmation, or a restart would redeliver (and dead-letter) it again; with a
        # dead-letter forward, only once that is durable: journaled in this round beside it, the confirm was stored
        # when the journal rejected the forward, and the message was lost.
        delivery = UnconfirmedDelivery(delivery_id, d.destination, d.message)
        forward_id = self.deliver_to_dead_letters(delivery, d.attempt)
        forward = self._unconfirmed.get(forward_id) if forward_id is not None else None
        if forward is not None and forward.timestamp == _UNSENT:
            if self._dead_lettering is None:
                self._dead_lettering = {}
            self._dead_lettering[cast(int, forward_id)] = (delivery_id, d, self.sender)
        else:  # (no dead_letter_path: given up for good)
            self._confirm_given_up(delivery_id, d, self.sender)
        self.on_delivery_exhausted(delivery, d.attempt)


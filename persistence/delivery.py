"""AtLeastOnceDelivery: Akka's ALOD (reference §1) plus cumulative confirms, backoff, dead-lettering, nacks."""

from __future__ import annotations

import functools
import itertools
import time
from collections.abc import Callable, KeysView, Mapping, Sequence
from itertools import repeat
from typing import Any, NoReturn

from actors import ConfigError, Timer, validate_path
from actors.actor import MAX_DELAY, MIN_INTERVAL
from persistence.messages import (
    AtLeastOnceDeliverySnapshot,
    DeadLetteredDelivery,
    MaxUnconfirmedMessagesExceeded,
    RedeliveryTick,
    UnconfirmedDelivery,
    UnconfirmedWarning,
)
from persistence.persistent_actor import IllegalStateError, PersistentActor, _url
from persistence.plugins import journal_for
from persistence.store_options import ALOD_DEFAULTS as _CONFIG_KEYS  # (registered and checked there)
from persistence.store_options import check_actor_setting

_TICK = RedeliveryTick()


class _Delivery:
    """One unconfirmed delivery: where, what, when last sent (monotonic s), how often by this incarnation."""

    __slots__ = ("destination", "message", "timestamp", "attempt")

    def __init__(self, destination: str, message: object, timestamp: float, attempt: int) -> None:
        self.destination = destination
        self.message = message
        self.timestamp = timestamp
        self.attempt = attempt


_GONE = _Delivery("", None, 0.0, 0)  # what confirm_deliveries finds for an id that is not unconfirmed
# The timestamp of a delivery registered but not durable yet (DurableDelivery: its sent event is being written):
# never overdue, and left out of delivery snapshots.
_UNSENT = float("inf")


def check_destination(destination: str) -> None:
    """Refuse a destination deliver() cannot send to: a wildcard (Akka's error), or a malformed path (InvalidPath),
    which would otherwise be dead-lettered on every resend, forever."""
    if type(destination) is not str:
        validate_path(destination, what="deliver's destination")  # (raises, naming the type)
    _check_path(destination)


@functools.lru_cache(maxsize=4096)  # (valid paths only: an invalid one raises, and is checked again next time)
def _check_path(destination: str) -> None:
    if "*" in destination:
        raise ValueError(f"Delivering to wildcard actor paths ({destination}) is not supported by "
                         "AtLeastOnceDelivery; introduce a mediator actor that fans out instead")
    validate_path(destination, what="deliver's destination")


class AtLeastOnceDelivery(PersistentActor):
    """A PersistentActor that redelivers messages until confirmed; persist the intent, then deliver()."""

    # Akka's defaults. The system's (or host's) `start(redeliver_interval=...)` etc. apply to an actor that does not
    # set its own (its class, a base or mixin before this one, or the instance before mixin_init): Akka's
    # akka.persistence.at-least-once-delivery.* config keys, which an actor's overrides win over.
    redeliver_interval: float = 5.0
    redelivery_burst_limit: int = 10_000
    warn_after_number_of_unconfirmed_attempts: int = 5
    max_unconfirmed_messages: int = 100_000
    """deliver() beyond it raises MaxUnconfirmedMessagesExceeded. From an event handler, check
    number_of_unconfirmed before persisting: raised while the handler replays, it fails every recovery (Akka too)."""
    # Beyond Akka.
    redelivery_backoff: tuple[float, float, float] | None = None
    """(minimum, maximum, factor): the n-th resend waits min(maximum, minimum * factor**(n-1))."""
    max_delivery_attempts: int | None = None
    """After this many transmissions a delivery is given up and dead-lettered."""
    dead_letter_path: str | None = None
    """Where exhausted deliveries go (at least once, as DeadLetteredDelivery)."""

    @classmethod
    def entities_to_wake(cls, config: Mapping[str, object], path: str) -> list[str]:
        """The ids of the entities below `path` that have events: their host recovers them when it starts, so
        that deliveries a crash or a shutdown left unconfirmed are resent without waiting for a message to the
        entity, which may never come (Akka's remember-entities, which sharded AtLeastOnceDelivery needs). Those
        with nothing to resend passivate once idle. Not done for a class whose persistence ids are not its paths."""
        if cls.persistence_id is not PersistentActor.persistence_id or not isinstance(cls.journal_url, str | None):
            return []
        prefix = f"{path}/"
        ids = journal_for(cls.journal_url or _url(config, "journal")).current_persistence_ids()
        return [pid[len(prefix):] for pid in ids if pid.startswith(prefix) and "/" not in pid[len(prefix):]]

    def mixin_init(self) -> None:
        super().mixin_init()
        self._apply_config_defaults()
        self._check_redelivery_settings()
        self._delivery_seq = 0
        # In ascending id order (Akka's SortedMap): the redelivery burst resends the oldest first. Kept so at each
        # insertion below an existing id (see _inserted); replay marks it and sorts once at its end.
        self._unconfirmed: dict[int, _Delivery] = {}
        self._unsorted = False
        self._redeliver_timer: Timer | None = None
        self._redelivered = 0  # sends of a delivery sent before, by this incarnation (for status)
        self._delivered = 0  # new deliveries (not replayed ones) by this incarnation (for status and metrics)
        self.context.watch_routes(self)

    def _apply_config_defaults(self) -> None:
        """Take the config's value of each ALOD setting the actor does not set itself (once per incarnation)."""
        config = self.config
        for name in _CONFIG_KEYS:
            value = config.get(name)
            if value is not None and name not in vars(self) and name not in _own_settings(type(self)):
                # An instance attribute: the per-message code reads self.<name> as before, and the class keeps
                # Akka's default for whoever reads it there.
                setattr(self, name, value)

    def _check_redelivery_settings(self) -> None:
        """ConfigError naming a redelivery period the tick timer cannot run at (it ticks at half of it), or a count
        below 1 (or a warning threshold below 0)."""
        backoff = self.redelivery_backoff
        for name, value in (("redeliver_interval", self.redeliver_interval),
                            ("redelivery_backoff[0]", backoff[0] if backoff else None)):
            if value is None:
                continue
            if type(value) not in (int, float) or not 2 * MIN_INTERVAL <= value <= MAX_DELAY:
                raise ConfigError(f"{type(self).__name__}.{name} must be a number of seconds from "
                                  f"{2 * MIN_INTERVAL:g} to {MAX_DELAY:g}, got {value!r}: the RedeliveryTick runs "
                                  "every half of it")
        # (A system's defaults are checked at start; an actor's own values only here. A burst limit of 0 resent
        # nothing, ever, not even what recovery restored, and said nothing.)
        for name, value, want in (
                ("redelivery_burst_limit", self.redelivery_burst_limit, "the most resends per RedeliveryTick"),
                ("max_unconfirmed_messages", self.max_unconfirmed_messages, "deliver() beyond it raises"),
                ("max_delivery_attempts", 1 if self.max_delivery_attempts is None else self.max_delivery_attempts,
                 "or None: never given up")):
            if type(value) is not int or value < 1:
                raise ConfigError(f"{type(self).__name__}.{name} must be an int of at least 1 ({want}), got "
                                  f"{getattr(self, name)!r}")
        # (warn_after_number_of_unconfirmed_attempts = -1 was taken too: a threshold no attempt count ever equals)
        check_actor_setting(type(self).__name__, "warn_after_number_of_unconfirmed_attempts",
                            self.warn_after_number_of_unconfirmed_attempts)

    # ---- the API --------------------------------------------------------------------------------
    def deliver(self, destination: str, id_to_message: Callable[[int], object]) -> int:
        """Send `id_to_message(delivery_id)` to `destination` (a path) until confirmed; returns the id."""
        if self._confirm_follows is not None:
            self._refuse_deliver()
        check_destination(destination)
        if len(self._unconfirmed) >= self.max_unconfirmed_messages:
            self._too_many_unconfirmed()
        self._delivery_seq += 1
        delivery_id = self._delivery_seq
        message = id_to_message(delivery_id)
        now = time.monotonic()
        self._delivered += not self._recovery_running
        if self._recovery_running:
            # Back-dated so that it is overdue, and resent by the burst right after replay.
            self._unconfirmed[delivery_id] = _Delivery(destination, message, now - self._interval(0), 0)
        else:
            d = self._unconfirmed[delivery_id] = _Delivery(destination, message, now, 0)
            self._send(delivery_id, d, now)
        return delivery_id

    def _too_many_unconfirmed(self) -> NoReturn:
        """Raise Akka's MaxUnconfirmedMessagesExceeded (a deliver over max_unconfirmed_messages)."""
        raise MaxUnconfirmedMessagesExceeded(
            f"Too many unconfirmed messages, maximum allowed is [{self.max_unconfirmed_messages}]")

    def deliver_many(self, delivery_ids: Sequence[int], destinations: Sequence[str], messages: Sequence[object],
                     send: Callable[[], None] | None = None) -> None:
        """Deliver `messages[k]` to `destinations[k]` as `delivery_ids[k]` until confirmed, all at once.

        The ids are the caller's (e.g. stored in its own events, so that replay gives the same ids); none may
        be unconfirmed already, and deliver() continues above the highest. Without `send` each message is
        told on its own; with it, `send()` is called once and must transmit them all itself (e.g. one
        Scatter per destination host): they count as sent now, and redelivery resends them one by one.
        During recovery nothing is sent: they are resent right after replay, as by deliver().
        """
        if self._confirm_follows is not None:
            self._refuse_deliver()
        n = _paired("deliver_many", delivery_ids, destinations, messages)
        if not n:
            return
        unconfirmed = self._unconfirmed
        before = len(unconfirmed)
        if before + n > self.max_unconfirmed_messages:
            self._too_many_unconfirmed()
        if "*" in "".join(destinations):
            raise ValueError(f"Delivering to wildcard actor paths ({[d for d in destinations if '*' in d][0]}) is not "
                             "supported by AtLeastOnceDelivery; introduce a mediator actor that fans out instead")
        now = time.monotonic()
        if self._recovery_running:
            unconfirmed.update(zip(delivery_ids, map(_Delivery, destinations, messages,
                                                     repeat(now - self._interval(0)), repeat(0)), strict=True))
        elif send is None:
            unconfirmed.update(zip(delivery_ids, map(_Delivery, destinations, messages, repeat(now), repeat(0)),
                                   strict=True))
            for delivery_id in delivery_ids:
                d = unconfirmed[delivery_id]
                self._send(delivery_id, d, now)
        else:
            unconfirmed.update(zip(delivery_ids, map(_Delivery, destinations, messages, repeat(now), repeat(1)),
                                   strict=True))
        if len(unconfirmed) != before + n:
            raise ValueError("deliver_many got delivery ids that were unconfirmed already (or one id twice): "
                             "their earlier deliveries were replaced; allocate fresh ids for every delivery")
        self._inserted(delivery_ids)
        if not self._recovery_running:
            self._delivered += n
        if send is not None and not self._recovery_running:
            send()
            self._ensure_timer()

    def _refuse_deliver(self) -> NoReturn:
        """Raise IllegalStateError for a deliver() from the handler of an apply_and_confirm, naming the safe way."""
        origin, delivery_id = self._confirm_follows or ("?", 0)
        raise IllegalStateError(
            f"deliver() from the handler of apply_and_confirm({origin!r}, {delivery_id}, ...): forward with "
            "apply_and_forward(origin, delivery_id, event, destination, id_to_message) instead, which writes the "
            "application and the delivery together and confirms once both are durable. Here the delivery would be "
            "journaled after the confirm went out: lost for good if that write failed or the host died in between (the "
            "origin's redelivery is a duplicate). For several forwards of one: apply_and_forward(origin, delivery_id, "
            "event, [(destination, id_to_message), ...])")

    def restore_unconfirmed(self, delivery_ids: Sequence[int], destinations: Sequence[str],
                            messages: Sequence[object]) -> None:
        """Take these deliveries (e.g. from a snapshot, or from events) as unconfirmed, without sending them.

        They are overdue: resent right after replay, or by the next redelivery tick. An id that is
        unconfirmed already is replaced.
        """
        if not _paired("restore_unconfirmed", delivery_ids, destinations, messages):
            return
        back = time.monotonic() - self._interval(0)
        self._unconfirmed.update(zip(delivery_ids, map(_Delivery, destinations, messages, repeat(back), repeat(0)),
                                     strict=True))
        self._inserted(delivery_ids)
        if not self._recovery_running:
            self._ensure_timer()

    def _inserted(self, delivery_ids: Sequence[int]) -> None:
        """Keep the unconfirmed deliveries in ascending id order after `delivery_ids` were added (or replaced), and
        the id counter above them."""
        seq = self._delivery_seq
        # (Ids all above the counter, ascending: appended in order, the common case. Any other: the burst walked
        # insertion order and resent them out of id order; Akka's SortedMap resends the lowest ids first.)
        if delivery_ids[0] <= seq or any(a >= b for a, b in itertools.pairwise(delivery_ids)):
            self._sort_unconfirmed()
        top = max(delivery_ids)
        if top > seq:
            self._delivery_seq = top

    def _sort_unconfirmed(self) -> None:
        """Put the unconfirmed deliveries in ascending id order (during replay: once, at its end)."""
        if self._recovery_running:
            self._unsorted = True
        else:
            self._unconfirmed = dict(sorted(self._unconfirmed.items()))

    def confirm_deliveries(self, delivery_ids: Sequence[int]) -> list[Any]:
        """Confirm many deliveries at once; returns, per id, the message delivered under it (None: not unconfirmed).

        The bulk form of confirm_delivery, which it does not call (override both to hook confirmations).
        """
        pop = self._unconfirmed.pop
        found = [pop(i, _GONE).message for i in delivery_ids]
        if not self._unconfirmed:
            self._stop_timer()
        return found

    def unconfirmed_ids(self) -> KeysView[int]:
        """The ids of the deliveries not confirmed yet, in ascending order (a live view: copy it before confirming
        while iterating)."""
        return self._unconfirmed.keys()

    def unconfirmed_up_to(self, delivery_id: int, destination: str | None = None) -> list[int]:
        """The unconfirmed ids <= `delivery_id` (only those to `destination`, if given), in ascending order."""
        # Ids are numbered across destinations: a destination's cumulative confirm, unscoped, would also confirm
        # ids of other destinations that it never saw, which then are never resent.
        if destination is None:
            return [i for i in self._unconfirmed if i <= delivery_id]
        return [i for i, d in self._unconfirmed.items() if i <= delivery_id and d.destination == destination]

    def should_redeliver(self, delivery_id: int, destination: str, message: Any) -> bool:
        """Called before each resend (not before the first send); False skips it.

        For deliveries that can no longer arrive (e.g. nobody serves the path anymore): confirm (or
        dead-letter) them here, or they stay overdue and are offered again at every redelivery tick.
        """
        return True

    def confirm_delivery(self, delivery_id: int) -> bool:
        """Stop redelivering `delivery_id`; True the first time, False for unknown or repeated ids."""
        if self._unconfirmed.pop(delivery_id, None) is None:
            return False
        if not self._unconfirmed:
            self._stop_timer()
        return True

    def confirm_deliveries_up_to(self, delivery_id: int, destination: str | None = None) -> int:
        """Confirm every unconfirmed id <= `delivery_id` (only those to `destination`, if given); how many."""
        done = self.unconfirmed_up_to(delivery_id, destination)
        for i in done:
            del self._unconfirmed[i]
        if done and not self._unconfirmed:
            self._stop_timer()
        return len(done)

    def redeliver_now(self, delivery_id: int) -> bool:
        """Resend `delivery_id` at once (a negative acknowledgement); False if it is not unconfirmed, if
        should_redeliver held the resend back, or if it used up max_delivery_attempts: then it is given up now (and
        dead-lettered), as the tick would (nothing was sent)."""
        d = self._unconfirmed.get(delivery_id)
        if d is None or self._recovery_running:
            return False
        max_attempts = self.max_delivery_attempts
        if max_attempts is not None and d.attempt >= max_attempts:
            # (Checked as the tick does: a nack resent past the limit, as often as the receiver nacked.)
            del self._unconfirmed[delivery_id]
            if not self._unconfirmed:
                self._stop_timer()
            self._exhausted(delivery_id, d)
            return False
        if d.attempt and not self.should_redeliver(delivery_id, d.destination, d.message):
            return False
        # Checked before the send, as the tick does: attempts only grow, so a resend here at the warning attempt
        # that skipped the check left the delivery never warned about.
        warn = d.attempt == self.warn_after_number_of_unconfirmed_attempts
        self._transmit(d, time.monotonic())
        if warn:
            self._tell_self(UnconfirmedWarning((UnconfirmedDelivery(delivery_id, d.destination, d.message),)))
        return True

    @property
    def number_of_unconfirmed(self) -> int:
        """How many deliveries are not confirmed yet."""
        return len(self._unconfirmed)

    def stats(self) -> dict[str, int]:
        """Reported by `reprise status` and the metrics: deliveries not confirmed yet, and new deliveries and
        resends since this incarnation began."""
        return {"unconfirmed": len(self._unconfirmed), "delivered": self._delivered, "redelivered": self._redelivered}

    def get_delivery_snapshot(self) -> AtLeastOnceDeliverySnapshot:
        """The delivery state, to embed in a snapshot (without the deliveries whose sent event is still being written)."""
        # A snapshot is stored at last_sequence_nr, below a delivery's sent event in flight: held in it, a delivery
        # whose write then failed (the actor stops, its client untold) would be sent by the recovered instance;
        # left out, a write that succeeds brings it back on replay (an event after the snapshot).
        return AtLeastOnceDeliverySnapshot(self._delivery_seq, tuple(
            UnconfirmedDelivery(i, d.destination, d.message) for i, d in sorted(self._unconfirmed.items())
            if d.timestamp != _UNSENT))

    def set_delivery_snapshot(self, snapshot: AtLeastOnceDeliverySnapshot) -> None:
        """Replace the delivery state (from a SnapshotOffer); entries are resent after replay (or at the next tick).

        The delivery id counter only goes up (beyond Akka, which sets it): to the snapshot's current id, or above its
        highest delivery. Called outside recovery with an older snapshot, a lowered counter gave the next deliver()
        an id used already (a receiver's dedup drops the message); in a SnapshotOffer the counter is 0 anyway, and
        in replay it is what it was when the call was made live, so replay derives the same ids."""
        back = time.monotonic() - self._interval(0)
        unconfirmed = sorted(snapshot.unconfirmed_deliveries, key=lambda u: u.delivery_id)
        self._delivery_seq = max(self._delivery_seq, snapshot.current_delivery_id,
                                 unconfirmed[-1].delivery_id if unconfirmed else 0)
        self._unconfirmed = {u.delivery_id: _Delivery(u.destination, u.message, back, 0) for u in unconfirmed}
        if not self._recovery_running:
            # No replay ends to resend them: without a timer running they would wait for a later deliver().
            if self._unconfirmed:
                self._ensure_timer()
            else:
                self._stop_timer()

    def on_delivery_exhausted(self, delivery: UnconfirmedDelivery, attempts: int) -> None:
        """Called when a delivery used up max_delivery_attempts (it was removed, and dead-lettered).

        Delivery ids are re-derived by replay, so persist the fact here, and when replaying it call
        `confirm_delivery(delivery.delivery_id)` and `deliver_to_dead_letters(delivery, attempts)`:
        otherwise every later delivery gets another id after a restart. (DurableDelivery does this itself.)
        """

    # ---- internals ------------------------------------------------------------------------------
    def _interval(self, attempt: int) -> float:
        b = self.redelivery_backoff
        if b is None:
            return self.redeliver_interval
        lo, hi, factor = b
        return min(hi, lo * factor ** max(0, attempt - 1))

    def _send(self, delivery_id: int, d: _Delivery, now: float) -> None:
        if d.attempt and not self.should_redeliver(delivery_id, d.destination, d.message):
            return
        self._transmit(d, now)

    def _transmit(self, d: _Delivery, now: float) -> None:
        self.tell(d.destination, d.message)
        d.timestamp = now
        if d.attempt:
            self._redelivered += 1
        d.attempt += 1
        self._ensure_timer()

    def _ensure_timer(self) -> None:
        """Start the RedeliveryTick if it is not running (something was just sent)."""
        t = self._redeliver_timer
        if t is None or not t.active:
            period = (self.redelivery_backoff[0] if self.redelivery_backoff else self.redeliver_interval) / 2
            self._redeliver_timer = self.schedule_repeatedly(period, _TICK)

    def _stop_timer(self) -> None:
        if self._redeliver_timer is not None:
            self._redeliver_timer.cancel()
            self._redeliver_timer = None

    def receive(self, message: object, sender: str | None) -> None:
        # The tick bypasses the stash: redelivery goes on during recovery-waiting and pending persists.
        if type(message) is RedeliveryTick:
            if sender == self.path and not self._dead:
                self._redeliver_overdue()
            elif sender != self.path:  # (another actor's: the timer is this actor's own, and user code never sees it)
                self.context.dead_letter(sender, self.path, message, "RedeliveryTick is AtLeastOnceDelivery's own "
                                         "timer message: other actors cannot send it")
            return
        super().receive(message, sender)

    def _on_replay_success(self) -> None:
        super()._on_replay_success()
        if self._unsorted:  # (restored out of id order during replay: sorted once, before the burst)
            self._unsorted = False
            self._unconfirmed = dict(sorted(self._unconfirmed.items()))
        if self._unconfirmed:
            self._redeliver_overdue()

    def _redeliver_overdue(self) -> None:
        now = time.monotonic()
        warn_at = self.warn_after_number_of_unconfirmed_attempts
        max_attempts = self.max_delivery_attempts
        limit = self.redelivery_burst_limit
        warnings: list[UnconfirmedDelivery] = []
        exhausted: list[tuple[int, _Delivery]] = []
        sent = 0
        for delivery_id, d in list(self._unconfirmed.items()):
            if sent >= limit:
                break
            if d.timestamp > now - self._interval(d.attempt):
                continue
            if max_attempts is not None and d.attempt >= max_attempts:
                exhausted.append((delivery_id, d))
                continue
            # Held back is not sent: counted against the burst limit, as many held deliveries as the limit would
            # take every tick and starve those after them; and warned about, they would be at every tick.
            if d.attempt and not self.should_redeliver(delivery_id, d.destination, d.message):
                continue
            if d.attempt == warn_at:
                warnings.append(UnconfirmedDelivery(delivery_id, d.destination, d.message))
            self._transmit(d, now)
            sent += 1
        for delivery_id, d in exhausted:
            del self._unconfirmed[delivery_id]
            self._exhausted(delivery_id, d)
        if not self._unconfirmed:
            self._stop_timer()
        if warnings:
            self._tell_self(UnconfirmedWarning(tuple(warnings)))

    def routes_lost(self, prefixes: list[str]) -> None:
        """Destination hosts died: what they had not confirmed is resent now, not a redeliver interval later.

        (Beyond Akka, whose redelivery is timer-only.) The resends reach the guardian, which holds them
        until the host is back; a delivery the dead host had handled is only seen again (receivers dedup).
        """
        if self._recovery_running or not self._unconfirmed:
            return
        exact = set(prefixes)
        below = tuple(p + "/" for p in prefixes)
        overdue = float("-inf")
        hit = False
        for d in self._unconfirmed.values():
            if d.attempt and (d.destination in exact or d.destination.startswith(below)):
                d.timestamp = overdue
                hit = True
        if hit:
            self._redeliver_overdue()

    def _exhausted(self, delivery_id: int, d: _Delivery) -> None:
        delivery = UnconfirmedDelivery(delivery_id, d.destination, d.message)
        self.deliver_to_dead_letters(delivery, d.attempt)
        self.on_delivery_exhausted(delivery, d.attempt)

    def deliver_to_dead_letters(self, delivery: UnconfirmedDelivery, attempts: int) -> int | None:
        """Deliver `delivery` as a DeadLetteredDelivery to dead_letter_path (if set); returns its delivery id."""
        if not self.dead_letter_path:
            return None
        origin = self.persistence_id
        return self.deliver(self.dead_letter_path, lambda i: DeadLetteredDelivery(
            i, delivery.delivery_id, delivery.destination, delivery.message, attempts, origin))


_own: dict[type, frozenset[str]] = {}  # per class: looked up once per incarnation, computed once


def _own_settings(cls: type) -> frozenset[str]:
    """The ALOD settings `cls` (or a class before AtLeastOnceDelivery in its MRO) sets: they win over the config's."""
    own = _own.get(cls)
    if own is None:
        mro = cls.__mro__
        before = mro[:mro.index(AtLeastOnceDelivery)]
        own = _own[cls] = frozenset(n for n in _CONFIG_KEYS if any(n in vars(c) for c in before))
    return own


def _paired(what: str, delivery_ids: Sequence[int], destinations: Sequence[str], messages: Sequence[object]) -> int:
    """How many deliveries `what` was given; ValueError unless there is one destination and message per id."""
    n = len(delivery_ids)
    if len(destinations) != n or len(messages) != n:
        raise ValueError(f"{what} needs one destination and one message per delivery id, got {n} ids, "
                         f"{len(destinations)} destinations and {len(messages)} messages")
    return n

"""AtLeastOnceDelivery: Akka's ALOD (reference §1) plus cumulative confirms, backoff, dead-lettering, nacks."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from actors import Timer
from persistence.messages import (
    AtLeastOnceDeliverySnapshot,
    DeadLetteredDelivery,
    MaxUnconfirmedMessagesExceeded,
    RedeliveryTick,
    UnconfirmedDelivery,
    UnconfirmedWarning,
)
from persistence.persistent_actor import PersistentActor

_TICK = RedeliveryTick()


class _Delivery:
    """One unconfirmed delivery: where, what, when last sent (monotonic s), how often by this incarnation."""

    __slots__ = ("destination", "message", "timestamp", "attempt")

    def __init__(self, destination: str, message: Any, timestamp: float, attempt: int) -> None:
        self.destination = destination
        self.message = message
        self.timestamp = timestamp
        self.attempt = attempt


class AtLeastOnceDelivery(PersistentActor):
    """A PersistentActor that redelivers messages until confirmed; persist the intent, then deliver()."""

    redeliver_interval: float = 5.0
    redelivery_burst_limit: int = 10_000
    warn_after_number_of_unconfirmed_attempts: int = 5
    max_unconfirmed_messages: int = 100_000
    # Beyond Akka.
    redelivery_backoff: tuple[float, float, float] | None = None
    """(minimum, maximum, factor): the n-th resend waits min(maximum, minimum * factor**(n-1))."""
    max_delivery_attempts: int | None = None
    """After this many transmissions a delivery is given up and dead-lettered."""
    dead_letter_path: str | None = None
    """Where exhausted deliveries go (at least once, as DeadLetteredDelivery)."""

    def _init_persistence(self) -> None:
        super()._init_persistence()
        self._delivery_seq = 0
        self._unconfirmed: dict[int, _Delivery] = {}
        self._redeliver_timer: Timer | None = None
        self._redelivered = 0  # sends of a delivery sent before, by this incarnation (for status)
        self.context.watch_routes(self)

    # ---- the API --------------------------------------------------------------------------------
    def deliver(self, destination: str, id_to_message: Callable[[int], Any]) -> int:
        """Send `id_to_message(delivery_id)` to `destination` (a path) until confirmed; returns the id."""
        if "*" in destination:
            raise ValueError(f"Delivering to wildcard actor paths ({destination}) is not supported by "
                             "AtLeastOnceDelivery; introduce a mediator actor that fans out instead")
        if len(self._unconfirmed) >= self.max_unconfirmed_messages:
            raise MaxUnconfirmedMessagesExceeded(
                f"Too many unconfirmed messages, maximum allowed is [{self.max_unconfirmed_messages}]")
        self._delivery_seq += 1
        delivery_id = self._delivery_seq
        message = id_to_message(delivery_id)
        now = time.monotonic()
        if self._recovery_running:
            # Back-dated so that it is overdue, and resent by the burst right after replay.
            self._unconfirmed[delivery_id] = _Delivery(destination, message, now - self._interval(0), 0)
        else:
            d = self._unconfirmed[delivery_id] = _Delivery(destination, message, now, 0)
            self._send(delivery_id, d, now)
        return delivery_id

    def confirm_delivery(self, delivery_id: int) -> bool:
        """Stop redelivering `delivery_id`; True the first time, False for unknown or repeated ids."""
        if self._unconfirmed.pop(delivery_id, None) is None:
            return False
        if not self._unconfirmed:
            self._stop_timer()
        return True

    def confirm_deliveries_up_to(self, delivery_id: int) -> int:
        """Confirm every unconfirmed id <= `delivery_id` at once; returns how many were confirmed."""
        done = [i for i in self._unconfirmed if i <= delivery_id]
        for i in done:
            del self._unconfirmed[i]
        if done and not self._unconfirmed:
            self._stop_timer()
        return len(done)

    def redeliver_now(self, delivery_id: int) -> bool:
        """Resend `delivery_id` at once (a negative acknowledgement); False if it is not unconfirmed."""
        d = self._unconfirmed.get(delivery_id)
        if d is None or self._recovery_running:
            return False
        self._send(delivery_id, d, time.monotonic())
        return True

    @property
    def number_of_unconfirmed(self) -> int:
        """How many deliveries are not confirmed yet."""
        return len(self._unconfirmed)

    def stats(self) -> dict[str, int]:
        """Reported by `reprise status`: deliveries not confirmed yet, and resends since this incarnation began."""
        return {"unconfirmed": len(self._unconfirmed), "redelivered": self._redelivered}

    def get_delivery_snapshot(self) -> AtLeastOnceDeliverySnapshot:
        """The delivery state, to embed in a snapshot."""
        return AtLeastOnceDeliverySnapshot(self._delivery_seq, tuple(
            UnconfirmedDelivery(i, d.destination, d.message) for i, d in sorted(self._unconfirmed.items())))

    def set_delivery_snapshot(self, snapshot: AtLeastOnceDeliverySnapshot) -> None:
        """Replace the delivery state (from a SnapshotOffer); entries are resent after replay."""
        back = time.monotonic() - self._interval(0)
        self._delivery_seq = snapshot.current_delivery_id
        self._unconfirmed = {u.delivery_id: _Delivery(u.destination, u.message, back, 0)
                             for u in sorted(snapshot.unconfirmed_deliveries, key=lambda u: u.delivery_id)}

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

    def receive(self, message: Any, sender: str | None) -> None:
        # The tick bypasses the stash: redelivery goes on during recovery-waiting and pending persists.
        if type(message) is RedeliveryTick and sender == self.path:
            if not self._dead:
                self._redeliver_overdue()
            return
        super().receive(message, sender)

    def _on_replay_success(self) -> None:
        super()._on_replay_success()
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
            if d.attempt == warn_at:
                warnings.append(UnconfirmedDelivery(delivery_id, d.destination, d.message))
            self._send(delivery_id, d, now)
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

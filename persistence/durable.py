"""DurableDelivery: AtLeastOnceDelivery that journals its own sent/confirmed events and snapshots."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence.delivery import AtLeastOnceDelivery, _Delivery
from persistence.messages import AtLeastOnceDeliverySnapshot, Confirm, ConfirmUpTo, SnapshotOffer


@register_type(manifest="reprise.persistence.DeliverySent")
@dataclass(frozen=True)
class DeliverySent:
    delivery_id: int
    destination: str
    message: Any


@register_type(manifest="reprise.persistence.DeliveryConfirmed")
@dataclass(frozen=True)
class DeliveryConfirmed:
    delivery_id: int
    up_to: bool = False


@register_type(manifest="reprise.persistence.DurableSnapshot")
@dataclass(frozen=True)
class DurableSnapshot:
    delivery: AtLeastOnceDeliverySnapshot
    state: Any


class DurableDelivery(AtLeastOnceDelivery):
    """deliver() persists DeliverySent before sending; Confirm/ConfirmUpTo from destinations are journaled too."""

    def deliver(self, destination: str, id_to_message: Callable[[int], Any]) -> int:
        """Journal the delivery (asynchronously: commands keep flowing), then send it until confirmed."""
        if self._recovery_running:
            raise RuntimeError("DurableDelivery replays its own deliveries; do not call deliver during replay")
        if "*" in destination:
            return super().deliver(destination, id_to_message)  # raises "not supported"
        if len(self._unconfirmed) >= self.max_unconfirmed_messages:
            return super().deliver(destination, id_to_message)  # raises MaxUnconfirmedMessagesExceeded
        self._delivery_seq += 1
        delivery_id = self._delivery_seq
        message = id_to_message(delivery_id)
        d = self._unconfirmed[delivery_id] = _Delivery(destination, message, time.monotonic(), 0)

        def sent(_: Any) -> None:
            # Sent only once the intent is durable; a confirm may already have removed it.
            if self._unconfirmed.get(delivery_id) is d and d.attempt == 0:
                self._send(delivery_id, d, time.monotonic())
        self.persist_async(DeliverySent(delivery_id, destination, message), sent)
        return delivery_id

    def confirm_delivery(self, delivery_id: int) -> bool:
        """Confirm and journal it; True the first time."""
        if not super().confirm_delivery(delivery_id):
            return False
        if not self._recovery_running:
            self.persist_async(DeliveryConfirmed(delivery_id), _ignore)
        return True

    def confirm_deliveries_up_to(self, delivery_id: int) -> int:
        """Cumulative confirm, journaled as one event."""
        n = super().confirm_deliveries_up_to(delivery_id)
        if n and not self._recovery_running:
            self.persist_async(DeliveryConfirmed(delivery_id, True), _ignore)
        return n

    def _process_command(self, message: Any, sender: str | None) -> None:
        t = type(message)
        if t is Confirm:
            self.confirm_delivery(message.delivery_id)
        elif t is ConfirmUpTo:
            self.confirm_deliveries_up_to(message.delivery_id)
        else:
            super()._process_command(message, sender)

    def _recover_event(self, event: Any) -> None:
        t = type(event)
        if t is DeliverySent:
            self._delivery_seq = max(self._delivery_seq, event.delivery_id)
            self._unconfirmed[event.delivery_id] = _Delivery(
                event.destination, event.message, time.monotonic() - self._interval(0), 0)
        elif t is DeliveryConfirmed:
            if event.up_to:
                super().confirm_deliveries_up_to(event.delivery_id)
            else:
                super().confirm_delivery(event.delivery_id)
        else:
            super()._recover_event(event)

    def _recover_snapshot(self, offer: SnapshotOffer) -> None:
        snap = offer.snapshot
        if isinstance(snap, DurableSnapshot):
            self.set_delivery_snapshot(snap.delivery)
            offer = SnapshotOffer(offer.metadata, snap.state)
        super()._recover_snapshot(offer)

    def _wrap_snapshot(self, snapshot: Any) -> Any:
        return DurableSnapshot(self.get_delivery_snapshot(), super()._wrap_snapshot(snapshot))

    def _exhausted(self, delivery_id: int, d: _Delivery) -> None:
        # Journal the removal as a confirmation, or a restart would redeliver (and dead-letter) it again.
        self._unconfirmed[delivery_id] = d
        self.confirm_delivery(delivery_id)
        super()._exhausted(delivery_id, d)


def _ignore(_: Any) -> None:
    pass

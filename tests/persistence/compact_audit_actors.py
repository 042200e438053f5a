"""Actors for the compact-event audit tests (importable by module path, as multiproc requires)."""

from __future__ import annotations

from typing import Any

from persistence import DurableDelivery, RecoveryCompleted
from tests.persistence.compact_fixtures import Parcel


class UpToShipper(DurableDelivery):
    """("deliver", dest, payload): delivers one Parcel; ("up-to-then-deliver", n, dest, payload): a cumulative
    confirm of every id <= n, then one more delivery, in one command (one group commit); "unconfirmed": the ids
    unconfirmed. Replies once what the command journaled is durable."""

    redeliver_interval = 30.0  # (no redelivery meanwhile: the test reads the unconfirmed ids, not the traffic)

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "unconfirmed":
            self.tell(sender, sorted(u.delivery_id for u in self.get_delivery_snapshot().unconfirmed_deliveries))
            return
        if message[0] == "deliver":
            _, destination, payload = message
        else:
            _, n, destination, payload = message
            self.confirm_deliveries_up_to(n)
        delivery_id = self.deliver(destination, lambda i: Parcel(i, payload))
        self.defer_async(delivery_id, lambda i: self.tell(sender, ("delivered", i)))


__all__ = ["RecoveryCompleted", "UpToShipper"]

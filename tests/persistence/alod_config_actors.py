"""Actors of tests/persistence/test_alod_config_defaults.py (importable by module path, as multiproc requires)."""

from __future__ import annotations

from typing import Any

from persistence import AtLeastOnceDelivery, MaxUnconfirmedMessagesExceeded, UnconfirmedWarning
from persistence.messages import RedeliveryTick


class Reporter(AtLeastOnceDelivery):
    """An AtLeastOnceDelivery that sets none of the four settings, and reports what it runs with.

    "settings" answers the effective (redeliver_interval, redelivery_burst_limit, warn_after, max_unconfirmed),
    "persistent-actor-settings" the system's (stash_capacity, internal_stash_overflow_strategy, recovery_event_timeout);
    ("deliver", destination, n) delivers (id, "m") n times at once (one timestamp) and answers how many it
    delivered before MaxUnconfirmedMessagesExceeded, if any; an UnconfirmedWarning goes to its destinations as
    ("warning", ids); each resend is announced to its destination as ("resend", tick, id), tick counting the
    RedeliveryTicks, so that a test sees which resends one tick made.
    """

    def mixin_init(self) -> None:
        super().mixin_init()
        self.ticks = 0

    def receive(self, message: object, sender: str | None) -> None:
        if type(message) is RedeliveryTick and sender == self.path:
            self.ticks += 1
        super().receive(message, sender)

    def should_redeliver(self, delivery_id: int, destination: str, message: Any) -> bool:
        self.tell(destination, ("resend", self.ticks, delivery_id))
        return True

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, UnconfirmedWarning):
            for destination in {u.destination for u in message.unconfirmed_deliveries}:
                self.tell(destination, ("warning", tuple(u.delivery_id for u in message.unconfirmed_deliveries)))
        elif message == "settings":
            self.tell(sender, (self.redeliver_interval, self.redelivery_burst_limit,
                               self.warn_after_number_of_unconfirmed_attempts, self.max_unconfirmed_messages))
        elif message == "persistent-actor-settings":  # (the PersistentActor settings' system defaults it runs with)
            self.tell(sender, tuple(self.config.get(key) for key in (
                "stash_capacity", "internal_stash_overflow_strategy", "recovery_event_timeout")))
        elif isinstance(message, tuple) and message[0] == "deliver":
            _, destination, n = message
            start = self.number_of_unconfirmed
            try:
                ids = list(range(start + 1, start + n + 1))
                if start + n <= self.max_unconfirmed_messages:
                    self.deliver_many(ids, [destination] * n, [(i, "m") for i in ids])
                else:
                    for _ in range(n):
                        self.deliver(destination, lambda i: (i, "m"))
            except MaxUnconfirmedMessagesExceeded as e:
                self.tell(sender, ("refused", self.number_of_unconfirmed - start, str(e)))
                return
            self.tell(sender, ("delivered", n))


class OwnSettings(Reporter):
    """Sets all four itself (one as a property): they win over the system's."""

    redeliver_interval = 0.3
    redelivery_burst_limit = 3
    max_unconfirmed_messages = 4

    @property
    def warn_after_number_of_unconfirmed_attempts(self) -> int:  # type: ignore[override]
        return 3

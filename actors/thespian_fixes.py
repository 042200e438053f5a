"""Fixes for Thespian 4.0.1 bugs that Reprise cannot work around from the outside.

Lost wakeups: when an actor's send queue grows past THESPIAN_MAX_QUEUED_TRANSMITS (950), Thespian drains
it in "tx-only mode" inside the send. A wakeup that expires during that drain is popped from the active
list and returned to the drain loop, which discards it: the timer never fires. The Spark bridge lost one
every few seconds under load (each stalled its fan-out for a second or more, until Host's re-arm check
ran). Here a wakeup is never handed to a tx-only run: it stays queued, and once the drain is over the
regular run loop is told to stop waiting and deliver it.
"""

from __future__ import annotations

from datetime import timedelta

_applied = False


def apply() -> None:
    """Patch Thespian's transports once per process (idempotent); actor processes inherit it by fork."""
    global _applied
    if _applied:
        return
    from thespian.system.timing import ExpirationTimer
    from thespian.system.transport import TransmitOnly
    from thespian.system.transport.asyncTransportBase import asyncTransportBase
    from thespian.system.transport.wakeupTransportBase import wakeupTransportBase

    original_deliver = wakeupTransportBase._deliver_wakeups
    original_drain = asyncTransportBase._drain_tx_queue_if_needed

    def deliver_wakeups(self, incoming_handler):
        if incoming_handler is TransmitOnly or isinstance(incoming_handler, TransmitOnly):
            return None  # keep them for the regular run (Thespian returned one here, and it was dropped)
        return original_deliver(self, incoming_handler)

    def drain_tx_queue_if_needed(self, max_delay=None):
        original_drain(self, max_delay)
        if getattr(self, "_activeWakeups", None):
            # The run loop that called the sender waits until run_time: end that wait now.
            self.run_time = ExpirationTimer(timedelta(seconds=0))

    wakeupTransportBase._deliver_wakeups = deliver_wakeups
    asyncTransportBase._drain_tx_queue_if_needed = drain_tx_queue_if_needed
    _applied = True

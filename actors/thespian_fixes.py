"""Fixes for Thespian 4.0.1 bugs that Reprise cannot work around from the outside.

When an actor's send queue passes THESPIAN_MAX_QUEUED_TRANSMITS (Reprise sets 128: back-pressure on
fast senders), Thespian drains it inside the send, in "tx-only mode". That mode had two bugs:

1. Lost wakeups. A wakeup expiring during the drain was handed to the drain loop, which discarded it:
   the timer never fired. The Spark bridge lost one every few seconds under load (each stalled its
   fan-out until Host's re-arm check ran).
2. Deadlock. The drain did not accept new connections. Two processes draining towards each other
   over new connections (a restarted shard and the bridge, right after the demo's SIGKILL) waited for
   each other until their transmits timed out: the feed stopped for minutes.

Here the drain is Thespian's own transmit-only steps; when one sees no send complete for 20 ms, a 1 ms
regular pass follows that accepts connections and reads and acknowledges what arrived. Every message
and wakeup met during the drain is kept and, once the drain ends, put back in front of the actor's incoming queue, in order, to
be handled as usual.
"""

from __future__ import annotations

from datetime import timedelta

_applied = False
_SEND_WAIT = timedelta(milliseconds=20)
_LISTEN = timedelta(milliseconds=1)


def apply() -> None:
    """Patch Thespian's transports once per process (idempotent); actor processes inherit it by fork."""
    global _applied
    if _applied:
        return
    from thespian.system.timing import ExpirationTimer
    from thespian.system.transport import TransmitOnly
    from thespian.system.transport import asyncTransportBase as atb
    from thespian.system.transport.wakeupTransportBase import wakeupTransportBase

    original_deliver = wakeupTransportBase._deliver_wakeups
    original_drain = atb.asyncTransportBase._drain_tx_queue_if_needed

    def deliver_wakeups(self, incoming_handler):
        if incoming_handler is TransmitOnly or isinstance(incoming_handler, TransmitOnly):
            return None  # leave them queued (Thespian handed one to the drain loop, which dropped it)
        return original_deliver(self, incoming_handler)

    def drain_tx_queue_if_needed(self, max_delay=None):
        if not hasattr(self, "_incomingEnvelopes"):  # not the TCP transport: leave it to Thespian
            return original_drain(self, max_delay)
        queued, _ = self._complete_expired_intents()
        if queued < atb.MAX_QUEUED_TRANSMITS or not self._aTB_rx_pause_enabled:
            return
        finish = ExpirationTimer(max_delay if max_delay else None)
        kept: list = []

        def keep(envelope):
            kept.append(envelope)
            return True  # go on running

        try:
            while queued > atb.QUEUE_TRANSMIT_UNBLOCK_THRESHOLD:
                with finish as remaining:
                    if remaining.expired():
                        break
                    left = remaining.remaining()
                # Thespian's own drain step: returns once a send completes, 0 when none is in flight.
                in_flight = self.run(TransmitOnly, _SEND_WAIT if left is None else min(left, _SEND_WAIT))
                if not isinstance(in_flight, int):
                    # No send completed for a while: maybe a peer drains towards us over a connection we
                    # have not accepted. A short regular pass accepts it, reads and acknowledges what
                    # arrived, and takes due wakeups; all of it is kept. (Only then: reading while sends
                    # flow would take away the back-pressure the drain puts on senders.)
                    self.run(keep, _LISTEN)
                elif in_flight == 0:
                    break  # nothing in flight: the sender may queue more now (as Thespian's drain does)
                queued, _ = self._complete_expired_intents()
        finally:
            # The regular pass took them from the front of this same list: they go back there, in order.
            self._incomingEnvelopes[:0] = kept

    wakeupTransportBase._deliver_wakeups = deliver_wakeups
    atb.asyncTransportBase._drain_tx_queue_if_needed = drain_tx_queue_if_needed
    _applied = True

"""Make this process's Thespian transport meet a retry on purpose, as under load it does by itself.

Thespian's TCP transport retries a send whose connection both ends wrote on at once and then closed without an
ACK (kquick#19); meanwhile later sends to the same target go on. Under load that happened in CI now and then;
here it happens to the first send of a chosen message type, every time.
"""

from __future__ import annotations

from datetime import timedelta

from thespian.system.timing import ExpirationTimer
from thespian.system.transport.TCPTransport import TCPTransport

_held: dict[type, list[object]] = {}  # message type -> the intents held back (the first send of each)
_original = TCPTransport._scheduleTransmitActual


def retry_first_send(message_type: type, after: float | None = None) -> list[object]:
    """Hold this process's first send of a `message_type` back for its retry: `after` s, or the send's own retry
    period. Returns the list of intents held back (one once it happened), for a test to check it did."""
    if message_type in _held:
        return _held[message_type]
    held = _held[message_type] = []
    original = TCPTransport._scheduleTransmitActual  # (the original, or the hold-back of another type)

    def schedule(self, intent, has_exclusive_flag=False):
        if isinstance(intent.message, message_type) and not held:
            held.append(intent)
            intent.stage = self._XMITStepSendConnect
            if after is None:
                intent.retry()
            else:
                intent._retryTime = ExpirationTimer(timedelta(seconds=after))
            self._waitingTransmits.append(intent)
            return None
        return original(self, intent, has_exclusive_flag)

    TCPTransport._scheduleTransmitActual = schedule
    return held


def stop_retrying() -> None:
    """Undo every retry_first_send of this process."""
    TCPTransport._scheduleTransmitActual = _original
    _held.clear()

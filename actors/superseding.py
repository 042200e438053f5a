"""Sends of which only the newest matters to the receiver: at most one under way per receiver and kind.

The guardian sends every host a DirectoryUpdate at each publish (a full snapshot of the routes, with its epoch). A
host that takes nothing (SIGSTOPped, or busy in one long handler) acknowledged none of them, and Thespian kept each,
pickled, until the host read again or its 5-minute transmit limit ran out:
1,000 publishes with one host stopped took the guardian 16.3 s instead of 2.6 s (every send to that host went
behind all the others), grew it by 1.6 MB, and the host, resumed, installed all 1,000 stale directories one by
one for 14 s before it saw the current one. Sent through here, one of a kind is under way to a host; another
sent meanwhile waits, and a newer one replaces it: the host gets the one it was handed, then the newest. Any
other message the guardian sends the host hands the waiting one over first (`flush`), so that it keeps its place:
an ActorExitRequest sent "after the new routes" (the host forwards by them until it exits) still comes after them.

Skipping a directory in between is what a host that took two updates back to back would see: it compares the
routes it had with the ones it installs (Handover.routes_changed, the route watchers), and what it sent on a route
it still had reaches the new process through the guardian as before. A failed send ends as Thespian's would (a
dead target becomes a DeadEnvelope for the guardian, which restarts a host whose process is gone unreported).
Not for GetHostStats: each status request waits for its own token's answer, which a newer one would take away.
"""

from __future__ import annotations

from typing import Any

from thespian.system.transport import TransmitIntent

from . import thespian_fixes
from .inflight import process_gone
from .thespian_types import Address, Intent


class Superseding:
    """The sends of one actor (the guardian) whose newer message of a kind replaces an older one not yet handed
    over; on the in-process base, plain sends (nothing is ever under way there)."""

    def __init__(self, actor: Any) -> None:
        # Any: a Thespian actor (untyped), whose private _myRef (its system's actor manager) is used too.
        self._actor = actor
        self._under_way: dict[tuple[str, type], Intent] = {}  # (address key, message type) -> the one handed over
        self._next: dict[tuple[str, type], object] = {}  # the newest sent meanwhile, handed over when that ends

    def send(self, address: Address, message: object) -> None:
        """Send `message` to `address`, or, while one of its type is under way there, keep it as the next one."""
        manager = self._actor._myRef
        if getattr(manager, "_send_intent", None) is None:
            self._actor.send(address, message)
            return
        key = (str(address), type(message))
        current = self._under_way.get(key)
        if current is not None and thespian_fixes.under_way(manager.transport, current):
            self._next[key] = message
            return
        # (an intent Thespian dropped without calling it back, TCPTransport._nextTransmitStep, ends here)
        self._hand_over(key, address, message)

    def flush(self, address: Address | None) -> None:
        """Hand over now what waits for `address` (behind the one under way): called before any other message to it,
        so that nothing sent after a publish overtakes the routes it published (Thespian keeps one destination's
        sends in order)."""
        if self._next and address is not None:
            for key in [k for k in self._next if k[0] == str(address)]:
                self._hand_over(key, address, self._next.pop(key))

    def waiting(self) -> int:
        """How many messages wait for one of their kind to end (one at most per receiver and kind)."""
        return len(self._next)

    def _hand_over(self, key: tuple[str, type], address: Address, message: object) -> None:
        intent = TransmitIntent(address, message, onSuccess=self._ended, onError=self._failed)
        self._under_way[key] = intent
        self._actor._myRef._send_intent(intent)

    def _failed(self, result: object, intent: Intent) -> None:
        self._actor._myRef.actor_send_fail(result, intent)  # (what Thespian does for a failed plain send)
        self._ended(result, intent, gone=process_gone(result))

    def _ended(self, result: object, intent: Intent, gone: bool = False) -> None:
        """(A transport callback: hands the next one over through _send_intent, as Thespian's own callbacks do.)"""
        key = (str(intent.targetAddr), type(intent.message))
        if self._under_way.get(key) is not intent:
            return
        del self._under_way[key]
        message = self._next.pop(key, None)
        if message is not None and not gone:  # (to a process gone, it would only fail the same way)
            self._hand_over(key, intent.targetAddr, message)

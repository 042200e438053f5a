"""Batches an actor sent, per destination address, until each has landed or bounced, settled in send order.

Thespian tells an actor nothing about a send that succeeded, and relays one to a dead process through the
dead-letter handler, a way that later messages overtook: batches sent by the guardian or a host just before
their target was SIGKILLed came back *after* what was sent to the target's new process, and the per sender
FIFO promise broke (found by the torture harness). Sent through here instead, every batch reports how it
ended, and the reports are handed over in the order the batches were sent, whatever order the transport
noticed them in (a refused connection is noticed before a reset one).

Only the oldest batch per address is handed to Thespian; the next one goes when it settles, with the batches
queued behind it merged into it (one Thespian message, one acknowledgement; each still settles on its own). Thespian's TCP
transport lets a newer send to a target overtake one that waits for its retry (a connection both ends wrote
on at once, closed without an ACK: the maintainer's "can be re-ordered", kquick#19). Two hosts sending to
each other at once saw 3 of 6,000 messages out of order that way (in every run of tests/actors/test_batching.py::
test_two_hosts_flooding_each_other_keep_both_streams_in_order; 20,000 each way did not finish in 40 s). Thespian
sends one message per target at a time anyway, so waiting here costs nothing: the settle callback hands
the next batch over on the connection the last one just freed.

Why merge: a busy receiver acknowledges a message when its loop next reads the socket, and the sender hands
over the next when its own loop next sees that acknowledgement, so one batch went out per ~10 ms cycle while up
to 17 waited behind it and the receivers idled (two FeedTable shards fed by one bridge, bench/PROFILE.md §30,
§31). Merged, the receiver takes everything that waited in one turn (and one group commit).
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from datetime import timedelta
from typing import Any, cast

from thespian.system.transport import SendStatus, TransmitIntent

from .messages import Batch
from .thespian_types import Address, Intent
from .transport import Entry, unpack

log = logging.getLogger("reprise.inflight")

SEND_RETRY = timedelta(seconds=0.25)
"""Thespian retries a connection closed before its ACK (the target SIGKILLed) after 35 s x attempt by default:
everything parked behind that batch would wait that long."""

LANDED, BOUNCED, FAILED = "landed", "bounced", "failed"
"""How a batch ended: acknowledged by its target's process (or, when nothing can reroute it, bounced by a gone
process, which Thespian reports as a dead letter); refused because that process is gone (the caller reroutes
it; see process_gone); or not taken by a live one within Thespian's retries (a connection it closed unread, an
acknowledgement that never came), which Thespian reports to nobody: the caller makes it a dead letter."""


MERGE_BATCHES = 64
"""At most this many queued batches go out as one Thespian message..."""
MERGE_ENTRIES = 2000
"""...holding at most as many entries as a full batch of the default `batch_cap` (unless the first alone holds
more): full batches gain nothing merged, and cost a sender flooding a busy receiver 8-10% of its messages a
second (a longer turn per Thespian message makes the sender see each acknowledgement later; bench/PROFILE.md §31)..."""
MERGE_BYTES = 256 << 10
"""...and at most this many bytes of payload: a receiver takes a merged batch in one turn, and its sender's
retries resend all of it."""


def not_taken(intent: Intent, on_bad: Callable[[Entry, str], None], who: str) -> tuple[list[Entry], str]:
    """The entries of a batch that settled FAILED, and the reason for their dead letters (none, logged, for a
    message that is not a Batch: Thespian's and Reprise's control messages)."""
    where = str(intent.targetAddr)
    if not isinstance(intent.message, Batch):
        log.warning("%s: a %s to %s was not delivered (the receiver took no message within Thespian's retries)",
                    who, type(intent.message).__name__, where)
        return [], ""
    return unpack(intent.message, on_bad), (
        f"not delivered: the process at {where} took no message within Thespian's retries (it refused the "
        "connection, e.g. a client whose machine is not among the peers, or did not answer); not retried")


def process_gone(result: object) -> bool:
    """Whether a send failed because no process of this system is at its address any more: it is gone, or
    another system's process took its port and refused the frame unread (Thespian's data-error ACK: it is
    not signed with that system's secret; seen in CI with two suites side by side)."""
    return result is SendStatus.DeadTarget or result is SendStatus.BadPacket


class InFlight:
    """One actor's batches in flight; `on_settled(intent, how)` is called for each, in send order per address,
    and each batch goes to the transport only after the one before it to that address has settled.

    `on_settled` runs inside a transport callback: it must not send through the actor's own `send` (queue
    the work, or use `send_intent`), since Thespian may be in the middle of a send.
    """

    def __init__(self, actor: Any, on_settled: Callable[[Intent, str], None]) -> None:
        # Any: a Thespian actor (untyped), whose private _myRef (its system's actor manager) is used too.
        self._actor = actor
        self._on_settled = on_settled
        self.no_bounce: Address | None = None  # sends to this address never bounce (None: to none, nothing: to all)
        # address -> [intent, outcome or None, the intents merged into it or None] in send order (a list, so
        # that the outcome can be filled in place: Any, as a list holds one type); the head of each queue is the
        # one batch handed to the transport
        self._queues: dict[str, deque[list[Any]]] = {}
        self._ready: deque[str] = deque()  # addresses whose head settled, to advance
        self._advancing = False

    @property
    def tracking(self) -> bool:
        """False on the in-process base: delivery there is a call, nothing is ever in flight."""
        return getattr(self._actor._myRef, "_send_intent", None) is not None

    def send(self, address: Address, message: object) -> None:
        """Send `message`, tracked until it settles (untracked where nothing is in flight)."""
        if not self.tracking:
            self._actor.send(address, message)
            return
        intent = TransmitIntent(address, message, onSuccess=self._landed, onError=self._failed,
                                retryPeriod=SEND_RETRY)
        key = str(address)
        queue = self._queues.get(key)
        if queue is None:
            queue = self._queues[key] = deque()
        queue.append([intent, None, None])
        if len(queue) == 1:
            self._actor._myRef._send_intent(intent)

    def send_intent(self, address: Any, message: object) -> None:
        """An untracked send that is safe inside a transport callback."""
        # Any, not Address: actors/host.py passes its `_guardian`, which mypy types as None (assigned None in
        # __init__, the address later); Address once that attribute is annotated `Address | None`.
        self._actor._myRef._send_intent(TransmitIntent(address, message))

    def pending(self, key: str) -> bool:
        """Whether batches to the address `key` have not all settled."""
        return key in self._queues

    def _landed(self, result: object, intent: Intent) -> None:
        self._settle(intent, LANDED)

    def _failed(self, result: object, intent: Intent) -> None:
        if not process_gone(result):
            self._settle(intent, FAILED)
        elif self.no_bounce is not None and str(intent.targetAddr) != str(self.no_bounce):
            self._settle(intent, BOUNCED)
        else:
            # Thespian's dead-letter path sees the batches as they were sent, not the merged one.
            for part in self._parts(intent):
                self._actor._myRef.actor_send_fail(result, part)
            self._settle(intent, LANDED)

    def _parts(self, intent: Intent) -> list[Intent]:
        """The intents a handed-over intent carries: those merged into it, or itself."""
        queue = self._queues.get(str(intent.targetAddr))
        if queue and queue[0][0] is intent and queue[0][2] is not None:
            return cast("list[Intent]", queue[0][2])
        return [intent]

    def _settle(self, intent: Intent, outcome: str) -> None:
        key = str(intent.targetAddr)
        queue = self._queues.get(key)
        if not queue:
            return
        for entry in queue:
            if entry[0] is intent:
                entry[1] = outcome
                break
        self._ready.append(key)
        if self._advancing:
            return  # settled at once inside the _send_intent below (a refused connection): that loop goes on
        self._advancing = True
        try:
            while self._ready:
                key = self._ready.popleft()
                queue = self._queues.get(key)
                while queue and queue[0][1] is not None:
                    done, how, parts = queue.popleft()
                    if not queue:
                        del self._queues[key]  # before the callback, so that it sees the address settled
                    if parts is None:
                        self._on_settled(done, how)
                    else:
                        for part in parts:
                            self._on_settled(part, how)
                    if queue:
                        _merge_head(queue, self._landed, self._failed)
                        self._actor._myRef._send_intent(queue[0][0])
        finally:
            self._advancing = False


def _merge_head(queue: deque[list[Any]], on_success: Callable[..., None], on_error: Callable[..., None]) -> None:
    """Replace the batches at the front of `queue` (none handed over yet) by one carrying them all, in order."""
    first = queue[0][0].message
    if len(queue) < 2 or type(first) is not Batch or type(queue[1][0].message) is not Batch:
        return
    parts = [queue.popleft()[0]]
    payloads = [first.payload, *first.more]
    size, entries = sum(map(len, payloads)), first.entries
    while queue and len(parts) < MERGE_BATCHES:
        batch = queue[0][0].message
        if type(batch) is not Batch or batch.origin != first.origin:
            break
        grown = size + len(batch.payload) + sum(map(len, batch.more))
        if grown > MERGE_BYTES or entries + batch.entries > MERGE_ENTRIES:
            break
        parts.append(queue.popleft()[0])
        payloads += (batch.payload, *batch.more)
        size, entries = grown, entries + batch.entries
    if len(parts) == 1:
        queue.appendleft([parts[0], None, None])
        return
    merged = Batch(first.origin, payloads[0], tuple(payloads[1:]), entries)
    intent = TransmitIntent(parts[0].targetAddr, merged, onSuccess=on_success, onError=on_error,
                            retryPeriod=SEND_RETRY)
    queue.appendleft([intent, None, parts])

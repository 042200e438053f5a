"""Fixes for Thespian 4.0.1 bugs that Reprise cannot work around from the outside.

When an actor's send queue passes THESPIAN_MAX_QUEUED_TRANSMITS (Reprise sets 128: back-pressure on
fast senders), Thespian drains it inside the send, in "tx-only mode". That mode had two bugs:

1. Lost wakeups. A wakeup expiring during the drain was handed to the drain loop, which discarded it:
   the timer never fired. The Spark bridge lost one every few seconds under load (each stalled its
   fan-out until Host's re-arm check ran).
2. Deadlock. The drain did not accept new connections. Two processes draining towards each other
   over new connections (a restarted shard and the bridge, right after the demo's SIGKILL) waited for
   each other until their transmits timed out: the feed stopped for minutes.

3. Inherited sockets. Thespian forks the admin, the logger and every actor without closing the parent's
   sockets: every process held the listening socket of the boot process's client endpoint (a port that
   accepted connections and never answered), and the logger held the admin's, so the admin port stayed
   open after the admin died. Each new process now releases every socket it inherited before it opens
   its own (children of an actor also let go of the actor's journal connections).

4. The 35 s retry. A send on a connection its target's SIGKILL reset is retried after 35 s x attempt;
   only that retry (refused: the process is gone) turns it into a dead envelope the guardian reroutes,
   so held messages reached a restarted host 35 s late (about 1 kill in 100). In actor processes
   (applied by actors.boot) the first retry is now immediate; later ones keep Thespian's delays. Clients
   keep Thespian's retry: their own sends use a 0.25 s retry period (System._transmit), and with this
   patch too a client's first tell after a SIGKILL stalled for its whole send limit.

5. A selector per loop pass. TCPTransport's loop builds an epoll selector for every pass (its own comment:
   "perhaps this could be optimized"): epoll_create, one epoll_ctl per socket, epoll_wait, close, and the
   selectors module's bookkeeping per socket: 19.7-29.5 us a pass with 6 sockets on this 2-core VM, against
   3.3 us for `PollPass` (bench/profiling/selector_micro.py). Every message a process sends or receives
   takes a few passes. The TCP transport (and actors/tls.py's selector, which made one per pass too) now
   gets a selector with the same interface and the same answers on one poll(2) call (`PollPass`).

6. A message handled twice. When a child process exits, Thespian ends every transmit to it as failed
   (DeadTarget), also one the child had read, acknowledged and handled, whose ACK was already waiting,
   unread, on the parent's socket. The guardian (every host's parent) then rerouted that batch to the host's
   new process, which handled it again: 5 asks of ~12,400 told across as many SIGKILLs under load, and twice
   in CI (bench/profiling/kill_after_reply.py; tests/actors/test_thespian_fixes.py reproduces it at will).
   The ACK already received is now read first, and such a transmit ends as sent.

7. A frame with a negative size. Thespian reads a frame's `<size>>` header with int() and asks recv() for that
   many bytes: `-5>` made recv() raise a ValueError that nothing caught, and the process died (the admin, and the
   whole system with it; a host; or a client's ask, which raised it) of one unauthenticated packet from any local
   user. A header that is negative, or that has no `>` within its first 40 bytes (Thespian's own limit for a
   corrupted header, which it never reached: it kept appending), now marks the frame corrupted, and Thespian
   closes that connection as it does for any frame it cannot read (tests/actors/test_security.py).

8. A wakeup missed for good. TCPTransport's loop takes the earliest of its deadlines as its select timeout, from a
   list built with `filter(None, ...)`, and ExpirationTimerView.remaining() rounds to whole microseconds: a
   deadline less than 0.5 us away read as timedelta(0), which is false, so it was dropped, and with no other
   deadline the loop waited for a socket to become readable. A host whose only work was its own timers (a
   stream on a repeating timer, a RedeliveryTick) then waited for good: its next wakeup was due, its loop
   asleep in poll(2) without a timeout (bench/PROFILE.md §44: 1 stream in ~10-30 stopped under load). A
   deadline not yet reached now reads as at least 1 us.

9. Ctrl-C inside the transport. PollPass.select is where a client call's held Ctrl-C is raised (actors/interrupts.py):
   between two passes of the loop, nothing of the transport is half-changed.

10. Close with transmits queued. TCPTransport.close fails the transmits in its tables while iterating over them; the
   failure callback of each hands a queued transmit to the transport, into the table being iterated: "dictionary
   changed size during iteration", which a shutdown took for an interruption (it killed the system). The queue is
   now failed first, and the tables from copies, until they stay empty. Its idle connections (kept for reuse) are
   closed too: Thespian left them to the garbage collector.

11. A client's sends queued behind those to a stuck host. Thespian hands a process's transmits to its transport 20
   at a time (MAX_PENDING_TRANSMITS) and queues the rest, for every destination, behind them. A client's transmit
   to a host that takes nothing (busy in a long handler, SIGSTOPped) stays under way after its tell raised
   SendTimeout: after 20 of them every later send of that client queued, to healthy actors, to the guardian, and a
   shutdown's SystemShutdown to the admin. A client's transport now hands every transmit over at once
   (`lift_pending_limit`); System._transmit keeps at most one under way per destination, so they are at most as
   many as the hosts that take nothing. The guardian and every host had the same limit: one SIGSTOPped host (or
   one busy in a long handler) took a DirectoryUpdate at each publish and a GetHostStats at each status, and
   after 20 of them (6 `actors.connect`s) the guardian's every send queued behind them: its replies to clients
   (directory, status, spawn), the batches it relays to healthy hosts; 21 such hosts did it at the first
   publish. Their transports now hand every transmit over at once too (`lift_actor_pending_limit`, at their
   first message): Thespian's TCP transport already keeps one transmit per destination on a connection and the
   others waiting beside it, and Reprise's batches go through actors/inflight.py, one under way per address.
   The admin had it too: its answer to each client's attach (QueryAck) stays under way while that client takes
   nothing (stopped mid-attach, or its machine gone: nothing answers the connection), and after 20 such clients it
   answered no attach, no dead letter and no shutdown: every new `actors.connect()` failed after 17 s as if its
   secret were wrong, and a shutdown killed the system after 20 s. The admin's process, and the logger it forks,
   now hand every transmit over at once from their start (`_lift_pending_limit_in_admin_and_logger`). (The
   logger sends to one other process at most, the leader's logger in a convention: no other destination to hold.)

12. An attach on Thespian's clock. A client's ActorSystem() queries the admin (QueryExists) for 2 s at a time,
   for ~11 s, then once more, whatever the caller's timeout: `actors.connect(port, timeout=3)` to an admin that
   went silent after connect's probe (SIGSTOP, busy) took ~17.6 s. Inside `attach_within(seconds)` the queries
   end at that deadline: the half-made endpoint is closed (its queries to the admin failed) and AttachTimedOut
   (an InvalidActorAddress, as Thespian's own failure) is raised. The createActor that follows (connect's lookup
   of the admin's node agent, by its global name) waited for the admin up to Thespian's 50 s
   (MAX_CHILD_ACTOR_CREATE_DELAY): `connect(port, timeout=3)` to an admin stopped right after the attach took 50 s
   and raised "Could not request new Actor from Admin (-SENDSTS_FAILED)". Inside the block it too ends at the
   deadline, with CreateTimedOut (an ActorSystemRequestTimeout, Thespian's own for no answer).

13. An exit held by a retry to a client that is gone. An actor process that exits drains its transmits for up to
   MAX_SHUTDOWN_DRAIN_PERIOD (7 s) before it ends; a transmit waiting on Thespian's retry timer (35 s x attempt)
   is never tried again within it, and is dropped at the drain's end anyway. A client killed mid-attach (or its
   process gone just then) left one behind about 1 shutdown in 4: the node agent's GuardianIs, or the guardian's
   SystemStatus, to the client's port met "closed connection before ack" and then, on fix 4's immediate retry,
   [Errno 104] Connection reset by peer (the dying process's listening socket still took the connect); the second
   retry was due in 70 s, and the shutdown took 7.03 s. At an exit's drain, a transmit whose retry would come after
   the drain's end is tried once more at once instead: a live target (a client still reading, a peer that reset one
   connection) gets it, as it would not have before; a target that is gone refuses it (DeadTarget), or resets it
   again, and then it ends as failed instead of holding the exit.

14. An exit held by a stopped client. A client stopped mid-attach (SIGSTOP: a user's Ctrl-Z'd script, a paused
   container) takes the node agent's GuardianIs, or the guardian's SystemStatus, into its socket's buffer whole, and
   sends no ACK while stopped; that transmit is on no retry timer (fix 13 keeps it), and the exiting actor's drain
   held the shutdown for all of its 7 s. At an exit's drain, when every transmit left goes to a client and those under
   way were written whole and wait for their ACK only, they are ended (failed; sent if the ACK is in already): the
   system is going away, and the client reads what was written when it reads again, then finds the system gone
   (System._ask: SystemNotRunning). Only clients: an actor peer's ACK is what lets actors/inflight.py send it the next
   batch, so waiting for it is kept. Thespian cannot tell a client's address from an actor's (both are
   TCPv4ActorAddress); Reprise notes a client's (`note_client`) where it knows one: the senders of what only clients
   ask the node agent and the guardian (WhereIsGuardian, GetStatus, GetDirectory, RegisterRoute, ...), and the
   addresses of clients' /temp/ reply paths a process routes to. (The drain is Thespian's, in 50 ms slices, between
   which it looks; the admin's own exit never held a shutdown so.)

For 1 and 2, the drain is Thespian's own transmit-only steps; when one sees no send complete for 20 ms, a 1 ms
regular pass follows that accepts connections and reads and acknowledges what arrived. Every message
and wakeup met during the drain is kept and, once the drain ends, put back in front of the actor's incoming queue, in order, to
be handled as usual.
"""

from __future__ import annotations

import errno
import logging
import math
import os
import select
import selectors
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from importlib import metadata
from typing import Any

from . import interrupts
from .errors import ThespianVersionError
from .thespian_types import Address

THESPIAN_VERSION = "4.0.1"
"""The Thespian release whose internals `apply` patches (and pyproject.toml pins)."""

_applied = False
_SEND_WAIT = timedelta(milliseconds=20)
_LISTEN = timedelta(milliseconds=1)


def check_version() -> None:
    """Refuse any Thespian but THESPIAN_VERSION: the patches below replace its private methods."""
    try:
        installed = metadata.version("thespian")
    except metadata.PackageNotFoundError:
        installed = "none (no installed distribution)"
    if installed != THESPIAN_VERSION:
        raise ThespianVersionError(
            f"Reprise needs thespian=={THESPIAN_VERSION} (actors/thespian_fixes.py patches its internals), but the "
            f"installed thespian is {installed}; install the pinned one: pip install 'thespian=={THESPIAN_VERSION}'")


check_version()  # at import: `import actors` fails at once, naming both versions, instead of misbehaving later

from thespian.actors import ActorSystemRequestTimeout, InvalidActorAddress  # noqa: E402  (only once check_version has named the one needed)


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

    def deliver_wakeups(self: Any, incoming_handler: object) -> object:
        if incoming_handler is TransmitOnly or isinstance(incoming_handler, TransmitOnly):
            return None  # leave them queued (Thespian handed one to the drain loop, which dropped it)
        return original_deliver(self, incoming_handler)

    def drain_tx_queue_if_needed(self: Any, max_delay: object = None) -> Any:
        if not hasattr(self, "_incomingEnvelopes"):  # not the TCP transport: leave it to Thespian
            return original_drain(self, max_delay)
        queued, _ = self._complete_expired_intents()
        if queued < atb.MAX_QUEUED_TRANSMITS or not self._aTB_rx_pause_enabled:
            return
        finish = ExpirationTimer(max_delay if max_delay else None)
        kept: list[object] = []

        def keep(envelope: object) -> bool:
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

    _one_poll_per_pass()
    _attach_ends_at_its_deadline()
    _create_ends_at_the_deadline()
    _close_fails_queued_transmits_first()
    _no_deadline_rounds_to_none()
    _refuse_bad_frame_sizes()
    _release_inherited_sockets_in_children()
    _tell_late_children_to_exit()
    _cap_backoff_pauses()
    _exit_requests_name_their_child()
    _read_acks_before_a_child_s_death()
    _exit_drain_gives_up_on_clients_acks()
    _exit_drain_tries_late_retries_at_once()  # (after: it wraps fix 14's drain)
    wakeupTransportBase._deliver_wakeups = deliver_wakeups
    atb.asyncTransportBase._drain_tx_queue_if_needed = drain_tx_queue_if_needed
    _applied = True


class AttachTimedOut(InvalidActorAddress):  # type: ignore[misc]
    """The admin did not answer a client's attach by the deadline `attach_within` set (fix 12)."""


class CreateTimedOut(ActorSystemRequestTimeout):  # type: ignore[misc]
    """The admin did not answer a client's createActor by the deadline `attach_within` set (fix 12)."""


_attach = threading.local()


@contextmanager
def attach_within(seconds: float) -> Iterator[None]:
    """Bound the ActorSystem() attaches made by this thread inside the block to `seconds` (fix 12)."""
    _attach.deadline = time.monotonic() + seconds
    try:
        yield
    finally:
        _attach.deadline = None


def _attach_ends_at_its_deadline() -> None:
    """systemBase._verifyAdminRunning waits no longer than `attach_within`'s deadline, then gives up (fix 12)."""
    from thespian.system import systemBase as sb
    from thespian.system.messages.admin import QueryAck, QueryExists
    from thespian.system.transport import ReceiveEnvelope

    original = sb.systemBase._verifyAdminRunning

    def verify_admin_running(self: Any) -> bool:
        deadline = getattr(_attach, "deadline", None)
        if deadline is None:
            return bool(original(self))
        left = deadline - time.monotonic()
        if left <= 0:
            # (ActorSystem() drops this half-made object: nobody else would close its endpoint, or fail the
            # queries still under way to the admin)
            self.transport.close()
            raise AttachTimedOut(self.adminAddr, "did not answer the attach in time")
        txwatch = self._tx_to_admin(QueryExists())
        response = self._run_transport(min(sb.MAX_ADMIN_STATUS_REQ_DELAY, timedelta(seconds=left)))
        return (not txwatch.failed and isinstance(response, ReceiveEnvelope)
                and isinstance(response.message, QueryAck) and not response.message.inShutdown)

    sb.systemBase._verifyAdminRunning = verify_admin_running


def _create_ends_at_the_deadline() -> None:
    """systemBase.newPrimaryActor waits no longer than `attach_within`'s deadline, then gives up (fix 12)."""
    from contextlib import closing

    from thespian.actors import ActorSystemFailure, InvalidActorSpecification, NoCompatibleSystemForActor
    from thespian.system import systemBase as sb
    from thespian.system.messages.admin import PendingActor, PendingActorResponse
    from thespian.system.transport import TransmitIntent

    original = sb.systemBase.newPrimaryActor

    def new_primary_actor(self: Any, actorClass: Any, targetActorRequirements: Any, globalName: Any,
                          sourceHash: Any = None) -> Any:
        deadline = getattr(_attach, "deadline", None)
        if deadline is None or globalName is None or sourceHash is not None or not isinstance(actorClass, str):
            return original(self, actorClass, targetActorRequirements, globalName, sourceHash)
        # Thespian's own steps (a lookup by global name of a class named by its string), on the deadline's clock.
        self._numPrimaries = self._numPrimaries + 1
        with closing(self.transport.external_transport_clone()) as tx_external:
            response = sb.NewActorResponse(tx_external, self.adminAddr)
            tx_external.scheduleTransmit(None, TransmitIntent(
                self.adminAddr, PendingActor(actorClass, None, self._numPrimaries, targetActorRequirements,
                                             globalName=globalName, sourceHash=sourceHash),
                onError=response.transmit_failed))
            while response.pending and (left := deadline - time.monotonic()) > 0:
                tx_external.run(response, timedelta(seconds=left))
            unanswered = response.pending  # (closing the clone fails the transmit still under way)
        if unanswered:
            raise CreateTimedOut(f"the admin at {self.adminAddr} did not answer the request for actor "
                                 f"{globalName!r} in time")
        if response.failed:
            failure = response.failure
            if failure == PendingActorResponse.ERROR_Import:
                raise ImportError(f"{actorClass}: {response.failure_message or ''}")
            if failure == PendingActorResponse.ERROR_Invalid_ActorClass:
                raise InvalidActorSpecification(actorClass, response.failure_message)
            if failure == PendingActorResponse.ERROR_No_Compatible_ActorSystem:
                raise NoCompatibleSystemForActor(actorClass, "No compatible ActorSystem could be found")
            raise ActorSystemFailure(f"Could not request new Actor from Admin ({failure})")
        if not response.actor_address:
            raise NoCompatibleSystemForActor(actorClass, "No compatible ActorSystem could be found")
        return response.actor_address

    sb.systemBase.newPrimaryActor = new_primary_actor


def lift_pending_limit(transport: Any) -> None:
    """Let `transport` (a client's) hand every transmit over at once, never queueing one behind others (fix 11).

    Its owner must bound what is under way itself: System._transmit keeps one transmit per destination.
    """
    transport._canSendNow = _always


def lift_actor_pending_limit(actor: Any) -> None:
    """lift_pending_limit for the transport of the Thespian `actor` (the guardian, a host: fix 11); nothing on
    the in-process base, which has no transmits under way."""
    transport = getattr(getattr(actor, "_myRef", None), "transport", None)
    if transport is not None and hasattr(transport, "_canSendNow"):
        lift_pending_limit(transport)


def _always() -> bool:
    return True


def under_way(transport: Any, intent: Any) -> bool:
    """Whether `transport` still holds `intent` (queued, under way, or ended with its callback still to run).

    Thespian drops a transmit whose step raised without calling it back (TCPTransport._nextTransmitStep): one who
    waits for that callback asks this instead of waiting for ever.
    """
    return (any(each is intent for each in getattr(transport, "_transmitIntents", {}).values())
            or any(each is intent for each in getattr(transport, "_waitingTransmits", ()))
            or any(each is intent for each in getattr(transport, "_aTB_queuedPendingTransmits", ()))
            or any(each is intent for each, _ in getattr(transport, "_finished_intents", ())))


def withdraw_unsent(transport: Any, intent: Any) -> bool:
    """Take `intent` back from `transport` (failed, its callbacks run) if no attempt of it has written it whole: True
    then, and its target can never read it (a frame cut short is dropped unread). False, leaving it be, once it
    was written whole to a connection: its target may read it, acknowledged or not.

    Not written whole: its connection not yet completed (a target that takes nothing, whose listen queue is full;
    an unreachable machine), or its frame part written (a big message to a target whose socket buffers are full),
    or not handed to a connection at all (waiting for its target's, or queued). Only a first attempt: a retry
    follows an attempt that may have been written whole.
    """
    from thespian.system.transport import SendStatus
    from thespian.system.transport import TCPTransport as tcp

    if getattr(intent, "_attempts", 0) or getattr(intent, "result", None) is not None:
        return False  # (retried, or ended already)
    stage = getattr(intent, "stage", None)
    if stage not in (None, tcp.TCPTransport._XMITStepSendConnect, tcp.TCPTransport._XMITStepSendData):
        return False
    if stage == tcp.TCPTransport._XMITStepSendData and getattr(intent, "amtSent", 0) >= len(intent.serMsg):
        return False
    if not under_way(transport, intent) or any(each is intent for each, _ in getattr(transport, "_finished_intents", ())):
        return False  # (gone, or ended with its callback still to run)
    transmits = getattr(transport, "_transmitIntents", {})
    for fd, each in list(transmits.items()):
        if each is intent:
            del transmits[fd]
    if hasattr(transport, "_waitingTransmits"):
        transport._waitingTransmits = [each for each in transport._waitingTransmits if each is not intent]
    queued = getattr(transport, "_aTB_queuedPendingTransmits", None)
    if queued is not None and any(each is intent for each in queued):
        queued.remove(intent)
    if getattr(intent, "socket", None) is not None:  # (closed: its target drops the part it has unread)
        tcp._safeSocketShutdown(intent)
        del intent.socket
    intent.tx_done(SendStatus.Failed)
    return True


_CLOSE_ROUNDS = 10  # rounds of failing what callbacks scheduled meanwhile (each round fails what the last added)


def _close_fails_queued_transmits_first() -> None:
    """TCPTransport.close fails the queued transmits, then those under way from copies of its tables (fix 10)."""
    from collections import deque

    from thespian.system.transport import SendStatus
    from thespian.system.transport import TCPTransport as tcp

    original = tcp.TCPTransport.close

    def close(self: Any) -> None:
        # (also run by __del__, on a half-built transport: anything may be missing)
        for _ in range(_CLOSE_ROUNDS):
            intents = list(getattr(self, "_aTB_queuedPendingTransmits", ()))
            if intents:
                self._aTB_queuedPendingTransmits = deque()
            if hasattr(self, "_transmitIntents"):
                intents += self._transmitIntents.values()
                self._transmitIntents = {}
            if hasattr(self, "_waitingTransmits"):
                intents += self._waitingTransmits
                self._waitingTransmits = []
            if not intents:
                break
            for intent in intents:
                if getattr(intent, "socket", None) is not None:  # (as Thespian ends a failed transmit)
                    tcp._safeSocketShutdown(intent)
                    del intent.socket
                intent.tx_done(SendStatus.Failed)
        original(self)
        # Thespian's close leaves the idle connections it keeps for reuse open: a failed connect() whose caller
        # still held its traceback (and so the transport) kept one to the admin.
        idle = getattr(self, "_openSockets", None)
        while idle:
            tcp._safeSocketShutdown(idle.popitem()[1])

    tcp.TCPTransport.close = close


_HEADER_MAX = 40  # bytes of a frame's size header without its `>`: Thespian's own bound for a corrupted one


def _refuse_bad_frame_sizes() -> None:
    from thespian.system.transport import streamBuffer

    original = streamBuffer.ReceiveBuffer.addMore

    def add_more(self: Any, buf: bytes) -> None:
        original(self, buf)
        size = self._size
        if (size is None and len(self._buf) > _HEADER_MAX) or (size is not None and size < 0):
            # Corrupted, as Thespian's isDone() understands it: done, and completed() gives no frame.
            self._size, self._buf, self._blen, self._extra = None, b"", _HEADER_MAX + 1, b""

    streamBuffer.ReceiveBuffer.addMore = add_more


class _Key:
    """The part of a selectors.SelectorKey TCPTransport reads."""

    __slots__ = ("fd",)

    def __init__(self, fd: int) -> None:
        self.fd = fd


class PollPass:
    """A one-pass selector on poll(2) with selectors.DefaultSelector's answers, for TCPTransport's loop (fix 5).

    As epoll through selectors: a socket registered for reading and writing is reported for both (Thespian
    registers each at most once a pass; the masks are merged rather than refused), an error or hang-up is
    reported as ready for whatever it was registered for, a timeout is rounded up to the millisecond, and a
    bad descriptor raises OSError(EBADF) (poll reports it as POLLNVAL where epoll_ctl refused it), which
    Thespian's loop answers by checking each descriptor through this same class.
    """

    __slots__ = ("_poll", "_masks")

    def __init__(self) -> None:
        self._poll = select.poll()
        self._masks: dict[int, int] = {}

    def register(self, fd: int, events: int, data: object = None) -> None:
        """Watch `fd` for selectors.EVENT_READ and/or EVENT_WRITE in this pass."""
        mask = self._masks.get(fd, 0)
        if events & selectors.EVENT_READ:
            mask |= select.POLLIN
        if events & selectors.EVENT_WRITE:
            mask |= select.POLLOUT
        self._poll.register(fd, mask)  # (ValueError for a negative fd, as selectors raises)
        self._masks[fd] = mask

    def select(self, timeout: float | None = None) -> list[tuple[_Key, int]]:
        """(key, events) for each ready descriptor, waiting at most `timeout` seconds (None: until one is)."""
        if interrupts.pending:  # (a Ctrl-C held in a client call: here, between two passes, it can be raised)
            interrupts.deliver_at_poll(sys._getframe())
        ms = -1 if timeout is None else max(0, math.ceil(timeout * 1e3))
        ready = []
        masks = self._masks
        for fd, event in self._poll.poll(ms):
            if event & select.POLLNVAL:
                raise OSError(errno.EBADF, f"bad file descriptor {fd}")
            interest = masks[fd]
            events = 0
            if event & ~select.POLLOUT and interest & select.POLLIN:
                events |= selectors.EVENT_READ
            if event & ~select.POLLIN and interest & select.POLLOUT:
                events |= selectors.EVENT_WRITE
            if events:
                ready.append((_Key(fd), events))
        return ready

    def close(self) -> None:
        """Nothing to release: poll(2) keeps no kernel object between calls."""


class _SelectorsForTCPTransport:
    """What TCPTransport reads of the selectors module, with PollPass as its DefaultSelector."""

    DefaultSelector = PollPass
    EVENT_READ = selectors.EVENT_READ
    EVENT_WRITE = selectors.EVENT_WRITE


def _one_poll_per_pass() -> None:
    from thespian.system.transport import TCPTransport

    TCPTransport.selectors = _SelectorsForTCPTransport  # (the module's global)


def _read_acks_before_a_child_s_death() -> None:
    from thespian.system.transport import SendStatus
    from thespian.system.transport import TCPTransport as tcp

    original = tcp.TCPTransport.deadAddress

    def dead_address(self: Any, address_manager: Any, child: Address) -> None:
        for fd, intent in list(self._transmitIntents.items()):
            if intent.targetAddr == child and acknowledged(intent):
                del self._transmitIntents[fd]
                tcp._safeSocketShutdown(intent)
                delattr(intent, "socket")
                self._finishIntent(intent, SendStatus.Sent)
        original(self, address_manager, child)

    tcp.TCPTransport.deadAddress = dead_address


def acknowledged(intent: Any) -> bool:
    """Whether a transmit that waits for its ACK has that ACK in its socket's buffer already (read without
    blocking; a child that acknowledged before it died wrote it there before its exit was noticed)."""
    from thespian.system.transport import TCPTransport as tcp

    if not _awaits_its_ack(intent):
        return False
    buffer = getattr(intent, "ackbuf", None) or tcp.ReceiveBuffer(tcp.serializer.loads)
    try:
        while not buffer.isDone():
            data = intent.socket.recv(buffer.remainingAmount())
            if not data:
                return False
            buffer.addMore(data)
        done = buffer.completed()
    except (OSError, ValueError):  # (BlockingIOError, ssl.SSLWantReadError: nothing more arrived)
        return False
    return bool(done) and done[0] == tcp.ackPacket


def _exit_requests_name_their_child() -> None:
    """An actor that exits sends each child an ActorExitRequest; one that cannot be delivered means that child
    is gone. Thespian 4.0.1's error callback for it is a closure over the loop variable, so it dropped the
    *last* child from the list instead of the unreachable one: the exiting actor then waited for a child
    that is still running, and a live child it then stopped waiting for. The admin's own version binds the
    child (thespian/system/admin/adminCore.py); this is Thespian's, with the child bound. (How soon a failed
    exit request is sent again: retry_reset_connections_at_once.)"""
    import atexit

    from thespian.actors import ActorExitRequest
    from thespian.system.actorManager import ActorManager
    from thespian.system.transport import TransmitIntent

    def shutdown_actor(self: Any, shutdownChildren: bool = True) -> bool:  # noqa: N803  (Thespian's name)
        atexit.unregister(self._shutdownActor)
        if getattr(self, "_exiting", None):
            return True  # already exiting
        self._exiting = True
        children = self.childAddresses
        if shutdownChildren and children:
            for each in children:
                self._send_intent(TransmitIntent(each, ActorExitRequest(recursive=True),
                                                 onError=lambda r, m, child=each: self._childInaccessible(child, m)))
            return True  # waits for the children's exits
        self._sayGoodbye()
        self.transport.abort_run(drain=True)
        return False

    ActorManager._shutdownActor = shutdown_actor


MAX_BACKOFF = timedelta(milliseconds=200)
"""The longest pause between two looks at a socket that had nothing for us (Thespian: 7.3 s)."""


_ONE_MICROSECOND = timedelta(microseconds=1)


def _no_deadline_rounds_to_none() -> None:
    """A deadline not yet reached has at least 1 us remaining, never timedelta(0) (fix 8)."""
    from thespian.system.timing import ExpirationTimerView

    if getattr(ExpirationTimerView.remaining, "reprise_patched", False):
        return

    def remaining(self: Any, forever: object = None) -> object:
        if self._time_to_quit is None:
            return forever
        seconds = self._time_to_quit - self._current_time
        if seconds <= 0:
            return timedelta(0)  # expired: as Thespian says (its loop then takes the expiry)
        return max(timedelta(seconds=seconds), _ONE_MICROSECOND)

    remaining.reprise_patched = True  # type: ignore[attr-defined]
    ExpirationTimerView.remaining = remaining


def _cap_backoff_pauses() -> None:
    """Cap Thespian's backoff pause on a socket at MAX_BACKOFF.

    While a sender waits for its ACK, each empty read multiplies the pause before the next look by 1.7 (from
    20 ms up to 7.3 s), and the socket is left out of select meanwhile: an ACK from a peer busy for a second
    (a host just restarted) was read up to 8 s late, and everything behind it waited (seen: 1 round in ~25 of
    test_a_host_sigkilled_50_times_..., up to the probe's 30 s under load).
    """
    from thespian.system import transport

    transport.MAX_BACKOFF_DELAY = min(transport.MAX_BACKOFF_DELAY, MAX_BACKOFF)


def _tell_late_children_to_exit() -> None:
    """A child whose startup handshake completes after its parent began exiting is told to exit too.

    Thespian 4.0.1 sends ActorExitRequest to the children it knows when the exit begins and then waits for
    every child to exit, including one registered later: a host the guardian forked right as the system
    shut down was never told, so the guardian, and the admin with it, never exited (`down` killed them
    after 20 s; 1 shutdown in ~20 that follows a host SIGKILL in the torture runs).
    """
    from thespian.actors import ActorExitRequest
    from thespian.system.actorManager import ActorManager
    from thespian.system.transport import TransmitIntent

    original = ActorManager._pendingActorReady

    def ready(self: Any, childInstance: object, actualAddress: Address, isMyChild: bool = True) -> None:
        original(self, childInstance, actualAddress, isMyChild)
        if isMyChild and getattr(self, "_exiting", False):
            self._send_intent(TransmitIntent(actualAddress, ActorExitRequest(recursive=True),
                                             onError=lambda result, intent: self._childInaccessible(actualAddress,
                                                                                                   intent)))

    ActorManager._pendingActorReady = ready


def forget_child(actor: Any, address: Address) -> None:
    """Drop the child at `address`, whose process is gone, from Thespian's bookkeeping of `actor`'s children.

    Thespian 4.0.1 can lose the ChildActorExited of one of two children dying at once: it reaps the process
    but keeps the child on its list, and its parent's exit then waits for that child forever (a shutdown
    after two shards were SIGKILLed together took 30 s in about 1 of 4 tries: Thespian's 10 s, then
    `shutdown` killed the admin, the guardian and the logger). This is what the lost message would have done.
    """
    manager: Any = getattr(actor, "_myRef", None)
    if manager is None:
        return
    for child in list(manager.childAddresses):
        if str(child) == str(address):  # (ActorAddress is not hashable; its str is its identity)
            manager._handleChildExited(child)


def release_inherited_sockets() -> list[int]:
    """Point every socket descriptor of this process at /dev/null; returns their numbers.

    Not os.close: the parent's socket objects still live in this forked process's memory, and closing
    the number would let a socket opened later take it and be closed by a stale object.
    """
    released = []
    devnull = os.open(os.devnull, os.O_RDWR | os.O_CLOEXEC)
    try:
        for name in os.listdir("/proc/self/fd"):
            fd = int(name)
            if fd <= 2 or fd == devnull:
                continue
            try:
                if os.readlink(f"/proc/self/fd/{fd}").startswith("socket:"):
                    os.dup2(devnull, fd)
                    released.append(fd)
            except OSError:
                continue  # the listing's own descriptor, already gone
    finally:
        os.close(devnull)
    return released


def _release_inherited_sockets_in_children() -> None:
    from thespian.system import multiprocCommon as mpc

    def releasing(target: Callable[..., object]) -> Callable[..., object]:
        def start(*args: object, **kwargs: object) -> object:
            release_inherited_sockets()
            _clients.clear()  # (the parent's clients: this process learns its own, fix 14)
            return target(*args, **kwargs)
        start.__wrapped__ = target  # type: ignore[attr-defined]
        return start

    # Thespian looks these up by name when it forks the admin, the logger and each actor.
    for name in ("startAdmin", "startupASLogger", "startChild"):
        setattr(mpc, name, releasing(getattr(mpc, name)))
    for name in ("startAdmin", "startupASLogger"):
        setattr(mpc, name, _unlimited(getattr(mpc, name)))


def _unlimited(target: Callable[..., object]) -> Callable[..., object]:
    """`target` (the admin's or the logger's process start), in a process whose transports hand every transmit
    over at once (fix 11): the process, and those it forks, only (actors lift theirs at their first message)."""
    def start(*args: object, **kwargs: object) -> object:
        from thespian.system.transport import asyncTransportBase as atb

        atb.asyncTransportBase._canSendNow = _always_for
        return target(*args, **kwargs)
    start.__wrapped__ = target  # type: ignore[attr-defined]
    return start


def _always_for(transport: object) -> bool:
    """_canSendNow of every transport of the admin's and the logger's processes (an unbound method: `transport`)."""
    return True


_exit_drain_ends: float | None = None
"""(monotonic) When this actor process's exit drain gives up on its transmits; None until that drain starts."""


def _exit_drain_tries_late_retries_at_once() -> None:
    """At an actor's exit drain, a transmit whose retry would come after the drain's end is tried at once, and only
    once more (fix 13)."""
    from thespian.system import systemCommon
    from thespian.system.transport import TransmitIntent

    original_drain = systemCommon.systemCommonBase.drainTransmits
    original_retry = TransmitIntent.retry

    def drain_transmits(self: Any) -> None:
        global _exit_drain_ends
        # (Thespian's drain, of the same length, starts right after this: it ends no earlier than this deadline)
        _exit_drain_ends = time.monotonic() + systemCommon.MAX_SHUTDOWN_DRAIN_PERIOD.total_seconds()
        transport = getattr(self, "transport", None)
        for intent in [*getattr(transport, "_waitingTransmits", ()),
                       *getattr(transport, "_transmitIntents", {}).values()]:
            _last_try_if_late(intent)
        original_drain(self)

    def retry(self: Any, immediately: bool = False) -> bool:
        if _exit_drain_ends is None:
            return bool(original_retry(self, immediately=immediately))
        if getattr(self, "reprise_last_try", False):
            return False  # its last try failed too: Thespian ends it as failed (the drain would have dropped it)
        retried = bool(original_retry(self, immediately=immediately))
        if retried:
            _last_try_if_late(self)
        return retried

    systemCommon.systemCommonBase.drainTransmits = drain_transmits
    TransmitIntent.retry = retry  # (fix 4 wraps this one in actor processes: its first retry at once goes through it)


def _last_try_if_late(intent: Any) -> None:
    """Make `intent`'s pending retry, if due after the exit drain's end, happen now and be its last (fix 13)."""
    from thespian.system.timing import ExpirationTimer

    retry_at = getattr(intent, "_retryTime", None)
    if retry_at is None or _exit_drain_ends is None:
        return
    remaining = retry_at.view().remaining()  # (None: never, which is as late as can be)
    if remaining is None or remaining.total_seconds() >= _exit_drain_ends - time.monotonic():
        intent._retryTime = ExpirationTimer(timedelta(0))
        intent.reprise_last_try = True


CLIENTS_KEPT = 4096
"""How many client addresses a process remembers (`note_client`), the most recently noted."""

_CLIENT_LOOK = timedelta(milliseconds=50)
"""How often an exit drain looks whether only transmits waiting on clients' ACKs are left (fix 14)."""

_clients: dict[str, None] = {}
"""The addresses (str) `note_client` was told of, oldest first."""


def note_client(address: Address | None) -> None:
    """Record that `address` is a client's endpoint (a process that is no actor of the system: a requester whose
    replies nothing of the system waits on): at this process's exit drain, a transmit to it that waits only for its
    ACK is given up once nothing else is left to drain (fix 14)."""
    if address is None:
        return
    key = str(address)  # (ActorAddress is not hashable; its str is its identity)
    _clients.pop(key, None)
    _clients[key] = None
    if len(_clients) > CLIENTS_KEPT:
        del _clients[next(iter(_clients))]


def forget_client(address: Address | str) -> None:
    """`address` (or its str) is no client's any more (its route was dropped): its port may go to an actor next."""
    _clients.pop(str(address), None)


def is_client(address: Address) -> bool:
    """Whether `note_client` was told of `address` (and still remembers it)."""
    return str(address) in _clients


def _exit_drain_gives_up_on_clients_acks() -> None:
    """At an actor's exit drain, transmits to clients that were written whole and wait only for their ACK are given
    up once nothing else is left to drain (fix 14)."""
    from thespian.system import systemCommon
    from thespian.system.timing import ExpirationTimer, unexpired
    from thespian.system.transport import Thespian__Run_Terminated, TransmitOnly

    original_drain = systemCommon.systemCommonBase.drainTransmits

    def drain_transmits(self: Any) -> None:
        transport = self.transport
        if not hasattr(transport, "_transmitIntents"):  # not the TCP transport: leave it to Thespian
            original_drain(self)
            return
        # Thespian's drain (run transmit-only until nothing is left, for MAX_SHUTDOWN_DRAIN_PERIOD at most), in
        # slices: between two, it looks whether only clients' ACKs are left to wait for. (A slice that ends with
        # nothing sent returns None, as Thespian's one run did at the drain's end: only an empty transport ends it.)
        limit = ExpirationTimer(systemCommon.MAX_SHUTDOWN_DRAIN_PERIOD)
        for view in unexpired(limit):
            left = view.remaining()
            ran = transport.run(TransmitOnly, _CLIENT_LOOK if left is None else min(left, _CLIENT_LOOK))
            if not _transmits_left(transport) or isinstance(ran, Thespian__Run_Terminated):
                break  # nothing left, or the run was aborted: as Thespian's drain
            give_up_on_clients_acks(transport)

    systemCommon.systemCommonBase.drainTransmits = drain_transmits


def _transmits_left(transport: Any) -> bool:
    """Whether the TCP `transport` has transmits under way, waiting, or queued."""
    return bool(transport._transmitIntents or transport._waitingTransmits
                or getattr(transport, "_aTB_queuedPendingTransmits", None))


def give_up_on_clients_acks(transport: Any) -> int:
    """If every transmit `transport` has left goes to a client (`is_client`), and those under way were written whole
    and wait for their ACK only, end those (sent if their ACK is in already, else failed); how many (fix 14)."""
    under_way = getattr(transport, "_transmitIntents", None)
    if not under_way or getattr(transport, "_aTB_queuedPendingTransmits", None):
        return 0
    if not all(_awaits_its_ack(intent) and is_client(intent.targetAddr) for intent in under_way.values()):
        return 0
    if not all(is_client(intent.targetAddr) for intent in getattr(transport, "_waitingTransmits", ())):
        return 0  # (those to clients wait behind these: failing these starts them, and they end the same way)
    from thespian.system.transport import SendStatus

    ended = list(under_way.items())
    for fd, intent in ended:
        status = SendStatus.Sent if acknowledged(intent) else SendStatus.Failed
        del under_way[fd]
        transport._finishIntent(intent, status)  # (closes its socket: what was written stays readable to the client)
    # Their callbacks now: the transport's next pass returns at once when nothing is left, before it would run them.
    done, transport._finished_intents = transport._finished_intents, []
    for intent, status in done:
        intent.tx_done(status)
    return len(ended)


def _awaits_its_ack(intent: Any) -> bool:
    """Whether `intent` was written whole and waits for its ACK only."""
    from thespian.system.transport import TCPTransport as tcp

    written = (tcp.TCPTransport._XMITStepShutdownWrite, tcp.TCPTransport._XMITStepWaitForAck)
    return getattr(intent, "stage", None) in written and getattr(intent, "socket", None) is not None


HANDSHAKE_RETRY = timedelta(seconds=0.25)
"""Retry period (x attempt) of a new actor process's EndpointConnected to its parent."""


def retry_reset_connections_at_once() -> None:
    """Make Thespian retry a send at once (not after 35 s) the first time it fails on a socket error.

    A host that sent to a process just SIGKILLed finds its kept-open connection reset; Thespian 4.0.1
    then waits `attempts * 35 s` before reconnecting, and only that reconnect (refused: the process is
    gone) turns the message into a dead envelope the guardian reroutes to the restarted host. Held
    messages arrived 35 s late (seen: 1 kill in ~100 of a host restarted in 0.1 s). Later retries keep
    Thespian's delays, except for a new actor's EndpointConnected to its parent: its parent cannot tell it
    to exit before that handshake, so a host the guardian forked right as the system shut down (its
    handshake reset) waited 35-70 s, and held the guardian and the admin up with it; and except for an
    ActorExitRequest: the one an exiting guardian sends a host SIGKILLed a moment before can fail twice (a
    reset on the kept connection, then its immediate retry) and then waited 70 s, so System.shutdown killed
    the admin, the logger and the guardian after its 20 s (10 in 150 tries of torture operations: send_items,
    SIGKILL of the feeder, shutdown; 0 in 40 since).
    """
    from thespian.actors import ActorExitRequest
    from thespian.system.messages.multiproc import EndpointConnected
    from thespian.system.transport import TransmitIntent

    original = TransmitIntent.retry
    if getattr(original, "reprise_patched", False):
        return

    def retry(self: Any, immediately: bool = False) -> bool:
        if isinstance(self.message, (EndpointConnected, ActorExitRequest)) and self.transmit_retry_period > HANDSHAKE_RETRY:
            self.transmit_retry_period = HANDSHAKE_RETRY
        retried: bool = original(self, immediately=immediately or getattr(self, "_attempts", 0) == 0)
        return retried

    retry.reprise_patched = True  # type: ignore[attr-defined]
    TransmitIntent.retry = retry


def adopt_process_logging() -> None:
    """Point every module's `log` at this actor process's logging, which goes to the run dir's actors.log.

    Thespian replaces the logging root in each actor process it starts; a module imported before (by the
    process it was forked from) keeps a logger under the old root, whose records fell back to stderr: the
    guardian's warnings and errors (a host died, restarted, given up) were in boot.log, without a time, and
    not in actors.log. Called first thing in each actor's __init__.
    """
    root = logging.root
    for module in list(sys.modules.values()):
        log = getattr(module, "log", None)
        if not isinstance(log, logging.Logger):
            continue
        top = log
        while top.parent is not None:
            top = top.parent
        if top is not root:
            setattr(module, "log", logging.getLogger(log.name))  # noqa: B010  (a module attribute by name)

"""Plain Thespian actors (no Reprise host) that drive Thespian into the states its bugs live in."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

from thespian.actors import Actor, WakeupMessage


class StalledSink(Actor):
    """Sleeps on its first message, so senders' transmits to it pile up unacknowledged."""

    def receiveMessage(self, message, sender):
        if message == "stall":
            time.sleep(3.0)


class Flooder(Actor):
    """Arms a short wakeup, then queues enough sends that Thespian drains them in tx-only mode."""

    def receiveMessage(self, message, sender):
        if isinstance(message, tuple) and message[0] == "flood":
            _, sink, count = message
            self.asker = sender
            self.wakeupAfter(timedelta(seconds=0.05), "flooded")
            self.send(sink, "stall")
            for i in range(count):
                self.send(sink, i)
            self.ended = time.monotonic()
            self.send(sender, "sent")
        elif isinstance(message, WakeupMessage):
            self.send(self.asker, ("woke", time.monotonic() - self.ended))


class Peer(Actor):
    """Floods a peer it never talked to, after a pause (so that both flood at once), then says "sent"."""

    def receiveMessage(self, message, sender):
        if isinstance(message, tuple) and message[0] == "flood":
            _, peer, count, pause = message
            time.sleep(pause)
            for i in range(count):
                self.send(peer, i)
            self.send(sender, ("sent", self.myAddress))


class HandlesThenDies(Actor):
    """Answers "ping"; on ("die", path) appends "handled" to the file at path, then SIGKILLs itself."""

    def receiveMessage(self, message, sender):
        if message == "ping":
            self.send(sender, "pong")
        elif isinstance(message, tuple) and message[0] == "die":
            with open(message[1], "a") as f:
                f.write("handled\n")
            os.kill(os.getpid(), signal.SIGKILL)


class SendsToADyingChild(Actor):
    """Sends its child ("die", path) and sleeps 1 s before its loop can read the child's ACK, so that it learns
    of the child's exit first; then reports how Thespian said the send ended."""

    def receiveMessage(self, message, sender):
        from thespian.system.transport import TransmitIntent

        if message == "start":
            self.asker = sender
            self.child = self.createActor(HandlesThenDies)
            self.send(self.child, "ping")  # (a kept-open connection: the next send writes at once)
        elif message == "pong":
            self.send(self.asker, "ready")
        elif isinstance(message, tuple) and message[0] == "go":
            self.asker = sender
            self._myRef._send_intent(TransmitIntent(self.child, ("die", message[1]), onSuccess=self._ended,
                                                    onError=self._ended))
            time.sleep(1.0)

    def _ended(self, result, intent):
        self.send(self.asker, ("ended", str(result)))

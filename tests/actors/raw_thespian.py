"""Plain Thespian actors (no Reprise host) that drive Thespian into the states its bugs live in."""

from __future__ import annotations

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

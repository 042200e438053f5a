"""Actors used by the transport benchmark: Reprise actors and their raw-Thespian counterparts."""

from __future__ import annotations

import time
from dataclasses import dataclass

from thespian.actors import Actor as ThespianActor

import actors


@dataclass(frozen=True)
class Item:
    i: int
    data: bytes


@dataclass(frozen=True)
class Flood:
    target: str
    count: int


@dataclass(frozen=True)
class Rally:
    target: str
    count: int


class Source(actors.Actor):
    """Sends `count` small messages one way, then an end marker carrying who to tell."""

    def receive(self, message, sender):
        if isinstance(message, Flood):
            tell, payload = self.tell, b"0123456789"
            for i in range(message.count):
                tell(message.target, Item(i, payload))
            tell(message.target, ("end", sender, message.count))


class Sink(actors.Actor):
    """Counts messages; answers (count, out_of_order) once the end marker and everything before it arrived."""

    def pre_start(self):
        self.count = 0
        self.next = 0
        self.disorder = 0

    def receive(self, message, sender):
        if isinstance(message, Item):
            if message.i != self.next:
                self.disorder += 1
            self.next = message.i + 1
            self.count += 1
        elif isinstance(message, tuple) and message[0] == "end":
            self.tell(message[1], (self.count, self.disorder))
            self.count = self.next = 0
        elif message == "ping":
            self.tell(sender, "pong")


class Rallier(actors.Actor):
    """Sequential request/response with another actor; answers the elapsed seconds."""

    def receive(self, message, sender):
        if isinstance(message, Rally):
            self.left, self.target, self.reply_to = message.count, message.target, sender
            self.started = time.perf_counter()
            self.tell(self.target, "ping")
        elif message == "pong":
            self.left -= 1
            if self.left:
                self.tell(self.target, "ping")
            else:
                self.tell(self.reply_to, time.perf_counter() - self.started)


class RawSink(ThespianActor):
    """Raw Thespian: counts a flood and replies when the end marker arrives."""

    count = 0

    def receiveMessage(self, message, sender):
        if isinstance(message, tuple) and message[0] == "end":
            message[1] and self.send(message[1], self.count)
            self.count = 0
        elif message == "ping":
            self.send(sender, "pong")
        elif isinstance(message, Item):
            self.count += 1


class RawSource(ThespianActor):
    """Raw Thespian: one message per send, the way an actor without batching talks."""

    def receiveMessage(self, message, sender):
        if isinstance(message, tuple) and message[0] == "flood":
            _, target, count = message
            for i in range(count):
                self.send(target, Item(i, b"0123456789"))
            self.send(target, ("end", sender))
        elif isinstance(message, tuple) and message[0] == "rally":
            _, self.target, self.left = message
            self.reply_to = sender
            self.started = time.perf_counter()
            self.send(self.target, "ping")
        elif message == "pong":
            self.left -= 1
            if self.left:
                self.send(self.target, "ping")
            else:
                self.send(self.reply_to, time.perf_counter() - self.started)

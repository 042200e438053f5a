"""Actors for the relay tests: an origin delivers Parcels to a relay (IdempotentReceiver + DurableDelivery), which
forwards each to a sink (importable by module path, as multiproc requires).

The system's journal is one of two fault-injecting schemes, both hitting the write that holds a relay's forward (a
DeliveriesSent of a Forward whose payload starts with "fault"), once per payload:
- `failfwd://name`: a memory journal whose write fails (a full disk, a lost connection): the relay stops;
- `killfwd:///path.db`: a SQLite journal that SIGKILLs its own process (the relay's host) instead of writing,
  leaving `path.db.killed-<payload>` behind (so that the host's next process writes it).
"""

from __future__ import annotations

import os
import signal
from dataclasses import dataclass
from typing import Any

from journal import open_journal, open_snapshot_store, register_scheme, register_type
from persistence import DurableDelivery, IdempotentReceiver
from persistence.durable import DeliveriesSent
from tests.persistence.compact_fixtures import Parcel, Unstorable
from tests.persistence.failing_journals import register_failing_first_write


@register_type(manifest="tests.persistence.Forward")
@dataclass(frozen=True)
class Forward:
    """Relay -> sink: the payload of a Parcel the relay applied (delivery `delivery_id` of the relay's)."""

    delivery_id: int
    payload: str


def _faulty_forwards(payload: object) -> list[str]:
    """The payloads starting with "fault" of the Forwards a DeliveriesSent holds."""
    if type(payload) is DeliveriesSent:
        return [m.payload for m in payload.messages if isinstance(m, Forward) and m.payload.startswith("fault")]
    return []


register_failing_first_write("failfwd", _faulty_forwards)


class _KillingJournal:
    """A SQLite journal that SIGKILLs its process at the first write of each faulty forward (see the module)."""

    def __init__(self, path: str) -> None:
        self._path = path
        self._inner = open_journal(f"sqlite://{path}")

    def write_messages(self, messages):  # type: ignore[no-untyped-def]
        for aw in messages:
            for r in aw.payload:
                for key in _faulty_forwards(r.payload):
                    marker = f"{self._path}.killed-{key}"
                    if not os.path.exists(marker):
                        open(marker, "w").close()  # (the kernel keeps it: the process dies, not the machine)
                        os.kill(os.getpid(), signal.SIGKILL)
        return self._inner.write_messages(messages)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


register_scheme("killfwd", journal=lambda url: _KillingJournal(url.partition("://")[2]),
                snapshot_store=lambda url: open_snapshot_store(f"sqlite://{url.partition('://')[2]}.snapshots"))


class Origin(DurableDelivery):
    """("send", relay, payloads): delivers a Parcel of each payload to `relay`, replying "sent" once they are
    journaled; "unconfirmed": how many are unconfirmed. Redelivers every 0.2 s."""

    redeliver_interval = 0.2

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "unconfirmed":
            self.tell(sender, self.number_of_unconfirmed)
        elif isinstance(message, tuple) and message[0] == "send":
            _, relay, payloads = message
            for payload in payloads:
                self.deliver(relay, lambda i, p=payload: Parcel(i, p))
            self.defer_async("sent", lambda e: self.tell(sender, e))


class Sink(IdempotentReceiver):
    """Applies each Forward once per (sender, delivery id), confirming it; "got": the payloads applied, in order;
    ("forward", parcel): apply_and_forward, which a receiver that is no DurableDelivery cannot."""

    def pre_start(self) -> None:
        self.got: list[str] = []

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, str):
            self.got.append(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "got":
            self.tell(sender, tuple(self.got))
        elif isinstance(message, Forward) and sender is not None:
            self.apply_and_confirm(sender, message.delivery_id, message.payload, self.got.append)
        elif isinstance(message, tuple) and message[0] == "forward":  # (not a DurableDelivery: refused)
            self.apply_and_forward(sender or "", message[1].delivery_id, "x", "/user/elsewhere", lambda i: i)


class _Relay(IdempotentReceiver, DurableDelivery):
    """Forwards each Parcel it applies to `sink` as a Forward; "unconfirmed": how many forwards are unconfirmed.
    Redelivers every 0.2 s."""

    redeliver_interval = 0.2

    def __init__(self, sink: str) -> None:
        self.sink = sink

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "unconfirmed":
            self.tell(sender, self.number_of_unconfirmed)
        elif isinstance(message, Parcel) and sender is not None:
            self.relay(sender, message)

    def relay(self, origin: str, parcel: Parcel) -> None:
        raise NotImplementedError


class Relay(_Relay):
    """The relay written with apply_and_forward: the application and the forward in one write, confirmed after.
    A payload "bad-event..." is applied as an Unstorable event, "bad-forward..." forwarded as an Unstorable message
    (the journal rejects either; with `also`, only the last sink's forward); ("applied", origin, id): already_applied;
    ("bad-args", kind): apply_and_forward with the arguments of `kind` (see BAD_ARGS). With `also` (more sinks), each
    parcel is forwarded to `sink` and to each of them, in the same write."""

    def __init__(self, sink: str, also: tuple[str, ...] = ()) -> None:
        super().__init__(sink)
        self.also = also

    def receive_command(self, message: Any, sender: str | None) -> None:
        if isinstance(message, tuple) and message[0] == "applied":
            self.tell(sender, self.already_applied(message[1], message[2]))
        elif isinstance(message, tuple) and message[0] == "bad-args":
            self.apply_and_forward(sender or "", 1, "x", *BAD_ARGS[message[1]](self.sink))
        else:
            super().receive_command(message, sender)

    def relay(self, origin: str, parcel: Parcel) -> None:
        i, payload = parcel.delivery_id, parcel.payload
        event = Unstorable(i, payload) if payload.startswith("bad-event") else payload
        bad = Unstorable if payload.startswith("bad-forward") else Forward
        if not self.also:  # (the one-destination form)
            self.apply_and_forward(origin, i, event, self.sink, lambda d: bad(d, payload))
            return
        sinks = (self.sink, *self.also)
        self.apply_and_forward(origin, i, event, [(s, lambda d, m=bad if s == sinks[-1] else Forward: m(d, payload))
                                                  for s in sinks])


BAD_ARGS: dict[str, Any] = {
    "no-message": lambda sink: (sink,),
    "both": lambda sink: ([(sink, lambda d: Forward(d, "x"))], lambda d: Forward(d, "x")),
    "none": lambda sink: ([],),
    "not-pairs": lambda sink: ([sink],),
    "not-a-path": lambda sink: (42, lambda d: Forward(d, "x")),
}
"""apply_and_forward's arguments after (origin, delivery_id, event) that it refuses, by the test's name for them."""


class NaturalRelay(_Relay):
    """The relay written the natural way: deliver() from apply_and_confirm's handler (its forward is journaled in a
    later write than the application, after the confirm went out)."""

    def relay(self, origin: str, parcel: Parcel) -> None:
        self.apply_and_confirm(origin, parcel.delivery_id, parcel.payload,
                               lambda p: self.deliver(self.sink, lambda i: Forward(i, p)))

"""Actors for the tests of a group-commit write that fails: every asker whose command wrote in it hears of it.

`failwrite://name`: a memory journal whose first write of each str event starting with "fault" fails (once per
process); `failconfirm://name`: one whose first write of a DeliveriesConfirmed fails (once per journal name);
`rejectconfirm:///path.db`: a SQLite journal rejecting every DeliveriesConfirmed that confirms delivery 1. Importable
by module path as multiproc requires.
"""

from __future__ import annotations

from typing import Any

from persistence import DurableDelivery, EntityTable, PersistentActor, TableCommit
from persistence.durable import DeliveriesConfirmed
from tests.persistence.failing_journals import register_failing_first_write, register_rejecting_writes


def _faulty(payload: object) -> list[str]:
    """A str event starting with "fault" is the key of its own failing write (in a table's commit too)."""
    if type(payload) is TableCommit:
        return [k for e in payload.events for k in _faulty(e)]
    return [payload] if isinstance(payload, str) and payload.startswith("fault") else []


register_failing_first_write("failwrite", _faulty)
register_failing_first_write("failconfirm", lambda p: ["confirmed"] if type(p) is DeliveriesConfirmed else [],
                             per_journal=True)
register_rejecting_writes("rejectconfirm", lambda p: type(p) is DeliveriesConfirmed and 1 in p.delivery_ids)


class RoundWriter(PersistentActor):
    """("as", ((asker, how, payload), ...)): each ("write", how, payload) routed to itself from that asker, all
    handled before the host's next group commit (one round, one journal write); ("write", how, payload) persists
    the payload (how: "async" persist_async, "all" persist_all_async of it twice, "stop" persist_async then stop, "raise" persist_async then raise) and replies ("ok", payload) from
    its handler; ("defer", _, payload) defers that reply behind the round's writes."""

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message[0] == "as":
            for asker, how, payload in message[1]:
                self.context.route(asker, self.path, ("write", how, payload))
            return
        _, how, payload = message
        reply = lambda e: self.tell(sender, ("ok", e))  # noqa: E731
        if how == "async":
            self.persist_async(payload, reply)
        elif how == "all":
            self.persist_all_async([payload, payload], reply)
        elif how == "raise":  # (it restarts: its event is written as it fails, its handler never runs)
            self.persist_async(payload, reply)
            raise RuntimeError("command failed after persisting")
        elif how == "stop":  # (its handler never runs: the actor stops, its event is written as it stops)
            self.persist_async(payload, reply)
            self.stop()
        else:
            self.defer_async(payload, reply)


class RoundTable(EntityTable):
    """An entity table: ("as", ((asker, entity_id, command), ...)) to any entity routes each command to that entity
    from that asker, all handled in one round (one table commit); ("write", payload) persists the payload as the
    entity's event and replies ("ok", payload) once durable; ("read",) replies ("state", state) once durable."""

    def command_handler(self, entity_id: str, state: Any, command: Any) -> list[Any]:
        if command[0] == "as":
            for asker, entity, inner in command[1]:
                self.context.route(asker, f"{self.path}/{entity}", inner)
            return []
        if command[0] == "write":
            self.reply(self.sender, ("ok", command[1]))
            return [command[1]]
        self.reply(self.sender, ("state", state))
        return []

    def event_handler(self, state: Any, event: Any) -> Any:
        return event


class RoundConfirmer(DurableDelivery):
    """("deliver", destination, n): n deliveries of ("parcel", id) to `destination`, replying ("delivered", ids) once
    journaled; ("as", ((asker, command), ...)): each command routed to itself from that asker, all handled before the
    host's next group commit (one round: their confirms journaled as one DeliveriesConfirmed); ("confirm", id):
    confirm_delivery(id), replying ("confirmed", id, its result) at once; ("ping",): "pong" at once; ("unconfirmed",):
    the unconfirmed ids."""

    redeliver_interval = 30.0  # (nothing is resent within a test)

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        kind = message[0]
        if kind == "as":
            for asker, command in message[1]:
                self.context.route(asker, self.path, command)
        elif kind == "deliver":
            ids = tuple(self.deliver(message[1], lambda i: ("parcel", i)) for _ in range(message[2]))
            self.defer_async(ids, lambda e: self.tell(sender, ("delivered", e)))
        elif kind == "confirm":
            self.tell(sender, ("confirmed", message[1], self.confirm_delivery(message[1])))
        elif kind == "ping":
            self.tell(sender, "pong")
        else:
            self.tell(sender, tuple(self.unconfirmed_ids()))

"""A persistent actor for the validation tests (importable by module path, as multiproc requires)."""

from __future__ import annotations

import actors
from persistence import PersistentActor


class Tally(PersistentActor):
    """Persists each int it gets and replies the running total."""

    def pre_start(self) -> None:
        self.total = 0

    def receive_recover(self, event) -> None:
        if isinstance(event, int):
            self.total += event

    def receive_command(self, message, sender) -> None:
        def applied(event: int) -> None:
            self.total += event
            self.tell(sender, self.total)

        self.persist(message, applied)


class Connector(actors.Actor):
    """On ("connect", port) tries actors.connect(port) from inside its actor process and replies the outcome."""

    def receive(self, message, sender) -> None:
        try:
            actors.connect(message[1], timeout=5).close()
        except Exception as e:  # the test wants whatever happened, as text
            self.tell(sender, f"{type(e).__name__}: {e}")
        else:
            self.tell(sender, "connected")


class Ticking(actors.Actor):
    """On ("every", interval) schedules a repeating tick and replies "scheduled" or the error."""

    def receive(self, message, sender) -> None:
        if isinstance(message, tuple) and message[0] == "every":
            try:
                self.schedule_repeatedly(message[1], "tick")
            except Exception as e:  # the test wants whatever happened, as text
                self.tell(sender, f"{type(e).__name__}: {e}")
            else:
                self.tell(sender, "scheduled")


class NeedsArgument(actors.Actor):
    """Cannot be made without an argument: its spawn fails with a TypeError from __init__."""

    def __init__(self, x: int) -> None:
        super().__init__()
        self.x = x


class Greeter(actors.Actor):
    """Tells /user/echoes/1 a Ping from pre_start; answers "got" with what came back (None until it came)."""

    def pre_start(self) -> None:
        from tests.actors.sample import Ping

        self.got = None
        self.tell("/user/echoes/1", Ping(1))

    def receive(self, message, sender):
        if message == "got":
            self.tell(sender, self.got)
        else:
            self.got = message


class FailsToStart(actors.Actor):
    """Its pre_start raises: the spawn fails with that error."""

    def pre_start(self) -> None:
        raise ValueError("cannot start: the database it needs is down")


class RefusesToStart(actors.Actor):
    """Its constructor raises RuntimeError(`why`): its spawn fails with that text (whatever words it quotes)."""

    def __init__(self, why: str) -> None:
        super().__init__()
        raise RuntimeError(why)

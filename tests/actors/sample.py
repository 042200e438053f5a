"""Actors and messages used by the actors tests (importable by module path, as multiproc requires)."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from thespian.actors import Actor as ThespianActor
from thespian.actors import ActorExitRequest

import actors
from actors.host import HostActor


@dataclass(frozen=True)
class Ping:
    n: int


@dataclass(frozen=True)
class Pong:
    n: int
    by: str


class Echo(actors.Actor):
    """Replies Pong(n, own path) to Ping(n); forwards ("fwd", path, msg); raises on "boom"; ("route-of", path)
    replies route_of(path)."""

    def pre_start(self) -> None:
        self.seen = 0

    def receive(self, message, sender):
        self.seen += 1
        if isinstance(message, Ping):
            self.tell(sender, Pong(message.n, self.path))
        elif message == "boom":
            raise RuntimeError("boom requested")
        elif message == "count":
            self.tell(sender, self.seen)
        elif message == "where":
            self.tell(sender, (self.path, os.getpid(), self.context.key, self.seen))  # the context is the Host
        elif isinstance(message, tuple) and message[0] == "where":
            self.tell(sender, (message[1], os.getpid()))  # ("where", n): the ask's number and this process
        elif isinstance(message, tuple) and message[0] == "route-of":
            self.tell(sender, route_of(self.context, message[1]))
        elif isinstance(message, tuple) and message[0] == "fwd":
            self.tell(message[1], message[2], sender=sender)
        elif message == "stop":
            self.stop()
        elif isinstance(message, tuple) and message[0] == "send-unpicklable":
            # A plain dict passes the per-type check at tell; its content fails when the batch is pickled.
            self.tell(message[1], {"callback": lambda: None})
            self.tell(message[1], Ping(99))


class MarksItsStop(Echo):
    """An Echo whose post_stop takes a second, then creates the file <directory>/<entity id>."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def post_stop(self) -> None:
        time.sleep(1.0)
        open(os.path.join(self.directory, self.path.rsplit("/", 1)[-1]), "w").close()


class SlowToStop(Echo):
    """An Echo whose post_stop takes a second when its id starts with "slow": its host exits after the others."""

    def post_stop(self) -> None:
        if self.path.rsplit("/", 1)[-1].startswith("slow"):
            time.sleep(1.0)


class Gated(Echo):
    """An Echo that on ("gate", started, opened) creates the file `started`, then waits in the message until the
    file `opened` exists (60 s at most): its host reads nothing meanwhile."""

    def receive(self, message, sender):
        if isinstance(message, tuple) and message[0] == "gate":
            wait_at_gate(message[1], message[2])
        else:
            super().receive(message, sender)


def route_of(context: actors.ActorContext, path: str) -> str:
    """The key of the process this host sends `path`'s messages to now, "guardian" when the guardian takes them (it
    holds them for a restarting host, or the path is unknown here, as Host.route does): what a test waits on to
    know which way a host's next send goes."""
    hit = context.resolve(path)
    return "guardian" if hit is None or hit == context.resolve("/system/guardian") else hit[0]


def wait_at_gate(started: str, opened: str) -> None:
    """Create the file `started`, then wait until the file `opened` exists (60 s at most)."""
    open(started, "w").close()
    deadline = time.monotonic() + 60
    while not os.path.exists(opened) and time.monotonic() < deadline:
        time.sleep(0.01)


@dataclass(frozen=True)
class Seq:
    """One numbered message of a stream from `source`."""

    source: str
    i: int


@dataclass(frozen=True)
class Produce:
    """Ask a Producer to send `count` Seq messages to `target`."""

    target: str
    count: int


class Producer(actors.Actor):
    """Sends a numbered stream to a target in one handler (exercises the size cap and FIFO)."""

    def receive(self, message, sender):
        if isinstance(message, Produce):
            for i in range(message.count):
                self.tell(message.target, Seq(self.path, i))
            self.tell(message.target, ("end", sender))


class Checker(actors.Actor):
    """Counts a stream and its reorderings; reports (received, out_of_order) to whoever asked at the end."""

    def pre_start(self):
        self.expected = {}
        self.received = 0
        self.out_of_order = 0

    def receive(self, message, sender):
        if isinstance(message, Seq):
            want = self.expected.get(message.source, 0)
            if message.i != want:
                self.out_of_order += 1
            self.expected[message.source] = message.i + 1
            self.received += 1
        elif isinstance(message, tuple) and message[0] == "end":
            self.tell(message[1], (self.received, self.out_of_order))


@dataclass(frozen=True)
class After:
    """Schedule `message` back to self after `delay`; report ticks to `report`."""

    delay: float
    report: str
    repeat: bool = False
    cancel_after: int = 0


class Ticker(actors.Actor):
    """Timer behaviour: forwards each tick to `report`; cancels after N ticks when asked."""

    def pre_start(self):
        self.timer = None
        self.ticks = 0
        self.report = None
        self.cancel_after = 0

    def receive(self, message, sender):
        if isinstance(message, After):
            self.report = message.report
            self.cancel_after = message.cancel_after
            if message.repeat:
                self.timer = self.schedule_repeatedly(message.delay, "tick")
            else:
                self.timer = self.schedule_once(message.delay, "tick")
        elif message == "tick":
            self.ticks += 1
            self.tell(self.report, ("tick", self.ticks))
            if self.cancel_after and self.ticks >= self.cancel_after:
                self.timer.cancel()
        elif message == "cancel":
            self.timer.cancel()
            self.tell(sender, "cancelled")
        elif message == "boom":
            raise RuntimeError("boom")


class Lifecycle(actors.Actor):
    """Reports its lifecycle to the path given as its constructor argument."""

    def __init__(self, report: str):
        self.report = report

    def pre_start(self):
        self.tell(self.report, ("started", self.path))

    def post_stop(self):
        self.tell(self.report, ("stopped", self.path))

    def receive(self, message, sender):
        if message == "boom":
            raise RuntimeError("boom")
        if message == "stop":
            self.stop()
        self.tell(sender, ("got", message))


@dataclass
class Mutable:
    value: int


@dataclass(frozen=True)
class Holder:
    thing: object


class Counting(actors.Actor):
    """Reports {"pending": n} through stats(), where n is set by ("pending", n)."""

    def pre_start(self) -> None:
        self.pending = 0

    def receive(self, message, sender):
        if isinstance(message, tuple) and message[0] == "pending":
            self.pending = message[1]
            self.tell(sender, "ok")

    def stats(self) -> dict[str, int]:
        return {"pending": self.pending}


class ForgetfulTicker(Ticker):
    """A Ticker whose host believes a wakeup is armed that Thespian lost (as in a tx-only drain)."""

    def receive(self, message, sender):
        if message == "lose-a-wakeup":
            import time

            self.context._armed.add(time.monotonic() - 10.0)  # the Host: armed, long due, never coming
            self.tell(sender, "lost")
        else:
            super().receive(message, sender)


class HostForker(ThespianActor):
    """A raw Thespian actor that creates a host process and never initialises it; replies its own pid."""

    def receiveMessage(self, message, sender):
        if message == "fork":
            self.createActor("actors.host.HostActor")
            self.send(sender, os.getpid())
        elif message == "fork slow to exit":
            self.createActor("tests.actors.sample.SlowExiting")
            self.send(sender, os.getpid())
        elif message == "fork slow and exit":  # its exit begins before the new child's handshake lands
            self.createActor("tests.actors.sample.SlowStartingHost")
            self.send(sender, os.getpid())
            self.send(self.myAddress, ActorExitRequest())


class SlowExiting(ThespianActor):
    """Takes two seconds to exit (as a host flushing its journal does)."""

    def receiveMessage(self, message, sender):
        if isinstance(message, ActorExitRequest):
            time.sleep(2.0)


class SlowStartingHost(HostActor):
    """A host process that takes a second to start (as under load): its handshake reaches its parent late."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        time.sleep(1.0)


class Relay(Checker):
    """On Produce sends Seq(own path, 0..count-1) to the target; checks the Seq streams it gets; "report"
    answers (received, out_of_order)."""

    def receive(self, message, sender):
        if isinstance(message, Produce):
            for i in range(message.count):
                self.tell(message.target, Seq(self.path, i))
        elif message == "report":
            self.tell(sender, (self.received, self.out_of_order))
        else:
            super().receive(message, sender)


class Sleeper(actors.Actor):
    """("sleep", seconds, started, woke): creates the file `started`, sleeps in the message (a host stuck in it),
    then creates `woke`; replies "done" to anything else."""

    def receive(self, message, sender):
        if isinstance(message, tuple) and message[0] == "sleep":
            open(message[2], "w").close()
            time.sleep(message[1])
            open(message[3], "w").close()
        else:
            self.tell(sender, "done")


class Recorder(actors.Actor):
    """Tells ("got", its path, message) to the probe at `probe` for every message it receives."""

    def __init__(self, probe: str) -> None:
        self.probe = probe

    def receive(self, message, sender):
        self.tell(self.probe, ("got", self.path, message))


class RecorderTable(actors.Actor):
    """A table of entities (receive_entities): an entity forwards ("fwd", path, message) and tells the probe at
    `probe` ("got", its path, message) for anything else. To the table's path: "calls" replies with how many
    messages each receive_entities call took since the last "calls"; ("gate", started, opened) as Gated's;
    ("route-of", path) as Echo's."""

    def __init__(self, probe: str) -> None:
        self.probe = probe
        self.calls: list[int] = []

    def receive_entities(self, messages):
        self.calls.append(len(messages))
        for entity_id, message, sender in messages:
            if isinstance(message, tuple) and message[0] == "fwd":
                self.tell(message[1], message[2], sender=sender)
            else:
                self.tell(self.probe, ("got", f"{self.path}/{entity_id}", message))

    def receive(self, message, sender):
        if message == "calls":
            calls, self.calls = self.calls, []
            self.tell(sender, calls)
        elif isinstance(message, tuple) and message[0] == "gate":
            wait_at_gate(message[1], message[2])
        elif isinstance(message, tuple) and message[0] == "route-of":
            self.tell(sender, route_of(self.context, message[1]))
        else:
            self.tell(self.probe, ("got", self.path, message))


class TellsOnStop(actors.Actor):
    """Tells the probe at `probe` ("start", its path), ("got", its path, message) and ("stop", its path); its
    post_stop also tells `then` (a path) "from post_stop"."""

    def __init__(self, probe: str, then: str) -> None:
        self.probe = probe
        self.then = then

    def pre_start(self):
        self.tell(self.probe, ("start", self.path))

    def receive(self, message, sender):
        self.tell(self.probe, ("got", self.path, message))

    def post_stop(self):
        self.tell(self.probe, ("stop", self.path))
        self.tell(self.then, "from post_stop")


class TellsOnStopTable(TellsOnStop):
    """TellsOnStop as a table of entities (receive_entities): ("got", entity path, message) per entity message."""

    def receive_entities(self, messages):
        for entity_id, message, _ in messages:
            self.tell(self.probe, ("got", f"{self.path}/{entity_id}", message))


class SchedulesOnStop(actors.Actor):
    """On "stop" stops; its post_stop schedules a repeating and a one-shot timer and tells the probe at `probe`
    ("scheduled in post_stop", [timer.active of each])."""

    def __init__(self, probe: str) -> None:
        self.probe = probe

    def receive(self, message, sender):
        if message == "stop":
            self.stop()
        else:
            self.tell(self.probe, ("got", self.path, message))

    def post_stop(self):
        timers = [self.schedule_repeatedly(0.01, "tick"), self.schedule_once(0.01, "tick")]
        self.tell(self.probe, ("scheduled in post_stop", [t.active for t in timers]))


class ExitsInPreStart(actors.Actor):
    """Its pre_start ends its process (os._exit, before the host reports ready) while the file `marker` exists;
    "die" ends the process at once; anything else is echoed."""

    def __init__(self, marker: str) -> None:
        self.marker = marker

    def pre_start(self):
        if os.path.exists(self.marker):
            os._exit(3)

    def receive(self, message, sender):
        if message == "die":
            os._exit(3)
        self.tell(sender, message)


class FailsLater(Echo):
    """On ("fail-in", seconds): arms a timer, answers "armed"; when it fires, raises (an error nobody asked about)."""

    def receive(self, message, sender):
        if isinstance(message, tuple) and message[:1] == ("fail-in",):
            self.schedule_once(message[1], "fail-now")
            self.tell(sender, "armed")
        elif message == "fail-now":
            raise RuntimeError("failed on its timer")
        else:
            super().receive(message, sender)


class CountsDirectories(Echo):
    """An Echo that records the epoch of every directory its host installs; "epochs" replies with the list."""

    def pre_start(self) -> None:
        super().pre_start()
        self.epochs: list[int] = []
        host = self.context  # (the Host: its update_routes is what a DirectoryUpdate calls)
        install = host.update_routes

        def recording(routes, epoch, my_address):
            self.epochs.append(epoch)
            install(routes, epoch, my_address)

        host.update_routes = recording
        # The epoch its host had installed when it answered each status request ("stats epochs" replies with them).
        self.stats_epochs: list[int] = []
        stats = host.stats

        def answering(token):
            self.stats_epochs.append(self.epochs[-1] if self.epochs else 0)
            return stats(token)

        host.stats = answering

    def receive(self, message, sender):
        if message == "epochs":
            self.tell(sender, list(self.epochs))
        elif message == "stats epochs":
            self.tell(sender, list(self.stats_epochs))
        else:
            super().receive(message, sender)


class RouteCache(actors.Actor):
    """Replies Pong(n, path) to Ping(n) (an ask's reply, to a reply path of its own); "cached": how many paths its
    host's router has cached, (others, clients' reply paths); ("send-nowhere", n): tells "x" to n paths no actor
    serves, then replies how many paths the router has cached (host internals: tests/actors/test_memory_bounds.py)."""

    def receive(self, message, sender):
        if isinstance(message, Ping):
            self.tell(sender, Pong(message.n, self.path))
        elif message == "cached":
            router = self.context.router
            self.tell(sender, (len(router._cache), len(router._temp)))
        elif isinstance(message, tuple) and message[0] == "send-nowhere":
            for n in range(message[1]):
                self.tell(f"/user/nowhere/{message[2]}-{n}", "x")
            self.tell(sender, len(self.context.router._cache))

"""A sender that streams numbered messages to several targets with Host.scatter (importable by module path, as
multiproc requires): for tests/actors/test_scatter_handover.py."""

from __future__ import annotations

from dataclasses import dataclass

import actors
from actors.messages import Scatter, ShardSet
from actors.transport import SHARDED
from tests.actors.sample import Echo, Seq, route_of, wait_at_gate


@dataclass(frozen=True)
class Numbered(Scatter):
    """("fwd", probe, Seq(targets[k], numbers[k])) for each target k, in columns: one entry per destination host."""

    targets: list[str]
    numbers: list[int]
    probe: str

    def items(self) -> list[tuple[str, object]]:
        """One forwarded Seq per target, in order."""
        probe = self.probe
        return [(t, ("fwd", probe, Seq(t, n))) for t, n in zip(self.targets, self.numbers, strict=True)]


@dataclass(frozen=True)
class ScatterStream:
    """Ask a ScatterStreamer to send numbers 0..count-1 to every one of `targets` (Echo entities forward them to
    `probe`), `per_tick` numbers each every `interval` seconds, every tick's as one scatter."""

    targets: tuple[str, ...]
    probe: str
    count: int
    per_tick: int = 5
    interval: float = 0.002


def pick(indices: list[int] | None, *columns: list) -> list[list]:
    """The entries at `indices` of each column (all of them for None), as spark_bridge's _pick."""
    if indices is None:
        return list(columns)
    return [[column[k] for k in indices] for column in columns]


class ScatterStreamer(actors.Actor):
    """Streams a ScatterStream by timer; "pause" stops the timer and replies how many numbers each target was sent,
    ("resume", burst, watched) goes on: `burst` numbers at once, then none until this host routes `watched` to a
    process (not the guardian), then the rest by timer; ("route-of", path) replies route_of(path) (which way this
    host sends to `path` now). ("resume", burst, watched, (mark, after)) creates the file `mark` once the rest
    goes to `watched`'s process and `after` numbers in all were sent (or parked: see actors/handover.py); with
    (mark, after, prefix), it then installs a directory without `prefix` (drop_route) and creates `mark` 50 numbers
    later;
    ("spray", targets) sends number -1 to each of `targets` in one scatter."""

    def receive(self, message, sender):
        if isinstance(message, ScatterStream):
            self.job, self.next, self.watched, self.mark = message, 0, None, None
            self.timer = self.schedule_repeatedly(self.job.interval, "tick")
            self.tell(sender, "started")
        elif message == "tick":
            if self.watched is not None and route_of(self.context, self.watched) == "guardian":
                return
            self.watched = None
            self._tick()
            if self.mark is not None and self.next >= self.mark[1]:
                if len(self.mark) > 2 and self.mark[2] is not None:
                    drop_route(self.context, self.mark[2])
                    self.mark = (self.mark[0], self.next + 50)
                    return
                open(self.mark[0], "w").close()
                self.mark = None
        elif message == "pause":
            self.timer.cancel()
            self.tell(sender, self.next)
        elif isinstance(message, tuple) and message[0] == "resume":
            self._tick(message[1])
            self.watched = message[2]
            self.mark = message[3] if len(message) > 3 else None
            self.timer = self.schedule_repeatedly(self.job.interval, "tick")
            self.tell(sender, "resumed")
        elif isinstance(message, tuple) and message[0] == "route-of":
            self.tell(sender, route_of(self.context, message[1]))
        elif isinstance(message, tuple) and message[0] == "spray":
            targets = list(message[1])  # number -1 to each, in one scatter
            ns = [-1] * len(targets)
            self.context.scatter(self.path, targets, lambda idx: Numbered(*pick(idx, targets, ns), self.job.probe))
            self.tell(sender, "sprayed")

    def _tick(self, many: int | None = None) -> None:
        job = self.job
        numbers = range(self.next, min(job.count, self.next + (many or job.per_tick)))
        if not numbers:
            return  # (a tick queued before the timer was cancelled)
        targets = [t for _ in numbers for t in job.targets]  # (a/x, b/x, a/x, b/x, ...: the first is a's)
        ns = [n for n in numbers for _ in job.targets]
        self.context.scatter(self.path, targets, lambda idx: Numbered(*pick(idx, targets, ns), job.probe))
        self.next = numbers.stop
        if self.next >= job.count:
            self.timer.cancel()


def drop_route(host, prefix: str) -> None:
    """Install at this host, as a DirectoryUpdate does, the directory it has without `prefix`'s route: one the
    guardian published before it took the HostReady of `prefix`'s host (a route learned from that host's first
    message is then dropped). The test's stand-in for that order, which the guardian picks."""
    routes = {p: ShardSet(tuple(a for _, a in r[1])) if r[0] is SHARDED else r[1]
              for p, r in host.router.routes.items() if p != prefix}
    host.update_routes(routes, host.router.epoch + 1, host.router.routes[host.key][1])


class SlowToStart(Echo):
    """An Echo whose start waits at a gate: pre_start creates the file `started`, then waits until `opened` exists
    (60 s at most), its host not ready meanwhile."""

    def __init__(self, started: str, opened: str) -> None:
        self.started, self.opened = started, opened

    def pre_start(self) -> None:
        super().pre_start()
        wait_at_gate(self.started, self.opened)


class GreetsWhileStarting(Echo):
    """An Echo that tells `greet` "hello" from pre_start, after waiting at the gate (started, opened): its host's
    first message, sent with its HostReady, teaches `greet`'s host the route here ahead of the directory."""

    def __init__(self, greet: str, started: str, opened: str) -> None:
        self.greet, self.started, self.opened = greet, started, opened

    def pre_start(self) -> None:
        super().pre_start()
        wait_at_gate(self.started, self.opened)
        self.tell(self.greet, "hello")

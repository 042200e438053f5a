"""Staged runs: list what the bridges hold staged but unreleased, and discard it (an operator's tools).

A run's batches stay staged until its driver releases (Release) or discards (Discard) them. A driver that
died in between sends neither: `staged_runs` shows such runs (per feed id and run: batches, rows, how long
idle), `discard_staged` discards one, or every run idle for at least a given time. The bridges do the
latter by themselves after their `staged_ttl` (start_bridge). A discarded run's late Release fails its
feed with a FeedError naming the run: nothing is lost silently. `reprise spark staged|discard` runs these.
"""

from __future__ import annotations

from typing import cast

import actors
from spark_bridge.bridge import BRIDGE_PATH, BRIDGES_PATH
from spark_bridge.feed import FeedError, _address
from spark_bridge.messages import DiscardStaged, GetStagedRuns, StagedDiscarded, StagedRun, StagedRuns

_SERVING = ("running", "starting", "restarting", "backoff")


def staged_runs(system: object, bridges: list[str] | None = None, timeout: float = 10.0) -> list[StagedRun]:
    """The staged runs of every bridge (or of `bridges`), the longest idle first.

    `system`: an actors.System, an admin port or "host:port".
    """
    with _Attached(system) as s:
        runs = []
        for bridge in _bridges(s, bridges):
            reply = s.ask(bridge, GetStagedRuns(), timeout=timeout)
            runs += cast(StagedRuns, reply).runs
    return sorted(runs, key=lambda r: (-r.idle_seconds, r.feed_id, r.run, r.bridge))


def discard_staged(system: object, feed_id: str | None = None, run: str | None = None,
                   idle_for: float | None = None, bridges: list[str] | None = None,
                   timeout: float = 10.0) -> list[StagedRun]:
    """Discard, durably, the staged batches of run `run` of `feed_id`, or of every run (of `feed_id`, if
    given) idle for at least `idle_for` seconds, at every bridge (or at `bridges`); the runs discarded.

    A late Release of a discarded run fails its feed with a FeedError ("run it again"), so discarding a run
    whose driver is merely slow loses nothing silently; still, prefer `idle_for` well above your jobs' pauses.
    A node bridge (start_bridges) asks the coordinator first: a run it had decided (its driver died after the
    decision) is released instead, and not returned; while the coordinator does not answer, the call times out.
    """
    return discard_or_release(system, feed_id, run, idle_for, bridges, timeout)[0]


def discard_or_release(system: object, feed_id: str | None = None, run: str | None = None,
                       idle_for: float | None = None, bridges: list[str] | None = None,
                       timeout: float = 10.0) -> tuple[list[StagedRun], list[StagedRun]]:
    """discard_staged's work: (the runs discarded, the decided runs released instead), for the CLI to show both."""
    message = DiscardStaged(feed_id, run, idle_for)  # (refuses a call that would discard every run)
    with _Attached(system) as s:
        discarded: list[StagedRun] = []
        released: list[StagedRun] = []
        for bridge in _bridges(s, bridges):
            reply = cast(StagedDiscarded, s.ask(bridge, message, timeout=timeout))
            discarded += reply.runs
            released += reply.released
    return discarded, released


def _bridges(system: actors.System, bridges: list[str] | None) -> list[str]:
    """`bridges` checked, or every bridge serving now (the coordinator first)."""
    hosts = system.status().hosts
    if bridges is None:
        found = sorted(p for p, h in hosts.items() if (p == BRIDGE_PATH or p.startswith(BRIDGES_PATH + "/"))
                       and h.state in _SERVING)
        if not found:
            raise FeedError(f"no Spark bridge runs in this actor system ({BRIDGE_PATH} is "
                            f"{hosts[BRIDGE_PATH].state if BRIDGE_PATH in hosts else 'not started'}): nothing "
                            "can be staged there; start one with spark_bridge.start_bridge(system)")
        return found
    if isinstance(bridges, str):
        raise TypeError(f"bridges must be a list of bridge paths, got the string {bridges!r}: pass [{bridges!r}]")
    for b in bridges:
        if b not in hosts or not (b == BRIDGE_PATH or b.startswith(BRIDGES_PATH + "/")):
            raise FeedError(f"{b!r} is not a bridge of this actor system (its bridges: "
                            f"{', '.join(p for p in sorted(hosts) if p == BRIDGE_PATH or p.startswith(BRIDGES_PATH + '/')) or 'none'})")
    return list(bridges)


class _Attached:
    """The System given, or one attached for the call (and closed after it)."""

    def __init__(self, system: object) -> None:
        self.raw = system
        self.system: actors.System | None = None

    def __enter__(self) -> actors.System:
        if isinstance(self.raw, actors.System):
            return self.raw
        host, port = _address(self.raw)
        self.system = actors.connect(port, host=host)
        return self.system

    def __exit__(self, *exc: object) -> None:
        if self.system is not None:
            self.system.close()

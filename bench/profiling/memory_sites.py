"""Memory a long-running local system keeps per round of the same work (the memory audit): the allocation sites
that grew from round 2 to round 4 (round 1 warms caches), per message.

    PYTHONPATH=<tree> python bench/profiling/memory_sites.py SCENARIO [N]

SCENARIO: `entities` (N commands to N new persistent entities a round, passivated after 0.2 s), `one` (N commands
to one persistent entity), `dead` (N messages to paths nobody serves), `asks` (N asks of one actor), `timers`
(N receive timeouts rescheduled by one entity).
"""

from __future__ import annotations

import gc
import itertools
import sys
import tempfile
import time
import tracemalloc
from typing import Any

import actors
from persistence import PersistentActor

_ids = itertools.count()


class Counter(PersistentActor):
    """Persists every "e" (its handler counts it); "n": the count; "t": reschedules a 60 s timer."""

    def pre_start(self) -> None:
        self.n = 0

    def receive_recover(self, event: Any) -> None:
        self.n += 1

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "e":
            self.persist_async("e", self._counted)
        elif message == "n":
            self.tell(sender, self.n)
        elif message == "t":  # (a receive timeout: cancelled and scheduled again at every message)
            timer = getattr(self, "timer", None)
            if timer is not None:
                timer.cancel()
            self.timer = self.schedule_once(60.0, "timeout")
            self.n += 1

    def _counted(self, _: Any) -> None:
        self.n += 1


def _round(system: actors.System, scenario: str, n: int) -> None:
    """One round of `scenario`'s work, waited for."""
    if scenario == "entities":
        first = next(_ids) * n
        system.tell_many([(f"/user/e/{first + i}", "e") for i in range(n)])
        last = f"/user/e/{first + n - 1}"
        while system.ask(last, "n") < 1:
            time.sleep(0.05)
        time.sleep(0.6)  # (passivate_after 0.2 s: the round's entities are gone)
    elif scenario in ("one", "timers"):
        before = system.ask("/user/one", "n")
        system.tell_many([("/user/one", "e" if scenario == "one" else "t")] * n)
        while system.ask("/user/one", "n") < before + n:
            time.sleep(0.05)
    elif scenario == "dead":
        first = next(_ids) * n
        system.tell_many([(f"/user/nobody/{first + i}", "x") for i in range(n)])
        while system.dead_letters().count < first + n:  # (every round's recorded)
            time.sleep(0.05)
    elif scenario == "asks":
        for _ in range(n):
            system.ask("/user/one", "n")


def main(scenario: str, n: int) -> None:
    """Run four rounds; print the sites that grew between rounds 2 and 4."""
    with tempfile.TemporaryDirectory() as d, actors.start("local", journal=f"sqlite:///{d}/j.db",
                                                         snapshot_store=f"sqlite:///{d}/s.db") as system:
        system.spawn(Counter, "/user/e", entities=True, passivate_after=0.2)
        system.spawn(Counter, "/user/one")
        _round(system, scenario, n)
        _round(system, scenario, n)
        gc.collect()
        tracemalloc.start(8)
        before = tracemalloc.take_snapshot()
        _round(system, scenario, n)
        _round(system, scenario, n)
        gc.collect()
        stats = tracemalloc.take_snapshot().compare_to(before, "traceback")
        total = sum(s.size_diff for s in stats)
        print(f"{scenario}: {total / (2 * n):,.1f} bytes kept per message over 2 rounds of {n:,}")
        for s in stats[:6]:
            if s.size_diff > 1000:
                print(f"  {s.size_diff / (2 * n):8.1f} B/msg  {s.count_diff:+d} objects")
                for line in s.traceback.format()[-6:]:
                    print("      " + line)


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 20_000)

"""A client's own calls: System.tell and System.ask throughput from the process that started the system, to an
echo host in another process (multiproc), and on the in-process base (local). Rounds interleaved; medians.

Each round: TELLS tells of a small message (then one ask, so that all were handled), and ASKS sequential asks.
For the client's hot path (actors/system.py: _send, _transmit, _listen, and actors/interrupts.py's guard).

    PYTHONPATH=$PWD python bench/profiling/client_calls.py [rounds] [tells] [asks]
"""

from __future__ import annotations

import statistics
import sys
import time

import actors
from tests.actors.sample import Echo, Ping, Pong


def one_round(system: actors.System, tells: int, asks: int) -> tuple[float, float]:
    """(tells/s, asks/s) of one round."""
    started = time.perf_counter()
    for n in range(tells):
        system.tell("/user/echo", Ping(n))
    system.ask("/user/echo", "count", timeout=120)
    tell_rate = tells / (time.perf_counter() - started)
    started = time.perf_counter()
    for n in range(asks):
        reply = system.ask("/user/echo", Ping(n), timeout=30)
        assert isinstance(reply, Pong) and reply.n == n, reply
    return tell_rate, asks / (time.perf_counter() - started)


def main(rounds: int, tells: int, asks: int) -> None:
    """Print the medians (and every round) per base."""
    with actors.start("multiproc") as multiproc, actors.start("local") as local:
        systems = {"multiproc": multiproc, "local": local}
        for system in systems.values():
            system.spawn(Echo, "/user/echo")
            one_round(system, 200, 200)  # warm-up
        figures: dict[str, list[tuple[float, float]]] = {name: [] for name in systems}
        for _ in range(rounds):
            for name, system in systems.items():
                figures[name].append(one_round(system, tells, asks))
    for name, rows in figures.items():
        tell_rates, ask_rates = [r[0] for r in rows], [r[1] for r in rows]
        print(f"{name}: tells/s median {statistics.median(tell_rates):,.0f} (rounds {[round(r) for r in tell_rates]}); "
              f"asks/s median {statistics.median(ask_rates):,.0f} (rounds {[round(r) for r in ask_rates]})")


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [7, 3000, 2000][len(args):]))

"""Transport benchmark: Reprise's batched transport vs raw Thespian multiprocTCPBase, in one run.

    .venv/bin/python -m bench.transport [--messages 200000] [--rally 2000] [--raw-messages 3000] [--json]

One way: an actor sends N small messages (a frozen dataclass with an int and 10 bytes) to an actor in
another OS process, which checks their order. Round trips: strictly sequential request/response
between two actors in different processes. Raw Thespian uses default settings, one Thespian message
per send, as the reference notes measured (about 300 msgs/s one way, 1,200 round trips/s).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

import actors
from bench.actors_fixtures import Flood, Rallier, Rally, Sink, Source


def reprise_figures(messages: int, rally: int, rounds: int) -> dict:
    """One-way msgs/s (median of rounds) and round trips/s through Reprise hosts on multiproc."""
    with actors.start("multiproc") as system:
        system.spawn(Source, "/user/source")
        system.spawn(Sink, "/user/sink")
        system.spawn(Rallier, "/user/rallier")
        system.ask("/user/source", Flood("/user/sink", 1000), timeout=60)  # warm-up
        rates = []
        for _ in range(rounds):
            started = time.perf_counter()
            count, disorder = system.ask("/user/source", Flood("/user/sink", messages), timeout=300)
            elapsed = time.perf_counter() - started
            assert count == messages and disorder == 0, (count, disorder)
            rates.append(messages / elapsed)
        seconds = system.ask("/user/rallier", Rally("/user/sink", rally), timeout=300)
    return {"one_way_msgs_per_s": statistics.median(rates), "one_way_rounds": [round(r) for r in rates],
            "round_trips_per_s": rally / seconds, "rtt_us": seconds / rally * 1e6}


def raw_figures(messages: int, rally: int) -> dict:
    """The same two measurements on raw Thespian multiprocTCPBase with default settings."""
    from thespian.actors import ActorSystem

    os.environ.setdefault("THESPIAN_BASE_IPADDR", "127.0.0.1")
    port = actors.free_port()
    asys = ActorSystem("multiprocTCPBase", {"Admin Port": port}, logDefs=None, transientUnique=True)
    try:
        source = asys.createActor("bench.actors_fixtures.RawSource")
        sink = asys.createActor("bench.actors_fixtures.RawSink")
        asys.ask(source, ("flood", sink, 100), 60)  # warm-up
        started = time.perf_counter()
        count = asys.ask(source, ("flood", sink, messages), 600)
        elapsed = time.perf_counter() - started
        assert count == messages, count
        seconds = asys.ask(source, ("rally", sink, rally), 600)
    finally:
        asys.shutdown()
    return {"one_way_msgs_per_s": messages / elapsed, "round_trips_per_s": rally / seconds,
            "rtt_us": seconds / rally * 1e6}


def main(argv: list[str] | None = None) -> dict:
    """Run both, print a table with ratios, return the figures."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rally", type=int, default=2_000)
    parser.add_argument("--raw-messages", type=int, default=3_000)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    reprise = reprise_figures(args.messages, args.rally, args.rounds)
    raw = raw_figures(args.raw_messages, args.rally)
    rows = [
        ("one way, small messages (msgs/s)", reprise["one_way_msgs_per_s"], raw["one_way_msgs_per_s"]),
        ("request/response round trips/s", reprise["round_trips_per_s"], raw["round_trips_per_s"]),
    ]
    result = {"reprise": reprise, "raw_thespian": raw, "messages": args.messages, "raw_messages": args.raw_messages}
    if args.json:
        print(json.dumps(result))
        return result
    print(f"transport benchmark: {args.messages:,} msgs one way (median of {args.rounds}), "
          f"{args.rally:,} round trips; raw Thespian {args.raw_messages:,} msgs, default settings; "
          f"{os.cpu_count()} cores")
    print("| measurement | Reprise | raw Thespian | ratio |\n|---|---:|---:|---:|")
    for name, mine, theirs in rows:
        print(f"| {name} | {mine:,.0f} | {theirs:,.0f} | {mine / theirs:,.1f}x |")
    print(f"| round-trip latency (us) | {reprise['rtt_us']:,.0f} | {raw['rtt_us']:,.0f} | |")
    target = 200_000
    verdict = "met" if reprise["one_way_msgs_per_s"] >= target else "NOT met"
    print(f"target >= {target:,} msgs/s one way: {verdict}")
    return result


if __name__ == "__main__":
    main(sys.argv[1:])

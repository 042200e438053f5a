"""`reprise spark staged|discard`: the Spark bridges' staged runs (staged, never released), and discarding them.

spark_bridge is a layer above actors: its functions are named, not imported (as cluster_node does for the
bridges of a cluster file), and run against the system this command attaches to.
"""

from __future__ import annotations

import argparse
import importlib
import json
import re
import time
from collections.abc import Callable
from typing import Any

from .cli_error import CliError
from .paths import printable
from .system_commands import _tls_options

API = "spark_bridge.staged"
_UNITS = {"": 1.0, "s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0}


def duration(text: str) -> float:
    """Seconds from "90", "90s", "30m", "2h" or "1d" (argparse type: a bad one is a usage error naming it)."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*", text)
    if match is None:
        raise argparse.ArgumentTypeError(f"{text!r} is not a duration: give seconds, or a number with s, m, h "
                                         "or d, e.g. 90, 30m, 2h, 1d")
    return float(match.group(1)) * _UNITS[match.group(2)]


def _api() -> Any:  # Any: spark_bridge's module (a layer above; not imported statically)
    try:
        return importlib.import_module(API)
    except ImportError as e:
        raise CliError(f"`reprise spark` needs {API} ({e})", "install Reprise's spark extra") from None


def _attach(args: argparse.Namespace) -> Any:
    import actors

    return actors.connect(args.port, host=args.host, secret_file=args.secret_file, **_tls_options(args))


def _call(args: argparse.Namespace, call: Callable[[Any, Any], Any]) -> Any:
    """`call(spark_bridge.staged, system)` on the system the command attaches to; a FeedError as a CliError."""
    api = _api()
    system = _attach(args)
    try:
        return call(api, system)
    except api.FeedError as e:
        raise CliError(str(e), "start the bridge, or check --port") from None
    finally:
        system.close()


def _run_dict(r: Any) -> dict[str, Any]:
    return {"bridge": r.bridge, "feed_id": r.feed_id, "run": r.run, "batches": r.batches, "rows": r.rows,
            "partitions": r.partitions, "attempts": r.attempts, "idle_seconds": r.idle_seconds,
            "last_staged_at": r.last_staged_at}


def _print_runs(runs: list[Any]) -> None:
    if not runs:
        return
    width = max(len(printable(r.feed_id)) for r in runs)
    bwidth = max(len(printable(r.bridge)) for r in runs)
    print(f"  {'FEED ID':<{width}}  {'RUN':<16}  {'BATCHES':>7}  {'ROWS':>9}  {'PARTS':>5}  {'IDLE':>8}  "
          f"{'LAST STAGED':<19}  {'BRIDGE':<{bwidth}}")
    for r in runs:
        staged = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(r.last_staged_at)) if r.last_staged_at else "-"
        print(f"  {printable(r.feed_id):<{width}}  {printable(r.run):<16}  {r.batches:>7}  {r.rows:>9}  "
              f"{r.partitions:>5}  {_human_seconds(r.idle_seconds):>8}  {staged:<19}  {printable(r.bridge):<{bwidth}}")


def _human_seconds(s: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if s >= size:
            return f"{s / size:.1f}{unit}"
    return f"{s:.0f}s"


def cmd_spark_help(args: argparse.Namespace) -> int:
    """`reprise spark` without a command: say which commands there are."""
    raise CliError("spark needs a command: staged or discard", "run 'reprise spark --help'", code=2)


def cmd_spark_staged(args: argparse.Namespace) -> int:
    """`reprise spark staged`: every bridge's staged runs (per feed id and run: batches, rows, idle time)."""
    runs = _call(args, lambda api, system: api.staged_runs(system, bridges=args.bridge or None))
    if args.json:
        print(json.dumps({"runs": [_run_dict(r) for r in runs]}, indent=2))
        return 0
    print(f"{len(runs)} staged run(s), neither released nor discarded")
    _print_runs(runs)
    if runs:
        print(f"discard one with `reprise spark discard --port {args.port} --feed-id FEED_ID --run RUN`, or every "
              f"run idle longer than a time with `--idle-for 2h`")
    return 0


def cmd_spark_discard(args: argparse.Namespace) -> int:
    """`reprise spark discard`: discard one staged run, or every run idle for at least --idle-for."""
    if args.idle_for is None and (args.feed_id is None or args.run is None):
        raise CliError("give --feed-id and --run (one run), or --idle-for (every run idle that long, of --feed-id "
                       "only if given)", "list the staged runs with `reprise spark staged`", code=2)
    if args.run is not None and args.feed_id is None:
        raise CliError("--run needs --feed-id: run ids are per feed", "list the staged runs with "
                       "`reprise spark staged`", code=2)
    runs, released = _call(args, lambda api, system: api.discard_or_release(
        system, args.feed_id, args.run, args.idle_for, bridges=args.bridge or None))
    if args.json:
        print(json.dumps({"discarded": [_run_dict(r) for r in runs], "released": [_run_dict(r) for r in released]},
                         indent=2))
        return 0
    if released:  # (a bridge per node: the coordinator had decided them, their driver died before releasing)
        print(f"released {len(released)} staged run(s) instead of discarding them: the coordinator had decided "
              "them (Spark committed their rows), so they are delivered, once")
        _print_runs(released)
    if not runs and released:
        return 0
    if not runs and args.idle_for is None:
        raise CliError(f"no staged run {printable(args.run)} of feed {printable(repr(args.feed_id))}: nothing "
                       "discarded", "list the staged runs with `reprise spark staged` (a released or discarded "
                       "run is not staged any more)")
    if not runs:  # (not an error: what a periodic clean-up usually finds)
        print(f"no staged run{' of feed ' + printable(repr(args.feed_id)) if args.feed_id else ''} idle for "
              f"{args.idle_for:.0f} s or more: nothing discarded")
        return 0
    print(f"discarded {len(runs)} staged run(s); a late release of one fails its feed, which can be run again")
    _print_runs(runs)
    return 0

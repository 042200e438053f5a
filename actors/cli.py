"""The `reprise` command: run topologies, inspect and stop systems, inspect journals, run benchmarks.

    reprise up TOPOLOGY.toml [--detach]      reprise down --port N      reprise status --port N
    reprise node --leader HOST:PORT --port N --name NAME      reprise rebalance --port N [--path P]
    reprise journal ls|show|tail|verify [URL]   (URL defaults to $REPRISE_JOURNAL)
    reprise spark staged --port N      reprise spark discard --port N (--feed-id F --run R | --idle-for 2h)
    reprise bench [ARGS]                        (in a checkout: runs `python -m bench ARGS`)
"""

from __future__ import annotations

import argparse
import difflib
import math
import os
import sys
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from journal.urls import redact_url

from .cli_error import PROG, CliError
from .cli_interrupt import release
from .journal_commands import (
    JOURNAL_ENV,
    cmd_journal_help,
    cmd_journal_ls,
    cmd_journal_show,
    cmd_journal_tail,
    cmd_journal_verify,
    with_imports,
)
from .paths import printable
from .spark_commands import cmd_spark_discard, cmd_spark_help, cmd_spark_staged, duration
from .system_commands import Terminated, cmd_down, cmd_node, cmd_rebalance, cmd_status, cmd_up, store_hint

# This module parses the arguments and dispatches: the commands live in system_commands and
# journal_commands, the benchmark runner in a checkout's bench/.

# The checkout this module runs from, when it does: `reprise bench` runs its bench/ (not installed).
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BENCH_HELP = "run the benchmarks in bench/ (a checkout's `python -m bench`) and write bench/RESULTS.md and a chart"


class _Parser(argparse.ArgumentParser):
    """argparse with Reprise's error format: one line plus a hint, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{PROG}: error: {message} (hint: run '{self.prog} --help')\n")

    def parse_known_args(self, args: Sequence[str] | None = None,  # type: ignore[override]
                         namespace: argparse.Namespace | None = None) -> tuple[argparse.Namespace, list[str]]:
        """A command's own parse: what it does not know is refused here, naming the command and the option meant.

        (The top-level parser refused it: `reprise status --port 1 --jsno` said "unrecognized arguments: --jsno
        (hint: run 'reprise --help')", with the top-level usage, whose help lists no option of `status`.)
        """
        parsed, extras = super().parse_known_args(args, namespace)
        if extras and not any(isinstance(a, argparse._SubParsersAction) for a in self._actions):
            options = [o for a in self._actions for o in a.option_strings if o.startswith("--")]
            guesses = [m for e in extras if e.startswith("-")
                       for m in difflib.get_close_matches(e.split("=", 1)[0], options, n=1, cutoff=0.75)]
            self.error(f"unrecognized argument{'s' if len(extras) > 1 else ''} {' '.join(map(repr, extras))}"
                       + (f": did you mean {' / '.join(guesses)}?" if guesses else ""))
        return parsed, extras


def positive_seconds(text: str) -> float:
    """A timeout in seconds, more than 0 (argparse type: anything else is a usage error naming it)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not value > 0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds above 0, e.g. 20 or 2.5")
    return value


def _whole_number(low: int, high: int, what: str) -> Callable[[str], int]:
    """An argparse type: a whole number from `low` to `high`, anything else a usage error saying `what` it must be."""
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}")
        return value
    return parse


count = _whole_number(0, 2**63 - 1, f"a whole number from 0 to {2**63 - 1}")  # (what the journal counts in)
port_number = _whole_number(1, 65535, "a port number from 1 to 65535")  # (0, which would mean "any", is refused)


# ---- entry point ---------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Run the `reprise` command line; returns the exit code (argparse exits 2 itself on bad usage)."""
    release()  # Ctrl-C raises KeyboardInterrupt again: the commands below handle it
    parser = build_parser()
    args = parser.parse_args(argv)
    verbose = getattr(args, "verbose", False)
    if not hasattr(args, "func"):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except CliError as e:
        return _report(str(e), e.hint, e.code, verbose)
    except Terminated as e:
        print(f"{PROG}: {e}", file=sys.stderr)
        return 128 + e.signum  # (as a shell reports a command a signal ended)
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # Its reader went away (`reprise journal tail URL | head`): stop quietly, as `cat` would (SIGPIPE's code).
        # Python would report the pipe again when it flushes stdout at exit: point that at /dev/null.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 141
    except Exception as e:  # noqa: BLE001 - the CLI's last line of defence turns anything into one line
        code, hint = _classify(e)
        return _report(f"{type(e).__name__}: {e}" if code == 1 else str(e), hint, code, verbose)


def _classify(e: BaseException) -> tuple[int, str]:
    """Exit code and hint for exceptions raised by the libraries below the CLI."""
    from journal.errors import JournalCorruption

    from .errors import ConfigError, InvalidPath, LeaderUnreachable, SpawnFailed, SystemNotRunning
    from .topology import TopologyError

    if isinstance(e, TopologyError):
        return 2, "see the topology format in `reprise up --help` and examples/topologies/"
    if isinstance(e, ConfigError):
        return 2, "fix the value named above"
    if isinstance(e, InvalidPath):
        return 2, "actor paths look like /user/accounts (an absolute path below /user)"
    cause = e.cause if isinstance(e, SpawnFailed) else None  # (what failed, typed: its wording may change)
    if cause is not None and cause.kind == "admin_port":
        port = cause.where
        return 1, (f"a system already runs there: `{PROG} status --port {port}` shows it, `{PROG} down --port {port}` "
                   "stops it; or give [system] admin_port / --port another port")
    if isinstance(e, FileNotFoundError):
        return 2, "check the file name and the working directory"
    if isinstance(e, LeaderUnreachable) and not e.member_runs:
        return 1, "nothing was started: start the leader first, then this member"
    if isinstance(e, LeaderUnreachable):
        return 1, "the member runs without its leader: start the leader again, or stop the member with `reprise down`"
    if isinstance(e, SystemNotRunning):
        return 1, "check --port/--host, or start a system with `reprise up TOPOLOGY.toml`"
    if isinstance(e, JournalCorruption):
        return 1, "run `reprise journal verify URL` to list every corrupt record"
    from journal.errors import InvalidUrl

    if isinstance(e, InvalidUrl):
        return 2, ("fix the URL named above (sqlite:///abs/path.db, sqlite://relative.db, memory://name, "
                   "postgresql://user@host:port/db?schema=NAME)")
    from .journal_commands import journal_hint

    hint = journal_hint(e)
    if hint is not None:
        return 1, hint
    if cause is not None and cause.kind in ("no_journal", "journal", "snapshot_store"):
        return store_hint(cause)
    from journal.errors import SerializationError

    if isinstance(e, SerializationError) and e.unknown_manifest is not None:
        return 1, "pass --import MODULE for the module that registers the event classes (e.g. --import myapp.events)"
    from .auth import SecretUnavailable

    if isinstance(e, SecretUnavailable) and e.secret_file is not None:
        # (the file given is missing, unreadable, malformed or shared: the port may well be right)
        return 2, "--secret-file FILE takes a copy of the system's secret (its <run dir>/secret), mode 0600"
    if isinstance(e, SecretUnavailable):
        return 1, "check that --port is a Reprise admin's; on the command line secret_file= is --secret-file FILE"
    from .tls import TlsError

    if isinstance(e, TlsError):
        return 1, "give --tls-cert/--tls-key/--tls-ca: a certificate signed by the system's CA, its key, that CA"
    return 1, "rerun with --verbose for the traceback"


def _report(message: str, hint: str | None, code: int, verbose: bool) -> int:
    if verbose:
        traceback.print_exc()
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    first = lines[0] if lines else "failed"
    if first.endswith(":") and len(lines) > 1:
        # "/user/x failed to start:" says nothing without its reason: the next line, or after a traceback its
        # last line, the exception ("TypeError: __init__() missing 1 required positional argument: 'x'")
        first = f"{first} {lines[-1] if lines[1].startswith('Traceback') else lines[1]}"
    more = "" if first == " ".join(lines) else " [...]"
    first = printable(redact_url(first) or "")
    suffix = f" (hint: {hint})" if hint else ""
    print(f"{PROG}: error: {first}{more}{suffix}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    common = _Parser(add_help=False)
    # SUPPRESS keeps a subcommand's default from overwriting `reprise --verbose sub ...`.
    common.add_argument("-v", "--verbose", action="store_true", default=argparse.SUPPRESS,
                        help="show tracebacks on errors")
    parser = _Parser(prog=PROG, description=__doc__.splitlines()[0], parents=[common],
                     formatter_class=argparse.RawDescriptionHelpFormatter,
                     epilog="\n".join(__doc__.splitlines()[1:]))
    sub = parser.add_subparsers(title="commands", metavar="COMMAND", parser_class=_Parser)

    def command(name: str, func: Callable[[argparse.Namespace], int], help: str,  # noqa: A002
                **kw: Any) -> argparse.ArgumentParser:
        p = sub.add_parser(name, help=help, description=help, parents=[common], **kw)
        p.set_defaults(func=func)
        return p

    from .topology import __doc__ as topology_doc

    p = command("up", cmd_up, "start an actor system and spawn what a topology file declares",
                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=topology_doc)
    p.add_argument("topology", metavar="TOPOLOGY.toml")
    p.add_argument("--detach", action="store_true", help="leave the system running and exit")
    p.add_argument("--port", type=port_number, help="admin port (overrides [system] admin_port)")
    p.add_argument("--node", metavar="NAME", help="cluster files: the [[node]] to start here (default: the one "
                   "whose address is this machine's)")
    _hidden_start_options(p)

    p = command("down", cmd_down, "shut a running actor system down")
    _attach_options(p)
    p.add_argument("--timeout", type=positive_seconds, default=20.0,
                   help="seconds to wait for the admin to answer, then for its processes to end")

    p = command("status", cmd_status, "show a running system's hosts, actors alive, unconfirmed deliveries, dead letters and journal size")
    _attach_options(p)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command("rebalance", cmd_rebalance, "move hosts spawned with nodes= (one at a time, gracefully) to where "
                "placement over the live nodes puts them, e.g. after a node came back")
    _attach_options(p)
    p.add_argument("--path", help="only the host (or shards) at this path (default: every nodes= host)")
    p.add_argument("--timeout", type=positive_seconds, default=60.0, help="seconds to wait for every move to finish")
    p.add_argument("--json", action="store_true", help="print the moves as JSON")

    p = command("node", cmd_node, "join this machine to a system's convention as a member")
    p.add_argument("--leader", required=True, metavar="HOST:PORT", help="the leader's admin address")
    p.add_argument("--port", type=port_number, required=True, help="this member's admin port")
    p.add_argument("--name", required=True, help="this member's node name (for `node = ...` placement)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default: loopback)")
    p.add_argument("--advertise", help="address other machines reach this one at")
    p.add_argument("--detach", action="store_true", help="leave the member running and exit")
    p.add_argument("--metrics-port", type=port_number, metavar="PORT",
                   help="serve this node's Prometheus metrics on PORT (default: no metrics endpoint)")
    p.add_argument("--metrics-host", default="127.0.0.1", metavar="IP",
                   help="the interface the metrics endpoint listens on (default: loopback)")
    p.add_argument("--secret-file", required=True, metavar="FILE",
                   help="a copy of the leader's secret file (mode 0600): every frame is authenticated with it")
    _tls_arguments(p, "mutual TLS (the leader's system must use TLS with the same CA)")
    _hidden_start_options(p)

    jp = command("journal", cmd_journal_help, "inspect and verify an event journal")
    jsub = jp.add_subparsers(title="journal commands", metavar="COMMAND", parser_class=_Parser)

    def jcommand(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:  # noqa: A002
        q = jsub.add_parser(name, help=help, description=help, parents=[common])
        q.set_defaults(func=with_imports(func))
        q.add_argument("--import", dest="imports", action="append", default=[], metavar="MODULE",
                       help="import MODULE first, so that the event classes it registers (register_type) "
                            "can be read, e.g. --import myapp.events (repeatable)")
        return q

    url_help = f"journal URL, e.g. sqlite:///abs/path.db (default: ${JOURNAL_ENV})"
    q = jcommand("ls", cmd_journal_ls, "list persistence ids with their highest sequence nr and event count")
    q.add_argument("url", nargs="?", metavar="URL", help=url_help)
    q = jcommand("show", cmd_journal_show, "print the events of one persistence id")
    q.add_argument("url", nargs="?", metavar="URL", help=url_help)
    q.add_argument("pid", metavar="PID", help="the persistence id")
    q.add_argument("--from", dest="from_nr", type=count, default=1, metavar="N", help="first sequence nr")
    q.add_argument("--limit", type=count, default=None, metavar="N", help="print at most N events")
    q = jcommand("tail", cmd_journal_tail, "print the most recently written events of all ids")
    q.add_argument("url", nargs="?", metavar="URL", help=url_help)
    q.add_argument("-n", type=count, default=10, metavar="N", help="how many events (default 10)")
    q = jcommand("verify", cmd_journal_verify,
                 "re-read every record and checksum; exit 1 naming each corrupt record")
    q.add_argument("url", nargs="?", metavar="URL", help=url_help)

    sp = command("spark", cmd_spark_help, "the Spark bridges' staged runs: list them, discard those a dead driver left")
    ssub = sp.add_subparsers(title="spark commands", metavar="COMMAND", parser_class=_Parser)

    def scommand(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:  # noqa: A002
        q = ssub.add_parser(name, help=help, description=help, parents=[common])
        q.set_defaults(func=func)
        _attach_options(q)
        q.add_argument("--bridge", action="append", metavar="PATH", help="only this bridge (repeatable; default: "
                       "every bridge, /system/spark-bridge and /system/spark-bridges/*)")
        q.add_argument("--json", action="store_true", help="print JSON")
        return q

    scommand("staged", cmd_spark_staged, "list the runs staged at the bridges and neither released nor discarded: "
             "per feed id and run, batches, rows, partitions and how long idle (a driver that died leaves them)")
    q = scommand("discard", cmd_spark_discard, "discard, durably, one staged run (--feed-id and --run) or every "
                 "run idle for at least --idle-for; a late release of a discarded run fails its feed, clearly")
    q.add_argument("--feed-id", metavar="FEED_ID", help="the feed id of the run(s) to discard")
    q.add_argument("--run", metavar="RUN", help="the run to discard (as `reprise spark staged` lists it)")
    q.add_argument("--idle-for", type=duration, metavar="DURATION",
                   help="discard every run (of --feed-id, if given) idle at least this long: seconds, or 30m, 2h, 1d")

    # The runner parses its own options: '+' as the only prefix lets every '-' option through untouched.
    p = sub.add_parser("bench", help=BENCH_HELP, description=BENCH_HELP, add_help=False, prefix_chars="+")
    p.add_argument("bench_args", nargs=argparse.REMAINDER, metavar="ARGS",
                   help="the options of `python -m bench` (see `reprise bench --help` in a checkout)")
    p.set_defaults(func=cmd_bench)
    return parser


def _attach_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=port_number, required=True, help="the system's admin port")
    p.add_argument("--host", default="127.0.0.1", help="the admin's address (default: loopback)")
    p.add_argument("--secret-file", metavar="FILE",
                   help="the system's secret (default: <run dir>/secret of the local admin on --port)")
    _tls_arguments(p, "for a system with TLS (default: the files the local admin on --port was started with)")


def _tls_arguments(p: argparse.ArgumentParser, what: str) -> None:
    g = p.add_argument_group("TLS", f"{what}; all three or none")
    g.add_argument("--tls-cert", metavar="PEM", help="this machine's certificate, signed by the CA")
    g.add_argument("--tls-key", metavar="PEM", help="its private key (mode 0600)")
    g.add_argument("--tls-ca", metavar="PEM", help="the CA certificate every peer's certificate is checked against")


def _hidden_start_options(p: argparse.ArgumentParser) -> None:
    # For tests and supervisors: the tag marks every process of the system (leak checks find them by it).
    p.add_argument("--tag", help=argparse.SUPPRESS)
    p.add_argument("--run-dir", help=argparse.SUPPRESS)


# ---- bench ------------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    """`reprise bench [ARGS]`: run a checkout's benchmark runner (`python -m bench ARGS`) in this process."""
    runner_file = os.path.join(REPO_ROOT, "bench", "runner.py")
    if not os.path.isfile(runner_file):
        raise CliError("the benchmarks are not installed with the package: they live in bench/ of a Reprise "
                       "checkout", "clone the repository and run `python -m bench` (or `make bench`) from "
                       "its root", code=2)
    if REPO_ROOT not in sys.path:
        sys.path.insert(0, REPO_ROOT)
    import importlib

    runner = importlib.import_module("bench.runner")
    if os.path.abspath(runner.__file__ or "") != runner_file:
        raise CliError(f"`bench` imports {runner.__file__}, not the checkout's {runner_file}",
                       f"run `python -m bench` from {REPO_ROOT}", code=2)
    try:
        return int(runner.run(runner.build_parser(f"{PROG} bench").parse_args(args.bench_args)))
    except runner.BenchError as e:
        raise CliError(str(e), e.hint, e.code) from None


if __name__ == "__main__":
    sys.exit(main())

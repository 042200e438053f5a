"""The `reprise` command: run topologies, inspect and stop systems, inspect journals, run benchmarks.

    reprise up TOPOLOGY.toml [--detach]      reprise down --port N      reprise status --port N
    reprise node --leader HOST:PORT --port N --name NAME
    reprise journal ls|show|tail|verify [URL]   (URL defaults to $REPRISE_JOURNAL)
    reprise bench
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import Any, NoReturn

from journal.errors import RepriseError
from journal.urls import REDACTED, redact_url

from .paths import printable

PROG = "reprise"
JOURNAL_ENV = "REPRISE_JOURNAL"


class CliError(RepriseError):
    """An error reported as one line plus a hint; `code` 2 for bad input, 1 for runtime failures."""

    def __init__(self, message: str, hint: str | None = None, code: int = 1) -> None:
        super().__init__(message)
        self.hint = hint
        self.code = code


class _Parser(argparse.ArgumentParser):
    """argparse with Reprise's error format: one line plus a hint, exit code 2."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(2, f"{PROG}: error: {message} (hint: run '{self.prog} --help')\n")


# ---- entry point ---------------------------------------------------------------------------------

def main(argv: Sequence[str] | None = None) -> int:
    """Run the `reprise` command line; returns the exit code (argparse exits 2 itself on bad usage)."""
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
    except KeyboardInterrupt:
        return 130
    except Exception as e:  # noqa: BLE001 - the CLI's last line of defence turns anything into one line
        code, hint = _classify(e)
        return _report(f"{type(e).__name__}: {e}" if code == 1 else str(e), hint, code, verbose)


def _classify(e: BaseException) -> tuple[int, str]:
    """Exit code and hint for exceptions raised by the libraries below the CLI."""
    from journal.errors import JournalCorruption

    from .errors import ConfigError, SystemNotRunning
    from .topology import TopologyError

    if isinstance(e, TopologyError):
        return 2, "see the topology format in `reprise up --help` and examples/topologies/"
    if isinstance(e, ConfigError):
        return 2, "fix the value named above"
    if isinstance(e, FileNotFoundError):
        return 2, "check the file name and the working directory"
    if isinstance(e, SystemNotRunning):
        return 1, "check --port/--host, or start a system with `reprise up TOPOLOGY.toml`"
    if isinstance(e, JournalCorruption):
        return 1, "run `reprise journal verify URL` to list every corrupt record"
    from .tls import TlsError

    if isinstance(e, TlsError):
        return 1, "give --tls-cert/--tls-key/--tls-ca: a certificate signed by the system's CA, its key, that CA"
    return 1, "rerun with --verbose for the traceback"


def _report(message: str, hint: str | None, code: int, verbose: bool) -> int:
    if verbose:
        traceback.print_exc()
    lines = [line.strip() for line in message.strip().splitlines() if line.strip()]
    first = lines[0] if lines else "failed"
    if first.endswith(":") and len(lines) > 1 and not lines[1].startswith("Traceback"):
        first = f"{first} {lines[1]}"  # "/user/x failed to start:" says nothing without its reason
    more = "" if first == " ".join(lines) else " [...]"
    first = printable(redact_url(first))
    suffix = f" (hint: {hint})" if hint else ""
    print(f"{PROG}: error: {first}{more}{suffix}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    common = argparse.ArgumentParser(add_help=False)
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
    p.add_argument("--port", type=int, help="admin port (overrides [system] admin_port)")
    _hidden_start_options(p)

    p = command("down", cmd_down, "shut a running actor system down")
    _attach_options(p)
    p.add_argument("--timeout", type=float, default=20.0, help="seconds to wait for its processes to end")

    p = command("status", cmd_status, "show a running system's hosts, actors alive, unconfirmed deliveries, dead letters and journal size")
    _attach_options(p)
    p.add_argument("--json", action="store_true", help="print JSON")

    p = command("node", cmd_node, "join this machine to a system's convention as a member")
    p.add_argument("--leader", required=True, metavar="HOST:PORT", help="the leader's admin address")
    p.add_argument("--port", type=int, required=True, help="this member's admin port")
    p.add_argument("--name", required=True, help="this member's node name (for `node = ...` placement)")
    p.add_argument("--bind", default="127.0.0.1", help="address to listen on (default: loopback)")
    p.add_argument("--advertise", help="address other machines reach this one at")
    p.add_argument("--detach", action="store_true", help="leave the member running and exit")
    p.add_argument("--secret-file", required=True, metavar="FILE",
                   help="a copy of the leader's secret file (mode 0600): every frame is authenticated with it")
    _tls_arguments(p, "mutual TLS (the leader's system must use TLS with the same CA)")
    _hidden_start_options(p)

    jp = command("journal", _journal_help, "inspect and verify an event journal")
    jsub = jp.add_subparsers(title="journal commands", metavar="COMMAND", parser_class=_Parser)

    def jcommand(name: str, func: Callable[[argparse.Namespace], int], help: str) -> argparse.ArgumentParser:  # noqa: A002
        q = jsub.add_parser(name, help=help, description=help, parents=[common])
        q.set_defaults(func=_with_imports(func))
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
    q.add_argument("--from", dest="from_nr", type=int, default=1, metavar="N", help="first sequence nr")
    q.add_argument("--limit", type=int, default=None, metavar="N", help="print at most N events")
    q = jcommand("tail", cmd_journal_tail, "print the most recently written events of all ids")
    q.add_argument("url", nargs="?", metavar="URL", help=url_help)
    q.add_argument("-n", type=int, default=10, metavar="N", help="how many events (default 10)")
    q = jcommand("verify", cmd_journal_verify,
                 "re-read every record and checksum; exit 1 naming each corrupt record")
    q.add_argument("url", nargs="?", metavar="URL", help=url_help)

    p = command("bench", cmd_bench, "run the benchmarks in bench/ and write bench/RESULTS.md and a chart")
    p.add_argument("--only", action="append", metavar="NAME",
                   help="run only this benchmark module (repeatable), e.g. transport")
    p.add_argument("--out", default=None, help="output directory (default: bench/)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME:ARG",
                   help="extra argument for one benchmark, e.g. transport:--messages=2000 (repeatable)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds allowed per benchmark")
    p.add_argument("--bench-dir", help=argparse.SUPPRESS)
    return parser


def _attach_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--port", type=int, required=True, help="the system's admin port")
    p.add_argument("--host", default="127.0.0.1", help="the admin's address (default: loopback)")
    p.add_argument("--secret-file", metavar="FILE",
                   help="the system's secret (default: <run dir>/secret of the local admin on --port)")
    _tls_arguments(p, "for a system with TLS (default: the files the local admin on --port was started with)")


def _tls_arguments(p: argparse.ArgumentParser, what: str) -> None:
    g = p.add_argument_group("TLS", f"{what}; all three or none")
    g.add_argument("--tls-cert", metavar="PEM", help="this machine's certificate, signed by the CA")
    g.add_argument("--tls-key", metavar="PEM", help="its private key (mode 0600)")
    g.add_argument("--tls-ca", metavar="PEM", help="the CA certificate every peer's certificate is checked against")


def _tls_options(args: argparse.Namespace) -> dict[str, str]:
    """The tls_* keyword arguments given on the command line (none: the default)."""
    given = {k: getattr(args, k, None) for k in ("tls_cert", "tls_key", "tls_ca")}
    return {k: v for k, v in given.items() if v is not None}


def _hidden_start_options(p: argparse.ArgumentParser) -> None:
    # For tests and supervisors: the tag marks every process of the system (leak checks find them by it).
    p.add_argument("--tag", help=argparse.SUPPRESS)
    p.add_argument("--run-dir", help=argparse.SUPPRESS)


# ---- up / node / down / status -------------------------------------------------------------------

def cmd_up(args: argparse.Namespace) -> int:
    """`reprise up`: start a system from a topology file, spawn its actors, then wait or detach."""
    import actors

    from .topology import load, resolve_class

    if not os.path.isfile(args.topology):
        raise CliError(f"topology file {args.topology!r} not found", "pass the path of a .toml file, e.g. "
                       "examples/topologies/echo.toml", code=2)
    topo = load(args.topology)
    # Actor modules usually live next to the topology or in the project the user runs from.
    for extra in (os.getcwd(), os.path.dirname(os.path.abspath(args.topology))):
        if extra not in sys.path:
            sys.path.insert(0, extra)
    classes = [resolve_class(e.factory) for e in topo.entries]  # fail before starting anything
    s = topo.system
    system = actors.start("multiproc", admin_port=args.port or s.admin_port, journal=s.journal,
                          snapshot_store=s.snapshot_store, bind=s.bind, advertise=s.advertise, peers=s.peers,
                          leader=s.leader, node=s.node, log_level=s.log_level, tag=args.tag,
                          run_dir=args.run_dir, secret_file=s.secret_file, tls_cert=s.tls_cert, tls_key=s.tls_key,
                          tls_ca=s.tls_ca)
    try:
        for entry, cls in zip(topo.entries, classes, strict=True):
            system.spawn(cls, entry.path, entities=entry.entities, args=entry.args, kwargs=entry.kwargs,
                         **entry.options)
        _print_up(system, topo)
    except BaseException:
        system.shutdown()
        raise
    return _detach_or_wait(system, args.detach)


def cmd_node(args: argparse.Namespace) -> int:
    """`reprise node`: start a convention member that joins `--leader`, then wait or detach."""
    import actors

    host, sep, port = args.leader.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise CliError(f"--leader {args.leader!r} is not HOST:PORT", "e.g. --leader 10.0.0.5:1900", code=2)
    system = actors.start("multiproc", admin_port=args.port, leader=args.leader, node=args.name,
                          bind=args.bind, advertise=args.advertise, tag=args.tag, run_dir=args.run_dir,
                          secret_file=args.secret_file, **_tls_options(args))
    print(f"node {args.name!r} up on {args.advertise or args.bind}:{system.admin_port}, "
          f"member of {args.leader}; run dir {system.run_dir}", flush=True)
    return _detach_or_wait(system, args.detach)


def _print_up(system: Any, topo: Any) -> None:
    port = system.admin_port
    print(f"reprise system up on {topo.system.advertise or topo.system.bind}:{port} "
          f"(run dir {system.run_dir})", flush=True)
    if topo.system.journal:
        print(f"  journal  {redact_url(topo.system.journal)}")
    for entry in topo.entries:
        kind = "entities" if entry.entities else "actor"
        own = entry.options.get("journal")
        print(f"  {kind:<8} {printable(entry.path)}  {printable(entry.factory)}"
              + (f"  journal {redact_url(own)}" if own else ""))
    sys.stdout.flush()


def _detach_or_wait(system: Any, detach: bool) -> int:
    """Detach (close the client, leave the system running) or wait for Ctrl-C/SIGTERM and shut down."""
    if detach:
        system.close()
        print(f"detached; stop it with: {PROG} down --port {system.admin_port}", flush=True)
        return 0
    stop = threading.Event()
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM)}
    print("running; Ctrl-C or SIGTERM shuts it down", flush=True)
    from .system import tagged_pids

    try:
        while not stop.wait(1.0):
            # A system killed from outside (e.g. `reprise down`) leaves nothing to wait for.
            if system.tag and not tagged_pids(system.tag):
                print("the actor system has gone away", file=sys.stderr)
                system.close()
                return 1
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print("shutting down", flush=True)
    system.shutdown()
    print("stopped", flush=True)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    """`reprise down`: shut the system on --port down, or kill what is left of it if its admin died."""
    from thespian.actors import InvalidActorAddress

    import actors

    from .errors import AskTimeout, SystemNotRunning
    from .system import find_tag, kill_tagged

    try:
        actors.shutdown(args.port, args.host, timeout=args.timeout, secret_file=args.secret_file, **_tls_options(args))
    except (SystemNotRunning, AskTimeout, InvalidActorAddress) as e:
        # (InvalidActorAddress: the admin's listening socket, inherited by its children, still accepts
        # connections after the admin died, but nobody answers.)
        # The admin is gone (SIGKILLed?) but its guardian and hosts may still run. They carry the admin's
        # boot command line (with --port and the system's tag), which identifies them even after a pid
        # was reused: kill exactly those.
        tag = find_tag(args.port)
        killed = kill_tagged(tag) if tag else []
        if not killed:
            raise
        print(f"the admin on {args.host}:{args.port} does not answer ({e}); killed the {len(killed)} "
              f"process(es) of system {tag} it left behind: pids {' '.join(map(str, sorted(killed)))}")
        return 0
    print(f"system on {args.host}:{args.port} shut down")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """`reprise status`: hosts (state, restarts, pid, actors alive, unconfirmed), dead letters, journal size."""
    import actors

    system = actors.connect(args.port, host=args.host, secret_file=args.secret_file, **_tls_options(args))
    try:
        status = system.status()
    finally:
        system.close()
    journal_url = status.config.get("journal")
    size = journal_size(journal_url)
    journal_url = redact_url(journal_url)  # the guardian redacts it already; this also covers older ones
    unconfirmed = sum(h.counters.get("unconfirmed", 0) for h in status.hosts.values())
    if args.json:
        print(json.dumps({
            "port": args.port, "dead_letters": status.dead_letters, "journal": journal_url, "journal_bytes": size,
            "unconfirmed": unconfirmed, "run_dir": status.config.get("run_dir"),
            "errors": [{"time": e.time, "host": e.host, "path": printable(e.path), "reason": printable(e.reason)} for e in status.errors],
            "hosts": {printable(p): {"state": h.state, "restarts": h.restarts, "pid": h.pid, "entities": h.entities,
                          "alive": h.alive, "counters": h.counters, "last_exit": printable(h.last_exit) if h.last_exit else h.last_exit,
                          "next_attempt": h.next_attempt}
                      for p, h in sorted(status.hosts.items())},
        }, indent=2))
        return 0
    print(f"system on {args.host}:{args.port}")
    print(f"  dead letters  {status.dead_letters}")
    print(f"  unconfirmed   {unconfirmed} deliveries")
    if journal_url:
        print(f"  journal       {journal_url}" + (f"  ({_human(size)})" if size is not None else ""))
    print(f"  hosts         {len(status.hosts)}")
    if status.hosts:
        width = max(len(printable(p)) for p in status.hosts)
        print(f"    {'PATH':<{width}}  {'KIND':<8}  {'STATE':<10}  {'RESTARTS':>8}  {'PID':>7}  {'ALIVE':>7}  UNCONFIRMED")
        for path, h in sorted(status.hosts.items()):
            kind = "entities" if h.entities else "actor"
            alive = "?" if h.alive is None else h.alive
            pending = h.counters.get("unconfirmed", 0) if h.alive is not None else "?"
            print(f"    {printable(path):<{width}}  {kind:<8}  {h.state:<10}  {h.restarts:>8}  {h.pid:>7}  {alive:>7}  {pending}")
            if h.last_exit:
                print(f"    {'':<{width}}  last exit: {printable(h.last_exit)}")
            if h.next_attempt is not None:
                wait = max(0.0, h.next_attempt - time.time())
                print(f"    {'':<{width}}  next attempt in {wait:.1f} s ({time.strftime('%H:%M:%S', time.localtime(h.next_attempt))})")
    _print_errors(status.errors)
    if status.config.get("run_dir"):
        print(f"  logs          {status.config['run_dir']}  (actors.log has each error's traceback)")
    return 0


ERRORS_PER_HOST = 5


def _print_errors(errors: tuple) -> None:
    """Each host's most recent errors inside actors: time, path, one-line reason."""
    print(f"  errors        {len(errors)}" + (" (the most recent kept)" if errors else ""))
    by_host: dict[str, list] = {}
    for error in errors:
        by_host.setdefault(error.host, []).append(error)
    for host, recent in sorted(by_host.items()):
        print(f"    {printable(host)}")
        for error in recent[-ERRORS_PER_HOST:]:
            when = time.strftime("%H:%M:%S", time.localtime(error.time))
            print(f"      {when}  {printable(error.path)}  {printable(error.reason)}")


def journal_size(url: str | None) -> int | None:
    """Bytes the journal at `url` occupies (SQLite files, PostgreSQL tables); None when unknown."""
    if not url or url.startswith("memory:") or REDACTED in url:
        return None  # a redacted URL cannot be opened: its password (in the real URL) is not shown to clients
    from journal import open_journal

    try:
        journal = open_journal(url)
    except Exception:  # status must still show the rest when the journal cannot be opened
        return None
    try:
        return journal.storage_bytes()
    finally:
        journal.close()


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


# ---- journal ----------------------------------------------------------------------------------

def _journal_help(args: argparse.Namespace) -> int:
    raise CliError("journal needs a command: ls, show, tail or verify", "run 'reprise journal --help'", code=2)


def _journal_url(url: str | None) -> str:
    url = url or os.environ.get(JOURNAL_ENV)
    if not url:
        raise CliError("no journal URL given", f"pass one (e.g. sqlite:///abs/path.db) or set ${JOURNAL_ENV}",
                       code=2)
    from journal.urls import parse_url

    try:
        parsed = parse_url(url)
    except ValueError as e:
        raise CliError(str(e).split(": use ")[0], "journal URLs look like sqlite:///abs/path.db, "
                       "sqlite://relative.db, memory://name or postgresql://user@host:port/db", code=2) from None
    # Opening a sqlite file that does not exist would silently create an empty journal.
    if parsed.scheme == "sqlite" and parsed.target != ":memory:" and not os.path.isfile(parsed.target):
        raise CliError(f"no journal file at {parsed.target!r}", "check the path; sqlite:///abs/path.db has "
                       "three slashes for an absolute path", code=2)
    return url


def _with_imports(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Run a journal command after importing the modules named by --import."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        if args.imports and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as for `up`: the user's modules live where they run from
        for name in args.imports:
            try:
                importlib.import_module(name)
            except ImportError as e:
                raise CliError(f"--import {name}: cannot import it ({e})", "pass a module name importable from "
                               "the working directory, e.g. --import myapp.events", code=2) from None
        return func(args)

    return run


def _open(url: str | None) -> Any:
    from journal import open_journal

    return open_journal(_journal_url(url))


def cmd_journal_ls(args: argparse.Namespace) -> int:
    """`reprise journal ls`: persistence ids, highest sequence nr, event count."""
    with _open(args.url) as j:
        rows = j.summaries()
    if not rows:
        print("(no events)")
        return 0
    # Ids come from the journal, maybe written before control characters were refused: escape them.
    width = max(len("PERSISTENCE ID"), *(len(printable(r.persistence_id)) for r in rows))
    print(f"{'PERSISTENCE ID':<{width}}  {'HIGHEST SEQ':>11}  {'EVENTS':>8}")
    for r in rows:
        print(f"{printable(r.persistence_id):<{width}}  {r.highest_sequence_nr:>11}  {r.event_count:>8}")
    return 0


def cmd_journal_show(args: argparse.Namespace) -> int:
    """`reprise journal show [URL] PID`: the events of one persistence id."""
    url, pid = args.url, args.pid
    if args.limit is not None and args.limit < 0 or args.from_nr < 0:
        raise CliError("--from and --limit must not be negative", code=2)
    from journal import MAX_SEQUENCE_NR

    with _open(url) as j:
        events = list(j.show(pid, args.from_nr, MAX_SEQUENCE_NR if args.limit is None else args.limit))
        if not events and j.highest_sequence_nr(pid) == 0:
            raise CliError(f"no events for persistence id {printable(pid)!r}", "list the ids with `reprise journal ls`")
    for e in events:
        print(f"{e.sequence_nr:>8}  {_when(e.timestamp)}  {printable(e.manifest or '-')}  {printable(repr(e.payload))}")
    return 0


def cmd_journal_tail(args: argparse.Namespace) -> int:
    """`reprise journal tail [URL] [-n N]`: the most recent events of all ids."""
    with _open(args.url) as j:
        envelopes = j.tail(args.n)
    for e in envelopes:
        print(f"{e.offset:>8}  {_when(e.timestamp)}  {printable(e.persistence_id)}#{e.sequence_nr}  {printable(repr(e.event))}")
    return 0


def cmd_journal_verify(args: argparse.Namespace) -> int:
    """`reprise journal verify [URL]`: exit 1 and name every corrupt record."""
    import journal

    report = journal.verify(_journal_url(args.url))
    for p in report.problems:
        # Problems without an id concern the storage itself (e.g. a file SQLite cannot read).
        where = ("storage" if p.persistence_id is None else
                 f"persistence_id={printable(p.persistence_id)} sequence_nr={p.sequence_nr}")
        label = "UNREADABLE" if _unregistered(p.reason) else "CORRUPT"
        print(f"{label} {where}: {printable(redact_url(p.reason))}")
    summary = f"checked {report.records_checked} records and {report.snapshots_checked} snapshots"
    if report.ok:
        print(f"{summary}: ok")
        return 0
    if all(_unregistered(p.reason) for p in report.problems):
        # Intact records whose event class is not registered in this process: not corruption.
        print(f"{PROG}: error: {summary}: {len(report.problems)} unreadable (hint: pass --import MODULE for the "
              "module that registers their event classes)", file=sys.stderr)
        return 1
    print(f"{PROG}: error: {summary}: {len(report.problems)} corrupt (hint: restore the journal from a "
          "backup or delete the named records' persistence ids)", file=sys.stderr)
    return 1


def _unregistered(reason: str) -> bool:
    """True for a record whose checksum holds but whose event class is not registered in this process."""
    return "unknown manifest" in reason


def _when(millis: int) -> str:
    if not millis:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(millis / 1000)) + f".{millis % 1000:03d}"


# ---- bench ------------------------------------------------------------------------------------

def cmd_bench(args: argparse.Namespace) -> int:
    """`reprise bench`: run bench/*.py with --json, write RESULTS.md and a PNG chart."""
    bench_dir = os.path.abspath(args.bench_dir or os.path.join(REPO_ROOT, "bench"))
    if not os.path.isfile(os.path.join(bench_dir, "__init__.py")):
        raise CliError(f"{bench_dir} is not a benchmark package", "run from a Reprise checkout", code=2)
    names = sorted(f[:-3] for f in os.listdir(bench_dir)
                   if f.endswith(".py") and not f.startswith("_") and f != "actors_fixtures.py")
    unknown = set(args.only or ()) - set(names)
    if unknown:
        raise CliError(f"no benchmark(s) {sorted(unknown)} in {bench_dir}", f"choose from {names}", code=2)
    extra: dict[str, list[str]] = {}
    for spec in args.arg:
        name, sep, value = spec.partition(":")
        if not sep or name not in names:
            raise CliError(f"--arg {spec!r} is not NAME:ARG for a benchmark", f"benchmarks: {names}", code=2)
        extra.setdefault(name, []).append(value)
    out_dir = os.path.abspath(args.out or bench_dir)
    os.makedirs(out_dir, exist_ok=True)
    results: dict[str, list[tuple[str, str, float]]] = {}
    notes: list[str] = []
    for name in args.only or names:
        print(f"running {name} ...", flush=True)
        started = time.monotonic()
        try:
            doc = _run_bench(bench_dir, name, extra.get(name, []), args.timeout)
        except _Skip as e:
            notes.append(f"{name}: skipped ({e})")
            print(f"  skipped: {e}", flush=True)
            continue
        results[name] = bench_rows(doc)
        print(f"  {len(results[name])} figures in {time.monotonic() - started:.0f} s", flush=True)
    if not results:
        raise CliError("no benchmark produced results", "; ".join(notes) or None)
    chart = os.path.join(out_dir, "results.png")
    write_chart(results, chart)
    md = os.path.join(out_dir, "RESULTS.md")
    with open(md, "w") as f:
        f.write(render_results(results, notes, os.path.basename(chart)))
    print(f"wrote {md} and {chart}")
    return 0


REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _Skip(Exception):
    """A benchmark that cannot be run by `reprise bench` (no --json option, or it failed)."""


def _run_bench(bench_dir: str, name: str, extra: list[str], timeout: float) -> Any:
    """Run one benchmark module with --json; returns its parsed JSON."""
    import re
    import subprocess
    import tempfile

    package = os.path.basename(bench_dir)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [os.path.dirname(bench_dir), *filter(None, [os.environ.get("PYTHONPATH")])]))
    cmd = [sys.executable, "-m", f"{package}.{name}"]
    run = dict(cwd=os.path.dirname(bench_dir), env=env, capture_output=True, text=True)
    helped = subprocess.run([*cmd, "--help"], timeout=60, **run)
    if helped.returncode != 0 or "--json" not in helped.stdout:
        raise _Skip("it has no --json option")
    # Some benchmarks take `--json FILE`, others print JSON on stdout with a bare `--json`.
    to_file = re.search(r"--json\s+[A-Z]", helped.stdout) is not None
    with tempfile.TemporaryDirectory(prefix="reprise-bench-") as tmp:
        target = os.path.join(tmp, f"{name}.json")
        argv = [*cmd, "--json", target] if to_file else [*cmd, "--json"]
        try:
            done = subprocess.run([*argv, *extra], timeout=timeout, **run)
        except subprocess.TimeoutExpired:
            raise _Skip(f"timed out after {timeout:.0f} s") from None
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise _Skip(f"exit code {done.returncode}: {tail}")
        if to_file:
            with open(target) as f:
                return json.load(f)
    for line in reversed(done.stdout.strip().splitlines()):
        try:
            return json.loads(line)
        except ValueError:
            continue
    raise _Skip("it printed no JSON")


def bench_rows(doc: Any) -> list[tuple[str, str, float]]:
    """(system, measurement, rate) rows from a benchmark's JSON, whichever of the two shapes it has."""
    rows: list[tuple[str, str, float]] = []
    if isinstance(doc, dict) and isinstance(doc.get("results"), list):
        for r in doc["results"]:
            if isinstance(r, dict) and {"system", "measurement", "rate"} <= set(r):
                rows.append((str(r["system"]), str(r["measurement"]), float(r["rate"])))
    elif isinstance(doc, dict):
        for system, figures in doc.items():
            if isinstance(figures, dict):
                rows += [(system, key.removesuffix("_per_s").replace("_", " ") + "/s", float(value))
                         for key, value in figures.items()
                         if key.endswith("_per_s") and isinstance(value, int | float)]
    return rows


def render_results(results: dict[str, list[tuple[str, str, float]]], notes: list[str], chart: str) -> str:
    """bench/RESULTS.md: one table per benchmark, then notes and the chart."""
    import platform

    lines = ["# Benchmark results", "",
             f"Written by `reprise bench` on {time.strftime('%Y-%m-%d %H:%M')}: python {platform.python_version()}, "
             f"{os.cpu_count()} cpus, {platform.platform()}.", ""]
    for name, rows in results.items():
        lines += [f"## {name}", "", "| system | measurement | per second |", "|---|---|---:|"]
        lines += [f"| {system} | {measurement} | {rate:,.0f} |" for system, measurement, rate in rows]
        lines.append("")
    if notes:
        lines += ["## Notes", "", *[f"- {n}" for n in notes], ""]
    lines += [f"![Reprise vs its peers]({chart})", ""]
    return "\n".join(lines)


def write_chart(results: dict[str, list[tuple[str, str, float]]], path: str) -> None:
    """A PNG with one horizontal bar chart (log scale) per benchmark; Reprise's bars stand out."""
    import textwrap

    import matplotlib

    matplotlib.use("Agg")  # no display on servers and in tests
    import matplotlib.pyplot as plt
    from matplotlib.ticker import NullFormatter

    # Long measurement names are wrapped, so the bars keep most of the width.
    wrap = [[textwrap.fill(f"{system}: {measurement}", 48) for system, measurement, _ in rows]
            for rows in results.values()]
    heights = [max(1.5, 0.3 * sum(label.count("\n") + 1 for label in labels) + 1) for labels in wrap]
    fig, axes = plt.subplots(len(results), 1, figsize=(11, sum(heights)), squeeze=False,
                             gridspec_kw={"height_ratios": heights})
    for ax, labels, (name, rows) in zip(axes[:, 0], wrap, results.items(), strict=True):
        rates = [max(rate, 1e-9) for _, _, rate in rows]
        colors = ["tab:blue" if system.lower().startswith("reprise") else "tab:gray" for system, _, _ in rows]
        ax.barh(range(len(rows)), rates, color=colors)
        ax.set_yticks(range(len(rows)), labels, fontsize=8)
        ax.invert_yaxis()
        ax.set_xscale("log")
        ax.xaxis.set_minor_formatter(NullFormatter())  # labelled minor ticks overlap on short ranges
        ax.bar_label(ax.containers[0], labels=[f"{r:,.0f}" for r in rates], fontsize=7, padding=2)
        ax.set_xlim(right=max(rates) * 4)  # room for the value labels
        ax.set_title(name)
        ax.set_xlabel("per second (log scale; Reprise in blue)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


if __name__ == "__main__":
    sys.exit(main())

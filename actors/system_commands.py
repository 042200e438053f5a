"""`reprise up|node|down|status|rebalance`: start a system from a topology, join one, shut one down, show its
state, move its hosts back to where placement puts them."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, TypedDict

from journal.urls import REDACTED, redact_url

from .cli_error import PROG, CliError
from .error_log import ActorError
from .paths import printable

if TYPE_CHECKING:
    from .errors import SpawnCause


class TlsOptions(TypedDict, total=False):
    """The tls_* keyword arguments of actors.start / connect / shutdown."""

    tls_cert: str
    tls_key: str
    tls_ca: str


def _tls_options(args: argparse.Namespace) -> TlsOptions:
    """The tls_* keyword arguments given on the command line (none: the default)."""
    options = TlsOptions()
    for key in ("tls_cert", "tls_key", "tls_ca"):
        value = getattr(args, key, None)
        if value is not None:
            options[key] = value
    return options



class Terminated(KeyboardInterrupt):
    """SIGTERM or SIGHUP reached `up` or `node` before it waits for them: stop as Ctrl-C does."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"{signal.Signals(signum).name} while starting: stopped what had started")
        self.signum = signum


def _raise_terminated(signum: int, _frame: object) -> None:
    raise Terminated(signum)


@contextmanager
def _terminable() -> Iterator[None]:
    """SIGTERM and SIGHUP raise Terminated meanwhile (as Ctrl-C raises KeyboardInterrupt): start and spawn then
    stop what they had started, instead of dying at once and leaving the system running with nobody to stop it."""
    previous = {sig: signal.signal(sig, _raise_terminated) for sig in (signal.SIGTERM, signal.SIGHUP)}
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def cmd_up(args: argparse.Namespace) -> int:
    """`reprise up`: start a system from a topology file, spawn its actors, then wait or detach."""
    with _terminable():
        return _up(args)


def _up(args: argparse.Namespace) -> int:
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
    if topo.cluster is not None or args.node is not None:
        return _up_cluster_node(topo, args)
    if not topo.entries and topo.system.leader is None:
        # (a member's file may declare nothing: it lends its node to actors placed on it, as `reprise node` does)
        raise CliError(f"{args.topology} declares no actors: `up` would start a system with nothing in it",
                       "add an [[actor]] table (path = \"/user/echo\", class = \"myapp.module:Echo\") or an "
                       "[[entities]] table; see examples/topologies/echo.toml", code=2)
    classes = [resolve_class(e.factory) for e in topo.entries]  # fail before starting anything
    s = topo.system
    # (sampled before the start: the hosts create them)
    new = {url: new_journal_note(url) for url in (s.journal, *(e.options.get("journal") for e in topo.entries))}
    system = actors.start("multiproc", admin_port=args.port or s.admin_port, journal=s.journal,
                          snapshot_store=s.snapshot_store, bind=s.bind, advertise=s.advertise, peers=s.peers,
                          leader=s.leader, node=s.node, log_level=s.log_level, tag=args.tag,
                          run_dir=args.run_dir, secret_file=s.secret_file, tls_cert=s.tls_cert, tls_key=s.tls_key,
                          tls_ca=s.tls_ca, metrics_port=s.metrics_port, metrics_host=s.metrics_host,
                          node_timeout=s.node_timeout, **dict(s.host_defaults))
    try:
        for entry, cls in zip(topo.entries, classes, strict=True):
            system.spawn(cls, entry.path, entities=entry.entities, args=entry.args, kwargs=entry.kwargs,
                         **entry.options)
        _print_up(system, topo, new)
    except BaseException:
        system.shutdown()
        raise
    return _detach_or_wait(system, args.detach)


def _up_cluster_node(topo: Any, args: argparse.Namespace) -> int:
    """`reprise up cluster.toml [--node NAME]`: this machine's node of a cluster file."""
    from .cluster_node import start_node

    if topo.cluster is None:
        raise CliError(f"--node applies to cluster files; {args.topology} has no [cluster] table",
                       "drop --node, or describe the nodes with [cluster] and [[node]] tables", code=2)
    if args.port is not None:
        raise CliError("--port does not apply to a cluster file", "set admin_port in the node's [[node]] table",
                       code=2)
    system = start_node(topo, args.node, tag=args.tag, run_dir=args.run_dir,
                        out=lambda line: print(line, flush=True))
    return _detach_or_wait(system, args.detach)


def cmd_node(args: argparse.Namespace) -> int:
    """`reprise node`: start a convention member that joins `--leader`, then wait or detach."""
    with _terminable():
        return _node(args)


def _node(args: argparse.Namespace) -> int:
    import actors

    host, sep, port = args.leader.rpartition(":")
    if not sep or not host or not port.isdigit():
        raise CliError(f"--leader {args.leader!r} is not HOST:PORT", "e.g. --leader 10.0.0.5:1900", code=2)
    system = actors.start("multiproc", admin_port=args.port, leader=args.leader, node=args.name,
                          bind=args.bind, advertise=args.advertise, tag=args.tag, run_dir=args.run_dir,
                          secret_file=args.secret_file, metrics_port=args.metrics_port,
                          metrics_host=args.metrics_host, **_tls_options(args))
    print(f"node {args.name!r} up on {args.advertise or args.bind}:{system.admin_port}, "
          f"member of {args.leader}; run dir {system.run_dir}", flush=True)
    if args.metrics_port is not None:
        print(f"  metrics  http://{args.metrics_host}:{args.metrics_port}/metrics", flush=True)
    return _detach_or_wait(system, args.detach)


def new_journal_note(url: str | None) -> str:
    """What `reprise up` adds to a journal's line when there is none at its URL yet: a SQLite file (shard 0's for
    `{shard}`) or a PostgreSQL schema.

    The hosts create it (a SQLite file only in a directory that exists): a misspelt file name or `?schema=` starts an
    empty journal, and the actors recover nothing; this note is where that shows.
    """
    from journal.urls import missing_journal, parse_url

    if not isinstance(url, str):
        return ""
    if url.startswith(("postgresql://", "postgres://")):
        try:
            missing = missing_journal(url)
        except Exception:  # (unreachable, or refused: the spawns say so, with the store's own error)
            return ""
        return "" if missing is None else ("  (new: no journal schema was there, so it starts empty; if you meant "
                                           "an existing journal, fix ?schema=)")
    if not url.startswith("sqlite://"):
        return ""
    try:
        path = parse_url(url.replace("{shard}", "0")).target
    except ValueError:  # (start refuses it, naming it)
        return ""
    if os.path.exists(path):
        return ""
    return "  (new: no file was there, so it starts empty; if you meant an existing journal, fix the path)"


def _print_up(system: Any, topo: Any, new: dict[str | None, str]) -> None:
    port = system.admin_port
    print(f"reprise system up on {topo.system.advertise or topo.system.bind}:{port} "
          f"(run dir {system.run_dir})", flush=True)
    if topo.system.journal:
        print(f"  journal  {redact_url(topo.system.journal)}{new.get(topo.system.journal, '')}")
    if topo.system.metrics_port is not None:
        print(f"  metrics  http://{topo.system.metrics_host}:{topo.system.metrics_port}/metrics")
    for entry in topo.entries:
        kind = "entities" if entry.entities else "actor"
        own = entry.options.get("journal")
        print(f"  {kind:<8} {printable(entry.path)}  {printable(entry.factory)}"
              + (f"  journal {redact_url(own)}{new.get(own, '')}" if own else ""))
    sys.stdout.flush()


def _detach_or_wait(system: Any, detach: bool) -> int:
    """Detach (close the client, leave the system running) or wait for Ctrl-C/SIGTERM/SIGHUP and shut down."""
    if detach:
        system.close()
        where = "" if system.admin_host == "127.0.0.1" else f" --host {system.admin_host}"
        print(f"detached; stop it with: {PROG} down --port {system.admin_port}{where}", flush=True)
        return 0
    stop = threading.Event()
    # A hangup too (the terminal closed, the ssh session dropped): nothing would be left to stop the system.
    previous = {sig: signal.signal(sig, lambda *_: stop.set()) for sig in (signal.SIGINT, signal.SIGTERM,
                                                                          signal.SIGHUP)}
    print("running; Ctrl-C, SIGTERM or a hangup shuts it down", flush=True)
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

    from .errors import AskTimeout, MessageNotSent, SystemNotRunning
    from .system import find_tag, kill_tagged

    try:
        actors.shutdown(args.port, args.host, timeout=args.timeout, secret_file=args.secret_file, **_tls_options(args))
    except (SystemNotRunning, AskTimeout, InvalidActorAddress, MessageNotSent) as e:
        # (InvalidActorAddress: the admin's listening socket, inherited by its children, still accepts
        # connections after the admin died, but nobody answers. MessageNotSent: the admin lives, its guardian
        # was killed, and the system can do nothing more.)
        # The admin is gone (SIGKILLed?) but its guardian and hosts may still run. They carry the admin's
        # boot command line (with --port and the system's tag), which identifies them even after a pid
        # was reused: kill exactly those.
        tag = find_tag(args.port, args.host)
        killed = kill_tagged(tag) if tag else []
        if not killed and isinstance(e, SystemNotRunning) and e.nothing_listens:
            # (its "start one first" is no answer to down: its exit status stays 1, since a mistyped --port or
            # --host would otherwise look like a stopped system while the real one keeps running)
            raise CliError(f"nothing to shut down: no actor system listens on {args.host}:{args.port}",
                           f"if it was stopped already there is nothing to do; otherwise check --port/--host "
                           f"(`{PROG} up` printed them)") from None
        if not killed:
            raise
        what = "cannot stop the system" if isinstance(e, MessageNotSent) else "does not answer"
        print(f"the admin on {args.host}:{args.port} {what} ({e}); killed the {len(killed)} "
              f"process(es) of system {tag} it left behind: pids {' '.join(map(str, sorted(killed)))}")
        return 0
    print(f"system on {args.host}:{args.port} shut down")
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    """`reprise status`: hosts (state, restarts, pid, actors alive, unconfirmed, other counters), dead letters, journal size."""
    import actors

    system = actors.connect(args.port, host=args.host, secret_file=args.secret_file, **_tls_options(args))
    try:
        status = system.status()
    finally:
        system.close()
    journal = status.config.get("journal")
    journal_url = journal if isinstance(journal, str) else None
    size = journal_size(journal_url)
    journal_url = redact_url(journal_url)  # the guardian redacts it already; this also covers older ones
    unconfirmed = sum(h.counters.get("unconfirmed", 0) for h in status.hosts.values())
    if args.json:
        print(json.dumps({
            "port": args.port, "dead_letters": status.dead_letters, "journal": journal_url, "journal_bytes": size,
            "unconfirmed": unconfirmed, "run_dir": system.run_dir, "nodes": status.nodes,
            "errors": [{"time": e.time, "host": e.host, "path": printable(e.path), "reason": printable(e.reason)} for e in status.errors],
            "hosts": {printable(p): {"state": h.state, "restarts": h.restarts, "pid": h.pid, "entities": h.entities,
                          "alive": h.alive, "counters": h.counters, "last_exit": printable(h.last_exit) if h.last_exit else h.last_exit,
                          "last_cause": dataclasses.asdict(h.last_cause) if h.last_cause else None,
                          "next_attempt": h.next_attempt, "node": h.node}
                      for p, h in sorted(status.hosts.items())},
        }, indent=2))
        return 0
    print(f"system on {args.host}:{args.port}")
    print(f"  dead letters  {status.dead_letters}")
    print(f"  unconfirmed   {unconfirmed} deliveries")
    if journal_url:
        print(f"  journal       {journal_url}" + (f"  ({_human(size)})" if size is not None else ""))
    if status.nodes:
        print("  nodes         " + ", ".join(f"{printable(n)} {state}" for n, state in status.nodes.items()))
    print(f"  hosts         {len(status.hosts)}")
    if status.hosts:
        width = max(len(printable(p)) for p in status.hosts)
        print(f"    {'PATH':<{width}}  {'KIND':<8}  {'STATE':<10}  {'RESTARTS':>8}  {'PID':>7}  {'ALIVE':>7}  "
              f"{'UNCONFIRMED':>11}  NODE")
        for path, h in sorted(status.hosts.items()):
            kind = "entities" if h.entities else "actor"
            alive = "?" if h.alive is None else h.alive
            pid = "-" if h.pid is None else h.pid  # (no process now: exited, or its new one not ready yet)
            pending = h.counters.get("unconfirmed", 0) if h.alive is not None else "?"
            print(f"    {printable(path):<{width}}  {kind:<8}  {h.state:<10}  {h.restarts:>8}  {pid:>7}  {alive:>7}  "
                  f"{pending:>11}  {printable(h.node or '-')}")
            # Other counters of the hosted actors' stats() (a projection's projection_lag, ...), by name.
            others = sorted((k, v) for k, v in h.counters.items() if k != "unconfirmed")
            if others and h.alive is not None:
                print(f"    {'':<{width}}  " + "  ".join(f"{printable(k)} {v}" for k, v in others))
            if h.last_exit:
                print(f"    {'':<{width}}  last exit: {printable(h.last_exit)}{_exit_hint(h.last_cause)}")
            if h.next_attempt is not None:
                wait = max(0.0, h.next_attempt - time.time())
                print(f"    {'':<{width}}  next attempt in {wait:.1f} s ({time.strftime('%H:%M:%S', time.localtime(h.next_attempt))})")
    _print_errors(status.errors)
    if system.run_dir:  # (the attached admin's own, as in --json: a member's, not its leader's)
        print(f"  logs          {system.run_dir}  (actors.log has each error's traceback)")
    return 0


def store_hint(cause: SpawnCause) -> tuple[int, str]:
    """Exit code and hint for a host that failed to start on its journal or snapshot store (`cause` says which,
    and why when the store's error says more than "it would not open")."""
    from .journal_commands import GRANT_HINT, NOT_A_JOURNAL_HINT

    if cause.kind == "no_journal":
        return 2, 'add one to the topology, e.g. [system] journal = "sqlite://journal.db" (relative to its file)'
    key = cause.kind
    if cause.store_error is not None:
        fix = GRANT_HINT if cause.store_error == "access_denied" else NOT_A_JOURNAL_HINT
        return 1, f"{fix}; its URL is [system] {key} = in the topology (or the actor's own {key} =)"
    check = f"`{PROG} journal ls {cause.where}` opens it alone; " if key == "journal" else ""
    return 1, f"{check}its URL is [system] {key} = in the topology (or the actor's own {key} =)"


def _exit_hint(cause: SpawnCause | None) -> str:
    """The fix for a host's last exit, from what it failed on (a store its restarts cannot open), else ""."""
    if cause is None or cause.kind not in ("journal", "snapshot_store", "no_journal"):
        return ""
    return f" (hint: {store_hint(cause)[1]})"


def cmd_rebalance(args: argparse.Namespace) -> int:
    """`reprise rebalance`: move `nodes=` hosts and shards, one at a time, to where placement over the live nodes puts them."""
    import actors

    system = actors.connect(args.port, host=args.host, secret_file=args.secret_file, **_tls_options(args))
    try:
        moves = system.rebalance(args.path, timeout=args.timeout)
    finally:
        system.close()
    if args.json:
        print(json.dumps({"moves": [{"key": printable(m.key), "from": m.from_node, "to": m.to_node} for m in moves]},
                         indent=2))
        return 0
    for m in moves:
        print(f"moved {printable(m.key)} from node {printable(m.from_node)} to node {printable(m.to_node)}")
    print(f"{len(moves)} move(s); every nodes= host{' of ' + printable(args.path) if args.path else ''} "
          "is where placement over the live nodes puts it")
    return 0


ERRORS_PER_HOST = 5


def _print_errors(errors: tuple[ActorError, ...]) -> None:
    """Each host's most recent errors inside actors: time, path, one-line reason."""
    print(f"  errors        {len(errors)}" + (" (the most recent kept)" if errors else ""))
    by_host: dict[str, list[ActorError]] = {}
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
    from journal import missing_journal, open_journal

    try:
        if missing_journal(url):  # (no actor has written yet: opening would create it, a misspelt file too)
            return None
        journal = open_journal(url)
    except Exception:  # status must still show the rest when the journal cannot be opened
        return None
    try:
        return journal.storage_bytes()
    finally:
        journal.close()


def _human(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)

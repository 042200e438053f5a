"""Starting, attaching to and using an actor system from outside any actor."""

from __future__ import annotations

import difflib
import errno
import functools
import inspect
import itertools
import logging
import multiprocessing
import os
import pickle
import random
import re
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict, deque
from collections.abc import Callable, Iterable, Sequence
from contextlib import ExitStack
from contextvars import ContextVar
from datetime import timedelta
from typing import Any, TypeVar, cast

from thespian.actors import (
    ActorSystem,
    ActorSystemException,
    ActorSystemFailure,
    DeadEnvelope,
    InvalidActorAddress,
    PoisonMessage,
)
from thespian.system.transport import SendStatus

from . import admin_probe, auth, client_log, interrupts, local_resources, netsec, thespian_fixes
from . import metrics as metrics_module
from . import tls as tls_module
from .error_log import ActorFailure, AskUndelivered, Errors, GetErrors, SubscribeErrors
from .errors import (
    ActorFailed,
    AskTimeout,
    ConfigError,
    LeaderUnreachable,
    MessageNotSent,
    MessageUndelivered,
    PathTaken,
    RepriseError,
    SendTimeout,
    SpawnCause,
    SpawnFailed,
    SystemNotRunning,
    UnpicklableMessage,
)
from .guardian import NODE_TIMEOUT, Guardian, GuardianInit
from .handover import sample_path
from .host_options import check_option, known_host_options
from .inflight import process_gone
from .local_systems import (
    boot_option,
    describe_holders,
    is_local_address,
    listen_address,
    listening,
    own_processes,
    run_dir_in_use,
    unresolvable,
    wait_for_leftovers,
)
from .main_module import adopt_main_classes
from .messages import (
    GUARDIAN_PATH,
    Barrier,
    Batch,
    DeadLetter,
    DeadLetters,
    DirectoryUpdate,
    GetDeadLetters,
    GetDirectory,
    GetNodes,
    GetStatus,
    GuardianIs,
    HostSpec,
    Move,
    Nodes,
    Rebalance,
    Rebalanced,
    RegisterRoute,
    ShardSet,
    Spawned,
    SpawnHost,
    StopPath,
    SubscribeDeadLetters,
    SystemStatus,
    UnregisterRoute,
    WhereIsGuardian,
)
from .paths import check_spawn_path, printable, shard_key, validate_path
from .process_identity import this_process
from .supervision import DEFAULT_HOLD_LIMIT, Backoff, check_hold_limit
from .thespian_types import Address
from .transport import Entry, Route, Router, address_key, check_message, pack, route_keys, unpack
from .unrouted import Unrouted
from .validation import (
    check_constructor,
    check_ip,
    check_leader,
    check_log_level,
    check_nodes,
    check_number,
    check_peers,
    check_port,
    check_process_local_stores,
    check_shared_stores,
    check_spawn_options,
    check_spawn_target,
    memory_urls_in,
)

log = logging.getLogger("reprise.system")
R = TypeVar("R")
# Set while System.system_actor_of spawns: spawn() then takes a path below /system (see paths.check_spawn_path).
_SYSTEM_ACTOR: ContextVar[bool] = ContextVar("reprise_system_actor", default=False)
_LOGGED_ERROR = re.compile(r"^[\w.]+(Error|Exception): ")

BASES = {"local": "simpleSystemBase", "multiproc": "multiprocTCPBase"}
DIRECTORY_TTL = 1.0
# A client waits in slices this long, so that a connection it refused meanwhile (a node that joined after its
# last directory fetch, replying) makes it fetch the directory again while the node still retries that send.
REFUSAL_CHECK = 0.25
LAST_LOOK = 0.25  # seconds a waiting call reads what arrived before it says the system it waited on is gone
CLOSE_CHECK = 0.25  # seconds between a waiting call's looks at whether another thread shut the system down
SEND_LIMIT = 60.0  # seconds a tell may wait for the transport (Thespian's own MAX_TELL_PERIOD)
# Thespian retries a send whose connection closed before the ACK after 35 s x attempt: the first tell after
# a host's SIGKILL blocked 35 s before the reconnect found the target dead. Retry sooner; 20 retries still
# span about SEND_LIMIT.
SEND_RETRY = timedelta(seconds=0.25)
ATTACH_MIN = 2.0  # seconds connect's attach gets at least, after a probe that took all its timeout (one query)
BARRIER_WAIT = 10.0  # seconds a tell waits for messages held by the guardian to drain before sending direct
# Thespian's default 950-deep transmit queue is scanned on every send (~300 msgs/s); a shorter queue
# blocks senders earlier (back-pressure) and keeps sends cheap. Nothing is ever dropped below 1e6.
_BOOT_ATTEMPTS = 3
THESPIAN_TUNING = {
    "THESPIAN_MAX_QUEUED_TRANSMITS": "128",
    "THESPIAN_QUEUED_TRANSMIT_UNBLOCK_THRESHOLD": "64",
    "THESPIAN_DROP_TRANSMITS_LEVEL": "1000000",
}


def start(base: str = "local", *, admin_port: int | None = None, journal: str | None = None,
          snapshot_store: str | None = None, bind: str = "127.0.0.1", advertise: str | None = None,
          peers: tuple[str, ...] = (), leader: str | None = None, node: str | None = None,
          tag: str | None = None, run_dir: str | None = None, log_level: str = "WARNING",
          start_timeout: float = 60.0, secret_file: str | None = None, tls: tls_module.TlsConfig | None = None,
          tls_cert: str | None = None, tls_key: str | None = None, tls_ca: str | None = None,
          metrics_port: int | None = None, metrics_host: str = metrics_module.DEFAULT_HOST,
          node_timeout: float = NODE_TIMEOUT, **config: Any) -> System:
    """Start an actor system and return a `System` that owns it (a context manager that shuts it down).

    `base="local"` runs every actor in this process (Thespian's simpleSystemBase: deterministic,
    for tests); `base="multiproc"` runs every host in its own OS process (multiprocTCPBase) behind an
    admin on `admin_port` (a free port if None) bound to `bind` (loopback by default). `leader="ip:port"`
    joins an existing system's convention as member `node`.

    Every frame between the system's processes and clients is authenticated with a per-system secret,
    kept in `<run_dir>/secret` (mode 0600). `secret_file` names a secret shared by the machines of a
    multi-host system: the leader creates it if it does not exist, members must be given a copy.

    `tls=TlsConfig(cert, key, ca)` (or `tls_cert=`, `tls_key=`, `tls_ca=`: PEM file paths, all three)
    makes every TCP connection of the system mutual TLS (see actors/tls.py); multiproc only.

    `metrics_port` serves Prometheus metrics on http://metrics_host:metrics_port/metrics (off by default; loopback
    unless `metrics_host` names another interface): on multiproc every node started with one serves its
    own hosts, on local a thread of this process serves them (see actors/metrics.py).

    `node` names this system's node (default "leader" for a leader; a member must be named). The guardian
    pings every member node each `node_timeout`/5 seconds and declares it down after `node_timeout`
    seconds without an answer: hosts spawned with `nodes=` then restart on another live node.
    """
    _refuse_inside_actor_process("actors.start()")
    if base not in BASES:
        raise ConfigError(f"base must be one of {sorted(BASES)} (multiprocQueueBase is not offered: it "
                          f"deadlocks under load), got {base!r}")
    check_port("admin_port", admin_port)
    # Persistence's settings: checked by the layer that registered them (actors.host_options), carried as is.
    for name, value in (("journal", journal), ("snapshot_store", snapshot_store)):
        if value is not None:
            check_option(name, value, per_host=False)
    check_process_local_stores(base, {"journal": journal, "snapshot_store": snapshot_store})
    _check_other_options(config)
    check_ip("bind", bind)
    check_ip("advertise", advertise, allow_none=True)
    peers = check_peers(peers)
    check_leader(leader)
    if node is not None and (not isinstance(node, str) or not node.strip()):
        raise ConfigError(f"node must be a non-empty name such as 'worker-1', got {node!r}")
    log_level = check_log_level(log_level)
    check_number("node_timeout", node_timeout, hint="seconds without heartbeat answers before a node is down")
    check_number("start_timeout", start_timeout, hint="seconds to wait for the actor system to start")
    if tag is not None and (not isinstance(tag, str) or not tag or any(c.isspace() or c == "\0" for c in tag)):
        raise ConfigError(f"tag must be a non-empty string without spaces (it marks the system's processes), "
                          f"got {tag!r}")
    if run_dir is not None and not isinstance(run_dir, str | os.PathLike):
        raise ConfigError(f"run_dir must be a directory path, got {run_dir!r}")
    if secret_file is not None and not isinstance(secret_file, str | os.PathLike):
        raise ConfigError(f"secret_file must be a file path (the secret every machine of the system shares), got "
                          f"{secret_file!r}")
    tls_files = tls_module.tls_config(tls, tls_cert, tls_key, tls_ca)
    metrics_module.check_options(metrics_port, metrics_host)
    _check_metrics_port_is_not_admin_port(metrics_port, admin_port)
    _check_metrics_port_free(metrics_host, metrics_port)
    if tls_files is not None:
        if base != "multiproc":
            raise ConfigError("TLS applies to multiproc systems (the local base has no network): drop tls*= or "
                              "use base='multiproc'")
        tls_files = tls_module.check(tls_files)
    config = dict(config, journal=journal, snapshot_store=snapshot_store, node=node, leader=leader,
                  log_level=log_level, metrics_port=metrics_port, metrics_host=metrics_host,
                  node_timeout=float(node_timeout))
    if base == "local":
        client_log.keep_private()
        asys = ActorSystem("simpleSystemBase", {"Reprise Leader": True, "Reprise Node": node or "leader"},
                           logDefs=False, transientUnique=True)
        guardian = asys.createActor(Guardian)
        reply = asys.ask(guardian, GuardianInit(config), start_timeout)
        if not isinstance(reply, Spawned):
            asys.shutdown()
            raise SpawnFailed(f"the guardian did not start: {reply!r}")
        system = System(asys, base=base, guardian=guardian, owner=True, config=config)
        local_resources.started()
        if metrics_port is not None:
            try:
                system.metrics = metrics_module.serve(metrics_module.StatusCollector(
                    lambda: system.status(metrics_module.SCRAPE_WAIT), node or "leader", True), metrics_port,
                    metrics_host)
            except BaseException:
                system.shutdown()
                raise
        return system

    leader_address = _host_port(leader) if leader else None
    if leader_address and tls_files is not None:
        # A member that cannot speak to its leader would start and never join: say why now.
        why = tls_module.probe(*leader_address, tls_files, unreachable_ok=True)
        if why is not None:
            raise tls_module.TlsError(f"this member cannot join leader {leader}: {why}")
    secret = _system_secret(secret_file, leader, bool(config.pop("insecure_no_auth", False)))
    if leader_address and secret is not None and listening(*leader_address):
        # A wrong secret, or no TLS towards a TLS leader, showed only as Thespian's NoCompatibleSystemForActor,
        # or a PendingActor timeout 50 s later: one signed frame tells now.
        verdict = admin_probe.signed_probe(*leader_address, secret, tls_files, 5.0)
        _refuse_unreadable(verdict, *leader_address, tls_files, f"this member's secret ({secret_file})")
    config["tls"] = None if tls_files is None else dict(cert=tls_files.cert, key=tls_files.key, ca=tls_files.ca)
    _configure_process_env(bind, advertise, peers)
    env = dict(os.environ)
    env.update(THESPIAN_TUNING)
    env.update(THESPLOG_THRESHOLD="WARNING", PYTHONPATH=os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)))
    if run_dir is not None and (holder := run_dir_in_use(os.fspath(run_dir))) is not None:
        raise SpawnFailed(f"run_dir {os.fspath(run_dir)} is the run dir of the actor system running on admin port "
                          f"{holder}: a second system there would overwrite its secret (no client, not even `reprise "
                          f"down --port {holder}`, could reach it any more) and mix their logs; choose another "
                          f"run_dir, or stop that system first (`reprise down --port {holder}`)")
    # A port we picked can be taken by someone else before the admin binds it (Thespian then reports
    # "not a valid or useable ActorSystem Admin"): pick another. A port the caller chose is not retried.
    for attempt in range(1 if admin_port else _BOOT_ATTEMPTS):
        port = admin_port or free_port(bind)
        if listening(advertise or bind, port) and _still_held(advertise or bind, port, bool(admin_port)):
            raise SpawnFailed(f"admin port {port} is already in use; attach with actors.connect({port}) "
                              "or choose another port", SpawnCause("admin_port", str(port)))
        if not _bindable(bind, port):  # (bound by a program that does not listen: Thespian's error says neither)
            if admin_port:
                raise SpawnFailed(f"admin port {port} is bound by another program on {bind} (it does not listen, "
                                  "so it is no actor system); choose another port")
            continue
        port_tag = tag or f"reprise-system-{port}-{uuid.uuid4().hex[:8]}"
        port_dir = os.fspath(run_dir) if run_dir else tempfile.mkdtemp(prefix=f"reprise-{port}-")
        _private_run_dir(port_dir)
        if not run_dir:  # ours is removed on a clean shutdown; a directory the user named is theirs to keep
            os.close(os.open(os.path.join(port_dir, TEMPORARY_MARK), os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600))
        config["run_dir"] = port_dir
        if secret is not None:
            auth.write_secret(os.path.join(port_dir, auth.SECRET_NAME), secret)
        tls_module.write_config(port_dir, tls_files)
        env["THESPLOG_FILE"] = os.path.join(port_dir, "thespian.log")
        # The configuration (journal URLs may hold passwords) and the secret go through a pipe: any user
        # can read a command line or, as root, an environment; every actor process keeps boot's.
        cmd = [sys.executable, "-m", "actors.boot", "--port", str(port), "--tag", port_tag, "--run-dir", port_dir]
        boot_log = os.path.join(port_dir, "boot.log")
        # A file, not a pipe: the daemonised admin inherits the descriptor and would hold a pipe open.
        with open(os.open(boot_log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600), "w") as out:
            try:
                # umask: the logs the admin and actors create in the run dir are private (0600) too.
                proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                      input=pickle.dumps((config, secret)), timeout=start_timeout, umask=0o077)
            except subprocess.TimeoutExpired:
                kill_tagged(port_tag)
                raise SpawnFailed(f"the actor system on port {port} did not start within {start_timeout} s; "
                                  f"see {boot_log}") from None
            except BaseException:
                # Ctrl-C (or another interruption) while booting: subprocess.run killed only the boot command,
                # and the admin it daemonised ran on with what it had forked, with nobody to stop it.
                _abandon_boot(port_tag, None if run_dir else port_dir)
                raise
        if proc.returncode == 0:
            break
        kill_tagged(port_tag)
        with open(boot_log) as f:
            tail = f.read()[-2000:]
        if leader_address and "NoCompatibleSystemForActor" in tail and not listening(*leader_address):
            if not run_dir:
                shutil.rmtree(port_dir, ignore_errors=True)  # (nothing of this member ran: nothing to read)
            raise LeaderUnreachable(f"this member could not join its leader {leader}: nothing listens there; start "
                                    "the leader first (`reprise up TOPOLOGY.toml --node <its name>`), or fix the "
                                    "leader's address", member_runs=False)
        refused = next((line for line in tail.splitlines() if line.startswith("NodeRefused: ")), None)
        if refused is not None:  # (another live member is that node: nothing of this one runs)
            if not run_dir:
                shutil.rmtree(port_dir, ignore_errors=True)
            raise SpawnFailed(f"this member did not join: {refused[len('NodeRefused: '):]}")
        if "not a valid or useable ActorSystem Admin" not in tail or attempt + 1 >= _BOOT_ATTEMPTS or admin_port:
            raise SpawnFailed(f"the actor system on port {port} did not start (see {boot_log}):\n{tail}")
        if not run_dir:
            shutil.rmtree(port_dir, ignore_errors=True)  # the next attempt makes its own
        log.warning("the actor system on port %d did not start (port taken meanwhile?); trying another port", port)
    try:
        system = connect(port, host=advertise or bind, _owner=True, _secret=secret, _tls=tls_files)
    except BaseException as e:
        # Nobody would get a handle to shut the booted system down: stop it now. Its temporary run dir goes
        # too when interrupted; after an error it stays for its logs.
        _abandon_boot(port_tag, None if run_dir or isinstance(e, Exception) else port_dir)
        raise
    tag, run_dir = port_tag, port_dir
    system.tag, system.run_dir = tag, run_dir
    logging.getLogger("reprise").info("actor system on port %d started; its logs (actors.log: errors inside "
                                      "actors with tracebacks) are in %s", port, run_dir)
    return system


def _abandon_boot(tag: str, temporary_dir: str | None) -> None:
    """Kill every process of a system whose start did not complete, and remove its run dir if start made it."""
    # The admin may be forking while it is killed: a child forked after the listing is found by the next one.
    for _ in range(20):
        if not kill_tagged(tag):
            break
    if temporary_dir is not None:
        shutil.rmtree(temporary_dir, ignore_errors=True)


_INTERNAL_OPTIONS = ("insecure_no_auth",)  # benchmarks only (bench/transport.py): not a user's option


def _check_other_options(config: dict[str, Any]) -> None:
    """ConfigError for a keyword of start() that is neither its own parameter nor an option a layer registered
    (actors.host_options: persistence's actor defaults, ...): a misspelt `metric_port=` started a system without
    the metrics it asked for."""
    known = known_host_options()
    for name, value in config.items():
        if name in _INTERNAL_OPTIONS:
            continue
        if name not in known:
            names = sorted((set(inspect.signature(start).parameters) - {"config"}) | set(known))
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise ConfigError(f"start() got an unknown option {name}={value!r}: {hint}the options are "
                              f"{', '.join(names)}")
        check_option(name, value, per_host=False)


# A send error's name for what was sent, given to _send/_transmit: a str, or a function computing it only for the error
# (a batch's, `_told`, would walk every entry of every tell).
Described = str | Callable[[], str] | None


def _describe(what: Described, message: object, address: Address) -> str:
    """The name of what a send carried, for its error: `what`, or the message's type and address."""
    if what is None:
        return f"{type(message).__name__} to {address}"
    return what if isinstance(what, str) else what()


def _told(entries: list[Entry]) -> str:
    """What a batch of (sender, path, message) entries carries, for a send error: "Ping to /user/a", or "3
    messages to /user/a, /user/b"."""
    if len(entries) == 1:
        return f"{type(entries[0][2]).__name__} to {entries[0][1]}"
    paths = list(dict.fromkeys(entry[1] for entry in entries))
    shown = ", ".join(paths[:3]) + (f" and {len(paths) - 3} more" if len(paths) > 3 else "")
    return f"{len(entries)} messages to {shown}"


def _ignore(entry: Entry, why: str) -> None:
    """An on_bad that drops the entry (only its target is wanted)."""


def _text(value: object) -> str | None:
    """`value` if it is a str (a config entry read back), else None."""
    return value if isinstance(value, str) else None


TEMPORARY_MARK = ".temporary"
"""A file in a run dir that actors.start made (and a clean shutdown removes); a run dir the user named has none."""


def _private_run_dir(path: str) -> None:
    """Create `path` (mode 0700), or make an existing one of this user's, and the files a system writes in it,
    private (0700 / 0600); refuse a run dir (or such a file) that another user owns, or that is a symlink.

    Another user's directory stays theirs to open again (chmod by root does not change its owner), and a link
    they planted in it would make the system write its logs through it, over any file of this user (of root,
    for a system root starts). Once the directory is this user's and 0700, nobody else can add to it.
    """
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
    except (FileExistsError, NotADirectoryError):  # (the path, or a directory above it, is a file)
        raise ConfigError(f"run_dir {path} cannot be a directory: it or a directory above it is a file; give a "
                          "directory path") from None
    _refuse_foreign(path, f"run_dir {path}", "choose a directory of your own, or a new path (it is created 0700)",
                    stat.S_ISDIR)
    # makedirs leaves an existing directory's mode alone, and FileHandler appends to an existing log
    # keeping its mode: logs can hold message contents, so neither may stay readable by others.
    os.chmod(path, 0o700)
    for name in _RUN_DIR_FILES:
        file = os.path.join(path, name)
        if _refuse_foreign(file, f"{file} (in run_dir {path})", "remove it, or choose another run_dir",
                           stat.S_ISREG):
            os.chmod(file, 0o600)


_RUN_DIR_FILES = ("actors.log", "thespian.log", "thespian.log.old", "boot.log", auth.SECRET_NAME,
                  tls_module.TLS_NAME, TEMPORARY_MARK)


def _refuse_foreign(path: str, what: str, fix: str, kind: Callable[[int], bool]) -> bool:
    """SpawnFailed unless `path` is missing (False) or of `kind`, not a symlink, and this user's (True)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISLNK(st.st_mode):
        raise SpawnFailed(f"{what} is a symbolic link (to {os.readlink(path)}): {fix}")
    if not kind(st.st_mode):
        raise SpawnFailed(f"{what} is not a {'directory' if kind is stat.S_ISDIR else 'regular file'}: {fix}")
    if st.st_uid != os.geteuid():
        raise SpawnFailed(f"{what} belongs to uid {st.st_uid}, not to this user (uid {os.geteuid()}): {fix}")
    return True


def _refuse_inside_actor_process(what: str) -> None:
    """Raise if this process is a Thespian admin or actor process (one of an actor system's own processes).

    A module that starts a system at import time is imported again there when an actor process unpickles
    one of its classes: each import would start another system, whose processes import it again (a fork
    bomb: ~2,400 processes from one `import tour`).
    """
    name = multiprocessing.current_process().name
    if name == "ThespianAdmin" or name.startswith("Actor_"):
        raise RepriseError(
            f"{what} was called inside an actor-system process ({name}, pid {os.getpid()}), most likely by a module "
            "that starts a system when it is imported, imported again here to unpickle one of its classes. "
            "Put the code that starts the system under `if __name__ == \"__main__\":` (or in a function), so that "
            "importing the module only defines classes")


def _system_secret(secret_file: str | None, leader: str | None, insecure: bool) -> bytes | None:
    """The secret a new system's processes authenticate with (None: unauthenticated, benchmarks only)."""
    if insecure:
        return None
    if secret_file:
        return auth.ensure_secret(os.path.abspath(secret_file), create=not leader)
    if leader:
        raise auth.MissingSecret(f"a member (leader={leader!r}) must use the leader's secret: pass secret_file= "
                                 "a copy of the leader's secret file (the leader's secret_file, or its "
                                 "<run dir>/secret)")
    return auth.new_secret()


_FIND = object()


def connect(admin_port: int, host: str = "127.0.0.1", *, timeout: float = 30.0, secret_file: str | None = None,
            tls: tls_module.TlsConfig | None = None, tls_cert: str | None = None, tls_key: str | None = None,
            tls_ca: str | None = None, metrics_port: int | None = None,
            metrics_host: str = metrics_module.DEFAULT_HOST, _owner: bool = False, _secret: Any = _FIND,
            _tls: Any = _FIND, _leaderless: list[tuple[str, str]] | None = None) -> System:
    """Attach this process to a running multi-process system; never starts or shuts one down.

    `metrics_port` serves the whole system's Prometheus metrics from this process while it stays attached
    (every node's hosts, labelled by node): for a system started without metrics endpoints.

    The system's secret is read from the run dir of the local admin on `admin_port` (readable by the
    user that started it), or from `secret_file`. A system with TLS needs a client certificate signed
    by its CA: `tls=` / `tls_cert=`, `tls_key=`, `tls_ca=`, or by default the files it was started with.
    """
    _refuse_inside_actor_process("actors.connect()")
    # (it said "or None for a free port": connect attaches to a running system, and None is refused below)
    check_port("admin_port", admin_port, free=": the port of a running system's admin, e.g. actors.connect(1900)")
    if admin_port is None:
        raise ConfigError("admin_port must be the port of a running system's admin, e.g. actors.connect(1900)")
    check_number("timeout", timeout, hint="seconds to wait for the actor system to answer")
    deadline = time.monotonic() + timeout  # (the probe and Thespian's attach share it)
    metrics_module.check_options(metrics_port, metrics_host)
    _check_metrics_port_is_not_admin_port(metrics_port, admin_port)
    _check_metrics_port_free(metrics_host, metrics_port)
    if _tls is _FIND:
        _tls = tls_module.tls_config(tls, tls_cert, tls_key, tls_ca)
        _tls = tls_module.check(_tls) if _tls is not None else _local_tls(admin_port, host)
    if not listening(host, admin_port):
        why = unresolvable(host)
        if why is not None:  # (not "no actor system listens": nothing could be asked at all)
            raise ConfigError(f"host {host!r} does not resolve ({why}): give the admin's IP address or a host name "
                              f"this machine resolves (host=..., `--host`)")
        elsewhere = listen_address(admin_port)
        if elsewhere is not None and elsewhere != host:
            raise SystemNotRunning(f"no actor system listens on {host}:{admin_port}; the local one on port "
                                   f"{admin_port} listens on {elsewhere}: give host={elsewhere!r} (`--host {elsewhere}`)")
        raise SystemNotRunning(
            f"no actor system listens on {host}:{admin_port}; start one first (`reprise up TOPOLOGY.toml` "
            f"or actors.start('multiproc', admin_port={admin_port}))", nothing_listens=True
        )
    if _tls is not None and _secret is _FIND:  # (start() connects to the admin it just made: no need)
        # The common mistakes (no TLS there, a server certificate of another CA) show in one handshake;
        # otherwise Thespian would retry for ~15 s before giving up without saying why.
        why = tls_module.probe(host, admin_port, _tls, verdict=False)
        if why is not None:
            raise tls_module.TlsError(why)
    source = "the secret actors.start made"
    verdict = None  # (no probe: start() attaching to the admin it made)
    if _secret is _FIND:
        source = secret_file or _find_secret_file(host, admin_port)
        secret = _read_secret(source, host, admin_port, found=secret_file is None)
        # A wrong secret (or a plain client of a TLS admin) is otherwise told only after Thespian's ~12 s of
        # retried queries, whatever `timeout`: one signed frame tells at once, or within `timeout` from a
        # busy admin. Only when it could not be sent does Thespian's own attach decide.
        verdict = admin_probe.signed_probe(host, admin_port, secret, _tls, timeout)
        if verdict is admin_probe.Verdict.SILENT:
            raise AskTimeout(
                f"the process on {host}:{admin_port} accepted a connection but did not answer within {timeout} s: "
                "its admin is busy, or stopped (SIGSTOP, a debugger); try again, or with a longer timeout")
        _refuse_unreadable(verdict, host, admin_port, _tls, source)
        auth.use_secret(secret)
    elif _secret is None:
        auth.allow_unauthenticated()
    else:
        auth.use_secret(_secret)
    tls_module.use(_tls)
    client_log.keep_private()
    # A client attaches to an admin on this machine (or network namespace) at `host`, so it listens and
    # advertises there too. An inherited REPRISE_BIND (from a parent that started another system) must
    # not win: replies would be addressed to an interface the admin cannot reach, and the ask would hang.
    _configure_process_env(host, host, None)
    asys = None
    try:
        # A Ctrl-C is held until this endpoint is made (its query to the admin: as soon as the admin answers, which
        # the probe above saw it do): raised inside, it left the endpoint unreachable, and open.
        # Thespian's attach queries for ~15 s whatever `timeout`: it ends by connect's deadline (at least one of
        # Thespian's 2 s queries after a probe that used it all: the admin has just answered that probe).
        with interrupts.held(), thespian_fixes.attach_within(max(deadline - time.monotonic(), ATTACH_MIN)):
            asys = ActorSystem("multiprocTCPBase", {"Admin Port": admin_port}, logDefs=None, transientUnique=True)
    except InvalidActorAddress as failed:
        waited = f"{timeout} s" if isinstance(failed, thespian_fixes.AttachTimedOut) else "Thespian's ~15 s"
        if verdict is admin_probe.Verdict.READS:
            # The probe's frame, signed with this secret (over TLS if any), was read (a wrong one is answered
            # ACK+DATAERR, refused above): the admin went silent after it, so blaming the secret (or TLS, whose probe
            # would only wait on it again) would send the user after the wrong cause.
            raise AskTimeout(f"the admin on {host}:{admin_port} accepted this client's secret ({source}) but did not "
                             f"answer the attach that followed within {waited}: it is busy, or was stopped "
                             "meanwhile (SIGSTOP, a debugger); try again once it answers") from None
        why = tls_module.probe(host, admin_port, _tls)
        if why is not None:
            raise tls_module.TlsError(why) from None
        # An admin drops every frame whose HMAC does not verify, so a wrong secret looks like silence.
        raise _not_our_admin(host, admin_port, source) from None
    except BaseException:
        if asys is not None:  # (a Ctrl-C held until the endpoint was made, raised as the `with` ended)
            _close_endpoint(asys)
        raise
    try:
        with interrupts.guarded():  # (as every client call into Thespian: a Ctrl-C where the transport can take it)
            agent = _node_agent(asys, host, admin_port, max(deadline - time.monotonic(), ATTACH_MIN))
            reply = asys.ask(agent, WhereIsGuardian(), timeout)
    except BaseException:
        _close_endpoint(asys)
        raise
    if reply is None:  # (no answer at all: not an admin without a guardian, which answers GuardianIs(None))
        _close_endpoint(asys)
        _raise_if_gone(host, admin_port, "its node agent did not answer where the guardian is")
        raise AskTimeout(f"the admin on {host}:{admin_port} answered the attach, but its node agent (which tells "
                         f"clients where the guardian is) did not answer within {timeout} s: the system is busy, or "
                         "its processes were stopped meanwhile (SIGSTOP, a debugger); try again once it answers, or "
                         f"stop it with `reprise down --port {admin_port}`")
    if not isinstance(reply, GuardianIs) or reply.address is None:
        _close_endpoint(asys)
        raise SystemNotRunning(f"the admin on {host}:{admin_port} knows no Reprise guardian: it was not started by "
                               "Reprise (start systems with actors.start or `reprise up`), or the processes of its "
                               f"guardian or node agent were killed (`reprise down --port {admin_port}` kills what "
                               "is left)")
    system = System(asys, base="multiproc", guardian=reply.address, owner=_owner, admin_port=admin_port)
    try:
        _attach(system, agent, host, admin_port, timeout, metrics_port, metrics_host, _leaderless)
    except BaseException:  # (a Ctrl-C too: the half-attached handle is nobody's to close)
        system.close()
        raise
    return system


def _node_agent(asys: ActorSystem, host: str, admin_port: int, seconds: float) -> Address:
    """The address of the admin's node agent, asked for by its global name within `seconds`."""
    try:
        with thespian_fixes.attach_within(seconds):
            return cast(Address, asys.createActor("actors.guardian.NodeAgent", globalName="reprise-node"))
    except (thespian_fixes.CreateTimedOut, ActorSystemFailure) as failed:
        # It answered the attach just before: it stopped answering since (Thespian waited 50 s for it, then
        # said only "Could not request new Actor from Admin (-SENDSTS_FAILED)").
        got = (f"no answer within {seconds:.3g} s" if isinstance(failed, thespian_fixes.CreateTimedOut)
               else f"a failed send ({failed})")
        _raise_if_gone(host, admin_port, f"its lookup of the node agent got {got}")
        raise AskTimeout(f"the admin on {host}:{admin_port} answered the attach, then stopped answering: its lookup "
                         f"of the node agent got {got}; it is busy, or was stopped or killed meanwhile (SIGSTOP, a debugger); try again once it "
                         f"answers, or stop it with `reprise down --port {admin_port}`") from None


def _raise_if_gone(host: str, admin_port: int, what: str) -> None:
    """SystemNotRunning (saying `what` happened) if nothing listens on the admin port any more: the system was shut
    down while this client attached (stopped or busy meanwhile, it read the last replies its processes sent)."""
    if not listening(host, admin_port):
        raise SystemNotRunning(f"the actor system on {host}:{admin_port} is not running any more (nothing listens on "
                               f"its admin port: it was shut down while this client attached; {what})",
                               nothing_listens=True) from None


def _attach(system: System, agent: Address, host: str, admin_port: int, timeout: float, metrics_port: int | None,
            metrics_host: str, _leaderless: list[tuple[str, str]] | None) -> None:
    """The rest of connect(): what `system` learns of the admin and the guardian it attached to."""
    system._agent = agent
    system.admin_host = host
    if is_local_address(host):
        system._admin_tag = boot_option(admin_port, "--tag", host)
    try:
        system.config = system.status(timeout=timeout).config
    except (AskTimeout, MessageNotSent):
        # A member's guardian is its leader's: a leader that is gone leaves a member whose admin answers.
        gone = system._member_of()
        if gone is None or _leaderless is None:  # (connect closes the handle)
            if gone is None:
                raise
            raise LeaderUnreachable(
                f"member node {gone[0]!r} on {host}:{admin_port}: its leader {gone[1]} does not answer (it is down "
                "or unreachable from here), and nothing can be done through a member without it: start the leader "
                f"again at {gone[1]}, or shut this member down with `reprise down --port {admin_port}`") from None
        _leaderless.append(gone)  # (actors.shutdown: a member can be shut down by itself, through its own admin)
    system.run_dir = _attached_run_dir(system, host)
    if metrics_port is not None:
        system.metrics = metrics_module.serve(metrics_module.StatusCollector(
            lambda: system.status(metrics_module.SCRAPE_WAIT), None, True), metrics_port, metrics_host)


def _close_endpoint(asys: ActorSystem) -> None:
    """Close the client endpoint of `asys`, which connect() made and will not return: peers sending to it are
    refused at once, not left waiting for an acknowledgement that would never come."""
    transport = getattr(getattr(asys, "_systemBase", None), "transport", None)
    if transport is not None:
        try:
            transport.close()
        except Exception:  # (what is left of it is garbage: nothing to report to the caller, who has its error)
            log.debug("closing an abandoned client endpoint failed", exc_info=True)


def _attached_run_dir(system: System, host: str) -> str | None:
    """The run dir of the admin `system` is attached to, if it is on this machine; else the guardian's (the
    system's config) when that admin is the guardian's own, else None.

    The configuration comes from the guardian, which runs on the leader: for a member node, its run dir is the
    leader's. A local admin's own is on its boot command line (see actors.local_systems).
    """
    if is_local_address(host):
        own = boot_option(system.admin_port or 0, "--run-dir", host)
        if own:
            return own
    guardian_node = _text(system.config.get("node")) or "leader"
    try:
        same = system.node == guardian_node
    except RepriseError:
        same = False
    return _text(system.config.get("run_dir")) if same else None


def _refuse_unreadable(verdict: admin_probe.Verdict, host: str, admin_port: int,
                       tls: tls_module.TlsConfig | None, source: str) -> None:
    """TlsError or AuthenticationFailed when the admin on host:port cannot read our signed frames."""
    if verdict in (admin_probe.Verdict.FOREIGN, admin_probe.Verdict.UNTRIED) and tls is None:
        why = tls_module.probe(host, admin_port, None)
        if why is not None:
            raise tls_module.TlsError(why)
    if verdict in (admin_probe.Verdict.REFUSES, admin_probe.Verdict.FOREIGN):
        raise _not_our_admin(host, admin_port, source)


def _not_our_admin(host: str, admin_port: int, source: str) -> auth.AuthenticationFailed:
    """The error for an admin that would not read our frames: not a Reprise admin, or another secret."""
    return auth.AuthenticationFailed(
        f"the process on {host}:{admin_port} did not answer as a Reprise admin: it is not one, or {source} "
        "is not that system's secret (pass secret_file= the system's <run dir>/secret), or it runs another "
        "version of Reprise (every process and client of a system must run the same one: frames differ)")


def _find_secret_file(host: str, admin_port: int, settle: float = 3.0) -> str:
    """The local system's secret file, or SystemNotRunning when the port closes meanwhile.

    An admin in exit has lost its command line (so it cannot be found) a moment before it closes its
    listening socket; a short bounded wait tells "shutting down" from "not a Reprise admin".
    """
    deadline = time.monotonic() + settle
    while True:
        try:
            return auth.find_secret_file(admin_port, host)
        except auth.SecretUnavailable:
            if not listening(host, admin_port):
                raise SystemNotRunning(f"no actor system listens on {host}:{admin_port} any more", True) from None
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.1)


def _read_secret(path: str, host: str, admin_port: int, found: bool, settle: float = 3.0) -> bytes:
    """The secret in `path`, or SystemNotRunning when it is missing because the system went down meanwhile.

    A stopped system's temporary run dir goes, secret and all, once its admin port is closed (or after a bounded
    wait for it): a client attaching just then (a Spark task starting as the system stopped) found the admin by
    its command line and then no secret, and reported a secret problem, not a system gone. A secret file that is
    there but unusable (unreadable, shared, another user's) keeps its own error, and so does a missing one the
    caller named (`found` False) while the admin listens.
    """
    deadline = time.monotonic() + settle
    while True:
        try:
            return auth.read_secret(path)
        except auth.SecretUnavailable:
            if not _missing(path):
                raise
            if not listening(host, admin_port):
                raise SystemNotRunning(f"no actor system listens on {host}:{admin_port} any more: it went down as "
                                       "this client attached (its secret file went with it)", True) from None
            if not found or time.monotonic() >= deadline:
                raise
            time.sleep(0.1)  # (its port closes in a moment: a process in exit still held it)


def _missing(path: str) -> bool:
    """True if nothing is at `path` (not: there, but not for us to see)."""
    try:
        os.lstat(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return False


def _local_tls(admin_port: int, host: str) -> tls_module.TlsConfig | None:
    """The TLS files the local system on `host:admin_port` was started with (None: no TLS, or no such system)."""
    try:
        run_dir = os.path.dirname(auth.find_secret_file(admin_port, host))
    except auth.SecretUnavailable:
        return None
    return tls_module.read_config(run_dir)


def _host_port(address: str) -> tuple[str, int]:
    """("host", port) of a "host:port" address (checked by the caller)."""
    host, _, port = address.rpartition(":")
    return host, int(port)


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing uses right now, below the kernel's ephemeral range (see `free_ports`)."""
    return free_ports(1, host)[0]


def free_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct TCP ports nothing uses right now, chosen below the kernel's ephemeral range, or in
    REPRISE_PORT_RANGE ("LOW-HIGH") when it is set.

    A port the kernel hands out for port 0 comes from its ephemeral range, from which it also takes the
    local port of every outgoing connection and of every other process's port-0 bind (each Thespian actor's):
    on a busy machine one of those took such a port before the node it was chosen for bound it (a cluster
    node that never came up, CI of 2026-11-30). Every socket is held until all are chosen, so they differ.
    """
    configured = _configured_port_range()
    ports = configured or default_port_range()
    with ExitStack() as held:
        chosen: list[int] = []
        while len(chosen) < count:
            s = held.enter_context(socket.socket())
            if configured or len(ports) > 1000:
                # (every port of a small configured range is tried; 100 random ones of the default)
                for port in random.sample(ports, min(len(ports), 1000 if configured else 100)):
                    try:
                        s.bind((host, port))
                        break
                    except OSError:
                        continue
            if s.getsockname()[1] == 0:
                if configured:
                    raise ConfigError(f"REPRISE_PORT_RANGE={os.environ['REPRISE_PORT_RANGE']!r}: found no free port "
                                      f"in it for {count}; widen the range or stop what uses its ports")
                s.bind((host, 0))  # (no room below the ephemeral range: take one from it)
            chosen.append(s.getsockname()[1])
        return chosen


_FIXED_PORTS = range(10000, 32768)
"""Where free_ports looks first: above the well-known services, below Linux's default ephemeral range."""


def default_port_range() -> range:
    """Where free_ports picks when REPRISE_PORT_RANGE is not set: above the well-known services, below the
    kernel's ephemeral range."""
    return range(_FIXED_PORTS.start, min(_ephemeral_low(), _FIXED_PORTS.stop))


def _configured_port_range() -> range | None:
    """The ports REPRISE_PORT_RANGE allows ("LOW-HIGH", both included), None when it is not set.

    For a firewall that opens a range, and for processes that pick ports at once (the test suite's workers each
    get a range of their own: another worker's pick took a port between its choice and its use)."""
    text = os.environ.get("REPRISE_PORT_RANGE", "").strip()
    if not text:
        return None
    low, _, high = text.partition("-")
    try:
        first, last = int(low), int(high)
    except ValueError:
        first = last = -1
    if not 1024 <= first <= last <= 65535:
        raise ConfigError(f"REPRISE_PORT_RANGE={text!r}: expected LOW-HIGH, two ports from 1024 to 65535 with "
                          "LOW <= HIGH, e.g. REPRISE_PORT_RANGE=20000-20999")
    return range(first, last + 1)


def _ephemeral_low() -> int:
    """The lowest port of the kernel's ephemeral range (Linux's default where it cannot be read)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _stop_admin(asys: ActorSystem, timeout: float) -> None:
    """ActorSystem.shutdown of a multiproc client, waiting at most `timeout` s (not Thespian's fixed 10 s) for the
    admin to report the system stopped: a host busy in a long handler held every shutdown 10 s before its
    caller's own timeout even began."""
    from thespian.system.messages.admin import SystemShutdown, SystemShutdownCompleted
    from thespian.system.transport import ReceiveEnvelope, Thespian__Run_Expired, Thespian__Run_Terminated

    base = asys._systemBase
    if base is None:
        return
    deadline = time.monotonic() + min(timeout, _thespian_shutdown_delay())
    with interrupts.guarded():  # (a second Ctrl-C: raised where the transport can take it, then the kill)
        watch = base._tx_to_admin(SystemShutdown())
        while (remaining := deadline - time.monotonic()) > 0:
            response = base._run_transport(timedelta(seconds=remaining))
            if watch.failed:  # (the admin is gone: what is left is found by its tag and killed)
                break
            if isinstance(response, ReceiveEnvelope) and isinstance(response.message, SystemShutdownCompleted):
                break
            if isinstance(response, (Thespian__Run_Expired, Thespian__Run_Terminated)):
                break
    base.transport.close()
    # (what ActorSystem.shutdown does after its systemBase's: this client's base is transient, so kept nowhere)
    asys._systemBase = None


def _thespian_shutdown_delay() -> float:
    """Thespian's own bound on a client's wait for the admin's shutdown report, in seconds."""
    from thespian.system.systemBase import MAX_SYSTEM_SHUTDOWN_DELAY

    return float(MAX_SYSTEM_SHUTDOWN_DELAY.total_seconds())


def _wait_closed(host: str, port: int, timeout: float) -> None:
    """Wait (bounded) until nothing listens on host:port any more."""
    deadline = time.monotonic() + timeout
    while listening(host, port) and time.monotonic() < deadline:
        time.sleep(0.05)


def _check_metrics_port_is_not_admin_port(metrics_port: int | None, admin_port: int | None) -> None:
    """ConfigError when the metrics endpoint is asked for on the admin's own port."""
    if metrics_port is not None and metrics_port == admin_port:
        raise ConfigError(f"metrics_port {metrics_port} is the admin_port: the admin listens there; give the "
                          "metrics endpoint a port of its own (e.g. 9464)")


def _check_metrics_port_free(host: str, port: int | None) -> None:
    """SpawnFailed naming who holds `port` when something listens there (after waiting for a stopped system's
    metrics server to let go of it: see _still_held)."""
    if port is None or not listening(host, port):
        return
    holders = wait_for_leftovers(port)
    if holders or listening(host, port):
        raise SpawnFailed(f"metrics_port {port} is already in use on metrics_host {host} "
                          f"({describe_holders(holders)}); choose a free port")


def _still_held(host: str, port: int, wait: bool) -> bool:
    """Whether host:port, which something listens on, stays held (with `wait`: after a bounded wait while only a
    stopped system's processes hold it).

    A system whose admin was SIGKILLed (or that is shutting down) leaves processes that let go of its ports a
    moment later: its metrics server and hosts notice the dead admin within PARENT_CHECK, a process in exit
    closes its sockets last. `reprise up` again at once (by hand, or a supervisor's restart) failed with
    "already in use"; it now waits for them (local_systems.LEFTOVER_WAIT at most)."""
    return not wait or bool(wait_for_leftovers(port)) or listening(host, port)


def _bindable(host: str, port: int) -> bool:
    """True if this process could bind `port` on `host` as the admin does (SO_REUSEADDR: a port in TIME_WAIT is)."""
    with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM) as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError as e:
            return e.errno != errno.EADDRINUSE
    return True


def _configure_process_env(bind: str, advertise: str | None, peers: tuple[str, ...] | None) -> None:
    # Thespian reads these when it creates an endpoint; children (boot, admin, actors) inherit them.
    os.environ["REPRISE_BIND"] = bind
    os.environ["THESPIAN_BASE_IPADDR"] = advertise or (bind if bind != "0.0.0.0" else "127.0.0.1")
    if peers is not None:
        os.environ["REPRISE_PEERS"] = ",".join(peers)
    netsec.apply()


def tagged_pids(tag: str, *, prefix: bool = False) -> list[int]:
    """Pids of this user's live processes of the system tagged `tag` (with `prefix`: of every system whose tag
    starts so).

    A process counts when its command line is `... -m actors.boot ... --tag <tag> ...`, as every admin and actor
    process of a system keeps it: never another process that merely mentions the tag (a wrapper such as
    `timeout`, an editor, `tail -f`), which shutdown would otherwise kill with the system.
    """
    found = []
    needle = tag.encode()
    for entry in own_processes():  # (another user's process claiming the tag is not ours to wait for or kill)
        if int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
            if not _carries_tag(argv, needle, prefix):
                continue
            with open(f"/proc/{entry}/stat") as st:
                if st.read().split(")")[-1].split()[0] != "Z":
                    found.append(int(entry))
        except OSError:
            continue
    return found


def _carries_tag(argv: list[bytes], tag: bytes, prefix: bool) -> bool:
    """Whether `argv` is an actors.boot command line whose `--tag` value is `tag` (or starts with it)."""
    if b"actors.boot" not in argv:
        return False
    for option, value in itertools.pairwise(argv):
        if option == b"--tag":
            return value.startswith(tag) if prefix else value == tag
    return False


def kill_tagged(tag: str, wait: float = 5.0, *, prefix: bool = False) -> list[int]:
    """SIGKILL every process of the system tagged `tag` (see tagged_pids) and wait (bounded) until they are gone;
    returns their pids."""
    pids = tagged_pids(tag, prefix=prefix)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    # The kill is asynchronous: a caller checking right after would still see them running.
    deadline = time.monotonic() + wait
    while pids and set(pids) & set(tagged_pids(tag, prefix=prefix)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return pids


def find_tag(admin_port: int, host: str | None = None) -> str | None:
    """The tag of the local system whose admin runs on `admin_port` (on `host`, if given), read from its
    processes' command lines."""
    return boot_option(admin_port, "--tag", host)


def shutdown(admin_port: int, host: str = "127.0.0.1", *, timeout: float = 20.0,
             secret_file: str | None = None, **tls_options: Any) -> None:
    """Shut down the multi-process system on `host:admin_port` (what `reprise down` does).

    `connect()` hands out non-owner handles that refuse to shut the shared system down; this is the
    explicit, deliberate way. Local processes of that system are waited for, and killed if they linger.
    On a cluster member it shuts that member down, even when its leader is gone (with a warning saying so).
    `timeout` bounds the wait for the admin's answer too (it was connect's 30 s whatever the timeout).
    """
    leaderless: list[tuple[str, str]] = []
    system = connect(admin_port, host=host, timeout=timeout, secret_file=secret_file, _owner=True,
                     _leaderless=leaderless, **tls_options)
    if leaderless:
        node, leader = leaderless[0]
        log.warning("member node %r on %s:%d: its leader %s does not answer (it is down or unreachable from here); "
                    "shutting this member down by itself", node, host, admin_port, leader)
    system.tag = find_tag(admin_port, host)
    # (system.run_dir is this admin's own, not the guardian's: only it is removed, if start made it)
    system.shutdown(timeout=timeout)


class System:
    """A handle on an actor system: spawn, tell, ask, stop, probes, dead letters, errors, shutdown.

    `run_dir` is the directory of the system's logs (actors.log holds every error inside an actor with its
    traceback; thespian.log, boot.log) on the multi-process base; None on the in-process base. For a handle
    attached to a cluster member, it is that member's own run dir (its hosts' logs), not the leader's; None
    when that admin is on another machine.
    """

    def __init__(self, asys: ActorSystem, *, base: str, guardian: Address, owner: bool,
                 admin_port: int | None = None, config: dict[str, object] | None = None) -> None:
        self._asys = asys
        self.base = base
        self.admin_port = admin_port
        self.admin_host = "127.0.0.1"
        self.config = config or {}
        self.tag: str | None = None
        self.run_dir: str | None = None
        self._guardian = guardian
        self._owner = owner
        self.prefix = f"/temp/{uuid.uuid4().hex[:12]}"
        self._router = Router()
        self._fetched = float("-inf")
        self._registered = False
        self._listening_paths: set[str] = set()
        self._mailbox: dict[str, deque[tuple[Any, str | None]]] = defaultdict(deque)
        self._asks = itertools.count(1)
        self._detours: dict[str, str] = {}  # host name -> a path of it, for hosts we sent to via the guardian
        # Paths we sent to the guardian while no route named their host (its first start, or not in our directory
        # yet): when a route appears, its hosts go to _detours (the guardian holds what we sent them).
        self._unrouted = Unrouted()
        self._lock = threading.RLock()
        self._closed = False
        # The thread that closed or shut this System down (its own sends still go out; other threads' waits end).
        self._closer: int | None = None
        # Held for a whole shutdown: a second caller (another thread) returns once the system is down, not at once.
        self._shutdown_lock = threading.Lock()
        self._shut_down = False
        self.metrics: metrics_module.Endpoint | None = None  # the in-process base's metrics endpoint
        self._node: str | None = None
        # The tag on the boot command line of the admin, when it is this user's on this machine (see
        # _check_admin_alive); set by connect.
        self._admin_tag: str | None = None
        self._admin_checked = float("-inf")
        self._agent: Address | None = None  # the node agent of the admin attached to (multiproc; see _guardian_moved)
        # Address key -> the transmit of a send this client gave up on (SendTimeout) that its host has not
        # acknowledged yet, or of the send under way: the next send to that address waits for it (see _transmit).
        self._unacked: dict[str, Any] = {}
        # Sends whose call returned before they ended (SendTimeout) and that failed since: (address, message, what,
        # Thespian's status), handled by _settle_late at this client's next send or wait.
        self._late: deque[tuple[Address, object, Described, Any]] = deque()
        if base == "multiproc":
            # Its transmits are never queued behind others (to a host that takes nothing): _transmit keeps one under
            # way per destination instead.
            thespian_fixes.lift_pending_limit(asys._systemBase.transport)

    # ---- context manager ------------------------------------------------------------------------
    def __enter__(self) -> System:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._owner:
            self.shutdown()
        else:
            self.close()

    # ---- actors ------------------------------------------------------------------------------------
    def spawn(self, cls: Any, path: str, *, entities: bool = False, args: tuple[Any, ...] = (),
              kwargs: dict[str, Any] | None = None,
              passivate_after: float | None = 120.0, max_restarts: int = 10, restart_window: float = 60.0,
              linger: float = 0.0, batch_cap: int = 2000, node: str | None = None, shards: int = 1,
              journal: str | None = None, snapshot_store: str | None = None,
              backoff: Backoff | tuple[float, ...] | dict[str, float | None] | None = None,
              hold_limit: int = DEFAULT_HOLD_LIMIT, nodes: Sequence[str] | None = None,
              timeout: float = 60.0) -> str:
        """Start `cls` at `path` (or, with entities=True, one `cls` per path below it, on demand).

        `shards` > 1 spreads the entities over that many host processes (each entity id always in the
        same one, by a hash of the id): entity work runs on several cores.
        `journal` / `snapshot_store` give this host its own store URLs instead of the system's; `{shard}`
        in them becomes the shard number, e.g. "sqlite:///data/accounts-{shard}.db": one SQLite file per
        shard, so shards do not wait for each other's write lock. Such a host records its shard layout in
        its journal and refuses to start with another shard count (its entities' events would be in
        other files).
        `backoff` = (min, max, random_factor) seconds, a dict (also max_restarts, reset_after) or an
        actors.Backoff: how the guardian restarts the host when its process dies or its top-level actor
        fails (default (0.2, 10, 0.2), never giving up); up to `hold_limit` messages for it are held
        meanwhile. `max_restarts` / `restart_window` are about entities restarted inside the host.
        `node` pins the host to one node (it waits for that node when it is down); `nodes` lists the nodes
        it may run on instead: one host runs on the first of them that is up, shard k of `shards` on
        live[k % len(live)], and when a node goes down its hosts restart on another live one (see
        `rebalance` to spread them again). Its stores must then be reachable from every node (PostgreSQL).
        """
        check_spawn_path(path, system_actor=_SYSTEM_ACTOR.get())
        check_spawn_target(cls, entities, args, kwargs)
        if type(shards) is not int or shards < 1 or (shards > 1 and not entities):
            raise ConfigError(f"shards must be an int >= 1, and > 1 only for entity hosts (entities=True); got "
                             f"shards={shards!r}, entities={entities!r}")
        # Host options, opaque here: their owner's checks run now if it is imported in this process, and
        # in the host process (which imports the factory first) in any case.
        options = {name: value for name, value in (("journal", journal), ("snapshot_store", snapshot_store))
                   if value is not None}
        for name, value in options.items():
            check_option(name, value, per_host=True)
        placement = check_nodes(nodes, node) if nodes is not None else ()
        check_shared_stores(placement, options)
        check_process_local_stores(self.base, {**options, **memory_urls_in(tuple(args), dict(kwargs or {}))})
        backoff = Backoff.of(backoff)
        check_hold_limit(hold_limit)
        check_spawn_options(passivate_after=passivate_after, max_restarts=max_restarts,
                            restart_window=restart_window, linger=linger, batch_cap=batch_cap, timeout=timeout)
        check_constructor(cls, tuple(args), dict(kwargs or {}))
        if (getattr(cls, "__module__", None) == "__main__" and self.base != "local"
                and adopt_main_classes() is None):
            raise UnpicklableMessage(f"{cls.__qualname__} is defined in __main__; actor classes must live in "
                                     "an importable module (or a script run as `python script.py`) so that actor processes "
                                     "can import them")
        spec = HostSpec(path, cls, entities, tuple(args), dict(kwargs or {}),
                        passivate_after if entities else None, max_restarts, restart_window, linger,
                        batch_cap, node, shards, options=options,
                        backoff=backoff, hold_limit=hold_limit, nodes=placement)
        reply = self._request(SpawnHost(spec), Spawned, timeout)
        if reply.error:
            if reply.cause is not None and reply.cause.kind == "path_taken":
                raise PathTaken(reply.error)
            raise SpawnFailed(reply.error, reply.cause)
        self._fetched = float("-inf")
        return path

    def system_actor_of(self, cls: Any, path: str, **options: Any) -> str:
        """spawn() for a system actor, below /system (Akka's systemActorOf): a library's own actor, such as a
        Spark bridge (spark_bridge.start_bridge uses it); spawn() takes user actors only, below /user."""
        check_spawn_path(path, system_actor=True)
        token = _SYSTEM_ACTOR.set(True)
        try:
            return self.spawn(cls, path, **options)
        finally:
            _SYSTEM_ACTOR.reset(token)

    def _check_running(self) -> None:
        if self._closed:
            raise SystemNotRunning("this System was shut down (or closed); start a new one with actors.start(...) "
                                   "or attach to a running one with actors.connect(port)")

    def stop(self, path: str, timeout: float = 30.0) -> None:
        """Stop the actor or entity host at `path`, or one entity below a host; returns once it has stopped
        (post_stop ran and pending writes are committed; for a host, every shard's process has exited), so a
        message sent after it finds a new instance (an entity) or no actor (a host)."""
        validate_path(path)
        reply = self._request(StopPath(path), Spawned, timeout)
        if reply.error:
            raise RepriseError(reply.error)
        self._fetched = float("-inf")

    def tell(self, path: str, message: object, sender: str | None = None) -> None:
        """Send `message` to the actor at `path` (fire and forget)."""
        self.tell_many([(path, message)], sender)

    def tell_many(self, items: Iterable[tuple[str, object]], sender: str | None = None,
                  limit: float = SEND_LIMIT) -> None:
        """Send many (path, message) pairs, one Thespian message per destination process (SendTimeout when a
        host has not taken its message within `limit` s)."""
        self._check_running()
        groups: dict[str, tuple[Address, list[Entry]]] = {}
        guardian = address_key(self._guardian)
        for path, message in items:
            validate_path(path)
            check_message(message)
            key, address = self._resolve(path)
            if key == guardian:
                self._detoured([path])
            elif self._detours:
                self._drain_detour(path)
            groups.setdefault(key, (address, []))[1].append((sender, path, message))
        for address, entries in groups.values():
            batch = pack(self.prefix, entries, self._refuse)
            if self._send(address, batch, limit, functools.partial(_told, entries)):
                self._detoured([entry[1] for entry in entries])

    def ask(self, path: str, message: Any, timeout: float = 10.0) -> Any:
        """Send `message` and wait for the first reply to it; raises AskTimeout, ActorFailed at once if the
        actor raised on this message (it restarts as usual), or MessageUndelivered at once if the message became
        a dead letter."""
        check_number("timeout", timeout, hint="seconds to wait for the reply")
        # Replies may come from actors that never heard from this client: publish its route once.
        self._ensure_route()
        reply_to = f"{self.prefix}/ask-{next(self._asks)}"
        self._listening_paths.add(reply_to)
        deadline = time.monotonic() + timeout
        try:
            try:
                # The whole ask within `timeout`: a host busy in one long message takes nothing meanwhile, and
                # the send alone would wait SEND_LIMIT for it.
                self.tell_many([(path, message)], reply_to, limit=timeout)
            except SendTimeout as exc:
                fate = ("the message was written to its connection and may still be delivered" if exc.may_be_delivered
                        else "the message was not sent (it waited behind an earlier one to that host, still not "
                        "acknowledged, or its connection took none or only part of it): asking again is safe")
                raise AskTimeout(f"no reply from {path} within {timeout} s: its host did not even take the message "
                                 f"in that time (busy in a long message, or stalled: see `reprise status`); "
                                 f"{fate}") from None
            reply = self._receive(reply_to, max(0.0, deadline - time.monotonic()),
                                  f"no reply from {path} within {timeout} s")[0]
            if isinstance(reply, ActorFailure):
                raise ActorFailed(reply.path, reply.error_type, reply.error)
            if isinstance(reply, AskUndelivered):
                raise MessageUndelivered(reply.path, reply.reason)
            return reply
        finally:
            self._listening_paths.discard(reply_to)
            self._mailbox.pop(reply_to, None)

    def probe(self, name: str | None = None) -> Probe:
        """A test probe: a path actors can send to, and methods to expect what arrives."""
        self._ensure_route()
        path = f"{self.prefix}/{name or 'probe-' + str(next(self._asks))}"
        validate_path(path)
        self._listening_paths.add(path)
        return Probe(self, path)

    # ---- observation -----------------------------------------------------------------------------
    def dead_letters(self, timeout: float = 10.0) -> DeadLetters:
        """The dead-letter count and the most recent dead letters."""
        return self._request(GetDeadLetters(), DeadLetters, timeout)

    def subscribe_dead_letters(self, path: str) -> None:
        """Send every future DeadLetter to `path` (an actor or a probe)."""
        self.tell(GUARDIAN_PATH, SubscribeDeadLetters(validate_path(path)))

    def errors(self, timeout: float = 10.0) -> Errors:
        """The count of errors inside actors and the most recent ones (time, host, path, one-line reason)."""
        return self._request(GetErrors(), Errors, timeout)

    def subscribe_errors(self, path: str) -> None:
        """Send every future ActorError to `path` (an actor or a probe)."""
        self.tell(GUARDIAN_PATH, SubscribeErrors(validate_path(path)))

    def status(self, timeout: float = 10.0) -> SystemStatus:
        """Hosts with their state, restarts and pid; the dead-letter count; the configuration."""
        return self._request(GetStatus(), SystemStatus, timeout)

    def directory(self, timeout: float = 10.0) -> DirectoryUpdate:
        """The guardian's routes (path prefix -> address or shard set) and their epoch, fetched now."""
        return self._request(GetDirectory(), DirectoryUpdate, timeout)

    def _publish_directory(self, pairs: int = 1, timeout: float = 30.0) -> None:
        """Make the guardian publish its directory to every host 2 x `pairs` times, as any route change does (a
        temporary route of this client registered, then unregistered), to measure what a publish costs.
        Returns once the guardian has sent the last one."""
        check_number("pairs", pairs, integer=True, hint="how many register/unregister pairs to force")
        prefix = f"{self.prefix}-publish"
        for _ in range(pairs):
            self._request(RegisterRoute(prefix), Spawned, timeout)
            # (no reply: the next request orders it)
            self._send(self._guardian, UnregisterRoute(prefix), what="UnregisterRoute to the guardian")
        self.directory(timeout)  # the guardian handles its mailbox in order: the last publish was sent

    def nodes(self, timeout: float = 10.0) -> dict[str, str]:
        """Every known node's name -> "up" or "down" (the leader's own node is always up)."""
        return self._request(GetNodes(), Nodes, timeout).nodes

    def rebalance(self, path: str | None = None, timeout: float = 60.0) -> list[Move]:
        """Move every `nodes=` host or shard (of `path`, or all) that is not where placement over the live nodes
        puts it, one at a time, gracefully (its work finishes, messages for it are held meanwhile)."""
        if path is not None:
            validate_path(path)
        check_number("timeout", timeout, hint="seconds to wait for the rebalance to finish")
        reply = self._request(Rebalance(path), Rebalanced, timeout)
        self._fetched = float("-inf")
        if reply.error:
            raise RepriseError(f"rebalance: {reply.error} (moved: {[m.key for m in reply.moves]})")
        return list(reply.moves)

    @property
    def node(self) -> str:
        """The name of the node whose admin this handle is attached to ("leader" unless started with node=)."""
        if self._node is None:
            if self.base == "local":
                self._node = _text(self.config.get("node")) or "leader"
            else:
                self._node = self._admin_node()
        return self._node

    def _admin_node(self) -> str:
        # The node's name is its admin's "Reprise Node" capability (actors.boot), which Thespian's admin
        # reports in its status: no Reprise actor needs to know it.
        return str(self._admin_capabilities().get("Reprise Node") or "leader")

    def _member_of(self) -> tuple[str, str] | None:
        """(node name, leader "host:port") if the admin of this handle is a member node; None for a leader, or
        an admin that does not answer either."""
        try:
            capabilities = self._admin_capabilities()
        except RepriseError:
            return None
        leader = capabilities.get("Convention Address.IPv4")
        return (str(capabilities.get("Reprise Node")), str(leader)) if leader else None

    def _admin_capabilities(self) -> dict[str, Any]:
        """The capabilities of the admin this handle is attached to (Thespian's status request)."""
        from thespian.system.messages.status import Thespian_StatusReq, Thespian_SystemStatus

        self._check_running()
        with self._lock:
            reply = self._ask(self._asys._systemBase.adminAddr, Thespian_StatusReq(), 10.0, "the admin")
            deadline = time.monotonic() + 10.0
            while not isinstance(reply, Thespian_SystemStatus):
                remaining = deadline - time.monotonic()
                if reply is None or remaining <= 0:
                    raise AskTimeout("the admin did not report its capabilities within 10 s")
                self._accept(reply)
                reply = self._listen(remaining)
        return dict(reply.capabilities)

    # ---- ending --------------------------------------------------------------------------------
    def close(self) -> None:
        """Detach from the system without stopping it."""
        if self._closed:
            return
        self._closer = threading.get_ident()
        self._closed = True
        self._shut_down = True  # (an owner's handle detached: its shutdown() stays the no-op it was)
        self._close_metrics()
        try:
            if self._registered:
                try:
                    self._send(self._guardian, UnregisterRoute(self.prefix), what="UnregisterRoute to the guardian")
                except RepriseError as exc:  # the system is gone: nothing to unregister from
                    log.warning("could not unregister %s: %s", self.prefix, exc)
        finally:
            transport = getattr(getattr(self._asys, "_systemBase", None), "transport", None)
            if self.base != "local" and transport is not None:
                try:
                    transport.close()
                except Exception:
                    pass
            interrupts.release()

    def shutdown(self, timeout: float = 20.0) -> None:
        """Stop the whole actor system (only its owner may) and wait until its processes are gone: within about
        `timeout` s, after which what is left is killed (so is everything when the shutdown is interrupted: a
        second Ctrl-C). Another thread's call returns once the first has ended; a call waiting for a reply in
        another thread raises SystemNotRunning."""
        if not self._owner:
            raise RepriseError("this System was attached with actors.connect and does not own the actor system; "
                               "call close() to detach (stop the system itself with `reprise down --port N` "
                               "or actors.shutdown(N))")
        check_number("timeout", timeout, hint="seconds to wait for the actor system to stop")
        with self._shutdown_lock:
            if self._shut_down:
                return
            # Set before taking the client's lock: a call waiting for a reply, or for a host to take a message (a
            # tell held by back-pressure), in another thread sees it within CLOSE_CHECK and lets go of the lock (it
            # would otherwise hold it for its whole timeout, or SEND_LIMIT).
            self._closer = threading.get_ident()
            self._closed = True
            try:
                self._shut(timeout)
            except BaseException:
                # Interrupted (a second Ctrl-C while the first one's `with` block waits for a busy host): the system
                # was left running, holding its port and journal, and no call could stop it any more. Everything
                # acknowledged is durable already (a journal write is one transaction): kill what is left.
                if self.tag:
                    killed = kill_tagged(self.tag)
                    if killed:
                        log.warning("shutdown of actor system %s interrupted: killed its processes %s", self.tag,
                                    killed)
                raise
            finally:
                self._shut_down = True
                interrupts.release()

    def _shut(self, timeout: float) -> None:
        """The shutdown proper: ask the admin to stop the system, wait (bounded) for its processes, kill the rest."""
        deadline = time.monotonic() + timeout
        self._close_metrics()
        with self._lock:
            if self.base == "local":
                try:
                    self._asys.shutdown()
                finally:
                    local_resources.stopped()
            else:
                _stop_admin(self._asys, timeout)
        if self.tag:
            while tagged_pids(self.tag) and time.monotonic() < deadline:
                time.sleep(0.05)
            leftovers = kill_tagged(self.tag)
            if leftovers:
                log.warning("actor system %s left processes %s after shutdown; killed them", self.tag, leftovers)
            # A process in exit has already lost its command line (so it is no longer "tagged") but may still
            # hold the admin's listening socket: shutdown returns once the port is really free.
            if self.admin_port is not None:
                _wait_closed(self.admin_host, self.admin_port, max(deadline - time.monotonic(), 2.0))
            # Only a run dir we made, and only once this machine's processes of it are gone; kept when
            # something had to be killed, since its logs then explain what went wrong.
            # (self.run_dir is this admin's own: on a member never the leader's, which the config names)
            run_dir = self.run_dir
            if run_dir and os.path.exists(os.path.join(run_dir, TEMPORARY_MARK)) and not leftovers:
                shutil.rmtree(run_dir, ignore_errors=True)

    # ---- internals -------------------------------------------------------------------------------
    def _close_metrics(self) -> None:
        if self.metrics is not None:
            self.metrics.close()
            self.metrics = None

    def _detoured(self, paths: list[str]) -> None:
        """Note the hosts of `paths` as reached through the guardian (held while restarting, or rerouted)."""
        for path in paths:
            host = self._router.locate(path)
            if host is None:
                if not path.startswith(("/temp/", "/system/")):
                    self._unrouted.add(path)
            elif not host.startswith(("/temp/", "/system/")):
                self._detours[host] = path

    def _routes_appeared(self, before: dict[str, Route]) -> None:
        """Note as detoured the hosts of every new route that we sent to through the guardian while it had none:
        the guardian holds (or forwarded) those, and our direct sends to them must wait until they landed."""
        for prefix, route in self._router.routes.items():
            if prefix in before or prefix.startswith(("/temp/", "/system/")):
                continue
            shards = len(route_keys(route))
            for shard in self._unrouted.take(prefix, shards):
                self._detours.setdefault(shard_key(prefix, shard, shards), sample_path(prefix, shard, shards))

    def _drain_detour(self, path: str) -> None:
        """Before sending direct to a host we last reached through the guardian, wait until the guardian has
        delivered what it holds from us (a Barrier round trip): per sender FIFO across the host's restart."""
        host = self._router.locate(path)
        if host not in self._detours:
            return
        via = self._detours.pop(host)
        self._ensure_route()
        reply_to = f"{self.prefix}/barrier-{next(self._asks)}"
        self._listening_paths.add(reply_to)
        try:
            self._send(self._guardian, pack(self.prefix, [(reply_to, via, Barrier())], self._refuse),
                       what=f"Barrier for {host} to the guardian")
            self._receive(reply_to, BARRIER_WAIT, f"the messages held for {host} did not drain within {BARRIER_WAIT} s")
        except AskTimeout as exc:
            log.warning("%s; sending to it directly anyway (order may break)", exc)
        finally:
            self._listening_paths.discard(reply_to)
            self._mailbox.pop(reply_to, None)

    def _send(self, address: Address, message: object, limit: float = SEND_LIMIT, what: Described = None) -> bool:
        """Hand one Thespian message over: it is on its way or held by the guardian, or MessageNotSent.

        Returns True when the message went to the guardian instead of `address` (its process was gone). `what`
        names the message and its target for errors ("Ping to /user/a", or a function returning that; by default
        its type and address).

        Thespian's own tell raises on a dead target *and* forwards the message to the dead-letter handler
        (the guardian), which delivers it once the host is back: a caller retrying on that exception sent
        the message twice. Here a dead target is reported to the guardian explicitly instead (it holds or
        reroutes the message exactly as it does for an actor's batch), and an exception means not sent.
        So is a target whose port another system's process took (see process_gone): a host always reads a
        Batch, so Thespian's data-error ACK means the frame was dropped unread.
        """
        with self._lock:
            if self.base == "local":
                try:
                    self._asys.tell(address, message)
                except ActorSystemException as exc:
                    raise MessageNotSent(f"{_describe(what, message, address)} was not sent: {exc}") from None
                return False
            if self._late:  # (before this one: they were sent before it)
                self._settle_late()
            failure = self._transmit(address, message, limit, what)
            if failure is None:
                return False
            if process_gone(failure) and address_key(address) != address_key(self._guardian):
                self._fetched = float("-inf")  # that route is stale: fetch the directory on the next send
                failure = self._transmit(self._guardian, DeadEnvelope(address, message), what=lambda: (
                    f"{_describe(what, message, address)} (rerouted through the guardian: its host's process is gone)"))
                if failure is None:
                    return True
            raise MessageNotSent(
                f"{_describe(what, message, address)} (host at {address}) was not sent ({failure}): the actor "
                "system's processes may be gone; "
                f"check `reprise status --port {self.admin_port}`")

    def _transmit(self, address: Address, message: object, limit: float = SEND_LIMIT, what: Described = None) -> Any:
        """Send through this process's Thespian transport; None when sent, else Thespian's failure status
        (SendTimeout when it is neither after `limit` s; `what` names the message and its target for it).

        One transmit per destination at a time: a send waits until the host has acknowledged this client's last
        message to it, even one whose tell raised SendTimeout. A host that takes nothing (busy in a long handler,
        SIGSTOPped) so holds one transmit of this client, never a queue of them: each later send to it ends in a
        SendTimeout that says it was not sent (retrying is safe), as does one whose connection never completed or
        took only part of it (withdrawn: thespian_fixes.withdraw_unsent); one written whole stays under way (see
        _settle_late for its end), and the client's sends to other destinations,
        not limited in number (thespian_fixes.lift_pending_limit), never wait behind them. Per-sender FIFO holds:
        nothing overtakes a message still under way."""
        from thespian.system.transport import TransmitIntent

        base = self._asys._systemBase
        if base is None:  # (a shutdown in another thread stopped the transport between this call's check and now)
            self._check_running()
            raise SystemNotRunning("this System's transport is stopped")
        key = address_key(address)
        unacked = self._unacked
        failed: list[Any] = []
        sent: list[bool] = []
        waiting = [True]

        def settled(intent: Any) -> None:
            if unacked.get(key) is intent:
                del unacked[key]

        def on_success(result: Any, intent: Any) -> None:
            sent.append(True)
            settled(intent)

        def on_error(result: Any, intent: Any) -> None:
            failed.append(result)
            settled(intent)
            if waiting[0]:  # (a send given up on, failing later, must not end another call's run: a shutdown's)
                base.transport.abort_run()
            elif not self._closed:  # (closing fails every transmit: one written whole may still be read)
                self._late.append((address, message, what, result))

        deadline = time.monotonic() + limit
        try:
            with interrupts.guarded():
                while key in unacked:  # (an earlier send to this address, given up on, not acknowledged yet)
                    earlier = unacked[key]
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        raise SendTimeout(
                            f"{_describe(what, message, address)} (host at {address}) was not sent within {limit:g} "
                            "s: that host has not "
                            "acknowledged an earlier message of this client (it takes nothing: busy in a long "
                            "handler, or stopped), and this one waited behind it; retrying is safe",
                            may_be_delivered=False)
                    base._run_transport(timedelta(seconds=min(remaining, CLOSE_CHECK)), txonly=True)
                    if not thespian_fixes.under_way(base.transport, earlier):
                        settled(earlier)  # (Thespian dropped it without a word)
                    self._check_not_closed_by_another_thread(what, message, address)
                if self._late:  # (the earlier one failed: rerouted before this one goes, as it was sent before)
                    self._settle_late()
                intent = TransmitIntent(address, message, onSuccess=on_success, onError=on_error,
                                        retryPeriod=SEND_RETRY)
                unacked[key] = intent  # (before it is handed over: a transmit may end within scheduleTransmit)
                try:
                    base.transport.scheduleTransmit(None, intent)
                except BaseException:
                    settled(intent)
                    raise
                # Until this message is acknowledged, not until no send at all is pending: a run whose time is up
                # also returns None, which was taken for "sent" (a tell its host never took returned after
                # SEND_LIMIT, no SendTimeout), and one given up on made every later call wait its whole limit.
                # In CLOSE_CHECK slices: a host that takes nothing (busy in a long handler, stopped) held this
                # client's lock, and a shutdown from another thread behind it, for SEND_LIMIT.
                while (remaining := deadline - time.monotonic()) > 0:
                    pending = base._run_transport(timedelta(seconds=min(remaining, CLOSE_CHECK)), txonly=True)
                    if failed:
                        return failed[0]
                    if sent or pending == 0:  # (0: no send left at all in this process)
                        settled(intent)
                        return None
                    self._check_not_closed_by_another_thread(what, message, address)
                if thespian_fixes.withdraw_unsent(base.transport, intent):
                    failed.clear()  # (its own withdrawal)
                    raise SendTimeout(
                        f"{_describe(what, message, address)} (host at {address}) was not sent within {limit:g} s: its "
                        "connection to that host did not complete, or took only part of it (the host takes nothing: "
                        "busy in a long handler, or stopped), and it was withdrawn; retrying is safe",
                        may_be_delivered=False)
        except RepriseError:  # (SystemNotRunning is a ConnectionError: not a failure status to return)
            raise
        except ActorSystemException as exc:
            return exc
        except OSError as exc:
            return exc
        finally:
            waiting[0] = False
        # (it stays in `unacked` until its host acknowledges it, or Thespian gives it up: see the docstring)
        raise SendTimeout(f"{_describe(what, message, address)} (host at {address}) was handed over but not acknowledged within {limit:g} s (its "
                          "host takes nothing: busy in a long handler, or stopped); it stays on that connection and may "
                          "still be delivered")

    def _settle_late(self) -> None:
        """Deal with sends given up on (their tell raised SendTimeout, may_be_delivered=True) that failed since.

        One whose host's process is gone is rerouted through the guardian, as a send that finds it gone is (the
        guardian holds it for the host's next process, or records a dead letter); another (Thespian gave it up:
        no acknowledgement within its transmit period) is logged: its host has it only if it reads it later."""
        while self._late:
            address, message, what, result = self._late.popleft()
            described = f"{_describe(what, message, address)} (host at {address})"
            if process_gone(result) and address_key(address) != address_key(self._guardian):
                self._fetched = float("-inf")  # that route is stale
                try:
                    failure = self._transmit(self._guardian, DeadEnvelope(address, message), what=(
                        f"{described}, rerouted through the guardian after its SendTimeout"))
                except RepriseError as exc:
                    failure = exc
                if failure is None:
                    log.info("%s, whose tell raised SendTimeout, was not delivered there: its host's process is gone; "
                             "rerouted through the guardian", described)
                    if isinstance(message, Batch):
                        self._detoured([entry[1] for entry in unpack(message, _ignore, expand=False)])
                    continue
                log.warning("%s, whose tell raised SendTimeout (may_be_delivered=True), was not delivered: its host's "
                            "process is gone, and rerouting it through the guardian failed too (%s)", described, failure)
                continue
            log.warning("%s, whose tell raised SendTimeout (may_be_delivered=True), was given up by the transport "
                        "(%s): no acknowledgement came; it was written whole to its host's connection, so that host "
                        "has it only if it reads it yet", described, result)

    def _check_not_closed_by_another_thread(self, what: Described, message: object, address: Address) -> None:
        """SystemNotRunning once another thread has shut this System down or closed it (not in that thread, whose
        own sends, as its UnregisterRoute or SystemShutdown, go on)."""
        if self._closed and self._closer != threading.get_ident():
            raise SystemNotRunning(
                f"this System was shut down (or closed) by another thread while {_describe(what, message, address)} "
                f"waited for its host at "
                f"{address} to take it (a host busy in a long handler, or stopped, takes nothing): not sent, "
                "unless that host takes it before the shutdown closes this client's endpoint")

    def _listen(self, timeout: float) -> Any:
        """The next message for this client (None after `timeout`), with Thespian's errors as RepriseErrors;
        SystemNotRunning once another thread has begun to shut the system down (checked every CLOSE_CHECK s)."""
        deadline = time.monotonic() + timeout
        while True:
            # (the in-process base returns at quiescence, before its timeout: one call, as before)
            wait = timeout if self.base == "local" else min(max(deadline - time.monotonic(), 0.0), CLOSE_CHECK)
            try:
                if self.base == "local":  # (its actors run in this call: a Ctrl-C must reach a handler that hangs)
                    message = self._asys.listen(wait)
                else:
                    with interrupts.guarded():
                        message = self._asys.listen(wait)
            except ActorSystemException as exc:
                raise MessageNotSent(f"this client's endpoint failed while waiting: {exc}") from None
            if message is not None:
                return message
            if self._closed:
                raise SystemNotRunning("this System was shut down or closed (by another thread) while this call waited "
                                       "for a reply")
            if self.base == "local" or time.monotonic() >= deadline:
                return None

    def _listen_for_replies(self, timeout: float) -> Any:
        """_listen for what actors send this client: in slices, fetching the directory again after a refused
        connection (see _recheck_refused). Never inside _request: a fetch there could take its reply."""
        if self.base != "multiproc":
            return self._listen(timeout)
        deadline = time.monotonic() + timeout
        while True:
            message = self._listen(min(timeout, REFUSAL_CHECK))
            if message is not None:
                return message
            if self._late:  # (a reply may wait for one of them: rerouted now, not at the next send)
                self._settle_late()
            if netsec.refused_pending():
                self._recheck_refused(deadline)
            try:
                self._check_admin_alive()
            except SystemNotRunning:
                # What the system sent before it went is this client's still: a slice that ran out while this client was
                # stopped (SIGSTOP) or busy made no pass at its sockets, where a reply may wait, written whole.
                message = self._listen(LAST_LOOK)
                if message is not None:
                    return message
                raise
            timeout = deadline - time.monotonic()
            if timeout <= 0:
                return None

    def _check_admin_alive(self) -> None:
        """SystemNotRunning once the admin this client attached to, a process of this user on this machine, has
        exited (looked for at most once a second): a wait for a reply from a system that was shut down
        meanwhile (`reprise down` elsewhere) would otherwise last its whole timeout."""
        if self._admin_tag is None or self.admin_port is None or time.monotonic() < self._admin_checked + 1.0:
            return
        self._admin_checked = time.monotonic()
        if boot_option(self.admin_port, "--tag", self.admin_host) != self._admin_tag:
            raise SystemNotRunning(f"the actor system on port {self.admin_port} stopped while this client waited "
                                   "for a reply")

    def _recheck_refused(self, deadline: float) -> None:
        """Fetch the directory again after a refused connection: it may be a node that joined since the last fetch,
        replying to this client, and the node's next retry then gets in (at most one fetch per REFUSAL_CHECK, so
        that connections from a stranger cost the guardian little)."""
        if time.monotonic() - self._fetched < REFUSAL_CHECK:
            return
        refused = netsec.take_refused()
        try:
            # (within the caller's wait, give or take one slice: a guardian that does not answer must not hold it)
            self._refresh(max(deadline - time.monotonic(), REFUSAL_CHECK))
        except RepriseError as exc:
            log.warning("could not fetch the directory to check refused connections from %s: %s",
                        ", ".join(sorted(refused)), exc)

    def _unreadable_entry(self, entry: Entry, why: str) -> None:
        """Log and dead-letter an entry this client cannot unpickle; the rest of its batch is still delivered."""
        sender, target, description = entry
        log.error("message %s from %s to %s %s", description, sender, target, why)
        letter = DeadLetter(sender, target, description, f"message {why}")
        try:
            self._send(self._guardian, pack(self.prefix, [(self.prefix, GUARDIAN_PATH, letter)], self._refuse),
                       what="DeadLetter to the guardian")
        except RepriseError:
            log.exception("could not report a dead letter to the guardian")

    def _refuse(self, entry: Entry, why: str) -> None:
        raise UnpicklableMessage(f"message {type(entry[2]).__qualname__} to {entry[1]} {why}")

    def _ensure_route(self) -> None:
        if not self._registered:
            self._request(RegisterRoute(self.prefix, this_process()), Spawned, 30.0)
            self._registered = True
            self._fetched = float("-inf")

    def _resolve(self, path: str) -> tuple[str, Address]:
        now = time.monotonic()
        if now - self._fetched > DIRECTORY_TTL:
            self._refresh()
        hit = self._router.resolve(path)
        if hit is None and now - self._fetched > 0.05:
            self._refresh()
            hit = self._router.resolve(path)
        # Unknown paths go to the guardian, which forwards or records a dead letter.
        return hit if hit is not None else (str(self._guardian), self._guardian)

    def _refresh(self, timeout: float = 30.0) -> None:
        update = self._request(GetDirectory(), DirectoryUpdate, timeout)
        before = self._router.routes
        self._router.replace(update.routes, update.epoch)
        self._fetched = time.monotonic()
        if self._unrouted and self._router.routes is not before:
            self._routes_appeared(before)
        if self.base == "multiproc":
            # Replies from another node's actors may open a connection to this client: accept the nodes it knows.
            netsec.hear_from([self._guardian, *(address for route in update.routes.values()
                              for address in (route.addresses if isinstance(route, ShardSet) else (route,)))])

    def _request(self, message: Any, expect: type[R], timeout: float) -> R:
        """Ask the guardian; messages for probes that arrive meanwhile go to the mailbox."""
        self._check_running()
        check_number("timeout", timeout, hint="seconds to wait for the actor system's answer")
        deadline = time.monotonic() + timeout
        with self._lock:
            reply = self._ask(self._guardian, message, timeout)
            while True:
                if isinstance(reply, expect):
                    return reply
                if reply is None:
                    raise AskTimeout(f"the actor system did not answer {type(message).__name__} within {timeout} s")
                self._accept(reply)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AskTimeout(f"the actor system did not answer {type(message).__name__} within {timeout} s")
                reply = self._listen(remaining)

    def _ask(self, address: Address, message: Any, timeout: float, who: str = "the guardian") -> Any:
        """Send `message` to `who` (the guardian, or the admin) at `address` and return the first message back
        (None: none within `timeout`)."""
        if self.base == "local":
            try:
                return self._asys.ask(address, message, timeout)
            except ActorSystemException as exc:
                raise MessageNotSent(f"{type(message).__name__} to {who} was not sent: {exc}") from None
        # Not Thespian's ask: its send waits 35 s to retry (a connection both ends wrote on at once, kquick#19),
        # longer than a request's 30 s; a GetDirectory timed out so under load in CI. _transmit retries after
        # SEND_RETRY.
        started = time.monotonic()
        try:
            failure = self._transmit(address, message, limit=timeout, what=f"{type(message).__name__} to {who}")
        except SendTimeout:
            return None
        if failure is SendStatus.BadPacket or (isinstance(failure, ActorSystemFailure)
                                               and "BadPacketError" in str(failure)):
            raise self._unreadable(message)
        if failure is not None and self.admin_port is not None and not listening(self.admin_host, self.admin_port):
            # The whole system is gone (shut down while this client was stopped or busy, e.g. mid-attach: the reply it
            # then read was the last its processes sent): "processes may be gone" would leave the user guessing.
            raise SystemNotRunning(f"{type(message).__name__} to {who} was not sent: the actor system on "
                                   f"{self.admin_host}:{self.admin_port} is not running any more (nothing listens on "
                                   "its admin port: it was shut down, or its processes were killed)",
                                   nothing_listens=True)
        if failure is SendStatus.DeadTarget and who == "the guardian" and self._guardian_moved(address):
            return self._ask(self._guardian, message, max(timeout - (time.monotonic() - started), 0.0))
        if failure is not None:
            if who == "the guardian" and failure is SendStatus.DeadTarget:
                # (the admin forwards to the guardian, and found its process gone: nothing restarts it)
                raise MessageNotSent(f"{type(message).__name__} to the guardian was not sent ({failure}): the "
                                     "guardian's process is gone (killed?), and this system cannot work without it; "
                                     f"`reprise down --port {self.admin_port}` kills what is left, then start it again")
            raise MessageNotSent(f"{type(message).__name__} to {who} was not sent ({failure}): the actor "
                                 f"system's processes may be gone; check `reprise status --port {self.admin_port}`")
        return self._listen(max(timeout - (time.monotonic() - started), 0.0))

    def _guardian_moved(self, dead: Address) -> bool:
        """The guardian at `dead` is gone: True if the admin's node agent now names another (a leader killed and
        started again, which this member rejoined), which this handle then uses, with its reply route registered
        there. Only on that failure: never on a message's way."""
        if self._agent is None or address_key(dead) != address_key(self._guardian):
            return False
        deadline = time.monotonic() + 10.0
        reply = self._ask(self._agent, WhereIsGuardian(), 10.0, "the node agent")
        while reply is not None and not isinstance(reply, GuardianIs):
            self._accept(reply)  # (for probes: it came meanwhile)
            reply = self._listen(max(deadline - time.monotonic(), 0.0))
        if reply is None or reply.address is None or address_key(reply.address) == address_key(dead):
            return False
        log.warning("the guardian at %s is gone; the node agent names the one at %s (the leader was started again): "
                    "using it", dead, reply.address)
        self._guardian = reply.address
        self._fetched = float("-inf")
        if self._registered:  # (replies to this client's probes and asks are routed by the guardian's directory)
            self._registered = False
            self._ensure_route()
        return True

    def _unreadable(self, message: Any) -> UnpicklableMessage:
        """The error for a request the guardian's process could not unpickle, with its reason from the log."""
        reason = ""
        run_dir = _text(self.config.get("run_dir")) or self.run_dir  # (the guardian's, whose process logged it)
        try:
            if run_dir:
                with open(os.path.join(run_dir, "thespian.log"), errors="replace") as f:
                    errors = [line.strip() for line in f if _LOGGED_ERROR.match(line)]
                reason = printable(errors[-1]) if errors else ""
        except OSError:
            pass
        advice = (f" ({reason})" if reason else
                  " (see thespian.log in the run dir). If that class's module starts an actor system when it is "
                  "imported, put that code under `if __name__ == \"__main__\":`")
        return UnpicklableMessage(f"the actor system could not read {type(message).__name__}: importing a class it "
                                  f"refers to failed in the guardian's process{advice}")

    def _accept(self, message: Any) -> None:
        if isinstance(message, Batch):
            for sender, target, payload in unpack(message, self._unreadable_entry):
                if target in self._listening_paths:
                    self._mailbox[target].append((payload, sender))
                else:
                    log.debug("dropped a late message to %s (nobody waits for it)", target)
        elif isinstance(message, PoisonMessage):
            log.error("a message from this client could not be handled: %s", message.details)
        else:
            log.debug("client ignored %r", message)

    def _receive(self, path: str, timeout: float, what: str) -> tuple[Any, str | None]:
        self._check_running()
        box = self._mailbox[path]
        deadline = time.monotonic() + timeout
        with self._lock:
            while not box:
                if self.base == "local" and self._drain_local_responses():
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AskTimeout(what)
                message = self._listen_for_replies(remaining)
                if message is not None:
                    self._accept(message)
                elif self.base == "local" and not box:
                    # The in-process base returns at quiescence; wait for timers by polling briefly.
                    time.sleep(min(0.005, max(0.0, deadline - time.monotonic())))
            return box.popleft()

    def _drain_local_responses(self) -> bool:
        """Take replies the in-process base already queued for us.

        simpleSystemBase's listen() returns one queued reply per call but first sleeps until the next
        timer is due, even when replies are waiting, so reading many replies would take one timer
        period each.
        """
        requester = self._asys._systemBase.actorRegistry.get("System:ExternalRequester")
        responses = getattr(getattr(requester, "instance", None), "responses", None)
        if not responses:
            return False
        taken, responses[:] = list(responses), []
        for message in taken:
            self._accept(message)
        return True


class Probe:
    """A path that collects what actors send to it, with expectations for tests and tools."""

    def __init__(self, system: System, path: str) -> None:
        self.system = system
        self.path = path

    def receive(self, timeout: float = 5.0) -> Any:
        """The next message sent to this probe; raises AskTimeout after `timeout` seconds."""
        return self.receive_with_sender(timeout)[0]

    def receive_with_sender(self, timeout: float = 5.0) -> tuple[Any, str | None]:
        """The next (message, sender path)."""
        return self.system._receive(self.path, timeout, f"probe {self.path} got nothing within {timeout} s")

    def receive_many(self, count: int, timeout: float = 5.0) -> list[Any]:
        """The next `count` messages, all within `timeout` seconds in total."""
        deadline = time.monotonic() + timeout
        return [self.receive(max(0.0, deadline - time.monotonic())) for _ in range(count)]

    def expect_no_message(self, duration: float = 0.3) -> None:
        """Assert that nothing arrives for `duration` seconds."""
        try:
            message = self.receive(duration)
        except AskTimeout:
            return
        raise AssertionError(f"probe {self.path} expected no message but got {message!r}")

    def tell(self, path: str, message: object) -> None:
        """Send a message whose sender is this probe (so replies come here)."""
        self.system.tell(path, message, sender=self.path)

    def close(self) -> None:
        """Stop listening: what arrives for this probe from now on is dropped, and what waits is discarded.

        A long-lived client that makes a probe per piece of work (a Spark worker's cached connection, one per
        task) must close each: an open one keeps its path and its mailbox, with late replies queued, for the
        client's life."""
        self.system._listening_paths.discard(self.path)
        self.system._mailbox.pop(self.path, None)

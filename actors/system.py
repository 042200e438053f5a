"""Starting, attaching to and using an actor system from outside any actor."""

from __future__ import annotations

import itertools
import logging
import os
import pickle
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections import defaultdict, deque
from typing import Any

from thespian.actors import ActorSystem, PoisonMessage

from . import netsec
from .errors import AskTimeout, PathTaken, RepriseError, SpawnFailed, SystemNotRunning, UnpicklableMessage
from .guardian import Guardian, GuardianInit
from .messages import (
    GUARDIAN_PATH,
    Batch,
    DeadLetters,
    DirectoryUpdate,
    GetDeadLetters,
    GetDirectory,
    GetStatus,
    GuardianIs,
    HostSpec,
    RegisterRoute,
    Spawned,
    SpawnHost,
    StopPath,
    SubscribeDeadLetters,
    SystemStatus,
    UnregisterRoute,
    WhereIsGuardian,
    check_store_url,
)
from .paths import validate_path
from .transport import Router, check_message, pack, unpack

log = logging.getLogger("reprise.system")

BASES = {"local": "simpleSystemBase", "multiproc": "multiprocTCPBase"}
DIRECTORY_TTL = 1.0
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
          start_timeout: float = 60.0, **config: Any) -> System:
    """Start an actor system and return a `System` that owns it (a context manager that shuts it down).

    `base="local"` runs every actor in this process (Thespian's simpleSystemBase: deterministic,
    for tests); `base="multiproc"` runs every host in its own OS process (multiprocTCPBase) behind an
    admin on `admin_port` (a free port if None) bound to `bind` (loopback by default). `leader="ip:port"`
    joins an existing system's convention as member `node`.
    """
    if base not in BASES:
        raise ValueError(f"base must be one of {sorted(BASES)} (multiprocQueueBase is not offered: it "
                         f"deadlocks under load), got {base!r}")
    config = dict(config, journal=journal, snapshot_store=snapshot_store, node=node, leader=leader,
                  log_level=log_level)
    if base == "local":
        asys = ActorSystem("simpleSystemBase", {"Reprise Leader": True, "Reprise Node": "leader"},
                           logDefs=False, transientUnique=True)
        guardian = asys.createActor(Guardian)
        reply = asys.ask(guardian, GuardianInit(config), start_timeout)
        if not isinstance(reply, Spawned):
            asys.shutdown()
            raise SpawnFailed(f"the guardian did not start: {reply!r}")
        return System(asys, base=base, guardian=guardian, owner=True, config=config)

    _configure_process_env(bind, advertise, peers)
    env = dict(os.environ)
    env.update(THESPIAN_TUNING)
    env.update(THESPLOG_THRESHOLD="WARNING", PYTHONPATH=os.pathsep.join(p for p in sys.path if p and os.path.isdir(p)))
    # A port we picked can be taken by someone else before the admin binds it (Thespian then reports
    # "not a valid or useable ActorSystem Admin"): pick another. A port the caller chose is not retried.
    for attempt in range(1 if admin_port else _BOOT_ATTEMPTS):
        port = admin_port or free_port(bind)
        if _listening(advertise or bind, port):
            raise SpawnFailed(f"admin port {port} is already in use; attach with actors.connect({port}) "
                              "or choose another port")
        port_tag = tag or f"reprise-system-{port}-{uuid.uuid4().hex[:8]}"
        port_dir = run_dir or tempfile.mkdtemp(prefix=f"reprise-{port}-")
        os.makedirs(port_dir, mode=0o700, exist_ok=True)
        config["run_dir"] = port_dir
        env["THESPLOG_FILE"] = os.path.join(port_dir, "thespian.log")
        cmd = [sys.executable, "-m", "actors.boot", "--port", str(port), "--tag", port_tag,
               "--config", pickle.dumps(config).hex()]
        boot_log = os.path.join(port_dir, "boot.log")
        # A file, not a pipe: the daemonised admin inherits the descriptor and would hold a pipe open.
        with open(boot_log, "w") as out:
            try:
                proc = subprocess.run(cmd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, timeout=start_timeout)
            except subprocess.TimeoutExpired:
                kill_tagged(port_tag)
                raise SpawnFailed(f"the actor system on port {port} did not start within {start_timeout} s; "
                                  f"see {boot_log}") from None
        if proc.returncode == 0:
            break
        kill_tagged(port_tag)
        with open(boot_log) as f:
            tail = f.read()[-2000:]
        if "not a valid or useable ActorSystem Admin" not in tail or attempt + 1 >= _BOOT_ATTEMPTS or admin_port:
            raise SpawnFailed(f"the actor system on port {port} did not start (see {boot_log}):\n{tail}")
        log.warning("the actor system on port %d did not start (port taken meanwhile?); trying another port", port)
    tag, run_dir = port_tag, port_dir
    system = connect(port, host=advertise or bind, _owner=True)
    system.tag, system.run_dir = tag, run_dir
    return system


def connect(admin_port: int, host: str = "127.0.0.1", *, timeout: float = 30.0, _owner: bool = False) -> System:
    """Attach this process to a running multi-process system; never starts or shuts one down."""
    if not _listening(host, admin_port):
        raise SystemNotRunning(
            f"no actor system listens on {host}:{admin_port}; start one first (`reprise up TOPOLOGY.toml` "
            f"or actors.start('multiproc', admin_port={admin_port}))"
        )
    # A client attaches to an admin on this machine (or network namespace) at `host`, so it listens and
    # advertises there too. An inherited REPRISE_BIND (from a parent that started another system) must
    # not win: replies would be addressed to an interface the admin cannot reach, and the ask would hang.
    _configure_process_env(host, host, None)
    asys = ActorSystem("multiprocTCPBase", {"Admin Port": admin_port}, logDefs=None, transientUnique=True)
    agent = asys.createActor("actors.guardian.NodeAgent", globalName="reprise-node")
    reply = asys.ask(agent, WhereIsGuardian(), timeout)
    if not isinstance(reply, GuardianIs) or reply.address is None:
        raise SystemNotRunning(f"the admin on {host}:{admin_port} was not started by Reprise (no guardian); "
                               "start systems with actors.start or `reprise up`")
    system = System(asys, base="multiproc", guardian=reply.address, owner=_owner, admin_port=admin_port)
    system.config = system.status(timeout=timeout).config
    return system


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _listening(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def _configure_process_env(bind: str, advertise: str | None, peers: tuple[str, ...] | None) -> None:
    # Thespian reads these when it creates an endpoint; children (boot, admin, actors) inherit them.
    os.environ["REPRISE_BIND"] = bind
    os.environ["THESPIAN_BASE_IPADDR"] = advertise or (bind if bind != "0.0.0.0" else "127.0.0.1")
    if peers is not None:
        os.environ["REPRISE_PEERS"] = ",".join(peers)
    netsec.apply()


def tagged_pids(tag: str) -> list[int]:
    """Pids of live processes whose command line carries `tag` (every process of one system)."""
    found = []
    needle = tag.encode()
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                if needle in f.read():
                    with open(f"/proc/{entry}/stat") as st:
                        if st.read().split(")")[-1].split()[0] != "Z":
                            found.append(int(entry))
        except OSError:
            continue
    return found


def kill_tagged(tag: str, wait: float = 5.0) -> list[int]:
    """SIGKILL every process carrying `tag` and wait (bounded) until they are gone; returns their pids."""
    pids = tagged_pids(tag)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    # The kill is asynchronous: a caller checking right after would still see them running.
    deadline = time.monotonic() + wait
    while pids and set(pids) & set(tagged_pids(tag)) and time.monotonic() < deadline:
        time.sleep(0.01)
    return pids


def find_tag(admin_port: int) -> str | None:
    """The tag of the local system whose admin runs on `admin_port` (read from its processes' command lines)."""
    needle = b"\0--port\0" + str(admin_port).encode() + b"\0"
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"actors.boot" in cmdline and needle in cmdline:
            parts = cmdline.split(b"\0")
            if b"--tag" in parts:
                return parts[parts.index(b"--tag") + 1].decode()
    return None


def shutdown(admin_port: int, host: str = "127.0.0.1", *, timeout: float = 20.0) -> None:
    """Shut down the multi-process system on `host:admin_port` (what `reprise down` does).

    `connect()` hands out non-owner handles that refuse to shut the shared system down; this is the
    explicit, deliberate way. Local processes of that system are waited for, and killed if they linger.
    """
    system = connect(admin_port, host=host, _owner=True)
    system.tag = find_tag(admin_port)
    system.shutdown(timeout=timeout)


class System:
    """A handle on an actor system: spawn, tell, ask, stop, probes, dead letters, shutdown."""

    def __init__(self, asys: ActorSystem, *, base: str, guardian: Any, owner: bool,
                 admin_port: int | None = None, config: dict | None = None) -> None:
        self._asys = asys
        self.base = base
        self.admin_port = admin_port
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
        self._mailbox: dict[str, deque] = defaultdict(deque)
        self._asks = itertools.count(1)
        self._lock = threading.RLock()
        self._closed = False

    # ---- context manager ------------------------------------------------------------------------
    def __enter__(self) -> System:
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._owner:
            self.shutdown()
        else:
            self.close()

    # ---- actors ------------------------------------------------------------------------------------
    def spawn(self, cls: Any, path: str, *, entities: bool = False, args: tuple = (), kwargs: dict | None = None,
              passivate_after: float | None = 120.0, max_restarts: int = 10, restart_window: float = 60.0,
              linger: float = 0.0, batch_cap: int = 2000, node: str | None = None, shards: int = 1,
              journal: str | None = None, snapshot_store: str | None = None, timeout: float = 60.0) -> str:
        """Start `cls` at `path` (or, with entities=True, one `cls` per path below it, on demand).

        `shards` > 1 spreads the entities over that many host processes (each entity id always in the
        same one, by a hash of the id): entity work runs on several cores.
        `journal` / `snapshot_store` give this host its own store URLs instead of the system's; `{shard}`
        in them becomes the shard number, e.g. "sqlite:///data/accounts-{shard}.db": one SQLite file per
        shard, so shards do not wait for each other's write lock. Such a host records its shard layout in
        its journal and refuses to start with another shard count (its entities' events would be in
        other files).
        """
        validate_path(path)
        if type(shards) is not int or shards < 1 or (shards > 1 and not entities):
            raise ValueError(f"shards must be an int >= 1, and > 1 only for entity hosts (entities=True); got "
                             f"shards={shards!r}, entities={entities!r}")
        for name, url in (("journal", journal), ("snapshot_store", snapshot_store)):
            check_store_url(name, url)
        if getattr(cls, "__module__", None) == "__main__" and self.base != "local":
            raise UnpicklableMessage(f"{cls.__qualname__} is defined in __main__; actor classes must live in "
                                     "an importable module so that actor processes can import them")
        spec = HostSpec(path, cls, entities, tuple(args), dict(kwargs or {}),
                        passivate_after if entities else None, max_restarts, restart_window, linger,
                        batch_cap, node, shards, journal=journal, snapshot_store=snapshot_store)
        reply = self._request(SpawnHost(spec), Spawned, timeout)
        if reply.error:
            raise (PathTaken if "already served" in reply.error else SpawnFailed)(reply.error)
        self._fetched = float("-inf")
        return path

    def stop(self, path: str, timeout: float = 30.0) -> None:
        """Stop the actor or entity host at `path`, or one entity below a host."""
        validate_path(path)
        reply = self._request(StopPath(path), Spawned, timeout)
        if reply.error:
            raise RepriseError(reply.error)
        self._fetched = float("-inf")

    def tell(self, path: str, message: Any, sender: str | None = None) -> None:
        """Send `message` to the actor at `path` (fire and forget)."""
        self.tell_many([(path, message)], sender)

    def tell_many(self, items: Any, sender: str | None = None) -> None:
        """Send many (path, message) pairs, one Thespian message per destination process."""
        groups: dict[str, tuple[Any, list]] = {}
        for path, message in items:
            validate_path(path)
            check_message(message)
            key, address = self._resolve(path)
            groups.setdefault(key, (address, []))[1].append((sender, path, message))
        for address, entries in groups.values():
            batch = pack(self.prefix, entries, self._refuse)
            with self._lock:
                self._asys.tell(address, batch)

    def ask(self, path: str, message: Any, timeout: float = 10.0) -> Any:
        """Send `message` and wait for the first reply to it; raises AskTimeout."""
        # Replies may come from actors that never heard from this client: publish its route once.
        self._ensure_route()
        reply_to = f"{self.prefix}/ask-{next(self._asks)}"
        self._listening_paths.add(reply_to)
        try:
            self.tell(path, message, sender=reply_to)
            return self._receive(reply_to, timeout, f"no reply from {path} within {timeout} s")[0]
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

    def status(self, timeout: float = 10.0) -> SystemStatus:
        """Hosts with their state, restarts and pid; the dead-letter count; the configuration."""
        return self._request(GetStatus(), SystemStatus, timeout)

    # ---- ending --------------------------------------------------------------------------------
    def close(self) -> None:
        """Detach from the system without stopping it."""
        if self._closed:
            return
        self._closed = True
        try:
            if self._registered:
                with self._lock:
                    self._asys.tell(self._guardian, UnregisterRoute(self.prefix))
        finally:
            transport = getattr(getattr(self._asys, "_systemBase", None), "transport", None)
            if self.base != "local" and transport is not None:
                try:
                    transport.close()
                except Exception:
                    pass

    def shutdown(self, timeout: float = 20.0) -> None:
        """Stop the whole actor system (only its owner may) and wait until its processes are gone."""
        if not self._owner:
            raise RepriseError("this System was attached with actors.connect and does not own the actor system; "
                               "call close() to detach (stop the system itself with `reprise down --port N` "
                               "or actors.shutdown(N))")
        if self._closed:
            return
        self._closed = True
        with self._lock:
            self._asys.shutdown()
        if self.tag:
            deadline = time.monotonic() + timeout
            while tagged_pids(self.tag) and time.monotonic() < deadline:
                time.sleep(0.05)
            leftovers = kill_tagged(self.tag)
            if leftovers:
                log.warning("actor system %s left processes %s after shutdown; killed them", self.tag, leftovers)

    # ---- internals -------------------------------------------------------------------------------
    def _refuse(self, entry: tuple, why: str) -> None:
        raise UnpicklableMessage(f"message {type(entry[2]).__qualname__} to {entry[1]} {why}")

    def _ensure_route(self) -> None:
        if not self._registered:
            self._request(RegisterRoute(self.prefix), Spawned, 30.0)
            self._registered = True
            self._fetched = float("-inf")

    def _resolve(self, path: str) -> tuple[str, Any]:
        now = time.monotonic()
        if now - self._fetched > DIRECTORY_TTL:
            self._refresh()
        hit = self._router.resolve(path)
        if hit is None and now - self._fetched > 0.05:
            self._refresh()
            hit = self._router.resolve(path)
        # Unknown paths go to the guardian, which forwards or records a dead letter.
        return hit if hit is not None else (str(self._guardian), self._guardian)

    def _refresh(self) -> None:
        update = self._request(GetDirectory(), DirectoryUpdate, 30.0)
        self._router.replace(update.routes, update.epoch)
        self._fetched = time.monotonic()

    def _request(self, message: Any, expect: type, timeout: float) -> Any:
        """Ask the guardian; messages for probes that arrive meanwhile go to the mailbox."""
        deadline = time.monotonic() + timeout
        with self._lock:
            reply = self._asys.ask(self._guardian, message, timeout)
            while True:
                if isinstance(reply, expect):
                    return reply
                if reply is None:
                    raise AskTimeout(f"the actor system did not answer {type(message).__name__} within {timeout} s")
                self._accept(reply)
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AskTimeout(f"the actor system did not answer {type(message).__name__} within {timeout} s")
                reply = self._asys.listen(remaining)

    def _accept(self, message: Any) -> None:
        if isinstance(message, Batch):
            for sender, target, payload in unpack(message):
                if target in self._listening_paths:
                    self._mailbox[target].append((payload, sender))
                else:
                    log.debug("dropped a late message to %s (nobody waits for it)", target)
        elif isinstance(message, PoisonMessage):
            log.error("a message from this client could not be handled: %s", message.details)
        else:
            log.debug("client ignored %r", message)

    def _receive(self, path: str, timeout: float, what: str) -> tuple[Any, str | None]:
        box = self._mailbox[path]
        deadline = time.monotonic() + timeout
        with self._lock:
            while not box:
                if self.base == "local" and self._drain_local_responses():
                    continue
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    raise AskTimeout(what)
                message = self._asys.listen(remaining)
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

    def tell(self, path: str, message: Any) -> None:
        """Send a message whose sender is this probe (so replies come here)."""
        self.system.tell(path, message, sender=self.path)

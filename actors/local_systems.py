"""Finding the actor systems of this machine (and network namespace) by their admin's command line.

Every admin and actor process keeps the command line of `python -m actors.boot --port N --tag TAG
--run-dir DIR`, so a system's tag and run dir can be read from any of them, given its admin port.

Given a host, only a system listening there counts: two systems may share a port on two addresses of one
machine (`bind`), and `reprise down --host A` must never kill the one on B.

Only processes running as this process's user count. Any local user can start a process whose command line
reads `actors.boot --port N --run-dir DIR`: trusting it would make a client (root's `reprise status`, say)
take that user's DIR/secret as the system's, sign with it, and unpickle what that user's listener on N sends.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass


def own_processes() -> list[str]:
    """The pids (as /proc entry names) of the processes that run as this process's effective user."""
    me = os.geteuid()
    own = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid == me:  # (a process's /proc entry is owned by its euid)
                own.append(entry)
        except OSError:
            continue
    return own


def boot_option(admin_port: int, option: str, host: str | None = None) -> str | None:
    """The value of `option` (e.g. "--tag") on the boot command line of this user's local system on
    `admin_port` (processes of other users are not looked at: see the module's docstring), listening on `host`
    when one is given."""
    found = _boot_option(admin_port, option, own_processes(), host)
    return found[1] if found else None


def listen_address(admin_port: int) -> str | None:
    """The address this user's local system on `admin_port` listens on (for telling a user which --host)."""
    found = _boot_option(admin_port, "--tag", own_processes())
    addresses = _addresses_of(found[0]) if found else None
    return addresses[0] if addresses else None


def is_local_address(host: str) -> bool:
    """True if `host` is an address of this machine (of this network namespace): a socket can bind to it."""
    try:
        with socket.socket() as s:
            s.bind((host, 0))
        return True
    except OSError:
        return False


def foreign_boot_owner(admin_port: int) -> int | None:
    """The uid of another user's process whose command line claims a system on `admin_port`, if any (for
    telling a user why their own was not found)."""
    me = os.geteuid()
    others = [e for e in os.listdir("/proc") if e.isdigit()]
    found = _boot_option(admin_port, "--run-dir", others)
    if found is None:
        return None
    try:
        uid = os.stat(f"/proc/{found[0]}").st_uid
    except OSError:
        return None
    return uid if uid != me else None


def _boot_option(admin_port: int, option: str, pids: list[str], host: str | None = None) -> tuple[str, str] | None:
    """(pid, value) of `option` on the first of `pids` whose boot command line names `admin_port` (and which
    listens on `host`, if given)."""
    needle = b"\0--port\0" + str(admin_port).encode() + b"\0"
    flag = option.encode()
    # Each network namespace may run its own system on the same port: only ours counts.
    my_ns = _net_namespace("self")
    for entry in pids:
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                cmdline = f.read()
        except OSError:
            continue
        if b"actors.boot" not in cmdline or needle not in cmdline:
            continue
        parts = cmdline.split(b"\0")
        if flag not in parts[:-1]:
            continue
        if my_ns is not None and _net_namespace(entry) not in (my_ns, None):
            continue
        if host is not None and not _listens_on(entry, host):
            continue
        return entry, os.fsdecode(parts[parts.index(flag) + 1])
    return None


def run_dir_in_use(run_dir: str) -> int | None:
    """The admin port of this user's running actor system (its admin listening) whose run dir is `run_dir`, if any:
    a second system started there would overwrite its secret (no client could then reach it: not even `reprise
    down`) and write into its logs."""
    target = os.path.realpath(run_dir)
    for entry in own_processes():
        try:
            with open(f"/proc/{entry}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"actors.boot" not in argv or b"--run-dir" not in argv[:-1] or b"--port" not in argv[:-1]:
            continue
        if os.path.realpath(os.fsdecode(argv[argv.index(b"--run-dir") + 1])) != target:
            continue
        try:
            port = int(argv[argv.index(b"--port") + 1])
        except ValueError:
            continue
        if _listening_inodes(port):  # (a stopped system's processes in exit do not count)
            return port
    return None


def _addresses_of(pid: str) -> tuple[str, str] | None:
    """(REPRISE_BIND, THESPIAN_BASE_IPADDR) a system's process started with (every process of a system inherits
    boot's environment): where it listens and the address it gives out; None when not known."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            env = dict(item.split(b"=", 1) for item in f.read().split(b"\0") if b"=" in item)
    except OSError:
        return None
    bind = env.get(b"REPRISE_BIND")
    return None if bind is None else (os.fsdecode(bind), os.fsdecode(env.get(b"THESPIAN_BASE_IPADDR", bind)))


def _listens_on(pid: str, host: str) -> bool:
    """Whether the system of process `pid` takes connections on `host` (True when its bind is unknown)."""
    addresses = _addresses_of(pid)
    if addresses is None:
        return True
    try:
        address = socket.gethostbyname(host)
    except OSError:
        return False
    bind, advertised = addresses
    if address in (bind, advertised):
        return True
    return bind in ("", "0.0.0.0") and is_local_address(address)


def _net_namespace(pid: str) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/ns/net")
    except OSError:
        return None


# ---- who holds a port: a stopped system's process still in exit, or something that runs ----------------------

LEFTOVER_WAIT = 10.0
"""Seconds a start waits for a port that only a stopped system's processes hold: an actor process notices its dead
admin within supervision.PARENT_CHECK (1 s) and exits, and a process in exit lets go of its sockets in a moment."""


@dataclass(frozen=True)
class PortHolder:
    """A process of this user listening on a port: its pid, and the admin port of the system it belongs to."""

    pid: int
    admin_port: int | None  # None: not an actors.boot process (or one in exit, its command line gone)
    leftover: bool  # a stopped system's process: in exit, or an actor process whose admin no longer listens


def port_holders(port: int) -> list[PortHolder]:
    """The processes of this user (in this network namespace) listening on TCP `port`, on any address."""
    inodes = _listening_inodes(port)
    if not inodes:
        return []
    my_ns = _net_namespace("self")
    holders = []
    for entry in own_processes():
        if my_ns is not None and _net_namespace(entry) not in (my_ns, None):
            continue
        if _holds_any(entry, inodes):
            holders.append(_holder(entry))
    return holders


def wait_for_leftovers(port: int, timeout: float = LEFTOVER_WAIT) -> list[PortHolder]:
    """Wait (bounded by `timeout` s) while only leftovers of a stopped system hold `port`; who holds it then
    ([] once it is free, or when its holders are not this user's to see)."""
    deadline = time.monotonic() + timeout
    while True:
        holders = port_holders(port)
        if not holders or not all(h.leftover for h in holders) or time.monotonic() >= deadline:
            return holders
        time.sleep(0.05)


def describe_holders(holders: list[PortHolder]) -> str:
    """How an error names who holds a port: the system (its admin port, and how to stop it) or the pids."""
    admins = sorted({h.admin_port for h in holders if h.admin_port is not None and not h.leftover})
    if admins:
        return " and ".join(f"by the actor system on admin port {p} (`reprise status --port {p}` shows it, "
                            f"`reprise down --port {p}` stops it)" for p in admins)
    pids = ", ".join(str(h.pid) for h in holders)
    if holders and all(h.leftover for h in holders):
        return (f"by process(es) {pids} of a stopped actor system that did not exit within {LEFTOVER_WAIT:g} s "
                f"(kill them)")
    return f"by process(es) {pids}" if holders else "by another program"


def _listening_inodes(port: int) -> set[str]:
    """The socket inodes listening on TCP `port` (IPv4 and IPv6, any address), from /proc/net."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as f:
                lines = f.readlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A" and int(fields[1].rsplit(":", 1)[1], 16) == port:  # 0A: LISTEN
                found.add(f"socket:[{fields[9]}]")
    return found


def _holds_any(pid: str, inodes: set[str]) -> bool:
    # A process whose main thread has exited while others still run shows no descriptors of its own: its
    # threads' (/proc/PID/task/TID/fd) still do.
    try:
        tasks = [f"/proc/{pid}/fd"] + [f"/proc/{pid}/task/{t}/fd" for t in os.listdir(f"/proc/{pid}/task")]
    except OSError:
        return False
    for fd_dir in tasks:
        try:
            for fd in os.listdir(fd_dir):
                try:
                    if os.readlink(f"{fd_dir}/{fd}") in inodes:
                        return True
                except OSError:
                    continue
        except OSError:
            continue
    return False


def _holder(pid: str) -> PortHolder:
    """What process `pid`, which listens on a port, is (see PortHolder)."""
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            argv = f.read().split(b"\0")
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return PortHolder(int(pid), None, True)  # (gone meanwhile)
    if state == "Z" or argv == [b""]:  # in exit: its command line is gone before its sockets are closed
        return PortHolder(int(pid), None, True)
    if b"actors.boot" not in argv or b"--port" not in argv[:-1]:
        return PortHolder(int(pid), None, False)
    try:
        admin_port = int(argv[argv.index(b"--port") + 1])
    except ValueError:
        return PortHolder(int(pid), None, False)
    # The admin listens on its port while the system runs; its actor processes outlive it by up to PARENT_CHECK.
    return PortHolder(int(pid), admin_port, not _listening_inodes(admin_port))


def unresolvable(host: str) -> str | None:
    """Why `host` does not resolve to an address (the resolver's words), or None if it does."""
    try:
        socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        return e.strerror or str(e)
    except UnicodeError as e:  # (a label too long for IDNA: the resolver is never asked)
        return str(e)
    return None


def listening(host: str, port: int) -> bool:
    """True if something accepts TCP connections on `host`:`port` now."""
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False

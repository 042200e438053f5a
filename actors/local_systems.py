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

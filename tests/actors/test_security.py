"""Loopback by default, and the peer allowlist in multi-host mode (multi-process systems only)."""

from __future__ import annotations

import os
import socket
import subprocess

import pytest

from actors.system import tagged_pids
from tests.actors.sample import Echo, Ping, Pong


def non_loopback_ipv4() -> str | None:
    """An IPv4 address of this machine other than loopback, or None."""
    out = subprocess.run(["ip", "-4", "-o", "addr"], capture_output=True, text=True).stdout
    for line in out.splitlines():
        address = line.split()[3].split("/")[0]
        if not address.startswith("127."):
            return address
    return None


def listening_addresses(pids: list[int]) -> list[tuple[str, int]]:
    """(ip, port) of every listening TCP socket owned by `pids`, read from /proc."""
    inodes = set()
    for pid in pids:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    found = []
    with open("/proc/net/tcp") as f:
        for line in f.readlines()[1:]:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:
                hex_ip, hex_port = local.split(":")
                ip = ".".join(str(int(hex_ip[i:i + 2], 16)) for i in (6, 4, 2, 0))
                found.append((ip, int(hex_port, 16)))
    return found


@pytest.fixture
def outside_ip():
    ip = non_loopback_ipv4()
    if ip is None:
        pytest.skip("this machine has no non-loopback IPv4 address to connect from")
    return ip


def test_every_listening_socket_is_bound_to_loopback(make_system):
    system = make_system("multiproc")
    system.spawn(Echo, "/user/a")
    system.spawn(Echo, "/user/b", entities=True)
    assert system.ask("/user/b/1", Ping(1)) == Pong(1, "/user/b/1")
    addresses = listening_addresses(tagged_pids(system.tag))
    assert len(addresses) >= 4  # admin, logger, guardian, node agent, hosts
    assert {ip for ip, _ in addresses} == {"127.0.0.1"}, addresses


def test_connection_from_a_non_loopback_address_is_refused(make_system, outside_ip):
    system = make_system("multiproc")
    system.spawn(Echo, "/user/a")
    with pytest.raises(ConnectionRefusedError):
        socket.create_connection((outside_ip, system.admin_port), timeout=3)
    # Every actor port refuses too.
    for _, port in listening_addresses(tagged_pids(system.tag)):
        with pytest.raises(ConnectionRefusedError):
            socket.create_connection((outside_ip, port), timeout=3)


def test_peer_allowlist_drops_connections_from_unlisted_addresses(make_system, outside_ip):
    system = make_system("multiproc", bind="0.0.0.0", advertise="127.0.0.1", peers=("10.255.255.1",))
    system.spawn(Echo, "/user/a")
    assert system.ask("/user/a", Ping(2)) == Pong(2, "/user/a")  # loopback is always allowed
    with socket.create_connection((outside_ip, system.admin_port), timeout=3,
                                  source_address=(outside_ip, 0)) as conn:
        conn.settimeout(5)
        try:
            data = conn.recv(1)
        except ConnectionResetError:
            data = b""
        assert data == b"", "the admin kept a connection from an address that is not an allowed peer"

"""Network namespaces for multi-host tests on one machine: "machines" with their own addresses on a bridge,
a PostgreSQL relay into each, and Spark standalone daemons inside them.

- `namespaces(n)`: n namespaces joined by a Linux bridge in the root namespace (10.78.0.1, .2, ...; the
  bridge itself is 10.78.0.254, so the test process reaches every namespace); on exit every process left in
  them is SIGKILLed and the namespaces, veth pairs and bridge are deleted, even after a failure.
- `PgRelay`: PostgreSQL listens on the root namespace's 127.0.0.1 only (its listen_addresses is the
  machine's, not ours to change), which no namespace can reach. A relay process in the root namespace opens
  a listening socket on 127.0.0.1:5432 *inside* each namespace (setns(2) on one thread, then back) and
  forwards every connection to the root's 127.0.0.1:5432: the same journal URL then works in every
  namespace, as it would on machines that all reach one database server.
- `spark_in(...)`: a tests.spark_bridge.standalone.StandaloneCluster whose master and workers run in
  namespaces, each worker with the environment it is given (REPRISE_HOST/REPRISE_PORT of its node).

Run as `python -m tests.netns relay HOST:PORT NAMESPACE...` it is the relay.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.spark_bridge.standalone import (
    ROOT,
    ClusterUnavailable,
    StandaloneCluster,
    daemon_env,
    spark_home,
    wait_master_alive,
    wait_registered,
)

SUBNET = "10.78.0"
BRIDGE_HOST = f"{SUBNET}.254"
CLONE_NEWNET = 0x40000000


def unavailable() -> str | None:
    """Why network namespaces cannot be made here, or None if they can."""
    if os.geteuid() != 0:
        return "not root"
    if shutil.which("ip") is None:
        return "no `ip` command (iproute2)"
    probe = f"rp-probe-{uuid.uuid4().hex[:6]}"
    made = subprocess.run(["ip", "netns", "add", probe], capture_output=True, text=True)
    if made.returncode != 0:
        return f"`ip netns add` failed: {made.stderr.strip()}"
    subprocess.run(["ip", "netns", "del", probe], capture_output=True)
    return None


@dataclass(frozen=True)
class Namespace:
    """One network namespace: a "machine" at `address`."""

    name: str
    address: str

    @property
    def prefix(self) -> list[str]:
        """Prepend to a command to run it in this namespace."""
        return ["ip", "netns", "exec", self.name]

    def pids(self) -> list[int]:
        """Every process whose network namespace this is."""
        out = subprocess.run(["ip", "netns", "pids", self.name], capture_output=True, text=True).stdout
        return [int(p) for p in out.split()]

    def kill_all(self) -> list[int]:
        """SIGKILL every process in the namespace (a machine lost), until none is left; their pids."""
        killed: list[int] = []
        deadline = time.monotonic() + 10
        while (pids := self.pids()) and time.monotonic() < deadline:
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                    killed.append(pid)
                except ProcessLookupError:
                    pass
            time.sleep(0.05)  # (a process forked meanwhile shows up on the next round)
        return sorted(set(killed))


def _ip(*argv: str) -> None:
    done = subprocess.run(["ip", *argv], capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"ip {' '.join(argv)}: {done.stderr.strip()}")


@contextmanager
def namespaces(count: int) -> Iterator[list[Namespace]]:
    """`count` namespaces on one bridge (addresses SUBNET.1 ..); everything removed on exit."""
    suffix = uuid.uuid4().hex[:6]
    bridge = f"rpbr{suffix}"  # interface names: at most 15 characters
    made: list[Namespace] = []
    links: list[str] = []
    try:
        _ip("link", "add", bridge, "type", "bridge")
        links.append(bridge)
        _ip("addr", "add", f"{BRIDGE_HOST}/24", "dev", bridge)
        _ip("link", "set", bridge, "up")
        for i in range(count):
            ns = Namespace(f"rp-{suffix}-{chr(ord('a') + i)}", f"{SUBNET}.{i + 1}")
            _ip("netns", "add", ns.name)
            made.append(ns)
            inside, outside = f"rpi{suffix}{i}", f"rpo{suffix}{i}"
            _ip("link", "add", outside, "type", "veth", "peer", "name", inside)
            links.append(outside)
            _ip("link", "set", outside, "master", bridge)
            _ip("link", "set", outside, "up")
            _ip("link", "set", inside, "netns", ns.name)
            _ip("-n", ns.name, "addr", "add", f"{ns.address}/24", "dev", inside)
            _ip("-n", ns.name, "link", "set", inside, "up")
            _ip("-n", ns.name, "link", "set", "lo", "up")
        yield made
    finally:
        for ns in made:
            ns.kill_all()
            subprocess.run(["ip", "netns", "del", ns.name], capture_output=True)
        for link in reversed(links):  # (a veth pair goes with its namespace end; the bridge stays otherwise)
            subprocess.run(["ip", "link", "del", link], capture_output=True)


def leftovers(names: list[str]) -> list[str]:
    """Which of the namespaces and links named are still there (for the cleanup check)."""
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-o", "link", "show"], capture_output=True, text=True).stdout
    return [n for n in names if n in netns or f" {n}:" in links or f" {n}@" in links]


# ---- the PostgreSQL relay -----------------------------------------------------------------------------


class PgRelay:
    """A relay process: 127.0.0.1:`port` in each namespace forwards to `target` of the root namespace."""

    def __init__(self, spaces: list[Namespace], target: str = "127.0.0.1:5432", port: int = 5432) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.netns", "relay", target, str(port), *(ns.name for ns in spaces)],
            cwd=ROOT, stdout=subprocess.PIPE, text=True, start_new_session=True,
            env={**os.environ, "PYTHONPATH": ROOT})
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if line != "ready":
            self.stop()
            raise RuntimeError(f"the PostgreSQL relay did not start (it said {line!r})")

    def stop(self) -> None:
        """Kill the relay (and so every connection it carries)."""
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(10)

    def __enter__(self) -> PgRelay:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _setns(fd: int) -> None:
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.setns(fd, CLONE_NEWNET) != 0:
        raise OSError(ctypes.get_errno(), "setns failed")


def _listen_in(namespace: str, port: int) -> socket.socket:
    """A socket listening on 127.0.0.1:`port` of `namespace`, made by this thread from the root namespace."""
    root = os.open("/proc/self/ns/net", os.O_RDONLY)  # (this thread's: the root namespace)
    target = os.open(f"/var/run/netns/{namespace}", os.O_RDONLY)
    try:
        _setns(target)
        try:
            server = socket.create_server(("127.0.0.1", port), backlog=128)
        finally:
            _setns(root)  # sockets keep the namespace they were made in; this thread goes back
    finally:
        os.close(root)
        os.close(target)
    return server


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _serve(server: socket.socket, host: str, port: int) -> None:
    while True:
        client, _ = server.accept()
        try:
            upstream = socket.create_connection((host, port))
        except OSError:
            client.close()
            continue
        for src, dst in ((client, upstream), (upstream, client)):
            threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def relay_main(target: str, port: int, names: list[str]) -> None:
    """The relay process: listen in each namespace, forward to `target` (root namespace) until killed."""
    host, _, target_port = target.rpartition(":")
    servers = [_listen_in(name, port) for name in names]
    for server in servers:
        threading.Thread(target=_serve, args=(server, host, int(target_port)), daemon=True).start()
    print("ready", flush=True)
    threading.Event().wait()


# ---- Spark in namespaces ------------------------------------------------------------------------------


def _daemon(cluster: StandaloneCluster, name: str, ns: Namespace, args: list[str], env: dict[str, str]) -> None:
    home = spark_home()
    full = {**daemon_env(cluster, ns.address), "PYTHONPATH": ROOT, **env}
    with open(cluster.workdir / f"{name}.log", "ab") as log:
        proc = subprocess.Popen([*ns.prefix, os.path.join(home, "bin", "spark-class"), *args], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=full, cwd=cluster.workdir,
                                start_new_session=True)
    cluster.daemons[name] = proc
    cluster.groups.add(proc.pid)


def spark_in(workdir: Path, master: Namespace, workers: list[tuple[Namespace, dict[str, str]]],
             timeout: float = 90.0, worker_memory: str = "1g") -> StandaloneCluster:
    """A Spark master in `master` and a 1-core worker in each of `workers` (with its extra environment);
    returns once every worker is registered. Raises ClusterUnavailable when it cannot start here."""
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise ClusterUnavailable("no java on PATH and no JAVA_HOME")
    workdir.mkdir(parents=True, exist_ok=True)
    port, ui = 7077, 8080  # (a namespace's own ports: nothing else listens there)
    cluster = StandaloneCluster(f"spark://{master.address}:{port}", f"http://{master.address}:{ui}",
                                tuple(ns.address for ns, _ in workers), workdir)
    try:
        _daemon(cluster, "master", master, ["org.apache.spark.deploy.master.Master", "--host", master.address,
                                            "--port", str(port), "--webui-port", str(ui)],
                {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"})
        wait_master_alive(cluster, timeout)  # (a worker registering with a standby master retries 5-15 s later)
        for ns, env in workers:
            _daemon(cluster, f"worker-{ns.address}", ns, [
                "org.apache.spark.deploy.worker.Worker", "--host", ns.address, "--cores", "1", "--memory",
                worker_memory, "--webui-port", "8081", "--work-dir", str(workdir / f"work-{ns.address}"),
                cluster.master_url], env)
        wait_registered(cluster, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


if __name__ == "__main__":
    if sys.argv[1:2] == ["relay"] and len(sys.argv) >= 5:
        relay_main(sys.argv[2], int(sys.argv[3]), sys.argv[4:])
    else:
        sys.exit("usage: python -m tests.netns relay HOST:PORT LISTEN_PORT NAMESPACE...")

"""A real Spark standalone cluster on this machine: a master and workers as separate JVMs, each worker on its
own loopback address (127.0.0.2, 127.0.0.3, ...) so that the scheduler sees distinct hosts, and drivers run
as subprocesses (the test session's own process already holds a local SparkContext, one per process).

Every daemon starts in its own process group (its executors and their Python workers join it), so that
stopping the cluster kills every JVM it started; `survivors()` proves it.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import traceback
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import actors
from spark_bridge.session import LEAN_JVM
from tests.ports import free_ports

ROOT = str(Path(__file__).resolve().parents[2])
REQUIRE = "REPRISE_REQUIRE_CLUSTER"


class ClusterUnavailable(Exception):
    """The standalone cluster could not start here (no Java, no pyspark, no loopback alias, a daemon died)."""


def spark_home() -> str:
    """The pyspark package's directory, which holds bin/spark-class and the jars."""
    try:
        import pyspark
    except ImportError as e:
        raise ClusterUnavailable(f"pyspark is not installed ({e})") from None
    return os.path.dirname(pyspark.__file__)


def _check_address(host: str) -> None:
    try:
        with socket.socket() as s:
            s.bind((host, 0))
    except OSError as e:
        raise ClusterUnavailable(f"cannot bind {host} ({e}): loopback aliases are not routed here") from None


@dataclass
class StandaloneCluster:
    """A running master and workers; `stop()` kills them and everything they started."""

    master_url: str
    ui_url: str
    hosts: tuple[str, ...]
    workdir: Path
    daemons: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    groups: set[int] = field(default_factory=set)
    peak_jvm_mb: float = 0.0
    peak_jvms: list[tuple[str, float]] = field(default_factory=list)
    worker_env: dict[str, dict[str, str]] = field(default_factory=dict)
    """Extra environment per worker host (its executors and their Python workers inherit it)."""

    @property
    def local_dir(self) -> Path:
        """Spark's scratch directory for this cluster's daemons, executors and drivers (made on first use)."""
        path = self.workdir / "spark-local"
        path.mkdir(parents=True, exist_ok=True)
        return path

    def status(self) -> dict[str, Any]:
        """The master's JSON status (workers, apps)."""
        with urllib.request.urlopen(f"{self.ui_url}/json/", timeout=5) as r:
            status: dict[str, Any] = json.load(r)
            return status

    def processes(self) -> list[tuple[int, int, str]]:
        """(pid, RSS kB, command) of every live process in the cluster's process groups (daemons, executors,
        their Python workers) and of any driver group registered with `track`."""
        found = []
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
                pgrp = int(stat.rsplit(")", 1)[1].split()[2])
                if pgrp not in self.groups:
                    continue
                status = Path(f"/proc/{entry}/status").read_text()
                if "\nState:\tZ" in status:
                    continue
                rss = next((int(line.split()[1]) for line in status.splitlines() if line.startswith("VmRSS:")), 0)
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except (OSError, IndexError, ValueError):
                continue  # gone meanwhile
            found.append((int(entry), rss, cmd))
        return found

    def jvms(self) -> list[tuple[str, float]]:
        """(role, resident MiB) of the cluster's live JVMs: Master, Worker, executors, drivers."""
        roles = {"deploy.master.Master": "master", "deploy.worker.Worker": "worker",
                 "CoarseGrainedExecutorBackend": "executor", "SparkSubmit": "driver"}
        return [(next((r for k, r in roles.items() if k in cmd), "other"), rss / 1024)
                for _, rss, cmd in self.processes() if cmd.split(" ", 1)[0].endswith("/java")]

    def jvm_rss_mb(self) -> float:
        """Resident memory of the cluster's live JVMs, in MiB; the largest total so far, with its parts, is kept
        in `peak_jvm_mb` and `peak_jvms`."""
        jvms = self.jvms()
        total = sum(mb for _, mb in jvms)
        if total > self.peak_jvm_mb:
            self.peak_jvm_mb, self.peak_jvms = total, sorted(jvms)
        return total

    def track(self, pid: int) -> None:
        """Count the process group of `pid` (a driver started with start_new_session) as the cluster's."""
        self.groups.add(os.getpgid(pid))

    def survivors(self) -> list[int]:
        """Pids of the cluster's process groups still alive."""
        return [pid for pid, _, _ in self.processes()]

    def kill_worker(self, host: str) -> None:
        """SIGKILL the worker on `host` and its executors (its whole process group): a host lost."""
        os.killpg(self.daemons[f"worker-{host}"].pid, signal.SIGKILL)

    def restart_worker(self, host: str, timeout: float = 60.0) -> None:
        """Start the worker on `host` again (after kill_worker) and wait until the master lists it alive."""
        self.daemons.pop(f"worker-{host}").wait(10)
        _worker(self, host, env=self.worker_env.get(host, {}))
        wait_registered(self, timeout)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM every daemon's group (workers first), then SIGKILL what is left after `timeout` seconds."""
        for name in sorted(self.daemons, key=lambda n: n == "master"):
            try:
                os.killpg(self.daemons[name].pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
        deadline = time.monotonic() + timeout
        for proc in self.daemons.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        while self.survivors() and time.monotonic() < deadline:
            time.sleep(0.1)
        for pid in self.survivors():  # (by pid: a group whose members all died holds nothing of ours)
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        for proc in self.daemons.values():
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                pass

    def log_tail(self, lines: int = 15) -> str:
        """The last lines of every daemon's log, to explain a failure."""
        out = []
        for log in sorted(self.workdir.glob("*.log")):
            out.append(f"--- {log.name}\n" + "\n".join(log.read_text(errors="replace").splitlines()[-lines:]))
        return "\n".join(out)


def daemon_env(cluster: StandaloneCluster, host: str) -> dict[str, str]:
    """The environment of a master or worker JVM on `host`. Spark's scratch files (the executors' block managers,
    a JVM's native libraries) go under the cluster's workdir: in /tmp, every daemon or executor the tests SIGKILL
    would leave its own behind."""
    local = cluster.local_dir
    return {**os.environ, "SPARK_HOME": spark_home(), "SPARK_LOCAL_IP": host, "SPARK_DAEMON_MEMORY": "256m",
            "SPARK_DAEMON_JAVA_OPTS": LEAN_JVM, "SPARK_LOG_DIR": str(cluster.workdir),
            "SPARK_LOCAL_DIRS": str(local), "PYSPARK_PYTHON": sys.executable,
            # Every JVM of the cluster reads it: the daemons, and the executors, which inherit a worker's environment
            # but not its daemon options (an executor ended without its shutdown hooks, SIGKILLed with its worker,
            # left lz4's native library in /tmp).
            "JAVA_TOOL_OPTIONS": f"-Djava.io.tmpdir={local}"}


def _daemon(cluster: StandaloneCluster, name: str, args: list[str], host: str, extra_env: dict[str, str]) -> None:
    home = spark_home()
    env = {**daemon_env(cluster, host), **extra_env}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (ROOT, env.get("PYTHONPATH", "")) if p)
    with open(cluster.workdir / f"{name}.log", "ab") as log:
        proc = subprocess.Popen([os.path.join(home, "bin", "spark-class"), *args], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env, cwd=cluster.workdir,
                                start_new_session=True)
    cluster.daemons[name] = proc
    cluster.groups.add(proc.pid)


def _worker(cluster: StandaloneCluster, host: str, memory: str = "1g", env: dict[str, str] | None = None) -> None:
    _daemon(cluster, f"worker-{host}", [
        "org.apache.spark.deploy.worker.Worker", "--host", host, "--cores", "1", "--memory", memory,
        "--webui-port", str(actors.free_port(host)), "--work-dir", str(cluster.workdir / f"work-{host}"),
        cluster.master_url], host, env or {})


def start_cluster(workdir: Path, hosts: tuple[str, ...] = ("127.0.0.2", "127.0.0.3"), worker_memory: str = "1g",
                  timeout: float = 60.0, worker_env: dict[str, dict[str, str]] | None = None) -> StandaloneCluster:
    """Start a master on 127.0.0.1 and one 1-core worker per host; wait until all are registered.

    `worker_env` maps a worker's host to extra environment variables for it (e.g. its REPRISE_PORT).
    """
    if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
        raise ClusterUnavailable("no java on PATH and no JAVA_HOME")
    spark_home()
    for host in hosts:
        _check_address(host)
    workdir.mkdir(parents=True, exist_ok=True)
    port, ui = free_ports(2)
    cluster = StandaloneCluster(f"spark://127.0.0.1:{port}", f"http://127.0.0.1:{ui}", hosts, workdir,
                                worker_env=dict(worker_env or {}))
    try:
        _daemon(cluster, "master", ["org.apache.spark.deploy.master.Master", "--host", "127.0.0.1", "--port",
                                    str(port), "--webui-port", str(ui)], "127.0.0.1",
                {"SPARK_MASTER_OPTS": "-Dspark.master.rest.enabled=false"})
        # Workers start once the master leads: one registering while it is still in standby is turned away and
        # retries only 5 to 15 s later (seen under load: a cluster start 13 s longer).
        wait_master_alive(cluster, timeout)
        for host in hosts:
            _worker(cluster, host, worker_memory, cluster.worker_env.get(host, {}))
        wait_registered(cluster, timeout)
    except BaseException:
        cluster.stop()
        raise
    return cluster


def wait_master_alive(cluster: StandaloneCluster, timeout: float) -> None:
    """Wait until the master leads (status ALIVE); ClusterUnavailable if it exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cluster.daemons["master"].poll() is not None:
            raise ClusterUnavailable(f"the master exited at start-up:\n{cluster.log_tail()}")
        try:
            if cluster.status().get("status") == "ALIVE":
                return
        except (OSError, ValueError):
            pass  # its UI is not up yet (or still serves its HTML page at /json/, seen once in CI)
        time.sleep(0.1)
    raise ClusterUnavailable(f"the master did not become ALIVE within {timeout} s:\n{cluster.log_tail()}")


def wait_registered(cluster: StandaloneCluster, timeout: float) -> None:
    """Wait until every worker of `cluster` is ALIVE at its master; ClusterUnavailable if one exits or time runs out."""
    deadline = time.monotonic() + timeout
    seen = None
    while time.monotonic() < deadline:
        dead = [n for n, p in cluster.daemons.items() if p.poll() is not None]
        if dead:
            raise ClusterUnavailable(f"{dead} exited at start-up:\n{cluster.log_tail()}")
        try:
            status = cluster.status()
            seen = sorted(w["host"] for w in status["workers"] if w["state"] == "ALIVE")
            if seen == sorted(cluster.hosts):
                return
        except OSError:
            pass  # the master's UI is not up yet
        time.sleep(0.2)
    raise ClusterUnavailable(f"the workers did not all register within {timeout} s (alive: {seen}):\n"
                             f"{cluster.log_tail()}")


class Driver:
    """A driver process running tests/spark_bridge/cluster_job.py on the cluster (its output goes to files)."""

    def __init__(self, cluster: StandaloneCluster, job: dict[str, Any], name: str,
                 module: str = "tests.spark_bridge.cluster_job") -> None:
        self.cluster = cluster
        self.out, self.err = cluster.workdir / f"{name}.out", cluster.workdir / f"{name}.err"
        env = {**os.environ, "SPARK_LOCAL_IP": "127.0.0.1", "SPARK_LOCAL_DIRS": str(cluster.local_dir),
               "PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH", "")) if p)}
        with open(self.out, "wb") as out, open(self.err, "wb") as err:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", module, json.dumps(
                    {"master": cluster.master_url, **job})], stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                env=env, cwd=ROOT, start_new_session=True)
        cluster.track(self.proc.pid)


class DriverServer:
    """One driver process that runs jobs one after another (see `serve`): its SparkContext and executors stay up
    between jobs, so a job pays no driver, executor or Python worker start. Started at its first job."""

    def __init__(self, cluster: StandaloneCluster, name: str, module: str = "tests.spark_bridge.cluster_job",
                 **options: Any) -> None:
        self.cluster, self.name, self.module, self.options = cluster, name, module, options
        self.inbox = cluster.workdir / f"{name}.jobs"
        self.driver: Driver | None = None
        self.sent = 0

    def run(self, job: dict[str, Any], timeout: float) -> dict[str, Any]:
        """Run `job` in the driver and wait (bounded; the driver is killed after `timeout` s) for its result."""
        return self.result(self.submit(job), timeout)

    def submit(self, job: dict[str, Any]) -> int:
        """Send `job` to the driver (starting it first if need be); its number, for `result`."""
        if self.driver is None:
            self.inbox.mkdir(parents=True, exist_ok=True)
            self.driver = Driver(self.cluster, {**self.options, "job": "serve", "inbox": str(self.inbox)},
                                 self.name, self.module)
        self.sent += 1
        _write_json(self.inbox / f"job-{self.sent}.json", job)
        return self.sent

    def result(self, number: int, timeout: float) -> dict[str, Any]:
        """Wait (bounded; the driver is killed after `timeout` s) for the result of job `number`."""
        assert self.driver is not None, "no job was submitted"
        answer = self.inbox / f"result-{number}.json"
        deadline = time.monotonic() + timeout
        while not answer.exists():
            if self.driver.proc.poll() is not None:
                raise AssertionError(f"the cluster driver exited (code {self.driver.proc.returncode}) during a job:\n"
                                     f"{self.driver.err.read_text(errors='replace')[-4000:]}")
            if time.monotonic() >= deadline:
                driver = self.driver
                self.close(0)
                err = driver.err.read_text(errors="replace")[-3000:]
                raise AssertionError(f"the cluster driver did not finish a job within {timeout} s:\n"
                                     f"{err}\n{self.cluster.log_tail()}")
            self.cluster.jvm_rss_mb()
            time.sleep(0.1)
        reply: dict[str, Any] = json.loads(answer.read_text())
        if "error" in reply:
            raise AssertionError(f"the job failed in the cluster driver:\n{reply['error']}")
        result: dict[str, Any] = reply["result"]
        return result

    def close(self, timeout: float = 60.0) -> None:
        """Stop the driver (its application and executors end): bounded, then its process group is killed."""
        if self.driver is None:
            return
        (self.inbox / "stop").touch()
        try:
            self.driver.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.driver.proc.pid, signal.SIGKILL)
            self.driver.proc.wait(10)
        self.driver = None


def _write_json(path: Path, value: Any) -> None:
    with open(path.with_suffix(".tmp"), "w") as f:
        json.dump(value, f)
    os.replace(path.with_suffix(".tmp"), path)  # (the reader never sees half a file)


def serve(inbox: Path, run: Callable[[dict[str, Any]], dict[str, Any]], idle: float = 600.0) -> None:
    """The driver's side of DriverServer: run job-1.json, job-2.json, ... of `inbox` in turn with `run`, writing
    result-N.json, until `stop` appears (or the test process is gone, or nothing came for `idle` seconds)."""
    parent, n, last = os.getppid(), 1, time.monotonic()
    while os.getppid() == parent and time.monotonic() - last < idle:
        job_file = inbox / f"job-{n}.json"
        if not job_file.exists():
            if (inbox / "stop").exists():
                return
            time.sleep(0.05)
            continue
        try:
            reply: dict[str, Any] = {"result": run(json.loads(job_file.read_text()))}
        except Exception:
            reply = {"error": traceback.format_exc()}
        _write_json(inbox / f"result-{n}.json", reply)
        n, last = n + 1, time.monotonic()


def start_or_skip(workdir: Path, hosts: tuple[str, ...] = ("127.0.0.2", "127.0.0.3"),
                  worker_env: dict[str, dict[str, str]] | None = None) -> StandaloneCluster:
    """start_cluster, or skip loudly when it cannot start here (fail instead under REPRISE_REQUIRE_CLUSTER=1)."""
    import pytest

    try:
        return start_cluster(workdir, hosts, worker_env=worker_env)
    except ClusterUnavailable as e:
        reason = f"SKIPPING SPARK STANDALONE CLUSTER TESTS: {e} (set {REQUIRE}=1 to make this fail)"
        if os.environ.get(REQUIRE) == "1":
            pytest.fail(f"{REQUIRE}=1 but the Spark standalone cluster did not start: {e}", pytrace=False)
        pytest.skip(reason)


def attempts(markers: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """The task attempts that ran, by (partition, attempt number), from cluster_job's marker files."""
    found = {}
    for marker in markers.glob("p*-a*.json"):
        partition, attempt = marker.stem[1:].split("-a")
        found[int(partition), int(attempt)] = json.loads(marker.read_text())
    return found


def worker_of(attempt: dict[str, Any]) -> str:
    """The host of the worker whose executor ran the attempt (its working directory is under work-<host>)."""
    return next(part[len("work-"):] for part in Path(attempt["cwd"]).parts if part.startswith("work-"))

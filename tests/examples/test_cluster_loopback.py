"""examples/cluster/ on one machine without network namespaces, as its README says: every node bound to
127.0.0.1 and told apart by `--node`, the leader first; rows told to the sharded accounts twice each are
applied exactly once, whichever node their shard runs on; `reprise down` on every node leaves no process.
"""

from __future__ import annotations

import itertools
import os
import re
import shutil
import subprocess
import sys
import time
import uuid

import pytest

import actors
from actors.system import kill_tagged
from examples.cluster.feed import ACCOUNTS_PATH, check
from examples.cluster.model import deposit
from journal.postgres import drop_schema
from spark_bridge import Row
from tests.conftest import SESSION_TOKEN
from tests.ports import free_ports
from tests.waiting import wait_for

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(150)]

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EXAMPLE = os.path.join(ROOT, "examples", "cluster", "cluster.toml")
REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
ROWS, ACCOUNTS = 60, 12
_n = itertools.count(1)


def on_loopback(dest, journal: str) -> tuple[str, dict[str, int]]:
    """examples/cluster/cluster.toml with every bind 127.0.0.1 (the README's one-machine edit) written to
    `dest`; free admin and metrics ports and `journal` instead of the fixed ones, so that runs do not clash."""
    text = open(EXAMPLE).read()
    text, binds = re.subn(r'bind = "10\.78\.0\.\d"', 'bind = "127.0.0.1"', text)
    assert binds == 3, "the example's three [[node]] binds moved: update this test and the README"
    # Six distinct ports: calls of free_port() in a row once gave two nodes one admin port (CI, 2026-11-24).
    chosen = free_ports(6)
    ports = dict(zip("abc", chosen[:3], strict=True))
    for name, old, metrics in zip("abc", (1900, 1901, 1902), chosen[3:], strict=True):
        text = text.replace(f"admin_port = {old}\n", f"admin_port = {ports[name]}\n")
        text = text.replace(f"metrics_port = {9464 + 'abc'.index(name)}\n", f"metrics_port = {metrics}\n")
    example_url = "postgresql://postgres@127.0.0.1:5432/test?schema=reprise_cluster"
    assert text.count(example_url) == 2, "the example's journal URLs moved: update this test"
    text = text.replace(example_url, journal)
    path = dest / "cluster.toml"
    path.write_text(text)
    return str(path), ports


def up(path: str, node: str, tag: str) -> subprocess.Popen[str]:
    """`reprise up path --node node --detach`, from the checkout (the topology names examples.cluster.model)."""
    return subprocess.Popen([REPRISE, "up", path, "--node", node, "--detach", "--tag", tag],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=ROOT,
                            env={**os.environ, "PYTHONPATH": ROOT}, start_new_session=True)


def down(port: int) -> subprocess.Popen[str]:
    """`reprise down --port port`, started."""
    return subprocess.Popen([REPRISE, "down", "--port", str(port)], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)


def communicate_all(procs: dict[str, subprocess.Popen[str]], timeout: float) -> dict[str, str]:
    """Each process's output once all have exited; if one has not within `timeout` s, every one is killed and
    the failure shows what each printed (a leader waiting for members says nothing of why they did not join)."""
    deadline = time.monotonic() + timeout
    outs: dict[str, str] = {}
    try:
        for name, proc in procs.items():
            outs[name] = proc.communicate(timeout=max(0.1, deadline - time.monotonic()))[0]
    except subprocess.TimeoutExpired:
        for proc in procs.values():
            proc.kill()
        printed = {name: outs.get(name) or proc.communicate(timeout=10)[0] for name, proc in procs.items()}
        pytest.fail(f"not every `reprise up` exited within {timeout:g} s; they printed {printed}")
    return outs


def test_the_cluster_example_on_one_machine_without_namespaces(tmp_path, postgres_url) -> None:
    journal_url = f"{postgres_url}?schema=cl_{uuid.uuid4().hex[:8]}"
    path, ports = on_loopback(tmp_path, journal_url)
    tags = {name: f"{SESSION_TOKEN}-cluster-{name}-{next(_n)}-" for name in "abc"}
    started: list[subprocess.Popen[str]] = []
    outs: dict[str, str] = {}
    try:
        started.append(up(path, "a", tags["a"]))  # the leader creates cluster.secret, then waits for b and c
        wait_for(lambda: (tmp_path / "cluster.secret").exists() or started[0].poll() is not None, timeout=30)
        started += [up(path, name, tags[name]) for name in "bc"]
        outs = communicate_all(dict(zip("abc", started, strict=True)), timeout=90)
        for name, proc in zip("abc", started, strict=True):
            assert proc.returncode == 0, outs[name]
            assert f"cluster node '{name}'" in outs[name] and f"up on 127.0.0.1:{ports[name]}" in outs[name]
        assert "WARNING" not in outs["a"] and "one bridge per node (a, b, c)" in outs["a"], outs["a"]
        assert "never released discarded after 43200 s idle" in outs["a"], outs["a"]  # [spark] staged_ttl

        system = actors.connect(ports["a"])
        try:
            assert system.nodes() == {"a": "up", "b": "up", "c": "up"}
            hosts = system.status().hosts
            shards = sorted(h.node for p, h in hosts.items() if p.startswith(ACCOUNTS_PATH))
            assert shards == ["a", "a", "b", "b", "c", "c"]
            assert {f"/system/spark-bridges/{n}" for n in "abc"} <= hosts.keys()
            # The file's [spark] staged_ttl reached every bridge, the coordinator's too.
            assert {p: hosts[p].counters["staged_ttl_seconds"] for p in hosts if "spark-bridge" in p} == {
                p: 43200 for p in ["/system/spark-bridge", *(f"/system/spark-bridges/{n}" for n in "abc")]}
            # Each row twice, as a bridge redelivers one it has no confirmation for: applied once. (Delivery
            # ids start at 1.)
            rows = [Row(txid + 1, {"account": account, "txid": txid, "amount": amount})
                    for txid in range(ROWS) for account, amount in [deposit(txid, ACCOUNTS)]]
            for _ in range(2):
                system.tell_many((f"{ACCOUNTS_PATH}/a{row.data['account']}", row) for row in rows)
            result = wait_for(lambda: (r := check(system, ROWS, ACCOUNTS))["applied"] >= ROWS and r, timeout=20)
            assert result["exact"], result
            assert system.errors().count == 0
        finally:
            system.close()
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
        # Members first (both at once), then the leader, as an operator stops machines: a member's `down`
        # once removed the leader's run dir (its secret), so the leader's own `down` failed and left it running.
        stopping = {name: down(ports[name]) for name in "bc"}
        for member in stopping.values():
            member.wait(60)
        stopping["a"] = down(ports["a"])
        downs = {name: (stop.wait(60), stop.communicate()[0]) for name, stop in stopping.items()}
        left = {tag: kill_tagged(tag) for tag in tags.values()}
        run_dirs = re.findall(r"\(run dir (/tmp/reprise-\d+-\w+)\)", "".join(outs.values()))
        kept = [d for d in run_dirs if os.path.exists(d)]
        for run_dir in kept:  # (so that a failing run does not litter /tmp)
            shutil.rmtree(run_dir, ignore_errors=True)
        drop_schema(journal_url)  # (every node is down: none makes it again; each run left one)
    for name, (code, out) in downs.items():
        assert code == 0 and "shut down" in out, (name, out)
    assert not any(left.values()), f"processes left after `reprise down` (killed now): {left}"
    # Every node's temporary run dir (each holds a copy of the secret) is removed by its own `down`.
    assert len(run_dirs) == 3 and not kept, (run_dirs, kept)

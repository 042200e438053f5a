"""`reprise up/status/down/node` as a user runs them: the installed console script, real processes."""

from __future__ import annotations

import glob
import itertools
import json
import os
import signal
import subprocess
import sys
import time

import pytest

import actors
from actors.system import kill_tagged, tagged_pids
from tests.actors.sample import Ping, Pong
from tests.conftest import SESSION_TOKEN
from tests.ports import free_ports
from tests.waiting import wait_for

pytestmark = [pytest.mark.multiproc, pytest.mark.timeout(120)]

REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_n = itertools.count(1)

TOPOLOGY = """
[system]
journal = "sqlite://journal.db"

[[actor]]
path = "/user/echo"
class = "tests.actors.sample:Echo"

[[entities]]
path = "/user/echoes"
class = "tests.actors.sample.Echo"
passivate_after = 30
"""


@pytest.fixture
def tag():
    """A tag under the session token, so conftest's leak check also covers systems the CLI starts."""
    tag = f"{SESSION_TOKEN}-cli-{next(_n)}-"
    yield tag
    assert kill_tagged(tag) == [], f"the CLI left processes tagged {tag}"


@pytest.fixture
def topology(tmp_path) -> str:
    path = tmp_path / "topo.toml"
    path.write_text(TOPOLOGY)
    return str(path)


def tree_env(**extra: str) -> dict[str, str]:
    """The environment for the `reprise` script with this tree first on its path.

    The script imports the installed tree, which in a worktree (or another checkout) is not the one under test.
    """
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    return {**os.environ, **extra, "PYTHONPATH": path}


def reprise(*argv: str, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([REPRISE, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout, env=tree_env())


def test_the_reprise_helper_runs_the_tree_under_test(monkeypatch) -> None:
    # It ran the installed script without PYTHONPATH: in a worktree every test here checked the main tree's code.
    monkeypatch.delenv("PYTHONPATH", raising=False)
    done = reprise("--verbose", "journal", "ls", "foo://x")
    assert done.returncode == 2 and f'File "{ROOT}/actors/journal_commands.py"' in done.stderr, done.stderr


def test_up_detach_status_down(topology, tag, tmp_path) -> None:
    port = actors.free_port()
    up = reprise("up", topology, "--detach", "--port", str(port), "--tag", tag, "--run-dir", str(tmp_path / "run"))
    assert up.returncode == 0, up.stderr
    assert f"127.0.0.1:{port}" in up.stdout and "/user/echoes" in up.stdout
    assert tagged_pids(tag), "--detach must leave the system running"
    # A second `up` on its port is refused, pointing at the running system (it said "rerun with --verbose").
    second = reprise("up", topology, "--detach", "--port", str(port), "--tag", tag + "second-",
                     "--run-dir", str(tmp_path / "run2"))
    assert second.returncode == 1 and f"admin port {port} is already in use" in second.stderr, second.stderr
    assert f"reprise status --port {port}" in second.stderr and f"reprise down --port {port}" in second.stderr
    assert "--verbose" not in second.stderr

    client = actors.connect(port)
    try:
        for i in range(3):
            client.ask(f"/user/echoes/{i}", Ping(i))
    finally:
        client.close()
    status = reprise("status", "--port", str(port), "--json")
    assert status.returncode == 0, status.stderr
    doc = json.loads(status.stdout)
    assert doc["hosts"]["/user/echoes"]["alive"] == 3 and doc["hosts"]["/user/echo"]["alive"] == 1
    assert doc["unconfirmed"] == 0
    assert doc["hosts"]["/user/echo"]["state"] == "running" and not doc["hosts"]["/user/echo"]["entities"]
    assert doc["hosts"]["/user/echoes"]["entities"] and doc["hosts"]["/user/echoes"]["pid"] > 0
    assert doc["dead_letters"] == 0 and doc["journal"] == f"sqlite://{tmp_path}/journal.db"
    # No actor here persists: status created the (maybe misspelt) journal file by opening it to size it.
    assert doc["journal_bytes"] is None and not (tmp_path / "journal.db").exists()
    text = reprise("status", "--port", str(port))
    assert text.returncode == 0 and "/user/echoes  entities  running" in text.stdout
    assert "unconfirmed   0 deliveries" in text.stdout and "ALIVE" in text.stdout

    down = reprise("down", "--port", str(port))
    assert down.returncode == 0, down.stderr
    assert tagged_pids(tag) == []
    again = reprise("status", "--port", str(port))
    assert again.returncode == 1 and "hint:" in again.stderr


def test_up_in_the_foreground_shuts_down_on_sigterm(topology, tag, tmp_path) -> None:
    port = actors.free_port()
    proc = subprocess.Popen([REPRISE, "up", topology, "--port", str(port), "--tag", tag], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=tree_env())
    try:
        lines = []
        for line in proc.stdout:
            lines.append(line)
            if line.startswith("running"):
                break
        assert any(f":{port}" in line for line in lines), (lines, proc.stderr)
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        assert "stopped" in out and tagged_pids(tag) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_up_in_the_foreground_shuts_down_on_a_hangup(topology, tag, tmp_path) -> None:
    # A closed terminal or a dropped ssh session sends SIGHUP: `up` died of it and left the system running with
    # nobody to stop it.
    port = actors.free_port()
    proc = subprocess.Popen([REPRISE, "up", topology, "--port", str(port), "--tag", tag], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=tree_env())
    try:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith("running"):
                break
        assert tagged_pids(tag)
        proc.send_signal(signal.SIGHUP)
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "stopped" in out, err
        assert tagged_pids(tag) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_up_names_why_a_spawn_failed_in_its_one_line(tmp_path, tag) -> None:
    # The reason came after a traceback in the SpawnFailed message, and `up` showed "failed to start: [...]".
    path = tmp_path / "fails.toml"
    path.write_text('[[actor]]\npath = "/user/x"\nclass = "tests.actors.validation_sample:FailsToStart"\n')
    result = reprise("up", str(path), "--tag", tag, "--port", str(actors.free_port()))
    assert result.returncode == 1
    assert "/user/x failed to start: ValueError: cannot start: the database it needs is down" in result.stderr, \
        result.stderr
    assert tagged_pids(tag) == []


def test_bad_timeouts_are_usage_errors(tmp_path) -> None:
    for value in ("-1", "0", "nan", "inf", "soon"):
        result = reprise("down", "--port", "1", "--timeout", value)
        assert result.returncode == 2 and f"{value!r} is not a number of seconds above 0" in result.stderr, value


def test_bad_ports_are_usage_errors(topology) -> None:
    # `up --port 0` was taken as "no --port": the file's admin_port, or a random one.
    for argv in (["up", topology, "--port", "0"], ["up", topology, "--port", "70000"], ["status", "--port", "x"],
                 ["down", "--port", "-1"], ["node", "--leader", "127.0.0.1:1", "--port", "5", "--name", "m",
                                            "--metrics-port", "0"]):
        result = reprise(*argv)
        assert result.returncode == 2 and "is not a port number from 1 to 65535" in result.stderr, argv


def test_up_spawns_actors_and_entity_hosts_in_the_order_the_file_declares_them(tmp_path, tag) -> None:
    # Every [[actor]] went first whatever the order: an actor telling entities from pre_start made dead letters.
    path = tmp_path / "order.toml"
    path.write_text('[[entities]]\npath = "/user/echoes"\nclass = "tests.actors.sample:Echo"\n\n'
                    '[[actor]]\npath = "/user/greeter"\nclass = "tests.actors.validation_sample:Greeter"\n')
    port = actors.free_port()
    up = reprise("up", str(path), "--detach", "--port", str(port), "--tag", tag)
    assert up.returncode == 0, up.stderr
    assert up.stdout.index("/user/echoes") < up.stdout.index("/user/greeter"), up.stdout
    client = actors.connect(port)
    try:
        assert wait_for(lambda: client.ask("/user/greeter", "got") is not None, 20)
        assert client.ask("/user/greeter", "got") == Pong(1, "/user/echoes/1")
        assert client.status().dead_letters == 0
    finally:
        client.close()
    assert reprise("down", "--port", str(port)).returncode == 0


def test_a_bad_class_fails_before_starting_anything(tmp_path, tag) -> None:
    path = tmp_path / "bad.toml"
    path.write_text('[[actor]]\npath = "/user/x"\nclass = "tests.actors.sample:NoSuchActor"\n')
    result = reprise("up", str(path), "--tag", tag)
    assert result.returncode == 2
    assert "NoSuchActor" in result.stderr and "(hint: " in result.stderr
    assert tagged_pids(tag) == []


def test_a_misspelt_class_in_a_topology_is_refused_naming_the_class_meant(tmp_path, tag) -> None:
    # "module 'tests.actors.sample' has no 'Ecko'" named neither the class meant nor the ones there are.
    path = tmp_path / "bad.toml"
    path.write_text('[[actor]]\npath = "/user/x"\nclass = "tests.actors.sample:Ecko"\n')
    result = reprise("up", str(path), "--tag", tag)
    assert result.returncode == 2 and "module 'tests.actors.sample' has no 'Ecko' (did you mean 'Echo'? its " \
                                      "classes: " in result.stderr, result.stderr
    assert tagged_pids(tag) == []


@pytest.mark.parametrize("text", ["", "# nothing yet\n", '[system]\njournal = "sqlite://journal.db"\n'],
                         ids=["empty", "comments", "system-only"])
def test_up_of_a_file_that_declares_no_actors_is_refused_naming_the_file_and_starts_nothing(tmp_path, tag,
                                                                                            text) -> None:
    # It started a system with nothing in it ("reprise system up on ...", exit 0): a mistyped table name or a
    # file saved empty looked like success.
    path = tmp_path / "empty.toml"
    path.write_text(text)
    run_dir = tmp_path / "run"
    result = reprise("up", str(path), "--detach", "--port", str(actors.free_port()), "--tag", tag,
                     "--run-dir", str(run_dir))
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1 and f"{path} declares no actors" in result.stderr, result.stderr
    assert "[[actor]]" in result.stderr and "[[entities]]" in result.stderr and "echo.toml" in result.stderr
    assert tagged_pids(tag) == [] and not run_dir.exists() and not (tmp_path / "journal.db").exists()


@pytest.mark.parametrize("kind, root", [("actor", "system"), ("entities", "temp")])
def test_up_refuses_an_entry_under_a_reserved_root_naming_the_user_path_and_starts_nothing(tmp_path, tag, kind,
                                                                                          root) -> None:
    # It spawned an actor at /system/echo (or entities at /temp/echoes, where clients' replies are routed).
    path = tmp_path / "reserved.toml"
    path.write_text(f'[[actor]]\npath = "/user/ok"\nclass = "tests.actors.sample:Echo"\n\n'
                    f'[[{kind}]]\npath = "/{root}/echo"\nclass = "tests.actors.sample:Echo"\n')
    result = reprise("up", str(path), "--detach", "--port", str(actors.free_port()), "--tag", tag)
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    number = 2 if kind == "actor" else 1  # (after the [[actor]] at /user/ok)
    assert f"[[{kind}]] #{number}: path '/{root}/echo': /{root} is reserved" in result.stderr, result.stderr
    assert "spawn user actors below /user, e.g. /user/echo" in result.stderr and "(hint: " in result.stderr
    assert tagged_pids(tag) == []


def test_missing_topology_file_and_verbose_traceback(tmp_path) -> None:
    result = reprise("up", str(tmp_path / "missing.toml"))
    assert result.returncode == 2 and result.stderr.startswith("reprise: error: topology file")
    assert "Traceback" not in result.stderr
    verbose = reprise("status", "--port", str(actors.free_port()), "--verbose")
    assert verbose.returncode == 1 and "Traceback" in verbose.stderr and "(hint: " in verbose.stderr


def test_node_joins_a_leader_and_goes_down(make_system, tag, tmp_path) -> None:
    leader = make_system("multiproc")
    port = actors.free_port()
    node = reprise("node", "--leader", f"127.0.0.1:{leader.admin_port}", "--port", str(port), "--name", "n1",
                   "--detach", "--tag", tag, "--secret-file", os.path.join(leader.run_dir, "secret"))
    assert node.returncode == 0, node.stderr
    assert "'n1'" in node.stdout and tagged_pids(tag)
    leader.spawn("tests.actors.sample:Echo", "/user/on-n1", node="n1")
    wait_for(lambda: leader.status().hosts["/user/on-n1"].state == "running", 30)
    down = reprise("down", "--port", str(port))
    assert down.returncode == 0, down.stderr
    wait_for(lambda: not tagged_pids(tag), 30)


def test_a_node_whose_leader_is_not_up_fails_naming_the_leader_and_leaves_nothing(tag, tmp_path) -> None:
    # It failed with Thespian's "NoCompatibleSystemForActor ... actors.guardian.Guardian", naming neither the
    # leader nor the fix, and left its run dir behind.
    leader_port, port = free_ports(2)
    secret = tmp_path / "secret"
    secret.write_text("ab" * 32 + "\n")
    secret.chmod(0o600)
    before = set(glob.glob(f"/tmp/reprise-{port}-*"))
    node = reprise("node", "--leader", f"127.0.0.1:{leader_port}", "--port", str(port), "--name", "m",
                   "--detach", "--tag", tag, "--secret-file", str(secret))
    assert node.returncode == 1, node.stdout
    assert f"could not join its leader 127.0.0.1:{leader_port}: nothing listens there; start the leader first" \
        in node.stderr, node.stderr
    assert "hint: nothing was started" in node.stderr and "the member runs" not in node.stderr
    assert set(glob.glob(f"/tmp/reprise-{port}-*")) == before and tagged_pids(tag) == []


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def test_down_kills_what_a_sigkilled_admin_left(topology, tag, tmp_path) -> None:
    port = actors.free_port()
    up = reprise("up", topology, "--detach", "--port", str(port), "--tag", tag, "--run-dir", str(tmp_path / "run"))
    assert up.returncode == 0, up.stderr
    pids = set(tagged_pids(tag))
    admins = [p for p in pids if _parent(p) not in pids]
    assert len(admins) == 1 and len(pids) >= 4, pids
    rest = pids - set(admins)
    for pid in rest:  # frozen, they cannot notice the admin's death and exit by themselves: down must kill them
        os.kill(pid, signal.SIGSTOP)
    os.kill(admins[0], signal.SIGKILL)
    wait_for(lambda: admins[0] not in tagged_pids(tag), 10)
    down = reprise("down", "--port", str(port))
    assert down.returncode == 0, down.stderr
    assert f"the admin on 127.0.0.1:{port} does not answer" in down.stdout
    assert f"killed the {len(rest)} process(es)" in down.stdout
    assert all(str(pid) in down.stdout for pid in rest)
    assert tagged_pids(tag) == []
    again = reprise("down", "--port", str(port))
    assert again.returncode == 1 and "no actor system listens" in again.stderr and "hint:" in again.stderr


def test_status_shows_a_host_backing_off(tmp_path, tag) -> None:
    path = tmp_path / "backoff.toml"
    path.write_text('[[actor]]\npath = "/user/echo"\nclass = "tests.actors.sample:Echo"\nbackoff = [30, 30, 0]\n')
    port = actors.free_port()
    up = reprise("up", str(path), "--detach", "--port", str(port), "--tag", tag)
    assert up.returncode == 0, up.stderr
    try:
        before = json.loads(reprise("status", "--port", str(port), "--json").stdout)["hosts"]["/user/echo"]
        assert before["state"] == "running" and before["last_exit"] is None and before["next_attempt"] is None
        os.kill(before["pid"], signal.SIGKILL)

        def backing_off():
            doc = json.loads(reprise("status", "--port", str(port), "--json").stdout)["hosts"]["/user/echo"]
            return doc if doc["state"] == "backoff" else None

        doc = wait_for(backing_off, 20)
        assert doc["restarts"] == 1 and doc["last_exit"] == f"process exited unexpectedly (pid {before['pid']})"
        text = reprise("status", "--port", str(port)).stdout
        assert "/user/echo  actor     backoff" in text, text
        assert f"last exit: process exited unexpectedly (pid {before['pid']})" in text
        assert "next attempt in 2" in text or "next attempt in 1" in text, text  # ~30 s from now
    finally:
        assert reprise("down", "--port", str(port)).returncode == 0


@pytest.mark.parametrize("leader_end", ["sigkill", "down"])
def test_down_of_a_member_whose_leader_is_gone(topology, tag, tmp_path, leader_end) -> None:
    """`reprise down` on a member after its leader was SIGKILLed (or shut down) shuts the member down and says
    that its leader did not answer (it used to claim the member's admin did not answer, and killed it)."""
    leader_port, member_port = free_ports(2)
    leader_tag, member_tag = f"{tag}leader-", f"{tag}member-"
    up = reprise("up", topology, "--detach", "--port", str(leader_port), "--tag", leader_tag, "--run-dir",
                 str(tmp_path / "leader"))
    assert up.returncode == 0, up.stderr
    node = reprise("node", "--leader", f"127.0.0.1:{leader_port}", "--port", str(member_port), "--name", "m1",
                   "--detach", "--tag", member_tag, "--secret-file", str(tmp_path / "leader" / "secret"))
    assert node.returncode == 0, node.stderr
    if leader_end == "sigkill":
        assert kill_tagged(leader_tag)
    else:
        assert reprise("down", "--port", str(leader_port)).returncode == 0
    members = tagged_pids(member_tag)
    assert members  # the member outlives its leader (it waits for it to come back)

    status = reprise("status", "--port", str(member_port), timeout=60)
    assert status.returncode == 1
    assert (f"member node 'm1' on 127.0.0.1:{member_port}: its leader 127.0.0.1:{leader_port} does not answer"
            in status.stderr), status.stderr
    assert f"reprise down --port {member_port}" in status.stderr
    assert "start the leader again" in status.stderr and "start a system with" not in status.stderr  # (the hint)

    down = reprise("down", "--port", str(member_port), timeout=60)
    assert down.returncode == 0, down.stderr
    assert (f"member node 'm1' on 127.0.0.1:{member_port}: its leader 127.0.0.1:{leader_port} does not answer"
            in down.stderr), down.stderr
    assert "shutting this member down by itself" in down.stderr
    assert f"system on 127.0.0.1:{member_port} shut down" in down.stdout
    assert "left behind" not in down.stdout  # a clean shutdown: nothing had to be killed
    assert tagged_pids(member_tag) == [] and tagged_pids(leader_tag) == []


def test_up_without_a_port_picks_one_in_reprise_port_range_and_refuses_a_bad_range(topology, tag, tmp_path) -> None:
    from tests.actors.test_system import BAD_PORT_RANGES, five_ports_of_this_worker

    low = five_ports_of_this_worker()
    env = tree_env(REPRISE_PORT_RANGE=f"{low}-{low + 4}")
    up = subprocess.run([REPRISE, "up", topology, "--detach", "--tag", tag, "--run-dir", str(tmp_path / "run")],
                        cwd=ROOT, capture_output=True, text=True, timeout=90, env=env)
    assert up.returncode == 0, up.stderr
    ports = [p for p in range(low, low + 5) if f"127.0.0.1:{p}" in up.stdout]
    try:
        assert len(ports) == 1, f"no port of {low}-{low + 4} in: {up.stdout}"
        assert tagged_pids(tag)
    finally:
        for port in ports:
            assert reprise("down", "--port", str(port)).returncode == 0
    for bad in BAD_PORT_RANGES:
        refused = subprocess.run([REPRISE, "up", topology, "--detach", "--tag", tag], cwd=ROOT, capture_output=True,
                                 text=True, timeout=60, env=tree_env(REPRISE_PORT_RANGE=bad))
        assert refused.returncode == 2, refused.stderr
        assert "REPRISE_PORT_RANGE=" in refused.stderr and "e.g. REPRISE_PORT_RANGE=20000-20999" in refused.stderr
        assert len(refused.stderr.strip().splitlines()) == 1, refused.stderr
    assert not tagged_pids(tag), "a refused up left processes"


def test_two_systems_on_one_port_of_two_addresses_are_each_reached_only_at_their_own(tmp_path, tag) -> None:
    # The CLI found a local system by its port alone: `down --port N` (host 127.0.0.1) SIGKILLed a healthy system
    # bound to 127.0.0.5 as "left behind", `down --host <typo>` killed the one on 127.0.0.1, and `status --host
    # 127.0.0.5` took the other system's secret.
    port = actors.free_port()
    tags = {"127.0.0.1": f"{tag}a", "127.0.0.5": f"{tag}b"}
    try:
        for bind, its_tag in tags.items():
            topology = tmp_path / f"{bind}.toml"
            topology.write_text(f'[system]\nbind = "{bind}"\n\n[[actor]]\npath = "/user/echo"\n'
                                'class = "tests.actors.sample:Echo"\n')
            up = reprise("up", str(topology), "--detach", "--port", str(port), "--tag", its_tag,
                         "--run-dir", str(tmp_path / bind))
            assert up.returncode == 0, up.stderr
        assert f"stop it with: reprise down --port {port} --host 127.0.0.5" in up.stdout
        for bind in tags:
            status = reprise("status", "--port", str(port), "--host", bind, "--json")
            assert status.returncode == 0, status.stderr
            assert json.loads(status.stdout)["run_dir"] == str(tmp_path / bind)
        typo = reprise("down", "--port", str(port), "--host", "127.0.0.9")
        assert typo.returncode == 1 and "no actor system listens on 127.0.0.9" in typo.stderr
        assert all(tagged_pids(t) for t in tags.values()), "a down of another address killed nothing"
        down = reprise("down", "--port", str(port))
        assert down.returncode == 0 and f"system on 127.0.0.1:{port} shut down" in down.stdout, down.stderr
        assert tagged_pids(tags["127.0.0.1"]) == [] and tagged_pids(tags["127.0.0.5"])
        again = reprise("down", "--port", str(port))
        assert again.returncode == 1 and "listens on 127.0.0.5" in again.stderr and "--host 127.0.0.5" in again.stderr
        assert tagged_pids(tags["127.0.0.5"]), "still running: it was never asked to stop"
        client = actors.connect(port, host="127.0.0.5")
        try:
            assert client.ask("/user/echo", Ping(7), timeout=10) == Pong(7, "/user/echo")
        finally:
            client.close()
        down = reprise("down", "--port", str(port), "--host", "127.0.0.5")
        assert down.returncode == 0 and f"system on 127.0.0.5:{port} shut down" in down.stdout, down.stderr
        assert tagged_pids(tags["127.0.0.5"]) == []
    finally:
        kill_tagged(tag, prefix=True)


def test_a_killed_guardian_is_named_by_status_and_down_kills_what_is_left(topology, tag, tmp_path) -> None:
    # status and down both failed with "GetStatus to the guardian was not sent ... check `reprise status`", down
    # killed nothing, and a new `up` on the port was refused while the orphaned processes held it.
    port = actors.free_port()
    up = reprise("up", topology, "--detach", "--port", str(port), "--tag", tag, "--run-dir", str(tmp_path / "run"))
    assert up.returncode == 0, up.stderr
    status = json.loads(reprise("status", "--port", str(port), "--json").stdout)
    guardian = _parent(status["hosts"]["/user/echo"]["pid"])
    os.kill(guardian, signal.SIGKILL)
    wait_for(lambda: guardian not in tagged_pids(tag), 10)
    broken = reprise("status", "--port", str(port))
    assert broken.returncode == 1 and "the guardian's process is gone" in broken.stderr, broken.stderr
    assert f"reprise down --port {port}" in broken.stderr
    down = reprise("down", "--port", str(port))
    assert down.returncode == 0 and f"the admin on 127.0.0.1:{port} cannot stop the system" in down.stdout, down.stderr
    assert tagged_pids(tag) == []
    up = reprise("up", topology, "--detach", "--port", str(port), "--tag", tag, "--run-dir", str(tmp_path / "run2"))
    assert up.returncode == 0, up.stderr
    assert reprise("down", "--port", str(port)).returncode == 0


@pytest.mark.timeout(120)
def test_down_timeout_bounds_the_wait_for_a_frozen_admin(make_system) -> None:
    # `reprise down --timeout 2` against an admin that accepts connections but does not answer (SIGSTOP, a
    # debugger) waited connect's own 30 s, then said "try again, or with a longer timeout".
    system = make_system("multiproc")
    pids = set(tagged_pids(system.tag))
    admin = next(p for p in pids if _parent(p) not in pids)
    os.kill(admin, signal.SIGSTOP)
    try:
        started = time.monotonic()
        down = subprocess.run([sys.executable, "-m", "actors.cli", "down", "--port", str(system.admin_port),
                               "--timeout", "2"], cwd=ROOT, capture_output=True, text=True, timeout=90)
        took = time.monotonic() - started
    finally:
        if admin in tagged_pids(system.tag):
            os.kill(admin, signal.SIGCONT)
    assert down.returncode == 0, down.stderr
    assert "does not answer" in down.stdout and "killed the" in down.stdout, down.stdout
    assert took < 15, f"down --timeout 2 took {took:.0f} s"  # (~2 s to answer, then the kill; 30 s before)
    assert wait_for(lambda: tagged_pids(system.tag) == [], 10)

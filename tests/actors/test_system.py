"""System lifecycle, spawning, paths across processes, attach/refuse, message checks."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import time

import pytest

import actors
from actors import (
    AskTimeout,
    ConfigError,
    MessageUndelivered,
    PathTaken,
    SpawnFailed,
    SystemNotRunning,
    UnpicklableMessage,
)
from actors.messages import GetDirectory
from actors.system import free_ports, tagged_pids
from tests.actors.refusal import start_refused
from tests.actors.sample import Echo, Holder, Mutable, Ping, Pong, Sleeper
from tests.conftest import SESSION_TOKEN
from tests.thespian_retry import retry_first_send, stop_retrying
from tests.waiting import dead_letters_reach, wait_for


def test_ask_reaches_top_level_actor_and_entity(system):
    system.spawn(Echo, "/user/echo")
    system.spawn(Echo, "/user/echoes", entities=True)
    assert system.ask("/user/echo", Ping(1)) == Pong(1, "/user/echo")
    assert system.ask("/user/echoes/42", Ping(2)) == Pong(2, "/user/echoes/42")


def test_actor_to_actor_by_path_across_hosts(system):
    system.spawn(Echo, "/user/a")
    system.spawn(Echo, "/user/b", entities=True)
    probe = system.probe()
    # /user/a forwards to an entity of the other host, keeping the probe as sender.
    system.tell("/user/a", ("fwd", "/user/b/7", Ping(5)), sender=probe.path)
    assert probe.receive() == Pong(5, "/user/b/7")


def test_hosts_run_in_their_own_processes_on_multiproc(make_system):
    import os

    system = make_system("multiproc")
    system.spawn(Echo, "/user/a")
    system.spawn(Echo, "/user/b", entities=True)
    hosts = system.status().hosts
    pids = {hosts["/user/a"].pid, hosts["/user/b"].pid}
    assert len(pids) == 2 and os.getpid() not in pids


def test_spawning_an_overlapping_path_is_refused(system):
    system.spawn(Echo, "/user/accounts", entities=True)
    with pytest.raises(PathTaken, match="already served by /user/accounts"):
        system.spawn(Echo, "/user/accounts/vip")
    with pytest.raises(PathTaken):
        system.spawn(Echo, "/user/accounts")


def test_actor_failing_to_start_is_reported(system):
    with pytest.raises(SpawnFailed, match="(?s)failed to start.*NeedsArgument.__init__"):
        system.spawn("tests.actors.validation_sample:NeedsArgument", "/user/bad")  # (by name: made in the host)
    # A class given as itself is checked against its constructor before anything starts.
    with pytest.raises(actors.ConfigError, match="Echo cannot be made with these args/kwargs: too many positional "
                                                 "arguments; its parameters are none"):
        system.spawn(Echo, "/user/bad", args=("unexpected",))


@pytest.mark.parametrize(("factory", "reason"), [
    ("tests.actors.no_such_module:Echo", "no module named 'tests.actors.no_such_module' in the host process"),
    ("tests.actors.validation_sample:NoSuchClass", "tests.actors.validation_sample has no attribute 'NoSuchClass' "
                                                   "(its classes: "),
    # (it listed the classes only: the one meant is named first)
    ("tests.actors.validation_sample:Taly", "tests.actors.validation_sample has no attribute 'Taly' (did you mean "
                                            "'Tally'? its classes: "),
])
def test_a_class_name_the_host_cannot_import_fails_in_one_line_saying_what_is_missing(system, factory, reason):
    # It failed with the host's whole traceback through importlib, the missing name on its last line.
    with pytest.raises(SpawnFailed) as failed:
        system.spawn(factory, "/user/bad")
    message = str(failed.value)
    assert f"/user/bad failed to start: cannot import {factory!r}: {reason}" in message, message
    assert "Traceback" not in message, message
    system.spawn("tests.actors.sample:Echo", "/user/bad")  # the path is free again
    assert system.ask("/user/bad", Ping(7), timeout=30) == Pong(7, "/user/bad")


def test_wildcard_destination_is_rejected(system):
    with pytest.raises(actors.InvalidPath, match="wildcard"):
        system.tell("/user/*", "x")


def test_stop_removes_the_path(system):
    system.spawn(Echo, "/user/echo")
    system.stop("/user/echo")
    system.tell("/user/echo", "late")
    letters = dead_letters_reach(system, 1)
    assert letters.count == 1 and letters.recent[0].target == "/user/echo"
    system.spawn(Echo, "/user/echo")  # the path is free again
    assert system.ask("/user/echo", Ping(3)) == Pong(3, "/user/echo")


def test_ask_times_out_with_a_clear_error(system):
    system.spawn(Echo, "/user/echo")
    with pytest.raises(AskTimeout, match="no reply from /user/echo"):
        system.ask("/user/echo", "no-reply-for-this", timeout=0.3)


@pytest.mark.timeout(90)
def test_an_ask_to_a_host_busy_in_a_long_message_times_out_within_its_own_timeout(make_system, tmp_path):
    # (multiproc only: on the local base the actor runs inside the caller's tell)
    # The send alone waited up to 60 s for the busy host to take the message, and AskTimeout came only then,
    # saying "within 3 s".
    system = make_system("multiproc")
    system.spawn(Sleeper, "/user/sleeper")
    started, woke = tmp_path / "started", tmp_path / "woke"
    system.tell("/user/sleeper", ("sleep", 10, str(started), str(woke)))
    wait_for(started.exists, timeout=30)
    with pytest.raises(AskTimeout, match="no reply from /user/sleeper within 3 s"):
        system.ask("/user/sleeper", "ping", timeout=3)
    assert not woke.exists(), "the ask ended before the host's long message did"


@pytest.mark.timeout(90)
def test_an_ask_in_flight_when_the_system_is_shut_down_elsewhere_fails_within_seconds(make_system):
    # (multiproc only: what shuts a system down under an attached client is another process's `reprise down`)
    # The ask waited out its whole timeout after the system it asked was gone.
    system = make_system("multiproc")
    system.spawn(Echo, "/user/echo")
    client = actors.connect(system.admin_port)
    try:
        threading.Timer(1.0, actors.shutdown, args=(system.admin_port,)).start()
        started = time.monotonic()
        with pytest.raises(SystemNotRunning, match=f"the actor system on port {system.admin_port} stopped while "
                                                   "this client waited for a reply"):
            client.ask("/user/echo", "no-reply-for-this", timeout=60)
        assert time.monotonic() - started < 15
    finally:
        client.close()


def test_an_ask_whose_message_becomes_a_dead_letter_fails_at_once_saying_why(system):
    # It waited out its timeout although no reply could come.
    started = time.monotonic()
    with pytest.raises(MessageUndelivered, match="the message to /user/nobody was not delivered \\(a dead "
                                                 "letter\\): no actor serves /user/nobody") as caught:
        system.ask("/user/nobody", Ping(1), timeout=30)
    assert time.monotonic() - started < 10
    assert isinstance(caught.value, AskTimeout)  # (code handling a missing reply handles it too)
    assert (caught.value.path, caught.value.reason) == ("/user/nobody", "no actor serves /user/nobody")
    assert system.dead_letters().count == 1


@pytest.mark.parametrize("message, fragment", [
    (lambda: None, "cannot be pickled"),
    (Mutable(1), "frozen=True"),
])
def test_unpicklable_or_mutable_message_fails_at_tell(system, message, fragment):
    system.spawn(Echo, "/user/echo")
    with pytest.raises(UnpicklableMessage, match=fragment):
        system.tell("/user/echo", message)


def test_unpicklable_content_inside_a_frozen_message_fails_at_tell(system):
    system.spawn(Echo, "/user/echo")
    with pytest.raises(UnpicklableMessage, match="cannot be pickled"):
        system.tell("/user/echo", Holder(lambda: None))


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range():
    # Below it, no outgoing connection's local port and no other process's port-0 bind takes one before use.
    low = int(open("/proc/sys/net/ipv4/ip_local_port_range").read().split()[0])
    ports = free_ports(20)
    assert len(set(ports)) == 20 and all(1024 < p < low for p in ports), ports
    for port in ports:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_connect_refuses_a_port_nobody_listens_on():
    port = actors.free_port()
    with pytest.raises(SystemNotRunning, match=f"no actor system listens on 127.0.0.1:{port}"):
        actors.connect(port)


def test_connected_client_cannot_shut_down_the_shared_system(make_system):
    owner = make_system("multiproc")
    owner.spawn(Echo, "/user/echo")
    client = actors.connect(owner.admin_port)
    try:
        assert client.ask("/user/echo", Ping(9)) == Pong(9, "/user/echo")
        with pytest.raises(actors.RepriseError, match="does not own"):
            client.shutdown()
    finally:
        client.close()
    # Still running for its owner after the client detached.
    assert owner.ask("/user/echo", Ping(10)) == Pong(10, "/user/echo")


def test_shutdown_kills_only_the_system_s_processes_not_others_that_mention_its_tag(make_system):
    import subprocess
    import sys

    owner = make_system("multiproc")
    owner.spawn(Echo, "/user/echo")
    # Bystanders: a wrapper with the system's `--tag` (as `timeout ... --tag T` has), one naming the tag inside
    # a longer argument (a `tail -f T.log`), and a system tagged with a longer tag that starts with this one.
    sleeper = [sys.executable, "-c", "import time; time.sleep(60)"]
    bystanders = [subprocess.Popen([*sleeper, "--tag", owner.tag]),
                  subprocess.Popen([*sleeper, f"/tmp/{owner.tag}.log"])]
    longer = make_system("multiproc", tag=f"{owner.tag}x")
    longer.spawn(Echo, "/user/echo")
    try:
        system_pids = tagged_pids(owner.tag)
        assert system_pids and not {p.pid for p in bystanders} & set(system_pids)
        assert not set(tagged_pids(longer.tag)) & set(system_pids)
        assert set(tagged_pids(owner.tag, prefix=True)) >= set(system_pids) | set(tagged_pids(longer.tag))

        actors.shutdown(owner.admin_port)

        assert tagged_pids(owner.tag) == []
        assert all(p.poll() is None for p in bystanders), "shutdown killed a process that only mentions the tag"
        assert longer.ask("/user/echo", Ping(3)) == Pong(3, "/user/echo")  # the other system runs on
    finally:
        for p in bystanders:
            p.kill()
            p.wait()


def test_start_refused_shuts_down_a_system_that_started_instead_of_refusing(base):
    # A bare actors.start() inside pytest.raises left the system running when the refusal under test was missing.
    tag = f"{SESSION_TOKEN}-not-refused-"
    with pytest.raises(pytest.fail.Exception, match=r"started a system \(now shut down\) instead of refusing"):
        start_refused(base, **({} if base == "local" else {"tag": tag}))
    assert tagged_pids(tag) == []


def test_a_tag_must_be_a_non_empty_string_without_spaces():
    for bad in ("", " ", "a b", 7):
        with pytest.raises(actors.ConfigError, match="tag"):
            start_refused("multiproc", tag=bad)


def test_shutdown_by_port_stops_every_process_of_the_system(make_system):
    owner = make_system("multiproc")
    owner.spawn(Echo, "/user/echo")
    assert tagged_pids(owner.tag)

    actors.shutdown(owner.admin_port)

    assert tagged_pids(owner.tag) == []
    with pytest.raises(actors.SystemNotRunning):
        actors.connect(owner.admin_port, timeout=5)


def test_shutdown_ends_every_process_without_killing_one(make_system, caplog):
    """The guardian sent route updates to hosts already gone, and Thespian kept it alive 7 s retrying them."""
    owner = make_system("multiproc")
    owner.spawn(Echo, "/user/echo")
    owner.spawn(Echo, "/user/echoes", entities=True, shards=3)
    for i in range(6):
        assert owner.ask(f"/user/echoes/{i}", Ping(i)) == Pong(i, f"/user/echoes/{i}")
    tag = owner.tag

    owner.shutdown(timeout=4.0)  # what lingers past this is killed, with a warning

    assert tagged_pids(tag) == []
    assert not [r for r in caplog.records if "left processes" in r.getMessage()]


def test_multiproc_refuses_an_admin_port_in_use(make_system):
    owner = make_system("multiproc")
    with pytest.raises(SpawnFailed, match="already in use"):
        start_refused("multiproc", admin_port=owner.admin_port)


def test_an_admin_port_another_program_bound_without_listening_is_refused_naming_it(tmp_path):
    # Thespian's own error was a traceback ending "not a valid or useable ActorSystem Admin", and the run dir stayed.
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        port = holder.getsockname()[1]
        before = set(os.listdir(tempfile.gettempdir()))
        with pytest.raises(SpawnFailed, match=rf"admin port {port} is bound by another program on 127.0.0.1 \(it "
                                              r"does not listen, so it is no actor system\); choose another port"):
            start_refused("multiproc", admin_port=port)
        assert not [d for d in set(os.listdir(tempfile.gettempdir())) - before if d.startswith(f"reprise-{port}-")]


def test_a_run_dir_under_a_file_is_refused_naming_it(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(ConfigError, match=r"run_dir .*/file/run cannot be a directory: it or a directory above it "
                                          "is a file"):
        start_refused("multiproc", run_dir=str(tmp_path / "file" / "run"))


def test_unknown_base_is_rejected():
    with pytest.raises(ValueError, match="multiprocQueueBase is not offered"):
        start_refused("multiprocQueueBase")


@pytest.mark.timeout(60)
def test_a_request_to_the_guardian_whose_send_meets_a_thespian_retry_is_still_answered_within_its_timeout(
        make_system):
    # Thespian's own ask waits 35 s to retry such a send, past a request's timeout: a GetDirectory timed out so
    # in CI under load. A request retries after SEND_RETRY instead.
    system = make_system("multiproc")
    held = retry_first_send(GetDirectory)
    try:
        assert "/system/guardian" in system.directory(timeout=10).routes
        assert len(held) == 1, "the request did not meet the retry"
    finally:
        stop_retrying()


BAD_PORT_RANGES = ("20000", "20000-19999", "80-90", "a-b", "20000-70000")


def five_ports_of_this_worker() -> int:
    """The first of five ports in this worker's own slice (tests/conftest.py): no other worker picks them."""
    return int(os.environ.get("REPRISE_PORT_RANGE", "20000-20999").partition("-")[0]) + 100


def test_a_port_range_in_the_environment_bounds_the_ports_reprise_picks(make_system, monkeypatch):
    low = five_ports_of_this_worker()
    monkeypatch.setenv("REPRISE_PORT_RANGE", f"{low}-{low + 4}")
    assert sorted(free_ports(5)) == list(range(low, low + 5))
    assert low <= make_system("multiproc").admin_port <= low + 4
    for bad in BAD_PORT_RANGES:
        monkeypatch.setenv("REPRISE_PORT_RANGE", bad)
        with pytest.raises(actors.ConfigError, match=r"REPRISE_PORT_RANGE=.*expected LOW-HIGH, two ports from 1024"):
            make_system("multiproc")

"""Nothing fails silently in delivery: unreadable messages, failed sends, errors inside actors."""

from __future__ import annotations

import contextlib
import importlib
import json
import logging
import os
import pickle
import re
import signal
import socket
import sys
import threading
import time
import uuid
from typing import Any

import pytest

import actors
from actors import ActorError, ActorFailed, RepriseError
from actors.cli import main as cli_main
from actors.error_log import RECENT_ERRORS
from actors.handover import HANDOVER_WAIT
from actors.messages import Barrier, Batch
from actors.transport import pack, unpack
from tests.actors.batch_sample import Batched
from tests.actors.error_actors import Keeper, SlowBounceStreamer, Stream, Streamer
from tests.actors.sample import Echo, Gated, Ping, Pong, Recorder, RecorderTable, Seq
from tests.actors.scatter_sample import SlowToStart
from tests.actors.test_security import listening_addresses
from tests.waiting import dead_letters_reach, wait_for

CLIENT_ONLY = '''
from dataclasses import dataclass


@dataclass(frozen=True)
class OnlyOnClient:
    n: int
'''


def client_only_class(tmp_path):
    """A message class importable in this process only (its module is on no actor process's path)."""
    name = f"client_only_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(CLIENT_ONLY)
    sys.path.insert(0, str(tmp_path))
    try:
        return importlib.import_module(name).OnlyOnClient
    finally:
        sys.path.remove(str(tmp_path))


def test_unpack_dead_letters_what_cannot_be_imported_and_returns_the_rest(tmp_path):
    cls = client_only_class(tmp_path)
    entries = [(None, "/user/b", 1), ("/user/a", "/user/b", cls(2)), (None, "/user/b", (3, cls))]
    entries.append((None, "/user/b", 4))
    batch = Batch("/temp/x", pickle.dumps(entries, pickle.HIGHEST_PROTOCOL))
    del sys.modules[cls.__module__]  # now this process is like one that never had the module
    bad = []
    good = unpack(batch, lambda entry, why: bad.append((entry, why)))
    assert good == [(None, "/user/b", 1), (None, "/user/b", 4)]
    assert [(e[0], e[1]) for e, _ in bad] == [("/user/a", "/user/b"), (None, "/user/b")]
    assert all(f"{cls.__module__}.OnlyOnClient" in why and "cannot be unpickled" in why for _, why in bad)
    assert "OnlyOnClient" in bad[0][0][2]


@pytest.mark.timeout(120)
def test_a_message_the_host_cannot_import_is_a_dead_letter_and_the_rest_of_its_batch_arrives(make_system, tmp_path):
    system = make_system("multiproc")  # one process cannot lack a module it has: multiproc only
    system.spawn(Echo, "/user/b")
    probe = system.probe()
    cls = client_only_class(tmp_path)
    system.tell_many([("/user/b", ("fwd", probe.path, 1)), ("/user/b", cls(2)), ("/user/b", ("fwd", probe.path, 3)),
                      ("/user/nobody", cls(4))])
    assert probe.receive_many(2, timeout=10) == [1, 3]
    letters = dead_letters_reach(system, 2).recent
    by_target = {letter.target: letter for letter in letters}
    assert set(by_target) == {"/user/b", "/user/nobody"}
    for letter in by_target.values():
        assert "cannot be unpickled by the receiving process" in letter.reason
        assert f"{cls.__module__}.OnlyOnClient" in letter.reason and "OnlyOnClient" in letter.message


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except OSError:
        return True


@pytest.mark.timeout(120)
def test_tell_after_a_host_sigkill_returns_or_raises_not_sent_and_raised_means_not_delivered(make_system):
    owner = make_system("multiproc")
    owner.spawn(Echo, "/user/echo")
    pid = owner.ask("/user/echo", "where")[1]
    # A second client that knows the route but has no open connection to the host: its sends to the
    # dead process are refused at once (Thespian's DeadTarget), which is what clients meet after a kill.
    client = actors.connect(owner.admin_port)
    try:
        probe = client.probe()
        client.tell("/user/nobody", "fetch the directory")
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _gone(pid), 10)
        raised, foreign = [], []
        for i in range(200):
            try:
                client.tell("/user/echo", ("fwd", probe.path, Seq("client", i)))
            except RepriseError:
                raised.append(i)
            except Exception as exc:  # a Thespian type, say: what callers cannot know how to handle
                foreign.append(f"{i}: {type(exc).__module__}.{type(exc).__qualname__}: {exc}")
        assert foreign == []
        delivered = set()
        with contextlib.suppress(RepriseError):
            while True:
                delivered.add(probe.receive(timeout=3).i)
        assert not delivered & set(raised), "a tell that raised was delivered anyway"
        # Sent after the process was gone: the guardian held them until the host was back.
        assert delivered == set(range(200)) - set(raised)
    finally:
        client.close()


@pytest.mark.timeout(180)
def test_the_first_tell_after_a_host_sigkill_does_not_block_and_is_held_for_the_new_host(make_system):
    system = make_system("multiproc")
    probe = system.probe()
    # Whether the client notices the closed connection before it sends is a race: try three hosts.
    for n in range(3):
        path = f"/user/echo-{n}"
        system.spawn(Echo, path)
        pid = system.ask(path, "where")[1]  # this client now has an open connection to the host
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda pid=pid: _gone(pid), 10)
        started = time.monotonic()
        system.tell(path, ("fwd", probe.path, Seq(path, 0)))
        # Thespian retried the dead connection after 35 s; the tell must not stall the caller that long.
        assert time.monotonic() - started < 5, f"the first tell to {path} after the kill blocked"
        assert probe.receive(timeout=30) == Seq(path, 0)


class _ForeignProcess:
    """A process of another actor system that binds a dead host's port as soon as it is free, and refuses every
    frame (not signed with its secret) with Thespian's data-error ACK, as Reprise's authenticated transport does."""

    def __init__(self, port: int) -> None:
        self.port = port
        self.bound = threading.Event()
        self.refused = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)

    def __enter__(self) -> _ForeignProcess:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)

    def _serve(self) -> None:
        from thespian.system.transport.streamBuffer import ackDataErrMsg

        with socket.socket() as foreign:
            foreign.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # as Thespian binds its ports
            while not self._stop.is_set():
                try:
                    foreign.bind(("127.0.0.1", self.port))
                    break
                except OSError:  # a peer's half-closed connection to the dead process still holds it
                    time.sleep(0.001)
            else:
                return  # stopped before the port was free: `bound` stays unset
            foreign.listen(8)
            foreign.settimeout(0.05)
            self.bound.set()
            while not self._stop.is_set():
                try:
                    conn, _ = foreign.accept()
                except OSError:
                    continue
                with conn:
                    conn.settimeout(5)
                    if conn.recv(65536):
                        # Counted before the answer: the sender may act on it and read `refused` at once.
                        self.refused += 1
                        conn.sendall(ackDataErrMsg)


@pytest.mark.timeout(120)
def test_a_tell_to_a_dead_host_whose_port_another_system_took_is_held_for_the_new_host(make_system):
    """Seen in CI with two suites side by side: a host was SIGKILLed and another system's process bound its
    port before the client's next tell. That process drops the frame unread, so the message is still the
    dead host's to deliver. (The port is free once the client's send resets the dead host's half-closed
    connection; Thespian reconnects SEND_RETRY later, and the other process binds it in between.)"""
    system = make_system("multiproc")
    probe = system.probe()
    system.spawn(Echo, "/user/echo")
    for attempt in range(3):
        pid = system.ask("/user/echo", "where")[1]
        (port,) = {port for _, port in listening_addresses([pid])}
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda pid=pid: _gone(pid), 10)
        with _ForeignProcess(port) as foreign:
            system.tell("/user/echo", ("fwd", probe.path, Seq("echo", attempt)))
            assert probe.receive(timeout=30) == Seq("echo", attempt)
            refused = foreign.refused
        assert system.ask("/user/echo", "where")[1] != pid
        if refused:
            break
        # The client reconnected before the foreign process could bind the freed port (a loaded machine): the
        # message went the dead-target way, which is tested elsewhere. Try again for the case under test.
    else:
        pytest.fail("in 3 tries the foreign process never bound the dead host's port before the client's retry")


@pytest.mark.timeout(120)
def test_a_batch_a_host_sends_to_a_dead_host_whose_port_another_system_took_is_held_for_the_new_host(make_system):
    """The same inside the system: a host's batch refused that way is rerouted through the guardian."""
    system = make_system("multiproc")
    probe = system.probe()
    system.spawn(Echo, "/user/a")
    system.spawn(Echo, "/user/b")
    system.tell("/user/a", ("fwd", "/user/b", ("fwd", probe.path, Seq("b", 0))))  # a now talks to b directly
    assert probe.receive(timeout=30) == Seq("b", 0)
    probe.tell("/user/a", ("fwd", "/user/b", "where"))
    pid = probe.receive(timeout=30)[1]
    (port,) = {port for _, port in listening_addresses([pid])}
    guardian = system.status().guardian_pid
    os.kill(guardian, signal.SIGSTOP)  # so that a sends before the guardian publishes b's new route
    try:
        os.kill(pid, signal.SIGKILL)
        wait_for(lambda: _gone(pid), 10)
        with _ForeignProcess(port) as foreign:
            wait_for(foreign.bound.is_set, 10)  # b's half-closed connections were a's and are gone
            system.tell("/user/a", ("fwd", "/user/b", ("fwd", probe.path, Seq("b", 1))))
            wait_for(lambda: foreign.refused, 20)
            os.kill(guardian, signal.SIGCONT)
            assert probe.receive(timeout=30) == Seq("b", 1)
    finally:
        os.kill(guardian, signal.SIGCONT)


# ---- errors inside actors reach someone -----------------------------------------------------------

@pytest.mark.timeout(60)
def test_an_ask_whose_handler_raises_fails_at_once_with_the_remote_error(system):
    system.spawn(Echo, "/user/echo")
    started = time.monotonic()
    with pytest.raises(ActorFailed) as failed:
        system.ask("/user/echo", "boom", timeout=30)
    assert time.monotonic() - started < 10  # not the ask's timeout
    assert (failed.value.path, failed.value.remote_type, failed.value.remote_message) == \
        ("/user/echo", "RuntimeError", "boom requested")
    assert "RuntimeError: boom requested" in str(failed.value)
    assert system.ask("/user/echo", Ping(1)) == Pong(1, "/user/echo")  # restarted as before


@pytest.mark.timeout(60)
def test_errors_inside_actors_are_recorded_published_and_in_status(system):
    system.spawn(Echo, "/user/echoes", entities=True)
    probe = system.probe()
    system.subscribe_errors(probe.path)
    before = time.time()
    system.tell("/user/echoes/7", "boom")  # a tell: nobody waits, yet the error is on record
    error = probe.receive(timeout=10)
    assert isinstance(error, ActorError)
    assert error.path == "/user/echoes/7" and error.host == "/user/echoes"
    assert error.reason == "failed on str: RuntimeError: boom requested"
    assert before - 1 <= error.time <= time.time() + 1
    errors = system.errors()
    assert errors.count == 1 and errors.recent == (error,)
    assert system.status().errors == (error,)


@pytest.mark.timeout(60)
def test_the_error_log_is_bounded(system):
    system.spawn(Echo, "/user/echoes", entities=True, max_restarts=1000)
    total = RECENT_ERRORS + 20
    for i in range(total):
        system.tell(f"/user/echoes/{i}", "boom")
    errors = wait_for(lambda: (lambda e: e if e.count >= total else None)(system.errors()), 30)
    assert errors.count == total and len(errors.recent) == RECENT_ERRORS
    # (past ERROR_BURST a second the host reports a count: the last entries may be such a count)
    assert [e for e in errors.recent if not e.repeats][-1].path.startswith("/user/echoes/")


@pytest.mark.timeout(60)
def test_reprise_status_lists_recent_errors(make_system, capsys):
    system = make_system("multiproc")
    system.spawn(Echo, "/user/echo")
    with pytest.raises(ActorFailed):
        system.ask("/user/echo", "boom")
    wait_for(lambda: system.errors().count == 1)
    assert cli_main(["status", "--port", str(system.admin_port)]) == 0
    out = capsys.readouterr().out
    assert "errors        1" in out
    line = next(line for line in out.splitlines() if "boom requested" in line)
    assert "/user/echo" in line and "RuntimeError" in line and re.search(r"\d\d:\d\d:\d\d", line)
    assert system.run_dir in out
    assert cli_main(["status", "--port", str(system.admin_port), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [e["path"] for e in data["errors"]] == ["/user/echo"] and data["run_dir"] == system.run_dir


def test_start_logs_where_its_run_dir_is(make_system, caplog):
    with caplog.at_level(logging.INFO, logger="reprise"):
        system = make_system("multiproc")
    assert system.run_dir and os.path.isdir(system.run_dir)
    assert any(system.run_dir in r.getMessage() and r.name.startswith("reprise") for r in caplog.records)
    client = actors.connect(system.admin_port)
    try:
        assert client.run_dir == system.run_dir
    finally:
        client.close()


@pytest.mark.timeout(60)
def test_save_snapshot_without_a_snapshot_store_fails_naming_the_setting(make_system, base, tmp_path):
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db")  # no snapshot_store
    system.spawn(Keeper, "/user/keepers", entities=True)
    assert system.ask("/user/keepers/1", "a") == 1
    kind, text = system.ask("/user/keepers/1", "snap")
    assert kind == "SnapshotStoreNotConfigured"
    assert "No snapshot store configured" in text and "snapshot_store=" in text
    error = wait_for(lambda: system.errors().recent)[0]
    assert error.path == "/user/keepers/1" and "save_snapshot" in error.reason and "snapshot_store=" in error.reason


@pytest.mark.timeout(60)
def test_a_rejected_persist_is_on_record(make_system, base, tmp_path):
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db")
    system.spawn(Keeper, "/user/keepers", entities=True)
    system.tell("/user/keepers/2", "bad")
    error = wait_for(lambda: system.errors().recent)[0]
    assert error.path == "/user/keepers/2"
    assert error.reason.startswith("persist of NotRegistered (sequence nr 1) rejected: ")
    assert system.ask("/user/keepers/2", "b") == 1  # the actor goes on


# ---- FIFO per sender -> receiver across a SIGKILL of the receiving host ------------------------------

def drain_past(probe, last: int) -> list[int]:
    """Every Seq number the probe gets until `last` arrives (20 s apart at most), then any that follow within 2 s.

    The last one sent arrives after the restart, when held and rerouted messages have been released: one
    overtaken by it or a duplicate would follow within ms, so 2 s of silence after it (not 20) ends the drain.
    Before it, the restart itself is a silence: it took over 5 s once in CI, next to a Spark test on a slow VM.
    """
    received: list[int] = []
    with contextlib.suppress(RepriseError):
        while not received or received[-1] != last:
            received.append(probe.receive(timeout=20).i)
        while True:
            received.append(probe.receive(timeout=2).i)
    return received


def out_of_order_pairs(received: list[int]) -> int:
    """Adjacent pairs received in the wrong order."""
    return sum(1 for a, b in zip(received, received[1:], strict=False) if b < a)


@pytest.mark.timeout(180)
def test_one_client_senders_messages_stay_in_order_across_a_sigkill_of_the_receiver(make_system):
    system = make_system("multiproc")
    system.spawn(Echo, "/user/echo")
    probe = system.probe()
    pid = system.ask("/user/echo", "where")[1]
    count, kill_at = 3000, 1000
    for i in range(count):
        if i == kill_at:
            os.kill(pid, signal.SIGKILL)
        system.tell("/user/echo", ("fwd", probe.path, Seq("client", i)))
        if i % 10 == 0:
            time.sleep(0.002)  # spread the stream over the kill and the restart (~2 s)
    received = drain_past(probe, count - 1)
    assert system.ask("/user/echo", "where")[1] != pid  # the stream did cross a restart
    assert out_of_order_pairs(received) == 0
    assert len(received) == len(set(received))  # nothing twice
    # At most once: only what was in flight to the dying process may be missing; later ones were held.
    missing = set(range(count)) - set(received)
    assert len(missing) < 50 and max(missing, default=0) < kill_at + 50


@pytest.mark.timeout(180)
def test_messages_held_or_rerouted_by_the_guardian_after_a_sigkill_arrive_before_newer_direct_ones(make_system):
    system = make_system("multiproc")
    system.spawn(Echo, "/user/echo")
    probe = system.probe()
    pid = system.ask("/user/echo", "where")[1]
    old_route = system._resolve("/user/echo")[0]
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: _gone(pid), 10)
    held = 20_000
    # Sent while the host restarts or just after: the guardian holds them or forwards them to the new process.
    for start in range(0, held, 2000):
        system.tell_many([("/user/echo", ("fwd", probe.path, Seq("client", i))) for i in range(start, start + 2000)])
    wait_for(lambda: system.status().hosts["/user/echo"].state == "running", 30)
    # Once the client's directory (refreshed after its TTL) names the new process, the next tell goes straight there.
    wait_for(lambda: system._resolve("/user/echo")[0] != old_route, 10)
    system.tell("/user/echo", ("fwd", probe.path, Seq("client", held)))
    received = probe.receive_many(held + 1, timeout=60)
    assert [m.i for m in received][-1] == held, "a newer message overtook the ones held for the restarting host"
    assert out_of_order_pairs([m.i for m in received]) == 0


@pytest.mark.timeout(180)
@pytest.mark.parametrize("batch_cap", [2000, 1], ids=["batches", "one-message-batches"])
def test_one_actor_senders_messages_stay_in_order_across_a_sigkill_of_the_receiver(make_system, batch_cap):
    # batch_cap=1: each message its own batch, so that the ones waiting behind the batch in flight go out
    # merged (actors/inflight.py) and a merged batch bounces off the dead process, to be rerouted part by part.
    system = make_system("multiproc")
    system.spawn(Echo, "/user/echo")
    system.spawn(Streamer, "/user/streamer", batch_cap=batch_cap)
    probe = system.probe()
    pid = system.ask("/user/echo", "where")[1]
    assert system.ask("/user/streamer", Stream("/user/echo", probe.path, 3000, per_tick=20)) == "started"
    wait_for(lambda: probe.receive(timeout=5), 10)  # the stream flows
    os.kill(pid, signal.SIGKILL)
    received = drain_past(probe, 2999)
    assert received and received[-1] == 2999
    assert out_of_order_pairs(received) == 0
    assert len(received) == len(set(received))  # nothing twice


@pytest.mark.timeout(180)
def test_a_bounced_batch_that_waits_for_a_retry_to_the_guardian_is_not_overtaken(make_system):
    # The sender's Thespian hands the guardian the first batch that bounced off the killed receiver a second
    # late, as after a retry (kquick#19). The messages parked for the restarted receiver go once their Barrier
    # comes back through the guardian: sent untracked, the bounced batch let the Barrier pass it, and newer
    # messages arrived before it (CI, and 3 of ~40 runs of the test above beside three busy loops).
    system = make_system("multiproc")
    system.spawn(Echo, "/user/echo")
    system.spawn(SlowBounceStreamer, "/user/streamer", batch_cap=1)
    probe = system.probe()
    pid = system.ask("/user/echo", "where")[1]
    assert system.ask("/user/streamer", Stream("/user/echo", probe.path, 3000, per_tick=20)) == "started"
    wait_for(lambda: probe.receive(timeout=5), 10)
    os.kill(pid, signal.SIGKILL)
    received = drain_past(probe, 2999)
    assert system.ask("/user/streamer", "held back") == 1, "nothing bounced off the killed receiver"
    assert out_of_order_pairs(received) == 0, f"out of order: {_first_disorder(received)}"
    assert received[-1] == 2999
    assert len(received) == len(set(received))  # nothing twice


@pytest.mark.timeout(180)
@pytest.mark.parametrize("whose", ["another host's", "an earlier process's on the same port"])
def test_a_barrier_of_another_handover_passing_through_a_host_is_not_taken_for_its_own(make_system, tmp_path, whose):
    # Every process numbers its handovers from 1. A host whose own handover waited for its Barrier took another
    # host's Barrier with the same number, on its way through it, for its own: it sent what it had parked before
    # its earlier messages landed, and the other host, its Barrier swallowed, parked for HANDOVER_WAIT and then
    # sent out of order (the parks of 10 s seen after the accounts' host was killed in a processed feed).
    # Told by their origin (the sending process's address) since; but a later process of a host may get the port
    # of an earlier one, and a late Barrier of the earlier one, origin and all, was taken for the later one's.
    system = make_system("multiproc")
    system.spawn(Echo, "/user/e")
    # (down 2 s after its death, not 0.2: long enough for e to take the gate below while the guardian holds for z)
    system.spawn(Gated, "/user/z", backoff=(2, 2, 0))
    probe = system.probe()
    system.tell("/user/e", ("fwd", "/user/z", ("fwd", probe.path, Seq("e", 0))))
    assert probe.receive(timeout=10).i == 0  # e sends to z's process directly
    z = system.ask("/user/z", "where")[1]
    z_before = system.ask("/user/e", ("route-of", "/user/z"))
    os.kill(z, signal.SIGKILL)
    wait_for(lambda: _gone(z), 10)
    started, opened = tmp_path / "started", tmp_path / "opened"
    # Sent while z restarts: the guardian gives them to z's new process, which stops in the first; so the Barrier
    # of e's handover, behind them, cannot come back until the gate opens.
    system.tell("/user/e", ("fwd", "/user/z", ("gate", str(started), str(opened))))
    system.tell_many([("/user/e", ("fwd", "/user/z", ("fwd", probe.path, Seq("e", i)))) for i in range(1, 50)])
    wait_for(started.exists, 60)
    # e parks for z once it has z's new process's route: sent before, the next ones would go the guardian's way
    # and park nowhere (the race this test lost under load).
    assert wait_for(lambda: system.ask("/user/e", ("route-of", "/user/z")) not in (z_before, "guardian"), 10)
    system.tell_many([("/user/e", ("fwd", "/user/z", ("fwd", probe.path, Seq("e", i)))) for i in range(50, 100)])

    def parked() -> int:
        return system.status().hosts["/user/e"].messages_parked

    # 50-99 parked; and 1-49 with them if e took them after z's new route reached it (under load, e may take the
    # client's batch late: seen with z down 0.2 s). Either way the gate holds e's Barrier. (Waiting for 50 alone, the
    # test waited out HANDOVER_WAIT in that case, and the expired handover looked like a slow start of z's.)
    try:
        in_handover = wait_for(lambda: (lambda n: n if n in (50, 99) else None)(parked()), 10)
    except AssertionError:
        with open(os.path.join(system.run_dir, "actors.log")) as f:
            expired = "order may break" in f.read()
        raise AssertionError(f"e did not park what it sent z after z's restart: it parks {parked()}, its route to z "
                             f"is {system.ask('/user/e', ('route-of', '/user/z'))} (z's old one {z_before}), z is "
                             f"{system.status().hosts['/user/z']}; e's handover expired: {expired}") from None
    # Barriers of other hosts' handovers reach e with any number, its own among them; so may late ones of an
    # earlier process of e that had e's address (made with that process's nonce, not this one's).
    origin = system._resolve("/user/e")[0] if whose != "another host's" else ""
    system.tell_many([("/user/e", Barrier(token, origin)) for token in range(1, 6)])
    assert system.ask("/user/e", "count") > 0  # (asked after the tells: e has taken the Barriers)
    assert parked() == in_handover, "another handover's Barrier released what e parked before its earlier messages landed"
    opened.touch()
    received = [m.i for m in probe.receive_many(99, timeout=30)]
    assert received == list(range(1, 100))
    assert wait_for(lambda: parked() == 0, 10)
    with open(os.path.join(system.run_dir, "actors.log")) as f:
        assert "order may break" not in f.read(), "a handover waited for a Barrier that never came back"


@pytest.mark.timeout(120)
def test_a_barrier_of_an_ended_handover_reaches_no_actor_on_any_delivery_path(system):
    # A handover's Barrier may come back after its handover ended (expired after HANDOVER_WAIT, or restarted when
    # its destination died again), its token no longer kept. Only a host waiting for a Barrier looked for them, and
    # a token it no longer kept was not recognised: the Barrier reached the actor at its target as a user message
    # (one actor, entities, receive_batch, an entity table), or, come back through the guardian, went on to that
    # path on the host itself. (Handovers are multiproc only; what a host does with a Barrier is on both bases.)
    probe = system.probe()
    system.spawn(Recorder, "/user/one", args=(probe.path,))
    system.spawn(Recorder, "/user/many", entities=True, args=(probe.path,))
    system.spawn(Batched, "/user/batched", entities=True, args=(probe.path,))
    system.spawn(RecorderTable, "/user/table", entities=True, args=(probe.path,))
    for n, target in enumerate(["/user/one", "/user/many/a", "/user/batched/a", "/user/table/a"]):
        origin = system._resolve(target)[0]  # the process of the target's host: the Barriers are that host's own
        # Back from the host it went to, in a batch of that host's...
        system.tell_many([(target, Barrier(1000 + n, origin)), (target, "after the direct one")])
        # ...or through the guardian (that host could not reach ours), behind which it came from a path of ours.
        back = [(target, target, Barrier(2000 + n, origin)), (None, target, "after the one through the guardian")]
        system._send(system._guardian, pack(system.prefix, back, system._refuse))
        got: list[tuple] = []

        def seen(marker: str) -> bool:
            return any(m[0] == "got" and m[2] == marker for m in got)  # noqa: B023 (got: this target's)

        while not (seen("after the direct one") and seen("after the one through the guardian")):
            got.append(probe.receive(timeout=10))
        system.tell(target, "end")  # (after both: what the host does with a Barrier, it has done by then)
        while not seen("end"):
            got.append(probe.receive(timeout=10))
        # (Batched also tells ("batch", path, messages) per receive_batch call)
        messages = [m[2] if m[0] == "got" else list(m[2]) for m in got]
        assert not any(isinstance(m, Barrier) or (isinstance(m, list) and any(isinstance(x, Barrier) for x in m))
                       for m in messages), f"a Barrier reached the actor at {target}: {got}"


@pytest.mark.timeout(120)
def test_a_late_barrier_of_an_earlier_process_of_a_host_is_dropped_as_such_not_as_someone_elses(base, make_system,
                                                                                               caplog):
    # A Barrier of a host's handover that comes back after its process died reaches the host's next process: taken
    # for another host's, it was logged "dropped a Barrier ... that is not ours", or, come back through the guardian
    # from a path on another host, sent on to that host, which logged it so. Its host and nonce say whose it is.
    system = make_system(base, log_level="INFO")
    probe = system.probe()
    system.spawn(Recorder, "/user/one", args=(probe.path,))
    system.spawn(Recorder, "/user/other", args=(probe.path,))
    earlier = "127.0.0.1:1"  # (the address of the process before: any other; the same one is covered above)
    caplog.set_level(logging.INFO, logger="reprise.host")
    # Back from the host it went to...
    system.tell_many([("/user/one", Barrier(7, earlier, "0" * 16, "/user/one")), ("/user/one", "after the direct one")])
    # ...or through the guardian, from a path on that host.
    back = [("/user/other", "/user/one", Barrier(8, earlier, "0" * 16, "/user/one")),
            (None, "/user/one", "after the one through the guardian")]
    system._send(system._guardian, pack(system.prefix, back, system._refuse))
    got = [probe.receive(timeout=10), probe.receive(timeout=10)]
    assert sorted(m[2] for m in got) == ["after the direct one", "after the one through the guardian"], got
    system.tell_many([("/user/one", "end"), ("/user/other", "end")])  # (after both: the hosts have done with them)
    assert sorted(probe.receive(timeout=10)[1] for _ in range(2)) == ["/user/one", "/user/other"]
    said = "a Barrier of an earlier process of this host (at 127.0.0.1:1, handover"

    def logged() -> str:
        if base == "local":
            return "\n".join(r.getMessage() for r in caplog.records)
        with open(os.path.join(system.run_dir, "actors.log")) as f:  # (written by Thespian's logger process)
            return f.read()

    text = wait_for(lambda: (lambda t: t if t.count(said) >= 2 or "not ours" in t else None)(logged()), 10)
    assert "not ours" not in text and text.count(said) == 2, text


def _table_host_sending_to_z(make_system: Any, **z_options: Any) -> tuple[Any, Any, Any, Any]:
    """A multiproc system whose table /user/e forwards (entity a) to a Gated /user/z, e's first message to z
    arrived: (system, probe, to_z(message) -> what to tell e, parked() -> what e's host parks)."""
    system = make_system("multiproc")
    probe = system.probe()
    system.spawn(RecorderTable, "/user/e", entities=True, args=(probe.path,))
    system.spawn(Gated, "/user/z", **z_options)

    def to_z(message: object) -> tuple[str, object]:
        return "/user/e/a", ("fwd", "/user/z", message)

    def parked() -> int:
        return system.status().hosts["/user/e"].messages_parked

    system.tell(*to_z(("fwd", probe.path, Seq("e", 0))))
    assert probe.receive(timeout=10).i == 0  # e sends to z's process directly
    return system, probe, to_z, parked


@pytest.mark.timeout(180)
def test_a_table_host_takes_batches_in_bulk_again_after_a_handover_whose_barrier_never_came_back(make_system, tmp_path):
    # A host kept the token of a handover's Barrier after the handover ended (expired or, here, restarted), for the
    # Barrier to be recognised if it came back; one that never does (lost here with the process it reached) stayed
    # for the life of the host, and a host keeping any took every batch message by message: an entity table (a
    # feed's) no longer took a Scatter's rows in bulk, for good. Handovers are multiproc only.
    # (z down 5 s after each death: the guardian holds meanwhile)
    system, probe, to_z, parked = _table_host_sending_to_z(make_system, backoff=(5, 5, 0))
    z = system.status().hosts["/user/z"].pid
    z_before = system.ask("/user/e", ("route-of", "/user/z"))
    e_started, e_opened, z_started = tmp_path / "e-started", tmp_path / "e-opened", tmp_path / "z-started"
    # e stops in a message while z dies, then sends what followed it (one batch: a host stopped in a message takes
    # no other) to z's dead process: they bounce to the guardian, and e's handover sends its Barrier while z is
    # down. The guardian hands z's next process what it held in one batch, the Barrier behind a gate that stops
    # that process in the batch's first message.
    system.tell_many([("/user/e", ("gate", str(e_started), str(e_opened))),
                      to_z(("gate", str(z_started), str(tmp_path / "never")))]
                     + [to_z(("fwd", probe.path, Seq("e", i))) for i in range(1, 10)])
    wait_for(e_started.exists, 10)
    os.kill(z, signal.SIGKILL)
    wait_for(lambda: _gone(z), 10)
    wait_for(lambda: system.status().hosts["/user/z"].state != "running", 10)  # (its new route is on its way to e)
    e_opened.touch()
    # e takes the next batch's messages for z as parked only once z's route has left the dead process: sent before,
    # they bounce to the guardian as 1-9 did and park nowhere (the race this test lost under load).
    assert wait_for(lambda: system.ask("/user/e", ("route-of", "/user/z")) != z_before, 10)
    system.tell_many([to_z(("fwd", probe.path, Seq("e", i))) for i in range(10, 20)])
    wait_for(z_started.exists, 30)
    try:
        wait_for(lambda: parked() == 10, 10)
    except AssertionError:
        raise AssertionError(f"e did not park what it sent z after z's death: it parks {parked()}") from None
    # z's second process dies in the gate, with e's Barrier: e starts its handover over, with a new Barrier.
    z2 = system.status().hosts["/user/z"].pid
    os.kill(z2, signal.SIGKILL)
    received = drain_past(probe, 19)
    assert received[-10:] == list(range(10, 20)), received
    assert wait_for(lambda: parked() == 0, 10)
    system.ask("/user/e", "calls")  # (counted from here)
    system.tell_many([(f"/user/e/{i}", "x") for i in range(100)])  # one batch from this client
    assert system.ask("/user/e", "calls") == [100], "e took a batch message by message"


@pytest.mark.timeout(180)
def test_a_barrier_back_after_its_handover_expired_is_dropped_by_a_table_host_taking_batches_in_bulk(make_system,
                                                                                                   tmp_path):
    # Its token forgotten when the handover expired, the late Barrier is known by its origin, on the path a table
    # host takes a batch in bulk on: it reaches no entity, and bulk delivery goes on. Handovers are multiproc only.
    # (z down 2 s after its death, not 0.2: long enough for e to take the gate below while the guardian holds for z)
    system, probe, to_z, parked = _table_host_sending_to_z(make_system, backoff=(2, 2, 0))
    z = system.status().hosts["/user/z"].pid
    os.kill(z, signal.SIGKILL)
    wait_for(lambda: _gone(z), 10)
    started, opened = tmp_path / "started", tmp_path / "opened"
    # Sent while z restarts: z's new process takes them from the guardian and stops in the first, e's Barrier
    # behind them, until after e's handover has expired.
    system.tell_many([to_z(("gate", str(started), str(opened)))]
                     + [to_z(("fwd", probe.path, Seq("e", i))) for i in range(1, 50)])
    wait_for(started.exists, 60)
    system.tell_many([to_z(("fwd", probe.path, Seq("e", i))) for i in range(50, 100)])
    # 50-99, and 1-49 with them if e took them after z's new route reached it (under load: see the test above)
    assert wait_for(lambda: parked() in (50, 99), 10), "e did not park what it sent z after z's restart"
    assert wait_for(lambda: parked() == 0, HANDOVER_WAIT + 10), "e's handover did not expire"
    opened.touch()
    # Through z behind the Barrier z sends back to e: when the probe has it, e has had the Barrier. (Not behind
    # 50-99: e released them to z, blocked in the gate, over its own connection, and z reads the two connections in
    # whichever order poll(2) gives once the gate opens: the probe may have "after the Barrier" first.)
    system.tell(*to_z(("fwd", "/user/e/b", "after the Barrier")))
    got = []
    while ("got", "/user/e/b", "after the Barrier") not in got or sum(isinstance(m, Seq) for m in got) < 99:
        got.append(probe.receive(timeout=30))
    assert [m.i for m in got if isinstance(m, Seq)] == list(range(1, 100))
    assert not [m for m in got if isinstance(m, tuple) and isinstance(m[2], Barrier)], "the Barrier reached e"
    system.ask("/user/e", "calls")  # (counted from here)
    system.tell_many([(f"/user/e/{i}", "x") for i in range(100)])  # one batch from this client
    assert system.ask("/user/e", "calls") == [100], "e took a batch message by message"
    with open(os.path.join(system.run_dir, "actors.log")) as f:
        assert "order may break" in f.read()  # (the handover did expire before its Barrier came back)


@pytest.mark.timeout(180)
def test_the_guardians_hold_limit_drops_no_barrier(make_system, tmp_path):
    # A handover's Barrier that found the guardian's hold for its restarting destination full became a dead
    # letter (a Barrier among the user's dead letters), and its sender parked what it sent there until another
    # Barrier came back, or for HANDOVER_WAIT and then sent it out of order. Handovers are multiproc only.
    system = make_system("multiproc")
    probe = system.probe()
    system.spawn(Gated, "/user/e")
    system.spawn(Echo, "/user/z", backoff=(5, 5, 0), hold_limit=0)  # (down 5 s after a death: nothing held)
    system.tell("/user/e", ("fwd", "/user/z", ("fwd", probe.path, Seq("e", 0))))
    assert probe.receive(timeout=10).i == 0  # e sends to z's process directly
    z = system.status().hosts["/user/z"].pid
    started, opened = tmp_path / "started", tmp_path / "opened"
    # e stops in a message while z dies, then sends what followed it to z's dead process: they bounce to the
    # guardian, which holds none (dead letters, over the limit), and e's handover sends its Barrier while z is down.
    system.tell_many([("/user/e", ("gate", str(started), str(opened)))]
                     + [("/user/e", ("fwd", "/user/z", ("fwd", probe.path, Seq("e", i)))) for i in range(1, 10)])
    wait_for(started.exists, 10)
    os.kill(z, signal.SIGKILL)
    wait_for(lambda: _gone(z), 10)
    wait_for(lambda: system.status().hosts["/user/z"].state != "running", 10)  # (its new route is on its way to e)
    opened.touch()
    system.tell_many([("/user/e", ("fwd", "/user/z", ("fwd", probe.path, Seq("e", i)))) for i in range(10, 20)])
    received = drain_past(probe, 19)
    # What did not fit in the hold is a dead letter, as a user's message must be; the Barrier is not.
    letters = system.dead_letters().recent
    assert [d.message[2].i for d in letters if not isinstance(d.message, Barrier)] == list(range(1, 10))
    assert all("hold limit 0 reached" in d.reason for d in letters)
    assert [d for d in letters if isinstance(d.message, Barrier)] == [], "the hold limit dropped a Barrier"
    assert received == list(range(10, 20)), received
    with open(os.path.join(system.run_dir, "actors.log")) as f:
        assert "order may break" not in f.read(), "a handover waited for a Barrier that never came back"


def _first_disorder(received: list[int]) -> list[int]:
    """The numbers around the first pair received in the wrong order."""
    at = next(i for i, (a, b) in enumerate(zip(received, received[1:], strict=False)) if b < a)
    return received[max(0, at - 5):at + 6]


@pytest.mark.timeout(90)
def test_a_flood_of_errors_is_counted_exactly_but_reported_and_logged_at_a_bounded_rate(system):
    # 1,000 entities failing at once: the guardian gets at most ERROR_BURST errors a second one by one,
    # the rest as counts that keep system.errors().count exact, also when no error follows them.
    system.spawn(Echo, "/user/echoes", entities=True)
    probe = system.probe()
    system.subscribe_errors(probe.path)
    total = 1000
    system.tell_many([(f"/user/echoes/{i}", "boom") for i in range(total)])
    published = []
    while sum(1 + e.repeats for e in published) < total:
        published.append(probe.receive(timeout=10))
    assert sum(1 + e.repeats for e in published) == total
    assert len(published) < total // 2, f"{len(published)} errors published one by one for {total}"
    assert "counted but not reported one by one" in published[-1].reason  # the count nothing followed
    assert wait_for(lambda: system.errors().count == total, 10)
    assert system.ask("/user/echoes/1", Ping(1)) == Pong(1, "/user/echoes/1")  # the host still serves


@pytest.mark.timeout(180)
def test_an_actor_senders_messages_stay_in_order_across_the_first_start_of_the_receivers_host(make_system):
    # While a host starts for the first time the directory names no process for it: a sender sends to the guardian,
    # which holds what it gets until the host is ready and then forwards it. The sender learns the new route from a
    # directory update and sends straight to the new process from then on: what it sent before must land first
    # (it did not: 1-2 pairs out of order in 3 of 3 runs).
    system = make_system("multiproc")
    system.spawn(Streamer, "/user/streamer")
    probe = system.probe()
    count = 6000
    # (the stream starts before /user/echo exists: its first messages are dead letters, "no actor serves")
    assert system.ask("/user/streamer", Stream("/user/echo", probe.path, count, per_tick=5)) == "started"
    system.spawn(Echo, "/user/echo")
    received = drain_past(probe, count - 1)
    assert received[-1] == count - 1
    assert out_of_order_pairs(received) == 0, f"out of order: {_first_disorder(received)}"
    assert len(received) == len(set(received))  # nothing twice


@pytest.mark.timeout(180)
def test_a_clients_messages_stay_in_order_across_the_first_start_of_the_receivers_host(make_system, tmp_path):
    # A client routes by its own copy of the directory: while the host starts for the first time no route names
    # it, and the client's tells go to the guardian, which holds them. Once the client fetches a directory naming
    # the new process it sends there directly: what the guardian held must land first. The guardian forwards a
    # large hold in several batches, one after another is acknowledged, and the client's direct sends went in
    # between them (out of order in every run).
    system = make_system("multiproc")
    probe = system.probe()
    started, opened = str(tmp_path / "started"), str(tmp_path / "opened")
    spawner = actors.connect(system.admin_port)  # (System.spawn returns once the host runs: from another client)
    spawning = threading.Thread(target=spawner.spawn, args=(SlowToStart, "/user/echo"), daemon=True,
                                kwargs={"kwargs": {"started": started, "opened": opened}})
    spawning.start()
    count, held = 8000, 6000
    try:
        assert wait_for(lambda: os.path.exists(started), 30), "the host did not start"
        # Held by the guardian: the host is starting, and the client has no route to it.
        system.tell_many([("/user/echo", ("fwd", probe.path, Seq("client", i))) for i in range(held)])
    finally:
        open(opened, "w").close()
    # The rest one by one, as the client learns the route (its directory is refetched while the path is unknown).
    for i in range(held, count):
        system.tell("/user/echo", ("fwd", probe.path, Seq("client", i)))
    spawning.join(60)
    spawner.close()
    assert not spawning.is_alive(), "the spawn did not return"
    received = drain_past(probe, count - 1)
    assert out_of_order_pairs(received) == 0, f"out of order: {_first_disorder(received)}"
    assert sorted(received) == list(range(count))  # none lost, none twice

"""Per sender -> receiver FIFO for what a host sends with `scatter` (one entry per destination host) across the
restart or first start of SEVERAL destination hosts at once (see actors/handover.py). Handovers are multiproc only."""

from __future__ import annotations

import contextlib
import os
import signal
import threading

import pytest

import actors
from actors import RepriseError
from actors.unrouted import UNROUTED_KEPT
from tests.actors.sample import Echo
from tests.actors.scatter_sample import GreetsWhileStarting, ScatterStream, ScatterStreamer, SlowToStart
from tests.waiting import dead_letters_reach, wait_for

A, B = "/user/a/x", "/user/b/x"
B1 = "/user/b"  # (a single actor: its start can wait at a gate)
NOBODY = "/user/nobody/x"


def drain_streams(probe, last: dict[str, int], first: object = None) -> dict[str, list[int]]:
    """The Seq numbers the probe gets per source (after `first`, one it got already) until every source's `last`
    arrived (20 s apart at most), then any that follow within 2 s (one overtaken by the last, or a duplicate,
    would follow within ms)."""
    received: dict[str, list[int]] = {source: [] for source in last}
    if first is not None:
        received[first.source].append(first.i)
    with contextlib.suppress(RepriseError):
        while any(not got or got[-1] != last[s] for s, got in received.items()):
            seq = probe.receive(timeout=20)
            received[seq.source].append(seq.i)
        while True:
            seq = probe.receive(timeout=2)
            received[seq.source].append(seq.i)
    return received


def disorder(numbers: list[int]) -> list[tuple[int, int]]:
    """The adjacent pairs received in the wrong order."""
    return [(a, b) for a, b in zip(numbers, numbers[1:], strict=False) if b < a]


def check_streams(received: dict[str, list[int]], last: int) -> None:
    """Each target got its numbers in order, none twice, up to `last`."""
    for target, numbers in received.items():
        assert numbers and numbers[-1] == last, f"{target}: its last number did not arrive"
        assert not disorder(numbers), f"{target}: out of order {disorder(numbers)[:5]}"
        assert len(numbers) == len(set(numbers)), f"{target}: some numbers arrived twice"


@pytest.mark.timeout(180)
def test_scattered_messages_stay_in_order_across_a_sigkill_of_several_destination_hosts(make_system):
    # While both hosts restart, each tick's scatter is one entry to the guardian for both; the handover of each
    # host whose messages the guardian held must start when its new process serves, not only the first target's
    # (b came back first and its held messages were overtaken by direct sends to its new process).
    system = make_system("multiproc")
    # b comes back well before a (a's backoff), so its route changes while a's target is still the guardian's.
    system.spawn(Echo, "/user/a", entities=True, backoff={"min": 2.0, "max": 2.0, "random_factor": 0})
    system.spawn(Echo, "/user/b", entities=True, backoff={"min": 0.8, "max": 0.8, "random_factor": 0})
    system.spawn(ScatterStreamer, "/user/streamer")
    probe = system.probe()
    pids = [system.ask(t, "where")[1] for t in (A, B)]
    count = 6000
    assert system.ask("/user/streamer", ScatterStream((A, B), probe.path, count, 1, 0.005)) == "started"
    first = probe.receive(timeout=10)  # the stream flows
    # Paused while the hosts die: a batch that bounced off a dead process starts a handover for every destination
    # (Handover.rerouted), and the sender then sends message by message until it ends, hiding what is tested here.
    sent = system.ask("/user/streamer", "pause")
    assert sent < count // 4, "the stream ended before the kill"
    check_streams(drain_streams(probe, {A: sent - 1, B: sent - 1}, first), sent - 1)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: all(system.ask("/user/streamer", ("route-of", t)) == "guardian" for t in (A, B)), 10)
    # A burst while both are down (the guardian holds it), then nothing until b's route names its new process, then
    # the rest straight to it: a batch still in flight to the guardian when b's route changes starts b's handover
    # anyway (Handover.routes_changed's `unsettled`): streaming on, the test failed before the fix in 7 runs of 8 only.
    assert system.ask("/user/streamer", ("resume", count - sent - 600, B)) == "resumed"
    received = drain_streams(probe, {A: count - 1, B: count - 1})
    assert all(system.ask(t, "where")[1] not in pids for t in (A, B))  # (the stream did cross both restarts)
    check_streams(received, count - 1)


@pytest.mark.timeout(180)
def test_scattered_messages_stay_in_order_across_the_first_start_of_several_destination_hosts(make_system, tmp_path):
    # Before a host's first start no route names it: each scatter is one entry to the guardian for a's and b's
    # targets, and the guardian holds b's while b starts. The route that appears for b must start a handover for it
    # (Handover.unrouted) though a's target came first in the entry; a appears later.
    system = make_system("multiproc")
    system.spawn(ScatterStreamer, "/user/streamer")
    probe = system.probe()
    count = 6000
    # (its first numbers are dead letters: no actor serves a or b yet)
    assert system.ask("/user/streamer", ScatterStream((A, B1), probe.path, count, 1, 0.005)) == "started"
    sent = system.ask("/user/streamer", "pause")
    started, opened = str(tmp_path / "started"), str(tmp_path / "opened")
    spawner = actors.connect(system.admin_port)  # (System.spawn returns once b runs: from another client)
    spawning = threading.Thread(target=spawner.spawn, args=(SlowToStart, B1), daemon=True,
                                kwargs={"kwargs": {"started": started, "opened": opened}})
    spawning.start()
    try:
        assert wait_for(lambda: os.path.exists(started), 30), "b did not start"
        # Sent to the guardian while b starts (held there), then nothing until b's route appears (see the other test).
        burst = count - sent - 600
        assert system.ask("/user/streamer", ("resume", burst, B1)) == "resumed"
        # (the guardian took them: a's are dead letters, and came in the same entry as b's)
        dead_letters_reach(system, 2 * sent + burst, 30)
    finally:
        open(opened, "w").close()
        spawning.join(60)
        spawner.close()
    assert not spawning.is_alive(), "the spawn of b did not return"
    system.spawn(Echo, "/user/a", entities=True)
    check_streams(drain_streams(probe, {A: count - 1, B1: count - 1}), count - 1)



def learn_b_during_its_first_start(make_system, tmp_path, spray: list[str] | None = None,
                                   attach: bool = False, drop: bool = False) -> None:
    """The learned-route tests' first start: the streamer streams to b while b's host starts (its burst held by the
    guardian); then, the guardian paused (SIGSTOP), b greets the streamer from pre_start, so that the streamer learns
    b's route from that message, ahead of the directory. Every number must reach b once, in order. `spray`: paths
    unknown here that the streamer sends to after the burst; `attach`: a client attaches while the guardian is paused
    (its RegisterRoute may publish a directory without b before the guardian takes b's HostReady); `drop`: the
    streamer's host then installs such a directory itself (scatter_sample.drop_route) and sends on."""
    system = make_system("multiproc")
    system.spawn(ScatterStreamer, "/user/streamer")
    probe = system.probe()
    count = 3000
    guardian = system.status().guardian_pid
    # (its first numbers are dead letters: no actor serves b yet, nor ever NOBODY, which tells what the guardian took)
    assert system.ask("/user/streamer", ScatterStream((B1, NOBODY), probe.path, count, 1, 0.005)) == "started"
    dead_letters_reach(system, 2, 30)
    sent = system.ask("/user/streamer", "pause")
    started, opened, mark = str(tmp_path / "started"), str(tmp_path / "opened"), str(tmp_path / "mark")
    spawner = actors.connect(system.admin_port)  # (System.spawn returns once b runs: from another client)
    spawning = threading.Thread(target=spawner.spawn, args=(GreetsWhileStarting, B1), daemon=True,
                                kwargs={"kwargs": {"greet": "/user/streamer", "started": started, "opened": opened}})
    spawning.start()
    attached: list[actors.System] = []
    attaching = threading.Thread(target=lambda: attached.append(actors.connect(system.admin_port)), daemon=True)
    stopped = False
    try:
        assert wait_for(lambda: os.path.exists(started), 30), "b did not start"
        # Sent to the guardian while b starts (held there), then nothing until the streamer has a route to b.
        burst = 1000
        after = sent + burst + 50
        assert system.ask("/user/streamer", ("resume", burst, B1, (mark, after, B1 if drop else None))) == "resumed"
        if spray:
            assert system.ask("/user/streamer", ("spray", spray)) == "sprayed"
        # (the guardian took the burst and the spray: NOBODY's and the spray's are dead letters)
        dead_letters_reach(system, 2 * sent + burst + len(spray or ()), 30)
        os.kill(guardian, signal.SIGSTOP)
        stopped = True
        if attach:
            attaching.start()  # (its RegisterRoute waits at the paused guardian)
        open(opened, "w").close()  # b greets the streamer and reports ready to the paused guardian
        # (no request to the guardian meanwhile: a file tells that the streamer sent or parked 50 numbers to b)
        assert wait_for(lambda: os.path.exists(mark), 30), "the streamer did not learn b's route"
    finally:
        if stopped:
            os.kill(guardian, signal.SIGCONT)
        open(opened, "w").close()
        spawning.join(60)
        if attaching.ident is not None:
            attaching.join(60)
        spawner.close()
        for client in attached:
            client.close()
    assert not spawning.is_alive(), "the spawn of b did not return"
    check_streams(drain_streams(probe, {B1: count - 1}), count - 1)


@pytest.mark.timeout(180)
def test_a_route_learned_from_a_starting_hosts_first_message_waits_for_what_the_guardian_holds(make_system, tmp_path):
    # A sender learns a route from the origin of a batch it gets (Router.learn), ahead of the directory. b's actor
    # messages the streamer from pre_start, which goes out with b's HostReady; the guardian, paused (SIGSTOP: a
    # guardian busy or slow to be scheduled), has not taken it yet, so it still holds the burst the streamer sent b
    # while b started. The streamer learned b's route from b's message and sent the rest straight to b, which
    # took it before the burst (out of order in every run). A learned route must start the same handover as one
    # the directory brings.
    learn_b_during_its_first_start(make_system, tmp_path)


@pytest.mark.timeout(180)
def test_a_route_learned_ahead_of_the_directory_keeps_parking_when_an_older_update_drops_it(make_system, tmp_path):
    # As the first-start test above, and a client attaches while the guardian is paused: its RegisterRoute, taken
    # before b's HostReady, publishes a directory without b (still starting) after the streamer learned b's route
    # from b's greeting. That update dropped the learned route, so the numbers the streamer sent until the next one
    # went unparked to the guardian, behind the Barrier, and the parked ones were released ahead of them.
    # (Not reproduced on demand: the guardian picks the order of the two; see Handover._unrouted_pending.)
    learn_b_during_its_first_start(make_system, tmp_path, attach=True)


@pytest.mark.timeout(180)
def test_numbers_sent_after_a_directory_without_b_drops_its_learned_route_wait_behind_the_parked_ones(
        make_system, tmp_path):
    # The order the test above leaves to the guardian, forced: after the streamer learned b's route from b's
    # greeting (its handover pending: the guardian, paused, still holds the burst) and sent 50 numbers to b (parked),
    # a directory without b (published before the guardian took b's HostReady) drops the learned route, and the
    # streamer sends 50 more. No route names b then: they went to the guardian unparked, behind the Barrier, and
    # the parked ones were released ahead of them (out of order at b) until park() looked for b's pending handover
    # among the target's prefixes (Handover._unrouted_pending).
    learn_b_during_its_first_start(make_system, tmp_path, drop=True)


@pytest.mark.timeout(180)
def test_a_route_learned_from_a_restarted_hosts_first_message_waits_for_what_the_guardian_holds(make_system, tmp_path):
    # As above, across a restart: the directory routes b to the guardian (restarting) and the streamer's burst is
    # held there; b's new process messages the streamer from pre_start while the guardian is paused, so the streamer
    # learns the new route (guardian -> new process) from that message, not from the directory.
    system = make_system("multiproc")
    started, opened, mark = str(tmp_path / "started"), str(tmp_path / "opened"), str(tmp_path / "mark")
    open(opened, "w").close()  # (the first start goes through)
    system.spawn(GreetsWhileStarting, B1, kwargs={"greet": "/user/streamer", "started": started, "opened": opened})
    system.spawn(ScatterStreamer, "/user/streamer")
    probe = system.probe()
    count = 3000
    guardian = system.status().guardian_pid
    pid = system.ask(B1, "where")[1]
    assert system.ask("/user/streamer", ScatterStream((B1, NOBODY), probe.path, count, 1, 0.005)) == "started"
    first = probe.receive(timeout=10)  # the stream flows
    sent = system.ask("/user/streamer", "pause")
    check_streams(drain_streams(probe, {B1: sent - 1}, first), sent - 1)
    os.remove(opened)
    os.remove(started)
    os.kill(pid, signal.SIGKILL)
    assert wait_for(lambda: os.path.exists(started), 30), "b was not restarted"
    assert system.ask("/user/streamer", ("route-of", B1)) == "guardian"
    stopped = False
    try:
        burst = 1000
        after = sent + burst + 50
        assert system.ask("/user/streamer", ("resume", burst, B1, (mark, after))) == "resumed"
        dead_letters_reach(system, sent + burst, 30)  # (the guardian took the burst: NOBODY's are dead letters)
        os.kill(guardian, signal.SIGSTOP)
        stopped = True
        open(opened, "w").close()  # b's new process greets the streamer and reports ready to the paused guardian
        assert wait_for(lambda: os.path.exists(mark), 30), "the streamer did not learn b's new route"
    finally:
        if stopped:
            os.kill(guardian, signal.SIGCONT)
        open(opened, "w").close()
    received = drain_streams(probe, {B1: count - 1})
    assert system.ask(B1, "where")[1] != pid  # (the stream did cross the restart)
    check_streams(received, count - 1)


@pytest.mark.timeout(180)
def test_one_scatter_to_more_unknown_targets_than_a_host_remembers_forgets_none_of_them(make_system, tmp_path):
    # A host remembers the paths it sent through the guardian while no route named their host (Handover.unrouted),
    # to start their host's handover when its route appears. It kept the last 4,096 paths: one scatter to more
    # unknown targets than that forgot the streamer's burst to b, sent just before, and b's route (learned from b's
    # first message, as in the test above) started no handover: out of order in every run.
    learn_b_during_its_first_start(make_system, tmp_path,
                                   spray=[f"/user/nobody/{i}" for i in range(UNROUTED_KEPT + 100)])

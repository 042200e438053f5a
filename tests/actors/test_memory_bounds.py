"""Per-process structures that must grow with live state, not with how many clients came and went."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(120)

_DIE_ATTACHED = """
import os, sys
import actors
system = actors.connect(int(sys.argv[1]))
system.probe("task")  # (a probe publishes the client's route, as a Spark task's does)
print(system.prefix, flush=True)
os._exit(0)  # (as pyspark's forked workers end, and as one is killed: no close, no atexit)
"""


def test_the_routes_of_clients_that_died_attached_do_not_stay_in_the_directory(make_system):
    """A client that attaches and makes a probe registers its /temp route with the guardian, published to every host
    in each DirectoryUpdate; `close()` unregisters it. A process that ends without closing (a Spark Python worker:
    pyspark's forked workers end with os._exit, and idle ones are killed after a minute) left its route in the
    guardian's directory for good unless something sent to it later bounced: one route per worker process that ever
    attached, in the directory every host and client holds. The guardian now drops the routes of clients on its
    machine whose process has ended (actors/process_identity.py)."""
    system = make_system("multiproc")
    prefixes = []
    for _ in range(3):
        out = subprocess.run([sys.executable, "-c", _DIE_ATTACHED, str(system.admin_port)], capture_output=True,
                             text=True, timeout=60, check=True)
        prefixes.append(out.stdout.strip())
    # Each registration looks (the second and third dropped those before them), and the guardian's tick every
    # CLIENT_SWEEP s; a live client's route stays.
    alive = system.probe("alive")

    def left() -> list[str]:
        system._refresh()  # (the directory as the guardian has it now)
        return [p for p in prefixes if p in system._router.routes]

    wait_for(lambda: not left(), timeout=30, interval=0.5)
    assert system.prefix in system._router.routes and alive.path.startswith(system.prefix)


def test_subscribing_the_same_path_to_dead_letters_again_keeps_one_subscription(system):
    """The guardian kept dead-letter subscribers in a list it only appended to: a path subscribed again (a monitor
    that subscribes each time it attaches) was kept once more and got every letter once more. Now kept once per
    path, as errors subscribers are; both are dropped with their client's route."""
    from actors.messages import DeadLetter
    from tests.actors.sample import Echo, Ping

    probe = system.probe()
    for _ in range(3):
        system.subscribe_dead_letters(probe.path)
    system.dead_letters()  # (the subscriptions have reached the guardian)
    system.spawn(Echo, "/user/echo")
    system.tell("/user/echo", ("fwd", "/user/ghost", Ping(2)), sender="/user/echo")
    system.tell("/user/echo", ("fwd", "/user/ghost", Ping(3)), sender="/user/echo")
    # (the guardian sends its letters to the probe in order: a second copy of the first would come before the next)
    letters = [probe.receive(timeout=5), probe.receive(timeout=5)]
    assert all(isinstance(letter, DeadLetter) for letter in letters)
    assert [letter.message for letter in letters] == [Ping(2), Ping(3)]


def test_a_host_caches_no_route_per_ask_it_answered(system):
    """Every ask replies to a path of its own (/temp/<client>/ask-N), looked up once: the host's router cached each
    one, ~120 bytes a reply kept until 500,000 paths were cached (~60 MB in every host answering asks), then
    dropped with the routes worth keeping. Clients' reply paths are cached apart now, a few thousand at most."""
    from actors.transport import _TEMP_CACHED
    from tests.actors.sample import Ping, Pong, RouteCache

    system.spawn(RouteCache, "/user/rc")
    before, _ = system.ask("/user/rc", "cached")
    for n in range(300):
        assert system.ask("/user/rc", Ping(n)) == Pong(n, "/user/rc")
    cached, replies = system.ask("/user/rc", "cached")
    assert cached <= before + 5 and replies <= _TEMP_CACHED


def test_a_router_keeps_a_bounded_number_of_reply_paths_and_routes_them_by_their_client():
    from actors.transport import _TEMP_CACHED, Router

    router = Router()
    router.replace({"/temp/c1": "addr-c1", "/user/a": "addr-a"}, 1)
    for n in range(2 * _TEMP_CACHED + 10):
        assert router.resolve(f"/temp/c1/ask-{n}")[1] == "addr-c1"
    assert router.resolve("/temp/c2/ask-1") is None and router.resolve("/user/a/7")[1] == "addr-a"
    assert len(router._temp) <= _TEMP_CACHED and len(router._cache) == 1
    router.replace({"/temp/c1": "addr-c1b"}, 2)  # (new routes: nothing cached holds the old address)
    assert router.resolve("/temp/c1/ask-1")[1] == "addr-c1b" and router.resolve("/user/a/7") is None


def test_a_host_caches_a_bounded_number_of_paths_nobody_serves(system):
    """A message to a path no route serves (misspelt, or one per request id) is looked up by the sending host, which
    cached the path as unknown: ~111 bytes per path until 500,000 were cached (~55 MB in every host and the
    guardian, which looks it up again). Paths nobody serves are cached a few thousand at most now."""
    from actors.transport import _MISSING_CACHED
    from tests.actors.sample import RouteCache

    system.spawn(RouteCache, "/user/rc")
    before, _ = system.ask("/user/rc", "cached")
    for round_ in range(3):  # (twice as many paths as are cached: those cached first are dropped)
        cached = system.ask("/user/rc", ("send-nowhere", _MISSING_CACHED * 2 // 3, round_))
        assert cached <= before + 5 + _MISSING_CACHED


def test_a_router_keeps_a_bounded_number_of_unknown_paths_and_every_known_one():
    from actors.transport import _MISSING_CACHED, Router

    router = Router()
    router.replace({"/user/a": "addr-a"}, 1)
    for n in range(2 * _MISSING_CACHED + 10):
        assert router.resolve(f"/user/nowhere/{n}") is None
        assert router.resolve(f"/user/a/{n % 100}")[1] == "addr-a"
    assert len(router._cache) <= 100 + _MISSING_CACHED and len(router._missing) <= _MISSING_CACHED
    assert router.resolve("/user/nowhere/1") is None and router.resolve("/user/a/7")[1] == "addr-a"
    router.replace({"/user/nowhere": "addr-n"}, 2)  # (new routes: no path stays cached as unknown)
    assert router.resolve(f"/user/nowhere/{2 * _MISSING_CACHED + 9}")[1] == "addr-n" and not router._missing

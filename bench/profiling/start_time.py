"""§35: actors.start("multiproc"), a spawn and an ask, and the shutdown, timed four times."""

import time

import actors
from tests.actors.sample import Echo, Ping

for _ in range(4):
    t = time.perf_counter()
    with actors.start("multiproc") as s:
        started = time.perf_counter()
        s.spawn(Echo, "/user/a")
        s.ask("/user/a", Ping(1))
        asked = time.perf_counter()
    print(f"start {started - t:.2f} s, spawn + ask {asked - started:.2f} s, shutdown {time.perf_counter() - asked:.2f} s")

"""What an idle persistent entity costs in memory: no stash deque, timer set or write list until it needs one,
and none kept once its stash drained, its timers are done and its writes are taken (an empty deque is 760 bytes,
an empty set 216, an empty list 56; bench/PROFILE.md §27)."""

from __future__ import annotations

import gc
import tracemalloc

import pytest

from tests.conftest import start_system, stop_system
from tests.persistence.footprint_actors import Lean
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)


def test_an_entity_holds_no_stash_or_timer_storage_before_or_after_using_them(psystem):
    psystem.spawn(Lean, "/user/lean", entities=True)
    probe = psystem.probe()
    assert psystem.ask("/user/lean/1", "storage") == ("tuple", "tuple", 0, 0, 0)
    # One batch: "b" and "c" wait in the stash while "a"'s persist is pending, then run in order.
    psystem.tell_many([("/user/lean/1", "a"), ("/user/lean/1", "b"), ("/user/lean/1", "c")], sender=probe.path)
    psystem.tell("/user/lean/1", "timer")
    done = wait_for(lambda: (s := psystem.ask("/user/lean/1", "storage"))[4] == 1 and s, 10)
    stash, timers, most_stashed, events, _ = done
    assert (events, most_stashed) == (3, 2)  # the stash was used, and every stashed command was persisted
    assert (stash, timers) == ("tuple", "tuple")  # and neither storage is kept afterwards


def test_an_idle_persistent_entity_takes_under_1200_bytes(tmp_path):
    """On the local base (the entities live in this process, where tracemalloc sees them): 783 bytes an entity
    measured, 1,831 with a stash deque, a timer set and a write list per entity (1,607 with the deque alone)."""
    system = start_system("local", tmp_path, journal=f"sqlite:///{tmp_path}/journal.db?synchronous=NORMAL")
    try:
        system.spawn(Lean, "/user/lean", entities=True)
        system.tell_many([(f"/user/lean/w{i}", "w") for i in range(100)])  # warm: the journal, caches
        assert system.ask("/user/lean/w99", "storage")[3] == 1
        n = 1000
        gc.collect()
        tracemalloc.start()
        try:
            before = tracemalloc.take_snapshot()
            system.tell_many([(f"/user/lean/e{i}", "e") for i in range(n)])
            assert system.ask(f"/user/lean/e{n - 1}", "storage")[3] == 1
            gc.collect()
            grown = sum(d.size_diff for d in tracemalloc.take_snapshot().compare_to(before, "filename"))
        finally:
            tracemalloc.stop()
        assert grown / n < 1200, f"an idle entity takes {grown / n:,.0f} bytes"
    finally:
        stop_system(system)

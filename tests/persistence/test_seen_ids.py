"""SeenIds: the dedup memory of IdempotentReceiver and of the Spark bridge (batch numbers, follow-up ids)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from persistence import SeenIds


def test_advancing_the_low_watermark_drops_ranges_and_keeps_later_ones():
    seen = SeenIds()
    for i in (3, 4, 10, 11, 20, 30):
        seen.add(i)
    seen.advance_to(9)
    assert seen.low == 11 and seen.state() == (11, ((20, 20), (30, 30)))
    assert 5 in seen and 15 not in seen and 20 in seen
    seen.advance_to(25)
    assert seen.state() == (25, ((30, 30),))
    seen.advance_to(29)
    assert seen.state() == (30, ())
    seen.advance_to(5)  # never backwards
    assert seen.low == 30 and seen.range_count == 0


def test_a_low_watermark_of_minus_one_counts_from_zero_as_batch_numbers_do():
    seen = SeenIds(-1)
    assert 0 not in seen and -1 in seen
    assert seen.add(0) and not seen.add(0) and seen.low == 0
    assert seen.add(2) and seen.above() == [2] and seen.low == 0
    assert seen.add(1) and seen.low == 2 and seen.above() == []


def test_of_and_above_round_trip_a_set_above_the_watermark():
    seen = SeenIds.of(4, [9, 7, 8, 12, 7, 3])
    assert seen.state() == (4, ((7, 9), (12, 12)))
    assert seen.above() == [7, 8, 9, 12] and seen.range_count == 2
    again = SeenIds.of(seen.low, seen.above())
    assert again.state() == seen.state()
    assert SeenIds(*seen.state()).state() == seen.state()
    assert SeenIds(4, [[7, 9], [12, 12]]).state() == seen.state()  # lists, as a JSON-like snapshot holds them
    assert SeenIds(4, iter([(7, 9)])).state() == (4, ((7, 9),))  # any iterable, read once


@pytest.mark.parametrize("low, ranges", [
    (4, ((5, 6),)),  # adjacent to the watermark: would be part of it
    (4, ((3, 6),)),  # below the watermark
    (0, ((7, 9), (10, 12))),  # adjacent ranges
    (0, ((7, 9), (2, 3))),  # not ascending
    (0, ((9, 7),)),  # start after end
])
def test_ranges_that_no_seen_ids_would_hold_are_refused_with_what_to_pass(low, ranges):
    with pytest.raises(ValueError, match=r"disjoint, ascending.*SeenIds\.state\(\)"):
        SeenIds(low, ranges)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["add", "add", "add", "discard", "advance"]), st.integers(0, 60)),
                max_size=200), st.booleans())
def test_seen_ids_answer_as_a_set_of_ids_does_whatever_the_order(ops, ascending):
    # The model: every id <= low, plus a set. Ids mostly ascending with gaps (one shard's share of a bridge's
    # ids) take add's fast path; any order takes the general one.
    if ascending:
        ops = sorted(ops, key=lambda op: op[1])
    seen, low, ids = SeenIds(), 0, set()
    for op, i in ops:
        if op == "add":
            assert seen.add(i) == (i > low and i not in ids), (op, i)
            if i > low:
                ids.add(i)
        elif op == "discard":
            seen.discard(i)
            if i <= low:  # (the watermark splits: the ids below stay seen)
                ids |= set(range(i + 1, low + 1))
                low = i - 1
            ids.discard(i)
        else:
            seen.advance_to(i)
            if i > low:
                low = i
                ids = {x for x in ids if x > low}
        while low + 1 in ids:  # (the model's watermark moves as SeenIds' does)
            low += 1
            ids.discard(low)
        assert seen.low == low and seen.above() == sorted(ids), (op, i)
        assert all((x in seen) == (x <= low or x in ids) for x in range(-1, 64))
        state_low, ranges = seen.state()
        assert SeenIds(state_low, ranges).state() == seen.state()  # (disjoint, ascending, non-adjacent, above low+1)


@settings(max_examples=300, deadline=None)
@given(st.integers(0, 10), st.sets(st.integers(1, 60)), st.integers(0, 10), st.sets(st.integers(1, 60)))
def test_merge_marks_seen_what_either_holds(low_a, ids_a, low_b, ids_b):
    # (DedupKept's replay: the dedup state a delete journaled, added to what the events left hold)
    seen, other = SeenIds.of(low_a, ids_a), SeenIds.of(low_b, ids_b)
    seen.merge(*other.state())
    assert all((x in seen) == (x in SeenIds.of(low_a, ids_a) or x in other) for x in range(-1, 64))
    assert SeenIds(*seen.state()).state() == seen.state()  # (disjoint, ascending, non-adjacent, above low+1)
    assert seen.state() == SeenIds.of(max(low_a, low_b), ids_a | ids_b).state()

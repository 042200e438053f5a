"""The delivery features Akka users asked for (issue 4, "Beyond Akka"), on both bases.

redelivery_backoff, max_delivery_attempts + dead_letter_path, redeliver_now, confirm_deliveries_up_to and
the IdempotentReceiver's memory bounded by gaps. Intervals are S-scaled like the Akka specs' tests.
"""

from __future__ import annotations

import itertools
import time

import pytest

from actors import SpawnFailed
from persistence import AtLeastOnceDelivery, ConfirmUpTo, DeadLetteredDelivery
from tests.persistence.beyond_actors import (
    BadStrategy,
    DedupReceiver,
    DurableSender,
    FeatureSender,
    GivesUpAtOnce,
    Item,
    Nack,
    NoBurst,
    NoRecoveryTime,
    NoRoom,
    NoStashRoom,
    Payload,
    Send,
    TooFast,
    WarnsBelowZero,
    endpoint,
    sender,
    unconfirmed,
)
from tests.waiting import wait_for

pytestmark = pytest.mark.timeout(60)
_ids = itertools.count(1000)


# ---- redelivery_backoff -------------------------------------------------------------------------------

def test_backoff_interval_grows_by_factor_and_is_capped():
    class Backoff(AtLeastOnceDelivery):
        redelivery_backoff = (0.5, 4.0, 2.0)

    a = Backoff()
    assert [a._interval(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 4.0, 4.0]
    a.redelivery_backoff = None
    assert a._interval(3) == a.redeliver_interval


def test_a_redelivery_period_its_timer_cannot_run_at_is_refused_naming_it(fs):
    # It started, then failed at its first deliver() with the timer's own error about an interval it never set.
    path = f"/user/too-fast-{next(_ids)}"
    with pytest.raises(SpawnFailed, match=r"TooFast.redeliver_interval must be a number of seconds from 0.002 "
                                          r"to 1e\+09, got 0.001: the RedeliveryTick runs every half of it"):
        fs.spawn(TooFast, path)


@pytest.mark.parametrize(("cls", "name", "value"), [(NoBurst, "redelivery_burst_limit", 0),
                                                     (GivesUpAtOnce, "max_delivery_attempts", 0)])
def test_a_redelivery_count_the_actor_sets_out_of_range_is_refused_naming_it(fs, cls, name, value):
    # A system's defaults were checked at start, an actor's own not: with redelivery_burst_limit = 0 it started, and
    # resent nothing, ever (measured: 1 transmission in 1.5 s at a 0.2 s interval, no error); a delivery recovery
    # restored was never sent at all.
    with pytest.raises(SpawnFailed, match=rf"{cls.__name__}.{name} must be an int of at least 1 \(.*\), got {value}"):
        fs.spawn(cls, f"/user/{cls.__name__.lower()}-{next(_ids)}")


@pytest.mark.parametrize(("cls", "expected"), [
    (NoRoom, r"NoRoom.max_unconfirmed_messages must be an int of at least 1 \(deliver\(\) beyond it raises\), got 0"),
    (WarnsBelowZero, "WarnsBelowZero.warn_after_number_of_unconfirmed_attempts must be a non-negative int"),
    (NoRecoveryTime, "NoRecoveryTime.recovery_event_timeout must be a number of seconds above 0, got 0"),
    (NoStashRoom, r"NoStashRoom.stash_capacity must be an int of at least 1 \(commands a persisting or recovering "
                  r"actor holds back\), or None \(unbounded\), got 0"),
], ids=["unconfirmed", "warn", "recovery", "stash"])
def test_a_setting_a_class_sets_out_of_range_fails_the_spawn_naming_it(fs, cls, expected):
    # Only start()'s defaults were checked: max_unconfirmed_messages = 0 failed every deliver(),
    # warn_after_number_of_unconfirmed_attempts = -1 never warned, recovery_event_timeout = 0 failed every recovery
    # after the spawn had succeeded; stash_capacity = 0 overflowed with every command that came during a recovery or
    # behind a persist (Akka Typed refuses it; classic Akka reads <= 0 as unbounded, None here).
    path = f"/user/bad-setting-{next(_ids)}"
    with pytest.raises(SpawnFailed, match=rf"failed to start: ConfigError: {expected}"):
        fs.spawn(cls, path)


def test_a_bad_stash_overflow_strategy_fails_the_spawn_leading_with_it(fs):
    # It was a ValueError: the SpawnFailed began "Traceback (most recent call last):", its cause at the very end.
    path = f"/user/bad-strategy-{next(_ids)}"
    with pytest.raises(SpawnFailed) as failed:
        fs.spawn(BadStrategy, path)
    assert str(failed.value).splitlines()[0] == (
        f"{path} failed to start: ConfigError: internal_stash_overflow_strategy of BadStrategy must be \"throw\", "
        "\"drop\" or ReplyToStrategy(response), got 'bounce'"), str(failed.value)


def test_redelivery_backoff_spaces_attempts(fs):
    lo, hi, factor = 0.1, 0.4, 2.0
    path, _ = sender(fs, backoff=(lo, hi, factor))
    dst, probe = endpoint(fs, "silent")
    fs.ask(path, Send(dst, "x"))
    arrivals = []
    for _ in range(7):
        assert probe.receive(10) == Payload(1, "x")
        arrivals.append(time.monotonic())
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    minimum = [min(hi, lo * factor ** k) for k in range(6)]  # 0.1, 0.2, 0.4, 0.4, 0.4, 0.4
    # A resend never comes before its backoff (20 % allowed for transport jitter between two copies) ...
    assert all(g >= 0.8 * m for g, m in zip(gaps, minimum, strict=True)), (gaps, minimum)
    # ... and the cap holds: uncapped, the last gaps would be 0.8, 1.6 and 3.2 s.
    assert max(gaps[3:]) < 0.8 * lo * factor ** 4, gaps


# ---- max_delivery_attempts + dead_letter_path -------------------------------------------------------------

def exhaust(fs, cls):
    dlq, dlq_probe = endpoint(fs, "dlq")
    path, reports = sender(fs, cls, interval=0.3 * 0.3, max_attempts=3, dlq=dlq)
    dst, probe = endpoint(fs, "silent")
    assert fs.ask(path, Send(dst, "x")) == ("queued", 1)
    assert probe.receive_many(3, 10) == [Payload(1, "x")] * 3
    dead = dlq_probe.receive(10)
    assert dead == DeadLetteredDelivery(2, 1, dst, Payload(1, "x"), 3, path)
    wait_for(lambda: unconfirmed(fs, path) == 0, 10)  # removed, and the dead letter was confirmed
    probe.expect_no_message(0.3)
    return path, reports, probe, dlq_probe


def test_exhausted_delivery_goes_to_the_dead_letter_path_and_the_hook_persists_it(fs):
    path, reports, probe, dlq_probe = exhaust(fs, FeatureSender)
    assert reports.receive(10) == ("exhausted", 1, 3)
    fs.tell(path, "boom")  # replay: the Exhausted event confirms 1 and re-derives the dead letter's id 2
    assert unconfirmed(fs, path) == 0
    assert fs.ask(path, "last-delivery-id") == 2
    probe.expect_no_message(0.3)
    dlq_probe.expect_no_message(0.1)


def test_durable_delivery_journals_exhaustion(fs):
    path, _, probe, dlq_probe = exhaust(fs, DurableSender)
    fs.tell(path, "boom")
    assert unconfirmed(fs, path) == 0
    assert fs.ask(path, "last-delivery-id") == 2
    probe.expect_no_message(0.3)  # not redelivered, and not dead-lettered a second time
    dlq_probe.expect_no_message(0.1)


# ---- redeliver_now ------------------------------------------------------------------------------------------

def test_redeliver_now_resends_at_once(fs):
    path, reports = sender(fs, interval=30.0)
    dst, probe = endpoint(fs, "nack")
    fs.ask(path, Send(dst, "x"))
    # The second copy comes from the nack, not from the 30 s redelivery.
    assert probe.receive_many(2, 10) == [Payload(1, "x")] * 2
    assert reports.receive(10) == ("nack", True)
    wait_for(lambda: unconfirmed(fs, path) == 0, 10)
    fs.tell(path, Nack(1))
    assert reports.receive(10) == ("nack", False)  # confirmed ids (and unknown ones) are not resent


# ---- confirm_deliveries_up_to ----------------------------------------------------------------------------------

def test_confirm_deliveries_up_to_is_cumulative_and_survives_restart(fs):
    path, _ = sender(fs, interval=30.0)
    dst, probe = endpoint(fs, "silent")
    for i in range(10):
        fs.ask(path, Send(dst, f"m{i}"))
    probe.receive_many(10, 10)
    assert fs.ask(path, ConfirmUpTo(6)) == ("confirmed", 6)
    assert fs.ask(path, ConfirmUpTo(6)) == ("confirmed", 0)
    assert unconfirmed(fs, path) == 4
    fs.tell(path, "boom")
    assert unconfirmed(fs, path) == 4
    assert sorted(p.delivery_id for p in probe.receive_many(4, 10)) == [7, 8, 9, 10]  # the post-replay burst


def test_cumulative_confirms_from_another_process_with_durable_delivery(fs):
    path, _ = sender(fs, DurableSender, interval=30.0)
    dst, probe = endpoint(fs, "cumul")  # a separate host (process, on multiproc): ConfirmUpTo at 5 and 10
    for i in range(10):
        fs.tell(path, Send(dst, f"m{i}"))
    assert [p.delivery_id for p in probe.receive_many(10, 10)] == list(range(1, 11))
    wait_for(lambda: unconfirmed(fs, path) == 0, 10)
    fs.tell(path, "boom")
    assert unconfirmed(fs, path) == 0
    probe.expect_no_message(0.3)


def test_a_cumulative_confirm_confirms_only_the_deliveries_made_to_its_sender(fs):
    # Delivery ids are numbered across destinations: cumul's ConfirmUpTo(5) once confirmed silent's 2 and 4 too,
    # which it never saw, and they were never resent.
    path, _ = sender(fs, DurableSender, interval=30.0)
    cumul, cumul_probe = endpoint(fs, "cumul")  # ConfirmUpTo at every 5th delivery id it gets
    silent, silent_probe = endpoint(fs, "silent")
    for i in range(1, 11):
        fs.tell(path, Send(cumul if i % 2 else silent, f"m{i}"))
    assert [p.delivery_id for p in cumul_probe.receive_many(5, 10)] == [1, 3, 5, 7, 9]
    assert [p.delivery_id for p in silent_probe.receive_many(5, 10)] == [2, 4, 6, 8, 10]
    wait_for(lambda: unconfirmed(fs, path) == 7, 10)  # 1, 3 and 5 confirmed by ConfirmUpTo(5)
    fs.tell(path, ConfirmUpTo(10))  # no sender: whose deliveries it confirms cannot be told
    assert unconfirmed(fs, path) == 7
    fs.tell(path, "boom")  # the confirms were journaled as the ids they confirmed
    assert unconfirmed(fs, path) == 7
    assert sorted(p.delivery_id for p in silent_probe.receive_many(5, 10)) == [2, 4, 6, 8, 10]  # resent after replay


# ---- IdempotentReceiver ---------------------------------------------------------------------------------------

def test_idempotent_receiver_memory_is_bounded_by_gaps(fs):
    n = next(_ids)
    fs.spawn(DedupReceiver, path=f"/user/dedup{n}", entities=True)
    path = f"/user/dedup{n}/r"
    probe = fs.probe()
    gaps = {100, 500, 501, 900}
    fs.tell_many([(path, Item(i)) for i in range(1, 1001) if i not in gaps], sender=probe.path)
    probe.tell(path, "status")
    assert probe.receive(10) == (996, 996, 3)  # watermark 99, then ranges 101-499, 502-899, 901-1000
    probe.tell(path, "snap")
    assert probe.receive(10) == "saved"
    probe.tell(path, "boom")  # recovers from the snapshot alone: its events were deleted
    probe.tell(path, "status")
    assert probe.receive(10) == (996, 996, 3)
    fs.tell_many([(path, Item(i)) for i in range(1, 1001)], sender=probe.path)  # every id again
    probe.tell(path, "status")
    assert probe.receive(10) == (1000, 1000, 0)  # only the four gaps applied; one watermark left

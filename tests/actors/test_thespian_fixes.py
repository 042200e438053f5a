"""Thespian 4.0.1 bugs fixed by actors.thespian_fixes, reproduced with plain Thespian actors."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.timeout(60)


def test_a_wakeup_expiring_during_a_tx_only_drain_is_delivered(make_system):
    """Thespian dropped it (the timer never fired); now it fires as soon as the sending handler returns."""
    asys = make_system("multiproc")._asys  # plain Thespian actors, created by the admin (patched at boot)
    sink = asys.createActor("tests.actors.raw_thespian.StalledSink")
    flooder = asys.createActor("tests.actors.raw_thespian.Flooder")
    # 1,000 queued transmits pass THESPIAN_MAX_QUEUED_TRANSMITS (950): the flooder's sends block in the
    # tx-only drain while the sink sleeps, and the 50 ms wakeup expires in there.
    assert asys.ask(flooder, ("flood", sink, 1000), 30) == "sent"
    woke = asys.listen(10)
    assert woke is not None, "the wakeup that expired during the tx-only drain never arrived"
    assert woke[0] == "woke" and woke[1] < 2.0, woke


def test_two_actors_flooding_each_other_over_new_connections_do_not_deadlock(make_system):
    """Each drained its queue without accepting the other's new connection: both waited for timeouts."""
    asys = make_system("multiproc")._asys
    a = asys.createActor("tests.actors.raw_thespian.Peer")
    b = asys.createActor("tests.actors.raw_thespian.Peer")
    # Both sleep, then flood each other at once: each must accept the other's first connection while
    # its own sends are queued past THESPIAN_MAX_QUEUED_TRANSMITS (Reprise sets 128).
    asys.tell(a, ("flood", b, 2000, 0.5))
    asys.tell(b, ("flood", a, 2000, 0.5))
    done = [asys.listen(20), asys.listen(20)]
    assert all(isinstance(d, tuple) and d[0] == "sent" for d in done), f"a flooder is stuck: {done}"


def test_backoff_pauses_on_a_socket_are_capped():
    # Thespian grows the pause before it looks at a socket again by 1.7x up to 7.3 s: an ACK from a peer busy
    # for a second was read up to 8 s late (a round of test_a_host_sigkilled_50_times_... took 8 s).
    from datetime import timedelta

    from thespian.system import transport

    import actors.thespian_fixes as fixes

    pause = timedelta(0)
    for _ in range(30):
        pause = transport.backoffDelay(pause)
    assert pause == fixes.MAX_BACKOFF <= timedelta(milliseconds=200)

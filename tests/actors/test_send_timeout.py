"""A client's send its host never takes: SendTimeout after the send's limit, and the client's other calls go on."""

from __future__ import annotations

import time

import pytest

import actors
from tests.actors.sample import Echo, Ping, Pong
from tests.actors.shutdown_audit_actors import Slow


@pytest.mark.timeout(120)
def test_a_tell_its_host_never_takes_raises_send_timeout_and_the_client_s_other_calls_go_on(make_system):
    # System._transmit took a run of the transport that ended with its time up for "sent": such a tell returned
    # after its limit as if sent (no SendTimeout, as README promises), and, the send still pending, every later call
    # of the client waited its whole limit for it (asks and directory fetches timed out from then on).
    system = make_system("multiproc")
    system.spawn(Slow, "/user/busy")
    system.spawn(Echo, "/user/echo")
    system.tell("/user/busy", ("sleep", 600.0))  # (taken, then its host reads nothing more)
    started = time.monotonic()
    # (it names the path told, not "Batch to ActorAddr-(T|:port)")
    with pytest.raises(actors.SendTimeout, match=r"str to /user/busy \(host at ActorAddr-.*\) was not sent within 2 s"):
        system.tell_many([("/user/busy", "ignore")], limit=2.0)
    assert time.monotonic() - started < 10.0
    started = time.monotonic()
    assert system.ask("/user/echo", Ping(1), timeout=10) == Pong(1, "/user/echo")
    assert "/user/echo" in system.directory(timeout=10).routes
    assert time.monotonic() - started < 5.0
    system.shutdown(timeout=2.0)  # (the busy host's handler does not end: killed after 2 s, not the default 20)


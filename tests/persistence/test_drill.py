"""Cross-process drill: SIGKILL the sender host mid-stream, then the destination host; nothing lost or doubled."""

from __future__ import annotations

import os
import signal

import pytest

from tests.persistence.fixtures import Consumer, PatientProducer, Produce, Producer
from tests.waiting import wait_for

N = 10_000


def status(system, path):
    try:
        return system.ask(path, "status", 2)
    except Exception:
        return None


def kill(system, path):
    pid = system.status().hosts[path].pid
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: (h := system.status().hosts.get(path)) is not None and h.pid not in (None, pid), 30)


@pytest.mark.timeout(150)
def test_sigkill_sender_then_destination(make_system, tmp_path):
    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/j.db",
                         snapshot_store=f"sqlite:///{tmp_path}/s.db")
    system.spawn(Consumer, path="/user/consumer")
    system.spawn(Producer, path="/user/producer")
    system.tell("/user/producer", Produce(N, "/user/consumer"))
    wait_for(lambda: (s := status(system, "/user/consumer")) and s[0] >= N // 5, 60)
    kill(system, "/user/producer")
    # Commands lost with the killed process are re-sent; the producer remembers how far it got.
    system.tell("/user/producer", Produce(N, "/user/consumer"))
    wait_for(lambda: (s := status(system, "/user/consumer")) and s[0] >= N // 2, 60)
    kill(system, "/user/consumer")
    system.tell("/user/producer", Produce(N, "/user/consumer"))

    def done():
        p, c = status(system, "/user/producer"), status(system, "/user/consumer")
        return p and c and p == (N, 0) and c[0] == N and (p, c)

    p, c = wait_for(done, 90)
    assert c[1] == 0, f"{c[1]} items applied twice"
    assert c[2] == 0


@pytest.mark.timeout(120)
def test_deliveries_lost_with_a_killed_destination_are_resent_at_once(make_system, tmp_path):
    """The destination host dies with deliveries in its mailbox: they come again when it is back, not
    after the sender's redeliver interval (a minute here)."""
    n = 20_000
    system = make_system("multiproc", journal=f"sqlite:///{tmp_path}/j.db",
                         snapshot_store=f"sqlite:///{tmp_path}/s.db")
    system.spawn(Consumer, path="/user/consumer")
    system.spawn(PatientProducer, path="/user/producer")
    system.tell("/user/producer", Produce(n, "/user/consumer"))
    wait_for(lambda: (s := status(system, "/user/consumer")) and s[0] >= 1000, 60)
    kill(system, "/user/consumer")

    def done():
        p, c = status(system, "/user/producer"), status(system, "/user/consumer")
        return p and c and p == (n, 0) and c[0] == n and (p, c)

    p, c = wait_for(done, 45)  # < PatientProducer.redeliver_interval: only the prompt resend gets here
    assert c[1] == 0, f"{c[1]} items applied twice"

"""examples/at_least_once.py runs on both bases: losses and a sender restart end with everything confirmed."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys

import pytest

from actors.system import tagged_pids
from examples import at_least_once
from tests.conftest import SESSION_TOKEN

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
_n = itertools.count(1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("base", ["local", "multiproc"])
def test_both_senders_redeliver_the_lost_message_and_recover_after_restart(base, capsys):
    tag = f"{SESSION_TOKEN}-alo-{next(_n)}-"
    assert at_least_once.run(base, tag=tag) == 0
    out = capsys.readouterr().out
    for sender in ("/user/alod-sender", "/user/durable-sender"):
        assert f"journal of {sender}:" in out
    # Each sender: b and d dropped once, then b redelivered on the timer and d after the restart.
    assert out.count("Msg(2, 'b') first copy: dropped") == 2
    assert out.count("Msg(2, 'b') again (a redelivery): confirmed") == 2
    assert out.count("Msg(4, 'd') again (a redelivery): confirmed") == 2
    assert out.count("sender stopped with d unconfirmed") == 2
    # Akka's example journals the intent and the confirms as the user's own events ...
    assert "MsgSent(s='d')" in out and "MsgConfirmed(delivery_id=4)" in out
    # ... DurableDelivery journals them for the sender.
    assert "DeliveriesSent(delivery_ids=(4,)" in out and "DeliveriesConfirmed(delivery_ids=(4,)" in out
    assert "OK: every message was confirmed" in out
    assert tagged_pids(tag) == []


@pytest.mark.timeout(120)
def test_runs_as_a_module_on_the_multiproc_base():
    # As a script the module is __main__; actor processes must still import its classes by name.
    proc = subprocess.run([sys.executable, "-m", "examples.at_least_once"], cwd=ROOT,
                          capture_output=True, text=True, timeout=100)
    assert proc.returncode == 0, proc.stderr
    assert "OK: every message was confirmed" in proc.stdout

"""ProcessIdentity: how a guardian tells that a client on its machine has ended (actors/process_identity.py)."""

from __future__ import annotations

import dataclasses
import pickle
import subprocess
import sys

import pytest

from actors.process_identity import ProcessIdentity, this_process
from tests.waiting import wait_for

pytestmark = [pytest.mark.timeout(60),
              pytest.mark.skipif(this_process() is None, reason="no /proc here: clients are known by bounces only")]


def test_this_process_is_not_gone() -> None:
    me = this_process()
    assert me is not None and not me.is_gone()


def test_a_process_that_ended_is_gone_even_before_it_is_reaped() -> None:
    child = subprocess.Popen([sys.executable, "-c",
                              "import pickle, sys; from actors.process_identity import this_process; "
                              "sys.stdout.buffer.write(pickle.dumps(this_process())); sys.stdout.flush(); "
                              "sys.stdin.read()"],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        assert child.stdout is not None and child.stdin is not None
        identity = pickle.load(child.stdout)
        assert isinstance(identity, ProcessIdentity) and identity.pid == child.pid and not identity.is_gone()
        child.stdin.close()
        # (not waited for: a zombie until reaped, which is gone too)
        wait_for(identity.is_gone, timeout=20)
    finally:
        child.wait(20)
    assert identity.is_gone()


def test_a_reused_pid_is_not_the_process_that_had_it() -> None:
    me = this_process()
    assert me is not None
    assert dataclasses.replace(me, start=me.start + 1).is_gone()


def test_a_process_of_another_machine_or_pid_namespace_is_never_taken_for_gone() -> None:
    me = this_process()
    assert me is not None
    elsewhere = dataclasses.replace(me, space="another-boot pid:[1]", pid=2**22 + 7)
    assert not elsewhere.is_gone()

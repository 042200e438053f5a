"""A client that receives a message whose class it cannot import: a dead letter, and the rest arrives."""

from __future__ import annotations

import sys
import uuid

import pytest

from tests.waiting import dead_letters_reach

HOST_ONLY = '''
from dataclasses import dataclass

import actors


@dataclass(frozen=True)
class OnlyOnHost:
    n: int


class Sender(actors.Actor):
    """Sends OnlyOnHost(1) and then 2 to the path it is given, in one batch."""

    def receive(self, message, sender):
        self.tell(message, OnlyOnHost(1))
        self.tell(message, 2)
'''


@pytest.mark.timeout(120)
def test_a_message_the_client_cannot_import_is_a_dead_letter_and_the_rest_of_its_batch_arrives(
        make_system, tmp_path) -> None:
    name = f"host_only_{uuid.uuid4().hex[:8]}"
    (tmp_path / f"{name}.py").write_text(HOST_ONLY)
    # The actor processes start with this process's sys.path: they can import the module, and this
    # (client) process, once the directory is off its path again, cannot.
    sys.path.insert(0, str(tmp_path))
    try:
        system = make_system("multiproc")
    finally:
        sys.path.remove(str(tmp_path))
    assert name not in sys.modules and str(tmp_path) not in sys.path
    system.spawn(f"{name}:Sender", "/user/sender")
    probe = system.probe()
    system.tell("/user/sender", probe.path)
    assert probe.receive(timeout=10) == 2
    letters = dead_letters_reach(system, 1).recent
    assert [letter.target for letter in letters] == [probe.path]
    assert "cannot be unpickled by the receiving process" in letters[0].reason
    assert f"{name}.OnlyOnHost" in letters[0].reason

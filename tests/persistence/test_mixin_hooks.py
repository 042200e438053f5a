"""PersistentActor's public mixin_* hooks, as a mixin outside persistence uses them; Actor.stop_requested."""

from __future__ import annotations

import pytest

from tests.persistence.mixin_actors import Bump, Notes

pytestmark = pytest.mark.timeout(60)


def test_a_mixin_handles_its_own_commands_events_and_snapshot_part_through_the_public_hooks(psystem):
    psystem.spawn(Notes, path="/user/notes", entities=True)
    probe = psystem.probe()
    path = "/user/notes/a"
    for m in ("x", Bump(), "y", Bump(), 3):
        probe.tell(path, m)
    assert probe.receive(10) == ("unhandled", "int")  # the mixin passed a command it does not own on
    probe.tell(path, "state")
    assert probe.receive(10) == (2, ["x", "y"], ["completed"])

    psystem.stop(path)
    probe.tell(path, "state")  # a new instance: recovery replays the mixin's events to the mixin only
    assert probe.receive(10) == (2, ["x", "y"], ["x", "y", "completed"])

    probe.tell(path, "snap")
    assert probe.receive(10) == "saved"  # SaveSnapshotSuccess went through the mixin to receive_command
    probe.tell(path, Bump())
    probe.tell(path, "z")
    probe.tell(path, "state")
    assert probe.receive(10) == (3, ["x", "y", "z"], ["x", "y", "completed"])
    psystem.stop(path)
    probe.tell(path, "state")  # the user's receive_recover is offered its own snapshot, unwrapped
    assert probe.receive(10) == (3, ["x", "y", "z"], [("offer", ("x", "y")), "z", "completed"])


def test_stop_requested_is_false_until_stop_is_called(psystem):
    psystem.spawn(Notes, path="/user/notes", entities=True)
    probe = psystem.probe()
    assert not Notes().stop_requested
    probe.tell("/user/notes/s", "stop")
    assert probe.receive(10) == ("stop_requested", True)
    probe.tell("/user/notes/s", "state")  # stopped: a new instance, nothing requested
    assert probe.receive(10) == (0, [], ["completed"])


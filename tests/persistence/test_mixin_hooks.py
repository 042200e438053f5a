"""PersistentActor's public mixin_* hooks, as a mixin outside persistence uses them; overrides of receive; Actor.stop_requested."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from persistence import AtLeastOnceDelivery, DurableDelivery, IdempotentReceiver, PersistentActor
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




@pytest.mark.timeout(10)
@pytest.mark.parametrize("base", [PersistentActor, AtLeastOnceDelivery, DurableDelivery, IdempotentReceiver],
                         ids=lambda b: b.__name__)
def test_an_override_of_receive_that_never_passes_messages_on_is_refused_naming_the_fix(base):
    # It swallowed the persistence layer's own messages silently: an AtLeastOnceDelivery never resent anything
    # (its RedeliveryTick), a DurableDelivery never took a Confirm, a failed RecoveryCompleted handler restarted
    # nothing; and commands were not stashed behind persist.
    with pytest.raises(TypeError, match=r"Greeter\.receive overrides PersistentActor\.receive without calling "
                                        r"super\(\)\.receive.*RedeliveryTick.*receive_command\(message, sender\)"):
        class Greeter(base):  # type: ignore[valid-type,misc]
            def receive(self, message: Any, sender: str | None) -> None:
                if message == "hello":
                    self.tell(sender, "hi")

    with pytest.raises(TypeError, match=r"Batched\.receive_batch overrides PersistentActor\.receive_batch without "
                                        r"calling super\(\)\.receive_batch"):
        class Batched(base):  # type: ignore[valid-type,misc]
            def receive_batch(self, messages: Iterator[tuple[Any, str | None]]) -> None:
                for message, sender in messages:
                    self.receive_command(message, sender)


@pytest.mark.timeout(10)
def test_overrides_of_receive_that_pass_messages_on_are_accepted():
    class Filters(AtLeastOnceDelivery):
        def receive(self, message: Any, sender: str | None) -> None:
            if message != "ignored":
                super().receive(message, sender)

    class Delegates(AtLeastOnceDelivery):
        def receive(self, message: Any, sender: str | None) -> None:
            def on() -> None:  # (the call to the inherited receive in a nested function)
                PersistentActor.receive(self, message, sender)
            on()

    class Batched(IdempotentReceiver):
        def receive_batch(self, messages: Iterator[tuple[Any, str | None]]) -> None:
            for message, sender in messages:
                self.receive(message, sender)

    class ThroughItsOwnMethod(AtLeastOnceDelivery):  # (the inherited receive is called from a helper of its own)
        def receive(self, message: Any, sender: str | None) -> None:
            if message != "ignored":
                self._pass_on(message, sender)

        def _pass_on(self, message: Any, sender: str | None) -> None:
            super().receive(message, sender)

    class ThroughAFunction(IdempotentReceiver):
        def receive(self, message: Any, sender: str | None) -> None:
            _hand_on(self, message, sender)

    class ByName(DurableDelivery):  # (dispatch by name: what it calls cannot be seen)
        def receive(self, message: Any, sender: str | None) -> None:
            getattr(self, f"on_{type(message).__name__}", self.fallback)(message, sender)

        def fallback(self, message: Any, sender: str | None) -> None:
            pass

    accepted = (Filters, Delegates, Batched, ThroughItsOwnMethod, ThroughAFunction, ByName)
    assert [c.__name__ for c in accepted] == ["Filters", "Delegates", "Batched", "ThroughItsOwnMethod",
                                              "ThroughAFunction", "ByName"]


def _hand_on(actor: PersistentActor, message: Any, sender: str | None) -> None:
    PersistentActor.receive(actor, message, sender)

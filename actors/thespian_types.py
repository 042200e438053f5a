"""The Thespian types Reprise relies on, described as Protocols: Thespian ships no type information.

mypy sees every name imported from `thespian` as `Any` (see pyproject.toml's overrides), so annotating
with `thespian.actors.ActorAddress` would check nothing. These Protocols name only what Reprise uses,
so that a path (a str) or None passed where an address belongs is a type error.
"""

from __future__ import annotations

from typing import Protocol


class Address(Protocol):
    """A Thespian actor address (thespian.actors.ActorAddress): opaque, picklable, compared by value, not hashable."""

    @property
    def actorAddressString(self) -> str:
        """The address as text (for display and as a key; see actors.transport.address_key)."""


class Intent(Protocol):
    """A Thespian send in progress (thespian.system.transport.TransmitIntent), as its callbacks see it."""

    @property
    def targetAddr(self) -> Address:
        """Where the message goes."""

    @property
    def message(self) -> object:
        """What is sent (a Batch for Reprise's own sends)."""

"""The registered types of the format-1 fixture journal (tests/journal/fixtures/format1.db), as read today.

The fixture was written by the code of main before the flat format (tests/journal/fixtures/make_format1.py,
run against that code); its manifests are pinned here, so these classes may move but not be renamed
in storage. `Renamed` is version 2 here: the fixture holds version 1 records, upcast on reading.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from journal import register_type, register_upcaster


@register_type(manifest="fixture.Leaf")
@dataclass(frozen=True)
class Leaf:
    """A registered leaf with a bytes and a float field."""

    amount: int
    note: bytes
    ratio: float


@register_type(manifest="fixture.Node")
@dataclass(frozen=True)
class Node:
    """A registered object holding anything: nested tuples, sets, frozensets, lists, dicts, objects."""

    name: str
    children: Any
    extra: Any = None


@register_type(manifest="fixture.Empty")
@dataclass(frozen=True)
class Empty:
    """A registered object without fields."""


@register_type(manifest="fixture.Renamed", version=2)
@dataclass(frozen=True)
class Renamed:
    """Version 2; version 1 was Renamed(amount) and is upcast with the currency 'EUR'."""

    amount: int
    currency: str


def _v1_to_v2(fields: list[Any]) -> list[Any]:
    return [fields[0], "EUR"]


register_upcaster("fixture.Renamed", 1, _v1_to_v2)

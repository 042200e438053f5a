"""Decoding builds the objects the classes' own constructors build, validation included."""

from __future__ import annotations

import dataclasses
import sys
from dataclasses import InitVar, dataclass, field
from typing import Any, ClassVar

import pytest

from journal import SerializationError, register_type, unregister_type
from journal.serialization import _by_class, deserialize, serialize


@register_type(manifest="test.decoding.Plain")
@dataclass(frozen=True)
class Plain:
    a: int
    b: Any = None
    c: list = field(default_factory=list)
    LIMIT: ClassVar[int] = 3


@register_type(manifest="test.decoding.Checked")
@dataclass(frozen=True)
class Checked:
    amount: int

    def __post_init__(self) -> None:
        if self.amount < 0:
            raise ValueError("negative amount")


@register_type(manifest="test.decoding.Slotted")
@dataclass(frozen=True, slots=True)
class Slotted:
    a: int
    b: str


@register_type(manifest="test.decoding.KwOnly")
@dataclass(frozen=True, kw_only=True)
class KwOnly:
    a: int


@register_type(manifest="test.decoding.WithInitVar")
@dataclass(frozen=True)
class WithInitVar:
    a: int
    scale: InitVar[int] = 1

    def __post_init__(self, scale: int) -> None:
        object.__setattr__(self, "a", self.a * scale)


@register_type(manifest="test.decoding.Derived")
@dataclass(frozen=True)
class Derived:
    a: int
    notes: list = field(init=False, default_factory=list)  # set by __init__ itself


@register_type(manifest="test.decoding.OwnInit")
@dataclass(frozen=True)
class OwnInit:
    a: int

    def __init__(self, a: int) -> None:
        object.__setattr__(self, "a", a + 1000)


def test_a_plain_frozen_dataclass_comes_back_equal_with_the_same_instance_dict() -> None:
    original = Plain(1, (Plain(2), {"k": [3]}), [Plain(4, None, [5])])
    back = deserialize(serialize([original, original]))[1]
    assert back == original and type(back.b[0]) is Plain
    assert list(vars(back)) == ["a", "b", "c"] and vars(back) == vars(original)
    assert sys.getsizeof(vars(back)) == sys.getsizeof(vars(original))  # still a key-sharing dict
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.a = 5  # type: ignore[misc]


def test_classes_whose_constructor_does_more_are_built_by_it() -> None:
    assert deserialize(serialize(Checked(5))) == Checked(5)
    bad = serialize(Checked(5)).replace(b"\x05", b"\xff")  # -1: __post_init__ must still refuse it
    with pytest.raises(SerializationError, match="negative amount"):
        deserialize(bad)
    assert deserialize(serialize(Slotted(1, "x"))) == Slotted(1, "x")
    assert deserialize(serialize(OwnInit(1))) == OwnInit(1001)  # as before: stored 1001, built as 2001
    assert deserialize(serialize(WithInitVar(2, 3))) == WithInitVar(6)
    assert vars(deserialize(serialize(Derived(4)))) == {"a": 4, "notes": []}
    # Its fields were passed positionally, which a kw_only __init__ refuses: stored, acknowledged, never readable.
    assert deserialize(serialize(KwOnly(a=1))) == KwOnly(a=1)
    for cls in (Checked, OwnInit, WithInitVar, KwOnly, Derived, SlotsAndDict):
        assert _by_class[cls].make.__name__ == "call"  # (its constructor runs)


def test_a_class_its_fields_cannot_build_is_refused_when_registered() -> None:
    # An InitVar (or an __init__ parameter) without a default is not stored: its events were written and
    # acknowledged, then every read failed.
    @dataclass(frozen=True)
    class Needs:
        amount: int
        euros: InitVar[int]

    with pytest.raises(TypeError, match=r"Needs\(\) needs euros, which is not a field .* give it a default"):
        register_type(Needs, manifest="test.decoding.Needs")
    assert Needs not in _by_class


def test_a_kw_only_field_is_built_by_keyword_after_positional_ones() -> None:
    @dataclass(frozen=True)
    class Mixed:
        a: int
        b: int = field(kw_only=True)
        c: str = "x"

    register_type(Mixed, manifest="test.decoding.Mixed")
    try:
        assert deserialize(serialize(Mixed(1, b=2, c="y"))) == Mixed(1, b=2, c="y")
    finally:
        unregister_type(Mixed)
    assert _by_class[Plain].make.__name__ == _by_class[Slotted].make.__name__ == "make"  # (slots set directly)


def test_fewer_stored_fields_take_the_defaults_and_more_are_refused() -> None:
    manifest = "test.decoding.Evolving"

    @dataclass(frozen=True)
    class Short:
        a: int

    @dataclass(frozen=True)
    class Long:
        a: int
        b: int
        c: int = 7

    register_type(Short, manifest=manifest)
    short = serialize(Short(1))
    unregister_type(Short)
    register_type(Long, manifest=manifest)
    try:
        long = serialize(Long(1, 2, 3))
        with pytest.raises(SerializationError, match="missing 1 required positional argument: 'b'"):
            deserialize(short)  # b has no default: the constructor's own error
        unregister_type(Long)

        @dataclass(frozen=True)
        class Defaults:
            a: int
            b: int = 5

        register_type(Defaults, manifest=manifest)
        assert deserialize(short) == Defaults(1, 5)
        with pytest.raises(SerializationError, match="positional argument"):
            deserialize(long)
    finally:
        unregister_type(manifest)


@dataclass(frozen=True, slots=True)
class SlottedBase:
    a: int


@register_type(manifest="test.decoding.SlotsAndDict")
@dataclass(frozen=True)
class SlotsAndDict(SlottedBase):  # `a` in the base's slot, `b` in the instance dict
    b: int


def test_slotted_and_mixed_classes_come_back_equal_in_both_formats() -> None:
    from journal import AtomicWrite, PersistentRepr
    from journal.records import decode_rows, encode_writes

    for value in (Slotted(1, "x"), SlotsAndDict(1, 2), [Slotted(2, "y"), (SlotsAndDict(3, 4),)]):
        assert deserialize(serialize(value)) == value
        [(pid, seq, blob, ck)] = encode_writes([AtomicWrite([PersistentRepr(value, 1, "p")])], 1)[0].rows
        assert decode_rows(pid, [(seq, blob, ck)])[0].payload == value
    back = deserialize(serialize(Slotted(5, "z")))
    assert (back.a, back.b) == (5, "z") and not hasattr(back, "__dict__")

"""The stored byte format is pinned: serialize and encode_writes write exactly what they always wrote.

The literals below were produced by the code before the encoder reused its Packers (msgpack.packb per
nested object); `reference_packb` spells that format out naively so generated values can be compared too.
"""

from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgpack import ExtType

from journal import AtomicWrite, PersistentRepr, SerializationError, register_type
from journal.records import decode_rows, encode_writes
from journal.serialization import deserialize, serialize


@register_type(manifest="test.bytes.Leaf", version=3)
@dataclass(frozen=True)
class Leaf:
    amount: int


@register_type(manifest="test.bytes.Node")
@dataclass(frozen=True)
class Node:
    name: str
    children: Any
    extra: Any = None


@dataclass(frozen=True)
class Unregistered:
    x: int


VERSIONS = {Leaf: 3, Node: 1}


def reference_packb(obj: Any) -> bytes:
    """The stored format spelled out: every ext value's contents packed by its own msgpack.packb call."""

    def default(o: Any) -> ExtType:
        t = type(o)
        if t in VERSIONS:
            values = [getattr(o, f.name) for f in dataclasses.fields(o)]
            return ExtType(1, reference_packb([f"test.bytes.{t.__name__}", VERSIONS[t], *values]))
        code = {tuple: 2, set: 3, frozenset: 4}[t]
        return ExtType(code, reference_packb(list(o)))

    return msgpack.packb(obj, default=default, strict_types=True, use_bin_type=True)


NESTED = Node("root", [Leaf(7), (Leaf(-1), "t", None), {"k": Node("in", (Leaf(2**40),), frozenset({"f"}))}],
              {3})
NESTED_BYTES = bytes.fromhex(
    "c7920195af746573742e62797465732e4e6f646501a4726f6f7493c7130193af746573742e62797465732e4c65616603"
    "07c71a0293c7130193af746573742e62797465732e4c65616603ffa174c081a16bc73d0195af746573742e6279746573"
    "2e4e6f646501a2696ec71f0291c71b0193af746573742e62797465732e4c65616603cf0000010000000000c7030491a1"
    "66d5039103")
# An event whose payload is a registered object: stored inline as [writer, manifest, ts, tags, meta, m, v, *fields].
EVENT_BYTES = bytes.fromhex(
    "9aa177a74d652d74797065cd04d292a161a162c0af746573742e62797465732e4e6f646501a2657692c7130193af7465"
    "73742e62797465732e4c6561660301d5039102c0")


def test_a_nested_registered_object_has_the_bytes_it_always_had() -> None:
    assert serialize(NESTED) == NESTED_BYTES == reference_packb(NESTED)
    back = deserialize(NESTED_BYTES)
    assert back == NESTED and type(back.children[1]) is tuple and back.extra == {3}


def test_an_event_row_has_the_bytes_it_always_had_and_old_rows_replay() -> None:
    event = Node("ev", [Leaf(1), {2}])
    aw = AtomicWrite([PersistentRepr(event, 5, "pid", "Me-type", "w", tags=frozenset({"b", "a"}))])
    batch, results = encode_writes([aw], 1234)
    assert results == [None]
    [(pid, seq, blob, ck)] = batch.rows
    assert (pid, seq, blob) == ("pid", 5, EVENT_BYTES)
    [r] = decode_rows("pid", [(seq, EVENT_BYTES, ck)])
    assert (r.payload, r.manifest, r.writer_uuid, r.timestamp, r.tags) == (event, "Me-type", "w", 1234,
                                                                           frozenset({"a", "b"}))


def _deep(levels: int) -> Any:
    """Objects in lists in objects in tuples ..., `levels` ext values deep, with sets of objects on the way."""
    value: Any = Leaf(levels)
    for i in range(levels):
        wrap = i % 4
        if wrap == 0:
            value = Node(f"n{i}", [value, i])
        elif wrap == 1:
            value = (value, [i, {"k": i}])
        elif wrap == 2:
            value = Node("fs", [[value]], extra=frozenset({(Leaf(i), i), "f"}))
        else:
            value = [Node("s", (value,), extra={Leaf(i), i})]
    return value


@pytest.mark.parametrize("levels", [1, 5, 40])
def test_deep_nesting_round_trips_with_the_same_bytes(levels: int) -> None:
    value = _deep(levels)
    data = serialize(value)
    assert data == reference_packb(value)
    assert deserialize(data) == value
    assert serialize([value, value]) == reference_packb([value, value])  # the Packers are reused cleanly


scalars = st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1) | st.text(max_size=5) | st.binary(max_size=5)
values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=3) | st.tuples(inner, inner)
                   | st.dictionaries(st.text(max_size=3), inner, max_size=3)
                   | st.frozensets(st.integers(-9, 9), max_size=3) | st.sets(st.text(max_size=2), max_size=3)
                   | st.builds(Leaf, st.integers(-5, 5)) | st.builds(Node, st.text(max_size=3), inner, inner)),
    max_leaves=16,
)


@settings(max_examples=300, deadline=None)
@given(values)
def test_generated_values_have_the_reference_bytes(value: Any) -> None:
    assert serialize(value) == reference_packb(value)


def test_an_unregistered_type_deep_inside_is_refused_as_before_and_the_encoder_recovers() -> None:
    bad = Node("a", [(Leaf(1), Node("b", [Unregistered(1)]))])
    message = ("cannot serialize an object of type tests.journal.test_stored_bytes.Unregistered: "
               "register it with journal.register_type(Unregistered) "
               "(or decorate the frozen dataclass with @register_type)")
    for _ in range(2):
        with pytest.raises(SerializationError) as e:
            serialize(bad)
        assert str(e.value) == message
    with pytest.raises(SerializationError, match="outside msgpack's 64-bit range"):
        serialize((Leaf(1), [2**64]))
    assert serialize(NESTED) == NESTED_BYTES  # no half-packed leftovers in the reused Packers


def test_threads_serializing_at_once_get_their_own_bytes() -> None:
    wrong: list[int] = []

    def work(n: int) -> None:
        value = _deep(n % 7 + 1)
        expected = reference_packb(value)
        for _ in range(300):
            if serialize(value) != expected:
                wrong.append(n)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong

"""The stored byte formats are pinned: what serialize and encode_writes write (format 2, flat), and that
what they wrote before issue 16 (format 1, nested ext values) is read back the same forever.

The format 1 literals below were produced by the code before the encoder reused its Packers (msgpack.packb
per nested object); `reference_packb` spells that format out naively and `reference_flat` format 2, so
generated values can be compared too. tests/journal/test_format1_fixture.py reads a whole journal of format 1.
"""

from __future__ import annotations

import dataclasses
import threading
import zlib
from dataclasses import dataclass
from typing import Any

import msgpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from msgpack import ExtType

from journal import AtomicWrite, JournalCorruption, PersistentRepr, SerializationError, register_type
from journal.records import decode_rows, decode_snapshot, encode_snapshot, encode_writes
from journal.serialization import checksum, deserialize, key_seed, serialize


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


@register_type(manifest="test.bytes.Wide")
@dataclass(frozen=True)
class Wide:
    a: Any
    b: Any
    c: Any
    d: Any
    e: Any
    f: Any
    g: Any
    h: Any
    i: Any
    j: Any


@dataclass(frozen=True)
class Unregistered:
    x: int


VERSIONS = {Leaf: 3, Node: 1, Wide: 1}


def reference_packb(obj: Any) -> bytes:
    """Format 1 spelled out: every ext value's contents packed by its own msgpack.packb call."""

    def default(o: Any) -> ExtType:
        t = type(o)
        if t in VERSIONS:
            values = [getattr(o, f.name) for f in dataclasses.fields(o)]
            return ExtType(1, reference_packb([f"test.bytes.{t.__name__}", VERSIONS[t], *values]))
        code = {tuple: 2, set: 3, frozenset: 4}[t]
        return ExtType(code, reference_packb(list(o)))

    return msgpack.packb(obj, default=default, strict_types=True, use_bin_type=True)


def reference_flat(obj: Any) -> bytes:
    """Format 2 spelled out: [marker, ...] arrays, the marker an empty ext value of the old ext type code."""

    def default(o: Any) -> list[Any]:
        t = type(o)
        if t in VERSIONS:
            values = [getattr(o, f.name) for f in dataclasses.fields(o)]
            return [ExtType(1, b""), f"test.bytes.{t.__name__}", VERSIONS[t], *values]
        code = {tuple: 2, set: 3, frozenset: 4}[t]
        return [ExtType(code, b""), *o]

    return msgpack.packb(obj, default=default, strict_types=True, use_bin_type=True)


NESTED = Node("root", [Leaf(7), (Leaf(-1), "t", None), {"k": Node("in", (Leaf(2**40),), frozenset({"f"}))}],
              {3})
NESTED_BYTES = bytes.fromhex(
    "c7920195af746573742e62797465732e4e6f646501a4726f6f7493c7130193af746573742e62797465732e4c65616603"
    "07c71a0293c7130193af746573742e62797465732e4c65616603ffa174c081a16bc73d0195af746573742e6279746573"
    "2e4e6f646501a2696ec71f0291c71b0193af746573742e62797465732e4c65616603cf0000010000000000c7030491a1"
    "66d5039103")
# An event whose payload is a registered object: stored inline as [writer, manifest, ts, tags, meta, m, v, *fields].
EVENT_BYTES_1 = bytes.fromhex(
    "9aa177a74d652d74797065cd04d292a161a162c0af746573742e62797465732e4e6f646501a2657692c7130193af7465"
    "73742e62797465732e4c6561660301d5039102c0")
NESTED_BYTES_2 = bytes.fromhex(
    "96c70001af746573742e62797465732e4e6f646501a4726f6f749394c70001af746573742e62797465732e4c656166030794"
    "c7000294c70001af746573742e62797465732e4c65616603ffa174c081a16b96c70001af746573742e62797465732e4e6f64"
    "6501a2696e92c7000294c70001af746573742e62797465732e4c65616603cf000001000000000092c70004a16692c7000303")
# Format 2: [2, writer, manifest, ts, tags, meta, m, v, *fields] (registered payload inlined) ...
EVENT_BYTES_2 = bytes.fromhex(
    "9b02a177a74d652d74797065cd04d292a161a162c0af746573742e62797465732e4e6f646501a265769294c70001af7465"
    "73742e62797465732e4c656166030192c7000302c0")
# ... and [2, writer, manifest, ts, tags, meta, payload] for anything else (here a tuple).
TUPLE_EVENT_BYTES_2 = bytes.fromhex("9702a177a0cd04d2c0c093c7000201a178")  # (no tags: nil)


def test_a_nested_registered_object_is_written_flat_and_format_1_still_reads() -> None:
    assert serialize(NESTED) == NESTED_BYTES_2 == reference_flat(NESTED)
    for data in (NESTED_BYTES_2, NESTED_BYTES):
        back = deserialize(data)
        assert back == NESTED and type(back.children[1]) is tuple and back.extra == {3}
    assert NESTED_BYTES == reference_packb(NESTED)


def test_an_event_row_is_written_flat_and_format_1_rows_replay() -> None:
    event = Node("ev", [Leaf(1), {2}])
    aw = AtomicWrite([PersistentRepr(event, 5, "pid", "Me-type", "w", tags=frozenset({"b", "a"}))])
    batch, results = encode_writes([aw], 1234)
    assert results == [None]
    [(pid, seq, blob, ck)] = batch.rows
    assert (pid, seq, blob, ck) == ("pid", 5, EVENT_BYTES_2, checksum(key_seed("pid"), 5, EVENT_BYTES_2))
    aw = AtomicWrite([PersistentRepr((1, "x"), 6, "pid", "", "w")])
    assert encode_writes([aw], 1234)[0].rows[0][2] == TUPLE_EVENT_BYTES_2
    for data in (EVENT_BYTES_2, EVENT_BYTES_1):
        [r] = decode_rows("pid", [(5, data, checksum(key_seed("pid"), 5, data))])
        assert (r.payload, r.manifest, r.writer_uuid, r.timestamp, r.tags) == (event, "Me-type", "w", 1234,
                                                                               frozenset({"a", "b"}))
    [r] = decode_rows("pid", [(6, TUPLE_EVENT_BYTES_2, checksum(key_seed("pid"), 6, TUPLE_EVENT_BYTES_2))])
    assert r.payload == (1, "x") and type(r.payload) is tuple and r.tags == frozenset()


def test_snapshots_are_written_flat_with_the_timestamp_checksummed_and_formats_1_and_2_load() -> None:
    blob, ck = encode_snapshot("pid", 3, 1234, {"m": (1,)}, NESTED)
    assert blob == reference_flat([3, {"m": (1,)}, NESTED])
    assert ck == zlib.crc32((1234).to_bytes(8, "big"), checksum(key_seed("pid"), 3, blob))
    assert decode_snapshot("pid", 3, 1234, blob, ck) == ({"m": (1,)}, NESTED)
    with pytest.raises(JournalCorruption, match="bytes or timestamp"):
        decode_snapshot("pid", 3, 1234 ^ (1 << 40), blob, ck)
    # Formats 1 and 2 (written before) have the key and bytes checksummed only: any timestamp loads them.
    for data in (reference_flat([2, {"m": (1,)}, NESTED]), reference_packb([{"m": (1,)}, NESTED])):
        assert decode_snapshot("pid", 3, 99, data, checksum(key_seed("pid"), 3, data)) == ({"m": (1,)}, NESTED)


def test_long_records_are_told_apart_by_their_first_item_too() -> None:
    """Records of 16 or more items (an array 16 header: the first item is 3 bytes in) in both formats."""
    payload = Wide(*range(9), (Leaf(1), {2}))
    aw = AtomicWrite([PersistentRepr(payload, 1, "pid", "", "w")])
    [(_, _, blob, ck)] = encode_writes([aw], 7)[0].rows
    assert blob[0] == 0xDC and blob == reference_flat([2, "w", "", 7, None, None, "test.bytes.Wide", 1, *range(9),
                                                       (Leaf(1), {2})])
    old = reference_packb(["w", "", 7, [], None, "test.bytes.Wide", 1, *range(9), (Leaf(1), {2})])
    assert old[0] == 0xDC
    for data in (blob, old):
        [r] = decode_rows("pid", [(1, data, checksum(key_seed("pid"), 1, data))])
        assert (r.writer_uuid, r.timestamp, r.payload) == ("w", 7, payload)


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
    assert data == reference_flat(value)
    assert deserialize(data) == value == deserialize(reference_packb(value))
    assert serialize([value, value]) == reference_flat([value, value])  # the Packer is reused cleanly


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
def test_generated_values_have_the_reference_bytes_and_format_1_reads_the_same(value: Any) -> None:
    assert serialize(value) == reference_flat(value)
    assert deserialize(reference_packb(value)) == value == deserialize(serialize(value))


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
    assert serialize(NESTED) == NESTED_BYTES_2  # no half-packed leftovers in the reused Packer


def test_threads_serializing_at_once_get_their_own_bytes() -> None:
    wrong: list[int] = []

    def work(n: int) -> None:
        value = _deep(n % 7 + 1)
        expected = reference_flat(value)
        for _ in range(300):
            if serialize(value) != expected:
                wrong.append(n)

    threads = [threading.Thread(target=work, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong


def test_tuples_sets_and_objects_as_dict_keys_round_trip() -> None:
    """Marked arrays are turned back before msgpack uses them as keys (a list would be unhashable)."""
    value = {(1, (2, "x")): 3, frozenset({1, (2,)}): [()], Leaf(1): {Node("k", None): set()}, (): None}
    data = serialize(value)
    assert data == reference_flat(value) and deserialize(data) == value
    assert deserialize(reference_packb(value)) == value


@pytest.mark.timeout(60)
def test_a_stored_sequence_nr_with_any_one_bit_flipped_fails_its_checksum() -> None:
    """The checksum's key covers all 63 bits of the sequence nr: a record read back under a sequence nr one bit away
    (bits 32-62 were left out) was replayed as that other event, with no JournalCorruption and verify calling it ok."""
    for seq in (5, 2**32 + 5, 2**62 + 1):
        aw = AtomicWrite([PersistentRepr("e", seq, "pid", "", "w")])
        [(_, _, blob, ck)] = encode_writes([aw], 1234)[0].rows
        assert decode_rows("pid", [(seq, blob, ck)])[0].sequence_nr == seq
        snap, snap_ck = encode_snapshot("pid", seq, 1234, None, "s")
        for bit in range(63):
            moved = seq ^ (1 << bit)
            with pytest.raises(JournalCorruption):
                decode_rows("pid", [(moved, blob, ck)])
            with pytest.raises(JournalCorruption):
                decode_snapshot("pid", moved, 1234, snap, snap_ck)

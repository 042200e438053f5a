"""msgpack serialization: exact round trips, registered types, rejections, upcasters."""

from __future__ import annotations

import enum
import os
import subprocess
import sys
import uuid
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from journal import SerializationError, register_type, register_upcaster, unregister_type
from journal.serialization import (
    STORABLE_TYPES,
    check_storable,
    deserialize,
    manifest_of,
    pack_values_with,
    serialize,
)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@register_type
@dataclass(frozen=True)
class Point:
    x: int
    y: int


@register_type(manifest="test.Shape", version=1)
@dataclass(frozen=True)
class Shape:
    name: str
    corners: tuple[Point, ...]
    style: dict[str, object] = field(default_factory=dict)
    labels: frozenset[str] = frozenset()


scalars = (st.none() | st.booleans() | st.integers(-(2**63), 2**64 - 1)
           | st.floats(allow_nan=False) | st.text(max_size=8) | st.binary(max_size=8))
values = st.recursive(
    scalars,
    lambda inner: (st.lists(inner, max_size=4) | st.tuples(inner, inner)
                   | st.dictionaries(st.text(max_size=4) | st.integers(-99, 99), inner, max_size=4)
                   | st.frozensets(st.integers(-99, 99), max_size=4)
                   | st.builds(Point, st.integers(-5, 5), st.integers(-5, 5))),
    max_leaves=12,
)


@settings(max_examples=200, deadline=None)
@given(values)
def test_round_trip_is_exact_including_container_types(value) -> None:
    back = deserialize(serialize(value))
    assert back == value
    assert _shape(back) == _shape(value)


def test_a_bytearray_or_memoryview_is_written_as_bytes_and_read_back_as_bytes() -> None:
    # (the one type msgpack packs that does not come back as itself: documented, not refused)
    for value in (bytearray(b"ba"), memoryview(b"mv")):
        back = deserialize(serialize(value))
        assert back == bytes(value) and type(back) is bytes


def _shape(v: object) -> object:
    """The value's structure with container types kept (so a tuple coming back as a list fails)."""
    if isinstance(v, (list, tuple)):
        return (type(v), [_shape(x) for x in v])
    if isinstance(v, dict):
        return (dict, sorted((repr(k), _shape(x)) for k, x in v.items()))
    return type(v)


def test_registered_dataclasses_nest_and_keep_tuples() -> None:
    s = Shape("tri", (Point(0, 0), Point(1, 0), Point(0, 1)), {"fill": [1, (2, 3)]}, frozenset({"a"}))
    back = deserialize(serialize(s))
    assert back == s and type(back.corners) is tuple and type(back.corners[0]) is Point
    assert type(back.style["fill"][1]) is tuple
    assert manifest_of(Point) == f"{__name__}.Point" and manifest_of(Shape) == "test.Shape"


def test_unregistered_and_unsupported_types_are_named_with_the_fix() -> None:
    @dataclass(frozen=True)
    class Loose:
        x: int

    class Color(enum.IntEnum):
        RED = 1

    with pytest.raises(SerializationError, match=r"Loose.*register_type\(Loose\)"):
        serialize({"deep": [Loose(1)]})
    with pytest.raises(SerializationError, match="Color"):
        serialize([Color.RED])
    with pytest.raises(SerializationError, match="64-bit range"):
        serialize(2**70)
    assert serialize("still works") == b"\xabstill works"


def test_register_type_refuses_what_it_cannot_round_trip() -> None:
    @dataclass
    class Mutable:
        x: int

    with pytest.raises(TypeError, match="frozen"):
        register_type(Mutable)
    with pytest.raises(TypeError, match="dataclass"):
        register_type(int)

    @dataclass(frozen=True)
    class Impostor:
        name: str

    with pytest.raises(ValueError, match="already registered"):
        register_type(Impostor, manifest="test.Shape")


def test_check_storable_caches_a_registered_class_until_it_is_unregistered() -> None:
    @dataclass(frozen=True)
    class Checked:
        x: object

    with pytest.raises(SerializationError, match="Checked"):
        check_storable(Checked(1))  # not registered: refused every time, never cached
    register_type(Checked, manifest=f"test.Checked-{uuid.uuid4().hex}")
    check_storable(Checked(1))
    assert Checked in STORABLE_TYPES
    with pytest.raises(SerializationError, match="object"):
        check_storable([Checked(object())])  # a container is checked every time, its items too
    unregister_type(Checked)
    assert Checked not in STORABLE_TYPES
    with pytest.raises(SerializationError, match="Checked"):
        check_storable(Checked(1))


def test_unknown_manifest_and_newer_version_are_clear_errors() -> None:
    manifest = f"test.Gone-{uuid.uuid4().hex}"

    @dataclass(frozen=True)
    class Gone:
        x: int

    register_type(Gone, manifest=manifest, version=2)
    data = serialize(Gone(1))
    unregister_type(Gone)
    with pytest.raises(SerializationError, match=f"unknown manifest '{manifest}'"):
        deserialize(data)

    @dataclass(frozen=True)
    class Older:
        x: int

    register_type(Older, manifest=manifest, version=1)
    try:
        with pytest.raises(SerializationError, match="newer than the registered class"):
            deserialize(data)
    finally:
        unregister_type(manifest)


def serialized_by_an_older_class(cls: type, manifest: str, value: object) -> bytes:
    """`value` stored by `cls` registered under `manifest` (then unregistered, for a newer class to take it)."""
    register_type(cls, manifest=manifest)
    try:
        return serialize(value)
    finally:
        unregister_type(cls)


def test_upcasters_chain_version_by_version_and_a_missing_one_is_named() -> None:
    manifest = f"test.Money-{uuid.uuid4().hex}"

    @dataclass(frozen=True)
    class MoneyV1:
        cents: int

    old = serialized_by_an_older_class(MoneyV1, manifest, [MoneyV1(150), MoneyV1(5)])

    @register_type(manifest=manifest, version=3)
    @dataclass(frozen=True)
    class Money:
        amount: str
        currency: str

    try:
        with pytest.raises(SerializationError, match=rf"register_upcaster\('{manifest}', 1, fn\)"):
            deserialize(old)
        register_upcaster(manifest, 1, lambda f: [f"{f[0] // 100}.{f[0] % 100:02d}"])
        register_upcaster(manifest, 2, lambda f: [f[0], "EUR"])
        assert deserialize(old) == [Money("1.50", "EUR"), Money("0.05", "EUR")]
        assert deserialize(serialize(Money("2.00", "USD"))) == Money("2.00", "USD")
    finally:
        unregister_type(manifest)


def test_an_upcaster_that_fails_or_returns_the_wrong_thing_is_named_not_taken_for_corruption() -> None:
    # A dict was taken as its keys (a Moved(src='src', dst='dst') recovered silently); an upcaster's own error,
    # or a wrong count of values, came out as JournalCorruption, and `journal verify` said to delete the data.
    manifest = f"test.Moved-{uuid.uuid4().hex}"

    @dataclass(frozen=True)
    class MovedV1:
        src: str

    old = serialized_by_an_older_class(MovedV1, manifest, MovedV1("A"))

    @register_type(manifest=manifest, version=2)
    @dataclass(frozen=True)
    class Moved:
        src: str
        dst: str

    try:
        for fn, why in ((lambda v: {"src": v[0], "dst": "?"}, "returned dict, not a list"),
                        (lambda v: [v[0], MISSING], r"failed on \['A'\]: NameError"),  # noqa: F821
                        (lambda v: [v[0], "B", "C"], "returned 3 values for the 2 fields of version 2"),
                        (lambda v: [], r"cannot build \S*Moved from its 0 stored field values")):
            register_upcaster(manifest, 1, fn)
            with pytest.raises(SerializationError, match=why):
                deserialize(old)
        register_upcaster(manifest, 1, lambda v: (v[0], "B"))  # (a tuple is a list of values too)
        assert deserialize(old) == Moved("A", "B")
    finally:
        unregister_type(manifest)


def test_a_script_s_own_class_is_stored_under_the_name_other_processes_import_it_by(tmp_path) -> None:
    # Stored as "__main__.Deposited" by `python script.py` on the local base, it could never be read by the actor
    # processes of a multiproc system, nor by the same script there (they import it as `script`).
    script = tmp_path / "depositing.py"
    script.write_text(
        "from dataclasses import dataclass\n"
        "from journal import register_type\n"
        "from journal.serialization import deserialize, manifest_of, serialize\n"
        "@register_type\n"
        "@dataclass(frozen=True)\n"
        "class Deposited:\n"
        "    amount: int\n"
        "if __name__ == '__main__':\n"
        "    import sys\n"
        "    print(manifest_of(Deposited))\n"
        "    with open(sys.argv[1], 'wb') as f:\n"
        "        f.write(serialize(Deposited(5)))\n"
        "    print(deserialize(bytes.fromhex(sys.argv[2])))  # (what earlier versions stored stays readable)\n")
    register_type(_Legacy := dataclass(frozen=True)(type("Deposited", (), {"__annotations__": {"amount": int}})),
                  manifest="__main__.Deposited")
    legacy = serialize(_Legacy(3))
    unregister_type(_Legacy)
    out = subprocess.run([sys.executable, str(script), str(tmp_path / "stored"), legacy.hex()], capture_output=True,
                         text=True, cwd=tmp_path, env={**os.environ, "PYTHONPATH": REPO}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == ["depositing.Deposited", "Deposited(amount=3)"]
    reader = ("import sys; sys.path.insert(0, sys.argv[1]); from journal.serialization import deserialize; "
              "print(deserialize(open(sys.argv[2], 'rb').read()))")
    out = subprocess.run([sys.executable, "-c", reader, str(tmp_path), str(tmp_path / "stored")], capture_output=True,
                         text=True, env={**os.environ, "PYTHONPATH": REPO}, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "Deposited(amount=5)", out.stderr


def test_a_script_that_imports_itself_registers_its_classes_once_under_one_name(tmp_path) -> None:
    # The script's classes and its importable copy's (`python -m bench.entities` runs `from bench import entities`)
    # are two classes under one manifest: refused as a clash, the script could not start.
    (tmp_path / "selfish.py").write_text(
        "from dataclasses import dataclass\n"
        "from journal import register_type\n"
        "from journal.serialization import deserialize, serialize\n"
        "@register_type\n"
        "@dataclass(frozen=True)\n"
        "class Deposited:\n"
        "    amount: int\n"
        "if __name__ == '__main__':\n"
        "    import selfish\n"
        "    mine, copy = serialize(Deposited(1)), serialize(selfish.Deposited(2))\n"
        "    print(type(deserialize(mine)) is selfish.Deposited, deserialize(copy))\n")
    out = subprocess.run([sys.executable, "selfish.py"], capture_output=True, text=True, cwd=tmp_path,
                         env={**os.environ, "PYTHONPATH": REPO}, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "True Deposited(amount=2)"


@pytest.mark.parametrize("slots", [False, True])
def test_records_of_an_older_version_are_upcast_at_the_top_and_nested(slots: bool) -> None:
    """Format 2 records: a registered payload inlined in the record, and marked objects inside it."""
    from journal import AtomicWrite, PersistentRepr
    from journal.records import decode_rows, encode_writes

    manifest = f"test.Fee-{uuid.uuid4().hex}"

    @dataclass(frozen=True, slots=slots)
    class FeeV1:
        cents: int
        inner: object = None

    register_type(FeeV1, manifest=manifest)
    aw = AtomicWrite([PersistentRepr(FeeV1(150, (FeeV1(5),)), 1, "p"), PersistentRepr(FeeV1(7), 2, "p")])
    rows = [(seq, blob, ck) for _, seq, blob, ck in encode_writes([aw], 1)[0].rows]
    unregister_type(FeeV1)

    @register_type(manifest=manifest, version=2)
    @dataclass(frozen=True, slots=slots)
    class Fee:
        cents: int
        inner: object
        currency: str

    try:
        with pytest.raises(SerializationError, match=rf"register_upcaster\('{manifest}', 1, fn\)"):
            decode_rows("p", rows)
        register_upcaster(manifest, 1, lambda f: [*f, "EUR"])
        assert [r.payload for r in decode_rows("p", rows)] == [Fee(150, (Fee(5, None, "EUR"),), "EUR"),
                                                              Fee(7, None, "EUR")]
        newer = [(seq, blob, ck) for _, seq, blob, ck in encode_writes(
            [AtomicWrite([PersistentRepr(Fee(1, None, "X"), 1, "p")])], 1)[0].rows]
        unregister_type(Fee)
        register_type(FeeV1, manifest=manifest)
        with pytest.raises(SerializationError, match="newer than the registered class"):
            decode_rows("p", newer)
    finally:
        unregister_type(manifest)


@settings(max_examples=60, deadline=None)
@given(st.lists(values, max_size=3), st.lists(st.integers(1, 2**40), max_size=3))
def test_applied_batch_packs_its_premarked_values_to_the_plain_values_bytes(events, ids) -> None:
    # pack_values_with (IdempotentReceiver's AppliedBatch) must not change a stored byte.
    import msgpack

    from journal.serialization import _by_class, _default, flatten
    from persistence.idempotent import AppliedBatch

    n = min(len(events), len(ids))
    batch = AppliedBatch(tuple(f"/o{k}" for k in range(n)), tuple(ids[:n]), tuple(events[:n]))
    reg = _by_class[AppliedBatch]
    pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    plain = (batch.origins, batch.delivery_ids, batch.events)
    assert pack([*reg.values(batch)]) == pack([*plain])
    assert flatten(batch) == (reg.manifest, reg.version, plain)
    assert deserialize(serialize(batch)) == batch


def test_pack_values_with_needs_a_registered_class() -> None:
    from journal.serialization import pack_values_with

    @dataclass(frozen=True)
    class Unregistered:
        x: int

    with pytest.raises(KeyError, match="not registered"):
        pack_values_with(Unregistered, lambda obj: (obj.x,))


READ_BACK = """
import sys
from journal import open_journal
assert "tests.journal.lazy_types" not in sys.modules
with open_journal(sys.argv[1]) as j:
    events = [r.payload for r in j.replay_messages("p", 1, 10)]
print(type(events[0]).__module__, type(events[0]).__name__, events[0].amount, len(events))
"""


def test_a_reader_imports_the_module_of_a_default_manifest_it_has_not_imported(tmp_path) -> None:
    # A restarted bridge or a projection replays events whose type only the writer's process had imported.
    import subprocess
    import sys

    from journal import AtomicWrite, PersistentRepr, open_journal
    from tests.journal.lazy_types import Lazy

    url = f"sqlite:///{tmp_path}/j.db"
    with open_journal(url) as j:
        j.write_messages([AtomicWrite([PersistentRepr(Lazy(7), 1, "p"), PersistentRepr(Lazy(8), 2, "p")])])
    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    out = subprocess.run([sys.executable, "-c", READ_BACK, url], capture_output=True, text=True, timeout=60,
                         cwd=root, env={**os.environ, "PYTHONPATH": root})
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["tests.journal.lazy_types", "Lazy", "7", "2"]


def test_a_stored_manifest_naming_a_function_builds_nothing() -> None:
    # The on-demand import may import the module a stored manifest names, but only what that module
    # registers is used: "os.system" in a journal is an unknown manifest, never a callable.
    @dataclass(frozen=True)
    class Command:
        line: str

    register_type(Command, manifest="os.system")
    data = serialize(Command("touch /tmp/never"))
    unregister_type(Command)
    with pytest.raises(SerializationError, match="unknown manifest 'os.system'"):
        deserialize(data)


def _table_commit_v1(commit) -> list:
    """A TableCommit's stored values as version 1 wrote them (each column a tuple, its events marked)."""
    from journal.serialization import TUPLE_MARK, marked

    return [commit.shards, [TUPLE_MARK, *commit.entity_ids], [TUPLE_MARK, *map(marked, commit.events)],
            [TUPLE_MARK, *commit.origins], [TUPLE_MARK, *commit.delivery_ids], commit.columns]


def _record_of(commit, pid: str = "t", seq: int = 1):
    """`commit` encoded as a journal row and read back through the replay path."""
    from journal import AtomicWrite, PersistentRepr
    from journal.records import decode_rows, encode_writes

    batch, results = encode_writes([AtomicWrite([PersistentRepr(commit, seq, pid)])], 0)
    assert results == [None]
    ((_, _, blob, ck),) = batch.rows
    (back,) = decode_rows(pid, [(seq, blob, ck)])
    return back.payload


@settings(max_examples=150, deadline=None)
@given(st.lists(values, max_size=6), st.lists(st.sampled_from(["/system/spark-bridge", "/o", ""]), max_size=6),
       st.lists(st.integers(-(2**63), 2**64 - 1), max_size=6) | st.lists(st.integers(0, 2**63 - 1), max_size=6),
       st.integers(1, 64), st.none() | st.binary(max_size=8))
def test_a_table_commit_round_trips_through_its_stored_runs(events, origins, ids, shards, columns) -> None:
    # Version 2 stores a commit's columns as runs (persistence/table.py): any events, in any mix of types, any
    # delivery ids (differences only where they fit in 64 bits) come back equal, as a value and as a record.
    from persistence.table import TableCommit

    n = min(len(origins), len(ids))
    commit = TableCommit(shards, tuple(f"e{k % 3}" for k in range(len(events))), tuple(events),
                         tuple(origins[:n]), tuple(ids[:n]), columns)
    assert deserialize(serialize(commit)) == commit
    assert _record_of(commit) == commit


def test_a_table_commit_stores_an_event_manifest_and_an_origin_once_per_run() -> None:
    import msgpack

    from journal.serialization import _default
    from persistence.table import TableCommit

    n = 2_000
    commit = TableCommit(1, tuple(f"a{k % 1000}" for k in range(n)), tuple(Point(k % 97, 1) for k in range(n)),
                         ("/system/spark-bridge",) * n, tuple(range(10**6, 10**6 + n)))
    size = len(serialize(commit))
    pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    v1 = len(pack(_table_commit_v1(commit)))
    assert size < 10 * n, f"{size / n:.1f} bytes a row: an entity id, two small ints and a delivery id difference"
    assert v1 > 5 * size, f"version 1 stored {v1:,} bytes, version 2 {size:,}"


def test_table_commits_stored_by_version_1_read_back_unchanged_as_values_and_as_records() -> None:
    import msgpack

    from journal.records import FORMAT_FLAT, decode_rows
    from journal.serialization import _OBJECT_EXT, _default, checksum, key_seed
    from persistence.table import TableCommit

    pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
    manifest = "reprise.persistence.TableCommit"
    for columns in (b"cols", None, "absent"):  # "absent": written before TableCommit had `columns`
        commit = TableCommit(2, ("a", "b", "a"), (Point(1, 2), ("t", 1), Point(3, 4)), ("/o", "/o", "/p"), (7, 9, 8),
                             None if columns == "absent" else columns)
        v1 = _table_commit_v1(commit)
        if columns == "absent":
            v1 = v1[:5]
        assert deserialize(pack([_OBJECT_EXT, manifest, 1, *v1])) == commit
        blob = pack([FORMAT_FLAT, "writer", "", 0, None, None, manifest, 1, *v1])
        (back,) = decode_rows("t", [(3, blob, checksum(key_seed("t"), 3, blob))])
        assert back.payload == commit


def test_an_older_version_of_an_event_in_a_stored_run_is_upcast() -> None:
    import msgpack

    from journal.serialization import _OBJECT_EXT, _default
    from persistence.table import TableCommit

    manifest = "test.table.Fee"

    @register_type(manifest=manifest, version=2)
    @dataclass(frozen=True)
    class Fee:
        cents: int
        currency: str

    try:
        register_upcaster(manifest, 1, lambda f: [f[0], "EUR"])
        pack = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
        # A run of two version 1 Fees (one field each), then one plain value.
        stored = [1, ["a", "b", "c"], [manifest, 1, 2, 1, 150, 20, None, 0, 1, 1, "note"], [], [1], None]
        commit = deserialize(pack([_OBJECT_EXT, "reprise.persistence.TableCommit", 2, *stored]))
        assert commit == TableCommit(1, ("a", "b", "c"), (Fee(150, "EUR"), Fee(20, "EUR"), "note"), (), ())
    finally:
        unregister_type(manifest)


@register_type(manifest="test.Amount")
@dataclass(frozen=True)
class Amount:
    cents: int


@register_type(manifest="test.Packed")
@dataclass(frozen=True)
class Packed:
    cents: int


def _packed_values(p: Packed) -> tuple[int]:
    return (p.cents,)


pack_values_with(Packed, _packed_values)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.builds(Amount, st.integers(0, 9)) | st.builds(Point, st.integers(0, 3), st.integers(0, 3))
                | st.builds(Packed, st.integers(0, 9)) | st.tuples(st.integers(0, 3)) | st.integers(0, 3)
                | st.sampled_from([None, True, "x"]), max_size=12)
       | st.lists(st.builds(Amount, st.integers(0, 9)), max_size=12))
def test_a_column_as_runs_round_trips_each_value_with_its_type(values) -> None:
    # run_encoded takes a column of one type in C, and one of one-field objects through the field's getter;
    # a type whose values are packed by its own function (pack_values_with) keeps that function.
    from journal.serialization import run_decoded, run_encoded

    back = run_decoded(deserialize(serialize(run_encoded(values))))
    assert [(type(v), v) for v in back] == [(type(v), v) for v in values]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from([None, True, 1, 1.0, "/o", "", 0, False]), max_size=12),
       st.lists(st.integers(-(2**63), 2**64 - 1), max_size=8) | st.lists(st.integers(0, 2**63 - 1), max_size=8))
def test_repeats_and_ints_round_trip_with_their_types(values, ints) -> None:
    # A run keeps one type (True == 1 == 1.0 but each comes back as itself); ids differences only where they fit.
    from journal.serialization import ints_decoded, ints_encoded, repeats_decoded, repeats_encoded

    back = deserialize(serialize(repeats_encoded(values)))
    assert [(type(v), v) for v in repeats_decoded(back)] == [(type(v), v) for v in values]
    assert ints_decoded(deserialize(serialize(ints_encoded(ints)))) == tuple(ints)

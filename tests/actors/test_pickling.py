"""actors.pickling.dumps writes exactly pickle.dumps's bytes, for every kind of object a message may hold."""

from __future__ import annotations

import copyreg
import datetime
import decimal
import enum
import pickle
import uuid
from dataclasses import dataclass, field
from typing import NamedTuple

import pytest

from actors.pickling import PROTOCOL, dumps, plain
from examples.accounts.pipeline import Entry
from spark_bridge.messages import Row, RowChunk

pytestmark = pytest.mark.timeout(60)


@dataclass(frozen=True)
class Two:
    account: str
    amount: int


@dataclass(frozen=True)
class Empty:
    pass


@dataclass(frozen=True)
class Nested:
    inner: Two
    items: tuple[Two, ...]
    extra: dict[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Slotted:
    a: int
    b: str


class Plain:
    def __init__(self, a: object) -> None:
        self.a = a

    def __eq__(self, other: object) -> bool:
        return type(other) is type(self) and other.a == self.a  # type: ignore[attr-defined]


class Mixed(Plain):
    __slots__ = ("b",)  # a slot beside the inherited __dict__: the default state is a pair

    def __init__(self, a: object, b: object) -> None:
        super().__init__(a)
        self.b = b


class Reduced(Plain):
    def __reduce__(self) -> tuple[object, ...]:
        return (Reduced, (self.a,))


class WithState(Plain):
    def __getstate__(self) -> object:
        return {"a": self.a, "extra": 1}

    def __setstate__(self, state: dict[str, object]) -> None:
        self.a = state["a"]


class WithNewArgs(Plain):
    def __new__(cls, a: object) -> WithNewArgs:
        return super().__new__(cls)

    def __getnewargs__(self) -> tuple[object, ...]:
        return (self.a,)


class Pair(NamedTuple):
    x: int
    y: str


class Colour(enum.Enum):
    RED = 1


class Items(list):  # type: ignore[type-arg]
    pass


class Mapping(dict):  # type: ignore[type-arg]
    pass


class Failure(Exception):
    pass


class Registered(Plain):
    pass


def _samples() -> list[object]:
    two = Two("acc-1", 5)
    return [
        two, Empty(), Nested(two, (two, Two("acc-2", -1)), {"k": [two]}), Slotted(1, "x"), Plain(two), Plain(None), Mixed(1, 2),
        Reduced(3), WithState(4), WithNewArgs(5), Pair(1, "y"), Colour.RED, Items([1, two]), Mapping(a=two),
        Failure("boom", 2), datetime.datetime(2026, 11, 29, 9, 30), decimal.Decimal("1.5"), uuid.UUID(int=7),
        Two, Colour, len, frozenset({1}), {1, 2}, b"bytes", bytearray(b"ba"), 1.5, 2**70, None, True,
        Entry("acc-3", 7), Row(1, (2, 3), 1, 0, ("a", "b"), "/system/spark-bridge"),
        RowChunk(["/user/a/1", "/user/a/2"], [1, 2], [1, 1], [(1,), (2,)], ("v",), 0, "/system/spark-bridge"),
    ]


@pytest.mark.parametrize("obj", _samples(), ids=lambda o: type(o).__name__)
def test_the_bytes_are_pickle_s_own_and_load_back_equal(obj):
    assert dumps(obj) == pickle.dumps(obj, PROTOCOL)
    assert pickle.loads(dumps(obj)) == obj or isinstance(obj, Failure)


def test_a_batch_of_entries_with_shared_objects_is_pickle_s_own_bytes():
    two = Two("acc-1", 5)
    entries = [("/user/a", "/user/b", two), ("/user/a", "/user/c", two), (None, "/user/d", Nested(two, (two,)))]
    assert dumps(entries) == pickle.dumps(entries, PROTOCOL)
    loaded = pickle.loads(dumps(entries))
    assert loaded[0][2] is loaded[1][2]  # one object, as pickle.dumps keeps it


def test_only_classes_reduced_by_object_s_default_take_the_short_path():
    assert plain(Two) and plain(Empty) and plain(Plain) and plain(Entry)
    for cls in (Slotted, Mixed, Reduced, WithState, WithNewArgs, Pair, Colour, Items, Mapping, Failure, datetime.datetime,
                decimal.Decimal, int, type):
        assert not plain(cls), cls


def test_a_reducer_registered_with_copyreg_after_first_use_is_honoured():
    before = dumps(Registered(1))
    assert before == pickle.dumps(Registered(1), PROTOCOL)
    copyreg.pickle(Registered, lambda r: (Registered, (r.a * 10,)))
    try:
        assert dumps(Registered(1)) == pickle.dumps(Registered(1), PROTOCOL) != before
        assert pickle.loads(dumps(Registered(1))).a == 10
        copyreg.pickle(Registered, lambda r: (Registered, (r.a * 100,)))  # replaced: the table's size is the same
        assert pickle.loads(dumps(Registered(1))).a == 100
    finally:
        del copyreg.dispatch_table[Registered]
    assert dumps(Registered(1)) == before  # removed again


def test_an_unpicklable_object_raises_as_pickle_does():
    import threading

    with pytest.raises(TypeError):
        pickle.dumps(threading.Lock(), PROTOCOL)
    with pytest.raises(TypeError):
        dumps(Plain(threading.Lock()))

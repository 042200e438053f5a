"""Topology files: parsing, validation messages, class resolution."""

from __future__ import annotations

import pytest

from actors.topology import TopologyError, load, loads, resolve_class
from tests.actors.sample import Echo

GOOD = """
[system]
admin_port = 1900
journal = "sqlite://j.db?synchronous=full"
snapshot_store = "sqlite:///abs/s.db"
peers = ["10.0.0.2"]

[[actor]]
path = "/user/echo"
class = "tests.actors.sample:Echo"
args = [1]
kwargs = { a = "b" }
max_restarts = 3

[[entities]]
path = "/user/echoes"
class = "tests.actors.sample.Echo"
passivate_after = 5
node = "worker"
shards = 2
journal = "sqlite://accounts-{shard}.db"
"""


def test_a_full_topology_parses() -> None:
    topo = loads(GOOD, base_dir="/srv/app")
    assert topo.system.admin_port == 1900 and topo.system.peers == ("10.0.0.2",)
    # Relative sqlite files are relative to the topology file, absolute ones stay.
    assert topo.system.journal == "sqlite:///srv/app/j.db?synchronous=full"
    assert topo.system.snapshot_store == "sqlite:///abs/s.db"
    actor, host = topo.entries
    assert (actor.path, actor.entities, actor.args, actor.kwargs, actor.options) == (
        "/user/echo", False, (1,), {"a": "b"}, {"max_restarts": 3})
    assert host.entities and host.options == {"passivate_after": 5, "node": "worker", "shards": 2,
                                              "journal": "sqlite:///srv/app/accounts-{shard}.db"}


def test_relative_sqlite_urls_in_args_and_kwargs_are_relative_to_the_topology_file() -> None:
    topo = loads("""
        [[actor]]
        path = "/user/balances"
        class = "persistence:Projection"
        args = ["sqlite://a.db", "not a url"]
        [actor.kwargs]
        offset_store = "sqlite://read-model.db?timeout=5"
        source = { tag = "deposit", journal = "sqlite://other/journal.db" }
        mirrors = ["sqlite:///abs/m.db", "sqlite://m.db", "postgresql://u@h/db", 3]
        memory = "sqlite://:memory:"
    """, base_dir="/srv/app")
    (entry,) = topo.entries
    assert entry.args == ("sqlite:///srv/app/a.db", "not a url")
    assert entry.kwargs == {
        "offset_store": "sqlite:///srv/app/read-model.db?timeout=5",
        "source": {"tag": "deposit", "journal": "sqlite:///srv/app/other/journal.db"},
        "mirrors": ["sqlite:///abs/m.db", "sqlite:///srv/app/m.db", "postgresql://u@h/db", 3],
        "memory": "sqlite://:memory:"}


def test_the_shipped_example_parses() -> None:
    topo = load("examples/topologies/echo.toml")
    assert [e.path for e in topo.entries] == ["/user/echo", "/user/echoes"]


@pytest.mark.parametrize("text, needle", [
    ("[system]\nadmin_prot = 1", "unknown key(s) ['admin_prot']"),
    ("[system]\nadmin_port = 'x'", "admin_port must be an integer"),
    ("[[actor]]\npath = '/user/a'", "needs a string 'class'"),
    ("[[actor]]\npath = 'user/a'\nclass = 'm:C'", "[[actor]] #1"),
    ("[[actor]]\npath = '/user/a'\nclass = 'm:C'\npassivate_after = 1", "only applies to [[entities]]"),
    ("[[actor]]\npath = '/user/a'\nclass = 'm:C'\n[[actor]]\npath = '/user/a'\nclass = 'm:C'", "declared twice"),
    ("[actor]\npath = '/user/a'", "write [[actor]]"),
    ("[sytem]", "unknown top-level"),
    ("[[entities]]\npath = '/user/a'\nclass = 'm:C'\njournal = 'sqlite:///x-{id}.db'", "the only placeholder"),
    ("[system\n", "invalid TOML"),
])
def test_mistakes_are_named(text, needle) -> None:
    with pytest.raises(TopologyError) as e:
        loads(text)
    assert needle in str(e.value)


def test_resolve_class_both_spellings() -> None:
    assert resolve_class("tests.actors.sample:Echo") is Echo
    assert resolve_class("tests.actors.sample.Echo") is Echo
    for bad, needle in (("nosuchmodule:X", "cannot import"), ("tests.actors.sample:Nope", "has no"),
                        ("Echo", "module:Class"), ("tests.actors.sample:dataclass", "not a class")):
        with pytest.raises(TopologyError, match=needle):
            resolve_class(bad)

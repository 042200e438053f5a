"""A scheme registered once (tests/journal/registry_plugin.py) serves PersistentActors on both bases, as the
system's journal and as a spawn's per-shard journal whose layout persistence checks through actors' hook."""

from __future__ import annotations

import pytest

from actors import SpawnFailed
from actors.host_options import HostOptions, check_host_options, register_host_check, unregister_host_check
from journal import open_journal
from tests.persistence.registry_actors import Counter

pytestmark = pytest.mark.timeout(120)


def events_in(path, pid: str) -> int:
    """Highest sequence nr of `pid` in the SQLite file at `path`, read without the plugin."""
    with open_journal(f"sqlite://{path}") as j:
        return j.highest_sequence_nr(pid)


def test_a_persistent_actor_journals_through_a_registered_scheme(base, make_system, tmp_path) -> None:
    system = make_system(base, journal=f"relay://{tmp_path}/j.db", snapshot_store=f"relay://{tmp_path}/s.db")
    system.spawn(Counter, "/user/counter")
    assert [system.ask("/user/counter", "add") for _ in range(3)] == [1, 2, 3]
    assert events_in(tmp_path / "j.db", "/user/counter") == 3

    system.stop("/user/counter")
    system.spawn(Counter, "/user/counter")
    assert system.ask("/user/counter", "total") == 3, "recovered through the plugin"


def test_per_shard_journals_of_a_registered_scheme_keep_their_layout(base, make_system, tmp_path) -> None:
    system = make_system(base)
    template = f"relay://{tmp_path}/c-{{shard}}.db"
    system.spawn(Counter, "/user/c", entities=True, shards=2, journal=template)
    for i in range(4):
        assert system.ask(f"/user/c/{i}", "add") == 1
    assert sum(events_in(tmp_path / f"c-{k}.db", f"/user/c/{i}") for k in range(2) for i in range(4)) == 4
    system.stop("/user/c")

    with pytest.raises(SpawnFailed, match=r"belongs to shard \d of 2 of /user/c.*Start /user/c with shards=2"):
        system.spawn(Counter, "/user/c", entities=True, shards=3, journal=template)


def test_host_checks_are_called_with_the_options_and_refuse_with_value_error() -> None:
    seen: list[HostOptions] = []

    def refuse(options: HostOptions) -> None:
        seen.append(options)
        raise ValueError("no")

    options = HostOptions("/user/x", 1, 2, {"snapshot_store": "memory://x-1"}, {"snapshot_store": "memory://x-{shard}"})
    register_host_check(refuse)
    register_host_check(refuse)  # once per callable
    try:
        with pytest.raises(ValueError, match="no"):
            check_host_options(options)
    finally:
        unregister_host_check(refuse)
    check_host_options(HostOptions("/user/y", 0, 1, {}, {}))
    assert seen == [options]
    with pytest.raises(TypeError, match="callable taking HostOptions"):
        register_host_check("not callable")  # type: ignore[arg-type]

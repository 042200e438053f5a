"""Host options: actors carries upper layers' settings (journal=, snapshot_store=) without knowing them.

Their owner registers each name with its check (actors.host_options); actors runs the checks in the
caller when the owner is imported there (or found through the `reprise.host_options` entry points), and
always in the host process after importing the factory, where a name no one registered is refused.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import uuid

import pytest

from actors import ConfigError, SpawnFailed
from actors.host_options import apply_host_options, known_host_options, register_host_option
from actors.messages import HostSpec, Spawned, SpawnHost
from actors.system import kill_tagged
from persistence.store_options import check_store_url
from tests.actors.sample import Echo, Ping, Pong
from tests.conftest import SESSION_TOKEN

pytestmark = pytest.mark.timeout(120)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def spawn_with_options(system, factory: str, path: str, options: dict[str, str], **fields) -> str | None:
    """Spawn with any host options: System.spawn's signature names only journal= and snapshot_store=."""
    spec = HostSpec(path, factory, options=options, passivate_after=None, **fields)
    return system._request(SpawnHost(spec), Spawned, 60).error


def run_python(script: str, extra_path: str | None = None) -> subprocess.CompletedProcess[str]:
    """Run `script` in a fresh interpreter on this checkout: nothing imported but what it imports."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, extra_path] if extra_path else [ROOT]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True,
                          text=True, timeout=90, cwd=ROOT)


def test_an_unknown_host_option_is_refused_naming_the_known_ones(system) -> None:
    error = spawn_with_options(system, "tests.actors.sample:Echo", "/user/x", {"jurnal": "sqlite:///x.db"})
    assert error is not None and "unknown host option 'jurnal' for /user/x: known are " in error, error
    known = error.partition("known are ")[2].partition(".")[0].split(", ")
    assert {"journal", "snapshot_store"} <= set(known), error
    assert "drop the option" in error
    # Refused before the actor started: the path is free.
    system.spawn(Echo, "/user/x")
    assert system.ask("/user/x", Ping(1), timeout=30) == Pong(1, "/user/x")


def test_the_host_side_check_raises_config_error() -> None:
    with pytest.raises(ConfigError, match=r"unknown host option 'jurnal' for /user/x: known are .*journal") as e:
        apply_host_options("/user/x", 0, 1, {}, {"jurnal": "sqlite:///x.db"})
    assert isinstance(e.value, ValueError)


def test_a_layers_own_option_is_checked_in_the_host_and_filled_per_shard(system) -> None:
    """A layer the caller never imported (tests.actors.option_sample) owns `colour`: the host checks it."""
    error = spawn_with_options(system, "tests.actors.option_sample:Painter", "/user/p", {"colour": "blue-{shard}"},
                               entities=True, shards=2)
    assert error is None
    assert {system.ask(f"/user/p/{i}", "colour?", timeout=30) for i in range(8)} == {"blue-0", "blue-1"}
    error = spawn_with_options(system, "tests.actors.option_sample:Painter", "/user/q", {"colour": "red"})
    assert error is not None and "/user/q failed to start" in error
    assert "colour must be one of blue, green, got 'red'" in error


@pytest.mark.parametrize("base", ["local", pytest.param("multiproc", marks=pytest.mark.multiproc)])
def test_persistence_checks_a_string_factorys_journal_even_if_the_caller_never_imported_it(base) -> None:
    tag = f"{SESSION_TOKEN}-options-{uuid.uuid4().hex[:6]}-"
    script = f"""
        import sys
        import actors
        from actors import host_options
        host_options._discovered = True  # as if no entry point were installed: only the host can check
        assert "persistence" not in sys.modules
        with actors.start({base!r}, tag={tag!r}) as system:
            try:
                system.spawn("tests.persistence.fixtures:Scripted", "/user/s", entities=True,
                             journal="sqllite:///tmp/never-{{shard}}.db")
            except actors.SpawnFailed as e:
                print("REFUSED", type(e).__name__, e)
            print("persistence" in sys.modules)
    """
    try:
        done = run_python(script)
    finally:
        kill_tagged(tag)
    assert done.returncode == 0, done.stderr
    refused, _, imported = done.stdout.strip().rpartition("\n")
    assert refused.startswith("REFUSED SpawnFailed /user/s failed to start"), done.stdout
    assert "journal 'sqllite:///tmp/never-{shard}.db' has an unsupported scheme" in refused
    assert "did you mean sqlite://" in refused
    # The check ran in the host: on the local base that is this process, which imported the factory.
    assert imported == str(base == "local")


def test_start_checks_persistences_options_in_a_process_that_never_imported_it() -> None:
    done = run_python("""
        import sys
        import actors
        assert "persistence" not in sys.modules
        try:
            actors.start("local", journal="sqllite:///tmp/x.db")
        except actors.ConfigError as e:
            print("REFUSED", e)
    """)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("REFUSED journal 'sqllite:///tmp/x.db' has an unsupported scheme"), done.stdout
    assert "did you mean sqlite://" in done.stdout


def test_entry_points_name_the_modules_that_register_options(tmp_path) -> None:
    (tmp_path / "flavours.py").write_text(textwrap.dedent("""
        from actors.errors import ConfigError
        from actors.host_options import register_host_option

        def check(name, value, *, per_host):
            raise ConfigError(f"{name} {value!r} is not a flavour (per_host={per_host})")

        register_host_option("flavour", check)
    """))
    info = tmp_path / "reprise_flavours-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: reprise-flavours\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text("[reprise.host_options]\nflavours = flavours\n")
    done = run_python("""
        from actors.host_options import check_option, known_host_options
        print(known_host_options())
        try:
            check_option("flavour", "durian", per_host=False)
        except ValueError as e:
            print(type(e).__name__, e)
    """, str(tmp_path))
    assert done.returncode == 0, done.stderr
    known, refused = done.stdout.splitlines()
    assert "'flavour'" in known and "'journal'" in known  # journal: Reprise's own declaration
    assert refused == "ConfigError flavour 'durian' is not a flavour (per_host=False)"


def test_an_option_name_belongs_to_one_layer() -> None:
    def other(name: str, value: object, *, per_host: bool) -> None:
        """Another layer's idea of what a journal is."""

    with pytest.raises(ValueError, match=r"'journal' is already registered by persistence.store_options.check_store_url"):
        register_host_option("journal", other)
    register_host_option("journal", check_store_url)  # its owner again (a module imported twice): fine
    assert "journal" in known_host_options()
    with pytest.raises(TypeError, match="identifier"):
        register_host_option("not a name", other)


def test_a_spawn_refuses_a_bad_journal_before_spawning_when_persistence_is_imported(system) -> None:
    with pytest.raises(ConfigError, match="did you mean sqlite://"):
        system.spawn("tests.persistence.fixtures:Scripted", "/user/s", entities=True, journal="sqllite:///x.db")
    with pytest.raises(SpawnFailed, match="unknown host option"):  # the host's own check, for comparison
        error = spawn_with_options(system, "tests.actors.sample:Echo", "/user/e", {"nope": "x"})
        raise SpawnFailed(error or "accepted")

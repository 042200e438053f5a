"""Bad configuration at start, spawn and the command line: refused at once, naming the value and the fix."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

import actors
from actors.system import tagged_pids
from tests.actors.refusal import start_refused
from tests.actors.sample import Echo, Ping
from tests.actors.validation_sample import Tally
from tests.conftest import SESSION_TOKEN

pytestmark = pytest.mark.timeout(120)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def reprise(*argv: str) -> subprocess.CompletedProcess:
    """The `reprise` command of this checkout (the installed script may import another one)."""
    return subprocess.run([sys.executable, "-m", "actors.cli", *argv], cwd=ROOT, capture_output=True, text=True, timeout=90)


class NotAnActor:
    """A class that is no actors.Actor."""


def test_a_sqlite_url_naming_a_directory_is_refused_at_start_and_spawn_naming_the_directory(base, make_system,
                                                                                             tmp_path) -> None:
    # SQLite said only "unable to open database file", and only once a persistent actor's host opened it.
    directory = tmp_path / "journal.db"
    directory.mkdir()
    url = f"sqlite://{directory}"
    for option in ("journal", "snapshot_store"):
        with pytest.raises(actors.ConfigError, match="names the directory .*journal.db/journal.db"):
            start_refused(base, **{option: url})
    system = make_system(base)
    with pytest.raises(actors.ConfigError, match=f"names the directory '{directory}', not a file"):
        system.spawn(Tally, "/user/tally", journal=url)
    # (refused before anything was spawned: the path is still free)
    system.spawn(Tally, "/user/tally", journal=f"sqlite://{directory}/journal.db")
    assert system.ask("/user/tally", 3) == 3


def test_the_journal_commands_and_up_name_a_directory_given_as_the_journal(tmp_path) -> None:
    directory = tmp_path / "data"
    directory.mkdir()
    listed = reprise("journal", "ls", f"sqlite://{directory}")
    assert listed.returncode == 2, listed
    assert f"names the directory '{directory}', not a file" in listed.stderr and "no journal file" not in listed.stderr
    topology = tmp_path / "topo.toml"
    topology.write_text('[system]\njournal = "sqlite://data"\n\n[[actor]]\npath = "/user/tally"\n'
                        'class = "tests.actors.validation_sample:Tally"\n')
    tag = f"{SESSION_TOKEN}-bad-config-up-"
    up = reprise("up", str(topology), "--detach", "--port", str(actors.free_port()), "--tag", tag)
    assert up.returncode == 2, up
    assert "names the directory" in up.stderr and "Traceback" not in up.stderr
    assert tagged_pids(tag) == []  # (refused before anything started)


@pytest.mark.parametrize(("options", "named"), [
    (dict(cls=5), "cls must be an actor class"),
    (dict(cls=NotAnActor), "cls must be a subclass of actors.Actor .* NotAnActor"),
    (dict(entities="no"), "entities must be True .* or False .* got 'no'"),
    (dict(entities=1), "entities must be True"),
    (dict(args=5), "args must be a tuple .* got 5"),
    (dict(args="ab"), "args must be a tuple"),
    (dict(kwargs=[("x", 1)]), "kwargs must be a dict"),
    (dict(kwargs={1: 2}), "kwargs must be a dict"),
])
def test_spawn_refuses_a_bad_class_entities_args_or_kwargs_naming_it(base, make_system, options, named) -> None:
    # A non-class failed in the host with a traceback, args=5 with "'int' object is not iterable", and a
    # truthy entities="no" silently spawned an entity host.
    system = make_system(base)
    options = dict(options)  # (the parameter's own dict serves both bases)
    cls = options.pop("cls", Echo)
    with pytest.raises(actors.ConfigError, match=named):
        system.spawn(cls, "/user/x", **options)
    system.spawn(Echo, "/user/x")  # (nothing was spawned: the path is free)
    assert system.ask("/user/x", Ping(1)).n == 1


def test_a_malformed_path_or_a_missing_secret_file_on_the_command_line_is_a_usage_error_with_its_own_hint(
        make_system, tmp_path) -> None:
    # They exited 1 with "rerun with --verbose for the traceback", and a missing --secret-file with the hint
    # "check that --port is a Reprise admin's", about a port that was right.
    system = make_system("multiproc")
    port = str(system.admin_port)
    moved = reprise("rebalance", "--port", port, "--path", "user/t")
    assert moved.returncode == 2, moved
    assert "path 'user/t' must look like '/user/<name>" in moved.stderr and "--verbose" not in moved.stderr
    for secret in (tmp_path / "missing", tmp_path / "shared"):
        if secret.name == "shared":
            secret.write_text("x" * 64)
            secret.chmod(0o644)
        status = reprise("status", "--port", port, "--secret-file", str(secret))
        assert status.returncode == 2, status
        assert f"secret file {secret}" in status.stderr and "Reprise admin's" not in status.stderr, status.stderr
    assert reprise("status", "--port", port).returncode == 0  # (the system was not disturbed)


def test_spawn_still_takes_the_class_by_name(base, make_system) -> None:
    # ("module:Class" is resolved in the host: the type checks must let a str through)
    system = make_system(base)
    system.spawn("tests.actors.sample:Echo", "/user/by-name")
    assert system.ask("/user/by-name", Ping(2)).n == 2


@pytest.mark.parametrize(("query", "named"), [("fsync=1", r"unknown sqlite journal option\(s\) \['fsync'\]"),
                                               ("synchronous=OFF", "synchronous must be one of"),
                                               ("torn_wal=yes", "torn_wal must be 'refuse' or 'accept'"),
                                               ("busy_timeout=-1", "busy_timeout must be from 0 to 86400 seconds"),
                                               ("busy_timeout=nan", "busy_timeout must be from 0 to 86400 seconds")])
def test_a_bad_sqlite_url_option_is_refused_at_start_not_when_a_host_opens_the_journal(base, tmp_path, query,
                                                                                       named) -> None:
    # start() accepted it, and every persistent host of the system then failed to start.
    with pytest.raises(actors.ConfigError, match=named):
        start_refused(base, journal=f"sqlite://{tmp_path}/j.db?{query}")
    assert not (tmp_path / "j.db").exists()


def _up_with_journal(tmp_path, journal: str, tag: str) -> subprocess.CompletedProcess[str]:
    """`reprise up --detach` of a topology of one Tally on `journal`, tagged `tag` (its processes: tagged_pids(tag))."""
    topology = tmp_path / "topo.toml"
    topology.write_text(f'[system]\njournal = "{journal}"\n\n[[actor]]\npath = "/user/tally"\n'
                        'class = "tests.actors.validation_sample:Tally"\n')
    return reprise("up", str(topology), "--detach", "--port", str(actors.free_port()), "--tag", tag)


def test_up_refuses_a_bad_sqlite_url_option_before_starting_anything(tmp_path) -> None:
    tag = f"{SESSION_TOKEN}-bad-option-up-"
    up = _up_with_journal(tmp_path, "sqlite://j.db?busy_timout=5", tag)
    assert up.returncode == 2 and "['busy_timout']" in up.stderr and "supported are" in up.stderr, up
    assert tagged_pids(tag) == [] and not (tmp_path / "j.db").exists()


@pytest.mark.parametrize("option", ["journal", "snapshot_store"])
def test_a_file_path_given_as_a_journal_url_is_refused_at_start_and_spawn_naming_the_sqlite_url(
        base, make_system, tmp_path, option) -> None:
    # Only `reprise journal ls bank.db` named sqlite://bank.db; start() said "journal must be a URL such as
    # 'sqlite:///data/journal.db', got 'bank.db'", and open_journal() "unsupported journal URL 'bank.db'".
    what = option.replace("_", " ")
    with pytest.raises(actors.ConfigError, match=f"{option} 'bank.db' is a file path, not a URL: for a SQLite "
                                                 f"{what} in that file give sqlite://bank.db "):
        start_refused(base, **{option: "bank.db"})
    system = make_system(base)
    per_shard = f"{tmp_path}/accounts-{{shard}}.db"
    with pytest.raises(actors.ConfigError, match=f"give sqlite://{per_shard} "):
        system.spawn(Tally, "/user/tally", entities=True, shards=2, **{option: per_shard})
    # (refused before anything was spawned: the path is still free, and the URL it names works)
    system.spawn(Tally, "/user/tally", **{"journal": f"sqlite://{tmp_path}/bank.db", option: f"sqlite://{tmp_path}/bank.db"})
    assert system.ask("/user/tally", 3) == 3


def test_open_journal_names_the_sqlite_url_of_a_file_path_or_directory(tmp_path) -> None:
    from journal import InvalidUrl, open_journal

    with pytest.raises(InvalidUrl, match="'bank.db' is a file path, not a journal URL: .* give sqlite://bank.db ") as e:
        open_journal("bank.db")
    assert (e.value.problem, e.value.fix.split(" (")[0]) == (
        "'bank.db' is a file path, not a journal URL", "for a SQLite journal in that file give sqlite://bank.db")
    with pytest.raises(InvalidUrl, match=f"in a file in that directory give sqlite://{tmp_path}/journal.db "):
        open_journal(str(tmp_path))
    # Neither a URL missing its slashes nor a server address is taken for a file path.
    for url in ("sqlite:/x.db", "reprise@db.example:5432/reprise"):
        with pytest.raises(InvalidUrl, match="unsupported journal URL"):
            open_journal(url)
    assert not os.path.exists("bank.db")


def test_up_refuses_a_file_path_as_the_journal_naming_the_sqlite_url_before_starting_anything(tmp_path) -> None:
    tag = f"{SESSION_TOKEN}-file-path-up-"
    up = _up_with_journal(tmp_path, "bank.db", tag)
    assert up.returncode == 2 and "journal 'bank.db' is a file path" in up.stderr, up
    assert "give sqlite://bank.db " in up.stderr and up.stderr.count("\n") == 1, up.stderr
    assert tagged_pids(tag) == [] and not (tmp_path / "bank.db").exists()


def test_journal_show_with_the_id_first_and_a_file_path_names_the_file_s_url_not_the_id_s(tmp_path) -> None:
    # `reprise journal show /user/accounts/3 bank.db` said "'/user/accounts/3' is a file path" and suggested
    # sqlite:///user/accounts/3: the id was taken for the journal.
    from journal import open_journal

    with open_journal(f"sqlite://{tmp_path}/bank.db"):
        pass  # (an existing journal file, as a user would have)
    for args in (["/user/accounts/3", f"{tmp_path}/bank.db"], ["/user/accounts/3", "missing.db"]):
        done = reprise("journal", "show", *args)
        assert done.returncode == 2, done
        assert f"'{args[1]}' is a file path, not a journal URL" in done.stderr, done.stderr
        assert f"give sqlite://{args[1]} " in done.stderr and "/user/accounts/3" not in done.stderr, done.stderr


def test_spawn_and_up_name_the_user_path_a_path_without_its_root_likely_means(base, make_system, tmp_path) -> None:
    # "path 'feeder' must look like '/user/<name>[/<name>...]'" left the user to work out '/user/feeder'.
    system = make_system(base)
    with pytest.raises(actors.InvalidPath, match="did you mean '/user/tally'"):
        system.spawn(Tally, "tally")
    topology = tmp_path / "topo.toml"
    topology.write_text('[[actor]]\npath = "/tally"\nclass = "tests.actors.validation_sample:Tally"\n')
    tag = f"{SESSION_TOKEN}-no-root-up-"
    up = reprise("up", str(topology), "--detach", "--port", str(actors.free_port()), "--tag", tag)
    assert up.returncode == 2 and "path '/tally' must look like" in up.stderr, up
    assert "did you mean '/user/tally'?" in up.stderr and tagged_pids(tag) == [], up.stderr

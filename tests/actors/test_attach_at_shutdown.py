"""A client attaching just as its system stops: told the system went down, not that its secret is missing."""

from __future__ import annotations

import os

import pytest

import actors
from actors.auth import new_secret, write_secret
from tests.actors.exiting_admin import exiting_admin

pytestmark = pytest.mark.timeout(60)


def test_a_client_attaching_as_its_system_stops_is_told_it_went_down_not_that_its_secret_is_missing(tmp_path):
    # The admin's command line still named the run dir, whose secret had gone with the stopped system: connect
    # raised SecretUnavailable ("secret file .../secret does not exist; copy the system's secret file there"),
    # and a Spark task attaching then failed the feed with it instead of FeedSystemDown.
    run_dir = tmp_path / "run"  # (removed, as a stopped system's temporary run dir is)
    with exiting_admin(str(run_dir), hold=1.0) as (port, proc):
        with pytest.raises(actors.SystemNotRunning) as caught:
            actors.connect(port, timeout=10)
        assert proc.stdout is not None and proc.stdout.readline() == "closed\n"
    assert not isinstance(caught.value, actors.SecretUnavailable)
    assert caught.value.nothing_listens
    assert f"no actor system listens on 127.0.0.1:{port} any more: it went down" in str(caught.value), caught.value


def test_an_unusable_secret_file_of_a_system_stopping_keeps_its_own_error(tmp_path):
    # Not every secret problem is a system gone: a secret file that is there but others may read is said as such.
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    secret = write_secret(str(run_dir / "secret"), new_secret())
    os.chmod(secret, 0o644)
    with exiting_admin(str(run_dir), hold=1.0) as (port, _):
        with pytest.raises(actors.SecretUnavailable, match=f"run `chmod 600 {secret}`") as caught:
            actors.connect(port, timeout=10)
    assert caught.value.secret_file == secret


def test_a_secret_file_named_by_the_caller_that_is_missing_is_said_at_once_while_the_admin_listens(tmp_path):
    with exiting_admin(str(tmp_path / "run"), hold=30.0) as (port, _):
        missing = str(tmp_path / "no-such.secret")
        with pytest.raises(actors.SecretUnavailable, match=f"secret file {missing} does not exist") as caught:
            actors.connect(port, timeout=10, secret_file=missing)
    assert caught.value.secret_file == missing

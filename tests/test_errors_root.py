"""One error root: every exception the four packages export subclasses RepriseError (defined at the bottom,
in journal/errors.py) and keeps the builtin base users already catch."""

from __future__ import annotations

import importlib
import inspect

import pytest

import actors
import journal
from actors.cli import CliError
from journal.errors import RepriseError

PACKAGES = ("journal", "actors", "persistence", "spark_bridge")


def exported_exceptions() -> list[tuple[str, type[BaseException]]]:
    """(package.name, class) for every exception class in the packages' __all__."""
    found = []
    for package in PACKAGES:
        module = importlib.import_module(package)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj) and issubclass(obj, BaseException):
                found.append((f"{package}.{name}", obj))
    return found


def test_the_packages_export_exceptions() -> None:
    names = {name for name, _ in exported_exceptions()}
    assert {"journal.JournalError", "actors.AskTimeout", "persistence.RecoveryTimedOut",
            "spark_bridge.FeedError"} <= names


@pytest.mark.parametrize("name, cls", exported_exceptions(), ids=lambda x: x if isinstance(x, str) else "")
def test_every_exported_exception_subclasses_reprise_error(name, cls) -> None:
    assert issubclass(cls, RepriseError), (
        f"{name} must subclass RepriseError (from journal.errors, importable by every layer), keeping its "
        "builtin base second, e.g. class {cls.__name__}(RepriseError, RuntimeError)")


def test_reprise_error_is_one_class_reachable_from_every_layer() -> None:
    assert actors.RepriseError is journal.RepriseError is RepriseError
    assert RepriseError.__module__ == "journal.errors"


@pytest.mark.parametrize("name, builtin", [
    ("persistence.MaxUnconfirmedMessagesExceeded", RuntimeError),
    ("persistence.IllegalStateError", RuntimeError),
    ("persistence.RecoveryTimedOut", RuntimeError),
    ("persistence.StashOverflowError", RuntimeError),
    ("persistence.SnapshotStoreNotConfigured", RuntimeError),
    ("persistence.ProjectionError", ValueError),
    ("persistence.OffsetStoreError", ValueError),
    ("spark_bridge.FeedError", RuntimeError),
    ("journal.InvalidUrl", ValueError),
    ("actors.ConfigError", ValueError),
    ("actors.AskTimeout", TimeoutError),
    ("actors.SystemNotRunning", ConnectionError),
])
def test_the_builtin_bases_users_catch_are_kept(name, builtin) -> None:
    package, _, cls = name.partition(".")
    assert issubclass(getattr(importlib.import_module(package), cls), builtin)


def test_cli_errors_are_reprise_errors() -> None:
    assert issubclass(CliError, RepriseError)

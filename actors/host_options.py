"""Host options: settings that actors carries for upper layers without knowing what they mean.

A spawn's host options (`HostSpec.options`: persistence's store URLs, given to `spawn(...)`) and the
system's values of the same names (given to `start(...)`) belong to the layer that uses them. That layer
registers each option name with its check (`register_host_option`) when it is imported, and may add host
checks (`register_host_check`) that run when a host with its own options starts. actors owns only the
shard templates: `{shard}` in a spawn's option becomes the host's shard number, and no other placeholder
is allowed.

Where the checks run: in the caller (start, spawn, topology files) for every name registered there, so a
bad value fails before anything starts; and always in the host process, after it imported the actor's
factory, so the owner's checks run even when the caller never imported that layer (a factory given as
"module:Class"). A name no one registered in the caller is looked up through the entry points of group
`reprise.host_options` (modules that register options when imported; Reprise's pyproject.toml declares
persistence's; `make venv` / `pip install -e .` writes them into the installed metadata), then left
to the host, which refuses a name still unknown there.
"""

from __future__ import annotations

import importlib
import logging
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Protocol

from journal.urls import redact_url

from .errors import ConfigError

__all__ = ["ENTRY_POINT_GROUP", "SHARD_PLACEHOLDER", "HostCheck", "HostOptions", "OptionCheck", "apply_host_options",
           "check_host_options", "check_option", "known_host_options", "register_host_check",
           "register_host_option", "unregister_host_check", "unregister_host_option"]

log = logging.getLogger("reprise.host_options")

SHARD_PLACEHOLDER = "{shard}"
ENTRY_POINT_GROUP = "reprise.host_options"
"""Entry points naming modules that register host options when imported (value: a module name)."""


class OptionCheck(Protocol):
    """Refuses a bad value of one host option with a ConfigError (or ValueError) naming it and the fix.

    `per_host` is True for a spawn's own value (which may hold `{shard}`), False for the system's.
    """

    def __call__(self, name: str, value: Any, /, *, per_host: bool) -> None: ...


@dataclass(frozen=True)
class HostOptions:
    """What a host is about to serve with which options, as given to every registered host check."""

    path: str
    shard: int
    shards: int
    config: Mapping[str, Any]
    """The host's configuration: the system's, with this host's own options ({shard} filled in)."""
    own: Mapping[str, str]
    """The spawn's own option templates as given (e.g. {"name": "sqlite:///data/a-{shard}.db"})."""


HostCheck = Callable[[HostOptions], None]
"""Raises ValueError (naming the option and the fix) to refuse a host; the spawn then fails with it."""

_options: dict[str, OptionCheck] = {}
_checks: list[HostCheck] = []
_lock = threading.Lock()
_discovered = False
# Held while the entry points' modules are imported, so that a concurrent lookup waits for them.
_discovery_lock = threading.RLock()


def register_host_option(name: str, check: OptionCheck) -> None:
    """Own the host option `name`: `check(name, value, per_host=...)` vets every value given to it.

    Registering a name again with the same function (a module imported twice) is fine; another layer's
    claim on a name already owned is refused, since one of the two would silently lose its settings.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise TypeError(f"register_host_option needs an identifier as the option name, got {name!r}")
    if not callable(check):
        raise TypeError(f"register_host_option needs a callable check(name, value, *, per_host), got {check!r}")
    with _lock:
        current = _options.get(name)
        if current is not None and _qualname(current) != _qualname(check):
            raise ValueError(f"host option {name!r} is already registered by {_qualname(current)}; "
                             f"{_qualname(check)} cannot register it too: choose another name")
        _options[name] = check


def unregister_host_option(name: str) -> None:
    """Forget the host option `name` (tests)."""
    with _lock:
        _options.pop(name, None)


def known_host_options() -> tuple[str, ...]:
    """The registered option names, sorted, after loading the `reprise.host_options` entry points."""
    _discover()
    with _lock:
        return tuple(sorted(_options))


def check_option(name: str, value: Any, *, per_host: bool) -> bool:
    """Check one value of a host option where it is given; False if no one registered `name` here.

    actors' own rule comes first (placeholders: only `{shard}`, only in a spawn's own options), then the
    owner's check. An unregistered name is not an error here: the host process decides (its factory's
    module may register it). ValueErrors become ConfigErrors, so that callers see one kind.
    """
    if isinstance(value, str):
        _check_placeholders(name, value, per_host)
    check = _lookup(name)
    if check is None:
        if not isinstance(value, str):
            raise ConfigError(f"{name} must be a string, got {value!r}")
        return False
    try:
        check(name, value, per_host=per_host)
    except ConfigError:
        raise
    except ValueError as e:
        raise ConfigError(str(e)) from None
    return True


def apply_host_options(path: str, shard: int, shards: int, config: Mapping[str, Any],
                       own: Mapping[str, str]) -> dict[str, Any]:
    """The host's config: `config` with its own options ({shard} filled in), checked in the host process.

    Called after the factory was imported (its layer's options are registered then). Raises ValueError
    (ConfigError) for an option no one registered, a bad value, or a host check's refusal.
    """
    for name, value in own.items():
        if not check_option(name, value, per_host=True):
            known = ", ".join(known_host_options()) or "none"
            raise ConfigError(
                f"unknown host option {name!r} for {path}: known are {known}. Options are registered by the "
                f"layer that uses them when it is imported (or through a {ENTRY_POINT_GROUP!r} entry point): "
                "import that layer in the factory's module, or drop the option")
    result = dict(config)
    for name, value in own.items():
        result[name] = value.replace(SHARD_PLACEHOLDER, str(shard))
    check_host_options(HostOptions(path, shard, shards, result, dict(own)))
    return result


def register_host_check(check: HostCheck) -> None:
    """Call `check(options)` whenever a host with its own options starts (once per callable)."""
    if not callable(check):
        raise TypeError(f"register_host_check needs a callable taking HostOptions, got {check!r}")
    with _lock:
        if check not in _checks:
            _checks.append(check)


def unregister_host_check(check: HostCheck) -> None:
    """Stop calling `check` (tests)."""
    with _lock:
        if check in _checks:
            _checks.remove(check)


def check_host_options(options: HostOptions) -> None:
    """Run every registered check in registration order; the first ValueError refuses the host."""
    with _lock:
        checks = list(_checks)
    for check in checks:
        check(options)


def _check_placeholders(name: str, value: str, per_host: bool) -> None:
    """actors fills `{shard}` in a spawn's options; any other brace would reach the owner unfilled."""
    rest = value.replace(SHARD_PLACEHOLDER, "") if per_host else value
    if "{" in rest or "}" in rest:
        where = (f"the only placeholder a spawn's {name}= may hold is {SHARD_PLACEHOLDER} (the shard number)"
                 if per_host else f"placeholders such as {SHARD_PLACEHOLDER} are for a spawn's own {name}=, "
                 "not the system's")
        raise ConfigError(f"{name} {redact_url(value)!r}: {where}")


def _lookup(name: str) -> OptionCheck | None:
    with _lock:
        check = _options.get(name)
    if check is None and not _discovered:
        _discover()
        with _lock:
            check = _options.get(name)
    return check


def _discover() -> None:
    """Import the modules the `reprise.host_options` entry points name, once per process."""
    global _discovered
    with _discovery_lock:
        if _discovered:
            return
        modules = {point.value.partition(":")[0] for point in entry_points(group=ENTRY_POINT_GROUP)}
        for module in sorted(modules):
            try:
                importlib.import_module(module)
            except Exception as e:  # installed metadata naming a module this checkout lacks: its checks are absent
                log.warning("host option entry point %s could not be imported: %s", module, e)
        _discovered = True


def _qualname(check: object) -> str:
    return f"{getattr(check, '__module__', '?')}.{getattr(check, '__qualname__', type(check).__qualname__)}"

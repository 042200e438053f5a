"""Host options that actors carries for upper layers, and the checks those layers register on them.

`spawn(..., journal=..., snapshot_store=...)` are persistence's settings: actors only puts the shard
number into their `{shard}` placeholder and hands them to each host's actors in its config. What they
mean (e.g. that a per-shard journal must keep its shard layout) is checked by the layer that owns them,
which registers a check here when it is imported; actors calls the checks without knowing that layer.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["HostCheck", "HostOptions", "check_host_options", "register_host_check", "unregister_host_check"]


@dataclass(frozen=True)
class HostOptions:
    """What a host is about to serve with which options, as given to every registered host check."""

    path: str
    shard: int
    shards: int
    config: Mapping[str, Any]
    """The host's configuration: the system's, with this host's own store URLs ({shard} filled in)."""
    own: Mapping[str, str]
    """The spawn's own option templates as given (e.g. {"journal": "sqlite:///data/a-{shard}.db"})."""


HostCheck = Callable[[HostOptions], None]
"""Raises ValueError (naming the option and the fix) to refuse a host; the spawn then fails with it."""

_checks: list[HostCheck] = []
_lock = threading.Lock()


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

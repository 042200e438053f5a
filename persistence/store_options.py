"""Persistence's host options: `journal` and `snapshot_store`, what their URLs may be, and shard layouts.

actors carries them opaquely (`start(journal=...)`, `spawn(..., journal=..., snapshot_store=...)`, topology
files) and asks the checks registered here, on import of persistence, in the caller and in each host
process. pyproject.toml also names this module as a `reprise.host_options` entry point, so that a process
that never imported persistence (a script, `reprise up`) still checks these options before starting.
"""

from __future__ import annotations

import difflib
from typing import Any

from actors.errors import ConfigError
from actors.host_options import SHARD_PLACEHOLDER, HostOptions, register_host_check, register_host_option
from journal.registry import registered_schemes, supported
from journal.urls import file_path_fix, parse_url, redact_url
from persistence.plugins import check_shard_layout

__all__ = ["ACTOR_DEFAULTS", "ALOD_DEFAULTS", "STORE_OPTIONS", "check_actor_default", "check_store_url"]

STORE_OPTIONS = ("journal", "snapshot_store")
"""The host options persistence owns: the URLs of the journal and of the snapshot store."""


def check_store_url(name: str, url: Any, *, per_host: bool = True) -> None:
    """Refuse a journal / snapshot store URL with an unknown scheme or no target (ConfigError).

    Known schemes are those in journal's registry: the built-in ones and any given to `register_scheme`.
    A spawn's own URL (`per_host`) is checked with its `{shard}` as shard 0; which placeholders a value may
    hold at all is actors' rule (actors.host_options), checked before this.
    """
    if url is None:
        return
    example = "sqlite:///data/accounts-{shard}.db" if per_host else "sqlite:///data/journal.db"
    fix = file_path_fix(url, name.replace("_", " "))
    if fix is not None:  # (`journal="bank.db"`: name the sqlite:// URL it likely means, {shard} and all)
        raise ConfigError(f"{name} {url!r} is a file path, not a URL: {fix}")
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"{name} must be a URL such as {example!r}, got {redact_url(url)!r}")
    scheme = url.partition("://")[0]
    known = registered_schemes()
    if scheme not in known:
        close = difflib.get_close_matches(scheme, known, n=1)
        hint = f"did you mean {close[0]}://? " if close else ""
        raise ConfigError(f"{name} {redact_url(url)!r} has an unsupported scheme {scheme!r}: {hint}supported are "
                          f"{supported()} (e.g. sqlite:///abs/path.db, sqlite://relative.db, memory://name, "
                          "postgresql://user@host:port/db; others are added with journal.register_scheme)")
    try:
        parse_url(url.replace(SHARD_PLACEHOLDER, "0") if per_host else url)
    except ValueError as e:
        raise ConfigError(f"{name}: {redact_url(str(e))}") from None


def _check_host_stores(options: HostOptions) -> None:
    """A host whose own journal URL says {shard} keeps its shard layout (see plugins.check_shard_layout)."""
    template = options.own.get("journal")
    if template and SHARD_PLACEHOLDER in template:
        check_shard_layout(options.config["journal"], options.path, options.shard, options.shards)


def check_actor_default(name: str, value: Any, *, per_host: bool = True) -> None:
    """Refuse a bad system-wide (or host-wide) default of a PersistentActor setting (ConfigError).

    `stash_capacity`, `internal_stash_overflow_strategy` and `recovery_event_timeout` are Akka's config-level
    defaults: a PersistentActor's own attribute wins over them (persistence.persistent_actor); likewise
    akka.persistence.at-least-once-delivery.* for an AtLeastOnceDelivery's (persistence.delivery).
    """
    from actors.actor import MAX_DELAY, MIN_INTERVAL
    from persistence.messages import ReplyToStrategy

    if name == "stash_capacity":
        # 0 stashed nothing: every command that came during a recovery or behind a persist overflowed (with "throw"
        # the actor restarted on each). Akka Typed refuses it ("Negative or 0 values are not allowed"); classic Akka
        # reads <= 0 as unbounded, which is None here.
        ok = value is None or (type(value) is int and value >= 1)
        want = "an int of at least 1 (commands a persisting or recovering actor holds back), or None (unbounded)"
    elif name == "internal_stash_overflow_strategy":
        ok = value in ("throw", "drop") or isinstance(value, ReplyToStrategy)
        want = '"throw", "drop" or persistence.ReplyToStrategy(response)'
    elif name == "warn_after_number_of_unconfirmed_attempts":
        ok = type(value) is int and value >= 0  # (0: a recovered delivery warns with its first resend)
        want = "a non-negative int (how many redeliveries before an UnconfirmedWarning)"
    elif name in ALOD_COUNTS:
        ok = type(value) is int and value >= 1
        want = "an int of at least 1"
    elif name == "redeliver_interval":
        # The RedeliveryTick runs every half of it, and a timer cannot run faster than MIN_INTERVAL.
        ok = type(value) in (int, float) and 2 * MIN_INTERVAL <= value <= MAX_DELAY
        want = f"a number of seconds from {2 * MIN_INTERVAL:g} to {MAX_DELAY:g} (the RedeliveryTick runs every half of it)"
    else:
        ok = isinstance(value, int | float) and not isinstance(value, bool) and 0 < value < float("inf")
        want = "a number of seconds above 0"
    if not ok:
        raise ConfigError(f"{name} must be {want}, got {value!r}")


def check_actor_setting(owner: str, name: str, value: Any) -> None:
    """check_actor_default for the value an actor class `owner` sets itself: its ConfigError names `owner.name`."""
    try:
        check_actor_default(name, value)
    except ConfigError as e:
        raise ConfigError(f"{owner}.{e}") from None


ALOD_COUNTS = ("redelivery_burst_limit", "warn_after_number_of_unconfirmed_attempts", "max_unconfirmed_messages")
ALOD_DEFAULTS = ("redeliver_interval", *ALOD_COUNTS)
"""akka.persistence.at-least-once-delivery.*: the AtLeastOnceDelivery settings a system may give a default for."""
ACTOR_DEFAULTS = ("stash_capacity", "internal_stash_overflow_strategy", "recovery_event_timeout", *ALOD_DEFAULTS)
"""The PersistentActor settings a system (`start(...)`) may give a default for."""

for _name in STORE_OPTIONS:
    register_host_option(_name, check_store_url)
for _name in ACTOR_DEFAULTS:
    register_host_option(_name, check_actor_default)
register_host_check(_check_host_stores)

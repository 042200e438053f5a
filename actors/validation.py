"""Checks of configuration values (start, spawn, topology files): each error names the value and the fix.

Upper layers' settings (a journal URL) are checked by their owners: see actors/host_options.py.
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import ipaddress
import logging
import math
from collections.abc import Mapping, Sequence
from typing import Any

from .errors import ConfigError, UnpicklableMessage
from .pickling import dumps

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


def missing_class_hint(owner: object, name: str) -> str:
    """" (did you mean 'Feeder'? its classes: ...)" for a class `name` that `owner` (a module) lacks; "" if none."""
    import types

    if not isinstance(owner, types.ModuleType):
        return ""
    names = [n for n in dir(owner) if not n.startswith("_") and isinstance(getattr(owner, n, None), type)]
    close = difflib.get_close_matches(name, names, n=1)
    meant = f"did you mean {close[0]!r}? " if close else ""
    return f" ({meant}its classes: {', '.join(names[:20]) or 'none'})"


def check_number(name: str, value: object, *, minimum: float = 0.0, allow_equal: bool = False,
                 integer: bool = False, allow_none: bool = False, hint: str = "") -> None:
    """ConfigError unless `value` is a finite number above `minimum` (or equal, with allow_equal)."""
    if value is None and allow_none:
        return
    kind = "an integer" if integer else "a number"
    ok_type = isinstance(value, int) if integer else isinstance(value, int | float)
    if isinstance(value, bool) or not ok_type or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(f"{name} must be {kind}{' or None' if allow_none else ''}, got {value!r}"
                          f"{'; ' + hint if hint else ''}")
    if value < minimum or (value == minimum and not allow_equal):
        bound = f">= {minimum:g}" if allow_equal else f"> {minimum:g}"
        raise ConfigError(f"{name} must be {bound}, got {value!r}{'; ' + hint if hint else ''}")


def check_log_level(value: object) -> str:
    """The level name in upper case (DEBUG, INFO, WARNING, ERROR, CRITICAL), else ConfigError."""
    if isinstance(value, str) and value.upper() in LOG_LEVELS and isinstance(logging.getLevelName(value.upper()), int):
        return value.upper()
    raise ConfigError(f"log_level must be one of {', '.join(LOG_LEVELS)}, got {value!r}")


def check_ip(name: str, value: object, *, allow_none: bool = False) -> None:
    """ConfigError unless `value` is an IPv4/IPv6 address (or None, with allow_none)."""
    if value is None and allow_none:
        return
    try:
        ipaddress.ip_address(value)  # type: ignore[arg-type]  # (it raises ValueError for any other type)
    except ValueError:
        raise ConfigError(f"{name} must be an IP address such as '10.0.0.5' (not a host name), got {value!r}") from None


def check_peers(peers: object) -> tuple[str, ...]:
    """`peers` as a tuple of IP address strings, else ConfigError naming the bad entry."""
    if isinstance(peers, str) or not isinstance(peers, list | tuple | set | frozenset):
        raise ConfigError(f"peers must be a list of IP addresses, e.g. ('10.0.0.5', '10.0.0.6'), got {peers!r}")
    for peer in peers:
        check_ip(f"peers entry {peer!r}:", peer)
    return tuple(peers)


def check_leader(value: object) -> None:
    """ConfigError unless `value` is None or "ip:port"."""
    if value is None:
        return
    host, sep, port = value.rpartition(":") if isinstance(value, str) else ("", "", "")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ConfigError(f"leader must be 'IP:PORT' (the leader's admin address), e.g. '10.0.0.5:1900', got {value!r}")
    check_ip("leader's address", host.strip("[]"))


def check_port(name: str, value: object, *, free: str = " (or None for a free port)") -> None:
    """ConfigError unless `value` is None or a TCP port number (1..65535); `free` says what None means, if anything."""
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or not 0 < value < 65536):
        raise ConfigError(f"{name} must be an integer in 1..65535{free}, got {value!r}")


def check_spawn_target(cls: object, entities: object, args: object, kwargs: object) -> None:
    """ConfigError unless spawn's `cls` makes actors and `entities`, `args`, `kwargs` have their types: a wrong one
    failed in the host process with a traceback, or (a truthy `entities="no"`) silently spawned an entity host."""
    from .actor import Actor

    if isinstance(cls, type) and not issubclass(cls, Actor):
        raise ConfigError(f"cls must be a subclass of actors.Actor (or a factory returning one), got the class "
                          f"{cls.__qualname__}, which is not")
    if not callable(cls) and not isinstance(cls, str):  # (a str names the class, "module:Class", for the host)
        raise ConfigError(f"cls must be an actor class (a subclass of actors.Actor), its name ('module:Class') or a "
                          f"factory returning an actor, got {cls!r}")
    if not isinstance(entities, bool):
        raise ConfigError(f"entities must be True (one actor per path below the host's, made on demand) or False "
                          f"(one actor at the path), got {entities!r}")
    if isinstance(args, str | bytes | Mapping) or not isinstance(args, list | tuple):
        raise ConfigError(f"args must be a tuple (or list) of the positional arguments for cls, e.g. args=(1,), "
                          f"got {args!r}")
    if kwargs is not None and not (isinstance(kwargs, Mapping) and all(isinstance(k, str) for k in kwargs)):
        raise ConfigError(f"kwargs must be a dict of cls's keyword arguments by name, e.g. kwargs={{'size': 3}}, "
                          f"got {kwargs!r}")
    if isinstance(cls, str):
        module, colon, name = cls.partition(":")
        if not (module and colon and name):
            dotted = cls.rpartition(".")
            example = f" (e.g. '{dotted[0]}:{dotted[2]}')" if dotted[0] and dotted[2] else ""
            raise ConfigError(f"cls {cls!r} must name its class as 'module:Class'{example}: the host process "
                              "imports the module and takes the class from it")
    _check_picklable_spawn(cls, args, kwargs)


def _check_picklable_spawn(cls: object, args: object, kwargs: object) -> None:
    """UnpicklableMessage unless the host process can be sent `cls`, `args` and `kwargs`: the multiproc base
    failed with a raw pickling error from Thespian's transport, the local one took them (on both bases, so that
    the in-process base behaves like the real one, as for messages)."""
    qualname = getattr(cls, "__qualname__", "")
    if callable(cls) and isinstance(qualname, str) and "<locals>" in qualname:
        raise UnpicklableMessage(
            f"cls {qualname} is defined inside a function: actor processes import actor classes by module path, "
            f"so define it at the top level of a module (or of the script you run)")
    for what, value in (("cls", cls), ("args", args), ("kwargs", kwargs)):
        try:
            dumps(value)
        except Exception as exc:
            raise UnpicklableMessage(
                f"spawn's {what} cannot be sent to the host process ({type(exc).__name__}: {exc}): give actors "
                "plain data (str, numbers, tuples, dicts, frozen dataclasses) and classes or functions defined at "
                "the top level of a module; open files, locks, connections and lambdas in the actor itself "
                "(pre_start)") from exc


def check_constructor(cls: object, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """ConfigError when `cls(*args, **kwargs)` cannot be called (an argument missing, or one it does not take,
    named with the one meant): a misspelt keyword failed the spawn with a traceback from the host process."""
    if not isinstance(cls, type):
        return
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):  # (a class whose signature Python cannot tell)
        return
    try:
        signature.bind(*args, **kwargs)
    except TypeError as e:
        names = [n for n, p in signature.parameters.items() if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
        unknown = [k for k in kwargs if k not in signature.parameters]
        close = difflib.get_close_matches(unknown[0], names, n=1) if unknown else []
        hint = f" (did you mean {close[0]}?)" if close else ""
        raise ConfigError(f"{cls.__qualname__} cannot be made with these args/kwargs: {e}{hint}; its parameters are "
                          f"{', '.join(names) or 'none'}") from None


def check_spawn_options(*, passivate_after: object = None, max_restarts: object = 10, restart_window: object = 60.0,
                        linger: object = 0.0, batch_cap: object = 2000, timeout: object = 60.0) -> None:
    """Refuse spawn options that cannot work (a zero passivate_after pinned a host at 100% CPU)."""
    check_number("passivate_after", passivate_after, allow_none=True,
                 hint="seconds an entity may stay idle before it is passivated (None: never)")
    check_number("max_restarts", max_restarts, integer=True, allow_equal=True,
                 hint="restarts of an entity allowed within restart_window before it is stopped")
    check_number("restart_window", restart_window, hint="seconds over which max_restarts are counted")
    check_number("linger", linger, allow_equal=True,
                 hint="seconds a host may hold outgoing messages to batch them (0: flush at once)")
    check_number("batch_cap", batch_cap, minimum=1, allow_equal=True, integer=True,
                 hint="most messages carried in one batch")
    check_number("timeout", timeout, hint="seconds to wait for the spawn to complete")


def check_nodes(nodes: object, node: object = None) -> tuple[str, ...]:
    """`nodes` (spawn's list of nodes a host may run on) as a tuple of names, else ConfigError saying what to fix."""
    if node is not None:
        raise ConfigError(f"node={node!r} and nodes={nodes!r} were both given: node= pins a host to one node (no "
                          "failover), nodes= lists the nodes it may run on and fail over to; give one of them")
    if isinstance(nodes, str) or not isinstance(nodes, list | tuple):
        raise ConfigError(f"nodes must be a list of node names such as ['a', 'b'], got {nodes!r}")
    if not nodes:
        raise ConfigError("nodes must name at least one node, e.g. nodes=['a', 'b'] (or leave it out: the host then "
                          "runs on the leader's node)")
    for name in nodes:
        if not isinstance(name, str) or not name.strip():
            raise ConfigError(f"nodes must hold non-empty node names (strings), got {name!r} in {nodes!r}")
    duplicates = sorted({name for name in nodes if nodes.count(name) > 1})
    if duplicates:
        raise ConfigError(f"nodes lists {', '.join(map(repr, duplicates))} more than once in {nodes!r}; name each "
                          "node once")
    return tuple(nodes)


def check_shared_stores(nodes: tuple[str, ...], options: dict[str, str]) -> None:
    """ConfigError if a host that may fail over between machines has its own store in a SQLite file (one node's disk)."""
    if len(nodes) < 2:
        return
    for name, url in options.items():
        if isinstance(url, str) and url.startswith("sqlite:"):
            raise ConfigError(f"{name}={url.split('?')[0]!r} is a SQLite file on one machine's disk, but nodes={list(nodes)!r} "
                              "lets the host fail over to other machines, which would not see its events: use a "
                              "PostgreSQL URL every node reaches (or a single node)")


def memory_urls_in(args: Sequence[object], kwargs: Mapping[str, object]) -> dict[str, object]:
    """The memory:// URLs among spawn's arguments and their dataclasses' fields, by where they are (a Projection's
    `kwargs['offset_store']`, an EventsByTag's `kwargs['source'].journal`): a store only the host's process sees."""
    found: dict[str, object] = {}

    def look(where: str, value: object, depth: int) -> None:
        if isinstance(value, str):
            if value.startswith("memory:"):
                found[where] = value
        elif depth and dataclasses.is_dataclass(value) and not isinstance(value, type):
            for f in dataclasses.fields(value):
                look(f"{where}.{f.name}", getattr(value, f.name, None), depth - 1)
    for i, value in enumerate(args):
        look(f"args[{i}]", value, 1)
    for name, value in kwargs.items():
        look(f"kwargs[{name!r}]", value, 1)
    return found


def check_process_local_stores(base: str, options: Mapping[str, object]) -> None:
    """ConfigError if a multi-process system is given a store that lives in one process's memory (memory://)."""
    if base != "multiproc":
        return
    for name, url in options.items():
        if isinstance(url, str) and url.startswith("memory:"):
            raise ConfigError(
                f"{name}={url!r} lives in one process's memory, but on the multiproc base every host is a process of "
                "its own: each would get its own empty store (a projection or a query would read nothing of what "
                "the others wrote) and lose it when the host restarts. Use sqlite:///abs/path.db or "
                "postgresql://user@host:port/db, or the local base for in-memory tests")


"""Akka-style actor paths: `/user/orders`, `/user/accounts/42`, `/system/spark-bridge`."""

from __future__ import annotations

import re
from collections.abc import Iterator
from zlib import crc32

from .errors import InvalidPath

ROOTS = ("user", "system", "temp")
WILDCARDS = set("*?[]")
# Refused in paths: C0/C1 controls and the bidirectional overrides (printed by `reprise journal ls`, `status` and
# logs they would move the cursor, recolour or rewrite the terminal, or make one id look like another), and lone
# surrogates (a str from os.fsdecode or errors="surrogateescape" of bytes that are not UTF-8: not text, so no
# journal can store an id holding one). One search a path: validate_path is on the tell path.
_REFUSED = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
# Printed escaped too (allowed in paths): line and paragraph separators, which some terminals and viewers break
# lines at, and invisible marks and joiners (RLM, zero-width space), with which two ids look the same.
_INVISIBLE = re.compile("[\x00-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\u061c\u200b-\u200f\u2028\u2029"
                        "\u2060-\u2064\ufeff]")


def printable(text: str) -> str:
    """`text` with every control or invisible character shown as an escape (\\x1b, \\u202e): safe to print to a
    terminal, and two ids that differ look different."""
    return _INVISIBLE.sub(lambda m: f"\\x{ord(m.group()):02x}" if ord(m.group()) < 0x100 else f"\\u{ord(m.group()):04x}", text)


def validate_path(path: str, *, what: str = "path") -> str:
    """Return `path` if it is a valid single-destination path, else raise InvalidPath."""
    if not isinstance(path, str):
        raise InvalidPath(f"{what} must be a string like '/user/orders', got {type(path).__name__}")
    found = _REFUSED.search(path)
    if found:
        bad = f"U+{ord(found.group()):04X}"
        if "\ud800" <= found.group() <= "\udfff":
            raise InvalidPath(f"{what} {path!r} contains the lone surrogate {bad}, which is not text (it cannot be "
                              "encoded as UTF-8, so no journal can store it; it comes from decoding bytes that are "
                              "not UTF-8, e.g. os.fsdecode of a file name); paths and entity ids must be printable "
                              "text (decode such names with errors='replace', or encode binary ids, e.g. as hex)")
        raise InvalidPath(f"{what} {path!r} contains the control character {bad}; paths and entity ids must be "
                          "printable text (remove it, or encode binary ids, e.g. as hex)")
    if WILDCARDS.intersection(path):
        raise InvalidPath(
            f"{what} {path!r} contains a wildcard; wildcard destinations are not supported here "
            "(deliver to one path, or to a router actor that fans out)"
        )
    parts = path.split("/")
    if len(parts) < 3 or parts[0] != "" or any(p == "" for p in parts[1:]):
        raise InvalidPath(f"{what} {path!r} must look like '/user/<name>[/<name>...]' (no empty segments)"
                          f"{_meant(path)}")
    if parts[1] not in ROOTS:
        raise InvalidPath(f"{what} {path!r} must start with one of /user, /system, /temp{_meant(path)}")
    for p in parts[1:]:
        if p in (".", "..") or any(c.isspace() for c in p):
            raise InvalidPath(f"{what} {path!r} has an invalid segment {p!r} (no '.', '..' or spaces)")
    return path


def _meant(path: str) -> str:
    """"; did you mean '/user/feeder'?" for a path that lacks its root or has empty segments ('feeder', '/feeder',
    'user/feeder', '/user//a'), else ""."""
    names = [p for p in path.split("/") if p]
    if names and names[0] not in ROOTS:
        names.insert(0, "user")  # (user actors live below /user, as in Akka)
    meant = "/" + "/".join(names)
    if len(names) < 2 or meant == path or any(p in (".", "..") or any(c.isspace() for c in p) for p in names):
        return ""  # (nothing to name, or what it would name is no valid path either)
    return f"; did you mean {meant!r}?"


def check_spawn_path(path: str, *, what: str = "path", system_actor: bool = False) -> str:
    """validate_path, and the root a spawn may use: /user for user actors (as in Akka), /system only for a
    system actor (System.system_actor_of); /temp is the clients' (their reply paths), never spawned at."""
    validate_path(path, what=what)
    root, rest = path.split("/", 2)[1:]
    if system_actor:
        if root != "system":
            raise InvalidPath(f"{what} {path!r}: a system actor's path is below /system (e.g. /system/{rest}); "
                              "user actors are spawned below /user with spawn()")
        return path
    if root == "user":
        return path
    why = ("/system is reserved for the system's own actors (the guardian, the Spark bridges)" if root == "system"
           else "/temp is reserved for the clients' reply paths (an actor there could take their replies)")
    library = (" (a library's system actor, such as a SparkBridge subclass: system.system_actor_of(cls, path), or "
               "spark_bridge.start_bridge)" if root == "system" else "")
    raise InvalidPath(f"{what} {path!r}: {why}; spawn user actors below /user, e.g. /user/{rest}{library}")


def parent(path: str) -> str:
    """The path one level up (`/user/a/b` -> `/user/a`)."""
    return path.rsplit("/", 1)[0]


def ancestors(path: str) -> Iterator[str]:
    """The path itself, then each shorter prefix down to `/<root>/<name>`."""
    while path.count("/") >= 2:
        yield path
        path = parent(path)


def name(path: str) -> str:
    """The last segment (`/user/accounts/42` -> `42`)."""
    return path.rsplit("/", 1)[1]


def shard_of(path: str, prefix: str, shards: int) -> int:
    """Which of `shards` hosts serving `prefix` owns the entity at `path` (stable across processes)."""
    if shards == 1 or len(path) <= len(prefix) + 1:
        return 0
    return entity_shard(path[len(prefix) + 1:].split("/", 1)[0], shards)


def entity_shard(entity_id: str, shards: int) -> int:
    """shard_of for an entity id at hand (one path segment)."""
    return crc32(entity_id.encode()) % shards


def shard_key(path: str, shard: int, shards: int) -> str:
    """The name of one shard's host (`/user/accounts [shard 1]`); a single host is named by its path.

    The space keeps it from ever being a valid actor path, so it cannot clash with one.
    """
    return path if shards == 1 else f"{path} [shard {shard}]"

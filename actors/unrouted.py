"""What a sender sent through the guardian while no route it knew named the target's host (a host's first start,
or a host not known here yet): when a route appears, which of its hosts (shards) must get what the guardian holds
before anything sent to them directly (actors/handover.py for hosts, System._drain_detour for clients)."""

from __future__ import annotations

from .paths import shard_of

UNROUTED_KEPT = 4096
"""Paths remembered at most, over all groups, and groups (top-level names) at most; beyond, claims are folded."""

GROUP_KEPT = 64
"""Paths remembered at most under one top-level name; beyond, every host below that name counts as sent to."""

_NEVER = ("/temp/", "/system/")  # (clients and system actors: never remembered, see Handover.note_guardian)


def top_level(path: str) -> str:
    """The `/<root>/<name>` a path is under: every host serving it is at or below it."""
    end = path.find("/", path.find("/", 1) + 1)
    return path if end < 0 else path[:end]


class Unrouted:
    """Paths sent through the guardian while unrouted here, grouped by top-level name (a host serving a path is at
    or below its top-level name), each group at most GROUP_KEPT paths, or folded: every path below the name.

    Bounded without forgetting anything: a group folds when it is full or when UNROUTED_KEPT paths are kept in all,
    and past UNROUTED_KEPT groups everything folds into one claim on every host that appears from then on. A fold
    claims more than was sent (a handover for a host we may not have sent to: one Barrier round trip, its messages
    parked meanwhile), never less, so FIFO holds for one scatter or tell_many of any number of unknown targets.
    (Evicting the oldest paths instead, one scatter to more than 4,096 unknown targets forgot its own first ones.)
    """

    def __init__(self) -> None:
        self._groups: dict[str, set[str] | None] = {}  # top-level name -> paths sent, or None: every path below it
        self._paths = 0
        self._everything = False  # folded whole: every host that appears was maybe sent to

    def __bool__(self) -> bool:
        return self._everything or bool(self._groups)

    def add(self, target: str) -> None:
        """`target` was sent to the guardian while no route here named its host."""
        if self._everything:
            return
        top = top_level(target)
        groups = self._groups
        if top in groups:
            group = groups[top]
            if group is None or target in group:
                return  # (folded: it covers every path below its name)
        elif len(groups) >= UNROUTED_KEPT:
            self._everything, self._groups, self._paths = True, {}, 0
            return
        else:
            group = groups[top] = set()
        if len(group) >= GROUP_KEPT or self._paths >= UNROUTED_KEPT:
            self._paths -= len(group)
            groups[top] = None
            return
        group.add(target)
        self._paths += 1

    def take(self, prefix: str, shards: int) -> set[int]:
        """The shards of the host at `prefix` (whose route appeared) that were maybe sent something through the
        guardian; what only they cover is forgotten (a fold once the route of its name itself appears, if ever)."""
        if prefix.startswith(_NEVER):
            return set()
        if self._everything:
            return set(range(shards))
        top = top_level(prefix)
        groups = self._groups
        if top not in groups:
            return set()
        group = groups[top]
        if group is None:
            if prefix == top:
                del groups[top]
            return set(range(shards))
        under = prefix + "/"
        sent = [t for t in group if t == prefix or t.startswith(under)]
        for target in sent:
            group.remove(target)
        self._paths -= len(sent)
        if not group:
            del groups[top]
        return {shard_of(target, prefix, shards) for target in sent}

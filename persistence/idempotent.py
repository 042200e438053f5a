"""IdempotentReceiver: apply each (sender persistence id, delivery id) once, across restarts of either side."""

from __future__ import annotations

import bisect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from journal import register_type
from persistence.messages import SnapshotOffer
from persistence.persistent_actor import PersistentActor


@register_type(manifest="reprise.persistence.Applied")
@dataclass(frozen=True)
class Applied:
    """The receiver's event: `event` was applied for delivery `delivery_id` from `origin`."""

    origin: str
    delivery_id: int
    event: Any


@register_type(manifest="reprise.persistence.IdempotentSnapshot")
@dataclass(frozen=True)
class IdempotentSnapshot:
    """A user snapshot together with the dedup state {origin: (low watermark, ((start, end), ...))}."""

    dedup: dict
    state: Any


class SeenIds:
    """Delivery ids seen from one origin: everything <= low, plus disjoint inclusive ranges above it."""

    __slots__ = ("low", "starts", "ends")

    def __init__(self, low: int = 0, ranges: tuple = ()) -> None:
        self.low = low
        self.starts = [r[0] for r in ranges]
        self.ends = [r[1] for r in ranges]

    def __contains__(self, i: int) -> bool:
        if i <= self.low:
            return True
        k = bisect.bisect_right(self.starts, i) - 1
        return k >= 0 and self.ends[k] >= i

    def add(self, i: int) -> None:
        """Mark `i` seen, merging ranges; memory stays proportional to the number of gaps."""
        if i in self:
            return
        starts, ends = self.starts, self.ends
        k = bisect.bisect_right(starts, i)
        joins_left = k > 0 and ends[k - 1] == i - 1
        joins_right = k < len(starts) and starts[k] == i + 1
        if joins_left and joins_right:
            ends[k - 1] = ends[k]
            del starts[k], ends[k]
        elif joins_left:
            ends[k - 1] = i
        elif joins_right:
            starts[k] = i
        else:
            starts.insert(k, i)
            ends.insert(k, i)
        if starts and starts[0] == self.low + 1:
            self.low = ends[0]
            del starts[0], ends[0]

    def state(self) -> tuple:
        return self.low, tuple(zip(self.starts, self.ends, strict=True))


class IdempotentReceiver(PersistentActor):
    """A destination mixin: `persist_applied(origin, delivery_id, event, handler)` applies each delivery once."""

    def _init_persistence(self) -> None:
        super()._init_persistence()
        self._seen: dict[str, SeenIds] = {}

    def already_applied(self, origin: str, delivery_id: int) -> bool:
        """True if delivery `delivery_id` from `origin` was applied (or is being persisted)."""
        s = self._seen.get(origin)
        return s is not None and delivery_id in s

    def persist_applied(self, origin: str, delivery_id: int, event: Any, handler: Callable[[Any], Any],
                        asynchronous: bool = True) -> bool:
        """Persist `event` for this delivery unless it was already applied; False for a duplicate."""
        if self.already_applied(origin, delivery_id):
            return False
        self._seen.setdefault(origin, SeenIds()).add(delivery_id)
        persist = self.persist_async if asynchronous else self.persist
        persist(Applied(origin, delivery_id, event), lambda a: handler(a.event))
        return True

    def dedup_size(self) -> int:
        """How many ranges are kept above the low watermarks (the gaps' count)."""
        return sum(len(s.starts) for s in self._seen.values())

    def _recover_event(self, event: Any) -> None:
        if type(event) is Applied:
            self._seen.setdefault(event.origin, SeenIds()).add(event.delivery_id)
            event = event.event
        super()._recover_event(event)

    def _recover_snapshot(self, offer: SnapshotOffer) -> None:
        snap = offer.snapshot
        if isinstance(snap, IdempotentSnapshot):
            self._seen = {o: SeenIds(low, tuple(ranges)) for o, (low, ranges) in snap.dedup.items()}
            offer = SnapshotOffer(offer.metadata, snap.state)
        super()._recover_snapshot(offer)

    def _wrap_snapshot(self, snapshot: Any) -> Any:
        return IdempotentSnapshot({o: s.state() for o, s in self._seen.items()}, super()._wrap_snapshot(snapshot))

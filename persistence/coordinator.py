"""Group commit: one journal write per host settle round for all persistent actors of that host."""

from __future__ import annotations

import weakref
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from persistence.persistent_actor import PersistentActor

_coordinators: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def coordinator_for(host: Any) -> PersistenceCoordinator:
    """The coordinator of `host`, created (and registered as a settle hook) on first use."""
    c = _coordinators.get(host)
    if c is None:
        c = _coordinators[host] = PersistenceCoordinator(host)
    return c


class PersistenceCoordinator:
    """Collects the queued writes of every persistent actor in one host and commits them together.

    The host calls `settle()` after each dispatched batch; everything persisted during that dispatch goes
    out in one `write_messages` call per journal (one transaction, one fsync), then each actor's handlers
    run in call order. Handlers may persist again: those events form the next round (the host calls the
    hook again until it reports no work), which keeps Akka's "one outstanding write per actor".
    """

    def __init__(self, host: Any) -> None:
        self.host = host
        self.queue: dict[int, PersistentActor] = {}
        host.on_settle(self.settle)

    def enqueue(self, actor: PersistentActor) -> None:
        """Schedule `actor`'s queued events (and deferrals) for the next group commit."""
        self.queue.setdefault(id(actor), actor)

    def settle(self) -> bool:
        """Write everything queued, then run the handlers; True if there was anything to do."""
        if not self.queue:
            return False
        actors, self.queue = list(self.queue.values()), {}
        work = []
        groups: dict[int, tuple[Any, list, list]] = {}
        for actor in actors:
            batch = actor._take_batch()
            if not batch:
                continue
            writes = [entry.atomic for entry in batch if entry.atomic is not None]
            slot: list = [None]
            work.append((actor, batch, slot))
            if writes:
                journal = actor._journal
                g = groups.setdefault(id(journal), (journal, [], []))
                g[2].append((slot, len(g[1]), len(writes)))
                g[1].extend(writes)
        for journal, writes, slots in groups.values():
            try:
                results: Any = journal.write_messages(writes)
            except Exception as exc:  # outcome unknown: every actor of this transaction fails (Akka: stop)
                results = exc
            for slot, start, n in slots:
                slot[0] = results if isinstance(results, BaseException) else results[start:start + n]
        for actor, batch, slot in work:
            actor._on_write_results(batch, slot[0])
        return True

"""Group commit: one journal write per host settle round for all persistent actors of that host."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, cast

from actors.metrics import JOURNAL_WRITE, histogram
from journal.errors import SequenceNrTaken

if TYPE_CHECKING:
    from actors.context import ActorContext
    from journal import AtomicWrite, Journal
    from persistence.persistent_actor import PersistentActor, _Entry


WriteResults = list[BaseException | None] | BaseException | None
"""What one actor's `_on_write_results` gets: per write None (stored) or why it was rejected; one exception
when the whole journal write failed. None when every write of its batch was stored, or it only deferred (nothing
was written): the coordinator then calls `_run_handlers`, not `_on_write_results`."""


def coordinator_for(context: ActorContext) -> PersistenceCoordinator:
    """The coordinator of the host behind `context`, made (and registered as a settle hook) on first use."""
    return context.extension(PersistenceCoordinator, PersistenceCoordinator)


_NO_JOURNAL = object()  # (no actor's journal: an actor's may be None)


class PersistenceCoordinator:
    """Collects the queued writes of every persistent actor in one host and commits them together.

    The host calls `settle()` after each dispatched batch; everything persisted during that dispatch goes
    out in one `write_messages` call per journal (one transaction, one fsync), then each actor's handlers
    run in call order. Handlers may persist again: those events form the next round (the host calls the
    hook again until it reports no work), which keeps Akka's "one outstanding write per actor".
    """

    def __init__(self, context: ActorContext) -> None:
        self.queue: dict[int, PersistentActor] = {}
        self._taking: PersistentActor | None = None
        self._write_latency = histogram(context, JOURNAL_WRITE)  # one observation per journal and round
        from persistence.persistent_actor import _OneEvent, _OneWrite  # (that module imports this one)

        self._one_write_types = (_OneWrite, _OneEvent)  # batch entries that are their own AtomicWrite
        context.on_settle(self.settle)

    def enqueue(self, actor: PersistentActor) -> None:
        """Schedule `actor`'s queued events (and deferrals) for the next group commit."""
        # While its batch is being taken, an actor queues into that very batch (_take_batch first flushes
        # the before-commit contributions of compact-event mixins): queuing it again would cost it an empty
        # round in the next settle.
        if actor is not self._taking:
            self.queue[id(actor)] = actor

    def settle(self) -> bool:
        """Write everything queued, then run the handlers; True if there was anything to do."""
        queue = self.queue
        if not queue:
            return False
        self.queue = {}
        one_write, one_event = self._one_write_types
        # Parallel lists, not a tuple per actor: everything made here lives until the handlers ran.
        taken: list[PersistentActor] = []
        batches: list[list[_Entry]] = []
        counts: list[int] = []  # writes of each batch, in its journal's write_messages call
        groups: dict[int, _Group] = {}
        # The last actor's journal and its group's writes: a host's actors mostly share one journal (no lookup each).
        journal: object = _NO_JOURNAL
        group_writes: list[AtomicWrite] = []
        try:
            for actor in queue.values():
                self._taking = actor
                try:
                    batch = actor._take_batch()
                except Exception as exc:
                    # What a mixin flushes here runs user code (tags_for of a compact event): that actor fails
                    # as in a command, and none of its round is written. Let out, the exception lost the others'
                    # taken writes and had the transport deliver the dispatch's messages again.
                    actor._batch = ()
                    self._taking = None
                    if actor.context.entities.get(actor.path) is actor:  # (not one that stopped meanwhile)
                        actor.context.report_failure(actor, exc, None, actor.sender)
                    continue
                if actor._batch:
                    # An override of _take_batch queued more after taking: the next round writes it, as
                    # the enqueue ignored meanwhile would have arranged.
                    self.queue[id(actor)] = actor
                if not batch:
                    continue
                taken.append(actor)
                batches.append(batch)
                n = len(batch)
                if n == 1 and ((t := type(batch[0])) is one_write or t is one_event):
                    writes: list[AtomicWrite] = batch  # type: ignore[assignment]  # (the usual batch: one write, itself)
                else:
                    # (entry.atomic read once: an _OneWrite's is a property)
                    writes = [atomic for entry in batch if (atomic := entry.atomic) is not None]
                    n = len(writes)
                counts.append(n)
                if n:
                    if actor._journal is not journal:
                        journal = actor._journal
                        found = groups.get(id(journal))
                        if found is None:
                            found = groups[id(journal)] = _Group(cast("Journal", journal))  # (opened by recovery)
                        group_writes = found.writes
                    group_writes += writes
        finally:
            self._taking = None
        for group in groups.values():
            began = time.perf_counter()
            written = group.results = _commit(group.journal, group.writes)
            self._write_latency.observe(time.perf_counter() - began)
            # Every write stored (the usual round): each actor gets None, no slice of the results of its own.
            group.stored = type(written) is list and written.count(None) == len(written)
        journal = _NO_JOURNAL
        for actor, batch, n in zip(taken, batches, counts, strict=True):
            results: WriteResults = None  # every write stored, or deferrals only
            if n:
                if actor._journal is not journal:
                    journal = actor._journal
                    group = groups[id(journal)]
                if not group.stored:
                    results = self._results_of(group, n)
            if actor.context.entities.get(actor.path) is actor:
                try:
                    if results is None:  # (every write stored: no mixin has rejections to handle)
                        actor._run_handlers(batch, None)
                    else:
                        actor._on_write_results(batch, results)
                except Exception as exc:  # (a mixin's, outside the handlers: its events are stored, replay has them)
                    actor.context.report_failure(actor, exc, None, actor.sender)
            else:  # it stopped with these events queued: they are written, its handlers do not run
                actor._written_after_stop(results, batch=batch)
        return True

    @staticmethod
    def _results_of(group: _Group, n: int) -> WriteResults:
        """The results of the next `n` writes of `group` (a round with a rejection or a failure)."""
        written = group.results  # (written above: a list or the exception)
        if isinstance(written, BaseException):
            return written
        start = group.handed
        group.handed = start + n
        mine = written[start:start + n]
        if type(written) is _PartlyFailed:
            failed = next((r.error for r in mine if isinstance(r, _Failed)), None)
            if failed is not None:
                return failed
        return mine  # type: ignore[return-value]  # (no _Failed among them)


class _PartlyFailed(list["BaseException | None | _Failed"]):
    """A round's results of which some are _Failed (see _commit)."""


class _Failed:
    """In a round's results: the write of an actor whose persistence id's write failed (see _commit)."""

    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


def _commit(journal: Journal, writes: list[AtomicWrite]) -> Sequence[BaseException | None | _Failed] | BaseException:
    """One write_messages call for the round's writes: its results, or the exception that failed it all.

    Akka writes each actor's events in a call of its own, so a sequence number another writer took fails only
    that actor. Here one call holds the round's writes of every actor of the host: when it fails on such a number
    (SequenceNrTaken, nothing stored), the writes of the persistence ids it names go again one writer (actor
    instance) at a time, in the order they were queued, each in a call of its own: the first of two writers of one
    id in a round keeps its events, the second fails alone. The others' writes go again together first. Any other
    failure's outcome is unknown (Akka: every actor of the call stops). Only a failed call pays for this.
    """
    try:
        return journal.write_messages(writes)
    except SequenceNrTaken as exc:
        taken = exc
    except Exception as exc:
        return exc
    results = _PartlyFailed([None] * len(writes))
    pending = list(range(len(writes)))
    alone: dict[tuple[str, str], list[int]] = {}  # the writes of a named id, per writer, in queued order
    while True:
        bad = set(taken.persistence_ids)
        named = [i for i in pending if writes[i].persistence_id in bad]
        if not named:  # (it names no id of these writes: nothing to go on with)
            return taken
        for i in named:
            write = writes[i]
            alone.setdefault((write.persistence_id, write.payload[0].writer_uuid), []).append(i)
        pending = [i for i in pending if writes[i].persistence_id not in bad]
        if not pending:
            break
        try:
            for i, result in zip(pending, journal.write_messages([writes[i] for i in pending]), strict=True):
                results[i] = result
            break
        except SequenceNrTaken as exc:
            taken = exc
        except Exception as exc:
            for i in pending:
                results[i] = _Failed(exc)
            break
    for mine in alone.values():
        try:
            for i, result in zip(mine, journal.write_messages([writes[i] for i in mine]), strict=True):
                results[i] = result
        except Exception as exc:
            for i in mine:
                results[i] = _Failed(exc)
    return results


class _Group:
    """The writes of one journal in one settle round (one write_messages call), then its results."""

    __slots__ = ("journal", "writes", "results", "handed", "stored")

    def __init__(self, journal: Journal) -> None:
        self.journal = journal
        self.writes: list[AtomicWrite] = []
        self.results: Sequence[BaseException | None | _Failed] | BaseException = ()
        self.handed = 0  # results handed to actors so far, in the order their writes were added
        self.stored = False  # every write stored: each actor's results are None

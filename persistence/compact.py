"""Helpers for compact events: many deliveries (or applications) journaled as one event per group commit."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

if TYPE_CHECKING:
    from persistence.persistent_actor import PersistentActor, _Entry

_V = TypeVar("_V")


def same_or_each(values: tuple[_V, ...]) -> tuple[_V, ...]:
    """`(v,)` when every value is `v` (the usual single destination or origin), else `values` unchanged."""
    first = values[0]
    return (first,) if values.count(first) == len(values) else values


def expand(shared: tuple[_V, ...], n: int) -> tuple[_V, ...]:
    """Undo `same_or_each` for `n` values."""
    return shared * n if len(shared) == 1 and n != 1 else shared


Requeues = Mapping[type, Callable[["_Entry"], None]]
"""Per compact event type of an actor's mixins, what journals a rejected one's items again one per event."""


def inherited_requeues(parent: Any) -> dict[type, Callable[[_Entry], None]]:
    """The requeues of the mixins after this one (`parent` is `super()` in a `_compact_requeues` override)."""
    found = getattr(parent, "_compact_requeues", None)
    return dict(found()) if found is not None else {}


def split_rejected(actor: PersistentActor, batch: list[_Entry], results: list[BaseException | None],
                   requeues: Requeues) -> tuple[list[_Entry], list[BaseException | None]]:
    """Drop each rejected compact event holding several items, of a type in `requeues`, from a written batch and
    hand its batch entry to that type's requeue (which journals the items one per event, so that only the items
    that cannot be stored are rejected); return the batch and results left for `_on_write_results`.

    `requeues` holds the compact event types of *every* mixin of the actor (its `_compact_requeues()`), so one
    pass splits them all: in an actor with two such mixins (DurableDelivery and IdempotentReceiver), a split per
    mixin requeued the deferrals after the first's rejected event ahead of the second's requeued items, and a
    deferral ran before handlers that were pending when it was called.

    The deferrals (defer, defer_async) after the first such event go again too, each after the items requeued
    before it: a deferral runs after every handler pending when it was called (the acknowledgement of a
    duplicate, of deliveries journaled), so it must not run before the items' own writes are durable. Left
    in this batch, it ran before them: had their write then failed (the actor stops) or never happened (host
    killed), what it acknowledged was never stored, and its sender, acknowledged, never sent it again."""
    kept: list[_Entry] = []
    kept_results: list[BaseException | None] = []
    retry: list[_Entry] = []
    it = iter(results)
    for entry in batch:
        if entry.atomic is None:
            if retry:
                actor._withdraw(entry)
                retry.append(entry)
            else:
                kept.append(entry)
            continue
        result = next(it)
        reprs = entry.atomic.payload
        event = reprs[0].payload
        # (a compact event written with another one, e.g. by persist_and_deliver, is rejected with it: both or neither)
        if result is not None and type(event) in requeues and len(event) > 1 and len(reprs) == 1:
            actor._withdraw(entry)  # the entry is not handed to _on_write_results
            retry.append(entry)
            continue
        kept.append(entry)
        kept_results.append(result)
    for entry in retry:
        atomic = entry.atomic
        if atomic is None:
            actor._queue_entry(entry, 1, entry.stashing)  # (behind what was requeued before it)
        else:
            requeues[type(atomic.payload[0].payload)](entry)
    return kept, kept_results

"""Storm's XOR acker: one 64-bit value per tree, zero exactly when every edge sent was also acked.

A tree is one stored batch. Its edges are the bridge's deliveries anchored to it: the batch's rows and
every follow-up a destination forwarded with the row's anchor. Each edge id is XORed into the tree once
when the delivery is created and once when it is confirmed; the value returns to 0 when every delivery
is confirmed, whatever the order, with constant memory per tree. Edge ids are a 64-bit mix of the
delivery id, so the value is the same when rebuilt from the journal, and an accidental zero has
probability 2**-64 (Storm's argument). Confirmations are applied only when the bridge's
`confirm_delivery` says it is the first one: XOR is not idempotent.
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import cast


@functools.cache
def _numpy() -> ModuleType | None:
    """numpy (it comes with pyspark's pandas; the bridge works without it, only slower), imported on first use:
    its BLAS starts a thread, and pyspark's worker daemon, which imports this package, must not have one when it
    forks its workers (spark_bridge.worker_daemon)."""
    try:
        import numpy
    except ImportError:  # pragma: no cover
        return None
    return numpy

_MASK = (1 << 64) - 1
_GOLDEN, _M1, _M2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def edge(delivery_id: int) -> int:
    """The edge id of a delivery: splitmix64's finalizer (a bijection, so distinct ids never collide)."""
    z = (delivery_id + _GOLDEN) & _MASK
    z = ((z ^ (z >> 30)) * _M1) & _MASK
    z = ((z ^ (z >> 27)) * _M2) & _MASK
    return z ^ (z >> 31)


def edges(first_id: int, count: int, skip: frozenset[int] | set[int] = frozenset()) -> int:
    """XOR of the edges of deliveries first_id .. first_id + count - 1, leaving out the indices in `skip`."""
    _np = _numpy() if count > 32 else None
    if _np is not None:
        u = _np.uint64
        z = _np.arange(count, dtype=u) + u((first_id + _GOLDEN) & _MASK)  # uint64 arithmetic wraps mod 2**64
        z = (z ^ (z >> u(30))) * u(_M1)
        z = (z ^ (z >> u(27))) * u(_M2)
        z ^= z >> u(31)
        if skip:
            z[sorted(skip)] = 0
        return int(_np.bitwise_xor.reduce(z))
    value = 0
    for i in range(count):
        if i not in skip:
            value ^= edge(first_id + i)
    return value


def edge_list(delivery_ids: list[int]) -> list[int]:
    """edge(d) for each id (vectorized when numpy is there)."""
    _np = _numpy() if len(delivery_ids) >= 32 else None
    if _np is None:
        return [edge(d) for d in delivery_ids]
    u = _np.uint64
    z = _np.array(delivery_ids, dtype=u) + u(_GOLDEN)
    z = (z ^ (z >> u(30))) * u(_M1)
    z = (z ^ (z >> u(27))) * u(_M2)
    z ^= z >> u(31)
    return cast("list[int]", z.tolist())


class Tree:
    """One batch's tree: the XOR value, and what to report when it completes."""

    __slots__ = ("tree_id", "value", "rows", "feed_id", "partition", "batch_no", "reply_to")

    def __init__(self, tree_id: int, value: int, rows: int, feed_id: str, partition: int, batch_no: int,
                 reply_to: str | None = None) -> None:
        self.tree_id = tree_id
        self.value = value
        self.rows = rows
        self.feed_id = feed_id
        self.partition = partition
        self.batch_no = batch_no
        self.reply_to = reply_to

    def state(self) -> list[int | str]:
        """What a snapshot keeps (the reply path is not kept: tasks ask again after a restart)."""
        return [self.tree_id, self.value, self.rows, self.feed_id, self.partition, self.batch_no]

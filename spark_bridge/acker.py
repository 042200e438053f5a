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

_MASK = (1 << 64) - 1


def edge(delivery_id: int) -> int:
    """The edge id of a delivery: splitmix64's finalizer (a bijection, so distinct ids never collide)."""
    z = (delivery_id + 0x9E3779B97F4A7C15) & _MASK
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK
    return z ^ (z >> 31)


def edges(first_id: int, count: int, skip: frozenset | set = frozenset()) -> int:
    """XOR of the edges of deliveries first_id .. first_id + count - 1, leaving out the indices in `skip`."""
    value = 0
    for i in range(count):
        if i not in skip:
            value ^= edge(first_id + i)
    return value


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

    def state(self) -> list:
        """What a snapshot keeps (the reply path is not kept: tasks ask again after a restart)."""
        return [self.tree_id, self.value, self.rows, self.feed_id, self.partition, self.batch_no]

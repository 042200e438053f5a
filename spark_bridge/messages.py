"""Messages between feeding Spark tasks and the bridge, and the bridge's journal event."""

from __future__ import annotations

from dataclasses import dataclass

from journal import register_type


@dataclass(frozen=True)
class IngestBatch:
    """Task -> bridge: one batch of (path, message) rows, identified by (feed_id, partition, batch_no).

    `keys` (one per row, or None) are the idempotency keys when `feed(key=...)` is used: then rows
    are deduplicated one by one instead of by batch id.
    """

    feed_id: str
    partition: int
    batch_no: int
    rows: tuple
    reply_to: str
    keys: tuple | None = None


@dataclass(frozen=True)
class BatchAccepted:
    """Bridge -> task: the batch is durable in the bridge's journal (or was already); rows skipped as duplicates."""

    feed_id: str
    partition: int
    batch_no: int
    duplicates: int
    dead_lettered: int = 0


@register_type(manifest="spark_bridge.BatchStored")
@dataclass(frozen=True)
class BatchStored:
    """Bridge event: one accepted batch (only its new rows), the unit of deduplication and fan-out."""

    feed_id: str
    partition: int
    batch_no: int
    rows: tuple
    keys: tuple | None = None

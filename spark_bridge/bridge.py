"""The bridge actor: durable, deduplicating ingest of Spark batches and fan-out to destination paths."""

from __future__ import annotations

from collections import deque
from typing import Any

import actors
from actors import PathTaken
from persistence import PersistentActor, RecoveryCompleted
from spark_bridge.messages import BatchAccepted, BatchStored, IngestBatch

BRIDGE_PATH = "/system/spark-bridge"
PERSISTENCE_ID = "spark-bridge"


class _Seen:
    """Batch numbers seen for one (feed, partition): a low watermark plus the sparse set above it.

    Tasks send batches in order with a small window, so the set above the watermark stays about
    `window` wide: memory is bounded by the gaps, not by the number of batches.
    """

    __slots__ = ("watermark", "above")

    def __init__(self) -> None:
        self.watermark = 0  # every batch_no < watermark has been seen
        self.above: set[int] = set()

    def __contains__(self, batch_no: int) -> bool:
        return batch_no < self.watermark or batch_no in self.above

    def add(self, batch_no: int) -> None:
        if batch_no < self.watermark:
            return
        self.above.add(batch_no)
        while self.watermark in self.above:
            self.above.discard(self.watermark)
            self.watermark += 1


class SparkBridge(PersistentActor):
    """Stores each new batch as one event, confirms it once durable, then tells every row to its path."""

    @property
    def persistence_id(self) -> str:
        """Fixed, so the bridge finds its journal again whatever host serves it."""
        return PERSISTENCE_ID

    refan_on_recovery: int = 64
    """How many of the latest stored batches are fanned out again after a restart (see receive_recover)."""

    def pre_start(self) -> None:
        """Empty dedup state; recovery fills it from the journal."""
        self._batches: dict[tuple[str, int], _Seen] = {}
        self._keys: dict[str, set] = {}
        self._latest: deque = deque(maxlen=self.refan_on_recovery)

    # ---- recovery -------------------------------------------------------------------------------
    def receive_recover(self, event: Any) -> None:
        """Rebuild the dedup state; then fan the latest batches out again (they may not have left)."""
        if isinstance(event, BatchStored):
            self._mark(event)
            self._latest.append(event)
        elif isinstance(event, RecoveryCompleted):
            # Fan-out is a plain tell after the commit: a crash between the commit and the flush of the
            # outbox loses those rows. Only the latest writes can be in that window, so they are sent
            # again; destinations must be idempotent (they are at-least-once anyway).
            latest, self._latest = self._latest, deque()
            for stored in latest:
                for path, message in stored.rows:
                    self.tell(path, message)

    def _mark(self, event: BatchStored | IngestBatch) -> None:
        self._batches.setdefault((event.feed_id, event.partition), _Seen()).add(event.batch_no)
        if event.keys is not None:
            self._keys.setdefault(event.feed_id, set()).update(event.keys)

    # ---- commands -------------------------------------------------------------------------------
    def receive_command(self, message: Any, sender: str | None) -> None:
        """IngestBatch: dedup, persist as one event, ack when durable, fan out."""
        if not isinstance(message, IngestBatch):
            self.log.debug("spark bridge ignored %r from %s", message, sender)
            return
        m = message
        seen = self._batches.get((m.feed_id, m.partition))
        if seen is not None and m.batch_no in seen:
            # A resend, a retried task or a rerun: ack once the original is durable (it may be in flight).
            self.defer_async(BatchAccepted(m.feed_id, m.partition, m.batch_no, len(m.rows)),
                             lambda ack: self.tell(m.reply_to, ack))
            return
        rows, keys = m.rows, m.keys
        if keys is not None:
            known = self._keys.get(m.feed_id, ())
            fresh = [i for i, k in enumerate(keys) if k not in known]
            if len(fresh) < len(rows):
                rows = tuple(rows[i] for i in fresh)
                keys = tuple(keys[i] for i in fresh)
        duplicates = len(m.rows) - len(rows)
        event = BatchStored(m.feed_id, m.partition, m.batch_no, tuple(rows), keys)
        # Marked now, not in the handler: a copy arriving while this write is in flight is a duplicate.
        # If the write fails the actor stops and the state is rebuilt from the journal.
        self._mark(event)
        if not rows:
            self.defer_async(BatchAccepted(m.feed_id, m.partition, m.batch_no, duplicates),
                             lambda ack: self.tell(m.reply_to, ack))
            return
        self.persist_async(event, lambda e: self._stored(e, m.reply_to, duplicates))

    def _stored(self, event: BatchStored, reply_to: str, duplicates: int) -> None:
        router = self._host.router
        # A path no host serves goes to dead letters (the guardian records it); count those for the feed.
        unserved = sum(1 for path, _ in event.rows if router.resolve(path) is None)
        self.tell(reply_to, BatchAccepted(event.feed_id, event.partition, event.batch_no, duplicates, unserved))
        for path, message in event.rows:
            self.tell(path, message)


def start_bridge(system: actors.System, timeout: float = 60.0) -> str:
    """Spawn the bridge at /system/spark-bridge (no-op if it is already there); returns its path."""
    try:
        return system.spawn(SparkBridge, path=BRIDGE_PATH, timeout=timeout)
    except PathTaken:
        return BRIDGE_PATH

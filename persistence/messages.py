"""Messages, events and value types of the persistence API (Akka's names in Python)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from journal import MAX_SEQUENCE_NR, SnapshotMetadata, SnapshotSelectionCriteria, register_type
from journal.errors import RepriseError


@dataclass(frozen=True)
class Recovery:
    """How a persistent actor recovers: which snapshot, up to which sequence number, at most how many events."""

    from_snapshot: SnapshotSelectionCriteria = SnapshotSelectionCriteria.LATEST
    to_sequence_nr: int = MAX_SEQUENCE_NR
    replay_max: int = MAX_SEQUENCE_NR

    @staticmethod
    def none() -> Recovery:
        """No snapshot and no events; numbering still continues after the journal's highest."""
        return Recovery(SnapshotSelectionCriteria.NONE, 0)


@dataclass(frozen=True)
class RecoveryCompleted:
    """Delivered to receive_recover once recovery has finished (always, even when there was nothing)."""


@dataclass(frozen=True)
class SnapshotOffer:
    """Delivered to receive_recover before any replayed event when a snapshot was selected."""

    metadata: SnapshotMetadata
    snapshot: Any


@dataclass(frozen=True)
class SaveSnapshotSuccess:
    metadata: SnapshotMetadata


@dataclass(frozen=True)
class SaveSnapshotFailure:
    metadata: SnapshotMetadata
    cause: BaseException


@dataclass(frozen=True)
class DeleteMessagesSuccess:
    to_sequence_nr: int


@dataclass(frozen=True)
class DeleteMessagesFailure:
    cause: BaseException
    to_sequence_nr: int


@dataclass(frozen=True)
class DeleteSnapshotSuccess:
    metadata: SnapshotMetadata


@dataclass(frozen=True)
class DeleteSnapshotFailure:
    metadata: SnapshotMetadata
    cause: BaseException


@dataclass(frozen=True)
class DeleteSnapshotsSuccess:
    criteria: SnapshotSelectionCriteria


@dataclass(frozen=True)
class DeleteSnapshotsFailure:
    criteria: SnapshotSelectionCriteria
    cause: BaseException


@dataclass(frozen=True)
class ReplyToStrategy:
    """Stash overflow strategy: answer `response` to the sender of a command that does not fit."""

    response: object


# ---- at-least-once delivery ---------------------------------------------------------------------

@register_type(manifest="reprise.persistence.UnconfirmedDelivery")
@dataclass(frozen=True)
class UnconfirmedDelivery:
    """One delivery not confirmed yet (in warnings and snapshots)."""

    delivery_id: int
    destination: str
    message: Any


@register_type(manifest="reprise.persistence.AtLeastOnceDeliverySnapshot")
@dataclass(frozen=True)
class AtLeastOnceDeliverySnapshot:
    """The whole delivery state: the last allocated id and the unconfirmed deliveries in id order."""

    current_delivery_id: int
    unconfirmed_deliveries: tuple[UnconfirmedDelivery, ...] = ()


@dataclass(frozen=True)
class UnconfirmedWarning:
    """Told to self on a redelivery tick, listing deliveries whose attempts reached the warning threshold."""

    unconfirmed_deliveries: tuple[UnconfirmedDelivery, ...]


class MaxUnconfirmedMessagesExceeded(RepriseError, RuntimeError):
    """Raised by deliver when max_unconfirmed_messages deliveries are unconfirmed."""


@dataclass(frozen=True)
class RedeliveryTick:
    """The internal timer message of AtLeastOnceDelivery; never reaches user code."""


@register_type(manifest="reprise.persistence.Confirm")
@dataclass(frozen=True)
class Confirm:
    """A destination's confirmation of one delivery (handled automatically by DurableDelivery).

    `settle_for`, when set (by IdempotentReceiver, whose dedup state for this origin holds many gaps), also asks a
    DurableDelivery for its settled watermark: it answers `Settled(settle_for, low)` once the confirm is durable.
    Any other receiver of the confirm ignores it."""

    delivery_id: int
    settle_for: str = ""


@register_type(manifest="reprise.persistence.Settled")
@dataclass(frozen=True)
class Settled:
    """A DurableDelivery's promise that it will never deliver an id <= `low` again (each is confirmed, durably):
    the receiver that asked (Confirm.settle_for) takes every id <= low of origin `origin` as seen, and drops the
    gaps below it from its dedup state (ids of other destinations, which it never sees)."""

    origin: str
    low: int


@register_type(manifest="reprise.persistence.ConfirmUpTo")
@dataclass(frozen=True)
class ConfirmUpTo:
    """A destination's cumulative confirm of its deliveries with ids <= delivery_id (RabbitMQ's multiple=true)."""

    delivery_id: int


@register_type(manifest="reprise.persistence.ConfirmDeliveries")
@dataclass(frozen=True)
class ConfirmDeliveries:
    """Confirmations of many deliveries in one message (a destination confirming what it applied together)."""

    delivery_ids: tuple[int, ...]


@register_type(manifest="reprise.persistence.DeadLetteredDelivery")
@dataclass(frozen=True)
class DeadLetteredDelivery:
    """An exhausted delivery, sent (at least once) to dead_letter_path; confirm it with Confirm(delivery_id)."""

    delivery_id: int
    original_delivery_id: int
    destination: str
    message: Any
    attempts: int
    origin: str = field(default="")

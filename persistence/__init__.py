"""Persistence: PersistentActor and AtLeastOnceDelivery with Akka's semantics, on Reprise actors.

    from persistence import PersistentActor, AtLeastOnceDelivery, RecoveryCompleted
"""

from persistence import store_options  # noqa: F401 - registers journal= and snapshot_store= with actors
from persistence.delivery import AtLeastOnceDelivery
from persistence.durable import DurableDelivery
from persistence.idempotent import IdempotentReceiver, SeenIds
from persistence.messages import (
    AtLeastOnceDeliverySnapshot,
    Confirm,
    ConfirmDeliveries,
    ConfirmUpTo,
    DeadLetteredDelivery,
    DeleteMessagesFailure,
    DeleteMessagesSuccess,
    DeleteSnapshotFailure,
    DeleteSnapshotsFailure,
    DeleteSnapshotsSuccess,
    DeleteSnapshotSuccess,
    MaxUnconfirmedMessagesExceeded,
    Recovery,
    RecoveryCompleted,
    RedeliveryTick,
    ReplyToStrategy,
    SaveSnapshotFailure,
    SaveSnapshotSuccess,
    Settled,
    SnapshotOffer,
    UnconfirmedDelivery,
    UnconfirmedWarning,
)
from persistence.offset_store import OffsetConflict, OffsetStore, OffsetStoreError, open_offset_store
from persistence.persistent_actor import (
    IllegalStateError,
    PersistentActor,
    RecoveryTimedOut,
    StashOverflowError,
)
from persistence.plugins import SnapshotStoreNotConfigured, register_scheme
from persistence.projection import (
    EventsByTag,
    GetProjectionState,
    Projection,
    ProjectionError,
    ProjectionHandlerError,
    ProjectionState,
)
from persistence.table import EntityTable, TableCommit, TableSnapshot, entity_events

__all__ = [
    "AtLeastOnceDelivery", "AtLeastOnceDeliverySnapshot", "Confirm", "ConfirmDeliveries", "ConfirmUpTo", "DeadLetteredDelivery",
    "DeleteMessagesFailure", "DeleteMessagesSuccess", "DeleteSnapshotFailure", "DeleteSnapshotSuccess",
    "DeleteSnapshotsFailure", "DeleteSnapshotsSuccess", "DurableDelivery", "EntityTable", "EventsByTag", "GetProjectionState",
    "IdempotentReceiver",
    "IllegalStateError", "MaxUnconfirmedMessagesExceeded", "OffsetConflict", "OffsetStore", "OffsetStoreError", "PersistentActor",
    "Projection", "ProjectionError", "ProjectionHandlerError", "ProjectionState", "Recovery", "RecoveryCompleted",
    "RecoveryTimedOut", "RedeliveryTick", "ReplyToStrategy", "SaveSnapshotFailure", "SaveSnapshotSuccess",
    "SeenIds", "Settled", "SnapshotOffer", "SnapshotStoreNotConfigured", "StashOverflowError", "TableCommit", "TableSnapshot",
    "UnconfirmedDelivery", "UnconfirmedWarning", "entity_events", "open_offset_store",
    "register_scheme",
]

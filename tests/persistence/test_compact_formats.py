"""The stored form of the compact events and snapshots of DurableDelivery, IdempotentReceiver and EntityTable is
pinned: journals written today hold these bytes (format 2), and a later version must read them back as these
values (a field reordered or renamed without a version and an upcaster would read old journals wrong)."""

from __future__ import annotations

import pytest

from journal.serialization import deserialize, serialize
from persistence.durable import DeliveriesConfirmed, DeliveriesKept, DeliveriesSent, DurableSnapshot
from persistence.idempotent import AppliedBatch, DedupKept, IdempotentSnapshot, IdempotentSnapshotInBatch
from persistence.messages import AtLeastOnceDeliverySnapshot, UnconfirmedDelivery
from persistence.table import TableCommit, TableSnapshot

VALUES = {
    "DeliveriesSent": DeliveriesSent((7, 8), ("/user/a",), ("m7", ("m", 8))),
    "DeliveriesSent each": DeliveriesSent((9, 11), ("/user/a", "/user/b"), ("x", "y")),
    "DeliveriesConfirmed": DeliveriesConfirmed((3, 5), 2),
    "DeliveriesKept": DeliveriesKept(AtLeastOnceDeliverySnapshot(12, (UnconfirmedDelivery(11, "/user/a", "m11"),)), 9),
    "DurableSnapshot": DurableSnapshot(AtLeastOnceDeliverySnapshot(12, (UnconfirmedDelivery(11, "/user/a", "m11"),)),
                                       {"n": 1}),
    "AppliedBatch": AppliedBatch(("/o1", "/o2"), (4, 9), ("e4", ("e", 9))),
    "IdempotentSnapshot": IdempotentSnapshot({"/o": (40, ((42, 44), (50, 50)))}, ("s", 1)),
    "IdempotentSnapshotInBatch": IdempotentSnapshotInBatch({"/o": (3, ((5, 6),))}, ["a", "b"], 2),
    "DedupKept": DedupKept({"/o": (40, ((42, 44), (50, 50))), "/p": (0, ((3, 3),))}, 17),
    "TableCommit": TableCommit(2, ("a", "b", "a"), ("e1", "e2", "e3"), ("/o", "/o"), (7, 8), b"cols"),
    "TableSnapshot": TableSnapshot(1, {"a": 10, "b": 0}, {"/o": (8, ((10, 12),))}, None),
}

# serialize(VALUES[name]).hex() as this version writes it.
STORED = {
    "DeliveriesSent": (
        "96c70001d922726570726973652e70657273697374656e63652e44656c6976657269657353656e740193c70002070892c70002a72f757365722f6193c70002a26d3793c70002a16d08"),
    "DeliveriesSent each": (
        "96c70001d922726570726973652e70657273697374656e63652e44656c6976657269657353656e740193c70002090b93c70002a72f757365722f61a72f757365722f6293c70002a178a179"),
    "DeliveriesConfirmed": (
        "95c70001d927726570726973652e70657273697374656e63652e44656c69766572696573436f6e6669726d65640193c70002030502"),
    "DeliveriesKept": (
        "95c70001d922726570726973652e70657273697374656e63652e44656c697665726965734b6570740195c70001d92f726570726973652e70657273697374656e63652e41744c656173744f6e636544656c6976657279536e617073686f74010c92c7000296c70001d927726570726973652e70657273697374656e63652e556e636f6e6669726d656444656c6976657279010ba72f757365722f61a36d313109"),
    "DurableSnapshot": (
        "95c70001d923726570726973652e70657273697374656e63652e44757261626c65536e617073686f740195c70001d92f726570726973652e70657273697374656e63652e41744c656173744f6e636544656c6976657279536e617073686f74010c92c7000296c70001d927726570726973652e70657273697374656e63652e556e636f6e6669726d656444656c6976657279010ba72f757365722f61a36d313181a16e01"),
    "AppliedBatch": (
        "96c70001d920726570726973652e70657273697374656e63652e4170706c69656442617463680193c70002a32f6f31a32f6f3293c70002040993c70002a2653493c70002a16509"),
    "IdempotentSnapshot": (
        "95c70001d926726570726973652e70657273697374656e63652e4964656d706f74656e74536e617073686f740181a22f6f93c700022893c7000293c700022a2c93c70002323293c70002a17301"),
    "IdempotentSnapshotInBatch": (
        "96c70001d92d726570726973652e70657273697374656e63652e4964656d706f74656e74536e617073686f74496e42617463680181a22f6f93c700020392c7000293c70002050692a161a16202"),
    "DedupKept": (
        "95c70001bd726570726973652e70657273697374656e63652e44656475704b6570740182a22f6f93c700022893c7000293c700022a2c93c700023232a22f7093c700020092c7000293c70002030311"),
    "TableCommit": (
        "99c70001bf726570726973652e70657273697374656e63652e5461626c65436f6d6d6974020293a161a162a16197c0000301a26531a26532a2653392a22f6f0293000701c404636f6c73"),
    "TableSnapshot": (
        "97c70001d921726570726973652e70657273697374656e63652e5461626c65536e617073686f74010182a1610aa1620081a22f6f93c700020892c7000293c700020a0cc0"),
}


@pytest.mark.parametrize("name", sorted(VALUES))
def test_stored_compact_events_and_snapshots_read_back_as_the_same_values(name: str) -> None:
    assert deserialize(bytes.fromhex(STORED[name])) == VALUES[name]


@pytest.mark.parametrize("name", sorted(VALUES))
def test_compact_events_and_snapshots_are_written_as_pinned(name: str) -> None:
    # (a new format may change this; the reading test above must keep passing for these bytes)
    assert serialize(VALUES[name]).hex() == STORED[name]

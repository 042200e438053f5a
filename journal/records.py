"""How events and snapshots become stored rows (bytes + checksum) and back; shared by every backend.

An event is stored as one msgpack array `[writer_uuid, manifest, timestamp, tags, metadata, payload]`
(or, for a registered dataclass payload, `[..., metadata, payload manifest, version, *field values]`:
inlining the top-level payload saves an ext type and a nested pack/unpack on the hot paths),
next to its key (persistence id, sequence nr) and a crc32 checksum of those bytes seeded by the key.
A snapshot is stored as `[metadata, snapshot]` with a checksum seeded the same way.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from zlib import crc32 as _crc32

import msgpack

from journal.errors import JournalCorruption, SerializationError
from journal.model import AtomicWrite, PersistentRepr, replayed_repr
from journal.serialization import build, checksum, corruption, ext_hook, flatten, key_seed, serialize

_unpackb = msgpack.unpackb
_NO_TAGS: frozenset[str] = frozenset()
_MASK = 0xFFFFFFFF
_SEED_STEP = 0x9E3779B1

Row = tuple[str, int, bytes, int]
"""(persistence_id, sequence_nr, record bytes, checksum): what backends store for one event."""

StoredRow = tuple[int, bytes, int]
"""(sequence_nr, record bytes, checksum): what backends return when replaying one persistence id."""


@dataclass(slots=True)
class EncodedBatch:
    """The rows of the AtomicWrites of one write_messages call that serialized fine."""

    rows: list[Row]
    tag_rows: list[tuple[str, str, int]]  # (tag, persistence_id, sequence_nr)


def encode_writes(
    messages: Sequence[AtomicWrite], timestamp: int,
) -> tuple[EncodedBatch, list[BaseException | None]]:
    """Serialize every AtomicWrite; one that fails is left out and reported as its rejection."""
    results: list[BaseException | None] = [None] * len(messages)
    rows: list[Row] = []
    tag_rows: list[tuple[str, str, int]] = []
    pack = serialize
    for i, aw in enumerate(messages):
        if not isinstance(aw, AtomicWrite):
            raise TypeError(f"write_messages takes AtomicWrites, got {type(aw).__qualname__}")
        pid = aw.payload[0].persistence_id
        seed = key_seed(pid)
        aw_rows: list[Row] = []
        aw_tags: list[tuple[str, str, int]] = []
        try:
            for r in aw.payload:
                seq = r.sequence_nr
                tags = r.tags
                flat = flatten(r.payload)
                if flat is None:
                    blob = pack([r.writer_uuid, r.manifest, timestamp, sorted(tags) if tags else [],
                                 r.metadata, r.payload])
                else:
                    blob = pack([r.writer_uuid, r.manifest, timestamp, sorted(tags) if tags else [],
                                 r.metadata, flat[0], flat[1], *flat[2]])
                aw_rows.append((pid, seq, blob, _crc32(blob, (seed + seq * _SEED_STEP) & _MASK)))
                if tags:
                    aw_tags.extend((t, pid, seq) for t in tags)
        except SerializationError as e:
            rejection = SerializationError(
                f"rejected write of persistence id {pid!r}, sequence nr {r.sequence_nr}: {e}")
            rejection.__cause__ = e
            results[i] = rejection
            continue
        rows.extend(aw_rows)
        if aw_tags:
            tag_rows.extend(aw_tags)
    return EncodedBatch(rows, tag_rows), results


def decode_rows(persistence_id: str, rows: Iterable[StoredRow]) -> list[PersistentRepr]:
    """Check and decode replayed rows of one persistence id (the replay hot path)."""
    seed = key_seed(persistence_id)
    out: list[PersistentRepr] = []
    append = out.append
    crc = _crc32
    hook = ext_hook
    for seq, blob, ck in rows:
        if crc(blob, (seed + seq * _SEED_STEP) & _MASK) != ck:
            raise corruption(persistence_id, seq)
        try:
            fields = _unpackb(blob, ext_hook=hook, strict_map_key=False)
            writer, manifest, ts, tags, meta = fields[:5]
            payload = fields[5] if len(fields) == 6 else build(fields[5], fields[6], fields[7:])
        except SerializationError as e:
            raise SerializationError(
                f"cannot read persistence id {persistence_id!r}, sequence nr {seq}: {e}") from e
        except Exception as e:  # checksum matched, so the bytes are as written: a format mismatch
            raise JournalCorruption(
                f"unreadable event: persistence id {persistence_id!r}, sequence nr {seq}: {e}",
                persistence_id, seq) from e
        append(replayed_repr(payload, seq, persistence_id, manifest, writer, ts,
                             frozenset(tags) if tags else _NO_TAGS, meta))
    return out


def decode_row(persistence_id: str, sequence_nr: int, blob: bytes, ck: int) -> PersistentRepr:
    """Check and decode a single stored event."""
    return decode_rows(persistence_id, ((sequence_nr, blob, ck),))[0]


def encode_snapshot(persistence_id: str, sequence_nr: int, metadata: object, snapshot: object) -> tuple[bytes, int]:
    """Serialize a snapshot (and its metadata) with its checksum."""
    blob = serialize([metadata, snapshot])
    return blob, checksum(key_seed(persistence_id), sequence_nr, blob)


def decode_snapshot(persistence_id: str, sequence_nr: int, blob: bytes, ck: int) -> tuple[object, object]:
    """Check and decode a stored snapshot into (metadata, snapshot); never returns None for a bad one."""
    if checksum(key_seed(persistence_id), sequence_nr, blob) != ck:
        raise corruption(persistence_id, sequence_nr, "snapshot")
    try:
        metadata, snapshot = _unpackb(blob, ext_hook=ext_hook, strict_map_key=False)
    except SerializationError as e:
        raise SerializationError(
            f"cannot read snapshot of persistence id {persistence_id!r}, sequence nr {sequence_nr}: {e}"
        ) from e
    except Exception as e:
        raise JournalCorruption(
            f"unreadable snapshot: persistence id {persistence_id!r}, sequence nr {sequence_nr}: {e}",
            persistence_id, sequence_nr) from e
    return metadata, snapshot


def check_row(persistence_id: str, sequence_nr: int, blob: bytes, ck: int) -> str | None:
    """Why a stored event is unreadable, or None when its checksum and contents are fine (for verify)."""
    try:
        decode_row(persistence_id, sequence_nr, bytes(blob), ck)
    except JournalCorruption as e:
        return str(e)
    except SerializationError as e:
        return f"unreadable payload: {e}"
    return None


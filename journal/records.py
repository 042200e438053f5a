"""How events and snapshots become stored rows (bytes + checksum) and back; shared by every backend.

An event is stored next to its key (persistence id, sequence nr) and a crc32 checksum of its bytes seeded
by the key, as one msgpack array (the formats are described in journal.serialization):

* format 2, written today: `[2, writer_uuid, manifest, timestamp, tags, metadata, payload]` (tags sorted,
  nil when there are none), or for a
  registered dataclass payload `[2, ..., metadata, payload manifest, version, *field values]` (inlined:
  one marked array less on the hot paths); packed by one Packer call.
* format 1, written before issue 16 and read forever: `[writer_uuid, manifest, timestamp, tags, metadata,
  payload]` or `[..., metadata, payload manifest, version, *field values]`, with nested ext values.

The two are told apart by the array's first item: the int 2, or the writer uuid (a str). A snapshot is
`[3, metadata, snapshot]` (format 3, written today), `[2, metadata, snapshot]` (format 2) or `[metadata,
snapshot]` (format 1), with a checksum seeded the same way; format 3's checksum goes on over the snapshot's
timestamp (8 bytes, big-endian), which is stored beside the bytes: a flipped bit there made a load with a
timestamp bound pick another snapshot than the one asked for, unnoticed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, TypeVar
from zlib import crc32 as _crc32

import msgpack

from journal.errors import JournalCorruption, SerializationError
from journal.model import MAX_SEQUENCE_NR, AtomicWrite, EventEnvelope, PersistentRepr, Problem, replayed_repr
from journal.serialization import (
    _SEEDS_KEPT,
    FORMAT_FLAT,
    HIGH_SEED_STEP,
    SEED_STEP,
    _by_class,
    _by_manifest,
    build,
    corruption,
    ext_hook,
    flat_ext_hook,
    key_seed,
    list_hook,
    thread_packer,
)
from journal.serialization import checksum as checksum

_unpackb = msgpack.unpackb
_NO_TAGS: frozenset[str] = frozenset()
_MASK = 0xFFFFFFFF
_SEED_STEP = SEED_STEP
_HIGH_STEP = HIGH_SEED_STEP  # (see serialization.SEED_STEP)

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
    """Serialize every AtomicWrite; one that fails, or whose persistence id or tags no backend can store (not a
    str, a NUL, a lone surrogate; an empty tag), is left out and reported as its rejection."""
    results: list[BaseException | None] = [None] * len(messages)
    rows: list[Row] = []
    tag_rows: list[tuple[str, str, int]] = []
    pack = thread_packer()
    registered = _by_class.get
    seeds = _write_seeds
    good_tags = _good_tags
    crc = _crc32
    write_types = _write_types
    for i, aw in enumerate(messages):
        if type(aw) not in write_types:
            if not isinstance(aw, AtomicWrite):
                raise TypeError(f"write_messages takes AtomicWrites, got {type(aw).__qualname__}")
            if len(write_types) < 64:
                write_types.add(type(aw))  # (an AtomicWrite subclass, e.g. persistence's _OneWrite: no isinstance each)
        reprs = aw.payload
        r = reprs[0]  # (named by a rejection of the id, before the loop binds it)
        pid = r.persistence_id
        n, n_tags = len(rows), len(tag_rows)
        try:
            # Inside the try: an id or tag no backend can store is this write's rejection, and the batch goes on.
            seed = seeds.get(pid)
            if seed is None:
                seed = _write_seed(pid)
            for r in reprs:  # one pass: record, checksum and row (most AtomicWrites hold one event)
                seq = r.sequence_nr
                if type(seq) is not int or not 0 <= seq <= MAX_SEQUENCE_NR:
                    seq = _checked_sequence_nr(seq)
                tags = r.tags
                if tags and not (type(tags) is frozenset and tags <= good_tags):
                    _check_tags(tags)
                payload = r.payload
                reg = registered(type(payload))
                # No tags are nil, not an empty array: an array costs a list hook call when replayed.
                if reg is None:
                    blob = pack([FORMAT_FLAT, r.writer_uuid, r.manifest, timestamp, sorted(tags) if tags else None,
                                 r.metadata, payload])
                elif reg.only_field is not None:  # (one field: its getter, in C, not the values lambda)
                    blob = pack([FORMAT_FLAT, r.writer_uuid, r.manifest, timestamp, sorted(tags) if tags else None,
                                 r.metadata, reg.manifest, reg.version, reg.only_field(payload)])
                else:
                    blob = pack([FORMAT_FLAT, r.writer_uuid, r.manifest, timestamp, sorted(tags) if tags else None,
                                 r.metadata, reg.manifest, reg.version, *reg.values(payload)])
                rows.append((pid, seq, blob, crc(blob, (seed + seq * _SEED_STEP + (seq >> 32) * _HIGH_STEP) & _MASK)))
                if tags:
                    tag_rows.extend((t, pid, seq) for t in tags)
        except Exception as e:
            # Whatever encoding one write raises is its rejection, not the batch's failure: a registered class's own
            # packing (store_values_with) may raise anything (a KeyError), and let out, it failed the group commit of
            # every actor of the host, which all stopped with none of their events stored (Akka: a serializer's error
            # is onPersistRejected of that actor alone).
            del rows[n:], tag_rows[n_tags:]  # the AtomicWrite is rejected whole
            what = f"{e}" if isinstance(e, SerializationError | TypeError | ValueError | OverflowError) else (
                f"{type(e).__name__}: {e}")  # (a KeyError's text alone is only the key)
            cause = e if isinstance(e, SerializationError) else SerializationError(
                f"cannot serialize {type(r.payload).__qualname__}: {what}")
            rejection = SerializationError(
                f"rejected write of persistence id {pid!r}, sequence nr {r.sequence_nr}: {cause}")
            rejection.__cause__ = cause
            results[i] = rejection
    return EncodedBatch(rows, tag_rows), results


# The checksum seeds of persistence ids that passed _write_seed, and the tags that passed _check_tags: each id and
# tag is checked once, not per write (serialization's _seeds also holds ids read back, which were never checked).
_write_seeds: dict[str, int] = {}
_good_tags: set[str] = set()
_write_types: set[type] = {AtomicWrite}  # AtomicWrite and the subclasses of it met so far


def _write_seed(pid: object) -> int:
    """The checksum seed of a persistence id to write, once it is checked to be storable on every backend."""
    if not isinstance(pid, str):
        raise SerializationError(f"the persistence id must be a str, got {type(pid).__qualname__} {pid!r} "
                                 "(give the actor or AtomicWrite a str id, e.g. str(...) of it)")
    if "\x00" in pid:
        raise SerializationError("the persistence id holds a NUL character (U+0000), which PostgreSQL text cannot "
                                 "store; remove it, or encode binary ids, e.g. as hex")
    try:
        seed = key_seed(pid)
    except UnicodeEncodeError as e:
        raise SerializationError(_not_utf8("the persistence id", pid, e)) from None
    if len(_write_seeds) >= _SEEDS_KEPT:
        _write_seeds.clear()  # (as serialization._seeds: a host's entities stay cached, a stream of ids is bounded)
    _write_seeds[pid] = seed
    return seed


def _check_tags(tags: object) -> None:
    """Raise SerializationError naming the first tag no backend can store (events_by_tag could not find it)."""
    if not isinstance(tags, (frozenset, set)):
        raise SerializationError(f"tags must be a frozenset of str, got {type(tags).__qualname__} {tags!r} "
                                 "(PersistentRepr(..., tags=frozenset({...})); tags_for returns an iterable of str)")
    for tag in tags:
        if not isinstance(tag, str) or not tag:
            raise SerializationError(
                f"tag {tag!r} is not a non-empty str, the only tags events_by_tag finds (return str tags from "
                "tags_for, e.g. str(...) of a number)")
        if "\x00" in tag:
            raise SerializationError(f"tag {tag!r} holds a NUL character (U+0000), which PostgreSQL text cannot "
                                     "store; remove it from what tags_for returns")
        try:
            tag.encode()
        except UnicodeEncodeError as e:
            raise SerializationError(_not_utf8(f"tag {tag!r}", tag, e)) from None
    if len(_good_tags) >= _SEEDS_KEPT:
        _good_tags.clear()
    _good_tags.update(tags)  # (only str tags get here; a str subclass equal to one is as storable)


def _checked_sequence_nr(seq: object) -> int:
    """`seq` as an int if every backend stores and replays it as given (an int subclass too), else SerializationError."""
    if isinstance(seq, int) and not isinstance(seq, bool) and 0 <= seq <= MAX_SEQUENCE_NR:
        return int(seq)
    # A negative one was stored but never replayed (replay starts at 0); one beyond a 64-bit int or a bool failed
    # the whole batch on PostgreSQL and SQLite; a str was multiplied into the checksum seed (gigabytes).
    raise SerializationError(f"the sequence nr must be an int from 0 to {MAX_SEQUENCE_NR}, got "
                             f"{type(seq).__qualname__} {seq!r}")


def _not_utf8(what: str, text: str, e: UnicodeEncodeError) -> str:
    """Why `text` (a persistence id or tag) cannot be stored: a lone surrogate, not encodable as UTF-8."""
    return (f"{what} holds the lone surrogate U+{ord(text[e.start]):04X}, which is not text: it cannot be encoded "
            "as UTF-8 to store (it comes from decoding bytes that are not UTF-8, e.g. os.fsdecode of a file name); "
            "decode such names with errors='replace', or encode binary ids, e.g. as hex")


_R = TypeVar("_R")


def decode_rows(persistence_id: str, rows: Iterable[StoredRow]) -> list[PersistentRepr]:
    """Check and decode replayed rows of one persistence id (the replay hot path)."""
    return _decoded(zip(repeat(persistence_id), rows, repeat(None)), replayed_repr)


def decode_envelopes(rows: Sequence[tuple[int, str, int, bytes, int]]) -> list[EventEnvelope]:
    """Check and decode rows (offset, persistence id, seq nr, record, checksum), of any persistence ids, into
    EventEnvelopes (the persistence queries' hot path)."""
    if not rows:
        return []
    offsets, pids, seqs, blobs, checksums = zip(*rows, strict=True)
    return _decoded(zip(pids, zip(seqs, blobs, checksums, strict=True), offsets, strict=True), _envelope)


def _envelope(payload: object, seq: int, pid: str, manifest: str, writer: str, ts: int, tags: frozenset[str],
              meta: object, offset: int) -> EventEnvelope:
    # (no PersistentRepr in between, and the slots set directly: the frozen __init__ cost 0.74 µs, this 0.41)
    e = _new(EventEnvelope)
    _set_offset(e, offset)
    _set_pid(e, pid)
    _set_seq(e, seq)
    _set_event(e, payload)
    _set_timestamp(e, ts)
    _set_tags(e, tags)
    return e


_new = object.__new__
_set_offset, _set_pid, _set_seq, _set_event, _set_timestamp, _set_tags = (
    getattr(EventEnvelope, name).__set__
    for name in ("offset", "persistence_id", "sequence_nr", "event", "timestamp", "tags"))


def _decoded(rows: Iterable[tuple[str, StoredRow, Any]], make: Callable[..., _R]) -> list[_R]:
    """Check and decode (persistence id, stored row, extra) triples, each into `make(payload, seq nr, persistence
    id, manifest, writer uuid, timestamp, tags, metadata, extra)`; one loop for replay and for queries, whose
    rows mix persistence ids (a run of one id cost ~2 µs more than a row when each run was a call)."""
    last: str | None = None
    seed = 0
    out: list[_R] = []
    append = out.append
    crc = _crc32
    unpackb = _unpackb
    registered = _by_manifest.get
    flat, hook, old_hook = FORMAT_FLAT, list_hook, ext_hook
    for persistence_id, (seq, blob, ck), extra in rows:
        if persistence_id != last:
            seed, last = key_seed(persistence_id), persistence_id
        if crc(blob, (seed + seq * _SEED_STEP + (seq >> 32) * _HIGH_STEP) & _MASK) != ck:
            raise corruption(persistence_id, seq)
        try:
            head = blob[0]
            if (blob[1] if head < 0xDC else blob[3] if head == 0xDC else blob[5]) == flat:
                # Format 2: the first item is the int 2 (format 1 has the writer uuid's str header there); after
                # a fixarray header, or 0xDC and 2 length bytes (16 or more items), or 0xDD and 4.
                fields = unpackb(blob, ext_hook=flat_ext_hook, list_hook=hook, strict_map_key=False)
                if head == 0x97:  # 7 items: a payload that is not a registered object
                    payload = fields[6]
                else:
                    reg = registered(fields[6])
                    payload = (reg.make_record(fields) if reg is not None
                               else build(fields[6], fields[7], fields[8:]))
                _, writer, manifest, ts, tags, meta = fields[:6]
            else:
                fields = unpackb(blob, ext_hook=old_hook, strict_map_key=False)
                writer, manifest, ts, tags, meta = fields[:5]
                payload = fields[5] if len(fields) == 6 else build(fields[5], fields[6], fields[7:])
        except SerializationError as e:
            raise SerializationError(f"cannot read persistence id {persistence_id!r}, sequence nr {seq}: {e}",
                                     e.unknown_manifest) from e
        except Exception as e:  # checksum matched, so the bytes are as written: a format mismatch
            raise JournalCorruption(
                f"unreadable event: persistence id {persistence_id!r}, sequence nr {seq}: {e}",
                persistence_id, seq) from e
        append(make(payload, seq, persistence_id, manifest, writer, ts, frozenset(tags) if tags else _NO_TAGS, meta,
                    extra))
    return out


def decode_row(persistence_id: str, sequence_nr: int, blob: bytes, ck: int) -> PersistentRepr:
    """Check and decode a single stored event."""
    return decode_rows(persistence_id, ((sequence_nr, blob, ck),))[0]


SNAPSHOT_FORMAT = 3
"""The format snapshots are written in: format 2's array, the checksum covering the timestamp too."""


def _timed(ck: int, timestamp: int) -> int:
    return _crc32(timestamp.to_bytes(8, "big", signed=True), ck)


def encode_snapshot(persistence_id: str, sequence_nr: int, timestamp: int, metadata: object, snapshot: object
                    ) -> tuple[bytes, int]:
    """Serialize a snapshot (and its metadata) with its checksum (of the key, the bytes and the timestamp)."""
    if type(sequence_nr) is not int or not 0 <= sequence_nr <= MAX_SEQUENCE_NR:
        sequence_nr = _checked_sequence_nr(sequence_nr)  # (as for events: SQLite raised a raw OverflowError)
    try:
        blob = thread_packer()([SNAPSHOT_FORMAT, metadata, snapshot])
    except SerializationError:
        raise
    except (TypeError, ValueError, OverflowError) as e:
        raise SerializationError(f"cannot serialize {type(snapshot).__qualname__}: {e}") from e
    return blob, _timed(checksum(key_seed(persistence_id), sequence_nr, blob), timestamp)


def check_snapshot(persistence_id: str, sequence_nr: int, timestamp: int, blob: bytes, ck: int) -> None:
    """Raise JournalCorruption unless the checksum matches the stored bytes (and timestamp, from format 3 on)."""
    expected = checksum(key_seed(persistence_id), sequence_nr, blob)
    timed = len(blob) > 1 and blob[0] == 0x93 and blob[1] == SNAPSHOT_FORMAT
    if (_timed(expected, timestamp) if timed else expected) != ck:
        raise corruption(persistence_id, sequence_nr, "snapshot", " or timestamp" if timed else "")


def decode_snapshot(persistence_id: str, sequence_nr: int, timestamp: int, blob: bytes, ck: int
                    ) -> tuple[object, object]:
    """Check and decode a stored snapshot into (metadata, snapshot); never returns None for a bad one."""
    check_snapshot(persistence_id, sequence_nr, timestamp, blob, ck)
    try:
        if blob[0] == 0x93 and blob[1] in (FORMAT_FLAT, SNAPSHOT_FORMAT):  # [2 or 3, metadata, snapshot]; 1: a pair
            _, metadata, snapshot = _unpackb(blob, ext_hook=flat_ext_hook, list_hook=list_hook,
                                             strict_map_key=False)
        else:
            metadata, snapshot = _unpackb(blob, ext_hook=ext_hook, strict_map_key=False)
    except SerializationError as e:
        raise SerializationError(
            f"cannot read snapshot of persistence id {persistence_id!r}, sequence nr {sequence_nr}: {e}",
            e.unknown_manifest) from e
    except Exception as e:
        raise JournalCorruption(
            f"unreadable snapshot: persistence id {persistence_id!r}, sequence nr {sequence_nr}: {e}",
            persistence_id, sequence_nr) from e
    return metadata, snapshot


UNREADABLE_PAYLOAD = "unreadable payload: "
"""How a Problem's reason starts when the record is intact but this process cannot build its event."""


def check_row(persistence_id: str, sequence_nr: int, blob: bytes, ck: int) -> Problem | None:
    """Why a stored event is unreadable, or None when its checksum and contents are fine (for verify)."""
    try:
        decode_row(persistence_id, sequence_nr, bytes(blob), ck)
    except (JournalCorruption, SerializationError) as e:
        return problem_of(persistence_id, sequence_nr, e)
    return None


def problem_of(persistence_id: str | None, sequence_nr: int | None, e: JournalCorruption | SerializationError,
               what: str = "") -> Problem:
    """The Problem for a record that could not be read: corrupt, or (a SerializationError) intact but not
    buildable here, with the unknown manifest when that is why. `what` prefixes the reason ("snapshot: ")."""
    if isinstance(e, JournalCorruption):
        return Problem(persistence_id, sequence_nr, f"{what}{e}")
    return Problem(persistence_id, sequence_nr, f"{UNREADABLE_PAYLOAD}{what}{e}", True, e.unknown_manifest)


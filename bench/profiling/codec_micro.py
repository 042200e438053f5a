"""Micro-benchmark: encode (and decode) the record of one entity event as journal.records does, with msgpack
(today: format 2, flat) and with msgspec writing the same bytes.

    PYTHONPATH=$PWD:/tmp/codec-tools python bench/profiling/codec_micro.py

msgspec packs tuples, sets and dataclasses itself (as arrays and maps: their types are lost) and calls its
enc_hook only for types it does not know, so it cannot mark them during encoding; the marked arrays are
built in Python first (`conv`), and then packed. Its decoder has no list hook: the marked arrays are
turned back by a Python walk over the decoded value (`unconv`).
"""

import timeit
import uuid

import msgpack
import msgspec

from bench.entities import Deposited
from bench.journal_codec import event as demo_event
from journal import AtomicWrite, PersistentRepr
from journal.records import decode_rows, encode_writes
from journal.serialization import _EXT_FROZENSET, _EXT_OBJECT, _EXT_SET, _EXT_TUPLE, _by_class, _by_manifest
from persistence.idempotent import AppliedBatch

writer, ts = str(uuid.uuid4()), 1_700_000_000_000
Ext = msgspec.msgpack.Ext
enc = msgspec.msgpack.Encoder()
MARKS = {c: Ext(c, b"") for c in (_EXT_OBJECT, _EXT_TUPLE, _EXT_SET, _EXT_FROZENSET)}
CODES = {tuple: _EXT_TUPLE, set: _EXT_SET, frozenset: _EXT_FROZENSET}


def conv(o, marks=MARKS):
    """Format 2's marked arrays for `o`, as msgspec input (or msgpack's, with its ExtType marks)."""
    t = type(o)
    if t is list:
        return [conv(x, marks) for x in o]
    code = CODES.get(t)
    if code is not None:
        return [marks[code], *[conv(x, marks) for x in o]]
    reg = _by_class.get(t)
    if reg is not None:
        return [marks[_EXT_OBJECT], reg.manifest, reg.version, *[conv(x, marks) for x in reg.values(o)]]
    if t is dict:
        return {conv(k, marks): conv(v, marks) for k, v in o.items()}
    return o


def msgspec_record(payload):
    """The record encode_writes writes, by msgspec."""
    reg = _by_class.get(type(payload))
    if reg is None:
        return enc.encode([2, writer, "", ts, None, None, conv(payload)])
    return enc.encode([2, writer, "", ts, None, None, reg.manifest, reg.version, *[conv(x) for x in reg.values(payload)]])


MARKERS = {c: object() for c in MARKS}
dec = msgspec.msgpack.Decoder(ext_hook=lambda code, data: MARKERS[code])
OBJ, TUP, SET, FS = (MARKERS[c] for c in (_EXT_OBJECT, _EXT_TUPLE, _EXT_SET, _EXT_FROZENSET))


def unconv(v):
    """The value for msgspec's decoding of marked arrays (a Python walk: msgspec has no list hook)."""
    if type(v) is list:
        items = [unconv(x) for x in v]
        if items:
            k = items[0]
            if k is TUP:
                return tuple(items[1:])
            if k is OBJ:
                return _by_manifest[items[1]].make(items[3:])
            if k is SET:
                return set(items[1:])
            if k is FS:
                return frozenset(items[1:])
        return items
    if type(v) is dict:
        return {unconv(k): unconv(x) for k, x in v.items()}
    return v


def msgspec_decode(blob):
    fields = unconv(dec.decode(blob))
    return _by_manifest[fields[6]].make(fields[8:]) if len(fields) > 7 else fields[6]


EVENTS = {
    "AppliedBatch of one Deposited (entity bench)": AppliedBatch(("/user/driver",), (123456,), (Deposited(1),)),
    "AppliedBatch of 1 RowApplied (demo account)": demo_event(3, 7),
    "AppliedBatch of 2 RowApplied (demo account)": demo_event(4, 7),
}
def measure(name, ev):
    """Print the figures of one event."""
    aw = [AtomicWrite([PersistentRepr(ev, 1, "p", writer_uuid=writer)])]
    blob = encode_writes(aw, ts)[0].rows[0][2]
    assert msgspec_record(ev) == blob, "msgspec must write the same bytes"
    rows = [encode_writes(aw, ts)[0].rows[0][1:]]
    assert msgspec_decode(blob) == ev == decode_rows("p", rows)[0].payload
    pack = msgpack.Packer(use_bin_type=True).pack
    ext_marks = {c: msgpack.ExtType(c, b"") for c in MARKS}
    pre_msgpack = [2, writer, "", ts, None, None, *conv(ev, ext_marks)[1:]]
    pre_msgspec = [2, writer, "", ts, None, None, *conv(ev)[1:]]
    assert pack(pre_msgpack) == enc.encode(pre_msgspec) == blob
    print(f"{name}: {len(blob)} bytes")
    for label, fn in [
        ("encode_writes, one event (msgpack, framing included)", lambda: encode_writes(aw, ts)),
        ("msgspec: the record, same bytes (conv + encode)", lambda: msgspec_record(ev)),
        ("floor, msgpack: pack of the pre-converted record (no hooks)", lambda: pack(pre_msgpack)),
        ("floor, msgspec: encode of the pre-converted record", lambda: enc.encode(pre_msgspec)),
        ("decode_rows, one event (msgpack)", lambda: decode_rows("p", rows)),
        ("msgspec: decode + unconv", lambda: msgspec_decode(blob)),
    ]:
        n = 20_000
        best = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
        print(f"  {best:6.2f} us  {label}")


for name, ev in EVENTS.items():
    measure(name, ev)

"""Micro-benchmark: encode the record of one typical entity event (AppliedBatch of one Deposited), as
journal.records.encode_writes does, with msgpack (today) and with msgspec (same bytes; and a flat variant)."""

import timeit
import uuid

import msgpack
import msgspec

from bench.entities import Deposited
from journal.serialization import _EXT_OBJECT, _EXT_TUPLE, _by_class, flatten, serialize
from persistence.idempotent import AppliedBatch

ev = AppliedBatch(("/user/driver",), (123456,), (Deposited(1),))
writer, manifest, ts = str(uuid.uuid4()), "", 1_700_000_000_000_000


def today():
    f = flatten(ev)
    return serialize([writer, manifest, ts, [], None, f[0], f[1], *f[2]])


# msgspec writing the same bytes: a tuple/registered dataclass is not handed to enc_hook (msgspec encodes them
# natively as array/map), so the value is converted up front into msgspec Ext objects.
Ext = msgspec.msgpack.Ext
enc = msgspec.msgpack.Encoder()


def conv(o):
    t = type(o)
    if t is tuple:
        return Ext(_EXT_TUPLE, enc.encode([conv(x) for x in o]))
    reg = _by_class.get(t)
    if reg is not None:
        return Ext(_EXT_OBJECT, enc.encode([reg.manifest, reg.version, *[conv(x) for x in reg.values(o)]]))
    if t is list:
        return [conv(x) for x in o]
    return o


def msgspec_same():
    f = flatten(ev)
    return enc.encode([writer, manifest, ts, [], None, f[0], f[1], *[conv(x) for x in f[2]]])


# The ceiling: no ext types (a different format: tuples as arrays, objects as [manifest, version, *fields]).
def flat(o):
    return [o.origins, o.delivery_ids, [["bench.entities.Deposited", 1, e.amount] for e in o.events]]


def msgspec_flat():
    return enc.encode([writer, manifest, ts, [], None, "reprise.persistence.AppliedBatch", 1, *flat(ev)])


packb = msgpack.Packer(use_bin_type=True).pack


def msgpack_flat():
    return packb([writer, manifest, ts, [], None, "reprise.persistence.AppliedBatch", 1, *flat(ev)])


assert msgspec_same() == today(), (msgspec_same(), today())
for name, fn in [
    ("serialize today (msgpack + _default exts)", today),
    ("msgspec, same bytes (converted to Ext)", msgspec_same),
    ("msgpack, flat (no ext types)", msgpack_flat),
    ("msgspec, flat (no ext types)", msgspec_flat),
]:
    n = 200_000
    best = min(timeit.repeat(fn, number=n, repeat=5)) / n * 1e6
    print(f"{best:6.2f} us  {name}  ({len(fn())} bytes)")

"""§11 micro-benchmarks: the per-message objects built with and without their frozen __init__, and one
AppliedBatch record packed from plain vs pre-marked values (µs per object / record, best of 5)."""

import operator
import timeit

import msgpack

from bench.entities import Deposited
from journal.serialization import _by_class, _default, new_packer
from persistence.idempotent import AppliedBatch, _applied_batch
from spark_bridge.destination import _row_applied
from spark_bridge.messages import Row, RowApplied, _row

N = 200_000


def best(fn) -> float:
    return min(timeit.repeat(fn, number=N, repeat=5)) / N * 1e6


o, e, cols, data = ("/user/driver",), Deposited(1), ("a", "b"), (1, 2)
print(f"AppliedBatch: __init__ {best(lambda: AppliedBatch(o, (5,), (e,))):.3f}  "
      f"slots set directly {best(lambda: _applied_batch(o, (5,), (e,))):.3f}")
print(f"Row: __init__ {best(lambda: Row(5, data, 7, 3, cols)):.3f}  slots set directly {best(lambda: _row(5, data, 7, 3, cols)):.3f}")
print(f"RowApplied: __init__ {best(lambda: RowApplied(e, 7, [], 1, 1, 0)):.3f}  "
      f"__dict__ set {best(lambda: _row_applied(e, 7, [], 1, 1, 0)):.3f}")
reg = _by_class[AppliedBatch]
values = operator.attrgetter(*reg.field_names)  # what reg.values was before pack_values_with
plain = msgpack.Packer(default=_default, strict_types=True, use_bin_type=True).pack
pack = new_packer()
batch = AppliedBatch(o, (123456,), (e,))
head = [2, "a-writer-uuid", "", 123, None, None, reg.manifest, reg.version]
print(f"AppliedBatch record pack: plain values (_default per tuple/object) "
      f"{best(lambda: plain([*head, *values(batch)])):.3f}  "
      f"pre-marked {best(lambda: pack([*head, *reg.values(batch)])):.3f}")

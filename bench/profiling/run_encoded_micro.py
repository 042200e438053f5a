"""PROFILE.md §30: run_encoded over a column of 4,000 one-field events and repeats_encoded over 4,000 equal
origins, µs a value (PYTHONPATH=<tree> for base and new).

    PYTHONPATH=$PWD python bench/profiling/run_encoded_micro.py
"""

import timeit

from journal.serialization import repeats_encoded, run_encoded
from tests.spark_bridge.sample import Deposited

events = [Deposited(i % 97) for i in range(4000)]
origins = ["/system/spark-bridge"] * 4000


def per_value(fn, values) -> float:
    return min(timeit.repeat(lambda: fn(values), number=50, repeat=7)) / 50 / len(values) * 1e6


print(f"run_encoded {per_value(run_encoded, events):.3f} µs/value, "
      f"repeats_encoded {per_value(repeats_encoded, origins):.3f} µs/value")

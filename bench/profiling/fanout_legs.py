"""PROFILE.md §30: the legs of a row's trip in a feed_shards.py run ($FANLOG, and $FANLOG.<pid> written with
INFLIGHT_LOG=1): bridge send -> shard's table handed the rows -> its commit's rows confirmed -> the bridge takes the
Confirmed in (medians and percentiles over the last 2.5 s), and per process and address, the time between two
acknowledged Thespian batches and how many batches waited behind the one in flight.

    INFLIGHT_LOG=1 FANLOG=/tmp/fan2.log PYTHONPATH=$PWD python bench/profiling/feed_shards.py 1000000 2
    python bench/profiling/fanout_legs.py /tmp/fan2.log
"""

import bisect
import collections
import glob
import statistics
import sys


def spread(values: list[float]) -> str:
    q = statistics.quantiles(values, n=10) if len(values) > 1 else [values[0]] * 9
    return f"median {statistics.median(values):6.1f} ms, p10 {q[0]:6.1f}, p90 {q[-1]:6.1f} (n={len(values)})"


log = sys.argv[1]
sends, handed, confirmed, taken = [], [], [], []
for line in open(log):
    f = line.split()
    if f[0] == "D":
        sends.append((int(f[2]), int(f[3]), float(f[1])))
    elif f[0] == "H":
        handed.append((float(f[1]), int(f[3]), f[4]))
    elif f[0] == "C":
        confirmed.append((float(f[1]), int(f[3]), f[4]))
    elif f[0] == "R" and f[5] == "Confirmed" and len(f) > 6:
        taken.append((float(f[1]), int(f[7])))
sends.sort()
lows = [s[0] for s in sends]


def sent_at(delivery_id: int) -> float | None:
    k = bisect.bisect_right(lows, delivery_id) - 1
    return sends[k][2] if k >= 0 and sends[k][1] >= delivery_id else None


cut = max(t for t, _ in taken) - 2.5
legs: dict[str, list[float]] = collections.defaultdict(list)
for t, high, _ in handed:
    if t >= cut and (s := sent_at(high)) is not None:
        legs["bridge send -> shard handed"].append((t - s) * 1000)
for t, high, key in confirmed:
    if t >= cut:
        got = [th for th, hh, kk in handed if kk == key and hh >= high and th <= t]
        if got:
            legs["shard handed -> confirmed"].append((t - min(got)) * 1000)
confirmed_at = {high: t for t, high, _ in confirmed}
for t, high in taken:
    if t >= cut:
        if high in confirmed_at:
            legs["confirmed -> bridge took it"].append((t - confirmed_at[high]) * 1000)
        if (s := sent_at(high)) is not None:
            legs["bridge send -> bridge took it"].append((t - s) * 1000)
for name, values in legs.items():
    print(f"{name:30s} {spread(values)}")
for path in sorted(glob.glob(f"{log}.*")):
    acked: dict[str, list[float]] = collections.defaultdict(list)
    queued: dict[str, list[int]] = collections.defaultdict(list)
    for line in open(path):
        f = line.split()
        if f[0] == "S":
            queued[f[2]].append(int(f[3]))
        elif f[0] == "A":
            acked[f[2]].append(float(f[1]))
    for address, times in acked.items():
        if len(times) > 100:
            gaps = [(b - a) * 1000 for a, b in zip(times, times[1:], strict=False)]
            print(f"pid {path.rsplit('.', 1)[1]} -> {address}: {len(times)} batches, one acknowledged every "
                  f"{spread(gaps)}; batches queued at a send: median {statistics.median(queued[address])}, "
                  f"max {max(queued[address])}")

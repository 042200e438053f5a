"""PROFILE.md §30: from a fanout_bridge.LoggingBridge log ($FANLOG), how long rows were in flight: for each
Confirmed, the time since the bridge sent (D) the row of its highest id; medians and percentiles, and the turns.

    python bench/profiling/fanout_rtt.py /tmp/fan2.log
"""

import bisect
import statistics
import sys

sends: list[tuple[int, float]] = []  # (lowest id, time), in send order
confirms: list[tuple[float, int, int]] = []  # (time, highest id, ids)
turns: list[float] = []
for line in open(sys.argv[1]):
    f = line.split()
    if f[0] == "D":
        sends.append((int(f[2]), float(f[1])))
    elif f[0] == "R" and f[5] == "Confirmed" and len(f) > 6:
        confirms.append((float(f[1]), int(f[7]), int(f[8])))
    elif f[0] == "F":
        turns.append(float(f[1]))
sends.sort()
lows = [s[0] for s in sends]
rtts = []
for t, high, _ in confirms:
    k = bisect.bisect_right(lows, high) - 1
    if k >= 0:
        rtts.append((t - sends[k][1]) * 1000)
rtts.sort()
q = statistics.quantiles(rtts, n=10)
print(f"{len(sends)} sends, {len(confirms)} Confirmed ({statistics.mean(c[2] for c in confirms):,.0f} ids each), "
      f"{len(turns)} turns; in flight ms: median {statistics.median(rtts):.1f}, p10 {q[0]:.1f}, p90 {q[-1]:.1f}")

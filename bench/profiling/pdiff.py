"""Per-function call counts and tottime per message, two cProfile dumps side by side (largest differences first)."""

import pstats
import re
import sys

N = int(sys.argv[3])


def load(p):
    st = pstats.Stats(p).stats
    out = {}
    for (file, _line, fn), (_cc, nc, tt, ct, _callers) in st.items():
        file = file.split("site-packages/")[-1].split("/wt/")[-1]
        file = "/".join(file.split("/")[-2:]) if "/" in file else file
        k = re.sub(r" at 0x[0-9a-f]+", "", f"{fn} ({file})")
        a = out.setdefault(k, [0, 0.0, 0.0])
        a[0] += nc
        a[1] += tt
        a[2] += ct
    return out


a, b = load(sys.argv[1]), load(sys.argv[2])
ta, tb = sum(v[1] for v in a.values()), sum(v[1] for v in b.values())
print(
    f"total tottime us/msg: A {ta / N * 1e6:.1f}  B {tb / N * 1e6:.1f};  calls/msg A {sum(v[0] for v in a.values()) / N:.1f} B {sum(v[0] for v in b.values()) / N:.1f}"
)
keys = set(a) | set(b)
rows = []
for k in keys:
    ca, tta, _ = a.get(k, [0, 0, 0])
    cb, ttb, _ = b.get(k, [0, 0, 0])
    rows.append((ttb - tta, k, ca / N, cb / N, tta / N * 1e6, ttb / N * 1e6))
print(f"{'d tottime':>9} {'A us':>6} {'B us':>6} {'A calls':>7} {'B calls':>7}  function")
for d, k, ca, cb, tta, ttb in sorted(rows, key=lambda r: -abs(r[0]))[
    : int(sys.argv[4]) if len(sys.argv) > 4 else 40
]:
    print(f"{d / N * 1e6:9.2f} {tta:6.2f} {ttb:6.2f} {ca:7.2f} {cb:7.2f}  {k}")

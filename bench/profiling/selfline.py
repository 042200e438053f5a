import collections
import sys

from spy import load

stacks = load(sys.argv[1])
total = sum(n for _, n in stacks)
pats = sys.argv[2:]
c = collections.Counter()
for fr, n in stacks:
    leaf = fr[-1]
    # self time by line, for leaves within the given functions; 'C' callee time lands on the caller line
    for p in pats:
        if p in leaf:
            c[leaf.split(" (")[0] + ":" + leaf.rsplit(":", 1)[1]] += n
for k, n in sorted(c.items(), key=lambda kv: -kv[1]):
    print(f"{100 * n / total:5.2f}% {k}")

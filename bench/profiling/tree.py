import sys

from spy import load, short

stacks = load(sys.argv[1])
total = sum(n for _, n in stacks)
anchor = sys.argv[2]
depth = int(sys.argv[3])
minpct = float(sys.argv[4]) if len(sys.argv) > 4 else 0.3
root = {}
for fr, n in stacks:
    fs = [short(f) for f in fr]
    idx = [i for i, f in enumerate(fs) if f.startswith(anchor)]
    if not idx:
        continue
    node = root
    for f in fs[idx[-1] + 1 : idx[-1] + 1 + depth]:
        e = node.setdefault(f, [0, {}])
        e[0] += n
        node = e[1]


def show(node, ind):
    for f, (n, ch) in sorted(node.items(), key=lambda kv: -kv[1][0]):
        if 100 * n / total >= minpct:
            print(f"{100 * n / total:5.1f}% {'  ' * ind}{f}")
            show(ch, ind + 1)


show(root, 0)

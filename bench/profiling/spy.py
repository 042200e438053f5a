"""Summaries of py-spy raw (collapsed) stacks: inclusive and self shares per function."""

import collections
import os
import re
import subprocess
import sys


def process_cpu(pid: int) -> float:
    """CPU seconds (user + system) process `pid` has used so far, from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def record(pid, out, rate=500, extra=(), stderr=subprocess.DEVNULL):
    """Start `py-spy record` (raw collapsed stacks) on process `pid` into `out`; $PY_SPY names the binary."""
    return subprocess.Popen([os.environ.get("PY_SPY", "py-spy"), "record", "--pid", str(pid), "--rate", str(rate),
                             "--format", "raw", "-o", out, "--nonblocking", *extra],
                            stdout=subprocess.DEVNULL, stderr=stderr)


def load(path):
    stacks = []
    for line in open(path):
        line = line.rstrip("\n")
        if not line:
            continue
        s, n = line.rsplit(" ", 1)
        frames = s.split(";")
        if "sitecustomize" in s:
            continue  # the GC watcher thread of the profiling aid
        stacks.append((frames, int(n)))
    return stacks


def store_line_rules(insert: str, tags: str, commit: str) -> list[tuple[str, str]]:
    """(stage, frame substring) rules for the lines of SqliteJournal._store that run SQLite's INSERTs (`insert`),
    tag INSERTs (`tags`) and COMMIT (`commit`), read from the source: line numbers move with the file."""
    import inspect

    from journal.sqlite import SqliteJournal

    lines, first = inspect.getsourcelines(SqliteJournal._store)
    rules = []
    for n, text in enumerate(lines, first):
        stage = (tags if "_INSERT_TAG" in text else insert if "(_INSERT" in text and "execute" in text
                 else commit if '"COMMIT"' in text else None)
        if stage is not None:
            rules.append((stage, f"journal/sqlite.py:{n})"))
    return rules


def short(f):
    m = re.match(r"(.*) \((.*?):(\d+)\)$", f)
    if not m:
        return f
    fn, file, _ = m.groups()
    file = re.sub(r".*site-packages/", "", file)
    return f"{fn} ({file})"


if __name__ == "__main__":
    stacks = load(sys.argv[1])
    top = int(sys.argv[2]) if len(sys.argv) > 2 else 40
    total = sum(n for _, n in stacks)
    incl, selft = collections.Counter(), collections.Counter()
    for frames, n in stacks:
        fs = [short(f) for f in frames]
        for f in set(fs):
            incl[f] += n
        selft[fs[-1]] += n
    print("total samples", total)
    print("== inclusive")
    for f, n in incl.most_common(top):
        print(f"{100 * n / total:5.1f}% {f}")
    print("== self")
    for f, n in selft.most_common(top):
        print(f"{100 * n / total:5.1f}% {f}")

"""Per-host CPU µs per transaction of demo_ab.sh's runs: python demo_cpu.py /tmp/pd-ab/NAME [TRANSACTIONS]."""

import glob
import re
import sys

HOSTS = ["accounts [shard 0]", "accounts [shard 1]", "spark-bridge", "ledger", "balances-0", "balances-1"]
prefix = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 200_000
for f in sorted(glob.glob(f"{prefix}-*.out.watch")):
    text = open(f, errors="replace").read()
    head, _, rest = text.partition("all processes")
    us = {}
    for h in HOSTS:  # (pid 0: the host was not up yet when the watcher looked; not counted)
        m = re.search(r"([\d.]+) s CPU  pid [1-9]\d*  /\S*" + re.escape(h), head)
        if m:
            us[h] = float(m.group(1)) / n * 1e6
    for what in ("Spark JVM", "pyspark daemon"):
        m = re.search(r"([\d.]+) s  " + what, rest)
        if m and float(m.group(1)) > 0:
            us[what] = float(m.group(1)) / n * 1e6
    hosts = sum(v for k, v in us.items() if k in HOSTS)
    print(f.rsplit("/", 1)[-1].split(".")[0], " ".join(f"{k}={v:.1f}" for k, v in us.items()), f"hosts={hosts:.1f}")

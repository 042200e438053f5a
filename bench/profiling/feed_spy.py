"""feed(ack="processed") into durable FeedReceiver accounts (bench.spark_feed's last run), with py-spy on the
account host and the bridge host over the measured feed only, and their CPU from /proc.
ACCOUNT=TableAccounts: into accounts as rows of one FeedTable instead (ACCOUNT names a class of
tests.spark_bridge.sample); SHARDS=2: in two shard processes (py-spy and the per-host line on shard 0)."""

import os
import signal
import sys
import tempfile
import time

from bench.profiling.spy import process_cpu, record
from bench.spark_feed import _system, session_and_frame
from spark_bridge import BRIDGE_PATH, feed
from tests.spark_bridge import sample

rows = int(sys.argv[1])
out = sys.argv[2]
spy = len(sys.argv) < 4 or sys.argv[3] != "nospy"


spark, df = session_and_frame("reprise-prof-feed", rows)
account, shards = getattr(sample, os.environ.get("ACCOUNT", "DurableAccount")), int(os.environ.get("SHARDS", "1"))
with tempfile.TemporaryDirectory(prefix="reprise-prof-") as tmp, _system(account, tmp, shards) as system:
    feed(df.limit(10_000), system=system.admin_port, feed_id="warm-up", ack="processed", progress=False)
    hosts = system.status().hosts
    accounts = "/user/accounts" if shards == 1 else "/user/accounts [shard 0]"
    pids = {"accounts": hosts[accounts].pid, "bridge": hosts[BRIDGE_PATH].pid}
    procs = []
    if spy:
        for name, pid in pids.items():
            procs.append(record(pid, f"{out}-{name}.raw"))
        time.sleep(1.0)
    with open(
        "/tmp/prof/gc-trigger", "w"
    ) as f:  # every process then writes its GC time (site/sitecustomize.py)
        f.write(str(time.time()))

    def allcpu():
        out = {}
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    out[int(d)] = (process_cpu(int(d)), open(f"/proc/{d}/cmdline").read().replace("\0", " ")[:90])
                except OSError:
                    pass
        return out

    a0 = allcpu()
    w0 = time.monotonic()
    c0 = {n: process_cpu(p) for n, p in pids.items()}
    r = feed(df, system=system.admin_port, feed_id="bench-durable", ack="processed", progress=False)
    c1 = {n: process_cpu(p) for n, p in pids.items()}
    a1 = allcpu()
    w1 = time.monotonic()
    deltas = sorted(((a1[p][0] - a0[p][0], p, a1[p][1]) for p in a1 if p in a0), reverse=True)
    names = {v: k for k, v in pids.items()}
    print(f"CPU per process over the feed ({w1 - w0:.2f} s wall, {rows:,} rows):")
    for d, p, cmd in deltas[:14]:
        if d > 0:
            print(f"  {d:6.2f} s  {d / rows * 1e6:6.1f} us/row  pid {p} {names.get(p, '')} {cmd}")
    print(f"  total {sum(d for d, _, _ in deltas if d > 0):.2f} s CPU of {2 * (w1 - w0):.2f} core-seconds")
    with open(
        "/tmp/prof/gc-trigger", "w"
    ) as f:  # every process then writes its GC time (site/sitecustomize.py)
        f.write(str(time.time()))
    for p in procs:
        p.send_signal(signal.SIGINT)
        p.wait(30)
    print(
        f"{rows:,} rows processed durable: {r.rows_per_second:,.0f} rows/s, {r.seconds:.2f} s; pids {pids}; "
        + ", ".join(
            f"{n} CPU {c1[n] - c0[n]:.2f} s = {(c1[n] - c0[n]) / rows * 1e6:.1f} us/row" for n in pids
        )
        + f"; load {open('/proc/loadavg').read().split()[0]}"
    )
spark.stop()

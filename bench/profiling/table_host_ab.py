"""PROFILE.md §30: FeedTable processed feeds of ROWS rows in one system (bench.spark_feed's DataFrame and
TableAccounts, one host): rows/s and the table host's and the bridge's CPU µs a row, per feed. Alternate trees:

    for t in /tmp/base /work/main; do (cd $t && PYTHONPATH=$t python /work/main/bench/profiling/table_host_ab.py 1000000 3); done
"""

import os
import sys
import tempfile

from bench.profiling.spy import process_cpu
from bench.spark_feed import _system, session_and_frame
from spark_bridge import BRIDGE_PATH, feed
from tests.spark_bridge import sample

rows = int(sys.argv[1]) if len(sys.argv) > 1 else 1_000_000
feeds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
spark, df = session_and_frame("table-host-ab", rows)
with tempfile.TemporaryDirectory() as tmp, _system(sample.TableAccounts, tmp, 1) as system:
    feed(df.limit(10_000), system=system.admin_port, feed_id="warm-up", ack="processed", progress=False)
    hosts = system.status().hosts
    host, bridge = hosts["/user/accounts"].pid, hosts[BRIDGE_PATH].pid
    out = []
    for k in range(feeds):
        h0, b0 = process_cpu(host), process_cpu(bridge)
        r = feed(df, system=system.admin_port, feed_id=f"f{k}", ack="processed", progress=False)
        out.append(f"{r.rows_per_second:,.0f} rows/s, host {(process_cpu(host) - h0) / rows * 1e6:.2f} "
                   f"bridge {(process_cpu(bridge) - b0) / rows * 1e6:.2f} CPU µs/row")
spark.stop()
print(os.getcwd(), " | ".join(out))

"""PROFILE.md §29: py-spy on the pyspark daemon and the workers it forks, for the first SECONDS of their life, while a
job runs beside (e.g. stage_cpu.py); then the functions with the largest shares (inclusive and self) and the share of
samples in zipimport (modules imported from Spark's zips).

    PY_SPY=.venv/bin/py-spy python bench/profiling/worker_spy.py OUT.raw [SECONDS] &
    N=1 PYTHONPATH=$PWD python bench/profiling/stage_cpu.py
"""

import collections
import os
import subprocess
import sys
import time

from bench.profiling.spy import load

out = sys.argv[1]
seconds = sys.argv[2] if len(sys.argv) > 2 else "12"
deadline = time.monotonic() + 120
daemon = ""
while not daemon and time.monotonic() < deadline:
    # ("-m": the daemon's own command line, not the JVM's, which names the daemon module in its --conf)
    found = subprocess.run(["pgrep", "-f", "--", r"-m (pyspark\.daemon|spark_bridge\.worker_daemon) "],
                           capture_output=True, text=True).stdout
    daemon = found.split()[0] if found.split() else ""
    time.sleep(0.05)
if not daemon:
    sys.exit("no pyspark daemon started within 120 s")
spied = subprocess.run([os.environ.get("PY_SPY", "py-spy"), "record", "--pid", daemon, "--subprocesses", "--rate",
                        "250", "--format", "raw", "-o", out, "--nonblocking", "-d", seconds],
                       stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, check=False)
if not os.path.exists(out):
    sys.exit(f"py-spy on pid {daemon} wrote nothing: {spied.stderr[-1000:]}")
stacks = load(out)
total = sum(n for _, n in stacks) or 1
inclusive, own = collections.Counter(), collections.Counter()
for frames, n in stacks:
    names = {f.split(" (")[0] for f in frames}
    for name in names:
        inclusive[name] += n
    own[frames[-1].split(" (")[0]] += n
zipped = sum(n for frames, n in stacks if any("zipimport" in f for f in frames))
print(f"{total} samples; {100 * zipped / total:.1f}% with a zipimport frame")
for title, counts in (("inclusive", inclusive), ("self", own)):
    print(f"--- {title}")
    for name, n in counts.most_common(25):
        print(f"{100 * n / total:5.1f} {name[:140]}")

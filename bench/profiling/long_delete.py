"""A long delete_messages_to on the SQLite journal (§34): how long another process's writes wait meanwhile.

Writes N events of SIZE bytes for one persistence id, starts a process that writes one event at a time to the
same file, deletes the N events, and prints the delete's time and the other writer's worst wait. TREE=<checkout>
runs another tree's journal (e.g. a `git worktree` of an older commit). With --phases it instead times BEGIN, the
DELETE and the COMMIT of one raw-SQL delete of those events on the journal's connection.

    .venv/bin/python bench/profiling/long_delete.py N SIZE [--phases]
"""

import os
import shutil
import subprocess
import sys
import tempfile
import time

TREE = os.environ.get("TREE", os.getcwd())
sys.path.insert(0, TREE)
from journal import AtomicWrite, PersistentRepr, open_journal  # noqa: E402

WRITER = """
import os, select, sys, time
sys.path.insert(0, os.environ["TREE"])
from journal import AtomicWrite, PersistentRepr, open_journal
j = open_journal(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
worst, k = 0.0, 0
while not select.select([sys.stdin], [], [], 0.01)[0]:
    k += 1
    t = time.perf_counter()
    assert j.write_messages([AtomicWrite([PersistentRepr("x", sequence_nr=k, persistence_id="other")])]) == [None]
    worst = max(worst, time.perf_counter() - t)
print(f"other writer: {k} writes, worst wait {worst * 1000:.0f} ms", flush=True)
"""

n, size = int(sys.argv[1]), int(sys.argv[2])
d = tempfile.mkdtemp(prefix="long-delete-")
try:
    url = f"sqlite:///{d}/j.db"
    j = open_journal(url)
    blob = os.urandom(size)
    for i in range(1, n + 1, 50):
        j.write_messages([AtomicWrite([PersistentRepr(blob, sequence_nr=k, persistence_id="bridge")])
                          for k in range(i, min(i + 50, n + 1))])
    print(f"{n} events of {size} B: {os.path.getsize(d + '/j.db') / 1e6:.0f} MB", flush=True)
    if "--phases" in sys.argv:
        conn = j._h.c.conn
        t0 = time.perf_counter()
        conn.execute("BEGIN IMMEDIATE")
        t1 = time.perf_counter()
        conn.execute("DELETE FROM events WHERE pid = (SELECT id FROM persistence_ids WHERE persistence_id = 'bridge')")
        t2 = time.perf_counter()
        conn.execute("COMMIT")
        t3 = time.perf_counter()
        print(f"BEGIN {t1 - t0:.3f} s, DELETE {t2 - t1:.3f} s, COMMIT {t3 - t2:.3f} s; "
              f"WAL {os.path.getsize(d + '/j.db-wal') / 1e6:.1f} MB")
    else:
        writer = subprocess.Popen([sys.executable, "-c", WRITER, url], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  text=True, env={**os.environ, "TREE": TREE})
        assert writer.stdout.readline().strip() == "ready"
        writer.stdin.write("go\n")
        writer.stdin.flush()
        time.sleep(0.3)  # (the writer is writing)
        t = time.perf_counter()
        j.delete_messages_to("bridge", n)
        print(f"delete: {time.perf_counter() - t:.2f} s", flush=True)
        time.sleep(0.3)
        writer.stdin.write("stop\n")
        writer.stdin.flush()
        print(writer.stdout.read().strip())
        writer.wait()
    j.close()
finally:
    shutil.rmtree(d)

"""Split a cProfile dump of bench/profiling/persist_cpu.py (the persist closed loop) in stages by function;
shares of tottime, scaled to CPU µs per event: python cstages.py OUT.pstats EVENTS CPU_US (PROFILE.md §13)."""
import pstats
import sys

path, events, us = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
st = pstats.Stats(path).stats
RULES = [
    ("sqlite: BEGIN + COMMIT (execute)", lambda f, n: n == "<method 'execute' of 'sqlite3.Connection' objects>"),
    ("sqlite: INSERT (executemany)", lambda f, n: "executemany" in n),
    ("journal Python (_store, begin, ids)", lambda f, n: f.endswith("journal/sqlite.py") or f.endswith("journal/api.py")),
    ("encode (encode_writes, pack, crc)", lambda f, n: f.endswith("journal/records.py") or "crc32" in n or "Packer" in n or "msgpack" in f or f.endswith("serialization.py")),
    ("coordinator (settle, take_batch)", lambda f, n: f.endswith("persistence/coordinator.py") or n == "_take_batch"),
    ("persist: queue the write (persist, _queue_write, _repr, _atomic, _Call, enqueue)", lambda f, n: n in ("persist", "_queue_write", "_repr", "_atomic", "__init__", "persistence_id")
     or n.startswith("<built-in method __new__") or "__set__" in n),
    ("handlers after commit (_on_write_results, _invoke, _done)", lambda f, n: f.endswith("persistent_actor.py") and n in ("_on_write_results", "_invoke", "_done", "stop_requested")),
    ("entity receive (receive, mixin_command)", lambda f, n: f.endswith("persistent_actor.py") and n in ("receive", "mixin_command")),
    ("bench actor (receive_command, handler lambda, NextPersist)", lambda f, n: "bench/" in f),
    ("host: dispatch, route, settle loop", lambda f, n: f.endswith("actors/host.py") or f.endswith("actors/actor.py") or f.endswith("actors/transport.py") or n == "stop_requested"),
]
tot = {}
total = 0.0
for (f, _line, n), (_cc, _nc, tt, _ct, _callers) in st.items():
    if n == "<built-in method time.sleep>" or "thespian" in f or "select" in n or "epoll" in n:
        continue  # idle / the in-process base's own loop: not the persist path
    total += tt
    for name, rule in RULES:
        if rule(f, n):
            tot[name] = tot.get(name, 0) + tt
            break
    else:
        tot["other (builtins, dict/list ops, GC)"] = tot.get("other (builtins, dict/list ops, GC)", 0) + tt
calls = sum(v[1] for k, v in st.items())
print(f"{path}: {calls / events:.1f} Python calls per event")
for name, t in sorted(tot.items(), key=lambda kv: -kv[1]):
    print(f"| {name} | {t / total * 100:.1f}% | {t / total * us:.2f} |")

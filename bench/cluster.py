"""Benchmark (not a test): the cost per row of crossing nodes, against one node, and the directory's publish cost.

    .venv/bin/python -m bench.cluster [--rows 20000] [--entities 1000] [--rounds 3] [--chunk 1000]
                                      [--journal URL] [--publish-hosts 10] [--json]

Two systems run side by side on this machine, rounds alternating between them:
- `one node`: a leader whose two entity hosts (/user/a, /user/b: durable IdempotentReceiver accounts,
  bench.entities.Account) run on the leader itself;
- `three nodes`: a leader and two members (m1, m2) on 127.0.0.1 with their own admin ports and the
  leader's secret file; /user/a is pinned to m1 and /user/b to m2 with `node=`.
The feeder (this process, attached to the leader's node like the Spark bridge) sends the same rows,
`--chunk` per Thespian message per host, at most 4 chunks per host unconfirmed; each row is applied
once and journaled, and counted back when durable. Both journal into one PostgreSQL schema per system
(a cluster shares its journal; REPRISE_BENCH_POSTGRES_URL names the server), or `--journal`; without a
reachable PostgreSQL, into a SQLite file per system (said on stderr and in the rows' names).

Reported per system (medians of the rounds): wall µs per row; CPU µs per row of all the system's
processes plus the feeder; bytes per row the feeder wrote and read (all of it crosses nodes in the
cluster: /proc/<pid>/io); bytes per row the entity hosts read and wrote (transport plus PostgreSQL);
group commits per second per host and rows per commit (the hosts' journal_write_seconds histograms);
PostgreSQL connections per host process against `SHOW max_connections`.

The directory: every route change makes the guardian push the whole DirectoryUpdate to every running
host (actors/guardian.py `_publish`), one HMAC-signed pickle per host. Measured two ways: a
micro-benchmark of that frame's size and CPU (sign on the guardian, verify and unpickle on a host) at
10, 100 and 1,000 routes; and, in the one-node system, the guardian's real CPU per publish with 2 and
then 2 + `--publish-hosts` hosts running (publishes forced by registering and unregistering a route).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import hmac
import json
import os
import pickle
import shutil
import statistics
import sys
import tempfile
import time
import timeit
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import actors
from actors.messages import (
    GUARDIAN_PATH,
    DirectoryUpdate,
    ShardSet,
)
from actors.system import tagged_pids
from bench.entities import Account, Applied, Deposit
from journal.urls import redact_url

PG_URL = os.environ.get("REPRISE_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
HOSTS = ("/user/a", "/user/b")
MEMBERS = ("m1", "m2")
WINDOW = 4
"""Chunks per host sent and not yet counted back as applied."""
ROUTE_COUNTS = (10, 100, 1000)


class Idle(actors.Actor):
    """A host that does nothing: it only receives the directory updates (for the publish measurement)."""

    def receive(self, message: Any, sender: str | None) -> None:
        pass


# ---- per-process counters from /proc --------------------------------------------------------------
def _cpu(pid: int) -> float:
    """CPU seconds (user + system) of process `pid` (0.0 if it is gone)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


_frames = [0, 0, 0, 0]
"""Frames and bytes this process sent, then received, through Thespian's TCP transport (counted by _count_frames)."""


def _count_frames() -> None:
    """Count every frame this process sends and receives: bytes on the wire between the feeder and the hosts.

    Wraps the serializer Reprise's authentication installed (actors/auth.py): what is counted is the frame
    Thespian writes (length prefix, HMAC tag, pickle), without Thespian's ACK packets and TCP/IP headers.
    """
    from thespian.system.transport import TCPTransport as tcp

    if getattr(tcp.TCPTransport.serializer, "counting", False):
        return
    serializer = tcp.TCPTransport.serializer
    loads = tcp.serializer.loads

    def counted_serializer(self: Any, intent: Any) -> bytes:
        data: bytes = serializer(self, intent)
        _frames[0] += 1
        _frames[1] += len(data)
        return data

    def counted_loads(data: bytes) -> object:
        _frames[2] += 1
        _frames[3] += len(data)
        return loads(data)

    counted_serializer.counting = True  # type: ignore[attr-defined]
    tcp.TCPTransport.serializer = counted_serializer
    tcp.serializer = type("CountedSerializer", (), {"loads": staticmethod(counted_loads),
                                                   "dumps": staticmethod(tcp.serializer.dumps)})


def _self_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _url_params(url: str) -> dict[str, str]:
    """The query parameters of a journal URL."""
    from urllib.parse import parse_qsl, urlsplit

    return dict(parse_qsl(urlsplit(url).query))


# ---- the two systems ---------------------------------------------------------------------------------
class Setup:
    """One system under test: its leader, its members, and the pids of its entity hosts."""

    def __init__(self, name: str, leader: actors.System, members: Sequence[actors.System], url: str) -> None:
        self.name = name
        self.leader = leader
        self.members = list(members)
        self.url = url
        self.probe = leader.probe()
        status = leader.status().hosts
        self.host_pids = [status[path].pid for path in HOSTS]
        # The figures mean something only if each host runs where it was placed: check it by pid.
        places = [tagged_pids(m.tag) for m in self.members] or [tagged_pids(leader.tag)] * len(HOSTS)
        for path, pid, pids in zip(HOSTS, self.host_pids, places, strict=True):
            if pid not in pids:
                raise RuntimeError(f"{name}: host {path} (pid {pid}) does not run on its node")

    def pids(self) -> list[int]:
        """Every process of the system (leader and members)."""
        return [p for s in (self.leader, *self.members) for p in tagged_pids(s.tag)]

    def postgres_pids(self) -> list[int]:
        """The PostgreSQL server processes (backends) serving this system's connections (none on SQLite)."""
        app = _url_params(self.url).get("application_name")
        if not self.url.startswith("postgresql") or app is None:
            return []
        import psycopg

        with psycopg.connect(PG_URL) as conn:
            return [int(r[0]) for r in conn.execute("SELECT pid FROM pg_stat_activity WHERE application_name = %s",
                                                    (app,))]

    def commits(self) -> list[int]:
        """Group commits so far per entity host (count of its journal_write_seconds histogram)."""
        hosts = self.leader.status().hosts
        return [sum(hosts[path].histograms.get("journal_write_seconds", ((), (0,), 0.0))[1]) for path in HOSTS]


@contextlib.contextmanager
def systems(journal: str | None) -> Iterator[tuple[Setup, Setup]]:
    """The one-node and the three-node systems, each with its own journal (a fresh PostgreSQL schema, or a
    SQLite file shared by the system's nodes when PostgreSQL cannot be reached)."""
    urls: list[str] = []
    scratch = tempfile.mkdtemp(prefix="reprise-bench-cluster-")
    postgres = journal is None and _postgres_reachable()
    if journal is None and not postgres:
        print(f"PostgreSQL is not reachable at {redact_url(PG_URL)}: both systems journal in SQLite files instead "
              "(set REPRISE_BENCH_POSTGRES_URL)", file=sys.stderr)

    def url(kind: str) -> str:
        if journal is not None:
            return journal.replace("{kind}", kind)
        if not postgres:
            return f"sqlite:///{scratch}/{kind}.db"
        u = f"{PG_URL}?schema=reprise_bench_cluster_{kind}_{uuid.uuid4().hex[:8]}" \
            f"&application_name=reprise-bench-cluster-{kind}"
        urls.append(u)
        return u

    try:
        with contextlib.ExitStack() as stack:
            one_url = url("one")
            one = stack.enter_context(actors.start("multiproc", journal=one_url, snapshot_store=one_url))
            _count_frames()  # (after the first start: it wraps what actors.auth installed)
            for path in HOSTS:
                one.spawn(Account, path, entities=True, passivate_after=3600.0)
            secret = os.path.join(scratch, "secret")
            three_url = url("three")
            leader = stack.enter_context(actors.start("multiproc", journal=three_url, snapshot_store=three_url,
                                                      secret_file=secret))
            members = [stack.enter_context(actors.start("multiproc", leader=f"127.0.0.1:{leader.admin_port}",
                                                        node=name, secret_file=secret)) for name in MEMBERS]
            for path, node in zip(HOSTS, MEMBERS, strict=True):
                leader.spawn(Account, path, entities=True, passivate_after=3600.0, node=node)
            yield Setup("one node", one, [], one_url), Setup("three nodes", leader, members, three_url)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
        if urls:
            from journal.postgres import drop_schema

            for u in urls:
                with contextlib.suppress(Exception):
                    drop_schema(u)


def _postgres_reachable() -> bool:
    """Whether the benchmark's PostgreSQL server answers."""
    import psycopg

    try:
        psycopg.connect(PG_URL, connect_timeout=3).close()
    except psycopg.Error:
        return False
    return True


def feed(setup: Setup, rows: Sequence[tuple[int, int, int]], chunk: int) -> None:
    """Send Deposit(delivery id) to each (host index, entity, delivery id) of `rows`, `chunk` rows per host per
    message, at most WINDOW chunks per host unconfirmed; return when every row was applied and is durable."""
    system, probe = setup.leader, setup.probe
    per_host: list[list[tuple[str, Deposit]]] = [[] for _ in HOSTS]
    for h, e, d in rows:
        per_host[h].append((f"{HOSTS[h]}/{e}", Deposit(d, 1)))
    sent = [0] * len(HOSTS)
    applied = 0
    n = len(rows)
    while applied < n:
        for h, items in enumerate(per_host):
            # Applied counts arrive per host settle, not per host: bound the window over all hosts.
            while sent[h] < len(items) and sum(sent) - applied < WINDOW * chunk * len(HOSTS):
                part = items[sent[h]:sent[h] + chunk]
                system.tell_many(part, sender=probe.path)
                sent[h] += len(part)
        got = probe.receive(120)
        if type(got) is not Applied:
            raise RuntimeError(f"the feeder got {got!r}, expected Applied")
        applied += got.count
    if applied != n:
        raise RuntimeError(f"{applied} applications for {n} rows")


def make_rows(first_id: int, count: int, entities: int, seed: int) -> list[tuple[int, int, int]]:
    """`count` rows (host, entity, delivery id) spread over both hosts' entities, ids from `first_id`."""
    import random

    rng = random.Random(seed)
    return [(rng.randrange(len(HOSTS)), rng.randrange(entities), first_id + i) for i in range(count)]


def measure(setup: Setup, rows: Sequence[tuple[int, int, int]], chunk: int) -> dict[str, float]:
    """One round: feed `rows` and return the per-row figures of the system."""
    pids = setup.pids()
    backends = setup.postgres_pids()
    commits0 = setup.commits()
    pg0 = {p: _cpu(p) for p in backends}
    cpu0 = sum(_cpu(p) for p in pids) + _self_cpu()
    frames0 = list(_frames)
    t = time.perf_counter()
    feed(setup, rows, chunk)
    elapsed = time.perf_counter() - t
    cpu = sum(_cpu(p) for p in pids) + _self_cpu() - cpu0
    pg = sum(_cpu(p) - pg0.get(p, 0.0) for p in set(backends) | set(setup.postgres_pids()))
    frames = [b - a for a, b in zip(frames0, _frames, strict=True)]
    commits = [b - a for a, b in zip(commits0, setup.commits(), strict=True)]
    n = len(rows)
    return {
        "us_per_row": elapsed / n * 1e6,
        "cpu_us_per_row": cpu / n * 1e6,
        "postgres_cpu_us_per_row": pg / n * 1e6,
        "feeder_frames_out": frames[0],
        "feeder_bytes_out_per_row": frames[1] / n,
        "feeder_frames_in": frames[2],
        "feeder_bytes_in_per_row": frames[3] / n,
        "commits_per_s_per_host": sum(commits) / len(commits) / elapsed,
        "rows_per_commit": n / max(1, sum(commits)),
        "rows_per_s": n / elapsed,
    }


def postgres_figures(setup: Setup, rows: int) -> dict[str, float] | None:
    """The system's PostgreSQL connections (by application_name) against max_connections, and the journal's
    bytes per row (record and index entries excluded: what the rows cost the server's disk is more)."""
    params = _url_params(setup.url)
    if not setup.url.startswith("postgresql") or "application_name" not in params:
        return None  # (a --journal URL without application_name: its connections cannot be told apart)
    schema = params.get("schema", "reprise")  # journal.postgres's default
    import psycopg
    from psycopg import sql

    with psycopg.connect(PG_URL) as conn:
        used = conn.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                            (params["application_name"],)).fetchone()
        limit = conn.execute("SHOW max_connections").fetchone()
        size = conn.execute(sql.SQL("SELECT count(*), sum(octet_length(record)), pg_total_relation_size({t}) "
                                    "FROM {s}.journal").format(s=sql.Identifier(schema),
                                                               t=sql.Literal(schema + ".journal"))
                            ).fetchone()
    assert used is not None and limit is not None and size is not None
    return {"connections": int(used[0]), "host_processes": len(HOSTS), "max_connections": int(limit[0]),
            "rows": rows, "events": int(size[0]), "record_bytes_per_row": int(size[1]) / rows,
            "table_bytes_per_row": int(size[2]) / rows}


# ---- the directory -----------------------------------------------------------------------------------
def _address(port: int) -> Any:
    """A Thespian TCP actor address as the guardian holds them (what a route is)."""
    from thespian.actors import ActorAddress
    from thespian.system.transport.IPBase import TCPv4ActorAddress

    return ActorAddress(TCPv4ActorAddress("10.0.0.1", port, external=True))


def directory(routes: int, sharded: bool = False) -> DirectoryUpdate:
    """A DirectoryUpdate of `routes` host routes (plus the guardian's): one path per host, or, `sharded`, one
    entity path whose ShardSet has `routes` shards."""
    table: dict[str, Any] = {GUARDIAN_PATH: _address(1900)}
    if sharded:
        table["/user/accounts"] = ShardSet(tuple(_address(20000 + k) for k in range(routes)))
    else:
        table.update({f"/user/service-{k}": _address(20000 + k) for k in range(routes)})
    return DirectoryUpdate(table, 1)


def sign(key: bytes, obj: object) -> bytes:
    """The frame body the guardian's transport sends per host: HMAC-SHA256 tag, then the pickle (actors.auth)."""
    body = pickle.dumps(obj)
    return hmac.digest(key, body, "sha256") + body


def verify_and_load(key: bytes, frame: bytes) -> object:
    """What each host does with that frame before it reads the routes: check the tag, unpickle."""
    if not hmac.compare_digest(hmac.digest(key, frame[32:], "sha256"), frame[:32]):
        raise ValueError("bad tag")
    return pickle.loads(frame[32:])


def publish_micro(counts: Sequence[int] = ROUTE_COUNTS) -> list[dict[str, float]]:
    """Per route count: the frame's bytes, the guardian's CPU µs to sign one frame and a whole publish (one frame
    per host), and a host's µs to verify and unpickle it."""
    key = os.urandom(32)
    me = _address(1900)
    out = []
    for n in counts:
        for sharded in (False, True):
            update = directory(n, sharded)
            frame = sign(key, (me, update))
            number = max(5, 20_000 // n)
            sign_s = min(timeit.repeat(functools.partial(sign, key, (me, update)), number=number, repeat=3)) / number
            load_s = min(timeit.repeat(functools.partial(verify_and_load, key, frame), number=number,
                                       repeat=3)) / number
            out.append({"routes": n, "sharded": sharded, "frame_bytes": len(frame), "sign_us": sign_s * 1e6,
                        "publish_ms": sign_s * n * 1e3, "publish_bytes": len(frame) * n,
                        "host_receive_us": load_s * 1e6})
    return out


def _cpu_during(others: Sequence[int], hosts: Sequence[int], seconds: float) -> tuple[float, float]:
    """CPU seconds per second the `others` and the `hosts` processes use while nothing is sent to them."""
    a, b = sum(_cpu(p) for p in others), sum(_cpu(p) for p in hosts)
    time.sleep(seconds)
    return (sum(_cpu(p) for p in others) - a) / seconds, (sum(_cpu(p) for p in hosts) - b) / seconds


def bridge_row_bytes(rows: int = 1000, seed: int = 1) -> dict[str, float]:
    """Bytes per row of the bridge's own wire format to a destination host (a RowChunk of the demo's rows:
    account, amount, transaction id) and back (Confirmed), as framed by the transport: what a row costs the
    network when its destination shard runs on another node than the bridge that took it."""
    import random

    from actors.messages import Batch
    from spark_bridge.messages import Confirmed, RowChunk

    rng = random.Random(seed)
    key, me = os.urandom(32), _address(1900)
    accounts = [rng.randrange(10_000) for _ in range(rows)]
    ids = list(range(10_000_000, 10_000_000 + rows))
    out: dict[str, float] = {}
    for ack, anchors in (("persisted", [None] * rows), ("processed", ids)):
        chunk = RowChunk([f"/user/accounts/{a}" for a in accounts], ids, list(anchors),
                         [(a, rng.randrange(1, 1000), 5_000_000 + k) for k, a in enumerate(accounts)],
                         ("account", "amount", "txn"), ids[0])
        batch = Batch("/system/spark-bridge", pickle.dumps([("/system/spark-bridge", "/user/accounts", chunk)]))
        out[f"bridge_to_destination_{ack}"] = len(sign(key, (me, batch))) / rows
    reply = Batch("/user/accounts", pickle.dumps([("/user/accounts", "/system/spark-bridge", Confirmed(ids))]))
    out["destination_to_bridge"] = len(sign(key, (me, reply))) / rows
    return out


def publish_real(setup: Setup, extra_hosts: int, publishes: int = 200) -> list[dict[str, float]]:
    """The guardian's CPU per publish in a live system with its two hosts, then with `extra_hosts` Idle hosts
    more: publishes forced by registering and unregistering a route (each a publish to every host)."""
    system = setup.leader
    out = []
    for add in (0, extra_hosts):
        for k in range(add):
            system.spawn(Idle, f"/user/idle-{k}")
        status = system.status()
        hosts = status.hosts
        host_pids = {info.pid for info in hosts.values()}
        others = [p for p in tagged_pids(system.tag) if p not in host_pids]  # guardian, admin, logger ...
        guardian_pid = status.guardian_pid
        # What the processes burn meanwhile without publishes (timers, Thespian's polling) is subtracted.
        idle = _cpu_during(others, host_pids, 0.5)
        cpu0 = sum(_cpu(p) for p in others)
        guardian0 = _cpu(guardian_pid) if guardian_pid else 0.0
        hosts_cpu0 = sum(_cpu(p) for p in host_pids)
        t = time.perf_counter()
        system._publish_directory(publishes // 2)  # (returns once the last was sent)
        time.sleep(0.2)  # and the last updates read by the hosts
        elapsed = time.perf_counter() - t
        guardian = sum(_cpu(p) for p in others) - cpu0 - idle[0] * elapsed
        alone = _cpu(guardian_pid) - guardian0 if guardian_pid else float("nan")  # (its idle share is ~0)
        on_hosts = sum(_cpu(p) for p in host_pids) - hosts_cpu0 - idle[1] * elapsed
        # A client that sends fetches the directory from the guardian at most once a second
        # (actors.system.DIRECTORY_TTL): the cost of one fetch, with the same subtraction.
        fetch0 = sum(_cpu(p) for p in others)
        t = time.perf_counter()
        for _ in range(publishes):
            live = system.directory(30.0)
        fetch = sum(_cpu(p) for p in others) - fetch0 - idle[0] * (time.perf_counter() - t)
        out.append({"hosts": len(hosts), "publishes": publishes, "routes": len(live.routes),
                    "frame_bytes": len(sign(os.urandom(32), (_address(1900), live))),
                    "guardian_cpu_ms_per_publish": guardian / publishes * 1e3,
                    "guardian_process_cpu_ms_per_publish": alone / publishes * 1e3,
                    "guardian_cpu_ms_per_fetch": fetch / publishes * 1e3,
                    "hosts_cpu_us_per_publish_per_host": on_hosts / publishes / len(host_pids) * 1e6,
                    "seconds": elapsed})
    return out


# ---- main --------------------------------------------------------------------------------------------
def run(rows: int, entities: int, rounds: int, chunk: int, journal: str | None,
        publish_hosts: int) -> dict[str, Any]:
    """Every measurement of the module; the figures as a dict."""
    figures: dict[str, list[dict[str, float]]] = {}
    connections: dict[str, Any] = {}
    real: list[dict[str, float]] = []
    next_id = 1
    with systems(journal) as setups:
        # Warm-up: create and recover every entity of both hosts in both systems.
        warm = [(h, e, 0) for h in range(len(HOSTS)) for e in range(entities)]
        for setup in setups:
            feed(setup, [(h, e, next_id + i) for i, (h, e, _) in enumerate(warm)], chunk)
        next_id += len(warm)
        for r in range(rounds):
            batch = make_rows(next_id, rows, entities, seed=r)
            next_id += rows
            for setup in (setups if r % 2 == 0 else setups[::-1]):  # alternate who goes first
                figures.setdefault(setup.name, []).append(measure(setup, batch, chunk))
        for setup in setups:
            connections[setup.name] = postgres_figures(setup, len(warm) + rounds * rows)
        if publish_hosts:
            real = publish_real(setups[0], publish_hosts)
        setups_journal = setups[0].url.partition(":")[0]
    medians = {name: {k: statistics.median(r[k] for r in rs) for k in rs[0]} for name, rs in figures.items()}
    return {"systems": medians, "rounds": figures, "postgres": connections, "publish_real": real,
            "journal": setups_journal,
            "publish_micro": publish_micro(), "bridge_row_bytes": bridge_row_bytes(), "rows": rows, "entities": entities, "chunk": chunk}


def report(doc: dict[str, Any]) -> None:
    """Print the figures as tables."""
    one, three = doc["systems"]["one node"], doc["systems"]["three nodes"]
    print(f"{doc['rows']:,} rows per round over 2 x {doc['entities']:,} durable entities, chunks of {doc['chunk']:,}; "
          "medians of the rounds")
    print(f"{'':<34}{'one node':>12}{'three nodes':>14}{'ratio':>8}")
    for key, label in (("us_per_row", "wall µs per row"), ("cpu_us_per_row", "CPU µs per row (system + feeder)"),
                       ("postgres_cpu_us_per_row", "PostgreSQL backends CPU µs per row"),
                       ("rows_per_s", "rows/s"),
                       ("feeder_bytes_out_per_row", "feeder -> hosts bytes per row"),
                       ("feeder_bytes_in_per_row", "hosts -> feeder bytes per row"),
                       ("feeder_frames_out", "feeder -> hosts frames"),
                       ("feeder_frames_in", "hosts -> feeder frames"),
                       ("commits_per_s_per_host", "group commits/s per host"),
                       ("rows_per_commit", "rows per group commit")):
        ratio = three[key] / one[key] if one[key] else float("nan")
        print(f"{label:<34}{one[key]:>12,.1f}{three[key]:>14,.1f}{ratio:>8.2f}")
    for name, c in doc["postgres"].items():
        if c:
            print(f"PostgreSQL ({name}): {c['connections']} connections for {c['host_processes']} host processes "
                  f"(max_connections {c['max_connections']}); {c['rows']:,} rows in {c['events']:,} events, "
                  f"{c['record_bytes_per_row']:.0f} record bytes per row, "
                  f"{c['table_bytes_per_row']:.0f} bytes per row in the journal table with its indexes")
    b = doc["bridge_row_bytes"]
    print(f"the bridge's rows on the wire (RowChunk of 1,000 demo rows, framed): "
          f"{b['bridge_to_destination_persisted']:.1f} bytes per row (ack=persisted), "
          f"{b['bridge_to_destination_processed']:.1f} (ack=processed), "
          f"{b['destination_to_bridge']:.1f} back (Confirmed)")
    print("directory publish (micro-benchmark: one HMAC-signed pickle per running host):")
    print(f"{'routes':>7} {'shape':<10}{'frame bytes':>12}{'sign µs':>10}{'publish ms':>12}{'publish MB':>12}"
          f"{'host µs':>10}")
    for m in doc["publish_micro"]:
        print(f"{m['routes']:>7} {'ShardSet' if m['sharded'] else 'paths':<10}{m['frame_bytes']:>12,}"
              f"{m['sign_us']:>10,.1f}{m['publish_ms']:>12,.2f}{m['publish_bytes'] / 1e6:>12,.2f}"
              f"{m['host_receive_us']:>10,.1f}")
    for m in doc["publish_real"]:
        print(f"live guardian, {m['hosts']} hosts ({m['routes']} routes, {m['frame_bytes']:,} bytes per frame): "
              f"{m['guardian_cpu_ms_per_publish']:.2f} ms CPU per publish (guardian, admin and logger; "
              f"{m['guardian_process_cpu_ms_per_publish']:.2f} in the guardian's process), "
              f"{m['hosts_cpu_us_per_publish_per_host']:.0f} µs per host; {m['guardian_cpu_ms_per_fetch']:.2f} ms "
              "per client's directory fetch")


def main(argv: list[str] | None = None) -> int:
    """Parse the command line, run the benchmark and print its figures."""
    p = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    p.add_argument("--rows", type=int, default=20_000, help="rows per round")
    p.add_argument("--entities", type=int, default=1000, help="entities per host")
    p.add_argument("--rounds", type=int, default=5, help="rounds per system, alternating; medians printed")
    p.add_argument("--chunk", type=int, default=1000, help="rows per Thespian message per host")
    p.add_argument("--journal", help="journal URL for both systems instead of a fresh PostgreSQL schema each "
                                     "({kind} becomes one/three; kept afterwards; PostgreSQL figures need "
                                     "application_name={kind}-something in it)")
    p.add_argument("--publish-hosts", type=int, default=10,
                   help="extra idle hosts for the live publish measurement (0: skip it)")
    p.add_argument("--json", action="store_true", help="print the figures as one JSON line at the end")
    a = p.parse_args(argv)
    doc = run(a.rows, a.entities, a.rounds, a.chunk, a.journal, a.publish_hosts)
    report(doc)
    if a.json:
        one, three = doc["systems"]["one node"], doc["systems"]["three nodes"]
        store = "PostgreSQL" if doc["postgres"]["one node"] else doc["journal"]
        results = [{"system": f"reprise {name}", "measurement": f"rows/s, durable entities ({store})",
                    "rate": doc["systems"][name]["rows_per_s"]} for name in ("one node", "three nodes")]
        doc["ratio_us_per_row"] = three["us_per_row"] / one["us_per_row"]
        print(json.dumps({"results": results, **doc}))
    return 0


if __name__ == "__main__":
    # Run the importable copy: the host processes unpickle bench.cluster.Idle, not __main__.Idle.
    from bench import cluster

    sys.exit(cluster.main())

"""The operations of a history: each a small function taking the World and the history's random.Random."""

from __future__ import annotations

import os
import random
import resource
import subprocess
import sys
import time
from collections.abc import Callable

import actors
from actors.system import kill_tagged
from tests.torture.actors import FED, FEEDER, SINKS, STORES, GetValues, Put, PutAck, Send, SendAck, Store
from tests.torture.world import World, is_clear

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
N_STORES = 4
CLI_TIMEOUT = 60
EVENTS = "tests.torture.actors"  # registers the histories' event classes for the CLI's readers


def _store(rng: random.Random) -> str:
    return f"{STORES}/{rng.randrange(N_STORES)}"


def _put(w: World, path: str, timeout: float = 5.0) -> bool:
    """Ask a Store to persist the next value; ledger it if acknowledged."""
    value = w.next_value
    w.next_value += 1
    entity = path.rsplit("/", 1)[1]
    w.stores.add(entity)
    w.ledger.sent_puts[entity].append(value)
    try:
        reply = w.system.ask(path, Put(value), timeout=timeout)
    except Exception as exc:  # noqa: BLE001 - an unanswered put is fine; how it failed is checked
        w.note_error(f"put {value} to {path}", exc)
        return False
    if isinstance(reply, PutAck) and reply.value == value:
        w.ledger.puts[entity].append(value)
        return True
    w.unclear.append(f"put {value} to {path}: answered {reply!r}")
    return False


def put_ask(w: World, rng: random.Random) -> None:
    """One put, acknowledged once durable."""
    _put(w, _store(rng))


def _tell_burst(w: World, path: str, values: list[int], what: str) -> None:
    """Tell Puts of `values`; if the tell raises, remember them (an error that still delivered is a finding)."""
    try:
        w.system.tell_many([(path, Put(v, reply=False)) for v in values])
    except Exception as exc:  # noqa: BLE001
        w.note_error(what, exc)
        w.raised[path.rsplit("/", 1)[1]].update(values)


def _new_burst(w: World, path: str, count: int, what: str) -> None:
    """Tell `count` new puts to the store at `path` without waiting, ledgered as sent."""
    entity = path.rsplit("/", 1)[1]
    w.stores.add(entity)
    values = list(range(w.next_value, w.next_value + count))
    w.next_value += count
    w.ledger.sent_puts[entity].extend(values)
    _tell_burst(w, path, values, what)


def put_burst(w: World, rng: random.Random) -> None:
    """Many puts told to one store without waiting (FIFO per sender -> receiver), then one asked."""
    path = _store(rng)
    _new_burst(w, path, rng.randrange(5, 40), f"tell burst to {path}")
    _put(w, path)


def burst_across_restart(w: World, rng: random.Random) -> None:
    """Puts told to a store before and right after its host is SIGKILLed (held while it restarts): FIFO holds."""
    path = _store(rng)
    w.stores.add(path.rsplit("/", 1)[1])
    pid = w.host_pid(STORES)
    for part in range(2):
        _new_burst(w, path, rng.randrange(3, 20), f"tell burst to {path} {'after' if part else 'before'} its host's SIGKILL")
        if part == 0 and pid:
            w.sigkill(pid)
            _gone(pid)  # the next tell meets a closed port, not a dying process
    _put(w, path, timeout=15.0)


def stop_entity(w: World, rng: random.Random) -> None:
    """Puts told to a store, then that entity stopped (`system.stop`) and asked a put: what it persisted
    before the stop is written, later puts reach its next instance, FIFO holds."""
    path = _store(rng)
    _new_burst(w, path, rng.randrange(1, 20), f"tell burst to {path} before its stop")
    try:
        w.system.stop(path, timeout=15.0)
    except Exception as exc:  # noqa: BLE001 - how it failed is checked
        w.note_error(f"stop {path}", exc)
    _put(w, path)


def _gone(pid: int, timeout: float = 2.0) -> None:
    """Wait (bounded) until process `pid` is dead (gone or a zombie)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().split(")")[-1].split()[0] == "Z":
                    return
        except OSError:
            return
        time.sleep(0.005)


def send_items(w: World, rng: random.Random) -> None:
    """A DurableDelivery stream: the feeder journals and delivers items to idempotent sinks."""
    count = rng.randrange(1, 60)
    start = w.next_item
    w.next_item += count
    stream = "s"
    w.ledger.sent_items.update((stream, n) for n in range(start, start + count))
    try:
        reply = w.system.ask(FEEDER, Send(stream, start, count, w.SINKS), timeout=10)
    except Exception as exc:  # noqa: BLE001
        w.note_error(f"send items {start}..{start + count - 1}", exc)
        return
    if isinstance(reply, SendAck):
        w.ledger.items.update((stream, n) for n in range(start, start + count))
    else:
        w.unclear.append(f"send items: answered {reply!r}")


def spark_feed(w: World, rng: random.Random) -> None:
    """A Spark feed (ack="processed") into FedSinks; sometimes a rerun of an earlier feed id (dedup)."""
    if w.spark is None:
        return send_items(w, rng)
    from spark_bridge import feed
    if w.ledger.feed_txids and rng.random() < 0.3:
        feed_id = rng.choice(sorted(w.ledger.feed_txids))
        txids = w.ledger.feed_txids[feed_id]
    else:
        n = rng.randrange(20, 300)
        txids = tuple(range(w.next_txid, w.next_txid + n))
        w.next_txid += n
        feed_id = f"torture-{w.seed}-{txids[0]}"
        w.ledger.feed_txids[feed_id] = txids
    w.ledger.sent_fed.update(txids)
    df = w.spark.createDataFrame([(f"{FED}/{t % 4}", t) for t in txids], "destination string, txid long")
    try:
        feed(df.repartition(2), system=w.system, to="destination", feed_id=feed_id, ack="processed", timeout=60,
             batch_size=rng.choice([7, 50, 2000]), progress=False)
    except Exception as exc:  # noqa: BLE001
        w.note_error(f"feed {feed_id}", exc)
        return
    w.ledger.fed.update(txids)


def _cli_args(w: World, rng: random.Random) -> list[str]:
    spark = ["spark-staged", "spark-discard"] if w.spark is not None else []  # (the bridge runs only then)
    choice = rng.choice(["status", "status-json", "ls", "show", "tail", "verify", *spark])
    if choice == "spark-staged":
        return ["spark", "staged", "--port", str(w.system.admin_port)]
    if choice == "spark-discard":
        # No run of a history is idle for an hour: it must discard nothing, and lose nothing acknowledged.
        return ["spark", "discard", "--port", str(w.system.admin_port), "--idle-for", "1h"]
    if choice.startswith("status"):
        return ["status", "--port", str(w.system.admin_port)] + (["--json"] if choice == "status-json" else [])
    if choice == "show":
        # An id with events (an unknown one is an error on purpose); before any put, the feeder's.
        if w.stores:
            return ["journal", "show", "--import", EVENTS, w.url, f"{STORES}/{rng.choice(sorted(w.stores))}"]
        choice = "ls"
    return ["journal", choice, "--import", EVENTS, w.url]


def _cli(args: list[str]) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=ROOT)
    return subprocess.Popen([REPRISE, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True)


def _finish_cli(w: World, args: list[str], proc: subprocess.Popen) -> None:
    try:
        out, err = proc.communicate(timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        w.findings.append(f"reprise {' '.join(args)}: still running after {CLI_TIMEOUT} s (killed)")
        return
    if proc.returncode != 0:
        last = (err.strip().splitlines() or ["(no output)"])[-1]
        if "Traceback" in err:
            w.unclear.append(f"reprise {' '.join(args)}: exit {proc.returncode} with a traceback: {last[:200]}")
        else:
            w.findings.append(f"reprise {' '.join(args)}: exit {proc.returncode}: {last[:200]}")


def cli(w: World, rng: random.Random) -> None:
    """One CLI command (status, journal ls/show/tail/verify, spark staged/discard) against the live system."""
    args = _cli_args(w, rng)
    _finish_cli(w, args, _cli(args))


_SQLITE_READER = ("import sqlite3, sys; c = sqlite3.connect(sys.argv[1]); "
                  "print(c.execute('SELECT count(*) FROM journal').fetchone()[0]); c.close()")
_PG_READER = ("import psycopg, sys; c = psycopg.connect(sys.argv[1]); "
              "print(c.execute('SELECT count(*) FROM ' + sys.argv[2] + '.journal').fetchone()[0]); c.close()")


def _reader() -> tuple[list[str], Callable[[World], list[str]]]:
    return [sys.executable, "-c"], lambda w: (
        [_SQLITE_READER, w.db_path] if w.kind == "sqlite" else [_PG_READER, w.pg_url, w.schema])


def _plain_reader(w: World) -> subprocess.Popen:
    prefix, rest = _reader()
    return subprocess.Popen(prefix + rest(w), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            stdin=subprocess.DEVNULL)


def plain_reader(w: World, rng: random.Random) -> None:
    """A plain sqlite3 (or psycopg) reader in another process, while the system writes."""
    _finish_reader(w, _plain_reader(w))


def _finish_reader(w: World, proc: subprocess.Popen) -> None:
    try:
        _, err = proc.communicate(timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        w.findings.append("plain reader: still running after 60 s (killed)")
        return
    if proc.returncode != 0:
        w.findings.append(f"plain reader: exit {proc.returncode}: {(err.strip().splitlines() or [''])[-1][:200]}")


def concurrent_readers(w: World, rng: random.Random) -> None:
    """CLI readers and a plain reader in other processes while puts and items are written."""
    procs = [(args, _cli(args)) for args in (_cli_args(w, rng) for _ in range(rng.randrange(1, 3)))]
    reader = _plain_reader(w)
    put_burst(w, rng)
    send_items(w, rng)
    for args, proc in procs:
        _finish_cli(w, args, proc)
    _finish_reader(w, reader)


def kill_host(w: World, rng: random.Random) -> None:
    """SIGKILL one host process (the guardian restarts it); the next operations run against the restart."""
    victims = [STORES, FEEDER, SINKS]
    if w.spark is not None:
        from spark_bridge import BRIDGE_PATH
        victims += [BRIDGE_PATH, FED]
    victim = rng.choice(victims)
    pid = w.host_pid(victim)
    w.ops[-1] += f"({victim})"
    if pid:
        w.sigkill(pid)


def kill_storm(w: World, rng: random.Random) -> None:
    """SIGKILL one host again and again, each time once it runs again (a crash loop); it must stay served."""
    victim = rng.choice([STORES, FEEDER, SINKS])
    kills = rng.randrange(3, 13)
    w.ops[-1] += f"({victim} x{kills})"
    killed = 0
    for _ in range(kills):
        info = _running(w, victim, not_pid=killed)
        if info is None:
            break
        killed = info.pid
        w.sigkill(killed)
    info = _running(w, victim, not_pid=killed)
    if info is None:
        state = w.system.status(timeout=10).hosts.get(victim)
        w.gave_up.append(f"{victim} is {state.state if state else 'gone'} after {kills} SIGKILLs in a row")


def _running(w: World, path: str, timeout: float = 15.0, not_pid: int = 0):
    """The host's info once it runs in a process other than `not_pid` (bounded), or None if it does not."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            info = w.system.status(timeout=5).hosts.get(path)
        except actors.AskTimeout:
            info = None
        if info is not None and info.state == "running" and info.pid and info.pid != not_pid:
            return info
        if info is not None and info.state in ("failed", "stopped"):
            return None
        time.sleep(0.05)
    return None


def kill_admin(w: World, rng: random.Random) -> None:
    """SIGKILL the Thespian admin; the system is gone: `up` again on the same journal."""
    pid = w.admin_pid()
    if pid:
        w.sigkill(pid)
    w.crash_recover()


def down_up(w: World, rng: random.Random) -> None:
    """`down` then `up` on the same journal."""
    w.restart()


def pg_terminate(w: World, rng: random.Random) -> None:
    """PostgreSQL terminates every backend of this history's system."""
    if w.kind != "postgres":
        return put_ask(w, rng)
    import psycopg
    with psycopg.connect(w.pg_url, autocommit=True) as conn:
        conn.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
                     (w.app,))


def disk_full(w: World, rng: random.Random) -> None:
    """The store host's writes fail as on a full disk (RLIMIT_FSIZE), a few puts are tried, then space returns."""
    if w.kind != "sqlite":
        return put_ask(w, rng)
    pid = w.host_pid(STORES)
    if not pid:
        return
    try:
        _, hard = resource.prlimit(pid, resource.RLIMIT_FSIZE)
        # Only the soft limit: lowering the hard one could not be undone without CAP_SYS_RESOURCE.
        resource.prlimit(pid, resource.RLIMIT_FSIZE, (1024, hard))
    except (ProcessLookupError, PermissionError):
        return
    try:
        for _ in range(rng.randrange(1, 4)):
            _put(w, _store(rng), timeout=2.0)
    finally:
        try:
            resource.prlimit(pid, resource.RLIMIT_FSIZE, (hard, hard))
        except ProcessLookupError:
            pass


# ---- bad inputs: each must fail with a clear error naming what was wrong ---------------------------
def _expect_clear(w: World, name: str, call: Callable[[], object], words: tuple[str, ...],
                  undo: Callable[[object], None] | None = None) -> None:
    try:
        result = call()
    except Exception as exc:  # noqa: BLE001 - judged below
        text = str(exc)
        if not (is_clear(exc) and isinstance(exc, ValueError | TypeError) and any(x in text for x in words)):
            w.unclear.append(f"bad input {name}: {type(exc).__name__}: {text[:200]}")
        return
    w.unclear.append(f"bad input {name}: accepted silently")
    if undo is not None:
        try:
            undo(result)
        except Exception as exc:  # noqa: BLE001
            w.findings.append(f"bad input {name}: undoing it failed: {exc}")


def _bad_start(w: World, url: str) -> Callable[[], object]:
    def call() -> object:
        tag = f"{w.token}-h{w.seed}-bad-"
        w.tags.append(tag)
        try:
            return actors.start("multiproc", tag=tag, run_dir=os.path.join(w.workdir, "bad-run"), journal=url,
                                snapshot_store=url, start_timeout=30)
        except BaseException:
            kill_tagged(tag)
            raise
    return call


def _bad_cli(w: World, name: str, args: list[str], words: tuple[str, ...]) -> None:
    proc = _cli(args)
    try:
        _, err = proc.communicate(timeout=CLI_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        w.unclear.append(f"bad input {name}: the CLI hung")
        return
    if proc.returncode == 0:
        w.unclear.append(f"bad input {name}: exit 0")
    elif "Traceback" in err or not any(x in err for x in words):
        w.unclear.append(f"bad input {name}: exit {proc.returncode}: {err.strip()[-200:]}")


def bad_input(w: World, rng: random.Random) -> None:
    """One bad input from the issue's list; it must fail with a clear error."""
    case = rng.choice(["start-sqllite", "start-foo", "passivate-0", "ask-negative-timeout", "tell-control-char",
                       "spawn-control-char", "cli-sqllite", "cli-foo", "cli-control-char"])
    w.ops[-1] += f"({case})"
    s = w.system

    def shutdown(system: object) -> None:
        system.shutdown()  # type: ignore[attr-defined]

    if case == "start-sqllite":
        _expect_clear(w, case, _bad_start(w, f"sqllite:///{w.workdir}/x.db"), ("sqllite", "URL", "url"), shutdown)
    elif case == "start-foo":
        _expect_clear(w, case, _bad_start(w, "foo://"), ("foo://", "URL", "url"), shutdown)
    elif case == "passivate-0":
        path = f"/user/lazy{w.next_value}"
        w.next_value += 1
        _expect_clear(w, case, lambda: s.spawn(Store, path, entities=True, passivate_after=0), ("passivate_after",),
                      lambda _: s.stop(path))
    elif case == "ask-negative-timeout":
        _expect_clear(w, case, lambda: s.ask(f"{STORES}/0", GetValues(), timeout=-1), ("timeout",))
    elif case == "tell-control-char":
        _expect_clear(w, case, lambda: s.tell(f"{STORES}/a\x07b", GetValues()), ("path", "control", "character"))
    elif case == "spawn-control-char":
        path = "/user/bad\nname"
        _expect_clear(w, case, lambda: s.spawn(Store, path), ("path", "control", "character"), lambda _: s.stop(path))
    elif case == "cli-sqllite":
        _bad_cli(w, case, ["journal", "ls", f"sqllite:///{w.workdir}/x.db"], ("sqllite", "URL", "url"))
    elif case == "cli-foo":
        _bad_cli(w, case, ["journal", "ls", "foo://"], ("foo://", "URL", "url"))
    else:
        _bad_cli(w, case, ["journal", "show", f"{STORES}/a\x01b", w.url], ("path", "control", "character"))


# name -> (function, weight): writes dominate so that every fault has something in flight to lose.
OPS: dict[str, tuple[Callable[[World, object], None], int]] = {
    "put_ask": (put_ask, 6),
    "put_burst": (put_burst, 4),
    "burst_across_restart": (burst_across_restart, 2),
    "stop_entity": (stop_entity, 2),
    "send_items": (send_items, 5),
    "spark_feed": (spark_feed, 3),
    "cli": (cli, 4),
    "plain_reader": (plain_reader, 2),
    "concurrent_readers": (concurrent_readers, 2),
    "kill_host": (kill_host, 4),
    "kill_storm": (kill_storm, 1),
    "kill_admin": (kill_admin, 1),
    "down_up": (down_up, 2),
    "pg_terminate": (pg_terminate, 2),
    "disk_full": (disk_full, 2),
    "bad_input": (bad_input, 2),
}


ONLY_ON = {"pg_terminate": "postgres", "disk_full": "sqlite"}


def choose(rng: random.Random, journal: str, spark: bool, exclude: frozenset[str] = frozenset()) -> str:
    """The next operation's name for a history on `journal` (never one in `exclude`)."""
    names = [n for n in OPS if (spark or n != "spark_feed") and n not in exclude and ONLY_ON.get(n, journal) == journal]
    return rng.choices(names, weights=[OPS[n][1] for n in names])[0]

"""Benchmark (not a test): confirmed at-least-once deliveries/s between two host processes on SQLite FULL.

    .venv/bin/python -m bench.delivery [N] [--rounds 3] [--json FILE] [--persist 5000] [--asks 2000] [--rabbitmq N]
        [--loop 5000] [--loop-each 500] [--loop-rounds 5]

A DurableDelivery producer and an IdempotentReceiver consumer run in two host processes (multiproc),
each journaling to SQLite with synchronous=FULL: the producer's sent events are durable before a
message leaves, the consumer's applied events are durable before it confirms, and the producer's
confirmed events are durable before the run counts as done. Peers in the same run: raw Thespian ask
round trips, and RabbitMQ through pika (persistent messages, publisher confirms, manual acks) when a
server listens on 127.0.0.1:5672, both pipelined (the fair peer: up to 1000 messages awaiting their
confirm, acks multiple=true every 100) and one confirm at a time (BlockingConnection). Also persist (one
per command) and persist_async events/s through a PersistentActor, and (issue 16's Persist target) a closed
loop, the next command only once the previous event's handler ran, by one actor and by 100 actors of one
host at once (group commit), alternating with its peer, raw sqlite3 one row per transaction (WAL, FULL).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import socket
import sqlite3
import statistics
import sys
import tempfile
import time
from collections import deque
from contextlib import closing

from thespian.actors import Actor as ThespianActor

import actors
from bench._delivery_actors import BenchConsumer, BenchPersister, BenchProducer, PersistLoop, Run
from bench.journal import _RAW_INSERT, _raw_blob, _raw_connection
from tests.persistence.fixtures import Ops, Scripted

TARGET = 50_000


def deliveries(n: int, rounds: int = 3, chunk: int = 1000, window: int = 20_000) -> tuple[float, float, float]:
    """Confirmed deliveries/s and CPU us per delivery in the producer's and the consumer's process
    (medians of `rounds` runs of `n` in one system)."""
    paths = ("/user/producer", "/user/consumer")
    # (the journal files go with the directory once the system is down: ~20 MB a run stayed in /tmp before)
    with tempfile.TemporaryDirectory(prefix="reprise-bench-") as d, \
            actors.start("multiproc", journal=f"sqlite:///{d}/j.db", snapshot_store=f"sqlite:///{d}/s.db") as s:
        s.spawn(BenchConsumer, path="/user/consumer")
        s.spawn(BenchProducer, path="/user/producer")
        probe = s.probe()
        # Warm up both hosts (imports, journal files, routes) before the clock starts.
        s.tell("/user/producer", Run(100, "/user/consumer", probe.path))
        probe.receive(60)
        runs = []
        for _ in range(rounds):
            cpu = [s.ask(path, "cpu") for path in paths]
            t = time.perf_counter()
            s.tell("/user/producer", Run(n, "/user/consumer", probe.path, chunk, window))
            got = probe.receive(600)
            elapsed = time.perf_counter() - t
            if got != ("done", n):
                raise RuntimeError(f"producer answered {got!r}, expected ('done', {n})")
            used = [s.ask(path, "cpu") - before for path, before in zip(paths, cpu, strict=True)]
            runs.append((n / elapsed, used[0] / n * 1e6, used[1] / n * 1e6))
    return tuple(statistics.median(r[k] for r in runs) for k in range(3))


def persist_rates(n: int) -> tuple[float, float]:
    """Events/s through one PersistentActor: persist one per command, and persist_async."""
    out = []
    with tempfile.TemporaryDirectory(prefix="reprise-bench-") as d, \
            actors.start("multiproc", journal=f"sqlite:///{d}/j.db") as s:
        s.spawn(Scripted, path="/user/p")
        probe = s.probe()
        for op in ("p", "pa"):
            t = time.perf_counter()
            s.tell_many([("/user/p", Ops("x", (f"{op}:{i}",))) for i in range(n)], sender=probe.path)
            probe.receive_many(n, 600)
            out.append(n / (time.perf_counter() - t))
    return out[0], out[1]


def persist_closed_loop(n: int, each: int, fanout: int = 100, rounds: int = 5) -> tuple[float, float, float]:
    """Events/s persisted one per command in a closed loop (the next command only after the previous
    event's handler ran), by one actor and by `fanout` entities of one host at once (`each` events each:
    group commit), and raw sqlite3 rows/s one per transaction (WAL, synchronous=FULL, the journal's pragmas).
    The three alternate over `rounds` rounds and each figure is the median round, so this machine's fsync
    jitter hits them alike."""
    with tempfile.TemporaryDirectory(prefix="reprise-bench-") as d, closing(_raw_connection(f"{d}/raw.db")) as raw:
        blob = _raw_blob()
        rows = [0]

        def raw_rows(count: int) -> float:
            t = time.perf_counter()
            for i in range(rows[0], rows[0] + count):
                raw.execute("BEGIN")
                raw.execute(_RAW_INSERT, ("single", i, blob))
                raw.execute("COMMIT")
            rows[0] += count
            return count / (time.perf_counter() - t)

        with actors.start("multiproc", journal=f"sqlite:///{d}/j.db") as s:
            s.spawn(BenchPersister, path="/user/persister")
            s.spawn(BenchPersister, path="/user/persisters", entities=True, passivate_after=3600.0)
            probe = s.probe()
            paths = [f"/user/persisters/{k}" for k in range(fanout)]

            def loop(targets: list[str], count: int) -> float:
                t = time.perf_counter()
                # One host message for all: a closed loop runs on inside its host's settle round, so actors
                # started by separate messages would mostly run one after the other, not at once.
                s.tell_many([(path, PersistLoop(count, probe.path)) for path in targets])
                got = probe.receive_many(len(targets), 600)
                elapsed = time.perf_counter() - t
                if sorted(got) != sorted(("done", path) for path in targets):
                    raise RuntimeError(f"persisters answered {got!r}, expected one ('done', path) each")
                return len(targets) * count / elapsed

            loop(["/user/persister"], 50)  # warm up: host processes, recovery, journal file
            loop(paths, 5)
            raw_rows(50)
            per_round, each_round = max(1, n // rounds), max(1, each // rounds)
            runs = [(raw_rows(per_round), loop(["/user/persister"], per_round), loop(paths, each_round))
                    for _ in range(rounds)]
    raw_rate, single, many = (statistics.median(r[k] for r in runs) for k in range(3))
    return single, raw_rate, many


class Echo(ThespianActor):
    """A raw Thespian echo actor: the baseline round trip."""

    def receiveMessage(self, message, sender):
        if isinstance(message, int):
            self.send(sender, message)


def raw_thespian_asks(n: int) -> float:
    """Raw Thespian multiprocTCPBase ask round trips/s (nothing persisted)."""
    from thespian.actors import ActorSystem
    asys = ActorSystem("multiprocTCPBase", {"Admin Port": actors.free_port()})
    try:
        echo = asys.createActor("bench.delivery.Echo")
        asys.ask(echo, -1, 10)
        t = time.perf_counter()
        for i in range(n):
            asys.ask(echo, i, 10)
        return n / (time.perf_counter() - t)
    finally:
        asys.shutdown()


def rabbitmq(n: int) -> tuple[float | None, str]:
    """RabbitMQ end to end through pika's BlockingConnection: each persistent publish waits for its confirm,
    then the consumer acks every message."""
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        return None, "RabbitMQ not running on 127.0.0.1:5672: not measured"
    try:
        import pika
    except ImportError:
        return None, "pika not installed: RabbitMQ not measured"
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", 5672))
    try:
        ch = conn.channel()
        queue = f"reprise-bench-{os.getpid()}"
        ch.queue_declare(queue, durable=True)
        ch.queue_purge(queue)
        ch.confirm_delivery()
        props = pika.BasicProperties(delivery_mode=2)
        t = time.perf_counter()
        for i in range(n):
            ch.basic_publish("", queue, str(i).encode(), props)
        got = 0
        for method, _, _ in ch.consume(queue, inactivity_timeout=10):
            if method is None:
                break
            ch.basic_ack(method.delivery_tag)
            got += 1
            if got == n:
                break
        rate = n / (time.perf_counter() - t)
        ch.cancel()
        ch.queue_delete(queue)
    finally:
        conn.close()
    if got != n:
        return None, f"RabbitMQ delivered {got} of {n} messages: not counted"
    return rate, "persistent messages, publisher confirms, manual acks"


def rabbitmq_pipelined(n: int, window: int = 1000, ack_every: int = 100) -> float | None:
    """RabbitMQ end to end with publishing pipelined: up to `window` persistent messages awaiting their
    publisher confirm, the consumer acking (multiple=true) every `ack_every` messages (Reprise's batched
    confirms, in RabbitMQ's terms). None when no server or no pika."""
    try:
        import pika
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except (ImportError, OSError):
        return None
    queue = f"reprise-bench-pipelined-{os.getpid()}"
    body = b"0123456789"
    props = pika.BasicProperties(delivery_mode=2)
    st = {"published": 0, "confirmed": 0, "consumed": 0, "t": 0.0, "elapsed": None}

    def publish_more(ch, tags):
        while st["published"] < n and len(tags) < window:
            ch.basic_publish("", queue, body, props)
            st["published"] += 1
            tags.append(st["published"])  # confirm tags count publishes on the channel from 1

    def on_confirm(frame, ch, tags):
        m = frame.method
        if isinstance(m, pika.spec.Basic.Nack):
            raise RuntimeError("RabbitMQ refused a message (nack)")
        tag = m.delivery_tag
        if m.multiple:
            while tags and tags[0] <= tag:
                tags.popleft()
                st["confirmed"] += 1
        else:
            tags.remove(tag)
            st["confirmed"] += 1
        publish_more(ch, tags)
        finish(ch.connection)

    def on_message(ch, method, _properties, _body):
        st["consumed"] += 1
        if st["consumed"] % ack_every == 0 or st["consumed"] == n:
            ch.basic_ack(method.delivery_tag, multiple=True)
        finish(ch.connection)

    def finish(conn):
        if st["elapsed"] is None and st["consumed"] == n and st["confirmed"] == n:
            st["elapsed"] = time.perf_counter() - st["t"]
            conn.ioloop.stop()

    def on_open(conn):
        conn.channel(on_open_callback=on_consumer_channel)

    def on_consumer_channel(ch):
        ch.queue_declare(queue, durable=True, callback=lambda _: ch.queue_purge(
            queue, callback=lambda _: ch.basic_qos(prefetch_count=window * 2, callback=lambda _: start(ch))))

    def start(consumer):
        consumer.basic_consume(queue, on_message)
        consumer.connection.channel(on_open_callback=on_publisher_channel)

    def on_publisher_channel(ch):
        tags: deque[int] = deque()
        ch.confirm_delivery(lambda frame: on_confirm(frame, ch, tags), callback=lambda _: begin(ch, tags))

    def begin(ch, tags):
        st["t"] = time.perf_counter()
        publish_more(ch, tags)

    conn = pika.SelectConnection(pika.ConnectionParameters("127.0.0.1", 5672), on_open_callback=on_open)
    conn.ioloop.call_later(300, conn.ioloop.stop)  # a stuck run ends with no figure
    conn.ioloop.start()
    try:
        if st["elapsed"] is None:
            return None
        return n / st["elapsed"]
    finally:
        try:
            blocking = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", 5672))
            blocking.channel().queue_delete(queue)
            blocking.close()
        except Exception:
            pass
        if conn.is_open:
            conn.close()


def main(argv: list[str] | None = None) -> dict:
    """Run every measurement once, print absolute figures and ratios, optionally write JSON."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("n", nargs="?", type=int, default=20_000, help="confirmed deliveries to measure")
    ap.add_argument("--json", metavar="FILE", help="also write the figures to FILE (read by `reprise bench`)")
    ap.add_argument("--rounds", type=int, default=3, help="timed runs of N deliveries (the median is reported)")
    ap.add_argument("--asks", type=int, default=2_000, help="raw Thespian ask round trips")
    ap.add_argument("--rabbitmq", type=int, default=None,
                    help="RabbitMQ messages (default: N pipelined, N/4 one confirm at a time)")
    ap.add_argument("--persist", type=int, default=5_000, help="events for the persist figures")
    ap.add_argument("--loop", type=int, default=5_000,
                    help="events for one actor's closed loop (and raw sqlite3 rows, one per transaction)")
    ap.add_argument("--loop-each", type=int, default=500,
                    help="events per actor when 100 actors persist at once (closed loop each)")
    ap.add_argument("--loop-rounds", type=int, default=5,
                    help="alternating rounds of raw sqlite3, one actor and 100 actors (medians reported)")
    args = ap.parse_args(argv)
    n = args.n
    notes: list[str] = []
    d, producer_us, consumer_us = deliveries(n, args.rounds)
    asks = raw_thespian_asks(args.asks)
    rabbit_n = args.rabbitmq or n
    rabbit_piped = rabbitmq_pipelined(rabbit_n)
    rabbit, rabbit_note = rabbitmq(args.rabbitmq or max(1, n // 4))
    if rabbit is None:
        notes.append(rabbit_note)
    elif rabbit_piped is None:
        notes.append("RabbitMQ pipelined run did not finish: not measured")
    p, pa = persist_rates(args.persist)
    loop1, raw1, loop100 = persist_closed_loop(args.loop, args.loop_each, rounds=args.loop_rounds)
    results = [
        {"system": "reprise", "measurement": "confirmed deliveries, SQLite FULL both sides", "rate": d, "count": n},
        {"system": "raw thespian", "measurement": "ask round trips (nothing persisted)", "rate": asks,
         "count": args.asks},
    ]
    peers = []  # (label, rate) of the RabbitMQ figures, strongest first
    if rabbit_piped is not None:
        peers.append(("rabbitmq pipelined", rabbit_piped))
        results.append({"system": "rabbitmq (pika)", "measurement": "end to end, pipelined: persistent, up to 1000 "
                        "awaiting publisher confirms, acks multiple=true every 100", "rate": rabbit_piped,
                        "count": rabbit_n})
    if rabbit is not None:
        peers.append(("rabbitmq one at a time", rabbit))
        results.append({"system": "rabbitmq (pika)", "measurement": "end to end, one confirm at a time: persistent, "
                        "BlockingConnection publisher confirms, one ack per message", "rate": rabbit,
                        "count": args.rabbitmq or max(1, n // 4)})
    results += [
        {"system": "reprise", "measurement": "persist, one event per command", "rate": p, "count": args.persist},
        {"system": "reprise", "measurement": "persist_async, one event per command", "rate": pa,
         "count": args.persist},
        {"system": "raw sqlite3", "measurement": "1 row per transaction (WAL, synchronous=FULL)", "rate": raw1,
         "count": args.loop},
        {"system": "reprise", "measurement": "persist closed loop, one actor, one event per command",
         "rate": loop1, "count": args.loop},
        {"system": "reprise", "measurement": "persist closed loop, 100 actors at once, one event per command each",
         "rate": loop100, "count": 100 * args.loop_each},
    ]
    ratios = {"reprise/raw_ask": d / asks, "persist_one_actor/raw_sqlite_1_row": loop1 / raw1,
              "persist_100_actors/raw_sqlite_1_row": loop100 / raw1}
    for label, rate in peers:
        ratios[f"reprise/{label.replace(' ', '_')}"] = d / rate
    targets = [{"target": "confirmed deliveries/s", "achieved": d, "required": TARGET, "met": d >= TARGET}]
    if peers:
        label, rate = peers[0]
        targets.append({"target": f"ahead of RabbitMQ end to end ({label})", "achieved": d / rate,
                        "required": 1.0, "met": d > rate})
    targets += [{"target": "persist, one actor, vs raw sqlite3 1 row per transaction", "achieved": loop1 / raw1,
                 "required": 1.0, "met": loop1 >= raw1},
                {"target": "persist, 100 actors at once, vs raw sqlite3 1 row per transaction",
                 "achieved": loop100 / raw1, "required": 10.0, "met": loop100 >= 10 * raw1}]

    print(f"python {platform.python_version()}, sqlite {sqlite3.sqlite_version}, {os.cpu_count()} cpus, "
          f"{platform.platform()}")
    print(f"reprise confirmed deliveries, SQLite FULL both sides: {d:>9,.0f}/s  (n={n:,}, median of "
          f"{args.rounds}; CPU per delivery: producer {producer_us:.1f} us, consumer {consumer_us:.1f} us)")
    print(f"raw Thespian ask round trips:                         {asks:>9,.0f}/s  "
          f"-> reprise {d / asks:.1f}x")
    for label, rate in peers:
        print(f"RabbitMQ via pika, {label.removeprefix('rabbitmq ') + ':':<34}{rate:>9,.0f}/s  -> reprise {d / rate:.1f}x")
    if rabbit is None:
        print(f"RabbitMQ via pika: {rabbit_note}")
    print(f"persist, one event per command:                       {p:>9,.0f} events/s")
    print(f"persist_async, one event per command:                 {pa:>9,.0f} events/s")
    print(f"raw sqlite3, 1 row per transaction (WAL, FULL):       {raw1:>9,.0f} rows/s")
    print(f"persist closed loop, one actor:                       {loop1:>9,.0f} events/s  -> {loop1 / raw1:.2f}x raw")
    print(f"persist closed loop, 100 actors at once:              {loop100:>9,.0f} events/s  -> "
          f"{loop100 / raw1:.2f}x raw")
    for t in targets:
        fmt = (lambda v: f"{v:,.0f}/s") if t["required"] > 10 else (lambda v: f"{v:.2f}x")
        print(f"  {'MET   ' if t['met'] else 'MISSED'} {t['target']}: {fmt(t['achieved'])} "
              f"(target >= {fmt(t['required'])})")
    doc = {"results": results, "ratios": ratios, "targets": targets, "notes": notes,
           "cpu_us_per_delivery": {"producer": producer_us, "consumer": consumer_us}}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(doc, f, indent=2)
    return doc


if __name__ == "__main__":
    main(sys.argv[1:])
    sys.exit(0)

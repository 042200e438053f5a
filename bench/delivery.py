"""Benchmark (not a test): confirmed at-least-once deliveries/s between two host processes on SQLite FULL.

    .venv/bin/python -m bench.delivery [N]
"""

from __future__ import annotations

import socket
import sys
import tempfile
import time

from thespian.actors import Actor as ThespianActor

import actors
from tests.persistence.fixtures import Consumer, Ops, Produce, Producer, Scripted


def wait_for(check, timeout: float):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = check()
        if got:
            return got
        time.sleep(0.02)
    raise TimeoutError


def deliveries(n: int) -> float:
    """Confirmed deliveries/s: DurableDelivery producer -> IdempotentReceiver consumer, both journaling."""
    d = tempfile.mkdtemp()
    with actors.start("multiproc", journal=f"sqlite:///{d}/j.db", snapshot_store=f"sqlite:///{d}/s.db") as s:
        s.spawn(Consumer, path="/user/consumer")
        s.spawn(Producer, path="/user/producer")
        t = time.perf_counter()
        s.tell("/user/producer", Produce(n, "/user/consumer"))
        wait_for(lambda: s.ask("/user/producer", "status", 10) == (n, 0), 600)
        return n / (time.perf_counter() - t)


def persist_rates(n: int) -> tuple[float, float]:
    """Events/s through one PersistentActor: persist one per command, and persist_async."""
    d = tempfile.mkdtemp()
    out = []
    with actors.start("multiproc", journal=f"sqlite:///{d}/j.db") as s:
        s.spawn(Scripted, path="/user/p")
        probe = s.probe()
        for op in ("p", "pa"):
            t = time.perf_counter()
            s.tell_many([("/user/p", Ops("x", (f"{op}:{i}",))) for i in range(n)], sender=probe.path)
            probe.receive_many(n, 600)
            out.append(n / (time.perf_counter() - t))
    return out[0], out[1]


class Echo(ThespianActor):
    """A raw Thespian echo actor: the baseline round trip."""

    def receiveMessage(self, message, sender):
        if isinstance(message, int):
            self.send(sender, message)


def raw_thespian_asks(n: int) -> float:
    """Raw Thespian multiprocTCPBase ask round trips/s."""
    from thespian.actors import ActorSystem
    asys = ActorSystem("multiprocTCPBase", {"Admin Port": actors.free_port()})
    try:
        echo = asys.createActor("bench.delivery.Echo")
        t = time.perf_counter()
        for i in range(n):
            asys.ask(echo, i, 10)
        return n / (time.perf_counter() - t)
    finally:
        asys.shutdown()


def rabbitmq(n: int) -> str:
    try:
        socket.create_connection(("127.0.0.1", 5672), timeout=1).close()
    except OSError:
        return "RabbitMQ not running on 127.0.0.1:5672: not measured"
    try:
        import pika
    except ImportError:
        return "pika not installed: RabbitMQ not measured"
    conn = pika.BlockingConnection(pika.ConnectionParameters("127.0.0.1", 5672))
    ch = conn.channel()
    ch.queue_declare("reprise-bench", durable=True)
    ch.confirm_delivery()
    t = time.perf_counter()
    for i in range(n):
        ch.basic_publish("", "reprise-bench", str(i).encode(), pika.BasicProperties(delivery_mode=2))
    got = 0
    for method, _, _ in ch.consume("reprise-bench", inactivity_timeout=10):
        if method is None:
            break
        ch.basic_ack(method.delivery_tag)
        got += 1
        if got == n:
            break
    rate = n / (time.perf_counter() - t)
    conn.close()
    return f"{rate:,.0f} msgs/s end to end (persistent, publisher confirms, manual acks)"


def main() -> None:
    n = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    d = deliveries(n)
    print(f"reprise confirmed deliveries (SQLite FULL both sides): {d:,.0f}/s  (n={n})")
    asks = raw_thespian_asks(2000)
    print(f"raw Thespian ask round trips:                        {asks:,.0f}/s  -> reprise/raw = {d / asks:.1f}x")
    print(f"RabbitMQ via pika:                                   {rabbitmq(n)}")
    p, pa = persist_rates(5000)
    print(f"persist, one event per command:                      {p:,.0f} events/s")
    print(f"persist_async, one event per command:                {pa:,.0f} events/s")


if __name__ == "__main__":
    main()

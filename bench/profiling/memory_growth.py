"""What long-lived actors keep per message and per origin, on a real system (the memory audit).

A DurableDelivery feeder delivers N messages, round-robin over D IdempotentReceiver sinks, in chunks (each chunk
confirmed before the next); each sink then reports the dedup state it keeps (origins, ranges above the watermark),
its process's RSS and its IdempotentSnapshot's encoded size; the feeder reports its unconfirmed deliveries.

    PYTHONPATH=<tree> python bench/profiling/memory_growth.py [base] [N] [D] [origins] [settle_after_gaps|None]
"""

from __future__ import annotations

import resource
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import Any

import actors
from journal import register_type
from journal.serialization import serialize
from persistence import DurableDelivery, IdempotentReceiver


@register_type(manifest="bench.memory_growth.Parcel")
@dataclass(frozen=True)
class Parcel:
    """Feeder -> sink: delivery `delivery_id` of the feeder's."""

    delivery_id: int


class Feeder(DurableDelivery):
    """("send", sinks, n): delivers n Parcels round-robin over `sinks`, replying "sent" once journaled;
    "unconfirmed": how many are unconfirmed."""

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "unconfirmed":
            self.tell(sender, self.number_of_unconfirmed)
        elif isinstance(message, tuple) and message[0] == "send":
            _, sinks, n = message
            for k in range(n):
                self.deliver(sinks[k % len(sinks)], Parcel)
            self.defer_async("sent", lambda e: self.tell(sender, e))


class Sink(IdempotentReceiver):
    """Applies each Parcel once per (sender, delivery id); "mem": (origins, ranges, RSS MiB, snapshot bytes)."""

    def __init__(self, settle_after_gaps: int | None = 64) -> None:
        self.settle_after_gaps = settle_after_gaps

    def receive_recover(self, event: Any) -> None:
        pass

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "mem":
            ranges = sum(s.range_count for s in self._seen.values())
            snap = serialize(self.mixin_wrap_snapshot(None))
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            self.tell(sender, (len(self._seen), ranges, round(rss, 1), len(snap)))
        elif isinstance(message, Parcel) and sender is not None:
            self.apply_and_confirm(sender, message.delivery_id, None, lambda e: None)


def run(base: str, n: int, sinks: int, origins: int, settle: int | None = 64, chunk: int = 5_000) -> None:
    """Feed n messages from `origins` feeders over `sinks` sinks; print what the sinks keep after each step."""
    tmp = tempfile.mkdtemp()
    kwargs: dict[str, Any] = {"journal": f"sqlite:///{tmp}/j.db", "snapshot_store": f"sqlite:///{tmp}/s.db"}
    if base == "multiproc":
        kwargs["run_dir"] = f"{tmp}/run"
    with actors.start(base, **kwargs) as system:
        system.spawn(Feeder, "/user/feeder", entities=True)
        system.spawn(Sink, "/user/sink", entities=True, kwargs={"settle_after_gaps": settle})
        paths = [f"/user/sink/{k}" for k in range(sinks)]
        feeders = [f"/user/feeder/{k}" for k in range(origins)]
        sent, t0 = 0, time.time()
        step = max(chunk, n // 5)
        while sent < n:
            for feeder in feeders:
                assert system.ask(feeder, ("send", paths, chunk // len(feeders) or 1), timeout=120) == "sent"
            sent += chunk
            for feeder in feeders:
                while system.ask(feeder, "unconfirmed", timeout=60):
                    time.sleep(0.05)
            if sent % step == 0 or sent >= n:
                mem = [system.ask(p, "mem", timeout=60) for p in paths]
                print(f"{sent:>9} msgs {time.time() - t0:6.1f}s  per sink (origins, ranges, RSS MiB, snapshot B):"
                      f" {mem[0]}", flush=True)


if __name__ == "__main__":
    args = sys.argv[1:]
    run(args[0] if args else "multiproc", int(args[1]) if len(args) > 1 else 100_000,
        int(args[2]) if len(args) > 2 else 2, int(args[3]) if len(args) > 3 else 1,
        None if len(args) > 4 and args[4] == "None" else int(args[4]) if len(args) > 4 else 64)

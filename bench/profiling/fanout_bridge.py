"""PROFILE.md §30: a SparkBridge whose fan-out window and chunk come from $WIN and $CHUNK, and which logs every
fan-out turn and command to $FANLOG (time, seconds, unconfirmed before and after, the journal's sequence nr, or
the command's type; for a Confirmed, its lowest and highest id and how many; for the rows a turn sends (D), their
lowest and highest id and how many; L: a stored batch read back). A module of its own: the bridge's host process imports it (feed_shards.py spawns it)."""

import os
import time
from typing import Any

from spark_bridge import Row, SparkBridge
from tests.spark_bridge.sample import TableAccounts

LOG = os.environ.get("FANLOG")


class LoggingBridge(SparkBridge):
    fan_out_window = int(os.environ.get("WIN", "20000"))
    fan_out_chunk = int(os.environ.get("CHUNK", "4000"))

    def _fan_out(self) -> None:
        if not LOG:
            return super()._fan_out()
        t, before = time.monotonic(), self.number_of_unconfirmed
        super()._fan_out()
        with open(LOG, "a") as f:
            f.write(f"F {t:.6f} {time.monotonic() - t:.6f} {before} {self.number_of_unconfirmed} "
                    f"{self.last_sequence_nr}\n")
        return None

    def _load(self, seq: int) -> Any:
        if LOG:
            with open(LOG, "a") as f:
                f.write(f"L {time.monotonic():.6f} {seq}\n")
        return super()._load(seq)

    def _deliver_rows(self, out: Any, low: int) -> None:
        if LOG and out.ids:
            with open(LOG, "a") as f:
                f.write(f"D {time.monotonic():.6f} {min(out.ids)} {max(out.ids)} {len(out.ids)}\n")
        super()._deliver_rows(out, low)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if not LOG:
            return super().receive_command(message, sender)
        t, before = time.monotonic(), self.number_of_unconfirmed
        super().receive_command(message, sender)
        with open(LOG, "a") as f:
            ids = getattr(message, "delivery_ids", None) if type(message).__name__ == "Confirmed" else None
            span = f" {min(ids)} {max(ids)} {len(ids)}" if ids else ""
            f.write(f"R {t:.6f} {time.monotonic() - t:.6f} {before} {self.number_of_unconfirmed} "
                    f"{type(message).__name__}{span}\n")
        return None


class LoggingTable(TableAccounts):
    """TableAccounts that logs to $FANLOG every batch it is handed (H: time, rows, highest row id) and every
    confirmation of a durable commit's rows (C: time, rows, highest id), with its shard's host key."""

    def receive_entities(self, messages: list[tuple[str, Any, str | None]]) -> None:
        if LOG:
            ids = [m.delivery_id for _, m, _ in messages if type(m) is Row]
            if ids:
                with open(LOG, "a") as f:
                    f.write(f"H {time.monotonic():.6f} {len(ids)} {max(ids)} {self.context.key.replace(' ', '_')}\n")
        super().receive_entities(messages)

    def _confirm_rows(self, rows: list[Row]) -> None:
        if LOG and rows:
            with open(LOG, "a") as f:
                f.write(f"C {time.monotonic():.6f} {len(rows)} {max(r.delivery_id for r in rows)} "
                        f"{self.context.key.replace(' ', '_')}\n")
        super()._confirm_rows(rows)


if LOG and os.environ.get("INFLIGHT_LOG"):
    # Every batch a process hands to Thespian (S: time, address, batches queued for it) and its ACK (A): where a
    # batch waits between the sender's send and the receiver (PROFILE.md §30).
    from actors import inflight as _inflight

    _send, _landed = _inflight.InFlight.send, _inflight.InFlight._landed

    def _logged_send(self: Any, address: Any, message: object) -> None:
        _send(self, address, message)
        with open(f"{LOG}.{os.getpid()}", "a") as f:
            f.write(f"S {time.monotonic():.6f} {address} {len(self._queues.get(str(address), ()))}\n")

    def _logged_landed(self: Any, result: object, intent: Any) -> None:
        with open(f"{LOG}.{os.getpid()}", "a") as f:
            f.write(f"A {time.monotonic():.6f} {intent.targetAddr}\n")
        _landed(self, result, intent)

    _inflight.InFlight.send = _logged_send  # type: ignore[method-assign]
    _inflight.InFlight._landed = _logged_landed  # type: ignore[method-assign]

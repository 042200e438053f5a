"""PROFILE.md §30: a SparkBridge whose fan-out window and chunk come from $WIN and $CHUNK, and which logs every
fan-out turn and command to $FANLOG (time, seconds, unconfirmed before and after, the journal's sequence nr, or
the command's type; for a Confirmed, its lowest and highest id and how many; for the rows a turn sends (D), their
lowest and highest id and how many; L: a stored batch read back). A module of its own: the bridge's host process imports it (feed_shards.py spawns it)."""

import os
import time
from typing import Any

from spark_bridge import SparkBridge

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

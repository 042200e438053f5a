"""PROFILE.md §30: a SparkBridge whose fan-out window and chunk come from $WIN and $CHUNK, and which logs every
fan-out turn and command to $FANLOG (time, seconds, unconfirmed before and after, the journal's sequence nr, or
the command's type). A module of its own: the bridge's host process imports it (feed_shards.py spawns it)."""

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

    def receive_command(self, message: Any, sender: str | None) -> None:
        if not LOG:
            return super().receive_command(message, sender)
        t, before = time.monotonic(), self.number_of_unconfirmed
        super().receive_command(message, sender)
        with open(LOG, "a") as f:
            f.write(f"R {t:.6f} {time.monotonic() - t:.6f} {before} {self.number_of_unconfirmed} "
                    f"{type(message).__name__}\n")
        return None

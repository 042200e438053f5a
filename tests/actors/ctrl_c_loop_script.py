"""A user's script for tests/actors/test_ctrl_c.py: `rounds` times, a multiproc system in a `with` block whose client
tells and asks an echo actor in a tight loop until Ctrl-C. Prints "ready <n>" once looping, and after the block's
shutdown "shutdown <n> <seconds from the Ctrl-C to the block's end> <warnings that processes were killed>"."""

from __future__ import annotations

import logging
import os
import sys
import time

import actors
from tests.actors.sample import Echo, Ping


class Kills(logging.Handler):
    """Counts reprise.system's warnings that a shutdown killed processes (it waited its timeout, or was broken)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.count = 0

    def emit(self, record: logging.LogRecord) -> None:
        if "killed" in record.getMessage():
            self.count += 1


def main(tag: str, run_dir: str, rounds: int) -> None:
    """Run `rounds` interrupted with blocks, one after the other."""
    kills = Kills()
    logging.getLogger("reprise.system").addHandler(kills)
    for n in range(rounds):
        interrupted = 0.0
        try:
            with actors.start("multiproc", tag=f"{tag}-{n}", run_dir=os.path.join(run_dir, str(n))) as system:
                system.spawn(Echo, "/user/echo")
                print(f"ready {n}", flush=True)
                try:
                    k = 0
                    while True:
                        system.tell("/user/echo", Ping(k))
                        system.ask("/user/echo", Ping(k), timeout=30)
                        k += 1
                except KeyboardInterrupt:
                    interrupted = time.monotonic()
                    raise
        except KeyboardInterrupt:
            print(f"shutdown {n} {time.monotonic() - interrupted:.2f} {kills.count}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2], int(sys.argv[3]))

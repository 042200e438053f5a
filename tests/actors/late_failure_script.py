"""A client for tests/actors/test_send_timeout.py, run with a short THESPIAN_TRANSMIT_TIMEOUT_PERIOD: attaches to the
system on `port`, tells /user/stuck (a stopped host) until SendTimeout, then asks /user/echo until its log warns that
the timed-out message was given up (at most 30 s). Prints "timed out <may_be_delivered>", then "warned <message>" or
"no warning"."""

from __future__ import annotations

import logging
import sys
import time

import actors
from tests.actors.sample import Ping


class Warnings(logging.Handler):
    """Keeps reprise.system's warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


def main(port: int) -> None:
    """Attach, time a tell out, and wait (asking) for the warning."""
    warnings = Warnings()
    logging.getLogger("reprise.system").addHandler(warnings)
    system = actors.connect(port)
    try:
        try:
            system.tell_many([("/user/stuck", Ping(7))], limit=0.5)
            print("sent", flush=True)
            return
        except actors.SendTimeout as exc:
            print(f"timed out {exc.may_be_delivered}", flush=True)
        deadline = time.monotonic() + 30
        k = 0
        while time.monotonic() < deadline:
            system.ask("/user/echo", Ping(k), timeout=10)
            k += 1
            given_up = [m for m in warnings.messages if "SendTimeout" in m]
            if given_up:
                print("warned", given_up[0], flush=True)
                return
        print("no warning", flush=True)
    finally:
        system.close()


if __name__ == "__main__":
    main(int(sys.argv[1]))

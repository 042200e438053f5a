"""Asks handled twice around a SIGKILL (README, Guarantees, the `tell` row): ROUNDS times, SIGKILL the host of
/user/echo right after it answered, then ask it again through /user/relay. Each handled ask is appended to
LOG by the process that handled it; an ask number that appears twice was handled by a killed process and
again by its successor.

Before actors/thespian_fixes.py fix 6: 5 of ~12,400 asks (2026-11-30, tests/spark_bridge running beside it
on this 2-core VM; none in ~1,300 without that load). The guardian, every host's parent, learned of the
host's exit before it read the ACK of a batch the host had handled, Thespian ended that transmit as
DeadTarget, and the guardian rerouted the batch to the host's next process.

    PYTHONPATH=$PWD python bench/profiling/kill_after_reply.py 1500 /tmp/handled.log
"""

import collections
import os
import signal
import sys
import tempfile
import time

import actors

LOG = os.environ.get("KILL_AFTER_REPLY_LOG", "")


class Echo(actors.Actor):
    """Answers ("where", n) with (n, pid) after appending "n pid" to LOG; forwards ("fwd", path, message)."""

    def receive(self, message, sender):
        if message[0] == "where":
            with open(LOG, "a") as f:
                f.write(f"{message[1]} {os.getpid()}\n")
            self.tell(sender, (message[1], os.getpid()))
        elif message[0] == "fwd":
            self.tell(message[1], message[2], sender=sender)


def main(rounds: int) -> None:
    """Kill, ask until a new process answers, `rounds` times; print the asks handled twice."""
    with tempfile.TemporaryDirectory() as tmp, actors.start("multiproc", run_dir=tmp) as system:
        system.spawn(Echo, "/user/echo", backoff=(0.01, 0.05, 0.2))
        system.spawn(Echo, "/user/relay")
        probe = system.probe()
        pid = 0
        while not pid:
            host = system.status().hosts["/user/echo"]
            pid = host.pid if host.state == "running" else 0
            time.sleep(0.01)
        asked = 0
        for _ in range(rounds):
            os.kill(pid, signal.SIGKILL)
            while True:
                asked += 1
                probe.tell("/user/relay", ("fwd", "/user/echo", ("where", asked)))
                while (answer := probe.receive(30))[0] != asked:
                    pass
                if answer[1] != pid:
                    pid = answer[1]
                    break
    handled = collections.Counter(int(line.split()[0]) for line in open(LOG))
    twice = {n: c for n, c in handled.items() if c > 1}
    print(f"{asked} asks across {rounds} SIGKILLs; handled twice: {len(twice)} {sorted(twice)[:10]}")


if __name__ == "__main__":
    os.environ["KILL_AFTER_REPLY_LOG"] = LOG = sys.argv[2]
    open(LOG, "w").close()
    main(int(sys.argv[1]))

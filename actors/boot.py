"""Starts a multi-process admin in a clean child process, so that it never inherits the caller's threads.

Run as `python -m actors.boot --port N --tag TAG --run-dir DIR` by `actors.start`, which writes the
pickled configuration and the system's secret to its stdin. Thespian's admin double-forks and outlives
this process; every admin and actor process keeps this command line, so the tag in it identifies every
process of one actor system (used by the leak checks) and `--run-dir` tells clients where the secret
file is. Nothing secret is on it: any user can read a command line (journal URLs may hold passwords).
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import pickle
import sys
from typing import Required, TypedDict

from . import auth, netsec, thespian_fixes, tls
from .supervision import WATCH_PARENT_ENV, exit_logger_when_orphaned

GC_THRESHOLDS = (100_000, 20, 20)


class BootConfig(TypedDict, total=False):
    """The keys of the system configuration (written by `actors.start`) that booting reads; it has more."""

    run_dir: Required[str]
    tls: dict[str, str] | None  # TlsConfig's fields: cert, key, ca (PEM file paths)
    node: str | None
    leader: str | None  # a member's convention leader "host:port" (None: this admin leads)
    log_level: str
    metrics_port: int | None  # this node's Prometheus endpoint (None: none)
    metrics_host: str
    node_timeout: float  # seconds without heartbeat answers after which the guardian declares a node down


def log_defs(run_dir: str, level: str) -> dict[str, object]:
    """Thespian logging configuration: actors' records go to `run_dir/actors.log`."""
    return {
        "version": 1,
        "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
        "handlers": {"file": {"class": "logging.FileHandler", "filename": os.path.join(run_dir, "actors.log"),
                              "formatter": "plain", "level": level}},
        "root": {"handlers": ["file"], "level": level},
    }


def read_boot_input() -> tuple[BootConfig, bytes | None]:
    """The (configuration, secret) `actors.start` wrote to stdin; stdin then becomes /dev/null."""
    payload = sys.stdin.buffer.read()
    # The admin and every actor process would otherwise inherit the (drained) pipe.
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.close(devnull)
    config, secret = pickle.loads(payload)
    return config, secret


def main(argv: list[str] | None = None) -> int:
    """Start the admin, the guardian (leader) and the node agent, then exit leaving them running."""
    parser = argparse.ArgumentParser(prog="python -m actors.boot")
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--tag", required=True)
    parser.add_argument("--run-dir", required=True, help="the system's run dir (holds its secret file)")
    args = parser.parse_args(argv)
    config, secret = read_boot_input()
    if secret is None:
        auth.allow_unauthenticated()  # benchmarks only (start(insecure_no_auth=True))
    else:
        auth.use_secret(secret)  # before the ActorSystem: the admin and every actor fork from here
    # Likewise TLS: every transport of the admin and its actors is created after this.
    tls_files = config.get("tls")
    tls.use(tls.TlsConfig(**tls_files) if tls_files else None)
    netsec.apply()
    thespian_fixes.apply()
    thespian_fixes.retry_reset_connections_at_once()
    # Every actor process forks from this one: each then exits when its parent dies (supervision.ParentWatch).
    os.environ[WATCH_PARENT_ENV] = "1"
    exit_logger_when_orphaned()
    # Host processes keep many long-lived objects (entities, their state) and allocate a few dozen per
    # message: at Python's default (700, 10, 10) the collector rescanned them so often that it took ~17%
    # of a host's CPU (the demo's feed ran ~10% faster with these). Every actor process forks from this one.
    # Gen0 at 100,000, not 20,000: a group commit's objects (~10 per message, 2,000 messages a round) live
    # until its handlers ran, so at 20,000 nearly every round ran a collection that found them all alive
    # (~1.4 µs per message, 9% of an entity host: bench/PROFILE.md §16).
    gc.set_threshold(*GC_THRESHOLDS)

    from thespian.actors import ActorSystem

    from .guardian import NODE_TIMEOUT, GuardianInit, SetGuardian
    from .messages import GuardianIs, NodeRefused, Spawned

    capabilities = {"Admin Port": args.port, "Reprise Node": config.get("node") or "leader"}
    leader = config.get("leader")
    if leader:
        capabilities["Convention Address.IPv4"] = leader
    else:
        capabilities["Reprise Leader"] = True
    asys = ActorSystem("multiprocTCPBase", capabilities,
                       logDefs=log_defs(config["run_dir"], config.get("log_level", "WARNING")),
                       transientUnique=True)
    timeout = 30
    guardian = asys.createActor("actors.guardian.Guardian", globalName="reprise-guardian")
    if not leader:
        reply = asys.ask(guardian, GuardianInit(config), timeout)
        if not isinstance(reply, Spawned):
            print(f"guardian did not start: {reply!r}", file=sys.stderr)
            return 2
    agent = asys.createActor("actors.guardian.NodeAgent", globalName="reprise-node")
    # A member's agent registers its node with the guardian (heartbeats, failover) before boot returns.
    node_timeout = config.get("node_timeout")
    reply = asys.ask(agent, SetGuardian(guardian, str(capabilities["Reprise Node"]) if leader else None,
                                        node_timeout if isinstance(node_timeout, float) else NODE_TIMEOUT,
                                        os.path.join(config["run_dir"], "actors.log")), timeout)
    if isinstance(reply, NodeRefused):
        print(f"NodeRefused: {reply.why}", file=sys.stderr)
        return 2
    if not isinstance(reply, GuardianIs):
        print(f"node agent did not start: {reply!r}", file=sys.stderr)
        return 2
    if leader:
        # A member's own dead letters go to its agent, which forwards them to the guardian.
        asys.ask(agent, "handle-dead-letters", timeout)
    metrics_port = config.get("metrics_port")
    if metrics_port is not None:
        from .metrics import DEFAULT_HOST, MetricsInit, MetricsReady

        node = config.get("node") or "leader"
        server = asys.createActor("actors.metrics.MetricsServer", globalName="reprise-metrics",
                                  targetActorRequirements={"Reprise Node": node})
        ready = asys.ask(server, MetricsInit(guardian, metrics_port, config.get("metrics_host") or DEFAULT_HOST,
                                             node, not leader), timeout)
        if not isinstance(ready, MetricsReady) or ready.error:
            print(f"the metrics endpoint did not start: {ready.error if isinstance(ready, MetricsReady) else ready!r}",
                  file=sys.stderr)
            return 2
    print("ready", flush=True)
    return 0


if __name__ == "__main__":
    logging.basicConfig(level=logging.WARNING)
    sys.exit(main())

"""The live system of one history: start/stop/restart, its processes, and the ledger of what was acknowledged."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import actors
from actors.system import kill_tagged, tagged_pids
from journal.errors import JournalError
from tests.torture.actors import FED, FEEDER, SINKS, STORES, FedSink, Feeder, Sink, Store, Unconfirmed

# Errors that name what went wrong on purpose (anything else reaching a user is an unclear error).
STORE_BACKOFF: tuple[float, float, float] | None = None
"""The stores' host's backoff (min, max, random_factor); None: the default (0.2 s doubling up to 10 s)."""
CLEAR_ERRORS: tuple[type[BaseException], ...] = (actors.RepriseError, JournalError)


@dataclass
class Ledger:
    """What the client was told is durable (acknowledged) and what it merely sent."""

    puts: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))  # store id -> acked values
    sent_puts: dict[str, list[int]] = field(default_factory=lambda: defaultdict(list))  # store id -> every value sent
    items: set[tuple[str, int]] = field(default_factory=set)  # (stream, n) acked by the feeder
    sent_items: set[tuple[str, int]] = field(default_factory=set)
    fed: set[int] = field(default_factory=set)  # txids of feeds that returned (ack="processed")
    sent_fed: set[int] = field(default_factory=set)
    feed_txids: dict[str, tuple[int, ...]] = field(default_factory=dict)  # feed id -> its txids (for reruns)


class _LeftoverLog(logging.Handler):
    """Catches System.shutdown's warning that it had to kill processes the system left behind."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if "left processes" in message:
            self.records.append(message)


class World:
    """One history's actor system on one journal, restartable, with everything needed to check it afterwards."""

    SINKS = 3

    def __init__(self, journal: str, workdir: str, token: str, seed: int, pg_url: str | None = None,
                 spark: Any = None) -> None:
        self.kind = journal
        self.workdir = workdir
        self.token = token
        self.seed = seed
        self.spark = spark
        os.makedirs(workdir, exist_ok=True)
        if journal == "sqlite":
            self.db_path = os.path.join(workdir, "journal.db")
            self.url = f"sqlite:///{self.db_path}"
            self.app = None
        else:
            assert pg_url, "a PostgreSQL history needs the server's URL"
            self.db_path = None
            self.schema = f"torture_{seed}_{uuid.uuid4().hex[:6]}"
            self.app = self.schema  # our backends carry it, so only they are terminated
            sep = "&" if "?" in pg_url else "?"
            self.url = f"{pg_url}{sep}schema={self.schema}&application_name={self.app}"
            self.pg_url = pg_url
        self.system: actors.System | None = None
        self.tags: list[str] = []
        self.ledger = Ledger()
        self.ops: list[str] = []
        self.unclear: list[str] = []  # failures that were not a clear error (or bad input accepted silently)
        self.findings: list[str] = []  # other observations (CLI failures, orphans, ...)
        self.leftovers: list[str] = []
        self.raised: dict[str, set[int]] = defaultdict(set)  # store id -> values whose tell raised
        self.gave_up: list[str] = []  # hosts the guardian stopped restarting
        self.orphans = 0  # processes still running 5 s after their admin was SIGKILLed (killed by the harness)
        self.next_value = 1
        self.next_item = 0
        self.next_txid = 1
        self.stores: set[str] = set()
        self._starts = 0
        self._leftover_log = _LeftoverLog()
        logging.getLogger("reprise.system").addHandler(self._leftover_log)

    # ---- lifecycle -------------------------------------------------------------------------------
    def start(self) -> actors.System:
        """Start a fresh system on the history's journal and spawn the history's actors."""
        self._starts += 1
        tag = f"{self.token}-h{self.seed}-s{self._starts}-"
        self.tags.append(tag)
        system = actors.start("multiproc", tag=tag, run_dir=os.path.join(self.workdir, f"run-{self._starts}"),
                              journal=self.url, snapshot_store=self.url)
        self.system = system
        if STORE_BACKOFF is None:
            system.spawn(Store, STORES, entities=True)
        else:
            system.spawn(Store, STORES, entities=True, backoff=STORE_BACKOFF)
        system.spawn(Feeder, FEEDER)
        system.spawn(Sink, SINKS, entities=True)
        if self.spark is not None:
            from spark_bridge import start_bridge
            system.spawn(FedSink, FED, entities=True)
            start_bridge(system)
        return system

    def stop(self) -> None:
        """`down`: shut the system down; processes it leaves behind are recorded (and killed)."""
        system, self.system = self.system, None
        if system is None:
            return
        before = len(self._leftover_log.records)
        try:
            system.shutdown()
        except Exception as exc:  # noqa: BLE001 - the harness records, it does not crash
            self.note_error("shutdown", exc)
        for message in self._leftover_log.records[before:]:
            self.leftovers.append(f"shutdown: {message}")
        left = tagged_pids(system.tag) if system.tag else []
        if left:
            self.leftovers.append(f"after shutdown of {system.tag}: {left}")
            kill_tagged(system.tag)

    def restart(self) -> actors.System:
        """`down` then `up` on the same journal."""
        self.stop()
        return self.start()

    def crash_recover(self) -> actors.System:
        """After the admin died: wait (bounded) for the system's processes to end, kill the rest, start anew."""
        system, self.system = self.system, None
        if system is not None and system.tag:
            deadline = time.monotonic() + 5.0
            while tagged_pids(system.tag) and time.monotonic() < deadline:
                time.sleep(0.1)
            orphans = kill_tagged(system.tag)
            if orphans:
                self.orphans += len(orphans)
                self.findings.append(f"{len(orphans)} processes outlived their SIGKILLed admin for 5 s")
            try:
                system.close()
            except Exception:  # noqa: BLE001 - its admin is gone
                pass
        return self.start()

    def cleanup(self) -> None:
        """Kill whatever of this history still runs (the harness never leaks) and drop its storage."""
        if self.system is not None:
            self.stop()
        for tag in self.tags:
            kill_tagged(tag)
        logging.getLogger("reprise.system").removeHandler(self._leftover_log)
        if self.kind == "postgres":
            try:
                from journal.postgres import drop_schema
                drop_schema(self.url)
            except Exception as exc:  # noqa: BLE001
                self.findings.append(f"could not drop schema {self.schema}: {exc}")
        if self.leftovers:  # its run dirs hold the actor logs that explain why processes were left
            self.findings.append(f"kept {self.workdir} (actor logs in its run dirs)")
        else:
            shutil.rmtree(self.workdir, ignore_errors=True)

    # ---- processes -------------------------------------------------------------------------------
    def host_pid(self, path: str) -> int | None:
        """The pid of the host process serving `path`, or None if the system does not say."""
        try:
            info = self.system.status(timeout=10).hosts.get(path)
        except Exception as exc:  # noqa: BLE001
            self.note_error(f"status for {path}", exc)
            return None
        return info.pid if info is not None and info.pid else None  # (None while the host has no process)

    def admin_pid(self) -> int | None:
        """The admin: the tagged process whose parent is not one of the system's processes."""
        tag = self.system.tag
        pids = set(tagged_pids(tag))
        for pid in pids:
            try:
                with open(f"/proc/{pid}/stat") as f:
                    ppid = int(f.read().split(")")[-1].split()[1])
            except OSError:
                continue
            if ppid not in pids:
                return pid
        return None

    def sigkill(self, pid: int) -> None:
        """SIGKILL one process (gone already is fine)."""
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass

    # ---- observing -------------------------------------------------------------------------------
    def unconfirmed(self) -> int | None:
        """The feeder's unconfirmed deliveries, or None when it does not answer."""
        try:
            reply = self.system.ask(FEEDER, "unconfirmed", timeout=3)
        except actors.AskTimeout:
            return None
        return reply.count if isinstance(reply, Unconfirmed) else None

    def note_error(self, what: str, exc: BaseException) -> None:
        """Record an exception an operation got: fine when it is a clear error, a finding otherwise."""
        if not is_clear(exc):
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [""]
            text = lines[0][:160] + (f" ... {lines[-1][:160]}" if len(lines) > 1 else "")  # e.g. a worker's traceback
            self.unclear.append(f"{what}: {type(exc).__module__}.{type(exc).__name__}: {text}")


def is_clear(exc: BaseException) -> bool:
    """A clear error: one of the project's errors (or a builtin ValueError/TimeoutError/...) with a message."""
    if not str(exc).strip():
        return False
    return isinstance(exc, CLEAR_ERRORS + (ValueError, TypeError, TimeoutError, ConnectionError))

"""PersistentActorSpec and SnapshotSpec behaviours (reference §4.5, §4.6) in one persistent actor class.

One entity host serves every case: the entity id `<kind>-<n>[~flag...]` picks the behaviour. The part
before the first `~` is the persistence id, so `b3-7~b1` (Akka's Behavior1 fixture) and `b3-7` (the case's
actor) share one journal stream, as Akka's cases share the test name. Everything the actor reports goes to
the probe named after that persistence id, which is also the sender of the test's commands. Flags:
behaviour overrides (`b1`, `ls` = SnapshotSpec's loader), recovery (`toN`, `critN`, `nosnap`, `none`,
`rmaxN`), `async` (the persist_async/defer_async variant of a case), `watch` (report post_stop).
"""

from __future__ import annotations

import itertools
import time
from dataclasses import dataclass
from typing import Any

from journal import MAX_SEQUENCE_NR, JournalError, SnapshotMetadata, SnapshotSelectionCriteria, open_journal
from journal import open_snapshot_store as _open_store
from persistence import (
    DeleteMessagesFailure,
    DeleteMessagesSuccess,
    DeleteSnapshotFailure,
    DeleteSnapshotsFailure,
    DeleteSnapshotsSuccess,
    DeleteSnapshotSuccess,
    PersistentActor,
    Recovery,
    RecoveryCompleted,
    ReplyToStrategy,
    SaveSnapshotFailure,
    SaveSnapshotSuccess,
    SnapshotOffer,
    register_scheme,
)
from persistence.plugins import NO_SNAPSHOT_STORE

# ---- messages ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Cmd:
    data: Any


@dataclass(frozen=True)
class Delete:
    to_sequence_nr: int


@dataclass(frozen=True)
class Report:
    """Something the actor tells its probe about itself (hook calls, lifecycle)."""

    what: str
    detail: Any = None


class TestError(RuntimeError):
    """Akka's TestException: an expected failure thrown by a test actor."""


# ---- fault-injecting plugins around the real SQLite ones -------------------------------------------


class CorruptingSnapshotStore:
    """Akka's FailingLocalSnapshotStore around a real store: snapshots at seq nr 2 or mentioning "boom" are
    stored as garbage (they fail their checksum when loaded), and deletes fail."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def save(self, metadata: SnapshotMetadata, snapshot: Any) -> SnapshotMetadata:
        if metadata.sequence_nr == 2 or "boom" in repr(snapshot):
            md = SnapshotMetadata(metadata.persistence_id, metadata.sequence_nr, int(time.time() * 1000))
            self.inner._save(md, b"garbage", 0)
            return md
        return self.inner.save(metadata, snapshot)

    def load(self, persistence_id: str, criteria: SnapshotSelectionCriteria) -> Any:
        return self.inner.load(persistence_id, criteria)

    def delete(self, metadata: SnapshotMetadata) -> None:
        raise JournalError(f"Failed to delete snapshot {metadata.sequence_nr} (simulated)")

    def delete_matching(self, persistence_id: str, criteria: SnapshotSelectionCriteria) -> None:
        raise JournalError("Failed to delete snapshots (simulated)")

    def close(self) -> None:
        self.inner.close()


class SlowReplayJournal:
    """A real journal whose replay stalls before each event whose payload mentions "slow"."""

    delay = 0.6

    def __init__(self, inner: Any) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def replay_messages(self, persistence_id, from_sequence_nr=1, to_sequence_nr=MAX_SEQUENCE_NR,
                        max=MAX_SEQUENCE_NR):  # noqa: A002
        for r in self.inner.replay_messages(persistence_id, from_sequence_nr, to_sequence_nr, max):
            if "slow" in repr(r.payload):
                time.sleep(self.delay)
            yield r


class RecordingJournal(SlowReplayJournal):
    """A real journal that records, per persistence id, the AtomicWrite sizes of every write_messages call."""

    writes: dict[str, list[list[int]]] = {}

    def replay_messages(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.replay_messages(*args, **kwargs)

    def write_messages(self, messages: Any) -> Any:
        calls: dict[str, list[int]] = {}
        for aw in messages:
            calls.setdefault(aw.persistence_id, []).append(len(aw.payload))
        for pid, sizes in calls.items():
            self.writes.setdefault(pid, []).append(sizes)
        return self.inner.write_messages(messages)


class FailingDeleteJournal(SlowReplayJournal):
    """EventSourcedActorDeleteFailureSpec's journal: deletes always fail."""

    def replay_messages(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner.replay_messages(*args, **kwargs)

    def delete_messages_to(self, persistence_id: str, to_sequence_nr: int) -> None:
        raise JournalError("Boom! Unable to delete events!")


register_scheme("faildelete", journal=lambda url: FailingDeleteJournal(open_journal("sqlite://" + url.partition("://")[2])))
register_scheme("recording", journal=lambda url: RecordingJournal(open_journal("sqlite://" + url.partition("://")[2])))
register_scheme("corruptsnap", snapshot_store=lambda url: CorruptingSnapshotStore(
    _open_store("sqlite://" + url.partition("://")[2])))
register_scheme("nostore", snapshot_store=lambda url: NO_SNAPSHOT_STORE)
register_scheme("slowreplay", journal=lambda url: SlowReplayJournal(open_journal("sqlite://" + url.partition("://")[2])))


RC_FAILURES: dict[str, int] = {}  # per process: how often an rcthrow actor's RecoveryCompleted handler ran

# ---- the actor -----------------------------------------------------------------------------------


class Spec(PersistentActor):
    """PersistentActorSpec's example actors; `client` is the test client's path prefix (for probes)."""

    def __init__(self, client: str) -> None:
        self.client = client

    # ---- identity, plugins and recovery from the entity id ------------------------------------------
    @property
    def name(self) -> str:
        return self.entity_id.split("~")[0]

    @property
    def flags(self) -> list[str]:
        return self.entity_id.split("~")[1:]

    @property
    def kind(self) -> str:
        return self.name.split("-")[0]

    @property
    def probe(self) -> str:
        return f"{self.client}/{self.name}"

    @property
    def persistence_id(self) -> Any:
        return {"nullpid": None, "emptypid": "  ", "intpid": 42}.get(self.kind, self.name)

    @property
    def journal_url(self) -> str | None:
        if self.kind == "slow":
            return "slowreplay://" + self.config["journal"].partition("://")[2] + ".slow"
        if self.kind == "delfail":
            return "faildelete://" + self.config["journal"].partition("://")[2] + ".delfail"
        if self.kind == "proto":
            return "recording://" + self.config["journal"].partition("://")[2] + ".rec"
        return None

    @property
    def snapshot_store_url(self) -> str | None:
        if self.kind in ("sf", "so"):
            return "corruptsnap://" + self.config["snapshot_store"].partition("://")[2] + ".corrupt"
        if self.kind == "nostore":
            return "nostore://"
        return None

    @property
    def snapshot_is_optional(self) -> bool:
        return self.kind == "so"

    @property
    def recovery_event_timeout(self) -> float:
        return 0.2 if self.kind == "slow" else 30.0

    @property
    def stash_capacity(self) -> int | None:
        return 10 if self.kind == "bounded" else None

    @property
    def internal_stash_overflow_strategy(self) -> Any:
        if "drop" in self.flags:
            return "drop"
        return ReplyToStrategy("RejectToStash") if "reply" in self.flags else None

    @property
    def recovery(self) -> Recovery:
        crit, to, rmax = SnapshotSelectionCriteria.LATEST, MAX_SEQUENCE_NR, MAX_SEQUENCE_NR
        for f in self.flags:
            if f == "none":
                return Recovery.none()
            if f == "nosnap":
                crit = SnapshotSelectionCriteria.NONE
            elif f.startswith("crit"):
                crit = SnapshotSelectionCriteria(max_sequence_nr=int(f[4:]))
            elif f.startswith("to"):
                to = int(f[2:])
            elif f.startswith("rmax"):
                rmax = int(f[4:])
        return Recovery(crit, to, rmax)

    def _behaviour_name(self) -> str:
        for f in self.flags:
            if f in ("b1", "ls", "snap"):
                return f
        return self.kind

    # ---- lifecycle ------------------------------------------------------------------------------
    def pre_start(self) -> None:
        self.state: list = []
        self.counter = 0
        self.asked: str | None = None
        self.replayed_asks = 0
        name = self._behaviour_name()
        self.behaviour = getattr(self, f"cmd_{name}", self.cmd_b1)
        self.recover = getattr(self, f"recover_{name}", self.recover_default)
        self.stack: list = []

    def pre_restart(self, error: BaseException, message: Any) -> None:
        if self.kind == "restartmsg":
            self.tell(self.probe, f"failed with {type(error).__name__} while processing {message}")

    def post_stop(self) -> None:
        if "watch" in self.flags:
            self.tell(self.probe, Report("stopped", self.path))

    def on_recovery_failure(self, cause: BaseException, event: Any | None) -> None:
        self.tell(self.probe, Report("recovery failure", (type(cause).__name__, str(cause), event)))

    # ---- helpers --------------------------------------------------------------------------------
    def update(self, event: Any) -> None:
        self.state.append(event)

    def reply(self, event: Any) -> None:
        self.tell(self.sender, event)

    def become(self, behaviour: Any) -> None:
        self.stack.append(self.behaviour)
        self.behaviour = behaviour

    def unbecome(self) -> None:
        self.behaviour = self.stack.pop()

    def _p(self, asynchronous: bool) -> Any:
        return self.persist_async if asynchronous else self.persist

    def _d(self) -> Any:
        return self.defer_async if "async" in self.flags else self.defer

    # ---- the two entry points -----------------------------------------------------------------------
    def receive_recover(self, event: Any) -> None:
        self.recover(event)

    def recover_default(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.state = list(event.snapshot)
        elif isinstance(event, list) and event and event[0] == "asked":
            self.asked = event[1]
            self.replayed_asks += 1
        elif not isinstance(event, RecoveryCompleted):
            self.update(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "state":
            self.tell(sender, tuple(self.state))
        elif message == "seq":
            self.tell(sender, self.last_sequence_nr)
        elif message == "rc-runs":
            self.tell(sender, RC_FAILURES.get(self.name, 0))
        elif message == "asks":
            self.tell(sender, self.replayed_asks)
        elif message == "boom":
            raise TestError("boom")
        elif isinstance(message, Delete):
            self.persist(["asked", sender], lambda e: setattr(self, "asked", e[1]))
            self.delete_messages(message.to_sequence_nr)
        elif isinstance(message, DeleteMessagesSuccess | DeleteMessagesFailure):
            self.tell(self.asked, message)
        else:
            self.behaviour(message, sender)

    # ---- PersistentActorSpec behaviours -----------------------------------------------------------
    def cmd_b1(self, message: Any, sender: str | None) -> None:
        """Behavior1: persistAll(d-1, d-2)."""
        if isinstance(message, Cmd):
            self.persist_all([f"{message.data}-1", f"{message.data}-2"], self.update)

    def cmd_b3(self, message: Any, sender: str | None) -> None:
        """Behavior3: persistAll(d-11, d-12), then apply d-10 directly."""
        if isinstance(message, Cmd):
            self.persist_all([f"{message.data}-11", f"{message.data}-12"], self.update)
            self.update(f"{message.data}-10")

    def cmd_cbfirst(self, message: Any, sender: str | None) -> None:
        """ChangeBehaviorInFirstEventHandler."""
        if isinstance(message, Cmd):
            self.persist(f"{message.data}-0", lambda e: (self.update(e), self.become(self._cb_new)))

    cmd_cblast = cmd_cbfirst

    def _cb_new(self, message: Any, sender: str | None) -> None:
        d = message.data
        if self.kind == "cbfirst":
            self.persist(f"{d}-21", lambda e: (self.update(e), self.unbecome()))
            self.persist(f"{d}-22", self.update)
        else:
            self.persist(f"{d}-21", self.update)
            self.persist(f"{d}-22", lambda e: (self.update(e), self.unbecome()))

    def cmd_cmfirst(self, message: Any, sender: str | None) -> None:
        """ChangeBehaviorInCommandHandlerFirst/Last."""
        if isinstance(message, Cmd):
            if self.kind == "cmfirst":
                self.become(self._cm_new)
            self.persist(f"{message.data}-0", self.update)
            if self.kind == "cmlast":
                self.become(self._cm_new)

    cmd_cmlast = cmd_cmfirst

    def _cm_new(self, message: Any, sender: str | None) -> None:
        d = message.data
        if self.kind == "cmfirst":
            self.unbecome()
        self.persist_all([f"{d}-31", f"{d}-32"], self.update)
        self.update(f"{d}-30")
        if self.kind == "cmlast":
            self.unbecome()

    def cmd_snap(self, message: Any, sender: str | None) -> None:
        """SnapshottingPersistentActor: persistAll(d-41, d-42); "snap" saves the state."""
        if isinstance(message, Cmd):
            self.persist_all([f"{message.data}-41", f"{message.data}-42"], self.update)
        elif message == "snap":
            self.save_snapshot(tuple(self.state))
        elif isinstance(message, SaveSnapshotSuccess):
            self.tell(self.probe, "saved")

    def recover_snap(self, event: Any) -> None:
        if isinstance(event, SnapshotOffer):
            self.tell(self.probe, "offered")
        self.recover_default(event)

    cmd_becoming = cmd_snap

    def recover_becoming(self, event: Any) -> None:
        """SnapshottingBecomingPersistentActor: become while recovering, and tell itself a message."""
        if isinstance(event, SnapshotOffer):
            self.become(self._becoming)
            self.tell(self.path, "It's changing me")
        self.recover_snap(event)

    def _becoming(self, message: Any, sender: str | None) -> None:
        if message == "It's changing me":
            self.tell(self.probe, "I am becoming")
        else:
            self.cmd_snap(message, sender)

    def cmd_rcfinished(self, message: Any, sender: str | None) -> None:
        if isinstance(message, str) and message.startswith("I am"):
            self.tell(self.probe, message)
        else:
            self.cmd_snap(message, sender)

    def recover_rcfinished(self, event: Any) -> None:
        """HandleRecoveryFinishedEventPersistentActor."""
        if isinstance(event, SnapshotOffer):
            self.tell(self.path, "I am the stashed")
            self.recover_snap(event)
        elif isinstance(event, RecoveryCompleted):
            self.tell(self.probe, RecoveryCompleted())
            self.tell(self.path, "I am the recovered")
            self.update("RecoveryCompleted")
        else:
            self.recover_snap(event)

    def cmd_reply(self, message: Any, sender: str | None) -> None:
        """ReplyInEventHandler: the handler replies to the command's sender."""
        self.persist(message.data, self.reply)

    def cmd_anyval(self, message: Any, sender: str | None) -> None:
        self.persist(5, self.reply)

    def cmd_async(self, message: Any, sender: str | None) -> None:
        """AsyncPersistPersistentActor: reply at once, and from the persist_async handler."""
        self.tell(sender, message.data)
        self.counter += 1
        self.persist_async(f"{message.data}-{self.counter}", self.reply)

    def cmd_async3(self, message: Any, sender: str | None) -> None:
        """AsyncPersistThreeTimesPersistentActor."""
        self.tell(sender, message.data)
        for _ in range(3):
            self.counter += 1
            self.persist_async(f"{message.data}-{self.counter}", lambda e: self.reply("a" + e[1:]))

    def cmd_sametwice(self, message: Any, sender: str | None) -> None:
        """AsyncPersistSameEventTwicePersistentActor: the first handler is slow, the order holds."""
        self.tell(sender, message.data)

        def slow(e: Any) -> None:
            time.sleep(0.3)
            self.counter += 1
            self.reply(f"{e}-a-{self.counter}")

        def fast(e: Any) -> None:
            self.counter += 1
            self.reply(f"{e}-b-{self.counter}")
        self.persist_async(message.data, slow)
        self.persist_async(message.data, fast)

    def cmd_nil(self, message: Any, sender: str | None) -> None:
        """PersistAllNilPersistentActor."""
        d = message.data
        if "defer" in d:
            self.defer_async("before-nil", self.reply)
        else:
            self.persist("before-nil", self.reply)
        self.persist_all([], lambda e: self.reply("Nil"))
        self.defer_async("after-nil", self.reply)
        self.tell(sender, d)

    def cmd_correlate(self, message: Any, sender: str | None) -> None:
        """AsyncPersistHandlerCorrelationCheck: each handler must see its own command's event."""
        d = message.data

        def check(e: Any) -> None:
            if e != d:
                self.reply(f"Expected [{d}] but got [{e}]")
            if e == "done":
                self.reply("done")
        self.persist_async(d, check)

    def cmd_deferp(self, message: Any, sender: str | None) -> None:
        """DeferringWithPersistActor: d-1, a-2, d-3, d-4."""
        self._d()("d-1", self.reply)
        self.persist(f"{message.data}-2", self.reply)
        self._d()("d-3", self.reply)
        self._d()("d-4", self.reply)

    def cmd_deferpa(self, message: Any, sender: str | None) -> None:
        """DeferringWithAsyncPersistActor."""
        d = message.data
        self._d()(f"d-{d}-1", self.reply)
        self.persist_async(f"pa-{d}-2", self.reply)
        self._d()(f"d-{d}-3", self.reply)
        self._d()(f"d-{d}-4", self.reply)

    def cmd_mixed(self, message: Any, sender: str | None) -> None:
        """DeferringMixedCallsPPADDPADPersistActor."""
        d = message.data
        self.persist(f"p-{d}-1", self.reply)
        self.persist_async(f"pa-{d}-2", self.reply)
        self._d()(f"d-{d}-3", self.reply)
        self._d()(f"d-{d}-4", self.reply)
        self.persist_async(f"pa-{d}-5", self.reply)
        self._d()(f"d-{d}-6", self.reply)

    def cmd_nopersist(self, message: Any, sender: str | None) -> None:
        """DeferringWithNoPersistCallsPersistActor."""
        for n in (1, 2, 3):
            self._d()(f"d-{n}", self.reply)

    def cmd_deferx(self, message: Any, sender: str | None) -> None:
        """DeferringAsyncActor / DeferringSyncActor: reply, persist a unit, defer data-defer."""
        self.tell(sender, message.data)
        self.persist("unit", lambda e: None)
        self._d()(f"{message.data}-defer", self.reply)

    def cmd_order(self, message: Any, sender: str | None) -> None:
        """StressOrdering: Cmd persists, ("latch", d) persist_asyncs, strings are echoed."""
        if isinstance(message, Cmd):
            self.tell(sender, message.data)
            self.persist(message.data, lambda e: None)
        elif isinstance(message, tuple) and message[0] == "latch":
            self.tell(sender, message[1])
            self.persist_async(message[1], lambda e: None)
        else:
            self.tell(sender, message)

    def cmd_nested(self, message: Any, sender: str | None) -> None:
        """MultipleAndNestedPersists (persist) / MultipleAndNestedPersistAsyncs (flag async)."""
        s, p = message.data, self._p("async" in self.flags)
        self.tell(sender, s)
        for n in (1, 2):
            p(f"{s}-outer-{n}", lambda e, n=n: (self.reply(e), p(f"{s}-inner-{n}", self.reply)))

    def cmd_deep(self, message: Any, sender: str | None) -> None:
        """DeeplyNestedPersists / DeeplyNestedPersistAsyncs, depth 6."""
        p = self._p("async" in self.flags)

        def deeper(e: str) -> None:
            d, n = e.rsplit("-", 1)
            self.reply(e)
            if int(n) < 6:
                p(f"{d}-{int(n) + 1}", deeper)
        self.tell(sender, message.data)
        p(f"{message.data}-1", deeper)

    def cmd_mixnest(self, message: Any, sender: str | None) -> None:
        """NestedPersistNormalAndAsyncs: persist outer, persist_async inner."""
        s = message.data
        self.tell(sender, s)
        for n in (1, 2):
            self.persist(f"{s}-outer-{n}", lambda e, n=n: (
                self.reply(e), self.persist_async(f"{s}-inner-async-{n}", self.reply)))

    def cmd_mixnest2(self, message: Any, sender: str | None) -> None:
        """NestedPersistAsyncsAndNormal: persist_async outer, persist inner."""
        s = message.data
        self.tell(sender, s)
        for n in (1, 2):
            self.persist_async(f"{s}-outer-async-{n}", lambda e, n=n: (
                self.reply(e), self.persist(f"{s}-inner-{n}", self.reply)))

    def cmd_enforce(self, message: Any, sender: str | None) -> None:
        """NestedPersistInAsyncEnforcesStashing: a persist nested in a persist_async handler still stashes."""
        s = message.data

        def inner(e: Any) -> None:
            self.reply(e)
            time.sleep(0.3)
            self.become(lambda m, snd: self.tell(snd, "done"))
        self.tell(sender, s)
        self.persist_async(f"{s}-outer-async", lambda e: (self.reply(e), self.persist(f"{s}-inner", inner)))

    def cmd_restartmsg(self, message: Any, sender: str | None) -> None:
        """RecoverMessageCausedRestart: pre_restart reports the message (or event) that failed."""
        if message == "Boom":
            raise TestError("boom")
        self.persist(f"evt-{message.data}", lambda e: (_ for _ in ()).throw(TestError(e)))

    def recover_rcpersist(self, event: Any) -> None:
        """PersistInRecovery: persists from RecoveryCompleted, and (wrongly) while replaying "invalid"."""
        if event == "invalid":
            self.persist("invalid-recovery", self.update)
        elif isinstance(event, RecoveryCompleted):
            self.persist_async("rc-1", self.update)
            self.persist("rc-2", self.update)
            self.persist_async("rc-3", self.update)
        else:
            self.recover_default(event)

    def cmd_rcpersist(self, message: Any, sender: str | None) -> None:
        self.persist(message.data, self.update)

    def cmd_timer(self, message: Any, sender: str | None) -> None:
        """TimerPersistentActor: a timer started while a persist is pending is not lost to the stash."""
        if isinstance(message, tuple) and message[0] == "scheduled":
            self.tell(message[2], message[1])
        else:
            self.schedule_once(0.0, ("scheduled", message.data, sender))
            self.persist(message.data, lambda e: None)

    def cmd_proto(self, message: Any, sender: str | None) -> None:
        """PersistentActorJournalProtocolSpec: "writes" answers the sizes of this id's journal writes."""
        if message == "writes":
            self.tell(sender, RecordingJournal.writes.get(self.persistence_id, []))
            return
        d, n = message.data
        if d == "persist":
            for k in range(n):
                self.persist(f"{k}", self.reply)
        elif d == "nested":
            for k in range(n):
                self.persist(f"outer-{k}", lambda e: (self.reply(e), self.persist(e.replace("outer", "inner"),
                                                                                  self.reply)))
        elif d == "async":
            self.persist_all_async([f"{n}-1", f"{n}-2"], lambda e: self.persist_async(f"{e}-h", self.reply))

    def cmd_err(self, message: Any, sender: str | None) -> None:
        """EventSourcedActorFailureSpec: persist, then fail the command for "err"."""
        self.persist(message.data, self.update)
        if message.data == "err":
            raise TestError("err")

    def cmd_errh(self, message: Any, sender: str | None) -> None:
        """EventSourcedActorFailureSpec: the persist handler fails for "err" before applying it."""
        def handler(e: Any) -> None:
            if e == "err":
                raise TestError("err")
            self.update(e)
        self.persist(message.data, handler)

    def recover_rcthrow(self, event: Any) -> None:
        """The RecoveryCompleted handler throws the first two times (per process) for this id."""
        if isinstance(event, RecoveryCompleted):
            RC_FAILURES[self.name] = n = RC_FAILURES.get(self.name, 0) + 1
            if n <= 2:
                raise TestError(f"RecoveryCompleted handler failed ({n})")
        else:
            self.recover_default(event)

    def recover_badrecover(self, event: Any) -> None:
        if not isinstance(event, RecoveryCompleted):
            raise TestError(f"receive_recover cannot handle {event!r}")

    cmd_slow = cmd_bounded = cmd_rcpersist

    # ---- SnapshotSpec --------------------------------------------------------------------------------
    def recover_ss(self, event: Any) -> None:
        """SaveSnapshotTestPersistentActor: the state is "<payload>-<lastSequenceNr>"."""
        if isinstance(event, SnapshotOffer):
            self.state = list(event.snapshot)
        elif isinstance(event, str):
            self.state.append(f"{event}-{self.last_sequence_nr}")

    recover_sf = recover_so = recover_nostore = recover_ss

    def cmd_ss(self, message: Any, sender: str | None) -> None:
        if isinstance(message, Cmd):
            self.persist(message.data, lambda e: self.state.append(f"{e}-{self.last_sequence_nr}"))
        elif message == "take":
            self.save_snapshot(tuple(self.state))
        elif isinstance(message, tuple) and message[0] == "take-as":
            self.save_snapshot(message[1])
        elif isinstance(message, SaveSnapshotSuccess):
            self.tell(self.probe, message.metadata.sequence_nr)
        elif isinstance(message, SaveSnapshotFailure):
            self.tell(self.probe, Report("save failed", str(message.cause)))

    cmd_sf = cmd_so = cmd_nostore = cmd_ss

    def recover_ls(self, event: Any) -> None:
        """LoadSnapshotTestPersistentActor: everything recovery hands over goes to the probe."""
        if isinstance(event, SnapshotOffer):
            md = event.metadata
            self.tell(self.probe, ("offer", md.sequence_nr, md.timestamp > 0, tuple(event.snapshot)))
        elif isinstance(event, RecoveryCompleted):
            self.tell(self.probe, RecoveryCompleted())
        else:
            self.tell(self.probe, f"{event}-{self.last_sequence_nr}")

    def cmd_ls(self, message: Any, sender: str | None) -> None:
        if message == "done":
            self.tell(self.probe, "done")
        elif isinstance(message, Cmd):
            self.persist(message.data, lambda e: self.tell(self.probe, f"{e}-{self.last_sequence_nr}"))
        elif isinstance(message, tuple) and message[0] == "delsnap":
            self.delete_snapshot(message[1])
        elif isinstance(message, tuple) and message[0] == "delsnaps":
            self.delete_snapshots(SnapshotSelectionCriteria(max_sequence_nr=message[1]))
        elif isinstance(message, DeleteSnapshotSuccess | DeleteSnapshotFailure | DeleteSnapshotsSuccess |
                        DeleteSnapshotsFailure):
            self.tell(self.probe, message)


class StackedBase(PersistentActor):
    """A persistent actor that reports its own lifecycle hooks and recovers its string events."""

    def __init__(self, client: str) -> None:
        self.client = client

    def _probe(self) -> str:
        return f"{self.client}/{self.entity_id}"

    def pre_start(self) -> None:
        self.state: list = []
        self.tell(self._probe(), ("pre_start", self.recovery_running))

    def pre_restart(self, error: BaseException, message: Any) -> None:
        self.tell(self._probe(), "pre_restart")
        super().pre_restart(error, message)

    def post_stop(self) -> None:
        self.tell(self._probe(), "post_stop")

    def post_restart(self, error: BaseException) -> None:
        self.tell(self._probe(), "post_restart")
        super().post_restart(error)

    def receive_recover(self, event: Any) -> None:
        if isinstance(event, str):
            self.state.append(event)

    def receive_command(self, message: Any, sender: str | None) -> None:
        if message == "boom":
            raise TestError("boom")
        if message == "stop":
            self.stop()
        elif message == "state":
            self.tell(sender, tuple(self.state))
        else:
            self.persist(message, self.state.append)


class LifecycleMixin(PersistentActor):
    """A stackable modification: wraps the lifecycle hooks of whatever class comes after it."""

    def pre_start(self) -> None:
        self.tell(self._probe(), "mixin pre_start")
        super().pre_start()

    def pre_restart(self, error: BaseException, message: Any) -> None:
        self.tell(self._probe(), "mixin pre_restart")
        super().pre_restart(error, message)

    def post_restart(self, error: BaseException) -> None:
        self.tell(self._probe(), "mixin post_restart")
        super().post_restart(error)

    def post_stop(self) -> None:
        self.tell(self._probe(), "mixin post_stop")
        super().post_stop()


class Stacked(LifecycleMixin, StackedBase):
    """StackedBase with LifecycleMixin stacked on it (Akka's "stackable modification")."""


# ---- test-side helpers -----------------------------------------------------------------------------

_names = itertools.count(1)


def new_name(kind: str) -> str:
    """A persistence id (and probe name) no other case uses."""
    return f"{kind}-{next(_names)}"


def prepared(ps, kind: str, *flags: str, top: bool = False):
    """Run Akka's per-case fixture for a new persistence id; return (path of the case's actor, probe)."""
    name = new_name(kind)
    probe = ps.probe(name)
    first = f"/user/spec/{name}~b1"
    probe.tell(first, Cmd("a"))
    probe.tell(first, "state")
    assert probe.receive(10) == ("a-1", "a-2")
    ps.stop(first)
    suffix = "".join(f"~{f}" for f in flags)
    if top:
        path = f"/user/{name}{suffix}"
        ps.spawn(Spec, path=path, kwargs={"client": ps.prefix})
    else:
        path = f"/user/spec/{name}{suffix}"
    return path, probe


def state(probe, path) -> list:
    probe.tell(path, "state")
    return list(probe.receive(10))


def together(ps, probe, path, *messages) -> None:
    """Send `messages` in one batch, so they reach the actor in one dispatch (as if queued in its mailbox)."""
    ps.tell_many([(path, m) for m in messages], sender=probe.path)

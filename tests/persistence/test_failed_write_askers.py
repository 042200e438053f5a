"""A group-commit write that fails stops the actor (Akka's onPersistFailure): every asker whose command wrote in
that write (or waits behind it) hears of the failure at once, once each, not only the sender of its first entry."""

from __future__ import annotations

import pytest

from tests.persistence.failed_write_actors import RoundConfirmer, RoundTable, RoundWriter

pytestmark = pytest.mark.timeout(120)

WRITER = "/user/writer"


def _failure(probe) -> object:
    """The ActorFailure `probe` got (an asker that was told nothing times out here: the bug)."""
    failure = probe.receive(10)
    assert type(failure).__name__ == "ActorFailure", failure
    return failure


def _each_told_once(system, probes, path: str) -> None:
    """Each probe got one ActorFailure from `path` for the write failure, and the system's errors hold it once."""
    for probe in probes:
        failure = _failure(probe)
        assert failure.path == path and "simulated write failure" in failure.error, failure
    for probe in probes:
        probe.expect_no_message(0.3)  # once each
    assert sum("simulated write failure" in e.reason for e in system.errors().recent) == 1, system.errors().recent


def test_every_asker_of_a_failed_write_hears_of_it_once(base, make_system, tmp_path):
    # Three commands in one round: two persist_async (the first one's event fails the write), one persist_all_async,
    # and a defer_async behind them. Measured before: only the first asker heard (ActorFailure); the others timed out.
    system = make_system(base, journal=f"failwrite://{tmp_path.name}", snapshot_store=f"failwrite://{tmp_path.name}")
    system.spawn(RoundWriter, WRITER)
    probes = [system.probe(f"ask-{k}-{tmp_path.name}") for k in range(4)]
    hows = ("async", "async", "all", "defer")
    payloads = [f"fault-{tmp_path.name}", "p-b", "p-c", "p-d"]
    system.tell(WRITER, ("as", tuple((p.path, how, payload) for p, how, payload in zip(probes, hows, payloads,
                                                                                       strict=True))))
    _each_told_once(system, probes, WRITER)


def test_a_tell_in_a_failed_write_is_not_sent_an_ask_failure(base, make_system, tmp_path):
    # The first entry's sender is a plain probe (not an ask): it gets nothing, the asker behind it hears.
    system = make_system(base, journal=f"failwrite://{tmp_path.name}", snapshot_store=f"failwrite://{tmp_path.name}")
    system.spawn(RoundWriter, WRITER)
    teller, asker = system.probe(f"teller-{tmp_path.name}"), system.probe(f"ask-x-{tmp_path.name}")
    system.tell(WRITER, ("as", ((teller.path, "async", f"fault-{tmp_path.name}"), (asker.path, "async", "p-x"))))
    assert "simulated write failure" in _failure(asker).error
    teller.expect_no_message(0.5)


TABLE = "/user/table"


def test_every_asker_of_a_failed_table_commit_hears_of_it_once(base, make_system, tmp_path):
    # Four commands to three entities of one table in one round, gathered into one TableCommit whose write fails
    # (the first entity's event); one entity asked twice, one only reads (its reply waits on the commit too).
    system = make_system(base, journal=f"failwrite://{tmp_path.name}", snapshot_store=f"failwrite://{tmp_path.name}")
    system.spawn(RoundTable, TABLE, entities=True)
    probes = [system.probe(f"ask-{k}-{tmp_path.name}") for k in range(4)]
    commands = [("e1", ("write", f"fault-{tmp_path.name}")), ("e2", ("write", "p-b")), ("e1", ("write", "p-c")),
                ("e3", ("read",))]
    system.tell(f"{TABLE}/driver", ("as", tuple((p.path, entity, command) for p, (entity, command)
                                                in zip(probes, commands, strict=True))))
    _each_told_once(system, probes, TABLE)


def test_askers_of_a_failed_write_as_the_actor_stops_hear_of_it_once(base, make_system, tmp_path):
    # Two commands of one round persist and the second stops the actor: their handlers never run, their events are
    # written as it stops, and that write fails. Measured before: both askers timed out (only the log heard).
    system = make_system(base, journal=f"failwrite://{tmp_path.name}", snapshot_store=f"failwrite://{tmp_path.name}")
    system.spawn(RoundWriter, WRITER)
    probes = [system.probe(f"ask-{k}-{tmp_path.name}") for k in range(2)]
    system.tell(WRITER, ("as", ((probes[0].path, "async", f"fault-{tmp_path.name}"), (probes[1].path, "stop", "p-b"))))
    _each_told_once(system, probes, WRITER)


def test_askers_of_a_failed_write_as_the_actor_restarts_hear_of_it_once(base, make_system, tmp_path):
    # The second command raises after persisting: the round's events are written as the actor restarts, and that
    # write fails. The first asker hears of the write failure; the raising command's asker of its own error, once.
    system = make_system(base, journal=f"failwrite://{tmp_path.name}", snapshot_store=f"failwrite://{tmp_path.name}")
    system.spawn(RoundWriter, WRITER)
    writer, raiser = (system.probe(f"ask-{k}-{tmp_path.name}") for k in range(2))
    system.tell(WRITER, ("as", ((writer.path, "async", f"fault-{tmp_path.name}"), (raiser.path, "raise", "p-b"))))
    assert "simulated write failure" in _failure(writer).error
    assert "command failed after persisting" in _failure(raiser).error
    for probe in (writer, raiser):
        probe.expect_no_message(0.3)  # once each


CONFIRMER = "/user/confirmer"


def _delivered(system, n: int) -> None:
    """A RoundConfirmer at CONFIRMER with deliveries 1..n journaled (to a probe, which never confirms)."""
    system.spawn(RoundConfirmer, CONFIRMER)
    destination = system.probe()
    assert system.ask(CONFIRMER, ("deliver", destination.path, n), timeout=10) == ("delivered", tuple(range(1, n + 1)))


def _confirm_then_ping(system, tmp_path, confirmers: int) -> tuple[list, object]:
    """One round: `confirmers` askers each confirm a delivery (1, 2, ...: replied at once), then one asker pings;
    returns the confirming probes and the pinger, their replies received."""
    probes = [system.probe(f"ask-{k}-{tmp_path.name}") for k in range(confirmers + 1)]
    commands = [("confirm", k) for k in range(1, confirmers + 1)] + [("ping",)]
    system.tell(CONFIRMER, ("as", tuple((p.path, c) for p, c in zip(probes, commands, strict=True))))
    *confirming, pinger = probes
    for k, probe in enumerate(confirming, 1):
        assert probe.receive(10) == ("confirmed", k, True)
    assert pinger.receive(10) == "pong"
    return confirming, pinger


@pytest.mark.parametrize("confirmers", [1, 2])
def test_a_failed_confirm_write_is_reported_to_each_command_that_confirmed_in_it(base, make_system, tmp_path,
                                                                                confirmers):
    # The round's DeliveriesConfirmed is queued at the group commit, after a command that only pings: it was written
    # under whichever sender was current then. Measured before: the pinger's ask failed, no confirmer's did.
    system = make_system(base, journal=f"failconfirm://{tmp_path.name}", snapshot_store=f"failconfirm://{tmp_path.name}")
    _delivered(system, 2)
    confirming, pinger = _confirm_then_ping(system, tmp_path, confirmers)
    _each_told_once(system, confirming, CONFIRMER)
    pinger.expect_no_message(0.3)


def test_a_rejected_confirm_is_reported_to_the_command_that_confirmed_it_and_the_others_stored(
        base, make_system, tmp_path):
    # The journal rejects every DeliveriesConfirmed holding delivery 1: A confirms 1, B confirms 2, C pings, one round.
    # Measured before: C's ask failed with the rejection, A's did not; B's storable confirm was lost with A's (after a
    # restart 2 was unconfirmed again).
    url = f"rejectconfirm:///{tmp_path}/journal.db"
    system = make_system(base, journal=url, snapshot_store=url)
    _delivered(system, 2)
    (a, b), c = _confirm_then_ping(system, tmp_path, 2)
    failure = _failure(a)
    assert failure.path == CONFIRMER and "simulated rejection" in failure.error, failure
    for probe in (a, b, c):
        probe.expect_no_message(0.3)
    system.stop(CONFIRMER)
    system.spawn(RoundConfirmer, CONFIRMER)
    assert system.ask(CONFIRMER, ("unconfirmed",), timeout=10) == (1,), "only the rejected confirm is not durable"

"""akka.persistence.at-least-once-delivery.*: the system's defaults of AtLeastOnceDelivery's four settings.

start(redeliver_interval=..., redelivery_burst_limit=..., warn_after_number_of_unconfirmed_attempts=...,
max_unconfirmed_messages=...) and the same keys in a topology file's [system] table apply to an actor that does
not set the setting itself; its own attribute (class, base, property) wins. Bad values fail at once, naming it.
"""

from __future__ import annotations

import itertools
import math
import re

import pytest

import actors
from actors.system import tagged_pids
from persistence import AtLeastOnceDelivery
from tests.actors.refusal import start_refused
from tests.cli.test_bad_config import reprise
from tests.conftest import SESSION_TOKEN
from tests.persistence.alod_config_actors import OwnSettings, Reporter

pytestmark = pytest.mark.timeout(120)

_ids = itertools.count(1)
DEFAULTS = {"redeliver_interval": 0.4, "redelivery_burst_limit": 2, "warn_after_number_of_unconfirmed_attempts": 2,
            "max_unconfirmed_messages": 3}


@pytest.fixture
def dsys(base, make_system, tmp_path):
    """A system with DEFAULTS, a Reporter entity host at /user/r and an OwnSettings one at /user/own."""
    system = make_system(base, journal=f"sqlite:///{tmp_path}/journal.db", **DEFAULTS)
    system.spawn(Reporter, path="/user/r", entities=True)
    system.spawn(OwnSettings, path="/user/own", entities=True)
    return system


def test_the_systems_settings_apply_unless_the_actor_sets_its_own(dsys):
    probe = dsys.probe()
    probe.tell(f"/user/r/a{next(_ids)}", "settings")
    assert probe.receive(10) == (0.4, 2, 2, 3)
    probe.tell(f"/user/own/a{next(_ids)}", "settings")
    assert probe.receive(10) == (0.3, 3, 3, 4)
    # The class keeps Akka's defaults for whoever reads them there.
    assert (AtLeastOnceDelivery.redeliver_interval, Reporter.redelivery_burst_limit,
            Reporter.warn_after_number_of_unconfirmed_attempts, Reporter.max_unconfirmed_messages) == (5.0, 10_000, 5,
                                                                                                         100_000)


@pytest.mark.parametrize(("host", "limit"), [("r", 3), ("own", 4)])
def test_max_unconfirmed_messages_refuses_the_next_delivery(dsys, host, limit):
    probe, dst = dsys.probe(), dsys.probe()
    probe.tell(f"/user/{host}/m{next(_ids)}", ("deliver", dst.path, limit + 1))
    assert probe.receive(10) == ("refused", limit,
                                 f"Too many unconfirmed messages, maximum allowed is [{limit}]")


def _copies_until(dst, marker: object, limit: int = 50) -> list[object]:
    """What `dst` receives, resend announcements left out, up to and including `marker`."""
    got: list[object] = []
    for _ in range(limit):
        message = dst.receive(10)
        if message[0] != "resend":
            got.append(message)
        if message == marker:
            return got
    raise AssertionError(f"no {marker!r} in {got}")


@pytest.mark.parametrize(("host", "warn_after"), [("r", 2), ("own", 3)])
def test_the_warning_comes_with_the_nth_redelivery(dsys, host, warn_after):
    # The first send makes the attempt count 1: the warning comes with the warn_after-th resend, the
    # (warn_after+1)-th transmission (as in test_akka_conformance with the class attribute).
    probe, dst = dsys.probe(), dsys.probe()
    probe.tell(f"/user/{host}/w{next(_ids)}", ("deliver", dst.path, 1))
    assert probe.receive(10) == ("delivered", 1)
    assert _copies_until(dst, ("warning", (1,))) == [(1, "m")] * (warn_after + 1) + [("warning", (1,))]


@pytest.mark.parametrize(("host", "burst"), [("r", 2), ("own", 3)])
def test_one_tick_resends_at_most_the_burst_limit(dsys, host, burst):
    # The deliveries share one timestamp: every one is overdue at the same tick, which resends only `burst` of
    # them; the next tick resends the next ones, in order.
    probe, dst = dsys.probe(), dsys.probe()
    n = {"r": 3, "own": 4}[host]  # more than the burst, within max_unconfirmed_messages
    probe.tell(f"/user/{host}/b{next(_ids)}", ("deliver", dst.path, n))
    assert probe.receive(10) == ("delivered", n)
    assert [dst.receive(10) for _ in range(n)] == [(i, "m") for i in range(1, n + 1)]
    resends: list[tuple[int, int]] = []
    while n not in [i for _, i in resends]:
        assert len(resends) < 50, resends
        message = dst.receive(10)
        if message[0] == "resend":
            resends.append(message[1:])
    first_tick = [i for tick, i in resends if tick == resends[0][0]]
    assert first_tick == list(range(1, burst + 1)), resends
    # The rest waited for a later tick (whether the first ones are due again by then depends on the scheduler).
    assert all(tick > resends[0][0] for tick, i in resends if i > burst), resends


BAD = [("redeliver_interval", 0), ("redeliver_interval", -1.0), ("redeliver_interval", math.nan),
       ("redeliver_interval", True), ("redeliver_interval", "5"), ("redeliver_interval", math.inf),
       ("redelivery_burst_limit", 0), ("redelivery_burst_limit", 1.5), ("redelivery_burst_limit", True),
       ("warn_after_number_of_unconfirmed_attempts", -1), ("warn_after_number_of_unconfirmed_attempts", False),
       ("max_unconfirmed_messages", 0), ("max_unconfirmed_messages", math.nan), ("max_unconfirmed_messages", "10")]


@pytest.mark.parametrize(("name", "value"), BAD, ids=[f"{n}={v!r}" for n, v in BAD])
def test_start_refuses_a_bad_value_naming_the_option(base, name, value) -> None:
    with pytest.raises(actors.ConfigError, match=rf"^{name} must be .*, got {re.escape(repr(value))}$"):
        start_refused(base, **{name: value})


@pytest.mark.parametrize(("name", "text"), [("redeliver_interval", "0"), ("redelivery_burst_limit", "0"),
                                             ("warn_after_number_of_unconfirmed_attempts", "true"),
                                             ("max_unconfirmed_messages", "nan")])
def test_up_refuses_a_bad_value_in_the_system_table_before_starting_anything(tmp_path, name, text) -> None:
    topology = tmp_path / "topo.toml"
    topology.write_text(f'[system]\n{name} = {text}\n\n[[actor]]\npath = "/user/tally"\n'
                        'class = "tests.actors.validation_sample:Tally"\n')
    tag = f"{SESSION_TOKEN}-bad-alod-up-"
    up = reprise("up", str(topology), "--detach", "--port", str(actors.free_port()), "--tag", tag)
    assert up.returncode == 2 and f"[system] {name} must be" in up.stderr, up
    assert tagged_pids(tag) == []


def test_the_system_table_takes_the_settings_and_still_refuses_a_misspelt_key() -> None:
    from actors.topology import TopologyError, loads

    text = "".join(f"{k} = {v}\n" for k, v in DEFAULTS.items())
    assert dict(loads(f"[system]\n{text}").system.host_defaults) == DEFAULTS
    with pytest.raises(TopologyError, match=re.escape("'redeliver_intervall' -> 'redeliver_interval'")):
        loads("[system]\nredeliver_intervall = 1.0\n")


def test_up_gives_the_system_tables_settings_to_the_actors(tmp_path) -> None:
    from actors.system import kill_tagged

    topology = tmp_path / "topo.toml"
    settings = "".join(f"{k} = {v}\n" for k, v in DEFAULTS.items())
    topology.write_text(f'[system]\njournal = "sqlite://{tmp_path}/j.db"\n{settings}\n'
                        '[[entities]]\npath = "/user/r"\nclass = "tests.persistence.alod_config_actors:Reporter"\n\n'
                        '[[entities]]\npath = "/user/own"\nclass = "tests.persistence.alod_config_actors:OwnSettings"\n')
    tag, port = f"{SESSION_TOKEN}-alod-up-", actors.free_port()
    up = reprise("up", str(topology), "--detach", "--port", str(port), "--tag", tag)
    try:
        assert up.returncode == 0, up.stderr
        client = actors.connect(port)
        try:
            assert client.ask("/user/r/a", "settings") == (0.4, 2, 2, 3)
            assert client.ask("/user/own/a", "settings") == (0.3, 3, 3, 4)
        finally:
            client.close()
        assert reprise("down", "--port", str(port)).returncode == 0
    finally:
        assert kill_tagged(tag) == [], f"reprise up left processes tagged {tag}"

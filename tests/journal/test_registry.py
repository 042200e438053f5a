"""One registry of backends: a scheme registered once serves open_journal, verify, persistence, the CLI
and config validation; unknown schemes are refused naming the registered ones."""

from __future__ import annotations

import pytest

import journal
import persistence
from actors import ConfigError
from actors.cli import main
from journal import (
    AtomicWrite,
    InvalidUrl,
    PersistentRepr,
    SnapshotMetadata,
    SnapshotStore,
    open_journal,
    open_snapshot_store,
    register_scheme,
    registered_schemes,
    unregister_scheme,
)
from journal.sqlite import SqliteJournal, SqliteSnapshotStore
from persistence.plugins import (
    NO_SNAPSHOT_STORE,
    NoSnapshotStore,
    SnapshotStoreNotConfigured,
    close_all,
    journal_for,
    snapshot_store_for,
)
from persistence.store_options import check_store_url
from tests.journal import registry_plugin

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def relay(tmp_path) -> str:
    """A relay:// URL (tests/journal/registry_plugin.py) of a fresh SQLite file holding two events of "p"."""
    url = f"relay://{tmp_path}/relay.db"
    with open_journal(url) as j:
        assert j.write_messages([AtomicWrite([PersistentRepr(f"e{n}", n, "p")]) for n in (1, 2)]) == [None, None]
    return url


def test_builtin_schemes_are_registered_like_plugins() -> None:
    assert registered_schemes()[:4] == ("sqlite", "memory", "postgresql", "postgres")
    assert "relay" in registered_schemes()
    assert journal.register_scheme is persistence.register_scheme, "one registry, reachable from both packages"


def test_a_registered_scheme_serves_open_journal_and_open_snapshot_store(relay, tmp_path) -> None:
    registry_plugin.opened.clear()
    with open_journal(relay) as j:
        assert isinstance(j, SqliteJournal)
        assert [r.payload for r in j.replay_messages("p")] == ["e1", "e2"]
    with open_snapshot_store(relay) as s:
        assert isinstance(s, SqliteSnapshotStore)
        s.save(SnapshotMetadata("p", 2), {"n": 2})
    assert registry_plugin.opened == [relay, relay]
    with open_snapshot_store(f"sqlite://{tmp_path}/relay.db") as s:
        assert s.load("p").snapshot == {"n": 2}, "the plugin opened the file its URL names"


def test_verify_uses_the_registry(relay) -> None:
    report = journal.verify(relay)
    assert (report.records_checked, report.problems) == (2, ())


def test_persistence_opens_registered_schemes_once_per_process(relay) -> None:
    try:
        j = journal_for(relay)
        assert journal_for(relay) is j
        assert j.highest_sequence_nr("p") == 2
        assert isinstance(snapshot_store_for(relay), SqliteSnapshotStore)
    finally:
        close_all()


def test_config_validation_knows_registered_schemes(relay) -> None:
    check_store_url("journal", relay)
    check_store_url("journal", relay.replace("relay.db", "r-{shard}.db"))
    with pytest.raises(ConfigError, match=r"did you mean relay://\?.*relay://"):
        check_store_url("journal", relay.replace("relay:", "relai:"))


def test_reprise_journal_commands_open_registered_schemes(relay, capsys) -> None:
    code = main(["journal", "ls", "--import", "tests.journal.registry_plugin", relay])
    out = capsys.readouterr().out
    assert code == 0 and [line.split() for line in out.splitlines()[1:]] == [["p", "2", "2"]]
    assert main(["journal", "verify", relay]) == 0


@pytest.mark.parametrize("url", ["nosuch://x", "nosuch:x"])  # (a bare file path is told its sqlite:// URL)
def test_an_unknown_scheme_names_every_registered_one(url) -> None:
    for opener in (open_journal, open_snapshot_store):
        with pytest.raises(InvalidUrl) as info:
            opener(url)
        assert isinstance(info.value, ValueError), "callers catching ValueError keep working"
        for scheme in ("sqlite://", "memory://", "postgresql://", "relay://"):
            assert scheme in str(info.value)
        assert "register_scheme" in str(info.value), "the message says how to add a scheme"


def test_a_scheme_without_a_snapshot_store_says_so(tmp_path) -> None:
    register_scheme("journalonly", journal=lambda url: open_journal(f"sqlite:///{tmp_path}/j.db"))
    try:
        open_journal("journalonly://x").close()
        with pytest.raises(InvalidUrl, match=r"serves no snapshot store.*registered without snapshot_store=.*relay://"):
            open_snapshot_store("journalonly://x")
    finally:
        unregister_scheme("journalonly")
    assert "journalonly" not in registered_schemes()


def test_replacing_a_builtin_factory_keeps_the_other_and_unregister_restores_it(tmp_path) -> None:
    seen: list[str] = []

    def spying(url: str) -> journal.Journal:
        seen.append(url)
        return SqliteJournal(url.partition("://")[2])

    url = f"sqlite:///{tmp_path}/x.db"
    register_scheme("sqlite", journal=spying)
    try:
        open_journal(url).close()
        open_snapshot_store(url).close()
        assert seen == [url], "only the journal factory was replaced"
    finally:
        unregister_scheme("sqlite")
    open_journal(url).close()
    assert seen == [url], "the shipped sqlite backend is back"


@pytest.mark.parametrize("args, error, message", [
    (("my://store", open_journal), InvalidUrl, "a name such as 'mystore'"),
    (("", open_journal), InvalidUrl, "a name such as 'mystore'"),
    ((7, open_journal), InvalidUrl, "got 7"),
    (("mine", "not callable"), TypeError, "journal= must be a callable"),
    (("mine", None), TypeError, "needs journal= and/or snapshot_store="),
])
def test_bad_registrations_are_refused_with_the_fix(args, error, message) -> None:
    with pytest.raises(error, match=message):
        register_scheme(*args)
    assert "mine" not in registered_schemes()


def test_no_snapshot_store_is_a_snapshot_store() -> None:
    assert isinstance(NO_SNAPSHOT_STORE, NoSnapshotStore) and isinstance(NO_SNAPSHOT_STORE, SnapshotStore)
    assert NO_SNAPSHOT_STORE.load("p") is None
    with pytest.raises(SnapshotStoreNotConfigured, match="snapshot_store="):
        NO_SNAPSHOT_STORE.save(SnapshotMetadata("p", 1), "state")
    NO_SNAPSHOT_STORE.close()

"""What the CLI prints: bad configuration as one line (exit 2), no passwords, no raw control characters."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import uuid

import pytest

import actors
from actors import SpawnCause, SpawnFailed
from actors.cli import _classify, main
from actors.system import kill_tagged
from journal import AtomicWrite, PersistentRepr, open_journal
from tests.conftest import SESSION_TOKEN, pg_schema_url

pytestmark = pytest.mark.timeout(120)

REPRISE = os.path.join(os.path.dirname(sys.executable), "reprise")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
EVIL_ID = "/user/accounts/ok\x08\x08\x1bcEVIL"
_n = itertools.count(1)


@pytest.fixture
def tag():
    """A tag under the session token: whatever the CLI starts with it is found and killed."""
    tag = f"{SESSION_TOKEN}-cfgcli-{next(_n)}-"
    yield tag
    assert kill_tagged(tag) == [], f"the CLI left processes tagged {tag}"


def run(capsys, *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out = capsys.readouterr()
    return code, out.out, out.err


def reprise(*argv: str, env: dict | None = None, timeout: float = 90) -> subprocess.CompletedProcess:
    return subprocess.run([REPRISE, *argv], cwd=ROOT, capture_output=True, text=True, timeout=timeout,
                          env=env)


# ---- control characters --------------------------------------------------------------------------

def test_journal_commands_escape_control_characters_of_old_ids(tmp_path, capsys) -> None:
    # A journal written before such ids were refused (the journal API itself takes any string).
    url = f"sqlite://{tmp_path}/journal.db"
    with open_journal(url) as j:
        assert j.write_messages([AtomicWrite([PersistentRepr("credit \x1b[31m9000", 1, EVIL_ID)])]) == [None]
    for argv in (["ls", url], ["tail", url], ["show", url, EVIL_ID], ["show", url, EVIL_ID + "x"]):
        code, out, err = run(capsys, "journal", *argv)
        printed = out + err
        assert "\x1b" not in printed and "\x08" not in printed, (argv, printed)
        assert "\\x1b" in printed, (argv, printed)
    code, out, _ = run(capsys, "journal", "ls", url)
    assert code == 0 and "ok\\x08\\x08\\x1bcEVIL" in out


# ---- bad topology values ---------------------------------------------------------------------------

BAD_TOPOLOGIES = [
    ('[[entities]]\npath = "/user/e"\nclass = "tests.actors.sample:Echo"\npassivate_after = 0\n',
     "passivate_after must be > 0"),
    ('[[entities]]\npath = "/user/e"\nclass = "tests.actors.sample:Echo"\nrestart_window = 0\n',
     "restart_window must be > 0"),
    ('[[entities]]\npath = "/user/e"\nclass = "tests.actors.sample:Echo"\nbatch_cap = 0\n', "batch_cap must be >= 1"),
    ('[[entities]]\npath = "/user/e"\nclass = "tests.actors.sample:Echo"\njournal = "foo://x"\n',
     "unsupported scheme 'foo'"),
    ('[system]\njournal = "sqllite://j.db"\n', "did you mean sqlite://"),
    ('[system]\npeers = ["db.example.com"]\n', "must be an IP address"),
    ('[system]\nlog_level = "LOUD"\n', "log_level must be one of"),
    ('[system]\nbind = "localhost"\n', "bind must be an IP address"),
    ('[[actor]]\npath = "/user/a\\u001bb"\nclass = "tests.actors.sample:Echo"\n', "control character U+001B"),
]


@pytest.mark.parametrize(("text", "expected"), BAD_TOPOLOGIES, ids=[e for _, e in BAD_TOPOLOGIES])
def test_up_refuses_bad_values_with_one_line_and_exit_2(tmp_path, capsys, tag, text, expected) -> None:
    topology = tmp_path / "topo.toml"
    topology.write_text(text)
    # --detach and a tag: code that accepted the value would start a system, and the fixture kills it.
    code, out, err = run(capsys, "up", str(topology), "--detach", "--tag", tag)
    assert code == 2, (out, err)
    assert len(err.strip().splitlines()) == 1 and err.startswith("reprise: error: ")
    assert expected in err and "hint:" in err
    assert "\x1b" not in err


def _up_refused_in_one_line(tmp_path, head: str, tag: str, code: int) -> list[str]:
    """`reprise up --detach` of a topology `head` + a Tally entry: it exits `code` with one line on stderr, returned."""
    topology = tmp_path / "topo.toml"
    topology.write_text(head + 'path = "/user/tally"\nclass = "tests.actors.validation_sample:Tally"\n')
    done = reprise("up", str(topology), "--detach", "--tag", tag)
    assert done.returncode == code, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines


@pytest.mark.multiproc
def test_up_fails_with_the_store_error_when_a_journal_cannot_be_opened(tmp_path, tag) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("a file where the journal's directory should be")
    lines = _up_refused_in_one_line(tmp_path, f'[system]\njournal = "sqlite:///{blocker}/journal.db"\n\n[[entities]]\n',
                                    tag, 1)
    assert "/user/tally failed to start: Tally cannot open its journal" in lines[0] and str(blocker) in lines[0]
    # The hint said "rerun with --verbose for the traceback": the journal is what to look at.
    assert f"(hint: `reprise journal ls sqlite:///{blocker}/journal.db` opens it alone; its URL is [system] journal = " \
        in lines[0], lines[0]


@pytest.mark.multiproc
def test_up_refuses_a_journal_in_a_directory_that_does_not_exist_and_makes_nothing(tmp_path, tag) -> None:
    # A misspelt directory was made silently (os.makedirs): the system started on a new, empty journal, and its
    # actors recovered nothing of the real one.
    missing = tmp_path / "dtaa"
    lines = _up_refused_in_one_line(tmp_path, f'[system]\njournal = "sqlite://{missing}/bank.db"\n\n[[entities]]\n',
                                    tag, 1)
    assert f"cannot create the SQLite file {missing}/bank.db: its directory {missing} does not exist: fix the path " \
           f"if it is misspelt, or create the directory (mkdir -p {missing})" in lines[0], lines[0]
    assert not missing.exists()


@pytest.mark.multiproc
@pytest.mark.parametrize("kind", ["sqlite", pytest.param("postgresql", marks=pytest.mark.postgres)])
def test_up_says_when_its_journal_is_new_and_not_when_it_exists(tmp_path, tag, request, kind) -> None:
    # A misspelt file name in a directory that exists, or a misspelt ?schema=, starts an empty journal: `up` printed
    # the same line for it as for the journal the user meant.
    if kind == "sqlite":
        url, shown, new = "sqlite://bnak.db", f"sqlite://{tmp_path}/bnak.db", "no file was there"
    else:
        url = shown = pg_schema_url(request, "bnak")
        new = "no journal schema was there"
    port = actors.free_port()
    topology = tmp_path / "topo.toml"
    topology.write_text(f'[system]\nadmin_port = {port}\njournal = "{url}"\n\n[[entities]]\n'
                        'path = "/user/tally"\nclass = "tests.actors.validation_sample:Tally"\n')
    outs = []
    for _ in range(2):
        done = reprise("up", str(topology), "--detach", "--tag", tag)
        assert done.returncode == 0, done.stdout + done.stderr
        outs.append(done.stdout)
        assert reprise("down", "--port", str(port)).returncode == 0
    assert f"  journal  {shown}  (new: {new}, so it starts empty; if you meant an existing journal, fix " in outs[0], \
        outs[0]
    assert f"  journal  {shown}\n" in outs[1], outs[1]  # (the one the first run made)


@pytest.mark.multiproc
def test_up_of_a_persistent_actor_without_a_journal_says_none_is_configured(tmp_path, tag) -> None:
    # It said "Tally cannot open its journal None: RuntimeError: no journal configured ... (fix the journal URL, or
    # the file's directory, permissions or server it names)" and hinted at --verbose.
    lines = _up_refused_in_one_line(tmp_path, f'[system]\nsnapshot_store = "sqlite:///{tmp_path}/snapshots.db"\n\n'
                                    '[[actor]]\n', tag, 2)
    assert "Tally persists events and no journal is configured: give one with actors.start(journal=URL), " \
           "a topology's [system] journal = " in lines[0] and "None" not in lines[0], lines[0]
    assert '(hint: add one to the topology, e.g. [system] journal = "sqlite://journal.db"' in lines[0], lines[0]


@pytest.mark.parametrize(("argv", "expected"), [
    (["status", "--port", "1", "--jsno"], "unrecognized argument '--jsno': did you mean --json? (hint: run 'reprise "
                                          "status --help')"),
    (["up", "topo.toml", "--detatch"], "unrecognized argument '--detatch': did you mean --detach? (hint: run 'reprise "
                                       "up --help')"),
    (["spark", "staged", "--port", "1", "--jsn"], "unrecognized argument '--jsn': did you mean --json? (hint: run "
                                                  "'reprise spark staged --help')"),
    (["journal", "ls", "sqlite://j.db", "extra"], "unrecognized argument 'extra' (hint: run 'reprise journal ls "
                                                  "--help')"),
])
def test_an_unknown_option_of_a_command_is_named_with_the_one_meant_and_that_command_s_help(capsys, argv,
                                                                                           expected) -> None:
    # It said "unrecognized arguments: --jsno (hint: run 'reprise --help')", under the top-level usage, whose help
    # lists no option of the command.
    with pytest.raises(SystemExit) as usage:
        main(argv)
    err = capsys.readouterr().err
    assert usage.value.code == 2 and err.splitlines()[-1] == f"reprise: error: {expected}", err
    assert err.startswith(f"usage: reprise {argv[0]}"), err


def test_down_with_nothing_on_the_port_says_nothing_runs_there(capsys) -> None:
    # It answered "no actor system listens ...; start one first": no advice for a down.
    port = actors.free_port()
    code, out, err = run(capsys, "down", "--port", str(port))
    assert code == 1, (out, err)  # (a mistyped --port must not look like a stopped system: README, `reprise down`)
    assert err.strip() == (f"reprise: error: nothing to shut down: no actor system listens on 127.0.0.1:{port} "
                           "(hint: if it was stopped already there is nothing to do; otherwise check --port/--host "
                           "(`reprise up` printed them))")


@pytest.mark.parametrize("command", ["status", "down"])
def test_a_host_that_does_not_resolve_is_named_as_such(capsys, command) -> None:
    # It said "no actor system listens on nosuch.invalid:N; start one first".
    code, out, err = run(capsys, command, "--host", "nosuch.invalid", "--port", str(actors.free_port()))
    assert code == 2, (out, err)
    assert err.startswith("reprise: error: host 'nosuch.invalid' does not resolve (") and "listens" not in err, err
    assert "give the admin's IP address or a host name this machine resolves" in err and "hint:" in err, err


# ---- passwords -------------------------------------------------------------------------------------

PASSWORD = "s3cret-pw"


@pytest.fixture
def schema(postgres_url):
    """A fresh schema name, dropped afterwards."""
    import psycopg

    name = f"cfg_{uuid.uuid4().hex[:10]}"
    yield name
    with psycopg.connect(postgres_url, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.mark.postgres
@pytest.mark.multiproc
def test_no_password_in_up_status_journal_output_or_system_status(tmp_path, tag, schema) -> None:
    url = f"postgresql://postgres:{PASSWORD}@127.0.0.1:5432/test?schema={schema}"  # trust auth ignores it
    topology = tmp_path / "topo.toml"
    topology.write_text(f'[system]\njournal = "{url}"\nsnapshot_store = "{url}"\n\n'
                        '[[entities]]\npath = "/user/tally"\nclass = "tests.actors.validation_sample:Tally"\n'
                        f'journal = "{url}"\n')
    port = actors.free_port()
    outputs = []
    up = reprise("up", str(topology), "--detach", "--tag", tag, "--port", str(port))
    outputs.append(up.stdout + up.stderr)
    assert up.returncode == 0, outputs[-1]
    assert "postgres:***@127.0.0.1:5432/test" in up.stdout
    try:
        client = actors.connect(port)
        try:
            assert client.ask("/user/tally/a", 7, timeout=30) == 7
            config = client.status().config
        finally:
            client.close()
        assert config["journal"] == config["snapshot_store"] == url.replace(PASSWORD, "***")
        for argv in (["status", "--port", str(port)], ["status", "--port", str(port), "--json"]):
            done = reprise(*argv)
            assert done.returncode == 0, done.stderr
            outputs.append(done.stdout + done.stderr)
        assert json.loads(outputs[-1])["journal"] == url.replace(PASSWORD, "***")
        for argv in (["journal", "ls", url], ["journal", "tail", url], ["journal", "verify", url],
                     ["journal", "ls", url.replace("postgresql", "postgresqll")]):
            outputs.append((lambda d: d.stdout + d.stderr)(reprise(*argv)))
        assert "/user/tally/a" in outputs[-4] and "postgresqll://postgres:***@" in outputs[-1]
    finally:
        down = reprise("down", "--port", str(port))
        outputs.append(down.stdout + down.stderr)
    for printed in outputs:
        assert PASSWORD not in printed, printed


# ---- libpq conventions: the password need not be in any file Reprise reads -------------------------

def _password_used(url: str) -> str | None:
    """The password libpq used for a connection of the journal at `url` (PQpass)."""
    journal = open_journal(url)
    try:
        with journal._db.pool.connection() as conn:
            return conn.info.password
    finally:
        journal.close()


@pytest.mark.postgres
def test_postgres_password_comes_from_libpq_sources(tmp_path, monkeypatch, schema) -> None:
    """PGPASSWORD, passfile= in the URL, PGPASSFILE and ~/.pgpass are all read by libpq (psycopg).

    The test server trusts every connection, so the password is not checked; PQpass shows which one
    libpq found and sent, which proves the source was read.
    """
    base = f"postgresql://postgres@127.0.0.1:5432/test?schema={schema}"
    for var in ("PGPASSWORD", "PGPASSFILE"):
        monkeypatch.delenv(var, raising=False)
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))

    def passfile(path, password: str) -> str:
        path.write_text(f"127.0.0.1:5432:test:postgres:{password}\n")
        os.chmod(path, 0o600)
        return str(path)

    passfile(home / ".pgpass", "from-home-pgpass")
    assert _password_used(base) == "from-home-pgpass"
    monkeypatch.setenv("PGPASSFILE", passfile(tmp_path / "pgpassfile", "from-pgpassfile"))
    assert _password_used(base) == "from-pgpassfile"
    assert _password_used(base + "&passfile=" + passfile(tmp_path / "in-url", "from-url-passfile")) == "from-url-passfile"
    monkeypatch.setenv("PGPASSWORD", "from-env")
    assert _password_used(base) == "from-env"


@pytest.mark.postgres
def test_journal_cli_works_with_pgpassword_and_never_prints_it(tmp_path, schema, capsys, monkeypatch) -> None:
    monkeypatch.setenv("PGPASSWORD", PASSWORD)
    url = f"postgresql://postgres@127.0.0.1:5432/test?schema={schema}"
    with open_journal(url) as j:
        assert j.write_messages([AtomicWrite([PersistentRepr({"amount": 1}, 1, "acct-1")])]) == [None]
    code, out, err = run(capsys, "journal", "ls", url)
    assert code == 0 and "acct-1" in out and PASSWORD not in out + err


@pytest.mark.parametrize("cause, hint", [
    (SpawnCause("journal", "sqlite:///data/j.db"), "`reprise journal ls sqlite:///data/j.db` opens it alone; its URL "
                                                   "is [system] journal = "),
    (SpawnCause("snapshot_store", "sqlite:///data/s.db"), "its URL is [system] snapshot_store = in the topology"),
    (SpawnCause("no_journal"), 'add one to the topology, e.g. [system] journal = "sqlite://journal.db"'),
    (SpawnCause("admin_port", "1900"), "`reprise status --port 1900` shows it, `reprise down --port 1900` stops it"),
])
def test_the_cli_hint_follows_the_spawn_failures_cause_not_its_wording(cause, hint) -> None:
    # The hint came from matching the message ("no journal is configured", "cannot open its journal URL: ",
    # "admin port N is already in use"): reworded, it fell back to "rerun with --verbose"; quoted by another
    # error, it gave a hint that did not apply.
    code, reworded = _classify(SpawnFailed("the store would not open (worded anew)", cause))
    assert hint in reworded and code == (2 if cause.kind == "no_journal" else 1), reworded
    quoted = "Tally cannot open its journal sqlite:///x.db: no journal is configured; admin port 1 is already in use"
    assert _classify(SpawnFailed(quoted)) == (1, "rerun with --verbose for the traceback")


GRANT = "the PostgreSQL role needs USAGE on the journal's schema and SELECT on its tables"
OTHER_FILE = "check the URL: it names another application's file"
IMPORT = "pass --import MODULE for the module that registers the event classes"
NOT_STARTED = "nothing was started: start the leader first, then this member"
MEMBER_RUNS = "the member runs without its leader"
SECRET_FILE = "--secret-file FILE takes a copy of the system's secret"
NO_ADMIN = "check that --port is a Reprise admin's"


def _typed_errors() -> list[tuple[BaseException, int, str]]:
    """Errors worded anew whose type or field says what is wrong, with the exit code and hint that fit."""
    from actors import SecretUnavailable
    from actors.errors import LeaderUnreachable
    from journal import JournalAccessDenied, NotAJournal, SerializationError

    return [
        (JournalAccessDenied("the server said no (worded anew)"), 1, GRANT),
        (NotAJournal("that file holds something else (worded anew)"), 1, OTHER_FILE),
        (LeaderUnreachable("the leader is not there (worded anew)", member_runs=False), 1, NOT_STARTED),
        (SerializationError("no class for it here (worded anew)", unknown_manifest="app.Event"), 1, IMPORT),
        (SecretUnavailable("that copy is no good (worded anew)", secret_file="/run/x/secret"), 2, SECRET_FILE),
        (SpawnFailed("Tally's journal would not open (worded anew)",
                     SpawnCause("journal", "postgresql://u@h/db", "access_denied")), 1, GRANT),
        (SpawnFailed("Tally's journal would not open (worded anew)",
                     SpawnCause("journal", "sqlite:///app.db", "not_a_journal")), 1, OTHER_FILE),
    ]


def _quoting_errors() -> list[tuple[BaseException, int, str]]:
    """Errors whose text merely quotes the words the hints were chosen by, with the hint that fits them."""
    from actors import SecretUnavailable
    from actors.errors import LeaderUnreachable
    from journal import JournalError, SerializationError

    words = "permission denied; not a Reprise journal"
    return [
        (JournalError(f"the disk said: {words}"), 1, "rerun with --verbose for the traceback"),
        (SpawnFailed(f"/user/q failed to start: RuntimeError: {words}"), 1, "rerun with --verbose for the traceback"),
        (LeaderUnreachable("member node 'm' on 127.0.0.1:1: its leader does not answer (it said it could not join "
                           "its leader)"), 1, MEMBER_RUNS),
        (SerializationError("the upcaster of 'a.B' from version 1 to 2 failed on [1]: KeyError('unknown manifest "
                            "table')"), 1, "rerun with --verbose for the traceback"),
        (SecretUnavailable("secret file lookup: found no local Reprise admin on port 1 to take the secret from"), 1,
         NO_ADMIN),
        (SecretUnavailable(f"cannot read the secret file /run/x/secret: {words}", secret_file="/run/x/secret"), 2,
         SECRET_FILE),
    ]


@pytest.mark.parametrize("error, code, hint", _typed_errors() + _quoting_errors(),
                         ids=[f"{type(e).__name__}-{'typed' if k < len(_typed_errors()) else 'quoting'}-{k}"
                              for k, (e, _, _) in enumerate(_typed_errors() + _quoting_errors())])
def test_the_cli_hint_follows_the_errors_type_not_its_wording(error, code, hint) -> None:
    # The hints came from matching the text ("permission denied", "not a Reprise journal", "could not join its
    # leader", "unknown manifest", a message starting "secret file "): reworded, an error lost its hint; quoting
    # the words, another got a hint that did not apply (an unreadable --secret-file was sent to GRANT rights on
    # PostgreSQL). They follow the type now: JournalAccessDenied, NotAJournal, LeaderUnreachable.member_runs,
    # SerializationError.unknown_manifest, SecretUnavailable.secret_file, SpawnCause.store_error.
    got_code, got = _classify(error)
    assert (got_code, hint in got) == (code, True), got
    assert (GRANT in got) == (hint == GRANT) and (OTHER_FILE in got) == (hint == OTHER_FILE), got


@pytest.mark.multiproc
def test_up_of_an_actor_whose_error_quotes_the_journal_words_gets_no_journal_hint(tmp_path, tag) -> None:
    # Its own error said "permission denied": the hint was to GRANT the PostgreSQL role rights on a journal it
    # never opened.
    topology = tmp_path / "topo.toml"
    topology.write_text('[[actor]]\npath = "/user/q"\nclass = "tests.actors.validation_sample:RefusesToStart"\n'
                        'args = ["cannot open /srv/queue: permission denied"]\n')
    done = reprise("up", str(topology), "--detach", "--tag", tag)
    assert done.returncode == 1, done.stdout + done.stderr
    line = done.stderr.strip()
    assert line.startswith("reprise: error: SpawnFailed: /user/q failed to start: RuntimeError: cannot open "
                           "/srv/queue: permission denied"), line
    assert "PostgreSQL" not in line and "(hint: rerun with --verbose for the traceback)" in line, line


@pytest.mark.multiproc
def test_a_secret_file_this_user_may_not_read_is_hinted_as_a_secret_file(make_system) -> None:
    # "cannot read the secret file F: permission denied" came with the hint to GRANT a PostgreSQL role rights
    # (the journal hint matched "permission denied" first), and exit status 1 instead of 2 for a bad --secret-file.
    import io

    from tests.forking import in_forked_child

    if os.geteuid() != 0:
        pytest.skip("NOT RUN: needs root to act as user nobody")
    system = make_system("multiproc")
    secret = os.path.join(system.run_dir, "secret")  # (root's, mode 0600: user nobody may not read it)

    def status_as_nobody() -> str:
        os.setgid(65534)
        os.setuid(65534)
        sys.stderr = io.StringIO()
        code = main(["status", "--port", str(system.admin_port), "--secret-file", secret])
        return f"{code} {sys.stderr.getvalue()}"

    said = in_forked_child(status_as_nobody)
    assert said.startswith(f"2 reprise: error: cannot read the secret file {secret}: permission denied; "), said
    assert f"(hint: {SECRET_FILE}" in said and "PostgreSQL" not in said, said


@pytest.mark.postgres
@pytest.mark.multiproc
def test_up_on_a_postgresql_journal_the_role_may_not_use_hints_at_the_grant(postgres_url, tmp_path, tag) -> None:
    # The GRANT hint came from matching "permission denied" in the text the host sent; it now comes from
    # SpawnCause.store_error ("access_denied"), which the host sets from the journal's JournalAccessDenied.
    import psycopg

    from journal.postgres import drop_schema

    name = f"cfg_rights_{uuid.uuid4().hex[:8]}"
    with open_journal(f"{postgres_url}?schema={name}") as j:
        assert j.write_messages([AtomicWrite([PersistentRepr(1, 1, "p")])]) == [None]
    admin = psycopg.connect(postgres_url, autocommit=True)
    try:
        admin.execute(f"CREATE ROLE {name} LOGIN")
        url = postgres_url.replace("postgres@", f"{name}@", 1) + f"?schema={name}"
        lines = _up_refused_in_one_line(tmp_path, f'[system]\njournal = "{url}"\n\n[[actor]]\n', tag, 1)
        assert "/user/tally failed to start: Tally cannot open its journal" in lines[0], lines[0]
        assert f"(hint: {GRANT}" in lines[0] and "its URL is [system] journal = in the topology" in lines[0], lines[0]
    finally:
        drop_schema(f"{postgres_url}?schema={name}")
        admin.execute(f"DROP OWNED BY {name}")
        admin.execute(f"DROP ROLE IF EXISTS {name}")
        admin.close()

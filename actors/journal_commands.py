"""`reprise journal ls|show|tail|verify [URL]`: inspect and verify an event journal (URL defaults to $REPRISE_JOURNAL)."""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable, Sequence

from journal.api import Journal
from journal.model import Problem
from journal.urls import redact_url

from .cli_error import PROG, CliError
from .paths import printable

JOURNAL_ENV = "REPRISE_JOURNAL"


def cmd_journal_help(args: argparse.Namespace) -> int:
    """`reprise journal` without a command: say which commands there are."""
    raise CliError("journal needs a command: ls, show, tail or verify", "run 'reprise journal --help'", code=2)


def _journal_url(given_url: str | None) -> str:
    url = given_url or os.environ.get(JOURNAL_ENV)
    if not url:
        raise CliError("no journal URL given", f"pass one (e.g. sqlite:///abs/path.db) or set ${JOURNAL_ENV}",
                       code=2)
    from journal import InvalidUrl, JournalError, missing_journal
    from journal.urls import parse_url, redact_url

    try:
        parsed = parse_url(url)
    except InvalidUrl as e:  # (a bare file path, `journal ls bank.db`, is told the sqlite:// URL it likely means)
        given = "" if url == given_url else f" (${JOURNAL_ENV})"
        raise CliError(printable(e.problem) + given, printable(e.fix) if e.fix else "journal URLs look like "
                       "sqlite:///abs/path.db, sqlite://relative.db or postgresql://user@host:port/db",
                       code=2) from None
    if parsed.scheme == "memory":
        raise CliError(f"{url}: a memory:// journal lives inside the process that made it; this command would only "
                       "see a new, empty one", "give the journal's sqlite:// or postgresql:// URL", code=2)
    # Opening a journal that does not exist would silently create an empty one (a misspelt path or ?schema=).
    if parsed.scheme == "sqlite" and not os.path.isfile(parsed.target):
        raise CliError(f"no journal file at {parsed.target!r}", "check the path; sqlite:///abs/path.db has "
                       "three slashes for an absolute path", code=2)
    try:
        why = missing_journal(url)
    except JournalError as e:
        raise CliError(str(e), journal_hint(e) or "check the host, port and database of the URL and that the "
                       "server runs", code=2) from None
    if why is not None:
        raise CliError(f"{redact_url(url)}: {why}", "check the ?schema= of the URL (default: reprise)", code=2)
    return url


def with_imports(func: Callable[[argparse.Namespace], int]) -> Callable[[argparse.Namespace], int]:
    """Wrap a journal command: run it after importing the modules named by --import."""

    def run(args: argparse.Namespace) -> int:
        import importlib

        if args.imports and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # as for `up`: the user's modules live where they run from
        for name in args.imports:
            try:
                importlib.import_module(name)
            except Exception as e:  # (a syntax error in it, an empty or relative name: all name --import)
                raise CliError(f"--import {name!r}: cannot import it ({type(e).__name__}: {e})", "pass a module "
                               "name importable from the working directory, e.g. --import myapp.events",
                               code=2) from None
        return func(args)

    return run


def _open(url: str | None) -> Journal:
    from journal import open_journal

    return open_journal(_journal_url(url))


def cmd_journal_ls(args: argparse.Namespace) -> int:
    """`reprise journal ls`: persistence ids, highest sequence nr, event count."""
    with _open(args.url) as j:
        rows = j.summaries()
    if not rows:
        print("(no events)")
        return 0
    # Ids come from the journal, maybe written before control characters were refused: escape them.
    width = max(len("PERSISTENCE ID"), *(len(printable(r.persistence_id)) for r in rows))
    print(f"{'PERSISTENCE ID':<{width}}  {'HIGHEST SEQ':>11}  {'EVENTS':>8}")
    for r in rows:
        print(f"{printable(r.persistence_id):<{width}}  {r.highest_sequence_nr:>11}  {r.event_count:>8}")
    return 0


def cmd_journal_show(args: argparse.Namespace) -> int:
    """`reprise journal show [URL] PID`: the events of one persistence id."""
    url, pid = args.url, args.pid  # (--from and --limit are counts: argparse refused a negative one)
    if url is not None and "://" not in url and ("://" in pid or _looks_like_a_file(pid) > _looks_like_a_file(url)):
        # `show PID URL`: the order the README once gave, and an easy one to type. With a file path for the URL
        # (`show /user/a/1 bank.db`) the journal is the argument that looks like a file: the error then names
        # sqlite://bank.db, not sqlite:///user/a/1.
        url, pid = pid, url
    if not pid:
        raise CliError("the persistence id is empty", "give one that `reprise journal ls` lists", code=2)
    try:
        pid.encode()
    except UnicodeEncodeError:  # (bytes of the command line that are not UTF-8: no id can hold them)
        raise CliError(f"the persistence id {printable(pid)!r} is not valid UTF-8 text", "give one that `reprise "
                       "journal ls` lists", code=2) from None
    from journal import MAX_SEQUENCE_NR

    with _open(url) as j:
        events = list(j.show_readable(pid, args.from_nr, MAX_SEQUENCE_NR if args.limit is None else args.limit))
        if not events and j.highest_sequence_nr(pid) == 0:
            # (an id with a control character is mostly a mistyped or misquoted one: actor paths refuse them)
            why = " (it holds a control or invisible character, which no actor path holds)" if printable(pid) != pid else ""
            raise CliError(f"no events for persistence id {printable(pid)!r}{why}",
                           "list the ids with `reprise journal ls`")
    for e in events:
        if isinstance(e, Problem):
            print(f"{e.sequence_nr:>8}  {_problem(e)}")
        else:
            print(f"{e.sequence_nr:>8}  {_when(e.timestamp)}  {printable(e.manifest or '-')}  {printable(repr(e.payload))}")
    return _fail_on_problems(events)


def _looks_like_a_file(arg: str) -> int:
    """2 for an existing file, 1 for a name with a SQLite file's suffix, else 0 (ids such as /user/a/1)."""
    if os.path.isfile(arg):
        return 2
    return 1 if arg.endswith((".db", ".sqlite", ".sqlite3")) else 0


def cmd_journal_tail(args: argparse.Namespace) -> int:
    """`reprise journal tail [URL] [-n N]`: the most recent events of all ids."""
    with _open(args.url) as j:
        envelopes = j.tail_readable(args.n)
    for e in envelopes:
        if isinstance(e, Problem):
            print(f"{'?':>8}  {printable(e.persistence_id or '')}#{e.sequence_nr}  {_problem(e)}")
        else:
            print(f"{e.offset:>8}  {_when(e.timestamp)}  {printable(e.persistence_id)}#{e.sequence_nr}  "
                  f"{printable(repr(e.event))}")
    return _fail_on_problems(envelopes)


def _problem(p: Problem) -> str:
    """A record that could not be read, as show and tail print it in its place (verify's labels)."""
    return f"{_label(p)}: {printable(redact_url(p.reason) or '')}"


def _fail_on_problems(records: Sequence[object]) -> int:
    """0, or CliError naming the first record that could not be read and the fix (the others are printed)."""
    problems = [r for r in records if isinstance(r, Problem)]
    if not problems:
        return 0
    first = problems[0]
    more = f" (and {len(problems) - 1} more, printed in their places)" if len(problems) > 1 else ""
    if all(p.intact for p in problems):
        raise CliError(f"an event cannot be read: {printable(first.reason)}{more}", _unreadable_hint(problems))
    raise CliError(f"a record cannot be read: {printable(redact_url(first.reason) or '')}{more}",
                   "run `reprise journal verify URL` to list every corrupt record")


def cmd_journal_verify(args: argparse.Namespace) -> int:
    """`reprise journal verify [URL]`: exit 1 and name every corrupt record."""
    import journal

    report = journal.verify(_journal_url(args.url))
    # Corrupt records are each named; intact ones this process cannot build share a cause (a class not imported:
    # every event of it), so a few of each cause are named and the rest counted, not printed by the 100,000.
    unreadable: dict[str, int] = {}
    for p in report.problems:
        if p.intact:
            cause = _RECORD_PREFIX.sub("", p.reason)
            seen = unreadable[cause] = unreadable.get(cause, 0) + 1
            if seen > UNREADABLE_NAMED:
                continue
        # Problems without an id concern the storage itself (e.g. a file SQLite cannot read).
        where = ("storage" if p.persistence_id is None else
                 f"persistence_id={printable(p.persistence_id)} sequence_nr={p.sequence_nr}")
        print(f"{_label(p)} {where}: {printable(redact_url(p.reason) or '')}")
    for cause, count in unreadable.items():
        if count > UNREADABLE_NAMED:
            print(f"UNREADABLE ... and {count - UNREADABLE_NAMED} more records unreadable for the same cause: "
                  f"{printable(redact_url(cause) or '')}")
    summary = f"checked {report.records_checked} records and {report.snapshots_checked} snapshots"
    if report.ok:
        print(f"{summary}: ok")
        return 0
    if all(p.intact for p in report.problems):
        # Intact records this process cannot build (its class not registered here, or changed): not corruption.
        print(f"{PROG}: error: {summary}: {len(report.problems)} unreadable (hint: "
              f"{_unreadable_hint(report.problems)})", file=sys.stderr)
        return 1
    print(f"{PROG}: error: {summary}: {len(report.problems)} corrupt (hint: restore the journal from a "
          "backup or delete the named records' persistence ids)", file=sys.stderr)
    return 1


UNREADABLE_NAMED = 3
"""How many records of one cause of unreadability `verify` names (the others it counts)."""
_RECORD_PREFIX = re.compile(r"cannot read persistence id .*?, sequence nr \d+: ")


def _label(p: Problem) -> str:
    return "UNREADABLE" if p.intact else "CORRUPT"


def _unreadable_hint(problems: Sequence[Problem]) -> str:
    """The fix for intact records this process cannot build: import their classes, or fix a class or upcaster."""
    if all(p.unknown_manifest is not None for p in problems):
        return "pass --import MODULE for the module that registers the event classes (e.g. --import myapp.events)"
    return ("the stored bytes are intact, but the registered class or its upcaster cannot build them: fix it (a "
            "changed class needs a higher version and an upcaster, journal.register_upcaster), then read again")


def _when(millis: int) -> str:
    if not millis:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(millis / 1000)) + f".{millis % 1000:03d}"


GRANT_HINT = ("the PostgreSQL role needs USAGE on the journal's schema and SELECT on its tables (writers also "
              "INSERT, UPDATE and DELETE): GRANT them, or use the role that created the journal")
"""The fix for a store that refused this role (JournalAccessDenied)."""
NOT_A_JOURNAL_HINT = "check the URL: it names another application's file"
"""The fix for a URL naming a store that is not a journal (NotAJournal)."""


def journal_hint(e: BaseException) -> str | None:
    """The fix for a journal error whose type says what is wrong (a missing GRANT, another application's
    file), else None."""
    from journal.errors import JournalAccessDenied, NotAJournal

    if isinstance(e, JournalAccessDenied):
        return GRANT_HINT
    if isinstance(e, NotAJournal):
        return NOT_A_JOURNAL_HINT
    return None

"""PostgreSQL writes held before their COMMIT (offsets drawn, rows inserted) while other writes commit later offsets."""

from __future__ import annotations

import contextlib
import secrets
import uuid
from collections.abc import Callable, Iterator

import psycopg
from psycopg import sql

from journal.postgres import split_url


@contextlib.contextmanager
def postgres_commits_held(journal_url: str, persistence_id: str) -> Iterator[Callable[[], bool]]:
    """While the block runs, a write of `persistence_id` (from any process) waits at its COMMIT; yields a function
    telling whether one is waiting there. A deferred trigger on the journal waits on an advisory lock held here."""
    conninfo, schema, *_ = split_url(journal_url)
    key = secrets.randbits(62)  # (advisory locks are database-wide: other runs share the server)
    trigger = sql.Identifier(f"held_{uuid.uuid4().hex[:12]}")
    s = sql.Identifier(schema)
    with psycopg.connect(conninfo, autocommit=True) as admin:
        admin.execute(sql.SQL(
            "CREATE OR REPLACE FUNCTION {}.held_commit() RETURNS trigger LANGUAGE plpgsql AS 'BEGIN "
            "IF NEW.persistence_id = TG_ARGV[0] THEN PERFORM pg_advisory_xact_lock_shared(TG_ARGV[1]::bigint); "
            "END IF; RETURN NULL; END'").format(s))
        admin.execute(sql.SQL("CREATE CONSTRAINT TRIGGER {} AFTER INSERT ON {}.journal DEFERRABLE INITIALLY "
                              "DEFERRED FOR EACH ROW EXECUTE FUNCTION {}.held_commit({}, {})").format(
            trigger, s, s, sql.Literal(persistence_id), sql.Literal(str(key))))
        admin.execute("SELECT pg_advisory_lock(%s)", (key,))

        def waiting() -> bool:
            row = admin.execute("SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
                                "AND (classid::bigint << 32) | objid::bigint = %s", (key,)).fetchone()
            return bool(row and row[0])
        try:
            yield waiting
        finally:
            admin.execute("SELECT pg_advisory_unlock(%s)", (key,))
            admin.execute(sql.SQL("DROP TRIGGER {} ON {}.journal").format(trigger, s))

"""Find a transaction statement (COMMIT, ROLLBACK, BEGIN, ...) in SQL text an exactly-once handler executes.

PostgreSQL runs every statement of a text sent without parameters (the simple query protocol), so
`"INSERT ...; COMMIT"` commits the projection's transaction before its offset: each statement of the text is
looked at, not only the first. What lies in string literals, quoted identifiers, dollar quotes and comments
is skipped, so a `'; commit'` in a value is no statement.
"""

from __future__ import annotations

import functools
import re

# A statement that begins or ends the transaction (after any comments and empty statements): COMMIT, END, BEGIN,
# ROLLBACK not TO a savepoint, and PostgreSQL's ABORT, START TRANSACTION and PREPARE TRANSACTION.
_TX_CONTROL = re.compile(r"(?:\s|;|--[^\n]*(?:\n|$)|/\*.*?\*/)*(BEGIN|COMMIT|END|ABORT|START\s+TRANSACTION|"
                         r"PREPARE\s+TRANSACTION|ROLLBACK(?!\s+(?:TRANSACTION\s+|WORK\s+)?TO\b))\b",
                         re.IGNORECASE | re.DOTALL)

# What PostgreSQL's lexer reads as a unit, as far as finding the statements' starts goes: a comment's or a quote's
# opening, an identifier or keyword (so that `a$b$` is no dollar quote, and `typE'x'` no E'' literal), a semicolon.
_PG_LEXEME = re.compile(r"--[^\n]*|/\*|[eE]'|'|\"|\$(?:[^\W\d][\w]*)?\$|[^\W\d][\w$]*|;")
_E_LITERAL_END = re.compile(r"(?:[^'\\]|\\.|'')*'", re.DOTALL)
_COMMENT_MARK = re.compile(r"/\*|\*/")


def transaction_statement(sql: object, several: bool) -> str | None:
    """The transaction statement in `sql` (upper case: "COMMIT", "ROLLBACK", ...), or None; of every statement of
    the text if `several` (PostgreSQL runs them all), else of its first (sqlite3 refuses a second)."""
    if not isinstance(sql, str):
        return None  # (bytes and psycopg.sql objects are made text first: see offset_store._pg_text)
    # (A str subclass as its text: the driver sends the text, and an equal subclass must not pass as plain.)
    return _transaction_statement(str.__str__(sql), several)


@functools.lru_cache(maxsize=256)  # (a handler runs the same few statements for every event)
def _transaction_statement(sql: str, several: bool) -> str | None:
    for start in (_pg_statement_starts(sql) if several and (";" in sql or "/*" in sql) else (0,)):
        found = _TX_CONTROL.match(sql, start)
        if found:
            return found.group(1).upper().split()[0]
    return None


def _pg_statement_starts(sql: str) -> list[int]:
    """Where the first word of each statement of a PostgreSQL text is: past the comments and semicolons before it,
    the semicolons being those outside quotes and comments (and outside a BEGIN ATOMIC function body, whose
    statements end with semicolons too). (Past the comments here: PostgreSQL's nest, which _TX_CONTROL's do not.)"""
    starts: list[int] = []
    i, n, first = 0, len(sql), True  # first: the next lexeme begins a statement
    previous, atomic = "", 0  # the last keyword; the depth of BEGIN ATOMIC ... END (CASE ... END inside it)
    while i < n:
        m = _PG_LEXEME.search(sql, i)
        if m is None:
            break
        lexeme, i = m.group(), m.end()
        head = lexeme[0]
        if lexeme == ";":
            if not atomic:
                first, previous = True, ""
            continue
        if lexeme == "/*":
            i = _comment_end(sql, i)
            continue
        if lexeme.startswith("--"):
            continue
        if first:
            starts.append(m.start())
            first = False
        if lexeme == "'":
            i = _quote_end(sql, i, "'")
        elif lexeme == '"':
            i = _quote_end(sql, i, '"')
        elif head == "$":
            end = sql.find(lexeme, i)
            i = n if end < 0 else end + len(lexeme)
        elif len(lexeme) == 2 and lexeme[1] == "'" and head in "eE":
            e = _E_LITERAL_END.match(sql, i)
            i = n if e is None else e.end()
        else:
            word = lexeme.upper()
            if word == "ATOMIC" and previous == "BEGIN" or atomic and word == "CASE":
                atomic += 1
            elif atomic and word == "END":
                atomic -= 1
            previous = word
    return starts


def _quote_end(sql: str, i: int, quote: str) -> int:
    """Just past the quote closing the literal or identifier opened before `i` (a doubled quote is one inside)."""
    while True:
        end = sql.find(quote, i)
        if end < 0:
            return len(sql)  # (unterminated: the server refuses the text)
        if sql.startswith(quote, end + 1):
            i = end + 2
            continue
        return end + 1


def _comment_end(sql: str, i: int) -> int:
    """Just past the end of the block comment opened before `i` (PostgreSQL's nest)."""
    depth = 1
    while depth:
        m = _COMMENT_MARK.search(sql, i)
        if m is None:
            return len(sql)
        depth += 1 if m.group() == "/*" else -1
        i = m.end()
    return i

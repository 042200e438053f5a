"""The error the `reprise` command's subcommands raise: one line plus a hint, and the exit code."""

from __future__ import annotations

from journal.errors import RepriseError

PROG = "reprise"


class CliError(RepriseError):
    """An error reported as one line plus a hint; `code` 2 for bad input, 1 for runtime failures."""

    def __init__(self, message: str, hint: str | None = None, code: int = 1) -> None:
        super().__init__(message)
        self.hint = hint
        self.code = code

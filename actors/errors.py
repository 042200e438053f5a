"""Errors raised by the actors layer; each names what was wrong and how to fix it."""


class RepriseError(Exception):
    """Base class of every error Reprise raises on purpose."""


class InvalidPath(RepriseError, ValueError):
    """A path is malformed, or a wildcard was given where one destination is meant."""


class PathTaken(RepriseError):
    """A spawn asked for a path (or a prefix of it) that another actor already serves."""


class SystemNotRunning(RepriseError, ConnectionError):
    """Nothing listens on the admin port that `actors.connect` was given."""


class AskTimeout(RepriseError, TimeoutError):
    """No reply arrived within the `ask` timeout."""


class UnpicklableMessage(RepriseError, TypeError):
    """A message cannot cross a process boundary (not picklable, or defined in `__main__`)."""


class SpawnFailed(RepriseError):
    """The actor system could not start the requested actor or entity host."""



"""The one exception type for mistakes a user can fix (a bad config value, task file or name): the CLI
prints it as one line. Anything else is a bug and keeps its traceback."""
from __future__ import annotations


class UserError(Exception):
    """A problem in what the user asked for or supplied; the message says what and where."""


class UnknownName(UserError, KeyError):
    """A name that no registry entry has (also a KeyError, for callers that look names up)."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0]) if self.args else ""


class BadValue(UserError, ValueError):
    """A value the user gave (an option, a task file line, an iteration number) that cannot be used."""


class MissingFile(UserError, FileNotFoundError):
    """A file or folder the user named, or a command needs, does not exist."""

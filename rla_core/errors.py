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


class DataError(UserError, ValueError):
    """A file the run reads is malformed: a task file or record line, a model folder, a checkpoint, a run
    folder's layout or marker. The message starts with the file (and line) and says what is wrong."""


class DiskFull(UserError, OSError):
    """The disk filled up while a file or checkpoint was written; what was there before is kept."""

    def __str__(self) -> str:
        return str(self.args[1]) if len(self.args) > 1 else super().__str__()


NO_SPACE = "No space left on device"


def is_disk_full(error: BaseException) -> bool:
    """ENOSPC as an OSError, or as a library's own error type that only says so in its message
    (safetensors raises SafetensorError "... No space left on device (os error 28)")."""
    import errno

    return getattr(error, "errno", None) == errno.ENOSPC or NO_SPACE in str(error)

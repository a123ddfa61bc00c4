"""Error types that reach the user: each names where the problem is and what was expected."""

from __future__ import annotations


class EvalbenchError(Exception):
    """Base class for errors reported to the user without a traceback; ``exit_code`` is what
    the command line returns (3: infrastructure, unless a subclass says otherwise)."""

    exit_code = 3


class ConfigError(EvalbenchError):
    """A configuration file is invalid. The message names file, line and key path."""

    exit_code = 2

    def __init__(self, message: str, *, file: str | None = None, line: int | None = None, key: str | None = None):
        self.file, self.line, self.key, self.message = file, line, key, message
        where = file or "<config>"
        if line is not None:
            where += f":{line}"
        if key:
            where += f": {key}"
        super().__init__(f"{where}: {message}")


class DatasetError(EvalbenchError):
    """A dataset file (or one record of it) is invalid."""

    exit_code = 2

    def __init__(self, message: str, *, file: str, line: int | None = None):
        self.file, self.line = file, line
        where = f"{file}:{line}" if line is not None else file
        super().__init__(f"{where}: {message}")


class ProvisioningError(EvalbenchError):
    """Setting up a database from its setup directory failed."""


class SandboxError(ProvisioningError):
    """Agent SQL cannot run as an unprivileged sandbox role on this server: the run stops before
    running anything there (it never falls back to the admin connection)."""


class RunDirError(ConfigError):
    """A file of a run or shard directory cannot be read as evalbench wrote it (missing, not a
    regular file, a symlink leading out of the folder, too large, not UTF-8 JSON, nested too
    deeply, a value of the wrong type): the message names the file (and the key); exit 2."""

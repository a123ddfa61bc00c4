"""Error types that reach the user: each names where the problem is and what was expected.

Every error evalbench reports without a traceback is an :class:`EvalbenchError`; the command line
prints its message and returns its ``exit_code`` (2: the input is wrong, 3: the infrastructure
failed). The whole tree (tests/core/test_errors_tree.py keeps it complete):

- ``EvalbenchError`` (3)
  - ``ConfigError`` (2): a config file; names file, line and key
    - ``RunDirError`` (2): a file of a run directory is not as evalbench wrote it
  - ``DatasetError`` (2): a dataset file or record
  - ``ProvisioningError`` (3): setting up a database failed
    - ``SandboxError`` (3): agent SQL cannot run as an unprivileged role there
  - ``LendingError`` (3): a per-conversation login could not be lent (the conversation records it)
  - ``PluginError`` (2, :mod:`evalbench.core.registry`): a plugin cannot be loaded
  - ``Unreachable``, ``NoAnswer`` (3, :mod:`evalbench.clients.probes`): a server does not answer (preflight)
  - ``AgentUnreachable`` (3, :mod:`evalbench.run.breaker`): the agent failed so many times in a row that the run stops
  - ``RunLockedError`` (2, :mod:`evalbench.run.lock`): another process is writing the run directory
  - ``OutputError`` (3, :mod:`evalbench.results.journal.files`): a file of the run directory cannot be written
  - ``RecordRefused`` (3, :mod:`evalbench.results.schema`): a run record its own schema refuses (a bug)
  - ``RunReadError`` (2, :mod:`evalbench.results.journal.dataframes`): ``read_run`` cannot read a run
  - ``CompareError`` (2, :mod:`evalbench.results.summary.comparison`): two runs cannot be compared
    - ``IncomparableRuns`` (2): their configs or datasets differ
  - ``RecordNotFoundError`` (2, :mod:`evalbench.results.render.explain`): ``explain`` finds no such conversation
  - ``RunsError`` (2, :mod:`evalbench.results.render.runs_index`): ``runs`` or ``view`` cannot read the folder

Errors of one conversation (an agent's bad reply, a SQL error, a test case that fails) are never
raised this far: they are recorded as the conversation's outcome.
"""

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


class LendingError(EvalbenchError):
    """A per-conversation database login (:mod:`evalbench.backends.logins`) could not be lent:
    the engine cannot lend one, the admin may not create users, or the server refused. The run
    goes on; the caller records it for the conversation."""


class RunDirError(ConfigError):
    """A file of a run or shard directory cannot be read as evalbench wrote it (missing, not a
    regular file, a symlink leading out of the folder, too large, not UTF-8 JSON, nested too
    deeply, a value of the wrong type): the message names the file (and the key); exit 2."""

"""Sandboxed SQL on a SQLite file: a :class:`~evalbench.backends.process_sandbox.ProcessSandbox`
whose children run :class:`evalbench.backends.sqlite.engine.SQLiteEngine` (readers ``mode=ro``
on the file, the writer on a private copy; see there for the authorizer and the limits)."""

from __future__ import annotations

from pathlib import Path

from evalbench.backends.base import SandboxLimits
from evalbench.backends.process_sandbox import Engine, ProcessSandbox
from evalbench.backends.sqlite import lending

# SQLite's own memory is small (a page cache, values of at most 16 MiB): this bounds a statement
# that builds many large values at once, and Python's copy of a result
ADDRESS_SPACE = 1 << 30
ENGINE = Engine(name="sqlite", dialect="sqlite", target="evalbench.backends.sqlite.engine:SQLiteEngine",
                memory_bytes=ADDRESS_SPACE)


class SQLiteSandbox(ProcessSandbox):
    """Runs golden and agent SQL on one SQLite file, never leaving a change behind."""

    def __init__(self, path: Path, limits: SandboxLimits) -> None:
        super().__init__(path, limits, ENGINE)
        self.lender = lending.lender(self.path)  # per-conversation logins: read-only copies of the file

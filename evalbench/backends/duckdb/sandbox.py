"""Sandboxed SQL on a DuckDB file: a :class:`~evalbench.backends.process_sandbox.ProcessSandbox`
whose children run :class:`evalbench.backends.duckdb.engine.DuckDBEngine` (readers open the file
``read_only``, the writer a private copy made again whenever a sequence moved; see there for the
locked configuration and DuckDB's own check of each statement)."""

from __future__ import annotations

from pathlib import Path

from evalbench.backends.base import SandboxLimits
from evalbench.backends.duckdb import lending
from evalbench.backends.process_sandbox import Engine, ProcessSandbox

MEMORY_LIMIT = "1GB"  # DuckDB's buffers, per engine process (each reader and the writer)
THREADS = 2  # DuckDB's worker threads per engine process
MAX_TEMP = "4GB"  # of spill files per engine process
# what a function call allocates is not DuckDB's memory_limit's to see: the process's address
# space bounds it (the buffers, the threads' stacks, the Python around the engine, a result)
ADDRESS_SPACE = 3 << 30
ENGINE = Engine(name="duckdb", dialect="duckdb", target="evalbench.backends.duckdb.engine:DuckDBEngine",
                memory_bytes=ADDRESS_SPACE,
                options=(("memory_limit", MEMORY_LIMIT), ("threads", THREADS), ("max_temp", MAX_TEMP)))


class DuckDBSandbox(ProcessSandbox):
    """Runs golden and agent SQL on one DuckDB file, never leaving a change behind."""

    def __init__(self, path: Path, limits: SandboxLimits) -> None:
        super().__init__(path, limits, ENGINE)
        self.lender = lending.lender(self.path)  # per-conversation logins: read-only copies of the file

"""The one interface a database backend implements, and the types that cross it.

The core (conversation, stages, scorers, validate, the orchestrator) sees a database only through
:class:`Backend` and the :class:`Sandbox` it opens, and SQL results only as
:class:`ExecutionResult`. Everything dialect-specific lives in the backend's own package
(``evalbench/backends/<name>/``): connecting and pooling, provisioning from a setup directory,
the sandbox (read-only role or equivalent, rollback, timeout, row cap), statement splitting in
its sqlglot dialect, typed rows, schema text, the state fingerprint ``state_match`` compares, and
error classification. Backends are found by name (:mod:`evalbench.backends`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeAlias, TypeVar, runtime_checkable

# the result type lives in a module of its own (conversations hold results); re-exported here
from evalbench.core.execution_result import ErrorKind as ErrorKind
from evalbench.core.execution_result import ExecutionResult as ExecutionResult

if TYPE_CHECKING:
    from evalbench.backends.fingerprint import Fingerprint
    from evalbench.backends.setup import SetupFiles
    from evalbench.config import DatabaseConfig

Mode = Literal["read", "write"]
PreprocessErrors = Literal["fail", "stop"]
# Whose SQL an execution runs. Agent SQL runs under a database identity of its own that can neither
# change any object nor observe golden work (its statements, results or statistics): golden SQL
# runs as another identity. Backends without identities (the file engines) run both the same way.
Actor = Literal["agent", "golden"]
# A row of a harness query (trusted SQL the harness wrote and unpacks): its cells are whatever the
# driver reads for the query's columns (its own stubs type them Any), which the caller knows.
HarnessRow: TypeAlias = "tuple[Any, ...]"
# The parameters of a harness query, as DB-API drivers take them (positional or named)
QueryParams: TypeAlias = "Sequence[object] | Mapping[str, object] | None"
T = TypeVar("T")


class DatabaseUnavailable(Exception):
    """The database could not be reached for harness work (not the SQL's fault)."""


@dataclass(frozen=True)
class SandboxLimits:
    """What one execution may use, from the run config and the database's config."""

    pool_size: int
    statement_timeout_s: float
    max_rows: int
    executions_per_minute: int | None = None
    max_result_bytes: int = 32 * 1024 * 1024  # of one result as it is read: rows past it are not held (truncated)


@dataclass
class Provisioned:
    """What provisioning did to one database, for the manifest and for opening its sandbox.
    ``handle`` is the backend's own (the Postgres sandbox login, a SQLite file...)."""

    action: str  # created | reused | recreated | as-is
    checksum: str | None = None
    sandbox_user: str | None = None
    tables_loaded: int = 0
    rows_loaded: int = 0
    warning: str | None = None
    handle: Any = None


@runtime_checkable
class WriteTransaction(Protocol):
    """One read-write transaction on a starting state; every script is undone after it runs."""

    preprocess_error: str | None

    def run(self, texts: Sequence[str], inspect: Callable[[WriteTransaction], T] | None = None
            ) -> tuple[ExecutionResult, T | None]:
        """Run a script, then ``inspect(self)`` when it ran without an error (else None is
        returned in its place); both undone."""
        ...

    def rows(self, query: str, params: QueryParams = None) -> list[HarnessRow]: ...

    def fingerprint(self, statements: Sequence[str]) -> Fingerprint:
        """The state ``state_match`` compares (the tables ``statements`` may have written)."""
        ...


class Clones(Protocol):
    """Makes throwaway copies of a database for test cases (the Postgres ``CloneFactory``)."""

    def clone(self) -> AbstractContextManager[str]:
        """A fresh copy, as the conninfo test cases connect with; dropped on exit."""
        ...


@runtime_checkable
class Sandbox(Protocol):
    """Runs golden and agent SQL against one database, never leaving a change behind."""

    conninfo: str  # what the backend's test-case connections use ("" when it has none)

    @property
    def write_lock(self) -> AbstractContextManager[object]:
        """Held by work that writes (re-entrant in a thread): one at a time per database."""
        ...

    clones: Clones | None  # a factory of throwaway copies for test cases, or None
    dialect: str  # the sqlglot dialect of its SQL
    runs_test_cases: bool  # BIRD-Interact's Python test cases (they hold a psycopg connection) can run here

    def execute(self, sql: str | Sequence[str], *, mode: Mode = "read", preprocess: Sequence[str] = (),
                preprocess_errors: PreprocessErrors = "fail", actor: Actor = "agent") -> ExecutionResult: ...

    def write_transaction(self, preprocess: Sequence[str] = (), preprocess_errors: PreprocessErrors = "fail",
                          actor: Actor = "agent") -> AbstractContextManager[WriteTransaction]:
        """One rolled-back write transaction; ``state_match`` runs the agent's script in it first,
        then the golden script (so the agent's part, undone before, cannot observe the golden one)."""
        ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


class Backend(Protocol):
    """One database engine. Registered by name: ``db_type`` in a database config selects it."""

    name: str
    dialect: str  # sqlglot's name of the SQL it runs

    def setup_dialects(self) -> Sequence[str]:
        """Folder names under ``<setup_directory>/<database>/`` that hold its setup SQL."""
        ...

    def provision(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None) -> Provisioned:
        """Create or reuse the database ``config`` names, loaded from ``setup`` (None: use the
        database as it is), and the sandbox's login. Raises ProvisioningError (SandboxError when
        agent SQL could not run unprivileged)."""
        ...

    def open_sandbox(self, config: DatabaseConfig, provisioned: Provisioned, limits: SandboxLimits,
                     embedded_dir: Path | None) -> Sandbox: ...

    def describe_schema(self, sandbox: Sandbox) -> str:
        """``CREATE TABLE``-like text of the database, for agents shown the schema."""
        ...

    def probe(self, config: DatabaseConfig, setup: SetupFiles | None, embedded_dir: Path | None, timeout_s: float) -> str:
        """Preflight: one line saying the database is reachable and the sandbox logs in; raises
        DatabaseUnavailable (or ProvisioningError) with one line saying why not."""
        ...

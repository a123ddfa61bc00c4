"""The sandbox of a file engine whose SQL runs in child processes (SQLite, DuckDB).

Every connection is an :class:`~evalbench.backends.engine_process.EngineProcess`: a pool of
readers that open the database file read-only, and one writer that works on a private copy of
it (made when the writer starts, in the sandbox's scratch folder) inside transactions that are
always rolled back — so nothing the SQL does can reach the file, and a writer that is killed
mid-transaction leaves nothing to recover. What runs inside a child is the engine's own module
(``evalbench/backends/<engine>/engine.py``); this side admits the SQL (the shared admission),
holds the pool, the write lock and the rate limit, kills a child that outlives its budget or is
interrupted, and reads every reply back within the caps.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from evalbench.backends.admission import admit, admit_script, rate_limiter
from evalbench.backends.base import (
    Actor,
    Clones,
    DatabaseUnavailable,
    ExecutionResult,
    HarnessRow,
    Mode,
    PreprocessErrors,
    QueryParams,
    SandboxLimits,
)
from evalbench.backends.engine_process import HARNESS_S, EngineProcess, EngineStopped
from evalbench.backends.fingerprint import Fingerprint
from evalbench.backends.pool import Checkout
from evalbench.backends.result_cap import MAX_ERROR_CHARS, ResultCap
from evalbench.sql.statements import split_statements

_KINDS = {"syntax", "sql", "timeout", "forbidden", "connection", "preprocess"}
TIMEOUT_MESSAGE = "canceling statement due to statement timeout"
T = TypeVar("T")


@dataclass(frozen=True)
class Engine:
    """What differs between the engines run this way."""

    name: str  # "sqlite": names the scratch folder and messages
    dialect: str
    target: str  # "module:Class" of the engine object inside a child
    memory_bytes: int  # address space of one child, before room for one result
    options: tuple[tuple[str, object], ...] = ()  # more arguments of the engine object


class ProcessSandbox:
    """Runs golden and agent SQL on one database file, in child processes, never leaving a change."""

    runs_test_cases = False
    conninfo = ""  # no server: test cases (psycopg) cannot run here

    def __init__(self, path: Path, limits: SandboxLimits, engine: Engine) -> None:
        self.path = path.absolute()  # engine processes run in the scratch folder
        self.engine, self.dialect = engine, engine.dialect
        self.timeout_s = limits.statement_timeout_s
        self.max_rows, self.max_bytes = limits.max_rows, limits.max_result_bytes
        self.write_lock = threading.RLock()
        self.clones: Clones | None = None
        self._limiter = rate_limiter(limits)
        self.scratch = scratch_folder(engine.name)
        writer = self._process(self.scratch / f"working{path.suffix or '.db'}")
        # golden SQL reads in processes of its own: what an engine keeps between executions (its
        # caches, memory and statistics, a sequence's current value) is never another actor's.
        # The writer is shared (writes are few): the engine reopens it when the actor changes.
        self._pools: dict[Actor, Checkout[EngineProcess]] = {
            actor: Checkout(lambda: self._process(None), limits.pool_size, writer) for actor in ("agent", "golden")}
        try:
            with self._pools["agent"](False) as reader:  # the file opens, or the sandbox does not
                reader.ensure()
        except BaseException:
            self.close()
            raise

    def _process(self, copy: Path | None) -> EngineProcess:
        init = {"path": str(self.path), "copy": None if copy is None else str(copy), "scratch": str(self.scratch),
                "max_rows": self.max_rows, "max_bytes": self.max_bytes, "timeout_s": self.timeout_s,
                **dict(self.engine.options)}
        # a reply holds one result: text is counted in characters, sent as UTF-8 (up to 4 bytes each)
        return EngineProcess(self.engine.target, init, scratch=self.scratch,
                             memory_bytes=self.engine.memory_bytes + 4 * self.max_bytes,
                             max_reply_bytes=4 * self.max_bytes + (1 << 20))

    def close(self) -> None:
        busy = {id(process) for pool in self._pools.values() for process in pool.busy()}
        for process in {id(p): p for pool in self._pools.values() for p in pool.drain()}.values():
            if id(process) in busy:
                process.kill("interrupted")  # its caller reaps it
            else:
                process.close()
        shutil.rmtree(self.scratch, ignore_errors=True)

    def interrupt(self) -> None:
        """Stop the statements running now (the run is being cancelled): their children are killed."""
        for pool in self._pools.values():
            for process in pool.busy():
                process.kill("interrupted")

    def rows(self, query: str) -> list[HarnessRow]:
        """A harness query (trusted SQL, e.g. the schema) on a reader."""
        with self._pools["golden"](False) as reader:  # the harness's work is never the agent's
            # what the engine's op_rows returns
            return cast("list[HarnessRow]", harness_call(reader, {"op": "rows", "query": query, "params": None}))

    def execute(self, sql: str | Sequence[str], *, mode: Mode = "read", preprocess: Sequence[str] = (),
                preprocess_errors: PreprocessErrors = "fail", actor: Actor = "agent") -> ExecutionResult:
        """Run ``sql`` after the trusted ``preprocess`` SQL; the result of the last statement."""
        admission = admit(sql, mode, self.dialect, self.timeout_s)
        if admission.refused:
            return admission.result
        if self._limiter:
            self._limiter.acquire()
        result = admission.result
        writes = mode == "write" or bool(preprocess)
        request = {"op": "execute", "statements": admission.statements, "mode": mode, "preprocess": self.split(preprocess),
                   "preprocess_errors": preprocess_errors, "budget_s": admission.budget_s, "actor": actor}
        with self.write_lock if writes else nullcontext(), self._pools[actor](writes) as process:
            process.ensure()  # a replaced engine process starts here, outside the statement's time
            started = time.perf_counter()
            self.run(process, request, admission.budget_s, result)
            result.elapsed_s = time.perf_counter() - started
        return result

    def split(self, texts: Sequence[str]) -> list[list[str]]:
        """Preprocess texts as statements (a text that fails is undone alone): split here, so
        that engine processes need no SQL parser of their own."""
        return [split_statements(text, self.dialect) for text in texts]

    def run(self, process: EngineProcess, request: Mapping[str, object], budget_s: float, result: ExecutionResult) -> None:
        """Send an execution to ``process`` and put what it gave on ``result``, re-capped here:
        the reply of a child that ran hostile SQL is data to check, not to trust."""
        try:
            reply = process.call(request, budget_s)
        except EngineStopped as exc:
            result.error, result.error_kind = (TIMEOUT_MESSAGE, "timeout") if exc.reason != "died" else (str(exc), "sql")
            return
        if not isinstance(reply, dict):
            raise DatabaseUnavailable("the engine process sent a malformed result")
        cap = ResultCap(self.max_rows, self.max_bytes)
        cap.extend(tuple(row) if isinstance(row, (tuple, list)) else (row,) for row in reply.get("rows") or [])
        cap.fill(result)
        result.truncated = result.truncated or bool(reply.get("truncated"))
        result.truncated_at_bytes = result.truncated_at_bytes or bool(reply.get("truncated_at_bytes"))
        result.columns = [str(c) for c in reply.get("columns") or []]
        if reply.get("error") is not None:
            result.error = str(reply["error"])[:MAX_ERROR_CHARS]
            kind = reply.get("error_kind")
            result.error_kind = kind if kind in _KINDS else "sql"
            result.rows, result.columns = [], []

    @contextmanager
    def write_transaction(self, preprocess: Sequence[str] = (), preprocess_errors: PreprocessErrors = "fail",
                          actor: Actor = "agent") -> Iterator[ProcessWriteTransaction]:
        """One transaction on the writer, after ``preprocess``, for work that runs several scripts
        on the same starting state (``state_match``): always rolled back."""
        with self.write_lock, self._pools[actor](True) as writer:
            tx = ProcessWriteTransaction(self, writer, list(preprocess), preprocess_errors, actor)
            try:
                tx.start()
                yield tx
            finally:
                tx.end()


class ProcessWriteTransaction:
    """What :meth:`ProcessSandbox.write_transaction` yields: each script is undone after it and
    ``inspect`` ran (the engine's way: a savepoint, or the transaction again). A writer killed on
    the way is replaced and the transaction begun again, so the next script starts from the same
    state."""

    def __init__(self, sandbox: ProcessSandbox, writer: EngineProcess, preprocess: list[str], errors: PreprocessErrors,
                 actor: Actor) -> None:
        self.sandbox, self.writer = sandbox, writer
        self.begin = {"op": "begin", "preprocess": sandbox.split(preprocess), "errors": errors, "budget_s": sandbox.timeout_s,
                      "actor": actor}
        self.preprocess_error: str | None = None

    def start(self) -> None:
        """Begin the transaction and run the preprocess SQL (the starting state)."""
        try:
            # what the engine's op_begin returns: the preprocess SQL's error, or None
            self.preprocess_error = cast("str | None", self.writer.call(self.begin, self.sandbox.timeout_s))
        except EngineStopped as exc:
            self.preprocess_error = f"preprocess_sql {'timed out' if exc.reason != 'died' else 'failed'}: {exc}"

    def end(self) -> None:
        if self.writer.running:
            with contextlib.suppress(EngineStopped):  # nothing is left: the next writer starts from a fresh copy
                self.writer.call({"op": "end"}, HARNESS_S)

    def run(self, texts: Sequence[str], inspect: Callable[[ProcessWriteTransaction], T] | None = None
            ) -> tuple[ExecutionResult, T | None]:
        """Run a script (write-mode statements only), then ``inspect(self)``; both undone."""
        admission = admit_script(texts, self.sandbox.dialect)
        result = admission.result
        if admission.refused:
            return result, None
        inspected: T | None = None
        try:
            budget = self.sandbox.timeout_s
            self.sandbox.run(self.writer, {"op": "script", "statements": admission.statements, "budget_s": budget},
                             budget, result)
            if result.error is None and inspect is not None:
                inspected = inspect(self)
        finally:
            self._undo()
        return result, inspected

    def _undo(self) -> None:
        if self.writer.running:
            try:
                self.writer.call({"op": "undo"}, HARNESS_S)
                return
            except EngineStopped:
                pass
        self.start()  # a new writer: a fresh copy, the transaction begun again

    def rows(self, query: str, params: QueryParams = None) -> list[HarnessRow]:
        """A harness query (trusted SQL) in the current state."""
        return cast("list[HarnessRow]", self._inspect({"op": "rows", "query": query, "params": params}))  # op_rows's

    def fingerprint(self, statements: Sequence[str]) -> Fingerprint:
        """The whole database (the engine computes it: only the digests cross the pipe)."""
        return cast("Fingerprint", self._inspect({"op": "fingerprint"}))  # what the engine's op_fingerprint returns

    def _inspect(self, request: Mapping[str, object]) -> object:
        if not self.writer.running:  # a new writer would not be in this transaction
            raise DatabaseUnavailable("the transaction's engine process stopped")
        return harness_call(self.writer, request)


def harness_call(process: EngineProcess, request: Mapping[str, object]) -> object:
    """The harness's own request: a child that stops on it is the database failing."""
    try:
        return process.call(request, HARNESS_S)
    except EngineStopped as exc:
        raise DatabaseUnavailable(str(exc)) from None


def scratch_folder(engine: str) -> Path:
    """A private folder for one sandbox's children (working copy, spill files, crash log);
    those left by harnesses that died (their pid no longer runs) are removed first."""
    base = Path(tempfile.gettempdir())
    for stale in base.glob(f"evalbench-{engine}-*-*"):
        pid = stale.name.split("-")[2]
        if pid.isdigit() and not _alive(int(pid)) and stale.stat().st_uid == os.getuid():
            shutil.rmtree(stale, ignore_errors=True)
    return Path(tempfile.mkdtemp(prefix=f"evalbench-{engine}-{os.getpid()}-"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True

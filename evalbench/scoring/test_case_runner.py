"""Runs BIRD-Interact Management test cases in a child process (``python -m
evalbench.scoring.test_case_runner``): a JSON spec on stdin, a JSON verdict on stdout.

The child connects with the sandbox's (non-superuser) conninfo, begins one READ WRITE
transaction, runs ``preprocess_sql``, the predicted SQL once (as BIRD-Interact's harness does),
then ``test_case(pred_sqls, sol_sqls, db_name, conn)`` with
BIRD-Interact's helpers injected into its globals, and always rolls back (sequences, which are not
transactional, are restored afterwards). Every statement the helpers run is wrapped in a savepoint,
so an error undoes that statement only — BIRD-Interact commits each statement and rolls back the
failed one, which this reproduces without anything persisting.

The parent side (:func:`run_test_case`) kills the child on timeout.
"""

from __future__ import annotations

import json
import subprocess
import sys
import traceback
from dataclasses import dataclass
from typing import Any, Sequence

MAX_ROWS = 10000  # BIRD-Interact's cap on fetched rows

_SEQUENCE_STATE = """
SELECT format('%I.%I', schemaname, sequencename), COALESCE(last_value, start_value), last_value IS NOT NULL
FROM pg_sequences
"""


@dataclass(frozen=True)
class TestCaseVerdict:
    passed: bool
    kind: str  # "passed", "assertion", "error", "timeout", "preprocess", "connection", "crash"
    message: str = ""


# ----------------------------------------------------------------------------- parent side


def run_test_case(
    conninfo: str,
    test_case: str,
    pred_sqls: Sequence[str],
    sol_sqls: Sequence[str],
    *,
    db_name: str = "",
    preprocess_sql: Sequence[str] = (),
    clean_up_sqls: Sequence[str] = (),
    timeout_s: float = 30.0,
    statement_timeout_s: float = 10.0,
    run_pred_first: bool = True,
) -> TestCaseVerdict:
    """Run one test case in a separate process; never raises."""
    spec = {
        "conninfo": conninfo,
        "test_case": test_case,
        "pred_sqls": list(pred_sqls),
        "sol_sqls": list(sol_sqls),
        "db_name": db_name,
        "preprocess_sql": list(preprocess_sql),
        "clean_up_sqls": list(clean_up_sqls),
        "statement_timeout_ms": max(1, int(statement_timeout_s * 1000)),
        "run_pred_first": run_pred_first,
    }
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "evalbench.scoring.test_case_runner"],
            input=json.dumps(spec),
            capture_output=True,
            text=True,
            timeout=timeout_s,
        )
    except subprocess.TimeoutExpired:  # subprocess.run kills the child; the server rolls back
        return TestCaseVerdict(False, "timeout", f"timeout: the test case ran longer than {timeout_s:g} s")
    lines = [line for line in proc.stdout.splitlines() if line.strip()]
    try:
        verdict = json.loads(lines[-1])
        return TestCaseVerdict(bool(verdict["passed"]), str(verdict["kind"]), str(verdict.get("message", "")))
    except (IndexError, ValueError, KeyError, TypeError):
        tail = (proc.stderr or proc.stdout or "").strip().splitlines()[-3:]
        return TestCaseVerdict(False, "crash", f"test case runner exited with {proc.returncode}: {' | '.join(tail)}")


# ------------------------------------------------------------------------------ child side


class _GuardedConnection:
    """What test cases get as ``conn``: cursors work, but transaction control is a no-op so
    nothing can be committed."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn

    def commit(self) -> None:
        pass

    def rollback(self) -> None:
        pass

    def close(self) -> None:
        pass

    def cursor(self, *args: Any, **kwargs: Any) -> Any:
        return self._conn.cursor(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name in {"execute", "autocommit", "transaction", "set_autocommit"}:
            raise AttributeError(f"conn.{name} is not available to test cases")
        return getattr(self._conn, name)


class _Helpers:
    def __init__(self, conn: Any, statement_timeout_ms: int) -> None:
        self.conn = conn
        self.timeout = statement_timeout_ms
        self.counter = 0
        self.errors: list[str] = []  # SQL errors the helpers swallowed, for the failure message
        self.agent_statements: set[str] = set()  # run through the extended protocol: one command each

    def run_statement(self, statement: str) -> Any:
        """One statement under a savepoint; returns its rows (None when it returns none)."""
        import psycopg

        self.counter += 1
        savepoint = f"evalbench_tc_{self.counter}"
        self.conn.execute(f"SAVEPOINT {savepoint}")
        self.conn.execute(f"SET LOCAL statement_timeout = {self.timeout}")
        try:
            if statement in self.agent_statements:
                cursor = self.conn.execute(statement, binary=True)
            else:
                cursor = self.conn.execute(statement)
            rows = cursor.fetchmany(MAX_ROWS) if cursor.description is not None else None
        except psycopg.Error as exc:
            if self.conn.closed:
                raise
            self.errors.append(f"{' '.join(statement.split())[:120]}: {str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}")
            self.conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}")
            self.conn.execute(f"RELEASE SAVEPOINT {savepoint}")
            raise
        self.conn.execute(f"RELEASE SAVEPOINT {savepoint}")
        return rows

    def perform_query_on_postgresql_databases(self, query: str, db_name: str = "", conn: Any = None) -> tuple[Any, Any]:
        from evalbench.db.statements import split_statements

        result = None
        for statement in split_statements(query) or [query]:
            result = self.run_statement(statement)
        return result, conn

    def execute_queries(self, queries: Any, db_name: str = "", conn: Any = None, logger: Any = None,
                        section_title: str = "", is_solution: bool = True) -> tuple[Any, bool, bool]:
        import psycopg

        if isinstance(queries, str):
            queries = [queries]
        result = None
        error = timeout = False
        for query in queries or []:
            try:
                result, _ = self.perform_query_on_postgresql_databases(query, db_name, conn)
                continue
            except psycopg.errors.QueryCanceled:
                if is_solution:
                    timeout = True
            except psycopg.OperationalError:
                error = True
                if self.conn.closed:
                    raise
            except psycopg.Error:
                if is_solution:
                    error = True
            except Exception:  # noqa: BLE001 — BIRD-Interact counts anything else as an error
                error = True
            break  # as BIRD-Interact: the queries after a failing one are not run
        return result, error, timeout

    def ex_base(self, pred_sqls: Any, sol_sqls: Any, db_name: str = "", conn: Any = None, conditions: Any = None) -> int:
        """1 when both run without error and return the same rows (as sets, or as lists when
        ``conditions`` says order matters), else 0."""
        if not pred_sqls or not sol_sqls:
            return 0
        pred, pred_err, pred_to = self.execute_queries(pred_sqls, db_name, conn, is_solution=False)
        sol, sol_err, sol_to = self.execute_queries(sol_sqls, db_name, conn, is_solution=True)
        if pred_err or pred_to or sol_err or sol_to or pred is None or sol is None:
            return 0
        ordered = bool(conditions and conditions.get("order"))
        normalize = _normalize_rows
        if ordered:
            return int(normalize(pred) == normalize(sol))
        return int(set(normalize(pred)) == set(normalize(sol)))

    def globals(self) -> dict[str, Any]:
        return {
            "__name__": "evalbench_test_case",
            "__builtins__": __builtins__,
            "execute_queries": self.execute_queries,
            "perform_query_on_postgresql_databases": self.perform_query_on_postgresql_databases,
            "ex_base": self.ex_base,
        }


def _normalize_rows(rows: Any) -> list[tuple[Any, ...]]:
    from decimal import Decimal

    def cell(value: Any) -> Any:
        if isinstance(value, (float, Decimal)):
            return round(float(value), 2)
        if isinstance(value, (list, dict)):
            return json.dumps(value, sort_keys=True, default=str)
        return value

    return [tuple(cell(v) for v in row) for row in rows or []]


def _execute(spec: dict[str, Any]) -> dict[str, Any]:
    import psycopg

    from evalbench.db.statements import WRITE_KEYWORDS, split_statements, statement_kind

    timeout_ms = int(spec.get("statement_timeout_ms", 10000))
    try:
        raw = psycopg.connect(spec["conninfo"], autocommit=True, connect_timeout=15,
                              options=f"-c statement_timeout={timeout_ms}")
    except psycopg.Error as exc:
        return {"passed": False, "kind": "connection", "message": f"cannot connect: {exc}".strip()}
    sequences: list[tuple[Any, ...]] = []
    try:
        sequences = raw.execute(_SEQUENCE_STATE).fetchall()
        raw.execute("BEGIN READ WRITE")
        raw.execute(f"SET LOCAL statement_timeout = {timeout_ms}")
        for text in spec.get("preprocess_sql") or []:
            try:
                raw.execute(text)  # trusted dataset SQL
            except psycopg.Error as exc:
                return {"passed": False, "kind": "preprocess", "message": f"preprocess_sql failed: {exc}".strip()}
        helpers = _Helpers(raw, timeout_ms)
        namespace = helpers.globals()
        pred_sqls = [s for text in spec["pred_sqls"] for s in split_statements(text)]
        for statement in pred_sqls:
            verb, _ = statement_kind(statement)
            if verb not in WRITE_KEYWORDS:
                return {"passed": False, "kind": "forbidden",
                        "message": f"{verb or 'this'} statements are not allowed in the agent's SQL"}
        helpers.agent_statements.update(pred_sqls)
        if spec.get("run_pred_first", True):
            # BIRD-Interact's harness runs the predicted SQL once before the test cases (which
            # may run it again themselves); its errors surface through the test case's checks
            helpers.execute_queries(pred_sqls, spec.get("db_name", ""), None, is_solution=False)
        try:
            exec(compile(spec["test_case"], "<test_case>", "exec"), namespace)  # noqa: S102 — trusted dataset code
            test_case = namespace.get("test_case")
            if not callable(test_case):
                return {"passed": False, "kind": "error", "message": "the test case defines no test_case function"}
            test_case(pred_sqls, list(spec["sol_sqls"]), spec.get("db_name", ""), _GuardedConnection(raw))
        except AssertionError as exc:
            message = f"assertion failed: {exc}" if str(exc) else "assertion failed"
            return {"passed": False, "kind": "assertion", "message": message + _sql_errors(helpers)}
        except Exception as exc:  # noqa: BLE001
            last = traceback.extract_tb(exc.__traceback__)[-1:]
            where = f" (line {last[0].lineno})" if last and last[0].filename == "<test_case>" else ""
            return {"passed": False, "kind": "error", "message": f"{type(exc).__name__}: {exc}{where}" + _sql_errors(helpers)}
        for text in spec.get("clean_up_sqls") or []:
            try:
                helpers.run_statement(text)
            except psycopg.Error:
                pass  # everything is rolled back anyway
        return {"passed": True, "kind": "passed", "message": ""}
    finally:
        try:
            raw.execute("ROLLBACK")
            if sequences:
                _restore_sequences(raw, sequences)
        except psycopg.Error:
            pass
        raw.close()


def _sql_errors(helpers: _Helpers) -> str:
    if not helpers.errors:
        return ""
    more = f" (and {len(helpers.errors) - 1} more)" if len(helpers.errors) > 1 else ""
    return f" [SQL error during the test: {helpers.errors[0]}{more}]"


def _restore_sequences(conn: Any, state: list[tuple[Any, ...]]) -> None:
    import psycopg
    from psycopg import sql

    current = dict((name, (value, called)) for name, value, called in conn.execute(_SEQUENCE_STATE).fetchall())
    changed = [(n, v, c) for n, v, c in state if current.get(n) != (v, c)]
    if not changed:
        return
    names, values, called = zip(*changed)
    restore = sql.SQL(
        "BEGIN READ WRITE; SELECT setval(s::regclass, v, c) FROM unnest({}::text[], {}::bigint[], {}::bool[]) AS x(s, v, c); COMMIT"
    ).format(sql.Literal(list(names)), sql.Literal(list(values)), sql.Literal(list(called)))
    try:
        conn.execute(restore)
    except psycopg.Error:
        conn.execute("ROLLBACK")


def main() -> None:
    spec = json.loads(sys.stdin.read())
    out = sys.stdout
    sys.stdout = sys.stderr  # what test cases print cannot be mistaken for the verdict
    try:
        verdict = _execute(spec)
    except Exception as exc:  # noqa: BLE001
        verdict = {"passed": False, "kind": "crash", "message": f"{type(exc).__name__}: {exc}"}
    sys.stdout = out
    sys.stdout.write("\n" + json.dumps(verdict) + "\n")
    sys.stdout.flush()


if __name__ == "__main__":
    main()

"""Runs BIRD-Interact Management test cases in a child process (``python -m
evalbench.scoring.test_case_runner``): a JSON spec on stdin, one JSON verdict line per test case
on stdout.

Two ways, both leaving nothing behind:

- **on a copy** (``clone``: the conninfo of a throwaway copy of the database, see
  :mod:`evalbench.db.clones`) — as BIRD-Interact's harness does it: every statement is committed
  on its own (so each has its own transaction clock: ``NOW()`` advances, and the golden and
  predicted SQL never share a transaction), a failing statement is rolled back alone; the phase's
  ``preprocess_sql``, the predicted SQL once, then the test cases in order, on one connection;
- **in one transaction** (no copy could be made): each test case in its own READ WRITE
  transaction that is always rolled back (sequences restored), every statement under a savepoint.

Each test case is ``test_case(pred_sqls, sol_sqls, db_name, conn)`` with BIRD-Interact's helpers
(``execute_queries``, ``perform_query_on_postgresql_databases``, ``ex_base``) in its globals; it
passes when it returns. The parent side (:func:`run_test_cases`) kills the child on timeout.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import traceback
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator, Sequence

from evalbench.scoring.test_case_helpers import GuardedConnection, Helpers

VERDICT_PREFIX = "evalbench-test-case-verdict "  # what the child writes, one line per test case

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


def run_test_cases(
    conninfo: str,
    cases: Sequence[str],
    pred_sqls: Sequence[str],
    sol_sqls: Sequence[str],
    *,
    db_name: str = "",
    preprocess_sql: Sequence[str] = (),
    clean_up_sqls: Sequence[str] = (),
    timeout_s: float = 30.0,
    statement_timeout_s: float = 10.0,
    run_pred_first: bool = True,
    clone: str | None = None,
    preprocess_errors: str = "fail",
) -> list[TestCaseVerdict]:
    """Run a phase's test cases in one child process: one verdict per case; never raises.
    ``clone``: the conninfo of a throwaway copy to run them on, each statement committed."""
    if not cases:
        return []
    spec = {
        "conninfo": clone or conninfo,
        "commit_each": clone is not None,
        "test_cases": list(cases),
        "pred_sqls": list(pred_sqls),
        "sol_sqls": list(sol_sqls),
        "db_name": db_name,
        "preprocess_sql": list(preprocess_sql),
        "clean_up_sqls": list(clean_up_sqls),
        "statement_timeout_ms": max(1, int(statement_timeout_s * 1000)),
        "case_timeout_s": timeout_s,
        "run_pred_first": run_pred_first,
        "preprocess_errors": preprocess_errors,
    }
    total = timeout_s * len(cases) + 10.0  # each case is timed in the child; this is the backstop
    try:
        proc = subprocess.run([sys.executable, "-m", "evalbench.scoring.test_case_runner"], input=json.dumps(spec),
                              capture_output=True, text=True, timeout=total)
        out, err, code = proc.stdout, proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:  # subprocess.run kills the child; the server rolls back
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        err, code = f"timeout: the test cases ran longer than {total:g} s", None
    verdicts = _read_verdicts(out)
    if len(verdicts) < len(cases):
        tail = " | ".join((err or out or "").strip().splitlines()[-3:])
        why = TestCaseVerdict(False, "timeout", f"timeout: the test case ran longer than {timeout_s:g} s") if code is None \
            else TestCaseVerdict(False, "crash", f"test case runner exited with {code}: {tail}")
        verdicts += [why] * (len(cases) - len(verdicts))
    return verdicts


def run_test_case(conninfo: str, test_case: str, pred_sqls: Sequence[str], sol_sqls: Sequence[str],
                  **options: Any) -> TestCaseVerdict:
    """One test case (see :func:`run_test_cases`)."""
    return run_test_cases(conninfo, [test_case], pred_sqls, sol_sqls, **options)[0]


def _read_verdicts(out: str) -> list[TestCaseVerdict]:
    verdicts = []
    for line in out.splitlines():
        if not line.startswith(VERDICT_PREFIX):
            continue
        try:
            data = json.loads(line[len(VERDICT_PREFIX):])
            verdicts.append(TestCaseVerdict(bool(data["passed"]), str(data["kind"]), str(data.get("message", ""))))
        except (ValueError, KeyError, TypeError):
            continue
    return verdicts


# ------------------------------------------------------------------------------ child side


def _execute(spec: dict[str, Any], emit: Any) -> None:
    """Run the spec's test cases, calling ``emit(verdict)`` for each as it finishes."""
    import psycopg

    timeout_ms = int(spec.get("statement_timeout_ms", 10000))
    commit_each = bool(spec.get("commit_each"))
    cases = list(spec["test_cases"])
    try:
        conn = psycopg.connect(spec["conninfo"], autocommit=not commit_each, connect_timeout=15,
                               options=f"-c statement_timeout={timeout_ms}")
    except psycopg.Error as exc:
        for _ in cases:
            emit({"passed": False, "kind": "connection", "message": f"cannot connect: {exc}".strip()})
        return
    try:
        if commit_each:  # on a throwaway copy, as BIRD-Interact: everything in order, each statement committed
            helpers, problem = _prepare(conn, spec, timeout_ms, commit_each=True)
            for case in cases:
                emit(problem or _run_case(case, helpers, spec))
            helpers.execute_queries(list(spec.get("clean_up_sqls") or []), spec.get("db_name", ""), None)
        else:
            for case in cases:  # each test case in its own transaction, always rolled back
                emit(_in_transaction(conn, case, spec, timeout_ms))
    finally:
        conn.close()


def _in_transaction(conn: Any, case: str, spec: dict[str, Any], timeout_ms: int) -> dict[str, Any]:
    import psycopg

    sequences = conn.execute(_SEQUENCE_STATE).fetchall()
    try:
        conn.execute("BEGIN READ WRITE")
        conn.execute(f"SET LOCAL statement_timeout = {timeout_ms}")
        helpers, problem = _prepare(conn, spec, timeout_ms, commit_each=False)
        return problem or _run_case(case, helpers, spec)
    finally:
        try:
            conn.execute("ROLLBACK")
            if sequences:
                _restore_sequences(conn, sequences)
        except psycopg.Error:
            pass


def _prepare(conn: Any, spec: dict[str, Any], timeout_ms: int, commit_each: bool) -> tuple[Helpers, dict[str, Any] | None]:
    """The phase's preprocess SQL, then the predicted SQL once (as BIRD-Interact's harness does;
    test cases may run it again themselves): the helpers, or the verdict every case gets."""
    from evalbench.db.statements import WRITE_KEYWORDS, split_statements, statement_kind

    helpers = Helpers(conn, timeout_ms, commit_each)
    preprocess = list(spec.get("preprocess_sql") or [])
    _, error, timeout = helpers.execute_queries(preprocess, spec.get("db_name", ""), None)
    if (error or timeout) and spec.get("preprocess_errors", "fail") != "stop":
        return helpers, {"passed": False, "kind": "preprocess",
                         "message": f"preprocess_sql failed: {helpers.errors[-1] if helpers.errors else 'timeout'}"}
    helpers.errors.clear()
    pred_sqls = [s for text in spec["pred_sqls"] for s in split_statements(text)]
    for statement in pred_sqls:
        verb, _ = statement_kind(statement)
        if verb not in WRITE_KEYWORDS:
            return helpers, {"passed": False, "kind": "forbidden",
                             "message": f"{verb or 'this'} statements are not allowed in the agent's SQL"}
    helpers.agent_statements.update(pred_sqls)
    spec["_pred_statements"] = pred_sqls
    if spec.get("run_pred_first", True):
        helpers.pred_query_result, _, _ = helpers.execute_queries(pred_sqls, spec.get("db_name", ""), None, is_solution=False)
    return helpers, None


def _run_case(source: str, helpers: Helpers, spec: dict[str, Any]) -> dict[str, Any]:
    """One test case: passed when ``test_case`` returns; its assertion or error otherwise."""
    helpers.errors.clear()
    namespace = helpers.globals()
    try:
        with _deadline(float(spec.get("case_timeout_s") or 30.0)):
            exec(compile(source, "<test_case>", "exec"), namespace)  # noqa: S102 — the dataset's test code
            test_case = namespace.get("test_case")
            if not callable(test_case):
                return {"passed": False, "kind": "error", "message": "the test case defines no test_case function"}
            test_case(spec["_pred_statements"], list(spec["sol_sqls"]), spec.get("db_name", ""),
                      GuardedConnection(helpers.conn, helpers.commit_each))
    except AssertionError as exc:
        message = f"assertion failed: {exc}" if str(exc) else "assertion failed"
        return {"passed": False, "kind": "assertion", "message": message + _sql_errors(helpers)}
    except CaseTimeout:
        return {"passed": False, "kind": "timeout",
                "message": f"timeout: the test case ran longer than {spec.get('case_timeout_s')} s"}
    except Exception as exc:  # noqa: BLE001
        last = traceback.extract_tb(exc.__traceback__)[-1:]
        where = f" (line {last[0].lineno})" if last and last[0].filename == "<test_case>" else ""
        return {"passed": False, "kind": "error", "message": f"{type(exc).__name__}: {exc}{where}" + _sql_errors(helpers)}
    return {"passed": True, "kind": "passed", "message": ""}


class CaseTimeout(BaseException):
    """Raised in the child when a test case runs past its time (not an Exception: test code
    catching ``Exception`` cannot swallow it)."""


@contextmanager
def _deadline(seconds: float) -> Iterator[None]:
    def expire(signum: int, frame: Any) -> None:
        raise CaseTimeout()

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def _sql_errors(helpers: Helpers) -> str:
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
    sys.stdout = sys.stderr  # what test cases print cannot be mistaken for a verdict

    def emit(verdict: dict[str, Any]) -> None:
        out.write("\n" + VERDICT_PREFIX + json.dumps(verdict) + "\n")
        out.flush()

    try:
        _execute(spec, emit)
    except Exception as exc:  # noqa: BLE001 — the parent reports the cases with no verdict as crashed
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()

"""The test-case runner process (``python -m evalbench.scoring.test_case_server``): it holds the
database connection — as the sandbox role, to a throwaway copy or inside one transaction that is
always rolled back — runs the phase's preprocessing and the predicted SQL once, then starts the
confined process that runs the test code (:mod:`evalbench.scoring.test_case_jail`) and answers
its SQL requests with BIRD-Interact's helpers (:mod:`evalbench.scoring.test_case_helpers`).

It reads a JSON spec on stdin and writes one verdict line per test case on stdout; it never runs
dataset code itself, and decodes from the confined process only JSON (tagged query parameters),
never pickles.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import pickle
import select
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from decimal import Decimal
from typing import IO, TYPE_CHECKING, Any, TypedDict

from evalbench.scoring.test_case_helpers import Helpers, Rows
from evalbench.scoring.test_case_runner import VERDICT_PREFIX, scrubbed_environment

if TYPE_CHECKING:
    import psycopg
    from psycopg.rows import TupleRow

    from evalbench.scoring.test_case_jail import CaseVerdict


class ServerSpec(TypedDict, total=False):
    """What the runner reads on stdin (built by :func:`evalbench.scoring.test_case_runner.run_test_cases`)."""

    conninfo: str
    commit_each: bool
    test_cases: list[str]
    pred_sqls: list[str]
    pred_statements: list[str]  # pred_sqls split into statements (set by prepare)
    sol_sqls: list[str]
    db_name: str
    preprocess_sql: list[str]
    clean_up_sqls: list[str]
    statement_timeout_ms: int
    case_timeout_s: float
    run_pred_first: bool
    preprocess_errors: str


class JailMessage(TypedDict, total=False):
    """A request or report from the confined process (JSON: every field as it was sent)."""

    op: str
    index: int
    passed: bool
    kind: str
    message: str
    applied: list[str]
    queries: list[str]
    is_solution: bool
    query: str
    sql: str
    params: object


Emit = Callable[["CaseVerdict"], None]

_SEQUENCE_STATE = """
SELECT format('%I.%I', schemaname, sequencename), COALESCE(last_value, start_value), last_value IS NOT NULL
FROM pg_sequences
"""
GRACE_S = 5.0  # beyond a test case's own timeout, before the confined process is killed
MAX_FRAME = 64 << 20  # bytes of one request from the confined process


def serve(spec: ServerSpec, emit: Emit) -> None:
    """Run the spec's test cases, calling ``emit(verdict)`` for each as it finishes."""
    import psycopg

    timeout_ms = int(spec.get("statement_timeout_ms", 10000))
    commit_each = bool(spec.get("commit_each"))
    cases = list(spec["test_cases"])
    try:
        conn = psycopg.connect(spec["conninfo"], autocommit=not commit_each, connect_timeout=15,
                               prepare_threshold=None, options=f"-c statement_timeout={timeout_ms}")
    except psycopg.Error as exc:
        for _ in cases:
            emit({"passed": False, "kind": "connection", "message": f"cannot connect: {exc}".strip()})
        return
    sequences: Rows = []
    try:
        if not commit_each:  # one transaction for the phase, always rolled back
            sequences = conn.execute(_SEQUENCE_STATE).fetchall()
            conn.execute("BEGIN READ WRITE")
            conn.execute(f"SET LOCAL statement_timeout = {timeout_ms}")
        helpers, problem = prepare(conn, spec, timeout_ms, commit_each)
        if problem is not None:
            for _ in cases:
                emit(problem)
            return
        Jail(helpers, spec, emit).run(cases)
        if commit_each:
            helpers.execute_queries(list(spec.get("clean_up_sqls") or []), spec.get("db_name", ""), None)
    finally:
        _finish(conn, commit_each, sequences)  # on a copy, the parent resets the role's own settings (clones.reset_role)


def prepare(conn: psycopg.Connection[TupleRow], spec: ServerSpec, timeout_ms: int,
            commit_each: bool) -> tuple[Helpers, CaseVerdict | None]:
    """The phase's preprocess SQL, then the predicted SQL once (as BIRD-Interact's harness does;
    test cases may run it again): the helpers, or the verdict every case gets."""
    from evalbench.sql.statements import WRITE_KEYWORDS, split_statements, statement_kind

    helpers = Helpers(conn, timeout_ms, commit_each)
    _, error, timeout = helpers.execute_queries(list(spec.get("preprocess_sql") or []), spec.get("db_name", ""), None)
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
    spec["pred_statements"] = pred_sqls
    if spec.get("run_pred_first", True):
        helpers.pred_query_result, error, timeout = helpers.run_unit(pred_sqls, spec.get("db_name", ""))
        if error or timeout:  # batch_eval: "[exec_err_flg]", the item fails before its test cases
            cause = f"timed out after {timeout_ms / 1000:g} s" if timeout else \
                (helpers.errors[-1] if helpers.errors else "failed")
            return helpers, {"passed": False, "kind": "execution",
                             "message": f"the agent's SQL failed, so no test case ran: {cause}"}
    return helpers, None


class Jail:
    """The confined process of one phase, and the answers to its requests."""

    def __init__(self, helpers: Helpers, spec: ServerSpec, emit: Emit) -> None:
        self.helpers, self.spec, self.emit = helpers, spec, emit
        self.case_timeout = float(spec.get("case_timeout_s") or 30.0)
        self.applied: list[str] = []

    def run(self, cases: list[str]) -> None:
        to_jail_r, to_jail_w = os.pipe()
        from_jail_r, from_jail_w = os.pipe()
        proc = subprocess.Popen([sys.executable, "-m", "evalbench.scoring.test_case_jail", str(to_jail_r), str(from_jail_w)],
                                pass_fds=(to_jail_r, from_jail_w), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                stderr=subprocess.PIPE, env=scrubbed_environment())
        os.close(to_jail_r)
        os.close(from_jail_w)
        done = 0
        try:
            with os.fdopen(to_jail_w, "wb", buffering=0) as out, os.fdopen(from_jail_r, "rb", buffering=0) as into:
                _send(out, {"cases": cases, "pred_sqls": self.spec["pred_statements"], "sol_sqls": self.spec["sol_sqls"],
                            "db_name": self.spec.get("db_name", ""), "case_timeout_s": self.case_timeout,
                            "pred_query_result": self.helpers.pred_query_result})
                done = self._serve(out, into, len(cases))
        except (OSError, ValueError) as exc:
            self._fail_rest(done, len(cases), "crash", f"the confined test-case process failed: {exc}")
        finally:
            proc.kill()
            stderr = proc.communicate()[1].decode("utf-8", "replace")[-2000:]
        if done < len(cases) and stderr.strip():
            print(stderr, file=sys.stderr)

    def _serve(self, out: IO[bytes], into: IO[bytes], count: int) -> int:
        """Answer requests until every case has a verdict; the number of verdicts emitted."""
        done = 0
        self.helpers.errors.clear()
        deadline = time.monotonic() + self.case_timeout + GRACE_S + 10.0  # start-up and confinement
        while done < count:
            message = _receive(into, deadline)
            if message is None:
                self._fail_rest(done, count, "timeout", f"timeout: the test case ran longer than {self.case_timeout:g} s")
                return count
            op = message.get("op")
            if op == "verdict":
                verdict: CaseVerdict = {"passed": message.get("passed") is True, "kind": str(message.get("kind")),
                           "message": str(message.get("message") or "")}
                if not verdict["passed"] and self.helpers.errors:  # the SQL errors the helpers swallowed
                    errors = self.helpers.errors
                    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
                    verdict["message"] += f" [SQL error during the test: {errors[0]}{more}]"
                self.helpers.errors.clear()
                self.emit(verdict)
                done += 1
                deadline = time.monotonic() + self.case_timeout + GRACE_S
            elif op == "confined":
                self.applied = [str(a) for a in message.get("applied") or []]
            elif op == "done":
                break
            else:
                _send(out, self._answer(message))
        self._fail_rest(done, count, "crash", "the confined test-case process stopped early")
        return count

    def _answer(self, message: JailMessage) -> object:
        import psycopg

        op, helpers = message.get("op"), self.helpers
        try:
            if op == "execute_queries":
                queries = [str(q) for q in message.get("queries") or []]
                return helpers.execute_queries(queries, "", None, is_solution=bool(message.get("is_solution", True)))
            if op == "perform_query":
                return helpers.perform_query_on_postgresql_databases(str(message.get("query")))[0]
            if op == "cursor":
                return helpers.cursor_execute(str(message.get("sql")), decode(message.get("params")))
            if op in ("commit", "rollback"):
                helpers.transaction_control(op)
                return None
        except (psycopg.Error, ValueError) as exc:
            return {"error": str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__}
        return {"error": f"unknown request {op!r}"}

    def _fail_rest(self, done: int, count: int, kind: str, message: str) -> None:
        for _ in range(done, count):
            self.emit({"passed": False, "kind": kind, "message": message})


def _send(stream: IO[bytes], value: object) -> None:
    payload = pickle.dumps(value)
    stream.write(struct.pack(">I", len(payload)) + payload)


def _receive(stream: IO[bytes], deadline: float) -> JailMessage | None:
    """One JSON frame from the confined process; None when it is late or gone."""
    head = _read(stream, 4, deadline)
    if head is None:
        return None
    size = struct.unpack(">I", head)[0]
    if size > MAX_FRAME:
        return None
    payload = _read(stream, size, deadline)
    if payload is None:
        return None
    try:
        message: JailMessage = json.loads(payload.decode("utf-8", "replace"))
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _read(stream: IO[bytes], size: int, deadline: float) -> bytes | None:
    data = b""
    while len(data) < size:
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([stream], [], [], remaining)[0]:
            return None
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return data


def decode(value: object) -> Any:  # query parameters, as test code passed them: psycopg checks them
    """Query parameters from the confined process: JSON, with tags for the other types."""
    if isinstance(value, list):
        return [decode(v) for v in value]
    if isinstance(value, dict):
        if len(value) == 1:
            (tag, raw), = value.items()
            makers: dict[str, Callable[[str], object]] = {"$decimal": Decimal, "$datetime": dt.datetime.fromisoformat, "$date": dt.date.fromisoformat,
                      "$time": dt.time.fromisoformat, "$interval": lambda s: dt.timedelta(seconds=float(s)),
                      "$bytes": bytes.fromhex, "$uuid": uuid.UUID}
            if tag in makers:
                return makers[tag](raw)
        return {str(k): decode(v) for k, v in value.items()}
    return value


def _finish(conn: psycopg.Connection[TupleRow], commit_each: bool, sequences: Rows) -> None:
    import psycopg

    try:
        if not commit_each:
            conn.execute("ROLLBACK")
            if sequences:
                _restore_sequences(conn, sequences)
    except psycopg.Error:
        pass
    conn.close()


def _restore_sequences(conn: psycopg.Connection[TupleRow], state: Rows) -> None:
    import psycopg
    from psycopg import sql

    current = {name: (value, called) for name, value, called in conn.execute(_SEQUENCE_STATE).fetchall()}
    changed = [(n, v, c) for n, v, c in state if current.get(n) != (v, c)]
    if not changed:
        return
    names, values, called = zip(*changed, strict=True)
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

    def emit(verdict: CaseVerdict) -> None:
        out.write("\n" + VERDICT_PREFIX + json.dumps(verdict) + "\n")
        out.flush()

    try:
        serve(spec, emit)
    except Exception as exc:  # noqa: BLE001 — the parent reports the cases with no verdict as crashed
        print(f"{type(exc).__name__}: {exc}", file=sys.stderr)


if __name__ == "__main__":
    main()

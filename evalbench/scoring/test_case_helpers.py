"""BIRD-Interact's test-case helpers, executed by the test-case runner on its connection (the
confined process that runs the test code calls them over a pipe: evalbench.scoring.test_case_jail).

The helpers are those BIRD-Interact's ``single_instance_eval_postgresql.py::run_test_case`` gives
a test case, written anew with the same behaviour: ``execute_queries`` and
``perform_query_on_postgresql_databases`` (``evaluation/src/postgresql_utils.py``: a statement
whose text starts with ``select``/``with`` yields at most 10,000 rows, any other all its rows or
None; the queries after a failing one are not run), ``ex_base``, ``preprocess_results``,
``remove_distinct`` and ``check_sql_function_usage`` (``postgresql_test_utils.py``: ``ex_base``
compares two results as Python sets after turning dates into ``YYYY-MM-DD`` text, with no
rounding), ``pred_query_result`` (the rows of the harness's own run of the predicted SQL) and
``date``; and what ``conn.cursor()``, ``conn.commit()`` and ``conn.rollback()`` do.

A statement is committed on its own when the test cases run on a throwaway copy (``commit_each``),
as upstream does, or runs under a savepoint of the one transaction that is rolled back at the end
(where transaction control and settings are refused).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal, TypedDict, overload

if TYPE_CHECKING:
    import psycopg
    from psycopg.abc import Params
    from psycopg.rows import TupleRow

Rows = list[tuple[object, ...]]  # the rows of a statement, as the driver reads them
Queries = str | Sequence[str] | None  # what a test case passes as ``queries``, ``pred_sqls`` or ``sol_sqls``
# a DB-API cursor's description: (name, type_code, display_size, internal_size, precision, scale, null_ok)
Description = list[tuple[str, int, None, None, None, None, None]]


class CursorAnswer(TypedDict):
    """What ``conn.cursor().execute`` of a test case gets back."""

    description: Description | None
    rows: Rows
    rowcount: int

MAX_ROWS = 10_000  # postgresql_utils.perform_query_on_postgresql_databases
TRANSACTION_CONTROL = frozenset({"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT", "SAVEPOINT", "RELEASE",
                                 "PREPARE", "SET", "RESET", "DISCARD"})


class Helpers:
    def __init__(self, conn: psycopg.Connection[TupleRow], statement_timeout_ms: int, commit_each: bool) -> None:
        self.conn = conn
        self.timeout = statement_timeout_ms
        self.commit_each = commit_each
        self.counter = 0
        self.errors: list[str] = []  # SQL errors the helpers swallowed, for the failure message
        self.agent_statements: set[str] = set()  # run through the extended protocol: one command each
        self.pred_query_result: Rows | None = None
        self.in_unit = False  # inside run_unit: statements are committed together at its end

    def run_unit(self, statements: list[str], db_name: str = "") -> tuple[Rows | None, bool, bool]:
        """The agent's script as BIRD-Interact's ``batch_eval`` runs a ``pred_sqls`` entry (one
        ``cursor.execute`` of the whole text, then a commit): one transaction, rolled back whole
        at its first error or timeout. (rows of the last statement, error, timeout)."""
        import psycopg

        self.in_unit = True
        try:
            result, error, timeout = self.execute_queries(statements, db_name, None)
        finally:
            self.in_unit = False
        if self.commit_each and not self.conn.closed:
            try:
                self.conn.rollback() if error or timeout else self.conn.commit()
            except psycopg.Error as exc:
                error = True
                self.errors.append(f"committing the agent's SQL: {exc}")
        return result, error, timeout

    @overload
    def run_statement(self, statement: str, params: Params | None = None, *,
                      cursor_result: Literal[False] = False) -> Rows | None: ...

    @overload
    def run_statement(self, statement: str, params: Params | None = None, *,
                      cursor_result: Literal[True]) -> CursorAnswer: ...

    def run_statement(self, statement: str, params: Params | None = None, *,
                      cursor_result: bool = False) -> Rows | CursorAnswer | None:
        """One statement, committed alone or under a savepoint; its rows (None when it returns
        none), or with ``cursor_result`` a DB-API-like description, rows and row count."""
        import psycopg

        from evalbench.sql.statements import statement_kind

        if not self.commit_each and statement_kind(statement)[0] in TRANSACTION_CONTROL:
            raise psycopg.ProgrammingError("transaction control is not available to test cases "
                                           "(conn.commit() and conn.rollback() are)")
        self.counter += 1
        savepoint = f"evalbench_tc_{self.counter}"
        if not self.commit_each:
            self.conn.execute(f"SAVEPOINT {savepoint}")
            self.conn.execute(f"SET LOCAL statement_timeout = {self.timeout}")
        try:
            if statement in self.agent_statements:
                cursor = self.conn.execute(statement, binary=True)
            else:
                cursor = self.conn.execute(statement, params) if params is not None else self.conn.execute(statement)
            rows: Rows | CursorAnswer | None = _fetch(cursor, statement) if not cursor_result else {
                "description": [(c.name, c.type_code, None, None, None, None, None) for c in cursor.description or []]
                or None, "rows": cursor.fetchmany(MAX_ROWS) if cursor.description else [], "rowcount": cursor.rowcount}
        except psycopg.Error as exc:
            if self.conn.closed:
                raise
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            self.errors.append(f"{' '.join(statement.split())[:120]}: {first}")
            self.conn.execute(f"ROLLBACK TO SAVEPOINT {savepoint}") if not self.commit_each else self.conn.rollback()
            raise
        if self.commit_each:
            if not self.in_unit:
                self.conn.commit()
        else:
            self.conn.execute(f"RELEASE SAVEPOINT {savepoint}")
        return rows

    def cursor_execute(self, statement: str, params: Params | None = None) -> CursorAnswer:
        """``conn.cursor().execute(statement, params)`` of a test case."""
        return self.run_statement(statement, params, cursor_result=True)

    def transaction_control(self, op: str) -> None:
        """``conn.commit()`` / ``conn.rollback()`` of a test case: real on a throwaway copy, nothing
        in the one-transaction mode (where nothing may be committed)."""
        if self.commit_each:
            self.conn.commit() if op == "commit" else self.conn.rollback()

    def perform_query_on_postgresql_databases(self, query: str, db_name: str = "",
                                              conn: object = None) -> tuple[Rows | None, object]:
        from evalbench.sql.statements import split_statements

        result = None
        for statement in split_statements(query) or [query]:
            result = self.run_statement(statement)
        return result, conn

    def execute_queries(self, queries: Queries, db_name: str = "", conn: object = None, logger: object = None,
                        section_title: str = "", is_solution: bool = True) -> tuple[Rows | None, bool, bool]:
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
            except Exception as exc:  # noqa: BLE001 — BIRD-Interact counts anything else as an error
                error = True
                self.errors.append(f"{' '.join(str(query).split())[:120]}: {type(exc).__name__}: {exc}")
            break  # as BIRD-Interact: the queries after a failing one are not run
        return result, error, timeout

    def ex_base(self, pred_sqls: Queries, sol_sqls: Queries, db_name: str = "", conn: object = None) -> int:
        """1 when both run without error, return rows, and the same set of rows (dates as text)."""
        if not pred_sqls or not sol_sqls:
            return 0
        pred, pred_err, pred_to = self.execute_queries(pred_sqls, db_name, conn)
        sol, sol_err, sol_to = self.execute_queries(sol_sqls, db_name, conn)
        if pred_err or pred_to or sol_err or sol_to or not pred or not sol:
            return 0
        return int(set(preprocess_results(pred)) == set(preprocess_results(sol)))

    def globals(self) -> dict[str, object]:
        return {
            "__name__": "evalbench_test_case",
            "__builtins__": __builtins__,
            "execute_queries": self.execute_queries,
            "perform_query_on_postgresql_databases": self.perform_query_on_postgresql_databases,
            "ex_base": self.ex_base,
            "preprocess_results": preprocess_results,
            "remove_distinct": remove_distinct,
            "check_sql_function_usage": check_sql_function_usage,
            "pred_query_result": self.pred_query_result,
            "date": dt.date,
        }


def _fetch(cursor: psycopg.Cursor[TupleRow], statement: str) -> Rows | None:
    if cursor.description is None:
        return None
    if statement.strip().lower().startswith(("select", "with")):
        return cursor.fetchmany(MAX_ROWS)
    return cursor.fetchall()


def preprocess_results(results: Iterable[Iterable[object]]) -> Rows:
    """Dates and timestamps as ``YYYY-MM-DD`` text (postgresql_test_utils.preprocess_results)."""
    return [tuple(v.strftime("%Y-%m-%d") if isinstance(v, dt.date) else v for v in row) for row in results]


def remove_distinct(sql_list: list[str]) -> list[str]:
    """Drop every whitespace-separated ``distinct`` token (postgresql_test_utils.remove_distinct)."""
    return [" ".join(token for token in query.split() if token.lower() != "distinct") for query in sql_list]


def check_sql_function_usage(sqls: list[str], required_keywords: list[str]) -> int:
    """1 when every keyword appears in the (lower-cased, joined) SQL, else 0."""
    if not sqls:
        return 0
    combined = " ".join(sql.lower() for sql in sqls)
    return int(all(keyword.lower() in combined for keyword in required_keywords))

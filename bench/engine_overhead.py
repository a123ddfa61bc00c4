"""Overhead of running SQLite and DuckDB in engine processes, per execution.

    python bench/engine_overhead.py [--executions 500]

On the demo database's SQLite and DuckDB builds (built in a temporary folder), the same queries
run (1) through the sandbox (admission, a pipe to a reused engine process, a rolled-back
transaction, rows read within the caps) and (2) on a bare connection in this process (a
transaction rolled back, all rows fetched). The difference, less the shared admission (sqlglot's
split and check, which every backend pays), is what the sandbox costs (the pipe to the engine
process, its checks, the caps); run it on the parent commit to compare with the sandbox that ran
the engine in the harness's process. The last line of each engine is what replacing a killed
engine process costs (the next execution after a kill starts a new one).
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import tempfile
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

from evalbench.backends import get_backend
from evalbench.backends.admission import admit
from evalbench.backends.base import SandboxLimits
from evalbench.backends.setup import find_setup
from evalbench.config import DatabaseConfig

SETUP = Path(__file__).resolve().parent.parent / "datasets" / "demo" / "setup"
QUERIES = {"one value": "SELECT 1", "a join (50 rows)": "SELECT o.order_id, c.customer_id FROM orders o "
           "JOIN customers c ON c.customer_id = o.customer_id ORDER BY o.order_id LIMIT 50"}


def _bare(engine: str, path: Path) -> Callable[[str], object]:
    if engine == "sqlite":
        conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)

        def run_sqlite(sql: str) -> object:
            conn.execute("BEGIN")
            rows = conn.execute(sql).fetchall()
            conn.execute("ROLLBACK")
            return rows
        return run_sqlite
    import duckdb

    cursor = duckdb.connect(str(path), read_only=True).cursor()

    def run_duckdb(sql: str) -> object:
        cursor.execute("BEGIN TRANSACTION READ ONLY")
        rows = cursor.execute(sql).fetchall()
        cursor.execute("ROLLBACK")
        return rows
    return run_duckdb


def _per_execution_ms(run: Callable[[str], object], sql: str, executions: int) -> float:
    for _ in range(20):
        run(sql)
    started = time.perf_counter()
    for _ in range(executions):
        run(sql)
    return (time.perf_counter() - started) / executions * 1000


# one call that never looks at the engine's interrupt: its process is killed at the budget
EXPENSIVE = {"sqlite": "SELECT instr(printf('%.*c', 16000000, 'a'), printf('%.*c', 8000000, 'a') || 'b')",
             "duckdb": "SELECT damerau_levenshtein(repeat('a', 40000), repeat('b', 40000))"}


def _replacement_ms(backend: object, config: DatabaseConfig, provisioned: object, engine: str) -> float:
    """How long the execution after a killed one takes (it starts a new engine process)."""
    sandbox = backend.open_sandbox(config, provisioned, SandboxLimits(pool_size=1, statement_timeout_s=0.2,  # type: ignore[attr-defined]
                                                                     max_rows=10), None)
    try:
        took = []
        for _ in range(3):
            assert sandbox.execute(EXPENSIVE[engine]).error_kind == "timeout"
            started = time.perf_counter()
            sandbox.execute("SELECT 1")
            took.append((time.perf_counter() - started) * 1000)
        return statistics.median(took)
    finally:
        sandbox.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--executions", type=int, default=500)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        for engine in ("sqlite", "duckdb"):
            backend = get_backend(engine)
            config = DatabaseConfig(database_name="greenleaf", dialect=engine, database_path=f"{folder}/{engine}")
            provisioned = backend.provision(config, find_setup(SETUP, "greenleaf", engine, backend.setup_dialects()), None)
            sandbox = backend.open_sandbox(config, provisioned, SandboxLimits(pool_size=1, statement_timeout_s=10,
                                                                             max_rows=10000), None)
            try:
                for label, sql in QUERIES.items():
                    harness = _per_execution_ms(sandbox.execute, sql, args.executions)
                    checks = _per_execution_ms(partial(admit, mode="read", dialect=engine, timeout_s=10), sql, args.executions)
                    bare = _per_execution_ms(_bare(engine, provisioned.handle), sql, args.executions)
                    print(f"{engine:7} {label:17} sandbox {harness:6.2f} ms (admission {checks:4.2f})  bare {bare:6.2f} ms  "
                          f"sandbox over bare {harness - checks - bare:5.2f} ms/execution")
                print(f"{engine:7} a replaced engine process: {_replacement_ms(backend, config, provisioned, engine):.0f} ms "
                      "(median of 3)")
            finally:
                sandbox.close()


if __name__ == "__main__":
    main()

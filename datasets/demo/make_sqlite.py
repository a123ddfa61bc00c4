"""Generate the SQLite build of the greenleaf demo dataset from its PostgreSQL source.

    .venv/bin/python datasets/demo/make_sqlite.py            # (re)write the SQLite files
    .venv/bin/python datasets/demo/make_sqlite.py --check    # verify them (no files written)

Writes ``setup/greenleaf/sqlite/{pre_setup,setup,post_setup}.sql`` and ``greenleaf_sqlite.jsonl``.
Every SQL text is transpiled by sqlglot (read postgres, write sqlite) after the explicit fixups
below, each of which says why sqlglot's output alone is not what SQLite needs. The data CSVs in
``setup/greenleaf/data`` are shared by both builds. The output is deterministic (same source,
same sqlglot version: same bytes); ``--check`` fails when the committed files are stale, when a
golden SQL fails on SQLite or when a Query item's golden result is empty.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sqlite3
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

HERE = Path(__file__).resolve().parent
DATABASE = "greenleaf"
SOURCE_JSONL = "greenleaf.jsonl"
TARGET_JSONL = "greenleaf_sqlite.jsonl"
SETUP_FILES = ("pre_setup", "setup", "post_setup")
# Recorded in the generated headers: another sqlglot version may write the same SQL differently.
GENERATOR = f"sqlglot {sqlglot.__version__}"
SQL_KEYS = ("sol_sql", "preprocess_sql", "clean_up_sqls")


class GenerationError(Exception):
    """A source SQL text this generator cannot turn into SQLite; the message names where."""


# --------------------------------------------------------------------------- fixups on the AST

# EXTRACT(<field> FROM x): sqlglot 30 writes EXTRACT unchanged for SQLite, which has no EXTRACT.
# STRFTIME returns text ('03'), so the value is cast to INTEGER, as PostgreSQL's is a number.
EXTRACT_FORMATS = {"YEAR": "%Y", "MONTH": "%m", "DAY": "%d", "HOUR": "%H", "MINUTE": "%M", "DOW": "%w", "DOY": "%j"}


def _extract_to_strftime(node: exp.Expression) -> exp.Expression:
    if not isinstance(node, exp.Extract):
        return node
    field = node.this.name.upper()
    if field not in EXTRACT_FORMATS:
        raise GenerationError(f"EXTRACT({field} FROM ...) has no SQLite STRFTIME format here")
    strftime = exp.Anonymous(this="STRFTIME", expressions=[exp.Literal.string(EXTRACT_FORMATS[field]), node.expression])
    return exp.Cast(this=strftime, to=exp.DataType.build("INTEGER"))


def _collapse_double_cast(node: exp.Expression) -> exp.Expression:
    # EXTRACT(...)::int became CAST(CAST(STRFTIME(...) AS INTEGER) AS INT): one cast is enough.
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Cast) and node.to.is_type(*exp.DataType.INTEGER_TYPES):
        return node.this
    return node


def _without_public_schema(node: exp.Expression) -> exp.Expression:
    # `public.stores` would name an attached database "public" in SQLite; its tables live in main.
    if isinstance(node, exp.Table) and node.db == "public":
        node.set("db", None)
    return node


def fix_statement(tree: exp.Expression) -> exp.Expression:
    """The fixups every statement (setup or golden) gets before sqlglot writes it as SQLite."""
    for fixup in (_without_public_schema, _extract_to_strftime, _collapse_double_cast):
        tree = tree.transform(fixup)
    return tree


# --------------------------------------------------------------------------- setup files


def _column_type(kind: exp.DataType) -> exp.DataType:
    """The SQLite column type for a PostgreSQL one (``kind`` itself where sqlglot's mapping is right)."""
    t = exp.DataType.Type
    if kind.this == t.SERIAL:  # exactly INTEGER PRIMARY KEY makes the rowid alias that autoincrements
        return exp.DataType.build("INTEGER")
    if kind.this == t.DECIMAL:  # not NUMERIC: its affinity stores 15.00 as 15 and 15 / 100 is 0
        return exp.DataType.build("REAL")
    if kind.this in (t.JSONB, t.JSON, t.VARCHAR, t.CHAR, t.TEXT):  # SQLite ignores lengths
        return exp.DataType.build("TEXT")
    return kind


def _fix_column(column: exp.ColumnDef) -> None:
    column.set("kind", _column_type(column.args["kind"]))
    for constraint in column.args.get("constraints") or []:
        default = constraint.kind
        if isinstance(default, exp.DefaultColumnConstraint) and isinstance(default.this, exp.Boolean):
            # boolean columns become INTEGER: write their defaults as the 0/1 SQLite stores
            default.set("this", exp.Literal.number(int(default.this.this)))


def _table_constraints(post_setup: list[exp.Expression]) -> dict[str, list[exp.Constraint]]:
    """post_setup's `ALTER TABLE ... ADD CONSTRAINT`s by table. SQLite has no ADD CONSTRAINT, so
    they are folded into CREATE TABLE (they then exist while the CSVs load; the data meets them)."""
    out: dict[str, list[exp.Constraint]] = {}
    for tree in post_setup:
        if isinstance(tree, exp.Alter):
            for action in tree.args.get("actions") or []:
                if not isinstance(action, exp.AddConstraint):
                    raise GenerationError(f"post_setup.sql: unexpected ALTER action {action.sql('postgres')}")
                out.setdefault(tree.this.name, []).extend(action.expressions)
    return out


def _is_setval(tree: exp.Expression) -> bool:
    # setval(pg_get_serial_sequence(...)): SQLite has no sequences; INTEGER PRIMARY KEY gives max+1
    return isinstance(tree, exp.Select) and any(f.name.lower() == "setval" for f in tree.find_all(exp.Anonymous))


def _setup_statement(tree: exp.Expression, constraints: dict[str, list[exp.Constraint]]) -> exp.Expression:
    """A pre_setup/setup/post_setup statement with the fixups SQLite needs (``constraints``: the
    folded post_setup constraints by table)."""
    tree = fix_statement(tree)
    if isinstance(tree, exp.Drop):
        tree.set("cascade", False)  # SQLite's DROP TABLE has no CASCADE (and needs none: no views)
    if isinstance(tree, exp.Create) and tree.kind == "TABLE":
        schema = tree.this
        for column in schema.expressions:
            _fix_column(column)
        schema.set("expressions", schema.expressions + [fix_statement(c) for c in constraints.get(schema.this.name, [])])
    if isinstance(tree, exp.Create) and tree.kind == "INDEX":
        # sqlglot adds NULLS LAST to index columns, which SQLite's CREATE INDEX rejects
        params = tree.this.args["params"]
        params.set("columns", [c.this if isinstance(c, exp.Ordered) else c for c in params.args["columns"]])
    return tree


def _setup_sql(tree: exp.Expression) -> str:
    """A setup statement as SQLite text: a CREATE TABLE one column or constraint a line (sqlglot's
    pretty printer would also break `REFERENCES t (id)` over three lines)."""
    if isinstance(tree, exp.Create) and tree.kind == "TABLE":
        body = ",\n  ".join(e.sql(dialect="sqlite") for e in tree.this.expressions)
        return f"CREATE TABLE {tree.this.this.sql(dialect='sqlite')} (\n  {body}\n)"
    return tree.sql(dialect="sqlite", pretty=True)


SETUP_HEADERS = {
    "pre_setup": ["DROP TABLE ... CASCADE: CASCADE dropped (SQLite has none)."],
    "setup": [
        "serial PRIMARY KEY -> INTEGER PRIMARY KEY (the rowid alias: an INSERT without an id gets",
        "  max(id) + 1, so post_setup's setval lines are not needed);",
        "numeric(p,s) -> REAL, not NUMERIC: NUMERIC affinity stores 15.00 as the integer 15, and",
        "  discount_pct / 100 would then be SQLite's integer division (0);",
        "jsonb, varchar(n), char(n) -> TEXT; boolean -> INTEGER (sqlglot) with DEFAULT 0/1;",
        "date and timestamp stay DATE/TIMESTAMP: the values are ISO text, compared as text;",
        "post_setup.sql's foreign key, unique and check constraints are folded in as table",
        "  constraints (SQLite has no ALTER TABLE ADD CONSTRAINT). SQLite enforces foreign keys only",
        "  under PRAGMA foreign_keys = ON: load the CSVs with it off (the default), since",
        "  order_items.csv loads before orders.csv (PostgreSQL adds its foreign keys after the load).",
    ],
    "post_setup": [
        "ALTER TABLE ... ADD CONSTRAINT: moved into setup.sql (see there);",
        "SELECT setval(...): dropped (INTEGER PRIMARY KEY needs no sequence);",
        "CREATE INDEX: sqlglot's NULLS LAST on index columns dropped (SQLite rejects it there).",
    ],
}


def _header(name: str, sources: str) -> str:
    lines = [
        f"-- Generated by datasets/demo/make_sqlite.py ({GENERATOR}) from {sources}: do not edit.",
        "-- sqlglot (postgres -> sqlite), `public.` dropped from table names, then these fixups:",
    ]
    lines += [f"--   {line}" for line in SETUP_HEADERS[name]]
    return "\n".join(lines) + "\n\n"


def setup_files(pg_dir: Path) -> dict[str, str]:
    """``{pre_setup,setup,post_setup}.sql`` for SQLite from the PostgreSQL ones in ``pg_dir``."""
    trees = {
        name: [t for t in sqlglot.parse((pg_dir / f"{name}.sql").read_text(), read="postgres") if isinstance(t, exp.Expression)]
        for name in SETUP_FILES
    }
    constraints = _table_constraints(trees["post_setup"])
    out: dict[str, str] = {}
    for name in SETUP_FILES:
        kept = [t for t in trees[name] if not isinstance(t, exp.Alter) and not _is_setval(t)]
        statements = [_setup_sql(_setup_statement(t, constraints)) for t in kept]
        sources = "../postgres/setup.sql and ../postgres/post_setup.sql" if name == "setup" else f"../postgres/{name}.sql"
        out[f"{name}.sql"] = _header(name, sources) + "".join(f"{s};\n\n" for s in statements).rstrip("\n") + "\n"
    return out


# --------------------------------------------------------------------------- items

# Golden SQL sqlglot cannot express in SQLite, rewritten by hand. Each entry holds the sha256 of the
# PostgreSQL text it replaces: when that text changes, generation stops and asks for a new rewrite.
MEDIAN_28 = """WITH order_totals AS (
  SELECT
    o.order_id,
    o.store_id,
    SUM(oi.quantity * oi.unit_price * (
      1 - oi.discount_pct / 100
    )) AS order_value
  FROM orders AS o
  JOIN order_items AS oi
    ON oi.order_id = o.order_id
  WHERE
    o.status = 'completed'
  GROUP BY
    o.order_id,
    o.store_id
), ranked AS (
  SELECT
    store_id,
    order_value,
    ROW_NUMBER() OVER (PARTITION BY store_id ORDER BY order_value) AS rn,
    COUNT(*) OVER (PARTITION BY store_id) AS n
  FROM order_totals
)
SELECT
  s.store_name,
  ROUND(AVG(r.order_value), 2) AS median_value
FROM ranked AS r
JOIN stores AS s
  ON s.store_id = r.store_id
WHERE
  r.rn IN ((r.n + 1) / 2, (r.n + 2) / 2)
GROUP BY
  s.store_name;"""

OVERRIDES: dict[tuple[str, str], tuple[str, str]] = {
    # PERCENTILE_CONT(0.5) WITHIN GROUP: SQLite (before 3.47, and then only when compiled with
    # the percentile extension) has no ordered-set aggregates. The median as the average of the
    # middle one or two rows by ROW_NUMBER() (integer division picks them), which is what
    # PERCENTILE_CONT(0.5) computes.
    ("greenleaf_28", "sol_sql[0]"): ("ece72ee58e36759c", MEDIAN_28),
}


def _fingerprint(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()[:16]


def transpile(sql: str, where: str) -> str:
    """One golden SQL text (one or more statements) as SQLite; ``where`` names it in errors."""
    try:
        trees = [t for t in sqlglot.parse(sql, read="postgres") if isinstance(t, exp.Expression)]
        return ";\n".join(fix_statement(t).sql(dialect="sqlite", pretty=True) for t in trees) + ";"
    except (sqlglot.errors.SqlglotError, GenerationError) as exc:
        raise GenerationError(f"{where}: {exc}") from exc


def _sql_list(item_id: str, key: str, sqls: list[str]) -> list[str]:
    out = []
    for i, sql in enumerate(sqls):
        where = f"{SOURCE_JSONL}: {item_id} {key}[{i}]"
        override = OVERRIDES.get((item_id, f"{key}[{i}]"))
        if override is None:
            out.append(transpile(sql, where))
        elif _fingerprint(sql) != override[0]:
            raise GenerationError(
                f"{where}: the PostgreSQL text changed (sha256 {_fingerprint(sql)}); rewrite its hand-made SQLite version in OVERRIDES"
            )
        else:
            out.append(override[1])
    return out


def sqlite_record(record: dict[str, Any]) -> dict[str, Any]:
    """A BIRD-Interact record with its SQL in SQLite and ``"dialect": "sqlite"``. Python test
    cases are dropped: they use a psycopg connection (the item falls back to state_match)."""
    out = dict(record)
    item_id = record["instance_id"]
    for key in SQL_KEYS:
        out[key] = _sql_list(item_id, key, record.get(key) or [])
    out["test_cases"] = []
    if record.get("follow_up"):
        follow_up = dict(record["follow_up"])
        follow_up["sol_sql"] = _sql_list(item_id, "follow_up.sol_sql", follow_up.get("sol_sql") or [])
        follow_up["test_cases"] = []
        out["follow_up"] = follow_up
    out["dialect"] = "sqlite"
    return out


def generate(dataset_dir: Path = HERE) -> dict[str, str]:
    """Every generated file, by path relative to ``dataset_dir``, with its text."""
    files = {f"setup/{DATABASE}/sqlite/{name}": text for name, text in setup_files(dataset_dir / "setup" / DATABASE / "postgres").items()}
    lines = (dataset_dir / SOURCE_JSONL).read_text().splitlines()
    records = [sqlite_record(json.loads(line)) for line in lines if line.strip()]
    files[TARGET_JSONL] = "".join(json.dumps(r) + "\n" for r in records)
    return files


def write(files: dict[str, str], out_dir: Path) -> None:
    for rel, text in files.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# --------------------------------------------------------------------------- loading and checking


def load_csvs(execute: Callable[[str], Any], data_dir: Path, table_prefix: str = "") -> dict[str, int]:
    """README's recipe, for either engine: the CSVs in alphabetical order, one
    ``INSERT INTO <prefix><table> VALUES (<cells>)`` per row (each cell is a SQL literal).
    Returns the rows loaded by table."""
    counts: dict[str, int] = {}
    for path in sorted(data_dir.glob("*.csv")):
        with path.open(newline="") as handle:
            rows = list(csv.reader(handle))
        for line, cells in enumerate(rows, start=1):
            try:
                execute(f"INSERT INTO {table_prefix}{path.stem} VALUES ({', '.join(cells)})")
            except Exception as exc:
                raise GenerationError(f"{path.name}:{line}: {exc}") from exc
        counts[path.stem] = len(rows)
    return counts


def sqlite_database(dataset_dir: Path = HERE) -> sqlite3.Connection:
    """An in-memory SQLite database provisioned from the generated SQLite setup and the CSVs."""
    setup = dataset_dir / "setup" / DATABASE
    conn = sqlite3.connect(":memory:")
    conn.executescript((setup / "sqlite" / "pre_setup.sql").read_text())
    conn.executescript((setup / "sqlite" / "setup.sql").read_text())
    load_csvs(conn.execute, setup / "data")
    conn.executescript((setup / "sqlite" / "post_setup.sql").read_text())
    conn.commit()
    return conn


def run_sqls(conn: sqlite3.Connection, sqls: list[str]) -> list[tuple[Any, ...]]:
    """Runs each SQL text in order; the rows of the last one (empty for DML and DDL)."""
    rows: list[tuple[Any, ...]] = []
    for sql in sqls:
        cursor = conn.execute(sql)
        rows = cursor.fetchall() if cursor.description else []
    return rows


def run_item(conn: sqlite3.Connection, record: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """An item's golden results on ``conn``, the way a conversation runs them: preprocess_sql,
    the golden, the follow-up's golden, then clean_up_sqls. Keys: ``main`` and ``follow_up``."""
    run_sqls(conn, record.get("preprocess_sql") or [])
    results = {"main": run_sqls(conn, record["sol_sql"])}
    if record.get("follow_up"):
        results["follow_up"] = run_sqls(conn, record["follow_up"]["sol_sql"])
    run_sqls(conn, record.get("clean_up_sqls") or [])
    return results


def stale_files(dataset_dir: Path = HERE) -> list[str]:
    """Generated files whose committed bytes differ from what generate() makes now."""
    return [
        rel for rel, text in generate(dataset_dir).items() if not (dataset_dir / rel).exists() or (dataset_dir / rel).read_text() != text
    ]


def generated_with(dataset_dir: Path = HERE) -> str | None:
    """The sqlglot version the committed files were generated with (from setup.sql's header)."""
    path = dataset_dir / "setup" / DATABASE / "sqlite" / "setup.sql"
    first = path.read_text().split("\n", 1)[0] if path.exists() else ""
    return first.split("(", 1)[1].split(")", 1)[0] if "(sqlglot " in first else None


def check(dataset_dir: Path = HERE) -> list[str]:
    """Problems with the committed SQLite build (an empty list: none)."""
    made_with = "" if generated_with(dataset_dir) == GENERATOR else f" (made with {generated_with(dataset_dir)}, this is {GENERATOR})"
    problems = [f"{rel} is stale{made_with}: run datasets/demo/make_sqlite.py" for rel in stale_files(dataset_dir)]
    template = sqlite_database(dataset_dir)
    for line in filter(str.strip, (dataset_dir / TARGET_JSONL).read_text().splitlines()):
        record = json.loads(line)
        conn = sqlite3.connect(":memory:")
        template.backup(conn)  # each item on a fresh copy: management goldens change the data
        try:
            results = run_item(conn, record)
        except sqlite3.Error as exc:
            problems.append(f"{TARGET_JSONL}: {record['instance_id']}: {exc}")
            continue
        finally:
            conn.close()
        if record.get("category", "Query") == "Query":
            problems += [
                f"{TARGET_JSONL}: {record['instance_id']} {phase}: empty golden result" for phase, rows in results.items() if not rows
            ]
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--check", action="store_true", help="verify the committed files; write nothing")
    parser.add_argument("--out", type=Path, default=HERE, help="write the files under this directory instead")
    args = parser.parse_args(argv)
    try:
        if args.check:
            problems = check(HERE)
            for problem in problems:
                print(problem, file=sys.stderr)
            print(f"sqlite build: {'FAILED' if problems else 'ok'} ({GENERATOR}, SQLite {sqlite3.sqlite_version})")
            return 1 if problems else 0
        write(generate(HERE), args.out)
    except GenerationError as exc:
        print(f"make_sqlite: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Generate the SQLite, DuckDB and MySQL/MariaDB builds of the greenleaf demo dataset from its
PostgreSQL source.

    .venv/bin/python datasets/demo/make_builds.py                  # (re)write every build
    .venv/bin/python datasets/demo/make_builds.py duckdb           # one build (sqlite, duckdb, mysql)
    .venv/bin/python datasets/demo/make_builds.py --check [TARGET]  # verify them (no files written)

A target writes ``setup/greenleaf/<target>/{pre_setup,setup,post_setup}.sql`` and
``greenleaf_<target>.jsonl``. Every SQL text is transpiled by sqlglot (read postgres, write the
target) after the explicit fixups below, each of which says why sqlglot's output alone is not what
the target needs. The data CSVs in ``setup/greenleaf/data`` are shared by every build. The output
is deterministic (same source, same sqlglot version: same bytes); ``--check`` fails when the
committed files are stale, when a golden SQL fails on the engine (SQLite; DuckDB when importable;
MySQL is checked by tests/e2e/test_demo_builds.py against a server) or when a Query item's golden
result is empty.
"""

from __future__ import annotations

import argparse
import csv
import hashlib
import json
import sqlite3
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlglot
from sqlglot import exp

HERE = Path(__file__).resolve().parent
DATABASE = "greenleaf"
SOURCE_JSONL = "greenleaf.jsonl"
SETUP_FILES = ("pre_setup", "setup", "post_setup")
# Recorded in the generated headers: another sqlglot version may write the same SQL differently.
GENERATOR = f"sqlglot {sqlglot.__version__}"
SQL_KEYS = ("sol_sql", "preprocess_sql", "clean_up_sqls")
Fixup = Callable[[exp.Expression], exp.Expression]


class GenerationError(Exception):
    """A source SQL text this generator cannot turn into the target's; the message names where."""


# --------------------------------------------------------------------------- fixups on the AST


def _without_public_schema(node: exp.Expression) -> exp.Expression:
    # `public.stores`: SQLite would read `public` as an attached database, DuckDB's schema is
    # `main` and MySQL's `public` would be another database. The tables live in the default one.
    if isinstance(node, exp.Table) and node.db == "public":
        node.set("db", None)
    return node


# EXTRACT(<field> FROM x): sqlglot 30 writes EXTRACT unchanged for SQLite, which has no EXTRACT.
# STRFTIME returns text ('03'), so the value is cast to INTEGER, as PostgreSQL's is a number.
EXTRACT_FORMATS = {"YEAR": "%Y", "MONTH": "%m", "DAY": "%d", "HOUR": "%H", "MINUTE": "%M", "DOW": "%w", "DOY": "%j"}


def _extract_to_strftime(node: exp.Expression) -> exp.Expression:
    if not isinstance(node, exp.Extract):
        return node
    field_name = node.this.name.upper()
    if field_name not in EXTRACT_FORMATS:
        raise GenerationError(f"EXTRACT({field_name} FROM ...) has no SQLite STRFTIME format here")
    strftime = exp.Anonymous(this="STRFTIME", expressions=[exp.Literal.string(EXTRACT_FORMATS[field_name]), node.expression])
    return exp.Cast(this=strftime, to=exp.DataType.build("INTEGER"))


def _collapse_double_cast(node: exp.Expression) -> exp.Expression:
    # EXTRACT(...)::int became CAST(CAST(STRFTIME(...) AS INTEGER) AS INT): one cast is enough.
    if isinstance(node, exp.Cast) and isinstance(node.this, exp.Cast) and node.to.is_type(*exp.DataType.INTEGER_TYPES):
        return node.this
    return node


def _json_text_to_boolean(node: exp.Expression) -> exp.Expression:
    # (care_info->>'pet_safe')::boolean: MySQL has no CAST AS BOOLEAN (sqlglot writes SIGNED,
    # and 'true' cast to SIGNED is 0). The unquoted JSON text is compared with 'true' instead.
    if isinstance(node, exp.Cast) and node.to.is_type(exp.DataType.Type.BOOLEAN) and isinstance(node.this.unnest(), exp.JSONExtractScalar):
        return exp.Paren(this=exp.EQ(this=node.this.unnest(), expression=exp.Literal.string("true")))
    return node


def _json_arrow_to_functions(node: exp.Expression) -> exp.Expression:
    # x->>'key': MariaDB has no `->>` operator (MySQL 5.7 does); JSON_UNQUOTE(JSON_EXTRACT())
    # means the same on both.
    if not isinstance(node, exp.JSONExtractScalar):
        return node
    path = exp.Literal.string(node.expression.sql(dialect="mysql").strip("'"))
    extract = exp.Anonymous(this="JSON_EXTRACT", expressions=[node.this, path])
    return exp.Anonymous(this="JSON_UNQUOTE", expressions=[extract])


def _filter_to_case(node: exp.Expression) -> exp.Expression:
    # agg(x) FILTER (WHERE c): MySQL has no FILTER clause (sqlglot writes it unchanged);
    # agg(CASE WHEN c THEN x END) is the same (COUNT(*) counts CASE WHEN c THEN 1 END).
    if not isinstance(node, exp.Filter):
        return node
    agg = node.this.copy()
    value = agg.this if agg.this is not None and not isinstance(agg.this, exp.Star) else exp.Literal.number(1)
    agg.set("this", exp.Case(ifs=[exp.If(this=node.expression.this, true=value)]))
    return agg


def fix_statement(tree: exp.Expression, fixups: tuple[Fixup, ...]) -> exp.Expression:
    """``tree`` with each fixup applied to every node, one fixup after the other."""
    for fixup in fixups:
        tree = tree.transform(fixup)
    return tree


# --------------------------------------------------------------------------- column types
# Each target's type for a PostgreSQL column type (``kind`` itself where sqlglot's mapping is right).
T = exp.DataType.Type


def _sqlite_type(kind: exp.DataType) -> exp.DataType:
    if kind.this == T.SERIAL:  # exactly INTEGER PRIMARY KEY makes the rowid alias that autoincrements
        return exp.DataType.build("INTEGER")
    if kind.this == T.DECIMAL:  # not NUMERIC: its affinity stores 15.00 as 15 and 15 / 100 is 0
        return exp.DataType.build("REAL")
    if kind.this in (T.JSONB, T.JSON, T.VARCHAR, T.CHAR, T.TEXT):  # SQLite ignores lengths
        return exp.DataType.build("TEXT")
    return kind


def _duckdb_type(kind: exp.DataType) -> exp.DataType:
    if kind.this == T.SERIAL:  # no id generator: see SETUP_HEADERS["duckdb"]
        return exp.DataType.build("INTEGER")
    if kind.this in (T.VARCHAR, T.CHAR, T.TEXT):  # sqlglot would write TEXT(100); DuckDB's text has no length
        return exp.DataType.build("TEXT")
    if kind.this == T.JSONB:
        return exp.DataType.build("JSON")
    return kind


def _mysql_type(kind: exp.DataType) -> exp.DataType:
    if kind.this == T.SERIAL:  # sqlglot keeps SERIAL (BIGINT UNSIGNED AUTO_INCREMENT): see SETUP_HEADERS["mysql"]
        return exp.DataType.build("INT")
    if kind.this == T.JSONB:  # sqlglot writes JSONB; MySQL's type is JSON (MariaDB: LONGTEXT + JSON_VALID check)
        return exp.DataType.build("JSON")
    return kind  # timestamp -> DATETIME, numeric -> DECIMAL, boolean -> BOOLEAN (TINYINT(1)): sqlglot's


# --------------------------------------------------------------------------- hand-made golden SQL
# Golden SQL sqlglot cannot express on a target, rewritten by hand. Each override holds the sha256
# of the PostgreSQL text it replaces: when that text changes, generation stops and asks for a new one.
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

# MySQL's `/` is a decimal division ((4 + 1) / 2 is 2.5, which matches no row number): DIV is
# the integer division SQLite's `/` does on integers.
MEDIAN_28_MYSQL = MEDIAN_28.replace("(r.n + 1) / 2, (r.n + 2) / 2", "(r.n + 1) DIV 2, (r.n + 2) DIV 2")

# The new supplier's id given as the highest id + 1 (what SQLite's INTEGER PRIMARY KEY and
# PostgreSQL's serial after setval give), since DuckDB's sequences and MySQL's AUTO_INCREMENT
# are not rolled back (see SETUP_HEADERS). INSERT ... SELECT: MySQL refuses a subquery on the
# target table inside VALUES.
SUPPLIER_42 = """INSERT INTO suppliers (supplier_id, supplier_name, country, contact_email, is_organic_certified, lead_time_days, rating)
SELECT COALESCE(MAX(supplier_id), 0) + 1, 'Fernhollow Farms', 'Canada', 'ferns@fernhollow.example', TRUE, 9, NULL
FROM suppliers;"""

MEDIAN_28_SHA = "ece72ee58e36759c"
SUPPLIER_42_SHA = "0b5e40e4d2d02d33"


@dataclass(frozen=True)
class Target:
    """How one engine's build differs from the PostgreSQL source."""

    name: str  # the setup folder, sqlglot's dialect and the records' "dialect"
    fixups: tuple[Fixup, ...]
    column_type: Callable[[exp.DataType], exp.DataType]
    fold: Callable[[exp.Expression], bool] | None  # post_setup constraints folded into CREATE TABLE (None: ALTERs kept)
    headers: dict[str, list[str]]
    overrides: dict[tuple[str, str], tuple[str, str]] = field(default_factory=dict)
    excluded: dict[str, str] = field(default_factory=dict)  # item id -> why the build leaves it out
    table_options: str = ""  # written after each CREATE TABLE's closing parenthesis

    @property
    def jsonl(self) -> str:
        return f"greenleaf_{self.name}.jsonl"


def _is_foreign_key(constraint: exp.Expression) -> bool:
    return constraint.find(exp.ForeignKey) is not None


SQLITE_HEADERS = {
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

DUCKDB_HEADERS = {
    "pre_setup": ["DROP TABLE ... CASCADE: CASCADE dropped (no views or foreign keys depend on them)."],
    "setup": [
        "serial PRIMARY KEY -> INTEGER PRIMARY KEY with no default: a DuckDB sequence is not rolled",
        "  back with the transaction, so state_match (the agent's INSERT, rolled back, then the",
        "  golden's) would compare two different ids; greenleaf_42's golden gives max(id) + 1;",
        "varchar(n), char(n), text -> TEXT (DuckDB's VARCHAR, no length); jsonb -> JSON;",
        "  numeric(p,s) stays DECIMAL(p,s) (a DECIMAL divided by an integer is a DOUBLE in DuckDB);",
        "post_setup.sql's unique and check constraints are folded in as table constraints (DuckDB",
        "  has no ALTER TABLE ADD CONSTRAINT for them); its FOREIGN KEYs are dropped: DuckDB checks",
        "  them on every INSERT (order_items.csv loads before orders.csv) and refuses updates and",
        "  deletes of referenced keys that PostgreSQL allows.",
    ],
    "post_setup": [
        "ALTER TABLE ... ADD CONSTRAINT: unique and check moved into setup.sql, foreign keys dropped;",
        "SELECT setval(...): dropped (no sequences);",
        "CREATE INDEX: sqlglot's NULLS LAST on index columns dropped.",
    ],
}

MYSQL_HEADERS = {
    "pre_setup": ["DROP TABLE ... CASCADE: CASCADE dropped (MySQL ignores it)."],
    "setup": [
        "serial PRIMARY KEY -> INT PRIMARY KEY with no AUTO_INCREMENT: InnoDB does not roll an",
        "  AUTO_INCREMENT counter back, so state_match (the agent's INSERT, rolled back, then the",
        "  golden's) would compare two different ids; greenleaf_42's golden gives max(id) + 1;",
        "jsonb -> JSON (MariaDB: LONGTEXT with a JSON_VALID check); timestamp -> DATETIME,",
        "  numeric(p,s) -> DECIMAL(p,s), boolean -> BOOLEAN (TINYINT(1)), text -> TEXT (sqlglot);",
        "tables get COLLATE utf8mb4_bin: MySQL's default collations ignore case ('Zebra' sorts",
        "  before 'ZZ', 'a' = 'A'); utf8mb4_bin compares code points, as PostgreSQL's C collation.",
    ],
    "post_setup": [
        "ALTER TABLE ONLY -> ALTER TABLE (MySQL has no ONLY); the constraints stay after the load,",
        "  as in PostgreSQL (order_items.csv loads before orders.csv);",
        "SELECT setval(...): dropped (no sequences);",
        "CREATE INDEX: sqlglot's NULLS LAST on index columns dropped (MySQL rejects it there).",
    ],
}

TARGETS = {
    "sqlite": Target(
        "sqlite",
        (_without_public_schema, _extract_to_strftime, _collapse_double_cast),
        _sqlite_type,
        fold=lambda constraint: True,
        headers=SQLITE_HEADERS,
        # PERCENTILE_CONT(0.5) WITHIN GROUP: SQLite (before 3.47, and then only when compiled with
        # the percentile extension) has no ordered-set aggregates. The median as the average of the
        # middle one or two rows by ROW_NUMBER() (integer division picks them), which is what
        # PERCENTILE_CONT(0.5) computes.
        overrides={("greenleaf_28", "sol_sql[0]"): (MEDIAN_28_SHA, MEDIAN_28)},
    ),
    "duckdb": Target(
        "duckdb",
        (_without_public_schema,),  # sqlglot writes PERCENTILE_CONT as QUANTILE_CONT, ->> as ->> '$.key'
        _duckdb_type,
        fold=lambda constraint: not _is_foreign_key(constraint),
        headers=DUCKDB_HEADERS,
        overrides={("greenleaf_42", "sol_sql[0]"): (SUPPLIER_42_SHA, SUPPLIER_42)},
    ),
    "mysql": Target(
        "mysql",
        (_without_public_schema, _json_text_to_boolean, _json_arrow_to_functions, _filter_to_case),
        _mysql_type,
        fold=None,
        headers=MYSQL_HEADERS,
        # PERCENTILE_CONT exists in MariaDB only as a window function (MySQL: not at all): the
        # SQLite rewrite, with DIV.
        overrides={
            ("greenleaf_28", "sol_sql[0]"): (MEDIAN_28_SHA, MEDIAN_28_MYSQL),
            ("greenleaf_42", "sol_sql[0]"): (SUPPLIER_42_SHA, SUPPLIER_42),
        },
        # MySQL commits DDL at once, so its sandbox refuses CREATE in write mode: the item
        # cannot be evaluated there (its golden and any right answer would fail as forbidden).
        # MySQL's default collations ignore case ('Zebra Haworthia' sorts before 'ZZ Plant', 'a' = 'A');
        # utf8mb4_bin compares code points, as PostgreSQL's C collation does.
        table_options=" DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_bin",
        excluded={"greenleaf_43": "CREATE VIEW: MySQL commits DDL at once, so the sandbox refuses DDL in write mode"},
    ),
}


# --------------------------------------------------------------------------- setup files


def _fix_column(column: exp.ColumnDef, target: Target) -> None:
    column.set("kind", target.column_type(column.args["kind"]))
    for constraint in column.args.get("constraints") or []:
        default = constraint.kind
        if target.name == "sqlite" and isinstance(default, exp.DefaultColumnConstraint) and isinstance(default.this, exp.Boolean):
            # boolean columns become INTEGER: write their defaults as the 0/1 SQLite stores
            default.set("this", exp.Literal.number(int(default.this.this)))


def _table_constraints(post_setup: list[exp.Expression]) -> dict[str, list[exp.Expression]]:
    """post_setup's `ALTER TABLE ... ADD CONSTRAINT`s by table (for targets that fold them into
    CREATE TABLE: they then exist while the CSVs load, and the data meets them)."""
    out: dict[str, list[exp.Expression]] = {}
    for tree in post_setup:
        if isinstance(tree, exp.Alter):
            for action in tree.args.get("actions") or []:
                if not isinstance(action, exp.AddConstraint):
                    raise GenerationError(f"post_setup.sql: unexpected ALTER action {action.sql('postgres')}")
                out.setdefault(tree.this.name, []).extend(action.expressions)
    return out


def _is_setval(tree: exp.Expression) -> bool:
    # setval(pg_get_serial_sequence(...)): no build has a sequence (see the headers)
    return isinstance(tree, exp.Select) and any(f.name.lower() == "setval" for f in tree.find_all(exp.Anonymous))


def _setup_statement(tree: exp.Expression, constraints: dict[str, list[exp.Expression]], target: Target) -> exp.Expression:
    """A pre_setup/setup/post_setup statement with the fixups ``target`` needs (``constraints``:
    the post_setup constraints folded into its CREATE TABLEs, by table)."""
    tree = fix_statement(tree, target.fixups)
    if isinstance(tree, exp.Drop):
        tree.set("cascade", False)
    if isinstance(tree, exp.Alter):
        tree.set("only", False)
    if isinstance(tree, exp.Create) and tree.kind == "TABLE":
        schema = tree.this
        for column in schema.expressions:
            _fix_column(column, target)
        folded = [fix_statement(c, target.fixups) for c in constraints.get(schema.this.name, [])]
        schema.set("expressions", schema.expressions + folded)
    if isinstance(tree, exp.Create) and tree.kind == "INDEX":
        # sqlglot adds NULLS LAST to index columns, which SQLite's and MySQL's CREATE INDEX reject
        params = tree.this.args["params"]
        params.set("columns", [c.this if isinstance(c, exp.Ordered) else c for c in params.args["columns"]])
    return tree


def _setup_sql(tree: exp.Expression, target: Target) -> str:
    """A setup statement as text: a CREATE TABLE one column or constraint a line (sqlglot's
    pretty printer would also break `REFERENCES t (id)` over three lines)."""
    if isinstance(tree, exp.Create) and tree.kind == "TABLE":
        body = ",\n  ".join(e.sql(dialect=target.name) for e in tree.this.expressions)
        return f"CREATE TABLE {tree.this.this.sql(dialect=target.name)} (\n  {body}\n){target.table_options}"
    return tree.sql(dialect=target.name, pretty=not isinstance(tree, exp.Alter))


def _header(name: str, sources: str, target: Target) -> str:
    lines = [
        f"-- Generated by datasets/demo/make_builds.py ({GENERATOR}) from {sources}: do not edit.",
        f"-- sqlglot (postgres -> {target.name}), `public.` dropped from table names, then these fixups:",
    ]
    lines += [f"--   {line}" for line in target.headers[name]]
    return "\n".join(lines) + "\n\n"


def _kept(tree: exp.Expression, target: Target) -> bool:
    """Whether a PostgreSQL setup statement has a counterpart in ``target``'s build."""
    return not _is_setval(tree) and not (isinstance(tree, exp.Alter) and target.fold is not None)


def setup_files(pg_dir: Path, target: Target) -> dict[str, str]:
    """``{pre_setup,setup,post_setup}.sql`` for ``target`` from the PostgreSQL ones in ``pg_dir``."""
    trees = {
        name: [t for t in sqlglot.parse((pg_dir / f"{name}.sql").read_text(), read="postgres") if isinstance(t, exp.Expression)]
        for name in SETUP_FILES
    }
    fold = target.fold
    constraints = {} if fold is None else {t: [c for c in cs if fold(c)] for t, cs in _table_constraints(trees["post_setup"]).items()}
    out: dict[str, str] = {}
    for name in SETUP_FILES:
        statements = [_setup_sql(_setup_statement(t, constraints, target), target) for t in trees[name] if _kept(t, target)]
        sources = "../postgres/setup.sql and ../postgres/post_setup.sql" if name == "setup" and fold else f"../postgres/{name}.sql"
        out[f"{name}.sql"] = _header(name, sources, target) + "".join(f"{s};\n\n" for s in statements).rstrip("\n") + "\n"
    return out


# --------------------------------------------------------------------------- items


def _fingerprint(sql: str) -> str:
    return hashlib.sha256(sql.encode()).hexdigest()[:16]


def transpile(sql: str, where: str, target: Target) -> str:
    """One golden SQL text (one or more statements) in ``target``'s SQL; ``where`` names it in errors.
    A text that reads the same in both dialects is kept as it is written, so that the item's
    ``sql_snippet`` annotations (copied from it) are still found in it."""
    try:
        trees = [t for t in sqlglot.parse(sql, read="postgres") if isinstance(t, exp.Expression)]
        as_written = [t.sql(dialect="postgres") for t in trees]
        fixed = [fix_statement(t.copy(), target.fixups) for t in trees]
        if [t.sql(dialect=target.name) for t in fixed] == as_written:
            return sql
        # one line, as sqlglot writes it: the ambiguity annotations quote fragments of it
        return ";\n".join(t.sql(dialect=target.name) for t in fixed) + ";"
    except (sqlglot.errors.SqlglotError, GenerationError) as exc:
        raise GenerationError(f"{where}: {exc}") from exc


def _sql_list(item_id: str, key: str, sqls: list[str], target: Target) -> list[str]:
    out = []
    for i, sql in enumerate(sqls):
        where = f"{SOURCE_JSONL}: {item_id} {key}[{i}]"
        override = target.overrides.get((item_id, f"{key}[{i}]"))
        if override is None:
            out.append(transpile(sql, where, target))
        elif _fingerprint(sql) != override[0]:
            raise GenerationError(
                f"{where}: the PostgreSQL text changed (sha256 {_fingerprint(sql)}); rewrite its hand-made "
                f"{target.name} version in TARGETS[{target.name!r}].overrides"
            )
        else:
            out.append(override[1])
    return out


def target_record(record: dict[str, Any], target: Target) -> dict[str, Any]:
    """A BIRD-Interact record with its SQL in ``target``'s dialect and ``"dialect": <target>``.
    Python test cases are dropped: they use a psycopg connection (the item falls back to state_match)."""
    out = dict(record)
    item_id = record["instance_id"]
    for key in SQL_KEYS:
        out[key] = _sql_list(item_id, key, record.get(key) or [], target)
    out["test_cases"] = []
    if record.get("follow_up"):
        follow_up = dict(record["follow_up"])
        follow_up["sol_sql"] = _sql_list(item_id, "follow_up.sol_sql", follow_up.get("sol_sql") or [], target)
        follow_up["test_cases"] = []
        out["follow_up"] = follow_up
    out["dialect"] = target.name
    _translate_snippets(out, target)
    return out


def _squash(sql: str) -> str:
    return " ".join(sql.lower().split())


def _translate_snippets(record: dict[str, Any], target: Target) -> None:
    """An ambiguity's ``sql_snippet`` quotes the golden SQL: where the golden was rewritten, the
    snippet written in the target's dialect when that is what the new golden holds (else kept)."""
    golden = _squash(" ".join(record.get("sol_sql") or []))
    ambiguity = dict(record.get("user_query_ambiguity") or {})
    groups = {key: ambiguity.get(key) or [] for key in ("critical_ambiguity", "non_critical_ambiguity")}
    groups["knowledge_ambiguity"] = record.get("knowledge_ambiguity") or []
    for key, entries in groups.items():
        translated = []
        for entry in entries:
            snippet = entry.get("sql_snippet") if isinstance(entry, dict) else None
            if snippet and _squash(snippet.rstrip("; ")) not in golden:
                try:
                    tree = fix_statement(sqlglot.parse_one(snippet, read="postgres"), target.fixups)
                    candidate = tree.sql(dialect=target.name)
                except (sqlglot.errors.SqlglotError, GenerationError):
                    candidate = None
                if candidate and _squash(candidate) in golden:
                    entry = {**entry, "sql_snippet": candidate}
            translated.append(entry)
        if key == "knowledge_ambiguity":
            record[key] = translated
        else:
            ambiguity[key] = translated
    if record.get("user_query_ambiguity") is not None:
        record["user_query_ambiguity"] = ambiguity


def sqlite_record(record: dict[str, Any]) -> dict[str, Any]:
    """:func:`target_record` for SQLite."""
    return target_record(record, TARGETS["sqlite"])


def generate(dataset_dir: Path = HERE, target_name: str = "sqlite") -> dict[str, str]:
    """Every file of one build, by path relative to ``dataset_dir``, with its text."""
    target = TARGETS[target_name]
    pg_dir = dataset_dir / "setup" / DATABASE / "postgres"
    files = {f"setup/{DATABASE}/{target.name}/{name}": text for name, text in setup_files(pg_dir, target).items()}
    lines = (dataset_dir / SOURCE_JSONL).read_text().splitlines()
    records = [json.loads(line) for line in lines if line.strip()]
    kept = [target_record(r, target) for r in records if r["instance_id"] not in target.excluded]
    files[target.jsonl] = "".join(json.dumps(r) + "\n" for r in kept)
    return files


def write(files: dict[str, str], out_dir: Path) -> None:
    for rel, text in files.items():
        path = out_dir / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


# --------------------------------------------------------------------------- loading and checking


def load_csvs(execute: Callable[[str], Any], data_dir: Path, table_prefix: str = "") -> dict[str, int]:
    """README's recipe, for any engine: the CSVs in alphabetical order, one
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


def script_statements(text: str) -> list[str]:
    """A generated setup file's statements (each ends with `;` at the end of a line; `--` comment
    lines dropped), for engines whose client runs one statement at a time."""
    body = "\n".join(line for line in text.splitlines() if not line.startswith("--"))
    return [s.strip() for s in body.split(";\n") if s.strip().rstrip(";")]


def provision(execute: Callable[[str], Any], dataset_dir: Path, target_name: str) -> dict[str, int]:
    """Runs ``target_name``'s setup files and loads the CSVs through ``execute`` (one statement a call)."""
    setup = dataset_dir / "setup" / DATABASE
    for name in ("pre_setup", "setup"):
        for statement in script_statements((setup / target_name / f"{name}.sql").read_text()):
            execute(statement)
    counts = load_csvs(execute, setup / "data")
    for statement in script_statements((setup / target_name / "post_setup.sql").read_text()):
        execute(statement)
    return counts


def sqlite_database(dataset_dir: Path = HERE) -> sqlite3.Connection:
    """An in-memory SQLite database provisioned from the generated SQLite setup and the CSVs."""
    conn = sqlite3.connect(":memory:")
    provision(conn.execute, dataset_dir, "sqlite")
    conn.commit()
    return conn


def duckdb_database(dataset_dir: Path = HERE) -> Any:
    """An in-memory DuckDB database provisioned from the generated DuckDB setup and the CSVs."""
    import duckdb  # optional: evalbench[duckdb]

    conn = duckdb.connect(":memory:")
    provision(conn.execute, dataset_dir, "duckdb")
    return conn


def run_sqls(conn: Any, sqls: list[str]) -> list[tuple[Any, ...]]:
    """Runs each SQL text in order (``conn.execute`` returns a cursor, as sqlite3's and duckdb's
    do); the rows of the last one (empty for DML and DDL)."""
    rows: list[tuple[Any, ...]] = []
    for sql in sqls:
        cursor = conn.execute(sql)
        rows = list(cursor.fetchall()) if cursor.description else []
    return rows


def run_item(conn: Any, record: dict[str, Any]) -> dict[str, list[tuple[Any, ...]]]:
    """An item's golden results on ``conn``, the way a conversation runs them: preprocess_sql,
    the golden, the follow-up's golden, then clean_up_sqls. Keys: ``main`` and ``follow_up``."""
    run_sqls(conn, record.get("preprocess_sql") or [])
    results = {"main": run_sqls(conn, record["sol_sql"])}
    if record.get("follow_up"):
        results["follow_up"] = run_sqls(conn, record["follow_up"]["sol_sql"])
    run_sqls(conn, record.get("clean_up_sqls") or [])
    return results


def stale_files(dataset_dir: Path = HERE, target_name: str = "sqlite") -> list[str]:
    """Generated files whose committed bytes differ from what generate() makes now."""
    return [
        rel
        for rel, text in generate(dataset_dir, target_name).items()
        if not (dataset_dir / rel).exists() or (dataset_dir / rel).read_text() != text
    ]


def generated_with(dataset_dir: Path = HERE, target_name: str = "sqlite") -> str | None:
    """The sqlglot version the committed files were generated with (from setup.sql's header)."""
    path = dataset_dir / "setup" / DATABASE / target_name / "setup.sql"
    first = path.read_text().split("\n", 1)[0] if path.exists() else ""
    return first.split("(", 1)[1].split(")", 1)[0] if "(sqlglot " in first else None


def _records(dataset_dir: Path, target: Target) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (dataset_dir / target.jsonl).read_text().splitlines() if line.strip()]


def _item_problems(target: Target, record: dict[str, Any], results: dict[str, list[tuple[Any, ...]]]) -> list[str]:
    if record.get("category", "Query") != "Query":
        return []
    return [f"{target.jsonl}: {record['instance_id']} {phase}: empty golden result" for phase, rows in results.items() if not rows]


def _sqlite_problems(dataset_dir: Path, target: Target) -> list[str]:
    problems: list[str] = []
    template = sqlite_database(dataset_dir)
    for record in _records(dataset_dir, target):
        conn = sqlite3.connect(":memory:")
        template.backup(conn)  # each item on a fresh copy: management goldens change the data
        try:
            problems += _item_problems(target, record, run_item(conn, record))
        except sqlite3.Error as exc:
            problems.append(f"{target.jsonl}: {record['instance_id']}: {exc}")
        finally:
            conn.close()
    return problems


def _duckdb_problems(dataset_dir: Path, target: Target) -> list[str]:
    import duckdb

    problems: list[str] = []
    conn = duckdb_database(dataset_dir)
    for record in _records(dataset_dir, target):
        conn.execute("BEGIN TRANSACTION")  # each item rolled back: management goldens change the data
        try:
            problems += _item_problems(target, record, run_item(conn, record))
        except duckdb.Error as exc:
            problems.append(f"{target.jsonl}: {record['instance_id']}: {exc}")
        finally:
            conn.execute("ROLLBACK")
    return problems


def check(dataset_dir: Path = HERE, target_name: str = "sqlite") -> list[str]:
    """Problems with one committed build (an empty list: none). The goldens run on SQLite, and on
    DuckDB when it is importable; a MySQL build is only compared with a fresh generation here."""
    made = generated_with(dataset_dir, target_name)
    made_with = "" if made == GENERATOR else f" (made with {made}, this is {GENERATOR})"
    problems = [
        f"{rel} is stale{made_with}: run datasets/demo/make_builds.py {target_name}" for rel in stale_files(dataset_dir, target_name)
    ]
    target = TARGETS[target_name]
    if target_name == "sqlite":
        problems += _sqlite_problems(dataset_dir, target)
    elif target_name == "duckdb":
        try:
            import duckdb  # noqa: F401
        except ImportError:
            return problems
        problems += _duckdb_problems(dataset_dir, target)
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("targets", nargs="*", choices=[[], *TARGETS], help="builds to write or check (default: all)")
    parser.add_argument("--check", action="store_true", help="verify the committed files; write nothing")
    parser.add_argument("--out", type=Path, default=HERE, help="write the files under this directory instead")
    args = parser.parse_args(argv)
    failed = False
    for name in args.targets or list(TARGETS):
        try:
            if args.check:
                problems = check(HERE, name)
                for problem in problems:
                    print(problem, file=sys.stderr)
                print(f"{name} build: {'FAILED' if problems else 'ok'} ({GENERATOR})")
                failed = failed or bool(problems)
            else:
                write(generate(HERE, name), args.out)
        except GenerationError as exc:
            print(f"make_builds: {name}: {exc}", file=sys.stderr)
            failed = True
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())

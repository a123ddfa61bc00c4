"""Hard-coded answers: SQL that reads no table of the database (or selects only constants) yet
returns the golden result. Parsed per dialect as the backends use them; ``exec_match`` flags it
in both semantics and fails it under ``evalbench`` when it reads no table; a real SQLite run and
the summary's note."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from evalbench.backends import get_backend
from evalbench.backends.base import ExecutionResult, SandboxLimits
from evalbench.backends.setup import find_setup
from evalbench.config import DatabaseConfig
from evalbench.core.conversation import AgentReply, Conversation, PhaseRecord, ReplyKind
from evalbench.run.stages import Parts, new_conversation, run_conversation
from evalbench.scoring import build_scorers
from evalbench.scoring.hard_coded import hard_coded
from evalbench.scoring.primary import PrimaryPolicy
from evalbench.scoring.semantics import ResultRules
from tests.helpers import FixedVUser, ScriptedAgent, make_item

NONE = "reads no table of the database"
CONST = "selects only constants"

PARSING: list[tuple[str, str, str | None]] = [
    # literals, VALUES, set operations of literals
    ("postgres", "VALUES (3), (5)", NONE),
    ("postgres", "SELECT 42", NONE),
    ("postgres", "SELECT 'A', 3 UNION ALL SELECT 'B', 5", NONE),
    ("postgres", "SELECT * FROM (VALUES ('A', 3), ('B', 5)) AS v(name, n) ORDER BY n", NONE),
    ("postgres", "WITH t(a, b) AS (VALUES ('A', 3)) SELECT a, b FROM t", NONE),
    ("postgres", "WITH stores AS (SELECT 'A' AS name) SELECT name FROM stores", NONE),  # a CTE named like a table
    ("postgres", "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t WHERE n < 5) SELECT n FROM t", NONE),
    ("postgres", "SELECT g FROM generate_series(1, 3) AS g", NONE),
    ("postgres", "SELECT u FROM unnest(ARRAY[3, 5]) AS u", NONE),
    ("postgres", "SELECT * FROM json_to_recordset('[{\"a\": 3}]') AS x(a int)", NONE),
    ("postgres", "SELECT now()", NONE),
    ("postgres", "SELECT CURRENT_DATE - 3", NONE),
    ("postgres", "SELECT ROUND(3.14159, 2)", NONE),
    ("postgres", "SELECT count(*) FROM pg_catalog.pg_tables", NONE),  # catalogs are not the dataset's data
    ("postgres", "SELECT count(*) FROM information_schema.columns", NONE),
    ("postgres", "CREATE TEMP TABLE x AS SELECT 42 AS v; SELECT v FROM x", NONE),  # a table the script made of literals
    # a table is read, but the output is typed in
    ("postgres", "SELECT 42 FROM stores LIMIT 1", CONST),
    ("postgres", "WITH t AS (SELECT 42 AS v FROM stores LIMIT 1) SELECT v FROM t", CONST),
    ("postgres", "SELECT * FROM (SELECT 'A' AS n, 3 AS v FROM stores LIMIT 1) AS s", CONST),
    ("postgres", "SELECT 'A', 3 UNION ALL SELECT 'B', 5 FROM stores", CONST),
    ("postgres", "SELECT a.v FROM (SELECT 1 AS v) AS a JOIN stores AS b ON true", CONST),
    # reading the data
    ("postgres", "SELECT store_name FROM stores", None),
    ("postgres", "SELECT count(*) FROM stores", None),
    ("postgres", "SELECT 3 AS n, count(*) FROM stores", None),
    ("postgres", "SELECT (SELECT max(sales) FROM stores)", None),  # a subquery that reads a table
    ("postgres", "SELECT * FROM public.stores", None),
    ("postgres", "WITH t AS (SELECT store_name FROM stores) SELECT store_name FROM t", None),
    ("postgres", "WITH t AS (SELECT 1 AS a) SELECT store_name FROM stores WHERE store_id IN (SELECT a FROM t)", None),
    ("postgres", "SELECT 'A', 3 FROM stores UNION ALL SELECT store_name, 5 FROM stores", None),
    ("postgres", "CREATE TEMP TABLE x AS SELECT * FROM stores; SELECT * FROM x", None),
    ("postgres", "SELECT 1; SELECT store_name FROM stores", None),
    ("postgres", "WITH RECURSIVE t(n) AS (SELECT 1 UNION ALL SELECT n + 1 FROM t JOIN stores ON true WHERE n < 5) "
                 "SELECT n FROM t", None),
    # never guessed: a function the database may define, SQL that does not parse, nothing
    ("postgres", "SELECT top_store()", None),
    ("postgres", "SELECT * FROM top_stores(3)", None),
    ("postgres", "SELEC 42 FORM", None),
    ("postgres", "", None),
    # the other backends' dialects
    ("sqlite", "SELECT 3 AS n", NONE),
    ("sqlite", "SELECT value FROM json_each('[3, 5]')", NONE),
    ("sqlite", "SELECT name FROM sqlite_master", NONE),
    ("sqlite", "SELECT 'A', 3 UNION ALL SELECT 'B', 5", NONE),
    ("sqlite", "SELECT name FROM items ORDER BY id", None),
    ("sqlite", "SELECT 42 FROM items LIMIT 1", CONST),
    ("duckdb", "SELECT 42", NONE),
    ("duckdb", "SELECT * FROM range(3)", NONE),
    ("duckdb", "FROM (VALUES (3), (5)) AS t(x)", NONE),
    ("duckdb", "FROM stores", None),
    ("duckdb", "SELECT list_value(1, 2)", NONE),
    ("mysql", "SELECT 42 FROM dual", NONE),
    ("mysql", "SELECT 'A', 3 UNION ALL SELECT 'B', 5", NONE),
    ("mysql", "SELECT `name` FROM `stores` WHERE `id` = 1", None),
    ("mysql", "SELECT 42 FROM `stores` LIMIT 1", CONST),
]


@pytest.mark.parametrize("dialect, sql, expected", PARSING, ids=[f"{d}:{s[:40]}" for d, s, _ in PARSING])
def test_which_sql_is_hard_coded(dialect: str, sql: str, expected: str | None) -> None:
    assert hard_coded([sql], dialect) == expected


def test_a_script_given_as_statements_is_read_whole() -> None:
    assert hard_coded(["CREATE TEMP TABLE x AS SELECT 3 AS v", "SELECT v FROM x"], "postgres") == NONE
    assert hard_coded(["CREATE TEMP TABLE x AS SELECT sales AS v FROM stores", "SELECT v FROM x"], "postgres") is None


# --------------------------------------------------------------------------- the exec_match verdict

ROWS = [("A", 3), ("B", 5)]
GOLDEN = "SELECT store_name, n FROM stores"


def scored(sql: str, generated: list[tuple[Any, ...]], semantics: str, golden_sql: str = GOLDEN):
    item = make_item(golden=golden_sql, order=False)
    conv = new_conversation(item, seed=0, max_turns=10, patience=0, timeout_s=60)
    phase = conv.phase
    phase.sql = sql
    phase.generated = ExecutionResult(columns=["c0", "c1"], rows=generated)
    phase.golden = [ExecutionResult(columns=["store_name", "n"], rows=ROWS)]
    phase.golden_run_sql = [[golden_sql]]
    scorer = build_scorers({"exec_match": {"semantics": semantics}})[0]
    return scorer.score(conv, phase)


@pytest.mark.parametrize("sql", ["VALUES ('A', 3), ('B', 5)", "SELECT 'A', 3 UNION ALL SELECT 'B', 5",
                                 "WITH t(n, v) AS (VALUES ('A', 3), ('B', 5)) SELECT n, v FROM t"])
def test_a_hard_coded_answer_fails_under_evalbench_and_passes_flagged_under_bird(sql: str) -> None:
    ours = scored(sql, ROWS, "evalbench")
    assert ours.passed is False and "hard_coded" in ours.flags and "hard-coded answer" in ours.detail
    bird = scored(sql, ROWS, "bird_interact")
    assert bird.passed is True and "hard_coded" in bird.flags and "does not check" in bird.detail


@pytest.mark.parametrize("sql", ["SELECT * FROM (SELECT 'A', 3 FROM stores LIMIT 1) s UNION ALL SELECT 'B', 5 FROM stores",
                                 "SELECT 'A', 3 WHERE EXISTS (SELECT 1 FROM stores) UNION ALL SELECT 'B', 5"])
def test_constants_selected_from_a_table_are_flagged_not_failed(sql: str) -> None:
    """A query that reads a table but selects only constants may be a right answer (a yes/no
    question answered with SELECT 'yes' WHERE EXISTS ...): flagged in both semantics, failed in neither."""
    for semantics in ("evalbench", "bird_interact"):
        score = scored(sql, ROWS, semantics)
        assert score.passed is True and "hard_coded" in score.flags and "selects only constants" in score.detail


@pytest.mark.parametrize("semantics", ["evalbench", "bird_interact"])
def test_only_a_hard_coded_pass_is_flagged(semantics: str) -> None:
    wrong = scored("VALUES ('A', 3), ('B', 6)", [("A", 3), ("B", 6)], semantics)
    assert wrong.passed is False and "hard_coded" not in wrong.flags  # a wrong answer fails for its values
    honest = scored(GOLDEN, ROWS, semantics)
    assert honest.passed is True and "hard_coded" not in honest.flags


@pytest.mark.parametrize("semantics", ["evalbench", "bird_interact"])
def test_a_golden_sql_that_reads_no_table_does_not_fail_the_agent(semantics: str) -> None:
    score = scored("SELECT 'A', 3 UNION ALL SELECT 'B', 5", ROWS, semantics, golden_sql="VALUES ('A', 3), ('B', 5)")
    assert score.passed is True and "hard_coded" in score.flags and "as the golden SQL is" in score.detail


# --------------------------------------------------------------------------- a real run, and the summary


@pytest.fixture
def shop(tmp_path: Path):
    root = tmp_path / "setup" / "shop"
    (root / "sqlite").mkdir(parents=True)
    (root / "data").mkdir()
    (root / "sqlite" / "setup.sql").write_text("CREATE TABLE stores (store_id INTEGER PRIMARY KEY, store_name TEXT, n INTEGER);\n")
    (root / "data" / "stores.csv").write_text("1, 'A', 3\n2, 'B', 5\n")
    backend = get_backend("sqlite")
    config = DatabaseConfig(database_name="shop", dialect="sqlite", database_path=str(tmp_path / "dbs"))
    setup = find_setup(tmp_path / "setup", "shop", "sqlite", backend.setup_dialects())
    sandbox = backend.open_sandbox(config, backend.provision(config, setup, None),
                                   SandboxLimits(pool_size=1, statement_timeout_s=5, max_rows=100), None)
    yield sandbox
    sandbox.close()


def _run(sandbox: Any, sql: str, semantics: str) -> tuple[Conversation, PhaseRecord]:
    item = make_item(golden="SELECT store_name, n FROM stores ORDER BY store_id", order=False)
    item = item.model_copy(update={"dialect": "sqlite", "database": "shop"})
    agent = ScriptedAgent(lambda s, t, text: AgentReply(ReplyKind.SQL, sql=sql))
    parts = Parts(agent=agent, vuser=FixedVUser(RuntimeError("unused")), sandbox=sandbox,
                  scorers=build_scorers({"exec_match": {"semantics": semantics}}), rules=ResultRules(semantics),  # type: ignore[arg-type]
                  primary=PrimaryPolicy())
    conv = run_conversation(item, parts)
    return conv, conv.phases[0]


@pytest.mark.parametrize("semantics, passed", [("evalbench", False), ("bird_interact", True)])
def test_a_real_run_of_values_on_sqlite(shop: Any, semantics: str, passed: bool) -> None:
    _, phase = _run(shop, "VALUES ('A', 3), ('B', 5)", semantics)
    score = phase.scores["exec_match"]
    assert phase.generated is not None and phase.generated.rows == ROWS  # it did return the golden rows
    assert score.passed is passed and "hard_coded" in score.flags, score.detail
    _, honest = _run(shop, "SELECT store_name, n FROM stores", semantics)
    assert honest.scores["exec_match"].passed is True and not honest.scores["exec_match"].flags


def test_the_summary_notes_hard_coded_answers() -> None:
    from evalbench.results.summary.aggregate import verdict_notes

    summary = {"scoring": {"semantics": "evalbench"},
               "scorers": {"exec_match": {"main": {"flags": {"hard_coded": 2}}, "follow_up": {"flags": {"hard_coded": 1}}}}}
    notes = verdict_notes(summary)
    assert any(line.startswith("hard-coded answers: 3 phase(s)") for line in notes), notes
    assert not any("hard-coded" in line for line in verdict_notes({"scoring": {}, "scorers": {"exec_match": {}}}))

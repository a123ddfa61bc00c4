"""A refactoring that changes a verdict is caught: the quickstarts' scores stay what they were.

Each quickstart (embedded PostgreSQL, SQLite, DuckDB, MySQL) and the oracle on db_blog runs with
its seeded agent; its ``scores_native.csv`` must equal the recorded one in
``tests/fixtures/scores/`` byte for byte, once the run id is taken out and the rows are sorted
(conversations finish in any order). db_blog items whose SQL reads the clock (``NOW()``,
``CURRENT_DATE``, ...) are left out: which rows their golden query returns, and whether they tie,
drifts with the date, so their verdicts are not a fixed recording. A deliberate change of verdicts rewrites the recordings:
``EVALBENCH_UPDATE_SCORES=1 pytest tests/e2e/test_scores_unchanged.py`` — and the diff is then
reviewed like code.
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.dataset.reader import RawRecord, iter_jsonl
from tests.conftest import ROOT, shared_dataset

RECORDED = ROOT / "tests" / "fixtures" / "scores"
CLOCK = re.compile(
    r"\b(now\s*\(|current_(date|time|timestamp)\b|localtime(stamp)?\b|(clock|statement|transaction)_timestamp\b)|'now'",
    re.IGNORECASE,
)


def normalised(scores_native: Path, leave_out: frozenset[str] = frozenset()) -> str:
    """The CSV without its run_id column and the items left out, rows sorted: what a verdict change alters."""
    with scores_native.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    keep = [i for i, name in enumerate(rows[0]) if name != "run_id"]
    item = rows[0].index("item_id")
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([rows[0][i] for i in keep])
    writer.writerows(sorted([row[i] for i in keep] for row in rows[1:] if row[item] not in leave_out))
    return out.getvalue()


def reading_the_clock(path: Path) -> frozenset[str]:
    """Ids of the items whose SQL (golden, follow-up, set-up or test case) reads the clock."""
    found = (r.data for r in iter_jsonl(path) if isinstance(r, RawRecord) and isinstance(r.data, dict))
    return frozenset(str(data["instance_id"]) for data in found if CLOCK.search(json.dumps(data)))


def run_and_compare(
    name: str, config: Path, output: Path, *extra: str, leave_out: frozenset[str] = frozenset()
) -> None:
    code = main(["run", "--config", str(config), "--output-dir", str(output), "--run-id", "r", "--no-progress", *extra])
    assert code == 0
    got = normalised(output / "r" / "scores_native.csv", leave_out)
    recorded = RECORDED / f"{name}.csv"
    if os.environ.get("EVALBENCH_UPDATE_SCORES"):
        recorded.parent.mkdir(parents=True, exist_ok=True)
        recorded.write_text(got, encoding="utf-8")
    assert recorded.is_file(), f"no recording {recorded}: run with EVALBENCH_UPDATE_SCORES=1 once"
    want = recorded.read_text(encoding="utf-8")
    if got != want:
        changed = sorted(set(got.splitlines()) ^ set(want.splitlines()))
        pytest.fail(f"{name}: {len(changed)} score rows differ from {recorded.name}, e.g.\n" + "\n".join(changed[:6]))


@pytest.mark.parametrize("name", ["quickstart", "quickstart_sqlite", "quickstart_duckdb"])
def test_a_quickstart_scores_as_recorded(name, tmp_path, pgdata):
    pytest.importorskip("duckdb") if name.endswith("duckdb") else None
    run_and_compare(name, ROOT / "configs" / f"{name}.yaml", tmp_path)


def test_the_mysql_quickstart_scores_as_recorded(tmp_path, monkeypatch):
    url = os.environ.get("EVALBENCH_TEST_MYSQL_URL")
    if not url:
        pytest.skip("EVALBENCH_TEST_MYSQL_URL is not set")
    monkeypatch.setenv("EVALBENCH_MYSQL_URL", url)
    run_and_compare("quickstart_mysql", ROOT / "configs" / "quickstart_mysql.yaml", tmp_path)


@pytest.mark.slow
def test_the_db_blog_oracle_scores_as_recorded(tmp_path, pgdata):
    root = shared_dataset("db_blog")
    config = tmp_path / "db_blog.yaml"
    config.write_text(
        f"dataset_config: {root / 'interact_bird_format.jsonl'}\n"
        f"setup_directory: {root / 'setup'}\n"
        "model_config: simulated:oracle\n"
        "vuser_model_config: {vuser: rules}\n"
    )
    clock = reading_the_clock(root / "interact_bird_format.jsonl")
    assert 0 < len(clock) < 100, "most db_blog items must be recorded"
    run_and_compare("db_blog_oracle", config, tmp_path / "out", leave_out=clock)


def test_normalised_drops_the_run_id_and_sorts_the_rows(tmp_path):
    path = tmp_path / "scores_native.csv"
    path.write_text("run_id,item_id,value\nR1,b,1\nR1,a,\"x,y\"\n")
    assert normalised(path) == 'item_id,value\na,"x,y"\nb,1\n'


def test_normalised_leaves_out_the_items_asked(tmp_path):
    path = tmp_path / "scores_native.csv"
    path.write_text("run_id,item_id,value\nR1,b,1\nR1,a,2\n")
    assert normalised(path, frozenset({"b"})) == "item_id,value\na,2\n"


def test_items_reading_the_clock_are_found_however_it_is_spelled(tmp_path):
    path = tmp_path / "d.jsonl"
    sqls = ["SELECT NOW ()", "SELECT current_date", "SELECT 'now'::date", "SELECT x FROM t", "SELECT nowhere()"]
    path.write_text("\n".join(json.dumps({"instance_id": str(i), "sol_sql": [s]}) for i, s in enumerate(sqls)))
    assert reading_the_clock(path) == {"0", "1", "2"}

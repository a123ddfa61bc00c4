"""A refactoring that changes a verdict is caught: the quickstarts' scores stay what they were.

Each quickstart (embedded PostgreSQL, SQLite, DuckDB, MySQL) and the oracle on db_blog runs with
its seeded agent; its ``scores_native.csv`` must equal the recorded one in
``tests/fixtures/scores/`` byte for byte, once the run id is taken out and the rows are sorted
(conversations finish in any order). A deliberate change of verdicts rewrites the recordings:
``EVALBENCH_UPDATE_SCORES=1 pytest tests/e2e/test_scores_unchanged.py`` — and the diff is then
reviewed like code.
"""

from __future__ import annotations

import csv
import io
import os
from pathlib import Path

import pytest

from evalbench.cli import main
from tests.conftest import ROOT, shared_dataset

RECORDED = ROOT / "tests" / "fixtures" / "scores"


def normalised(scores_native: Path) -> str:
    """The CSV without its run_id column, rows sorted: what a verdict change alters, and nothing else."""
    with scores_native.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.reader(handle))
    keep = [i for i, name in enumerate(rows[0]) if name != "run_id"]
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow([rows[0][i] for i in keep])
    writer.writerows(sorted([row[i] for i in keep] for row in rows[1:]))
    return out.getvalue()


def run_and_compare(name: str, config: Path, output: Path, *extra: str) -> None:
    code = main(["run", "--config", str(config), "--output-dir", str(output), "--run-id", "r", "--no-progress", *extra])
    assert code == 0
    got = normalised(output / "r" / "scores_native.csv")
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
    run_and_compare("db_blog_oracle", config, tmp_path / "out")


def test_normalised_drops_the_run_id_and_sorts_the_rows(tmp_path):
    path = tmp_path / "scores_native.csv"
    path.write_text("run_id,item_id,value\nR1,b,1\nR1,a,\"x,y\"\n")
    assert normalised(path) == 'item_id,value\na,"x,y"\nb,1\n'

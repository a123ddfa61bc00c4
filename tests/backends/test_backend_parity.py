"""Same verdicts on every backend: the demo dataset's PostgreSQL build and its SQLite, DuckDB and
MySQL/MariaDB builds (generated from the PostgreSQL source by datasets/demo/make_builds.py) give
the oracle 100 % and the noisy agent the same per-item verdicts, except for the dialect
differences listed in DIFFERENCES (and in datasets/demo/README.md). DuckDB is skipped when duckdb
is not importable, MySQL when no server answers at EVALBENCH_MYSQL_URL (default root@127.0.0.1:3306)."""

from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from evalbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
BUILDS = ("quickstart_sqlite.yaml", "quickstart_duckdb.yaml", "quickstart_mysql.yaml")
# Items whose verdicts may differ from PostgreSQL's on a build, with the reason (none differ today;
# an item a build leaves out is listed here too).
DIFFERENCES: dict[str, dict[str, str]] = {
    "quickstart_mysql.yaml": {"greenleaf_43": "left out: CREATE VIEW, and MySQL's sandbox refuses DDL in write mode"},
}
PG_RUNS: dict[str, tuple[dict, dict]] = {}  # agent -> the PostgreSQL run, shared by the builds


def _skip_unavailable(config: str) -> None:
    if config == "quickstart_duckdb.yaml" and importlib.util.find_spec("duckdb") is None:
        pytest.skip("duckdb is not installed (pip install 'evalbench[duckdb]')")
    if config == "quickstart_mysql.yaml":
        pymysql = pytest.importorskip("pymysql", reason="pymysql is not installed (pip install 'evalbench[mysql]')")
        url = urlsplit(os.environ.get("EVALBENCH_MYSQL_URL", "mysql://root@127.0.0.1:3306"))
        try:
            pymysql.connect(host=url.hostname, port=url.port or 3306, user=url.username or "root", password=url.password or "").close()
        except pymysql.Error as exc:
            pytest.skip(f"no MySQL server at {url.hostname}:{url.port or 3306}: {exc}")


def _verdicts(tmp_path: Path, config: str, *extra: str) -> tuple[dict, dict]:
    out = tmp_path / config
    code = main(["run", "--config", str(ROOT / "configs" / config), "--output-dir", str(out), "--run-id", "r",
                 "--no-progress", *extra])
    assert code == 0
    verdicts = {}
    with (out / "r" / "conversations.jsonl").open() as journal:
        for line in journal:
            record = json.loads(line)
            verdicts[record["item_id"]] = [(p["phase"], p["passed"], p["outcome"]) for p in record["phases"]]
    return verdicts, json.loads((out / "r" / "summary.json").read_text())


@pytest.mark.parametrize("config", BUILDS)
@pytest.mark.parametrize("agent", ["simulated:oracle", "agents/noisy.yaml"])
def test_every_build_gives_postgres_verdicts(tmp_path: Path, pgdata: Path, agent: str, config: str) -> None:
    _skip_unavailable(config)
    if agent not in PG_RUNS:
        PG_RUNS[agent] = _verdicts(tmp_path, "quickstart.yaml", "--set", f"model_config={agent}")
    postgres, pg_summary = PG_RUNS[agent]
    build, build_summary = _verdicts(tmp_path, config, "--set", f"model_config={agent}")
    differences = DIFFERENCES.get(config, {})
    assert len(postgres) == 43 and build.keys() == postgres.keys() - differences.keys()
    assert {k: v for k, v in build.items() if k not in differences} == {k: v for k, v in postgres.items() if k not in differences}
    if agent == "simulated:oracle":
        for summary, items in ((pg_summary, 43), (build_summary, 43 - len(differences))):
            assert summary["outcomes"]["scored"] == items
            assert summary["success"]["main"]["rate"] == summary["success"]["follow_up"]["rate"] == 1.0
            assert summary["scorers"]["exec_match"]["main"]["rate"] == 1.0
    # the Management items: test cases on PostgreSQL, the state they leave on the other builds
    assert pg_summary["scorers"]["test_cases"]["main"]["applicable"] == 3
    assert build_summary["scorers"]["state_match"]["main"]["applicable"] == 3 - len(differences)

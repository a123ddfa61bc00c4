"""Same verdicts on every backend: the demo dataset's PostgreSQL and SQLite builds give the
oracle 100 % and the noisy agent the same per-item verdicts (datasets/demo/make_sqlite.py
generates the SQLite build from the PostgreSQL source)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from evalbench.cli import main

ROOT = Path(__file__).resolve().parents[1]


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


@pytest.mark.parametrize("agent", ["simulated:oracle", "agents/noisy.yaml"])
def test_postgres_and_sqlite_give_the_same_verdicts(tmp_path: Path, pgdata: Path, agent: str) -> None:
    postgres, pg_summary = _verdicts(tmp_path, "quickstart.yaml", "--set", f"model_config={agent}")
    sqlite, lite_summary = _verdicts(tmp_path, "quickstart_sqlite.yaml", "--set", f"model_config={agent}")
    assert postgres.keys() == sqlite.keys() and len(postgres) == 43
    assert postgres == sqlite
    if agent == "simulated:oracle":
        for summary in (pg_summary, lite_summary):
            assert summary["outcomes"]["scored"] == 43
            assert summary["scorers"]["exec_match"]["main"]["rate"] == 1.0
    # the three Management items: test cases on PostgreSQL, the state they leave on SQLite
    assert pg_summary["scorers"]["test_cases"]["main"]["applicable"] == 3
    assert lite_summary["scorers"]["state_match"]["main"]["applicable"] == 3

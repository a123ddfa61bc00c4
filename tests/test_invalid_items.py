"""Items whose golden SQL fails are the dataset's problem: `invalid_item`, listed, in no
denominator, never exit 3; `--strict` exits 2; the reports say so."""

from __future__ import annotations

import json

from evalbench.cli import main
from evalbench.results import read_journal
from tests.conftest import DEMO


def record(instance_id: str, sql: str, follow_up: str | None = None) -> str:
    data = {"instance_id": instance_id, "selected_database": "greenleaf", "query": "q", "amb_user_query": "q",
            "sol_sql": [sql], "category": "Query", "conditions": {"order": False, "distinct": False, "decimal": -1}}
    if follow_up:
        data["follow_up"] = {"query": "and then?", "sol_sql": [follow_up], "conditions": {"order": False}}
    return json.dumps(data)


def test_invalid_items_are_listed_apart_and_never_exit_3(tmp_path, pgdata, capsys):
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("\n".join([
        record("ok", "SELECT store_name FROM stores"),
        record("broken", "SELECT no_such_column FROM stores"),
        record("broken_follow_up", "SELECT city FROM stores", follow_up="SELECT * FROM no_such_table"),
        record("distinct_on", "SELECT DISTINCT ON (city) city, store_name FROM stores ORDER BY city, store_name"),
    ]) + "\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"dataset_config: {dataset}\nsetup_directory: {DEMO / 'setup'}\nmodel_config: simulated:oracle\n"
                      f"reporting: {{csv: {{output_directory: {tmp_path}}}}}\n")
    assert main(["run", "--config", str(config), "--run-id", "lenient", "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "invalid items: 3, in no rate" in out and "broken: golden SQL failed (sql)" in out
    assert "distinct_on: golden SQL failed after BIRD-Interact's cleaning" in out  # DISTINCT ON loses DISTINCT
    summary = json.loads((tmp_path / "lenient" / "summary.json").read_text())
    assert summary["outcomes"]["invalid_item"] == 2  # the broken follow-up's item stays scored
    assert {(i["item_id"], i["phase"]) for i in summary["invalid_items"]["items"]} == {
        ("broken", "main"), ("distinct_on", "main"), ("broken_follow_up", "follow_up")}
    assert summary["success"]["main"] == summary["success"]["main"] | {"total": 2, "passed": 2}  # ok, broken_follow_up
    assert "follow_up" not in summary["success"]  # its only follow-up was invalid
    assert summary["infra_errors"] == 0 and summary["taxonomy"] == {}
    records = {r["item_id"]: r for r in read_journal(tmp_path / "lenient")}
    assert records["broken"]["turns"] == [] and records["broken"]["phases"][0]["scores"] == {}
    assert records["broken_follow_up"]["phases"][1]["outcome"] == "invalid_item"
    markdown = (tmp_path / "lenient" / "summary.md").read_text()
    assert "**Invalid items:** 3, in no rate" in markdown
    junit = (tmp_path / "lenient" / "junit.xml").read_text()
    assert junit.count("<skipped") == 2 and "<failure" not in junit and "<error" not in junit

    assert main(["run", "--config", str(config), "--run-id", "strict", "--no-progress", "--strict"]) == 2
    assert "3 invalid item(s) (--strict)" in capsys.readouterr().err

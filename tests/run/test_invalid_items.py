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


def test_run_and_validate_list_the_same_invalid_phases(tmp_path, pgdata, capsys):
    """One definition: a LIMIT through ties, an empty golden result, a follow-up the agent never
    reaches (its main phase fails) — the run lists each phase once across trials, with the
    reasons `validate` gives; valid items are untouched."""
    stores = "SELECT store_name FROM stores"
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("\n".join([
        record("ok", f"{stores} ORDER BY store_id LIMIT 2"),
        record("tied_names", "SELECT store_name, 1 AS k FROM stores ORDER BY k LIMIT 2"),
        record("empty", f"{stores} WHERE store_id < 0"),
        record("tied_order", "SELECT store_name, 1 AS k FROM stores ORDER BY k").replace('"order": false', '"order": true', 1),
        record("ordered", f"{stores} ORDER BY store_id").replace('"order": false', '"order": true', 1),
        record("unreached", f"{stores} WHERE store_id < 0", follow_up="SELECT * FROM no_such_table"),
    ]) + "\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"dataset_config: {dataset}\nsetup_directory: {DEMO / 'setup'}\nmodel_config: simulated:oracle\n"
                      f"trials: 2\nreporting: {{csv: {{output_directory: {tmp_path}}}}}\n")
    assert main(["run", "--config", str(config), "--run-id", "r", "--no-progress"]) == 0
    capsys.readouterr()
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    listed = {(i["item_id"], i["phase"]): i["reason"] for i in summary["invalid_items"]["items"]}
    assert summary["invalid_items"]["count"] == len(listed)  # once each, not once per trial
    assert listed[("tied_names", "main")].startswith("the golden query's LIMIT 2 cuts through rows tied")
    assert listed[("empty", "main")].startswith("golden result is empty: no answer can pass")
    assert listed[("unreached", "follow_up")].startswith("golden SQL failed (sql)")  # never reached: main is invalid
    assert listed[("tied_order", "main")].startswith("conditions.order is true but rows tied on the golden query's")
    assert ("ok", "main") not in listed and ("ordered", "main") not in listed
    findings = tmp_path / "validate.json"
    assert main(["validate", "--config", str(config), "--no-progress", "--json", str(findings)]) == 1
    assert {(i["item_id"], i["phase"]): i["reason"] for i in json.loads(findings.read_text())["invalid"]} == listed

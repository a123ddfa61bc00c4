"""`evalbench validate`: the oracle run of a dataset and the checks that need no agent."""

from __future__ import annotations

import json

from evalbench.cli import main
from tests.conftest import DEMO


def item(instance_id, sql, *, order=False, snippet=None, follow_up=None):
    ambiguity = [{"term": "shops", "sql_snippet": snippet, "is_mask": True, "type": "semantic_ambiguity"}] if snippet else []
    record = {"instance_id": instance_id, "selected_database": "greenleaf", "query": "q", "amb_user_query": "q",
              "user_query_ambiguity": {"critical_ambiguity": ambiguity}, "sol_sql": [sql], "category": "Query",
              "conditions": {"order": order, "distinct": False, "decimal": -1}}
    if follow_up:
        record["follow_up"] = {"query": "f", "sol_sql": [follow_up], "conditions": {"order": False}}
    return json.dumps(record)


def config_for(tmp_path, lines):
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("\n".join(lines) + "\n")
    config = tmp_path / "run.yaml"
    config.write_text(f"dataset_config: {dataset}\nsetup_directory: {DEMO / 'setup'}\nmodel_config: simulated:oracle\n")
    return config


def test_the_demo_dataset_is_valid(pgdata, capsys):
    assert main(["validate", "--config", str(DEMO.parent.parent / "configs" / "quickstart.yaml")]) == 0
    out = capsys.readouterr().out
    assert "43 items: 0 invalid, 0 invalid but allowed, 0 record errors, 0 warnings" in out
    assert "items whose golden result is empty: 0" in out


def test_findings_and_exit_codes(tmp_path, pgdata, capsys):
    lines = [
        item("ok", "SELECT store_name FROM stores ORDER BY store_id", order=True),
        item("broken", "SELECT nope FROM stores"),
        item("unordered", "SELECT store_name FROM stores", order=True),
        item("snippet", "SELECT store_name FROM stores", snippet="WHERE city = 'x'"),
        item("bad_follow_up", "SELECT 1", follow_up="SELECT * FROM missing_table"),
        item("ok", "SELECT 1"),  # duplicate id
    ]
    config = config_for(tmp_path, lines)
    report = tmp_path / "validation.json"
    assert main(["validate", "--config", str(config), "--json", str(report)]) == 1
    data = json.loads(report.read_text())
    assert sorted(data["invalid_items"]) == ["bad_follow_up", "broken", "unordered"]
    assert any("duplicate item id 'ok'" in e for e in data["record_errors"])
    assert data["findings"]["snippet"] == [{"level": "warning", "message": "sql_snippet of 'shops' is not in the golden SQL"}]
    assert "column \"nope\" does not exist" in data["findings"]["broken"][0]["message"]
    out = capsys.readouterr().out
    assert "broken (items.jsonl:2): error:" in out

    config = config_for(tmp_path, lines[:5])  # no duplicate: allowing the invalid items passes
    assert main(["validate", "--config", str(config), "--allow", "broken", "unordered", "bad_follow_up"]) == 0
    assert main(["validate", "--config", str(config), "--allow", "broken"]) == 1

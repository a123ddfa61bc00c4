"""`evalbench validate`: the oracle run of a dataset and the checks that need no agent."""

from __future__ import annotations

import io
import json
import sys
import time

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


def finding_lines(out):
    """The printed findings (``ID (SOURCE): LEVEL: MESSAGE``), in order."""
    return [line for line in out.splitlines() if ": error: " in line or ": warning: " in line]


def test_findings_are_sorted_by_severity_then_natural_item_order(tmp_path, pgdata, capsys):
    lines = [  # file order on purpose unlike the sorted one; lexical order would put item_10 before item_9
        item("item_10", "SELECT nope FROM stores"),
        item("item_2", "SELECT store_name FROM stores", snippet="WHERE city = 'x'"),
        item("item_9", "SELECT store_name FROM stores", snippet="WHERE zone = 'y'", follow_up="SELECT * FROM missing_table"),
        item("item_1", "SELECT store_name FROM stores", order=True, snippet="WHERE a = 'z'"),
    ]
    report = tmp_path / "validation.json"
    assert main(["validate", "--config", str(config_for(tmp_path, lines)), "--json", str(report)]) == 1
    printed = finding_lines(capsys.readouterr().out)
    assert [(line.split(" ")[0], line.split(": ")[1]) for line in printed] == [
        ("item_1", "error"), ("item_9", "error"), ("item_10", "error"),
        ("item_1", "warning"), ("item_2", "warning"), ("item_9", "warning"),
    ]
    data = json.loads(report.read_text())  # the same findings, in the same order
    assert [f"{f['item_id']} ({f['source']}): {f['level']}: {f['message']}" for f in data["sorted_findings"]] == printed
    assert list(data["findings"]) == ["item_1", "item_2", "item_9", "item_10"]
    assert [f["level"] for f in data["findings"]["item_1"]] == ["error", "warning"]
    assert data["invalid_items"] == ["item_1", "item_9", "item_10"]


class _Terminal(io.StringIO):
    def isatty(self):
        return True


def test_progress_bar_on_a_terminal_only(tmp_path, pgdata, monkeypatch):
    config = str(config_for(tmp_path, [item("a", "SELECT 1"), item("b", "SELECT 2")]))
    for argv, terminal, shown in ([], True, True), (["--no-progress"], True, False), ([], False, False):
        stderr = _Terminal() if terminal else io.StringIO()
        monkeypatch.setattr(sys, "stderr", stderr)
        assert main(["validate", "--config", config, "--no-test-cases", *argv]) == 0
        assert ("validate: 100%" in stderr.getvalue() and "2/2" in stderr.getvalue()) is shown, (argv, terminal)


def test_parallel_checks_find_what_one_runner_finds(tmp_path, pgdata):
    """Four runners (the default) and one give the same report, test cases included; a broken
    golden SQL is found either way and the demo's management tasks stay valid."""
    management = [line for line in (DEMO / "greenleaf.jsonl").read_text().splitlines()
                  if json.loads(line)["category"] == "Management"][:2]  # test cases: two child processes each
    lines = management + [
        item("broken", "SELECT nope FROM stores"),
        item("unordered", "SELECT store_name FROM stores", order=True),
        item("snippet", "SELECT store_name FROM stores", snippet="WHERE city = 'x'"),
        item("bad_follow_up", "SELECT 1", follow_up="SELECT * FROM missing_table"),
    ] + [item(f"ok_{i}", f"SELECT store_name FROM stores WHERE store_id >= {i} ORDER BY store_id") for i in range(6)]
    config = str(config_for(tmp_path, lines))
    reports = []
    for runners in (1, 4):
        path = tmp_path / f"runners_{runners}.json"
        assert main(["validate", "--config", config, "--no-progress", "--json", str(path),
                     "--set", f"runners={{sqlexec_runners: {runners}}}"]) == 1
        reports.append(json.loads(path.read_text()))
    assert reports[0] == reports[1]
    assert reports[0]["invalid_items"] == ["bad_follow_up", "broken", "unordered"]
    assert "column \"nope\" does not exist" in reports[0]["findings"]["broken"][0]["message"]


def test_golden_sql_runs_in_parallel(tmp_path, pgdata):
    """Eight golden queries that each sleep 0.5 s take at least 4 s one after another: with four
    runners they end well before that."""
    from evalbench.config import load_run_config
    from evalbench.run.plan import RunPlan
    from evalbench.run.validate import validate

    validate(RunPlan.resolve(load_run_config(config_for(tmp_path, [item("warm", "SELECT 1")]))), test_cases=False)  # provisioned once
    config = load_run_config(config_for(tmp_path, [item(f"sleep_{i}", "SELECT 1 AS one FROM pg_sleep(0.5)") for i in range(8)]))
    assert config.runners.sqlexec_runners == 4
    started = time.monotonic()
    report = validate(RunPlan.resolve(config), test_cases=False)
    elapsed = time.monotonic() - started
    assert report.items == 8 and report.invalid_ids() == [] and not report.database_errors
    assert elapsed < 8 * 0.5, elapsed

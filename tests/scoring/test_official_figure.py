"""BIRD-Interact's official success figure reproduced from recorded agent outputs.

The 935 cases of ``tests/data/bird_interact_cases.jsonl`` are (golden, prediction) pairs on
``db_blog`` whose ``expected`` verdict BIRD-Interact's own code produced
(``eval_bird_interact_batch.py::batch_eval`` → ``test_case_default``). Made into a dataset and a
predictions file and run through the whole pipeline, the run's ``official.success_rate`` must be
what ``batch_eval`` prints for them — ``successes / total`` — while our own rate keeps the invalid
items out of its denominator.
"""

from __future__ import annotations

import json

import psycopg
import pytest

from evalbench.cli import main
from tests.conftest import shared_dataset
from tests.scoring.test_bird_interact_differential import CASES


@pytest.mark.slow
@pytest.mark.shared_data
def test_official_success_reproduces_bird_interacts_batch_eval(tmp_path, pgdata, embedded_admin_url, monkeypatch, capsys):
    root = shared_dataset("db_blog")
    monkeypatch.setenv("PGTZ", "UTC")  # the sessions' time zone as the corpus was judged
    with psycopg.connect(embedded_admin_url) as conn:
        try:
            conn.execute("SELECT 'x'::xml")
            xml = True
        except psycopg.Error:
            xml = False  # the embedded server may be built without libxml: those cases are left out
    cases = [c for c in CASES if xml or "::xml" not in " ".join(c["sol_sql"] + c["pred_sqls"])]
    dataset, predictions = tmp_path / "cases.jsonl", tmp_path / "predictions.jsonl"
    dataset.write_text("".join(json.dumps({
        "instance_id": c["id"], "selected_database": "db_blog", "query": "q", "amb_user_query": "q",
        "sol_sql": c["sol_sql"], "category": "Query", "conditions": c["conditions"]}) + "\n" for c in cases))
    predictions.write_text("".join(json.dumps({"instance_id": c["id"], "pred_sqls": c["pred_sqls"]}) + "\n" for c in cases))
    config = tmp_path / "run.yaml"
    config.write_text(f"dataset_config: {dataset}\nsetup_directory: {root / 'setup'}\n"
                      f"model_config: {{agent: predictions, predictions_file: '{predictions}'}}\n"
                      f"reporting: {{csv: {{output_directory: {tmp_path}}}}}\nrun_id: recorded\n")
    assert main(["run", "--config", str(config), "--no-progress"]) == 0
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "recorded" / "summary.json").read_text())

    official = summary["official"]
    expected = sum(c["expected"] for c in cases)
    assert (official["total"], official["passed"]) == (len(cases), expected)
    assert official["success_rate"] == round(expected / len(cases), 4)
    assert official["mean_reward"] == round(0.7 * expected / len(cases), 4)  # no follow-ups, no debugging
    # ours: the invalid items (golden fails after cleaning, empty golden result...) are in no rate
    invalid = summary["invalid_items"]["count"]
    assert invalid >= 20 and summary["success"]["main"]["total"] == len(cases) - summary["outcomes"]["invalid_item"]
    assert f"success {official['success_rate']:.1%} ({expected}/{len(cases)})" in out


@pytest.mark.slow
def test_official_figure_in_summary_and_compare(tmp_path, demo_config_path, pgdata, capsys):
    """The noisy demo agent: every conversation counts; a phase passes officially only when
    exec_match or test_cases passed it (an answer in words, judged by answer_match, does not);
    compare sets the two runs' official figures side by side."""
    from evalbench.results import read_journal

    for run_id, extra in (("oracle", ["--set", "model_config=simulated:oracle"]), ("noisy", [])):
        assert main(["run", "--config", str(demo_config_path), "--output-dir", str(tmp_path), "--run-id", run_id,
                     "--no-progress", *extra]) == 0
    out = capsys.readouterr().out
    summary = json.loads((tmp_path / "noisy" / "summary.json").read_text())
    records = list(read_journal(tmp_path / "noisy"))
    by_hand = sum(1 for r in records if r["phases"] and r["phases"][0].get("outcome") == "scored"
                  and r["phases"][0].get("passed") and r["phases"][0].get("primary") in ("exec_match", "test_cases"))
    official = summary["official"]
    assert official["total"] == len(records) == 43 and official["passed"] == by_hand
    assert official["passed"] <= summary["success"]["main"]["passed"]
    assert any(r["phases"][0].get("primary") == "answer_match" for r in records)  # the case that differs is there
    assert "BIRD-Interact official (every item counts" in out
    assert "BIRD-Interact official" in (tmp_path / "noisy" / "summary.md").read_text()
    assert main(["compare", str(tmp_path / "oracle"), str(tmp_path / "noisy")]) in (0, 1)
    text = capsys.readouterr().out
    assert f"BIRD-Interact official success (every item counts): A 100.0% (43 items), B {official['success_rate']:.1%}" in text

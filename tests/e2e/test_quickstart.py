"""The quickstart end to end: the noisy agent scores strictly between 0 and 100 %, the oracle 100 %."""

from __future__ import annotations

import json
from pathlib import Path

from evalbench.cli import main


def _run(tmp_path: Path, demo_config_path: Path, pgdata: Path, *extra: str) -> dict:
    code = main(["run", "--config", str(demo_config_path), "--output-dir", str(tmp_path), "--run-id", "r", "--no-progress", *extra])
    assert code == 0
    run_dir = tmp_path / "r"
    for name in ("manifest.json", "conversations.jsonl", "scores.csv", "summary.csv", "summary.json"):
        assert (run_dir / name).is_file(), name
    return json.loads((run_dir / "summary.json").read_text())


def test_noisy_quickstart_scores_between_0_and_100(tmp_path, demo_config_path, pgdata, capsys):
    summary = _run(tmp_path, demo_config_path, pgdata)
    main_phase = summary["scorers"]["exec_match"]["main"]
    assert summary["total_items"] == 43
    assert main_phase["applicable"] == 40 and main_phase["not_applicable"] == 3  # 3 Management items
    assert 0 < main_phase["passed"] < 40
    assert summary["scorers"]["test_cases"]["main"]["applicable"] == 3
    assert sum(summary["outcomes"].values()) == 43
    out = capsys.readouterr().out
    assert "exec_match" in out and "outcomes:" in out


def test_oracle_quickstart_scores_100(tmp_path, demo_config_path, pgdata):
    summary = _run(tmp_path, demo_config_path, pgdata, "--set", "model_config=simulated:oracle")
    assert summary["scorers"]["exec_match"]["main"]["rate"] == 1.0
    assert summary["scorers"]["exec_match"]["follow_up"]["rate"] == 1.0
    assert summary["scorers"]["test_cases"]["main"] == {"applicable": 3, "not_applicable": 40, "passed": 3, "rate": 1.0, "ci": [1.0, 1.0]}
    assert summary["outcomes"]["scored"] == 43

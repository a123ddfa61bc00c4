"""Durable, resumable runs: a run killed with SIGKILL (or stopped with Ctrl-C) is resumed and
ends with every item journaled exactly once and the same figures as an uninterrupted run."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalbench.config import load_run_config
from evalbench.core.errors import ConfigError
from evalbench.results import read_journal
from evalbench.run import run
from tests.conftest import DEMO, ROOT
from tests.helpers import default_sigint

ITEMS = sum(1 for line in (DEMO / "greenleaf.jsonl").read_text(encoding="utf-8").splitlines() if line.strip())
# Figures that measure time or the machine, not the evaluation.
VOLATILE = {"run_id", "elapsed_s", "conversations_per_s", "databases", "sessions", "cancelled"}
VOLATILE_CONVERSATION = {"mean_agent_latency_s", "conversation_seconds"}


def _config(tmp_path: Path, latency_s: float = 0.02, seed: int = 42) -> Path:
    config = tmp_path / "run.yaml"
    config.write_text(
        f"dataset_config: {DEMO / 'greenleaf.jsonl'}\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        f"model_config: {{agent: simulated:noisy, latency_s: {latency_s}}}\n"
        "scorers: {exec_match: {}, test_cases: {}, executable: {}, turn_count: {}}\n"
        "runners: {sqlgen_runners: 2}\n"
        "max_in_flight: 2\n"
        f"seed: {seed}\n"
        f"reporting: {{csv: {{output_directory: {tmp_path}}}}}\n",
        encoding="utf-8",
    )
    return config


def _comparable(summary: dict) -> dict:
    out = {k: v for k, v in summary.items() if k not in VOLATILE}
    out["conversation"] = {k: v for k, v in summary["conversation"].items() if k not in VOLATILE_CONVERSATION}
    return out


def _start(config: Path, run_id: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "evalbench", "run", "--config", str(config), "--run-id", run_id, "--no-progress"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
        preexec_fn=default_sigint,
    )


def _wait_for_lines(journal: Path, count: int, process: subprocess.Popen, timeout_s: float = 60) -> int:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        lines = journal.read_bytes().count(b"\n") if journal.exists() else 0
        if lines >= count:
            return lines
        if process.poll() is not None:
            pytest.fail(f"the run ended before {count} conversations: {process.communicate()}")
        time.sleep(0.02)
    process.kill()
    pytest.fail(f"fewer than {count} conversations after {timeout_s} s")


@pytest.fixture(scope="module")
def reference(tmp_path_factory, pgdata, embedded_admin_url):
    """An uninterrupted run of the same config and seed."""
    tmp = tmp_path_factory.mktemp("reference")
    config = load_run_config(_config(tmp), run_id="full")
    return run(config, progress=False)


def test_sigkill_then_resume_equals_an_uninterrupted_run(tmp_path, reference):
    config_path = _config(tmp_path)
    process = _start(config_path, "killed")
    journal = tmp_path / "killed" / "conversations.jsonl"
    _wait_for_lines(journal, 10, process)
    process.send_signal(signal.SIGKILL)
    process.communicate(timeout=30)
    assert process.returncode == -signal.SIGKILL
    before = journal.read_bytes().count(b"\n")
    assert 10 <= before < ITEMS, "the kill should land midway"
    assert not (tmp_path / "killed" / "summary.json").exists()

    result = run(load_run_config(config_path), progress=False, resume=tmp_path / "killed")
    records = list(read_journal(result.run_dir))
    ids = [r["item_id"] for r in records]
    assert len(ids) == ITEMS and len(set(ids)) == ITEMS  # every item exactly once
    assert _comparable(result.summary) == _comparable(reference.summary)
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert [s["resumed_with"] for s in manifest["sessions"]] == [0, before]
    assert result.summary["sessions"] == 2
    # the reports are those of the whole run
    scores = (result.run_dir / "scores_native.csv").read_text().splitlines()
    assert len({line.split(",")[1] for line in scores[1:]}) == ITEMS


def test_a_partial_last_line_is_dropped_and_rerun(tmp_path, reference):
    config_path = _config(tmp_path, latency_s=0)
    first = run(load_run_config(config_path, run_id="cut"), progress=False)
    journal = first.run_dir / "conversations.jsonl"
    lines = journal.read_bytes().splitlines(keepends=True)
    # a crash while writing: the last record cut in half, and one record marked cancelled
    cancelled = json.loads(lines[1]) | {"outcome": "cancelled"}
    journal.write_bytes(lines[0] + (json.dumps(cancelled) + "\n").encode() + b"".join(lines[2:-1]) + lines[-1][:40])
    result = run(load_run_config(config_path), progress=False, resume=first.run_dir)
    ids = [r["item_id"] for r in read_journal(result.run_dir)]
    assert len(ids) == ITEMS and len(set(ids)) == ITEMS
    assert "cancelled" not in {r["outcome"] for r in read_journal(result.run_dir)}


def test_resume_refuses_a_config_that_changes_results(tmp_path, pgdata):
    config_path = _config(tmp_path, latency_s=0)
    first = run(load_run_config(config_path, run_id="r"), progress=False)
    (tmp_path / "other").mkdir()
    with pytest.raises(ConfigError) as excinfo:
        run(load_run_config(_config(tmp_path / "other", latency_s=0, seed=7)), progress=False, resume=first.run_dir)
    assert "seed: 42 -> 7" in str(excinfo.value) and "cannot resume" in str(excinfo.value)
    # threads, in-flight cap and the error (retry) policy may change
    changed = load_run_config(config_path, runners={"sqlgen_runners": 4}, max_in_flight=8)
    result = run(changed, progress=False, resume=first.run_dir)
    assert result.summary["total_items"] == ITEMS and result.summary["sessions"] == 2


def test_a_new_run_refuses_an_existing_journal_and_points_to_resume(tmp_path, pgdata):
    config_path = _config(tmp_path, latency_s=0)
    run(load_run_config(config_path, run_id="twice"), progress=False)
    with pytest.raises(ConfigError, match="--resume"):
        run(load_run_config(config_path, run_id="twice"), progress=False)


def test_ctrl_c_marks_in_flight_cancelled_writes_reports_and_resumes(tmp_path, reference):
    config_path = _config(tmp_path, latency_s=0.05)
    process = _start(config_path, "interrupted")
    _wait_for_lines(tmp_path / "interrupted" / "conversations.jsonl", 5, process)
    process.send_signal(signal.SIGINT)
    _out, err = process.communicate(timeout=60)
    assert process.returncode == 130, err
    assert "--resume" in err
    run_dir = tmp_path / "interrupted"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["cancelled"] is True and summary["outcomes"]["cancelled"] >= 1
    assert (run_dir / "report.html").exists() and (run_dir / "junit.xml").exists()
    result = run(load_run_config(config_path), progress=False, resume=run_dir)
    assert _comparable(result.summary) == _comparable(reference.summary)

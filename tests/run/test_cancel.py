"""Ctrl-C and SIGTERM during a run of management items (test cases running in child processes):
the conversations in flight are journaled as ``cancelled`` — never as failures — the run exits
130, and ``--resume`` completes it with the figures of an uninterrupted run."""

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
from evalbench.results import read_journal
from evalbench.run import run
from tests.conftest import DEMO, ROOT
from tests.helpers import default_sigint

COPIES = 4  # of each demo management item: enough conversations to interrupt some in flight
VOLATILE = {"run_id", "elapsed_s", "conversations_per_s", "databases", "sessions", "cancelled", "complete", "completeness"}


def _management_dataset(directory: Path) -> Path:
    records = [json.loads(line) for line in (DEMO / "greenleaf.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
    management = [r for r in records if r.get("category") == "Management"]
    assert management, "the demo dataset has management items"
    path = directory / "management.jsonl"
    with path.open("w", encoding="utf-8") as handle:
        for copy in range(COPIES):
            for record in management:
                handle.write(json.dumps(record | {"instance_id": f"{record['instance_id']}_{copy}"}) + "\n")
    return path


def _config(directory: Path, dataset: Path) -> Path:
    config = directory / "run.yaml"
    config.write_text(
        f"dataset_config: {dataset}\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        "model_config: {agent: simulated:noisy, latency_s: 0.05}\n"
        "scorers: {test_cases: {}, executable: {}, turn_count: {}}\n"
        "runners: {sqlgen_runners: 2, scoring_runners: 2}\n"
        "max_in_flight: 3\n"
        "seed: 7\n"
        f"reporting: {{csv: {{output_directory: {directory}}}}}\n",
        encoding="utf-8",
    )
    return config


def _verdicts(run_dir: Path) -> dict[str, tuple[str, bool | None]]:
    out = {}
    for record in read_journal(run_dir):
        score = (record["phases"][0].get("scores") or {}).get("test_cases") or {}
        out[record["item_id"]] = (record["outcome"], score.get("passed"))
    return out


def _comparable(summary: dict) -> dict:
    out = {k: v for k, v in summary.items() if k not in VOLATILE}
    out["conversation"] = {k: v for k, v in summary["conversation"].items()
                           if k not in {"mean_agent_latency_s", "conversation_seconds"}}
    return out


@pytest.fixture(scope="module")
def dataset(tmp_path_factory) -> Path:
    return _management_dataset(tmp_path_factory.mktemp("dataset"))


@pytest.fixture(scope="module")
def reference(tmp_path_factory, pgdata, embedded_admin_url, dataset):
    directory = tmp_path_factory.mktemp("uninterrupted")
    return run(load_run_config(_config(directory, dataset), run_id="full"), progress=False)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
@pytest.mark.slow  # end to end: make test-slow (CI) runs it
def test_an_interrupted_run_cancels_in_flight_items_and_resume_equals_an_uninterrupted_run(tmp_path, reference, dataset, signum):
    config = _config(tmp_path, dataset)
    process = subprocess.Popen(
        [sys.executable, "-m", "evalbench", "run", "--config", str(config), "--run-id", "cut", "--no-progress"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=os.environ.copy(),
        preexec_fn=default_sigint,
    )
    journal = tmp_path / "cut" / "conversations.jsonl"
    give_up = time.monotonic() + 120
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= 2):
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < give_up, "no conversation journaled in 120 s"
        time.sleep(0.02)
    process.send_signal(signum)
    _out, err = process.communicate(timeout=120)
    assert process.returncode == 130, err
    assert "--resume" in err

    expected = _verdicts(reference.run_dir)
    interrupted = _verdicts(tmp_path / "cut")
    cancelled = [item for item, (outcome, _) in interrupted.items() if outcome == "cancelled"]
    assert cancelled, "some conversations were in flight"
    for item, verdict in interrupted.items():  # nothing the cancellation touched became a verdict
        assert verdict[0] == "cancelled" or verdict == expected[item], (item, verdict, expected[item])
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["cancelled"] is True and summary["complete"] is False

    resumed = run(load_run_config(config), progress=False, resume=tmp_path / "cut")
    assert _verdicts(resumed.run_dir) == expected
    assert _comparable(resumed.summary) == _comparable(reference.summary)

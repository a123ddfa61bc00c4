"""``run --workers N``: the run's shards as processes, merged into its run directory; the same
per-item verdicts as one process, and a run whose worker was killed completes on --resume."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from evalbench.cli import main
from evalbench.workers import worker_argv
from tests.helpers import default_sigint
from tests.test_shards import _verdicts

ROOT = Path(__file__).resolve().parents[1]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
SLOW = ["--set", "model_config={agent: simulated:oracle, latency_s: 0.15}", "--set",
        "runners={sqlgen_runners: 1, promptgen_runners: 1, vuser_runners: 1, sqlexec_runners: 1, scoring_runners: 1}"]


def test_worker_arguments_are_the_run_s_with_a_shard_and_a_place_of_their_own(tmp_path: Path) -> None:
    argv = ["--config", "c.yaml", "--workers", "2", "--run-id", "r", "--output-dir=out", "--set", "seed=7", "--no-progress"]
    assert worker_argv(argv, "1/2", tmp_path / "r-shard-1", resume=False) == [
        "--config", "c.yaml", "--set", "seed=7", "--shard", "1/2", "--run-id", "r-shard-1", "--output-dir", str(tmp_path),
        "--no-progress", "--no-preflight"]
    assert worker_argv(["--config", "c.yaml", "--resume", "x", "--workers=2"], "2/2", tmp_path / "x", resume=True) == [
        "--config", "c.yaml", "--shard", "2/2", "--resume", str(tmp_path / "x"), "--no-progress", "--no-preflight"]


def test_two_workers_give_the_verdicts_of_one_process(tmp_path: Path, pgdata: Path) -> None:
    base = ["run", "--config", str(QUICKSTART), "--output-dir", str(tmp_path), "--no-progress"]
    assert main([*base, "--run-id", "one"]) == 0
    assert main([*base, "--run-id", "two", "--workers", "2"]) == 0
    assert _verdicts(tmp_path / "two") == _verdicts(tmp_path / "one")
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["complete"] and summary["total_items"] == 43
    assert sorted(p.name for p in (tmp_path / "two" / "shards").glob("*-shard-*") if p.is_dir()) == ["two-shard-1", "two-shard-2"]
    assert main([*base, "--run-id", "bad", "--workers", "2", "--shard", "1/2"]) == 2


def _worker_pids(run_id: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                cmdline = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"--shard" in cmdline and f"{run_id}-shard-1".encode() in cmdline:
                pids.append(int(entry.name))
    return pids


def test_a_killed_worker_fails_the_run_and_resume_completes_it(tmp_path: Path, pgdata: Path) -> None:
    command = [sys.executable, "-m", "evalbench", "run", "--config", str(QUICKSTART), "--output-dir", str(tmp_path),
               "--run-id", "k", "--no-progress", "--workers", "2", *SLOW]
    parent = subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=os.environ.copy(), preexec_fn=default_sigint)
    journal = tmp_path / "k" / "shards" / "k-shard-1" / "conversations.jsonl"
    give_up = time.monotonic() + 120
    while not (journal.exists() and journal.read_bytes().count(b"\n") >= 2):
        assert parent.poll() is None, parent.communicate()
        assert time.monotonic() < give_up
        time.sleep(0.05)
    for pid in _worker_pids("k"):
        os.kill(pid, signal.SIGKILL)
    _, err = parent.communicate(timeout=120)
    assert parent.returncode == 3, err
    assert "worker k-shard-1 ended" in err and "--resume" in err
    assert not (tmp_path / "k" / "conversations.jsonl").exists()
    resumed = main(["run", "--config", str(QUICKSTART), "--no-progress", "--resume", str(tmp_path / "k"), "--workers", "2", *SLOW])
    assert resumed == 0
    summary = json.loads((tmp_path / "k" / "summary.json").read_text())
    assert summary["complete"] and summary["total_items"] == 43 and summary["outcomes"]["scored"] == 43

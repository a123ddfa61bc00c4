"""``run --workers N``: the run's shards as processes, merged into its run directory; the same
per-item verdicts as one process, and a run whose worker was killed completes on --resume."""

from __future__ import annotations

import csv
import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.clients.limits import CallLimiter
from evalbench.config import RunConfig, load_run_config
from evalbench.core.errors import ConfigError
from evalbench.core.ratelimit import RateLimiter, split_between
from evalbench.run.items import Items
from evalbench.run.parallel.processes import worker_argv
from evalbench.run.parallel.sizing import auto_workers, fit_workers, usable_cores
from evalbench.run.plan import RunPlan
from tests.helpers import default_sigint
from tests.run.test_shards import _verdicts

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"


def planned(config: RunConfig) -> tuple[RunPlan, Items]:
    plan = RunPlan.resolve(config)
    return plan, Items(plan.items)
SLOW = ["--set", "model_config={agent: simulated:oracle, latency_s: 0.15}", "--set",
        "runners={sqlgen_runners: 1, promptgen_runners: 1, vuser_runners: 1, sqlexec_runners: 1, scoring_runners: 1}"]


def test_worker_arguments_are_the_run_s_with_a_shard_and_a_place_of_their_own(tmp_path: Path) -> None:
    argv = ["--config", "c.yaml", "--workers", "2", "--run-id", "r", "--output-dir=out", "--set", "seed=7", "--no-progress"]
    assert worker_argv(argv, "1/2", tmp_path / "r-shard-1", resume=False) == [
        "--config", "c.yaml", "--set", "seed=7", "--shard", "1/2", "--run-id", "r-shard-1", "--output-dir", str(tmp_path),
        "--no-progress", "--no-preflight", "--journal-only"]
    assert worker_argv(["--config", "c.yaml", "--resume", "x", "--workers=2"], "2/2", tmp_path / "x", resume=True) == [
        "--config", "c.yaml", "--shard", "2/2", "--resume", str(tmp_path / "x"), "--no-progress", "--no-preflight", "--journal-only"]


@pytest.mark.slow  # end to end: make test-slow (CI) runs it
def test_two_workers_give_the_verdicts_of_one_process(tmp_path: Path, pgdata: Path) -> None:
    base = ["run", "--config", str(QUICKSTART), "--output-dir", str(tmp_path), "--no-progress"]
    assert main([*base, "--run-id", "one"]) == 0
    assert main([*base, "--run-id", "two", "--workers", "2"]) == 0
    assert _verdicts(tmp_path / "two") == _verdicts(tmp_path / "one")
    summary = json.loads((tmp_path / "two" / "summary.json").read_text())
    assert summary["complete"] and summary["total_items"] == 43
    assert sorted(p.name for p in (tmp_path / "two" / "shards").glob("*-shard-*") if p.is_dir()) == ["two-shard-1", "two-shard-2"]
    assert main([*base, "--run-id", "bad", "--workers", "2", "--shard", "1/2"]) == 2
    # the workers journal; the reports are built once, by the parent, as their records arrive ...
    shards = sorted(p for p in (tmp_path / "two" / "shards").iterdir() if p.is_dir())
    assert not any((shard / "report.html").exists() for shard in shards)
    assert all((tmp_path / "two" / name).is_file() for name in ("report.html", "junit.xml", "evals.csv", "summary.md"))
    # ... and are those of `evalbench merge` of the same shards afterwards
    assert main(["merge", str(tmp_path / "again"), *map(str, shards)]) == 0
    for name in ("scores_native.csv", "evals.csv"):
        rows = {run: sorted(str(sorted((k, v) for k, v in row.items() if k not in ("run_id", "job_id")))
                            for row in csv.DictReader(io.StringIO((tmp_path / run / name).read_text(encoding="utf-8"))))
                for run in ("again", "two")}  # less the run id
        assert rows["again"] == rows["two"] and len(rows["two"]) >= 43
    again = json.loads((tmp_path / "again" / "summary.json").read_text())
    assert again["scorers"] == summary["scorers"] and again["outcomes"] == summary["outcomes"]


def test_the_gates_judge_the_whole_run_not_each_worker(tmp_path: Path, pgdata: Path, capsys) -> None:
    """A worker does not apply the run's gates to its shard (nor --max-infra-errors): the merged
    run is judged once; a worker that exits with anything but 0 has failed."""
    base = ["run", "--config", str(QUICKSTART), "--output-dir", str(tmp_path), "--no-progress", "--workers", "2"]
    assert main([*base, "--run-id", "gated", "--fail-under", "success=99%"]) == 1
    out, err = capsys.readouterr()
    assert "gate fail-under success=99%: FAIL" in out and "worker" not in err.replace("2 workers", "")
    assert "FAIL" in (tmp_path / "gated" / "summary.md").read_text()
    logs = [p.read_text() for p in (tmp_path / "gated" / "shards").glob("*.log")]
    assert len(logs) == 2 and not any("gate fail-under" in log for log in logs)


def test_a_shard_takes_its_share_of_every_limit() -> None:
    """Shards run side by side against the same agent and databases: a configured rate or
    concurrency limit is theirs together."""
    assert RateLimiter(60).interval == 1.0
    with split_between(4):
        assert RateLimiter(60).interval == 4.0
        assert CallLimiter(None, 8)._slots._value == 2  # type: ignore[union-attr]
        assert CallLimiter(None, 2)._slots._value == 1  # type: ignore[union-attr]  (at least one)
    assert RateLimiter(60).interval == 1.0


def test_the_default_is_a_worker_per_core_for_runs_large_enough(tmp_path: Path) -> None:
    config = load_run_config(QUICKSTART)
    assert auto_workers(*planned(config), None, None) == 1  # 43 conversations: one process
    many = load_run_config(QUICKSTART, trials=12)  # 516 conversations
    assert auto_workers(*planned(many), None, None) == min(usable_cores(), 2)
    assert auto_workers(*planned(many), "1/2", None) == 1
    assert auto_workers(*planned(many), None, tmp_path) == 1  # resuming a run of one process
    for i in (1, 2, 3):
        (tmp_path / "shards" / f"r-shard-{i}").mkdir(parents=True)
    assert auto_workers(*planned(many), None, tmp_path) == 3


def test_a_database_file_is_never_shared_by_workers() -> None:
    """SQLite and DuckDB files are used by one process at a time: no more workers than databases."""
    config = load_run_config(ROOT / "configs" / "quickstart_sqlite.yaml", trials=12)  # 516 conversations, 1 database
    assert auto_workers(*planned(config), None, None) == 1
    with pytest.raises(ConfigError, match=r"sqlite/greenleaf is a database file.*at most 1 worker"):
        fit_workers(*planned(config), 2)
    assert fit_workers(*planned(load_run_config(QUICKSTART)), 2) == 2  # a server: any number
    assert fit_workers(*planned(load_run_config(QUICKSTART)), 50) == 43  # but no more than conversations


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


@pytest.mark.slow
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

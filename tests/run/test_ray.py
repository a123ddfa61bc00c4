"""``run --executor ray``: the run's shards as Ray tasks on a local Ray (started by the run, as
``ray.init()`` without an address does: this machine's CPUs), merged into its run directory; the
same per-item verdicts as one process — also when a task's Ray worker is killed and Ray retries
it, and when a run cut short by Ctrl-C is resumed."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.run.parallel.processes import worker_argv
from evalbench.run.parallel.ray_task import pack, unpack
from tests.helpers import default_sigint
from tests.run.test_shards import _verdicts

pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
QUICKSTART_SQLITE = ROOT / "configs" / "quickstart_sqlite.yaml"
# the quickstart's noisy agent, slowed down: a shard lasts some seconds, long enough to be hit mid-run
SLOW = ["--set", "model_config={agent: simulated:noisy, latency_s: 0.15}", "--set",
        "runners={sqlgen_runners: 1, promptgen_runners: 1, vuser_runners: 1, sqlexec_runners: 1, scoring_runners: 1}"]


def _base(out: Path, config: Path = QUICKSTART) -> list[str]:
    return ["run", "--config", str(config), "--output-dir", str(out), "--no-progress"]


def _driver(out: Path, run_id: str, config: Path = QUICKSTART) -> subprocess.Popen[str]:
    """``evalbench run --executor ray`` as its own process (it starts and stops its local Ray)."""
    command = [sys.executable, "-m", "evalbench", *_base(out, config), "--run-id", run_id, "--executor", "ray", "--workers", "2",
               *SLOW]
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy(), preexec_fn=default_sigint)


def _processes_with(run_id: str) -> dict[int, list[str]]:
    """The shard processes (python -m evalbench.run.parallel.lifeline PID run ...) of ``run_id``: pid -> command line."""
    found = {}
    for entry in Path("/proc").iterdir():
        try:
            argv = [a.decode() for a in (entry / "cmdline").read_bytes().split(b"\0")] if entry.name.isdigit() else []
        except OSError:
            continue
        if "evalbench.run.parallel.lifeline" in argv and run_id in argv:
            found[int(entry.name)] = argv
    return found


def _shard_processes(run_id: str) -> dict[int, Path]:
    """The shard processes of ``run_id`` that Ray's workers run: pid -> their node-local run directory."""
    return {pid: Path(argv[argv.index("--output-dir") + 1]) / run_id for pid, argv in _processes_with(run_id).items()}


def _stat(pid: int) -> list[str]:
    """/proc/PID/stat after the command name: state, parent pid, ... ([] once the process is gone)."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return []


def _alive(pid: int) -> bool:
    return _stat(pid)[:1] not in ([], ["Z"], ["X"])  # a zombie has ended, only not yet been reaped


def _wait_for_journal(driver: subprocess.Popen[str], run_id: str, lines: int) -> tuple[int, Path]:
    """A running shard process of ``run_id`` once its journal holds ``lines`` conversations."""
    give_up = time.monotonic() + 180
    while True:
        assert driver.poll() is None, driver.communicate()
        assert time.monotonic() < give_up
        for pid, place in _shard_processes(run_id).items():
            journal = place / "conversations.jsonl"
            if journal.exists() and journal.read_bytes().count(b"\n") >= lines:
                return pid, place
        time.sleep(0.05)


def test_driver_options_are_not_passed_to_shards_and_a_run_directory_travels_whole(tmp_path: Path) -> None:
    argv = ["--config", "c.yaml", "--executor", "ray", "--ray-address=auto", "--set", "seed=7", "--executor=ray"]
    assert worker_argv(argv, "1/2", tmp_path / "x", resume=True) == [
        "--config", "c.yaml", "--set", "seed=7", "--shard", "1/2", "--resume", str(tmp_path / "x"), "--no-progress",
        "--no-preflight", "--journal-only"]
    (tmp_path / "r" / "sub").mkdir(parents=True)
    (tmp_path / "r" / "sub" / "a.txt").write_text("x")
    unpack(pack(tmp_path / "r"), tmp_path / "copy")
    assert (tmp_path / "copy" / "r" / "sub" / "a.txt").read_text() == "x"


def test_wrong_combinations_are_refused(tmp_path: Path, capsys) -> None:
    assert main([*_base(tmp_path), "--executor", "ray", "--shard", "1/2"]) == 2
    assert "--executor ray and --shard" in capsys.readouterr().err
    assert main([*_base(tmp_path), "--ray-address", "auto"]) == 2
    assert "--ray-address needs --executor ray" in capsys.readouterr().err
    assert main([*_base(tmp_path), "--executor", "ray", "--no-preflight", "--resume", str(tmp_path / "typo")]) == 2
    assert "nothing to resume" in capsys.readouterr().err


def test_ray_is_imported_only_when_chosen_and_its_absence_says_what_to_install(tmp_path: Path, pgdata: Path,
                                                                                monkeypatch, capsys) -> None:
    check = "import sys\nfrom evalbench.cli import main\ntry:\n    main(['run', '--help'])\nexcept SystemExit:\n    pass\n" \
            "print('ray' in sys.modules, file=sys.stderr)"
    assert subprocess.run([sys.executable, "-c", check], capture_output=True, text=True, check=True).stderr.strip() == "False"
    monkeypatch.setitem(sys.modules, "ray", None)  # what `import ray` meets without the extra: ImportError
    assert main([*_base(tmp_path), "--executor", "ray", "--no-preflight"]) == 2
    assert "pip install 'evalbench[ray]'" in capsys.readouterr().err


@pytest.mark.slow  # end to end: make test-slow (CI) runs it
def test_ray_tasks_give_the_verdicts_of_one_process(tmp_path: Path, pgdata: Path) -> None:
    assert main([*_base(tmp_path), "--run-id", "one"]) == 0
    assert main([*_base(tmp_path), "--run-id", "ray", "--executor", "ray", "--workers", "2"]) == 0
    assert _verdicts(tmp_path / "ray") == _verdicts(tmp_path / "one")
    summary = json.loads((tmp_path / "ray" / "summary.json").read_text())
    assert summary["complete"] and summary["total_items"] == 43
    shards = tmp_path / "ray" / "shards"
    assert sorted(p.name for p in shards.iterdir() if p.is_dir()) == ["ray-shard-1", "ray-shard-2"]
    assert "shard 2/2 on node" in (shards / "ray-shard-2.log").read_text()
    assert (tmp_path / "ray" / "report.html").is_file()


@pytest.mark.slow
def test_a_lost_task_is_retried_a_failed_shard_fails_the_run_and_resume_runs_only_it(tmp_path: Path, pgdata: Path,
                                                                                      capsys) -> None:
    # on PostgreSQL: a SQLite file shared by two processes, one of them killed mid-transaction,
    # may fail the other's reads (a hot journal that a read-only connection cannot roll back)
    driver = _driver(tmp_path, "k")
    first, _ = _wait_for_journal(driver, "k-shard-1", 2)
    second, _ = _wait_for_journal(driver, "k-shard-2", 2)
    worker = int(_stat(first)[1])
    os.kill(worker, signal.SIGKILL)  # shard 1's Ray worker: the task is lost, and Ray retries it
    os.kill(second, signal.SIGKILL)  # shard 2's own process: its `evalbench run` failed, no retry
    _, err = driver.communicate(timeout=300)
    shards = tmp_path / "k" / "shards"
    assert driver.returncode == 3, err
    assert "shard k-shard-2 ended with exit -9 on node" in err and str(shards / "k-shard-2.log") in err
    assert "shard k-shard-1 ended on node" in err and "--resume" in err
    # shard 1 came back from another attempt, in another worker
    first_line = (shards / "k-shard-1.log").read_text().splitlines()[0]
    assert "evalbench.run.parallel.lifeline " in first_line and f"evalbench.run.parallel.lifeline {worker} " not in first_line
    assert not (tmp_path / "k" / "conversations.jsonl").exists()

    capsys.readouterr()
    resume = ["run", "--config", str(QUICKSTART), "--no-progress", "--resume", str(tmp_path / "k"), "--executor", "ray"]
    assert main([*resume, *SLOW]) == 0
    assert "2 shards as Ray tasks, 1 to run" in capsys.readouterr().err  # shard 1 was complete
    assert main([*_base(tmp_path), "--run-id", "one"]) == 0
    assert _verdicts(tmp_path / "k") == _verdicts(tmp_path / "one")


def test_a_shard_process_ends_with_the_worker_that_started_it(tmp_path: Path, pgdata: Path) -> None:
    """A lost attempt's process does not run on beside its retry (Linux: PR_SET_PDEATHSIG)."""
    if not sys.platform.startswith("linux"):
        pytest.skip("the guard is Linux's")
    # a conversation of a minute (on SQLite: no server to leave behind): the shard outlives its
    # parent by far unless the guard ends it
    shard = [sys.executable, "-m", "evalbench.run.parallel.lifeline", "PARENT", "run", "--config", str(QUICKSTART_SQLITE),
             "--limit", "1",
             "--set", "model_config={agent: simulated:noisy, latency_s: 60}", "--output-dir", str(tmp_path),
             "--run-id", "orphan", "--no-progress", "--no-preflight"]
    worker = subprocess.Popen([sys.executable, "-c", "import os, subprocess, sys, time; "
                               "subprocess.Popen([a.replace('PARENT', str(os.getpid())) for a in sys.argv[1:]]); time.sleep(300)",
                               *shard], cwd=ROOT, env=os.environ.copy())
    give_up = time.monotonic() + 120
    while not (tmp_path / "orphan" / "manifest.json").exists():  # written before the first conversation
        assert worker.poll() is None and time.monotonic() < give_up
        time.sleep(0.05)
    (pid,) = [p for p in _processes_with("orphan") if _stat(p)[1] == str(worker.pid)]
    worker.kill()
    worker.wait()
    give_up = time.monotonic() + 30
    while _alive(pid):
        assert time.monotonic() < give_up, "the shard process outlived its worker"
        time.sleep(0.05)


@pytest.mark.slow
def test_a_run_cut_short_is_resumed_on_ray(tmp_path: Path, pgdata: Path, capsys) -> None:
    driver = _driver(tmp_path, "cut")
    _wait_for_journal(driver, "cut-shard-1", 2)
    driver.send_signal(signal.SIGINT)  # Ctrl-C: the tasks are cancelled, what they did comes back
    _, err = driver.communicate(timeout=300)
    assert driver.returncode == 130, err
    assert "shard cut-shard-1 was cancelled" in err and "--resume RUN_DIR --executor ray" in err
    # the shard journaled what it had in flight as cancelled, and its run directory came back
    journal = (tmp_path / "cut" / "shards" / "cut-shard-1" / "conversations.jsonl").read_text()
    assert journal.count("\n") >= 2 and '"outcome": "cancelled"' in journal
    assert not (tmp_path / "cut" / "conversations.jsonl").exists()

    resume = ["run", "--config", str(QUICKSTART), "--no-progress", "--resume", str(tmp_path / "cut"), "--executor", "ray", *SLOW]
    capsys.readouterr()
    assert main(resume) == 0
    assert re.search(r"2 shards as Ray tasks, [12] to run", capsys.readouterr().err)  # the incomplete ones
    assert main([*_base(tmp_path), "--run-id", "one"]) == 0
    assert _verdicts(tmp_path / "cut") == _verdicts(tmp_path / "one")
    capsys.readouterr()
    assert main(resume) == 0  # every shard complete: none runs again, the run is merged again
    assert "2 shards as Ray tasks, 0 to run" in capsys.readouterr().err
    assert _verdicts(tmp_path / "cut") == _verdicts(tmp_path / "one")

"""Workers die with their run, and a run directory is written by one run at a time: killing the
parent of ``run --workers N`` (SIGKILL too) leaves no worker calling the agent or writing its
journal, and a ``--resume`` is refused while the run (or any worker of it) is alive — through the
lock on ``RUN_DIR/.lock`` that the workers inherit (evalbench/run/lock.py, evalbench/run/parallel/lifeline.py)."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.run.lock import RunLockedError, hold_run_lock

pytestmark = pytest.mark.slow  # whole runs per attack: CI runs them in `make test-slow`

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
SLOW = ["--set", "model_config={agent: simulated:oracle, latency_s: 0.15}", "--set",
        "runners={sqlgen_runners: 1, promptgen_runners: 1, vuser_runners: 1, sqlexec_runners: 1, scoring_runners: 1}"]


def _children(pid: int) -> list[int]:
    """The live processes whose parent is ``pid``."""
    out = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == pid and fields[0] != "Z":
                out.append(int(entry.name))
    return out


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie runs nothing: its new parent reaps it


def _journal_sizes(run_dir: Path) -> list[int]:
    return [p.stat().st_size for p in sorted((run_dir / "shards").glob("*/conversations.jsonl"))]


def _start(tmp_path: Path, run_id: str) -> subprocess.Popen[str]:
    command = [sys.executable, "-m", "evalbench", "run", "--config", str(QUICKSTART), "--output-dir", str(tmp_path),
               "--run-id", run_id, "--no-progress", "--workers", "2", *SLOW]
    # a session of its own: whatever the test leaves is killed with its process group at the end
    return subprocess.Popen(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=os.environ.copy(), start_new_session=True)


def _wait_for_records(parent: subprocess.Popen[str], run_dir: Path) -> None:
    give_up = time.monotonic() + 180
    # both workers journaled, and the parent merges them (its manifest is written)
    while not (len(_journal_sizes(run_dir)) == 2 and all(size > 0 for size in _journal_sizes(run_dir))
               and (run_dir / "manifest.json").is_file()):
        assert parent.poll() is None, parent.communicate()
        assert time.monotonic() < give_up, "the workers journaled nothing in 180 s"
        time.sleep(0.05)


def _cleanup(parent: subprocess.Popen[str]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(parent.pid, signal.SIGKILL)
    parent.communicate()


def test_killing_the_parent_with_sigkill_ends_every_worker_and_resume_then_completes(tmp_path: Path, pgdata: Path) -> None:
    parent = _start(tmp_path, "k")
    run_dir = tmp_path / "k"
    try:
        _wait_for_records(parent, run_dir)
        workers = _children(parent.pid)
        assert len(workers) == 2, workers
        parent.send_signal(signal.SIGKILL)
        parent.wait()
        give_up = time.monotonic() + 10  # PR_SET_PDEATHSIG: at once; the parent watch: within a second
        while any(_alive(pid) for pid in workers):
            assert time.monotonic() < give_up, f"workers still alive 10 s after their parent was killed: {workers}"
            time.sleep(0.05)
        sizes = _journal_sizes(run_dir)
        time.sleep(1.5)  # several agent turns at 0.15 s: a worker still running would have journaled
        assert _journal_sizes(run_dir) == sizes
    finally:
        _cleanup(parent)
    # the lock died with them: the run resumes and completes
    assert main(["run", "--config", str(QUICKSTART), "--no-progress", "--resume", str(run_dir), "--workers", "2", *SLOW]) == 0
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["complete"] and summary["total_items"] == 43


def test_a_resume_is_refused_while_the_run_or_its_workers_are_alive(tmp_path: Path, pgdata: Path,
                                                                    capsys: pytest.CaptureFixture[str]) -> None:
    parent = _start(tmp_path, "busy")
    run_dir = tmp_path / "busy"
    try:
        _wait_for_records(parent, run_dir)
        workers = _children(parent.pid)
        for argv in (["--workers", "2"], ["--workers", "1"]):  # as the run was, or as one process
            resume = ["run", "--config", str(QUICKSTART), "--no-progress", "--no-preflight", "--resume", str(run_dir), *argv]
            assert main([*resume, *SLOW]) == 2
            err = capsys.readouterr().err
            assert f"run {run_dir} is in progress (locked by pid {parent.pid}" in err, err
            assert "refused resuming it" in err and all(str(pid) in err for pid in workers), err
        # a shard's own directory is locked by its worker too
        shard = next(p for p in sorted((run_dir / "shards").iterdir()) if p.is_dir())
        assert main(["run", "--config", str(QUICKSTART), "--no-progress", "--no-preflight", "--resume", str(shard),
                     "--shard", "1/2", *SLOW]) == 2
        assert f"run {shard} is in progress" in capsys.readouterr().err
        assert parent.poll() is None  # the refused resumes changed nothing of the run
    finally:
        _cleanup(parent)


def test_the_lock_is_held_while_any_process_that_inherited_it_lives(tmp_path: Path) -> None:
    """What keeps a resume out while workers of a dead parent would still run: the workers hold the
    lock's file description; the kernel releases it when the last of them ends."""
    lock = hold_run_lock(tmp_path, "testing")
    worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], pass_fds=(lock.fd,))
    try:
        lock.release()  # the parent is gone ...
        with pytest.raises(RunLockedError, match=rf"locked by pid {os.getpid()}.*held now by pid {worker.pid}"):
            hold_run_lock(tmp_path, "resuming it")
    finally:
        worker.kill()
        worker.wait()
    hold_run_lock(tmp_path, "resuming it").release()  # ... and once the worker is gone, the run is free


def test_a_worker_whose_parent_is_gone_before_it_starts_ends_at_once(tmp_path: Path) -> None:
    """``python -m evalbench.run.parallel.lifeline PARENT_PID ...`` of a parent already gone never runs."""
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    started = time.monotonic()
    child = subprocess.run([sys.executable, "-m", "evalbench.run.parallel.lifeline", str(gone.pid), "runs", str(tmp_path)],
                           capture_output=True, timeout=60)
    assert child.returncode == -signal.SIGKILL and child.stdout == b""
    assert time.monotonic() - started < 30

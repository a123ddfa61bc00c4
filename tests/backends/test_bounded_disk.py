"""Issue 12: a disk that fills up or an output that cannot be written stops the run with one
clear message naming the file (exit 3), the journal ends with its last complete line, and
``--resume`` finishes the run."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

from evalbench.cli import main
from tests.conftest import DEMO

LINES = [line for line in (DEMO / "greenleaf.jsonl").read_text(encoding="utf-8").splitlines() if line.strip()]
ITEMS = 16  # the first demo items (every test runs twice: stopped, then resumed)


def _config(tmp_path: Path, latency_s: float = 0.0, items: int = ITEMS) -> Path:
    dataset = tmp_path / "items.jsonl"
    dataset.write_text("".join(line + "\n" for line in LINES[:items]), encoding="utf-8")
    config = tmp_path / "run.yaml"
    config.write_text(
        f"dataset_config: {dataset}\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        f"model_config: {{agent: simulated:noisy, latency_s: {latency_s}}}\n"
        "scorers: {exec_match: {}, test_cases: {}, executable: {}, turn_count: {}}\n"
        "runners: {sqlgen_runners: 2}\n"
        "max_in_flight: 2\n"
        "seed: 42\n",
        encoding="utf-8",
    )
    return config


def _run(config: Path, out: Path, run_id: str = "r") -> int:
    return main(["run", "--config", str(config), "--no-progress", "--output-dir", str(out), "--run-id", run_id])


def _resume(config: Path, run_dir: Path) -> int:
    return main(["run", "--config", str(config), "--no-progress", "--resume", str(run_dir)])


def _error_line(capsys) -> str:
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1, lines
    return lines[0]


def _complete_lines(journal: Path) -> list[dict]:
    data = journal.read_bytes()
    assert data == b"" or data.endswith(b"\n"), "the journal ends with a half line"
    return [json.loads(line) for line in data.splitlines()]


def _assert_resumed(config: Path, run_dir: Path, items: int = ITEMS) -> None:
    assert _resume(config, run_dir) in (0, 1)
    ids = [record["item_id"] for record in _complete_lines(run_dir / "conversations.jsonl")]
    assert len(ids) == len(set(ids)) == items
    assert json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))["total_items"] == items
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]


def _is_journal(fd: int) -> bool:
    try:
        return os.readlink(f"/proc/self/fd/{fd}").endswith("conversations.jsonl")
    except OSError:
        return False


def _disk_full_after(monkeypatch, lines: int, *, truncate_fails: bool = False) -> None:
    """The journal's disk is full after ``lines`` lines: half of the next line is written, then
    ENOSPC (at the OS-call level: os.write); optionally the half line cannot be cut off either."""
    real_write, written = os.write, [0]

    def write(fd: int, data) -> int:
        if _is_journal(fd):
            if written[0] >= lines:
                real_write(fd, bytes(data[: len(data) // 2]))
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            written[0] += 1
        return real_write(fd, data)

    monkeypatch.setattr(os, "write", write)
    if truncate_fails:
        def ftruncate(fd: int, length: int) -> None:
            raise OSError(errno.EROFS, os.strerror(errno.EROFS))

        monkeypatch.setattr(os, "ftruncate", ftruncate)


def test_disk_full_on_the_journal_stops_the_run_and_resume_finishes_it(tmp_path, pgdata, monkeypatch, capsys):
    config = _config(tmp_path)
    _disk_full_after(monkeypatch, 5)
    assert _run(config, tmp_path) == 3
    run_dir = tmp_path / "r"
    journal = run_dir / "conversations.jsonl"
    assert _error_line(capsys) == f"error: the run stopped: cannot write {journal}: No space left on device (ENOSPC)"
    assert len(_complete_lines(journal)) == 5  # the half line was cut off again
    assert not [p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")]  # unfinished reports removed
    monkeypatch.undo()
    _assert_resumed(config, run_dir)


def test_a_half_line_that_cannot_be_cut_off_is_dropped_by_resume(tmp_path, pgdata, monkeypatch, capsys):
    config = _config(tmp_path)
    _disk_full_after(monkeypatch, 3, truncate_fails=True)
    assert _run(config, tmp_path) == 3
    journal = tmp_path / "r" / "conversations.jsonl"
    assert "No space left on device (ENOSPC)" in _error_line(capsys)
    data = journal.read_bytes()
    assert data.count(b"\n") == 3 and not data.endswith(b"\n")  # a half line, with no newline
    monkeypatch.undo()
    _assert_resumed(config, tmp_path / "r")


def test_a_report_that_cannot_be_written_stops_with_its_name(tmp_path, pgdata, capsys):
    """report.html cannot be written (a directory is where its temporary file goes): exit 3 naming
    it, the journal is whole; ``evalbench report`` fails the same way, then succeeds."""
    config = _config(tmp_path)
    run_dir = tmp_path / "r"
    (run_dir / ".report.html.tmp").mkdir(parents=True)
    assert _run(config, tmp_path) == 3
    assert _error_line(capsys) == f"error: cannot write {run_dir / 'report.html'}: Is a directory (EISDIR)"
    assert len(_complete_lines(run_dir / "conversations.jsonl")) == ITEMS
    assert main(["report", str(run_dir)]) == 3
    assert "report.html: Is a directory" in _error_line(capsys)
    (run_dir / ".report.html.tmp").rmdir()
    assert main(["report", str(run_dir)]) in (0, 1)
    assert (run_dir / "report.html").is_file()
    _assert_resumed(config, run_dir)


def test_an_unwritable_output_directory_is_named(tmp_path, pgdata, capsys):
    config = _config(tmp_path)
    (tmp_path / "file").write_text("not a directory", encoding="utf-8")
    # --no-preflight: the run's own message (preflight finds it before: tests/run/test_preflight.py)
    assert main(["run", "--config", str(config), "--no-progress", "--output-dir", str(tmp_path / "file"), "--run-id", "r",
                 "--no-preflight"]) == 3
    assert _error_line(capsys).startswith(f"error: cannot write {tmp_path / 'file' / 'r'}")


def _chattr(flag: str, path: Path) -> bool:
    if shutil.which("chattr") is None:
        return False
    return subprocess.run(["chattr", flag, str(path)], capture_output=True, check=False).returncode == 0


def test_a_journal_made_read_only_mid_run(tmp_path, pgdata, capsys):
    """The journal becomes immutable (chattr +i: even root cannot write it) while the run goes on."""
    probe = tmp_path / "probe"
    probe.write_text("", encoding="utf-8")
    if not _chattr("+i", probe):
        pytest.skip("chattr +i is not available here")
    _chattr("-i", probe)
    config = _config(tmp_path, latency_s=0.05)
    run_dir = tmp_path / "r"
    journal = run_dir / "conversations.jsonl"
    done = threading.Event()

    def freeze() -> None:
        while not done.is_set():
            if journal.exists() and journal.read_bytes().count(b"\n") >= 5:
                _chattr("+i", journal)
                return
            time.sleep(0.002)

    watcher = threading.Thread(target=freeze)
    watcher.start()
    try:
        assert _run(config, tmp_path) == 3
    finally:
        done.set()
        watcher.join()
        frozen = _chattr("-i", journal)
    assert frozen
    assert _error_line(capsys) == f"error: the run stopped: cannot write {journal}: Operation not permitted (EPERM)"
    assert 5 <= len(_complete_lines(journal)) < ITEMS
    _assert_resumed(config, run_dir)


@pytest.fixture
def small_tmpfs(tmp_path):
    """A real file system of 160 KiB (a tmpfs; needs the right to mount, else the test is skipped)."""
    mount = tmp_path / "tmpfs"
    mount.mkdir()
    result = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=160k", "tmpfs", str(mount)], capture_output=True,
                            check=False)
    if result.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {result.stderr.decode(errors='replace').strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", str(mount)], check=True)


def test_a_real_full_disk(tmp_path, pgdata, small_tmpfs, capsys):
    config = _config(tmp_path, items=len(LINES))  # every demo item: more than the file system holds
    assert _run(config, small_tmpfs) == 3
    line = _error_line(capsys)
    # the journal, scores_native.csv or a report's temporary file: whichever fills the disk first
    assert line.startswith((f"error: the run stopped: cannot write {small_tmpfs / 'r'}",
                            f"error: cannot write {small_tmpfs / 'r'}"))
    assert line.endswith("No space left on device (ENOSPC)")
    run_dir = small_tmpfs / "r"
    assert 0 < len(_complete_lines(run_dir / "conversations.jsonl")) < len(LINES)
    subprocess.run(["mount", "-o", "remount,size=16m", str(small_tmpfs)], check=True)  # space freed
    _assert_resumed(config, run_dir, items=len(LINES))

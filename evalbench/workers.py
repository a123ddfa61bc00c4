"""``evalbench run --workers N``: one run as N processes, each a shard of the items
(``--shard i/N``, :mod:`evalbench.dataset.shard`), joined by ``evalbench merge`` into the run
directory when they end. The shards' own run directories stay under ``<run_dir>/shards/``; a
run cut short (Ctrl-C, a worker that failed) is continued with ``--resume RUN_DIR --workers N``,
which resumes every shard and merges again.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

from evalbench.errors import ConfigError
from evalbench.results.journal.merge import merge_shards

# options of the parent's command line that the workers get their own values of
_OWN = {"--workers": 1, "--shard": 1, "--run-id": 1, "--output-dir": 1, "--resume": 1, "--no-progress": 0,
        "--no-preflight": 0}


def worker_argv(argv: list[str], shard: str, shard_dir: Path, resume: bool) -> list[str]:
    """The parent's ``run`` arguments for one worker: its shard, its own run directory."""
    out: list[str] = []
    skip = 0
    for arg in argv:
        if skip:
            skip -= 1
            continue
        name, has_value, _ = arg.partition("=")
        if name in _OWN:
            skip = 0 if has_value else _OWN[name]
            continue
        out.append(arg)
    place = ["--resume", str(shard_dir)] if resume else ["--run-id", shard_dir.name, "--output-dir", str(shard_dir.parent)]
    return [*out, "--shard", shard, *place, "--no-progress", "--no-preflight"]


def run_workers(argv: list[str], run_dir: Path, workers: int, *, resume: bool) -> int:
    """Run the shards as ``workers`` processes, then merge them into ``run_dir``; the exit code of
    the worst worker when one failed (its log named), else 0 (the caller judges the merged run)."""
    shards_dir = run_dir / "shards"
    names = [f"{run_dir.name}-shard-{i}" for i in range(1, workers + 1)]
    if resume and not all((shards_dir / name).is_dir() for name in names):
        raise ConfigError(f"{run_dir} was not run with --workers {workers}: its shards are not all in {shards_dir}")
    shards_dir.mkdir(parents=True, exist_ok=True)
    processes = []
    for i, name in enumerate(names, 1):
        log = (shards_dir / f"{name}.log").open("a", encoding="utf-8")
        command = [sys.executable, "-m", "evalbench", "run", *worker_argv(argv, f"{i}/{workers}", shards_dir / name, resume)]
        processes.append((name, log, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=os.environ.copy())))
    print(f"evalbench: run {run_dir.name}: {workers} workers (logs in {shards_dir})", file=sys.stderr, flush=True)
    codes = _wait(processes)
    failed = [(name, code) for (name, _, _), code in zip(processes, codes, strict=True) if code not in (0, 1)]
    if failed:
        for name, code in failed:
            print(f"error: worker {name} ended with exit {code}: see {shards_dir / (name + '.log')}", file=sys.stderr)
        print(f"resume with: evalbench run ... --resume {run_dir} --workers {workers}", file=sys.stderr)
        # a worker killed by a signal (negative code) is an infrastructure failure (3)
        return max(code if code > 0 else 3 for _, code in failed)
    merge_shards(run_dir, [shards_dir / name for name in names], replace=True)
    return 0


def _wait(processes: Sequence[tuple[str, TextIO, subprocess.Popen[bytes]]]) -> list[int]:
    """Every worker's exit code. Ctrl-C (or SIGTERM, raised as KeyboardInterrupt) is passed on:
    each worker journals what it has in flight as cancelled and ends."""
    try:
        while any(p.poll() is None for _, _, p in processes):
            time.sleep(0.1)
    except KeyboardInterrupt:
        for _, _, process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGINT)
        for _, _, process in processes:
            process.wait()
        print("cancelled: every worker journaled what it had in flight; continue with --resume RUN_DIR --workers N",
              file=sys.stderr)
        raise
    finally:
        for _, log, _ in processes:
            log.close()
    return [p.returncode for _, _, p in processes]


def check_workers(workers: int, shard: str | None) -> None:
    if workers < 1:
        raise ConfigError(f"--workers {workers}: at least 1")
    if workers > 1 and shard:
        raise ConfigError("--workers and --shard: a run is either split across processes here or one shard of a split")


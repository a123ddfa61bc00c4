"""``evalbench run --workers N``: one run as N processes, each a shard of the items
(``--shard i/N``, :mod:`evalbench.dataset.shard`). The shards write their journals only; this
process follows them as they grow, so the run directory's journal, summary and reports are built
while the workers run (:class:`~evalbench.results.merge.MergedRun`), and one progress bar counts
every worker's conversations. The shards' own run directories stay under ``<run_dir>/shards/``;
a run cut short (Ctrl-C, a worker that failed) is continued with ``--resume RUN_DIR --workers
N``, which resumes every shard and merges them again when they end.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, TextIO

from evalbench.core.errors import ConfigError
from evalbench.results.journal.files import JOURNAL, open_append
from evalbench.results.journal.lines import decode_record
from evalbench.results.journal.shapes import read_manifest
from evalbench.results.journal.tail import JournalTail
from evalbench.results.merge import MergedRun, clear_merged, merge_shards
from evalbench.run.lock import RunLock
from evalbench.run.parallel import lifeline

# options of the parent's command line that the workers get their own values of
_OWN = {"--workers": 1, "--shard": 1, "--run-id": 1, "--output-dir": 1, "--resume": 1, "--no-progress": 0,
        "--no-preflight": 0, "--journal-only": 0, "--executor": 1, "--ray-address": 1}


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
    # the reports are built once, from every shard, by this process
    return [*out, "--shard", shard, *place, "--no-progress", "--no-preflight", "--journal-only"]


def run_workers(argv: list[str], run_dir: Path, workers: int, *, resume: bool, progress: bool = True,
                lock: RunLock | None = None) -> tuple[int, dict[str, object] | None]:
    """Run the shards as ``workers`` processes and merge them into ``run_dir``: (0, the merged
    run's summary), or the exit code of the worst worker when one failed (its log named) and None.
    Each worker ends with this process (:mod:`evalbench.run.parallel.lifeline`) and holds ``lock`` (the run
    directory's) as long as it lives: no ``--resume`` starts beside a worker (:mod:`evalbench.run.lock`)."""
    shards_dir = run_dir / "shards"
    names = [f"{run_dir.name}-shard-{i}" for i in range(1, workers + 1)]
    shard_dirs = [shards_dir / name for name in names]
    if resume and not all(d.is_dir() for d in shard_dirs):
        raise ConfigError(f"{run_dir} was not run with --workers {workers}: its shards are not all in {shards_dir}")
    shards_dir.mkdir(parents=True, exist_ok=True)
    processes = []
    for i, name in enumerate(names, 1):
        log = os.fdopen(open_append(shards_dir / f"{name}.log"), "a", encoding="utf-8")
        command, env = lifeline.command(["run", *worker_argv(argv, f"{i}/{workers}", shards_dir / name, resume)])
        processes.append((name, log, subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                                      pass_fds=() if lock is None else (lock.fd,))))
    print(f"evalbench: run {run_dir.name}: {workers} workers (logs in {shards_dir})", file=sys.stderr, flush=True)
    # a resumed shard rewrites its journal as it starts: those are merged when they end, not followed
    live = None if resume else LiveMerge(run_dir, shard_dirs, progress)
    try:
        codes = _wait(processes, live)
        # a worker does not judge its shard (the gates are the whole run's): anything but 0 is a failure
        failed = [(name, code) for (name, _, _), code in zip(processes, codes, strict=True) if code != 0]
        if failed:
            for name, code in failed:
                print(f"error: worker {name} ended with exit {code}: see {shards_dir / (name + '.log')}", file=sys.stderr)
            print(f"resume with: evalbench run ... --resume {run_dir} --workers {workers}", file=sys.stderr)
            # a worker killed by a signal (negative code) or that crashed (1) is an infrastructure failure (3)
            return max(code if code > 1 else 3 for _, code in failed), None
        if live is not None and live.poll():
            return 0, live.finish()
    finally:
        if live is not None:
            live.close()
    return 0, merge_shards(run_dir, shard_dirs, replace=True)


class _Bar(Protocol):
    """A progress bar (tqdm's)."""

    def update(self, n: int = 1) -> object: ...

    def close(self) -> None: ...


class LiveMerge:
    """The shards' journals followed while the workers run: each new record goes to the merged
    run directory and to one progress bar for the whole run."""

    def __init__(self, run_dir: Path, shard_dirs: list[Path], progress: bool) -> None:
        self.run_dir, self.shard_dirs, self.progress = run_dir, shard_dirs, progress
        self.tails = [JournalTail(d / JOURNAL) for d in shard_dirs]
        self.merged: MergedRun | None = None
        self.bar: _Bar | None = None

    def poll(self) -> bool:
        """Take in what the shards journaled since the last poll; False while some shard has not
        yet written its manifest (it writes it before its first conversation)."""
        if self.merged is None and not self._start():
            return False
        assert self.merged is not None and self.bar is not None
        for tail, shard in zip(self.tails, self.shard_dirs, strict=True):
            for line in tail.read():
                record = decode_record(line)
                if record is not None:  # else not a record: read_journal skips it with a warning, merge_shards would too
                    self.merged.add(record, shard, line.decode("utf-8-sig"))
                    self.bar.update(1)
        return True

    def _start(self) -> bool:
        if not all((d / "manifest.json").is_file() for d in self.shard_dirs):
            return False
        from evalbench.core.terminal import progress_bar

        manifests = [read_manifest(d) for d in self.shard_dirs]
        clear_merged(self.run_dir, replace=False)
        self.merged = MergedRun(self.run_dir, self.shard_dirs, manifests)
        dataset = self.merged.manifest["dataset"]
        total = dataset["items"] * (dataset.get("trials") or 1)
        # None: off when stderr is not a terminal (CI logs)
        self.bar = progress_bar(total=total, desc=self.run_dir.name, unit="conv", disable=None if self.progress else True,
                                dynamic_ncols=True)
        return True

    def finish(self) -> dict[str, object]:
        """Every worker ended well: the merged run's summary (its reports written)."""
        assert self.merged is not None
        summary = self.merged.finish([read_manifest(d) for d in self.shard_dirs])
        self.merged = None
        return summary

    def close(self) -> None:
        if self.merged is not None:  # not finished: --resume merges again
            self.merged.abort()
        if self.bar is not None:
            self.bar.close()


def _wait(processes: Sequence[tuple[str, TextIO, subprocess.Popen[bytes]]], live: LiveMerge | None) -> list[int]:
    """Every worker's exit code, following their journals meanwhile. Ctrl-C (or SIGTERM, raised
    as KeyboardInterrupt) is passed on: each worker journals what it has in flight as cancelled and ends."""
    try:
        while any(p.poll() is None for _, _, p in processes):
            if live is not None:
                live.poll()
            time.sleep(0.2)
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

"""What one Ray task does on whichever node Ray schedules it (``evalbench run --executor ray``):
run one shard as ``evalbench run --shard i/n`` in a node-local directory, and hand back the
shard's run directory (tar.gz bytes, through Ray's object store) and its log.

This module imports no Ray: the task function is plain, :mod:`evalbench.run.parallel.ray` wraps it
with ``ray.remote``. The shard's process runs in the driver's working directory, so the config
and dataset paths must be readable at the same paths on every node (a shared filesystem).
"""

from __future__ import annotations

import contextlib
import io
import shutil
import signal
import socket
import subprocess
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from evalbench.core.errors import RunDirError
from evalbench.run.parallel import lifeline
from evalbench.run.parallel.processes import worker_argv


@dataclass(frozen=True)
class ShardTask:
    """One shard, as the driver sends it to a task."""

    name: str  # the shard's run id: <run_id>-shard-<i>
    shard: str  # "i/n"
    argv: list[str]  # the driver's `run` arguments (worker_argv gives each shard its own)
    cwd: str  # the driver's working directory: relative paths in argv are relative to it
    token: str  # unique per driver invocation: the node-local directory of its tasks
    packed: bytes | None = None  # the shard's run directory to resume (tar.gz), None to start it


@dataclass(frozen=True)
class ShardResult:
    """What a task hands back: the exit code of its ``evalbench run`` and what it left."""

    name: str
    code: int
    node: str
    packed: bytes  # the shard's run directory (tar.gz), b"" when the run made none
    log: bytes
    cancelled: bool = False


def run_shard(task: ShardTask) -> ShardResult:
    """Run ``task``'s shard in a fresh node-local directory (a retry after a lost attempt starts
    again from what the task was sent). ``ray.cancel`` (a KeyboardInterrupt here) is passed on as
    SIGINT: the shard journals what it has in flight as cancelled, and what it did comes back."""
    base = Path(tempfile.gettempdir()) / "evalbench-ray" / task.token
    place, log_path = base / task.name, base / f"{task.name}.log"
    shutil.rmtree(place, ignore_errors=True)  # a lost attempt on this node left it
    base.mkdir(parents=True, exist_ok=True)
    node = socket.gethostname()
    try:
        if not Path(task.cwd).is_dir():
            message = (f"error: the driver's working directory {task.cwd} is not on node {node}: --executor ray needs the "
                       "config and dataset at the same paths on every node (docs/scaling.md)\n")
            return ShardResult(task.name, 2, node, b"", message.encode())
        if task.packed is not None:
            unpack(task.packed, base)
        argv = worker_argv(task.argv, task.shard, place, resume=task.packed is not None)
        # the shard's process ends with this Ray worker: a retry never races a lost attempt
        command, env = lifeline.command(["run", *argv])  # secrets redacted: the log is kept beside the run
        with log_path.open("wb") as log:
            log.write(f"evalbench: shard {task.shard} on node {node}: {' '.join(command)}\n".encode())
            log.flush()
            process = subprocess.Popen(command, cwd=task.cwd, stdout=log, stderr=subprocess.STDOUT, env=env)
            code, cancelled = _wait(process)
        return ShardResult(task.name, code, node, pack(place) if place.is_dir() else b"", log_path.read_bytes(), cancelled)
    finally:
        shutil.rmtree(place, ignore_errors=True)
        log_path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):  # the run's last task on this node removes it
            base.rmdir()


def _wait(process: subprocess.Popen[bytes]) -> tuple[int, bool]:
    """The exit code, and whether the task was cancelled. Polled, because ``ray.cancel`` raises
    its KeyboardInterrupt between bytecodes, which a blocking wait would hold off."""
    try:
        while process.poll() is None:
            time.sleep(0.1)
        return process.returncode, False
    except KeyboardInterrupt:
        process.send_signal(signal.SIGINT)
        return process.wait(), True


MAX_PACK_BYTES = 4 * 1024**3  # a shard's run directory sent through Ray's object store


def pack(directory: Path) -> bytes:
    """``directory`` as tar.gz bytes, its entries under its own name: its folders and regular
    files only (a symlink, FIFO or device a resumed run directory may hold is left out, never
    read), at most :data:`MAX_PACK_BYTES` in all (more is a RunDirError naming the folder)."""
    total = sum(p.lstat().st_size for p in directory.rglob("*") if p.is_file() and not p.is_symlink())
    if total > MAX_PACK_BYTES:
        raise RunDirError(f"{total} bytes of files, more than the {MAX_PACK_BYTES >> 30} GiB a Ray task is sent: refused",
                          file=str(directory))

    def regular(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return info if info.isreg() or info.isdir() else None

    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        tar.add(directory, arcname=directory.name, filter=regular)
    return buffer.getvalue()


def unpack(data: bytes, into: Path) -> None:
    """Extract :func:`pack`'s bytes under ``into`` (regular files and folders only)."""
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:gz") as tar:
        if hasattr(tarfile, "data_filter"):  # Python >= 3.10.12 / 3.11.4
            tar.extractall(into, filter="data")
        else:  # older patch releases; the archive is our own task's
            tar.extractall(into)

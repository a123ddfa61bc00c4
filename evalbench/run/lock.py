"""One run at a time in a run directory: the lock that ``run``, ``run --resume``, ``run --workers``
(and ``--executor ray``) and ``merge`` hold while they write a run directory.

The lock is an ``flock`` on ``RUN_DIR/.lock``. The kernel releases it when the last file
descriptor of it closes, whatever ends the process (Ctrl-C, SIGKILL, a crash), so a lock is never
left behind. ``run --workers N`` hands its descriptor to its workers: the lock stays held while the
parent *or any worker* lives, so a ``--resume`` started while workers of a killed parent still run
is refused. The lock file holds a line naming its holder (pid, host, command, start); the refusal
names it, and on Linux the processes that still hold the lock.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import errno
import json
import os
import socket
import stat
import sys
from pathlib import Path
from types import TracebackType

from evalbench.core.errors import EvalbenchError, RunDirError
from evalbench.results.journal.files import OutputError

LOCK_FILE = ".lock"
HOLDER_BYTES = 1024  # the holder's line, padded with spaces


class RunLockedError(EvalbenchError):
    """Another evalbench process (or a worker of one) is writing the run directory (exit 2)."""

    exit_code = 2


class RunLock:
    """A held lock on a run directory; :meth:`release` (or leaving the ``with``) lets it go."""

    def __init__(self, fd: int, path: Path) -> None:
        self.fd, self.path = fd, path

    def release(self) -> None:
        if self.fd >= 0:
            fd, self.fd = self.fd, -1
            os.close(fd)

    def __enter__(self) -> RunLock:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.release()


def hold_run_lock(run_dir: Path, doing: str) -> RunLock:
    """Lock ``run_dir`` (created if missing) for this process, or raise :class:`RunLockedError`
    naming the run and who holds it. ``doing`` says what was refused (e.g. "resuming it")."""
    import fcntl  # POSIX only: imported here so that the module imports everywhere

    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(run_dir, exc) from None
    path = run_dir / LOCK_FILE
    fd = _open_lock_file(path)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError as exc:
        holder = _holder(fd, path)
        os.close(fd)
        if exc.errno not in (errno.EWOULDBLOCK, errno.EACCES, errno.EAGAIN):
            raise RunDirError(f"cannot lock it: {exc.strerror or exc}", file=str(path)) from None
        raise RunLockedError(f"run {run_dir} is in progress ({holder}): refused {doing}; wait for it to end, "
                             f"or stop it (every worker too), then try again") from None
    started = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    line = json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "started_at": started,
                       "command": " ".join(["evalbench", *sys.argv[1:]])[:150]}, ensure_ascii=True)
    # one fixed-size record written in place: no truncation, whatever an earlier holder wrote
    os.pwrite(fd, line.ljust(HOLDER_BYTES - 1)[:HOLDER_BYTES - 1].encode() + b"\n", 0)
    return RunLock(fd, path)


def _open_lock_file(path: Path) -> int:
    flags = os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:  # a symlink (ELOOP), a FIFO without a reader (ENXIO), a directory...
        raise RunDirError(f"cannot open the run's lock file: {exc.strerror or exc}", file=str(path)) from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunDirError("the run's lock file is not a regular file: refused", file=str(path))
    return fd


def _holder(fd: int, path: Path) -> str:
    """Who holds the lock: the line its holder wrote, and (Linux) the processes that have it open."""
    try:
        raw = os.pread(fd, HOLDER_BYTES, 0)
        info = json.loads(raw.decode("utf-8", "replace").splitlines()[0]) if raw.strip() else {}
    except (OSError, ValueError, IndexError):
        info = {}
    info = info if isinstance(info, dict) else {}
    text = f"locked by pid {info.get('pid', '?')}"
    if info.get("host") and info.get("host") != socket.gethostname():
        text += f" on {info['host']}"
    if info.get("command"):
        text += f" `{str(info['command'])[:200]}`"
    if info.get("started_at"):
        text += f" since {info['started_at']}"
    alive = _pids_holding(path)
    if alive:
        text += f"; held now by pid {', '.join(map(str, alive[:8]))}" + (" ..." if len(alive) > 8 else "")
    return "".join(ch if ch.isprintable() else "?" for ch in text)  # the file is the run directory's: no escapes


def _pids_holding(path: Path) -> list[int]:
    """The processes that have ``path`` open (from /proc: Linux only, processes of this user)."""
    try:
        target = os.stat(path)
        pids = [int(entry) for entry in os.listdir("/proc") if entry.isdigit()]
    except OSError:
        return []
    holding = []
    for pid in pids:
        if pid == os.getpid():
            continue
        with contextlib.suppress(OSError):
            for fd in os.listdir(f"/proc/{pid}/fd"):
                with contextlib.suppress(OSError):
                    st = os.stat(f"/proc/{pid}/fd/{fd}")
                    if (st.st_dev, st.st_ino) == (target.st_dev, target.st_ino):
                        holding.append(pid)
                        break
    return sorted(holding)

"""Where a run's files are written, and how: the journal's name, the error that stops a run when a
file cannot be written, and whole-file writes through a temporary file renamed into place.
Shared by the run writer (:mod:`evalbench.results.journal.rundir`) and ``--resume`` (:mod:`evalbench.run.resume`)."""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from evalbench.core.errors import EvalbenchError, RunDirError

JOURNAL = "conversations.jsonl"


class OutputError(EvalbenchError):
    """A file of the run directory could not be written (ENOSPC, EACCES, EROFS, ...): the run
    stops with this one-line message naming the file (exit 3)."""

    exit_code = 3

    def __init__(self, path: Path | str, error: OSError, *, temporary: Path | None = None) -> None:
        self.path, self.error = str(path), error
        reason = error.strerror or str(error)
        code = errno.errorcode.get(error.errno) if error.errno is not None else None
        if code:
            reason += f" ({code})"
        failing = None if error.filename is None else str(error.filename)
        if failing in (self.path, str(temporary)):  # the file itself, or the temporary file renamed into it
            failing = None
        where = self.path if failing is None else f"{failing} (writing {self.path})"
        super().__init__(f"cannot write {where}: {reason}")


def create_new(path: Path) -> int:
    """A file descriptor of a new, empty file at ``path``, open for writing. Whatever a run directory
    held there (a symlink leading elsewhere, a FIFO, a stale file) is removed first, never followed
    or opened: a file of an untrusted run directory cannot make evalbench write outside it or hang."""
    with contextlib.suppress(FileNotFoundError):
        path.unlink()
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o666)


def open_append(path: Path) -> int:
    """A file descriptor appending to the regular file at ``path`` (created when missing). A
    symlink, a FIFO, a device or a directory there is refused (:class:`~evalbench.core.errors.RunDirError`),
    never followed or waited on; another OS error is raised as it is."""
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o666)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENXIO, errno.EISDIR):  # a symlink; a FIFO without a reader; a directory
            raise RunDirError("not a regular file (a symlink, a FIFO or a directory): refused", file=str(path)) from None
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise RunDirError("not a regular file: refused", file=str(path))
    os.set_blocking(fd, True)
    return fd


def write_atomic_with(path: Path, write: Callable[[TextIO], object]) -> Path:
    """Stream a file through ``write`` into a temporary file renamed into place; its path.
    An OS error (disk full, ...) raises :class:`OutputError` and leaves the previous file as it was."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(create_new(tmp), "w", encoding="utf-8", newline="") as out:
            write(out)
        os.replace(tmp, path)
    except OSError as exc:
        raise OutputError(path, exc, temporary=tmp) from None
    finally:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
    return path


def write_atomic(path: Path, text: str) -> None:
    write_atomic_with(path, lambda out: out.write(text))

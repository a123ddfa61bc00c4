"""Where a run's files are written, and how: the journal's name, the error that stops a run when a
file cannot be written, and whole-file writes through a temporary file renamed into place.
Shared by the run writer (:mod:`evalbench.results.journal.rundir`) and ``--resume`` (:mod:`evalbench.resume`)."""

from __future__ import annotations

import contextlib
import errno
import os
from collections.abc import Callable
from pathlib import Path
from typing import TextIO

from evalbench.errors import EvalbenchError

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


def write_atomic_with(path: Path, write: Callable[[TextIO], object]) -> Path:
    """Stream a file through ``write`` into a temporary file renamed into place; its path.
    An OS error (disk full, ...) raises :class:`OutputError` and leaves the previous file as it was."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with tmp.open("w", encoding="utf-8", newline="") as out:
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

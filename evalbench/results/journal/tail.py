"""Following a journal that another process is writing: each call returns the lines completed
since the last one. A line is complete once its newline is written (the writer appends whole
lines, or cuts a half line off again: :class:`~evalbench.results.journal.rundir.RunWriter`).

The journal is opened as every run-directory file is (:func:`~evalbench.results.journal.safe_read.open_run_file`):
a FIFO, a device or a symlink out of the folder is a :class:`~evalbench.core.errors.RunDirError`;
each call reads at most :data:`POLL_BYTES`, and a line longer than
:data:`~evalbench.results.journal.safe_read.MAX_LINE_BYTES` is dropped, not held.
"""

from __future__ import annotations

from pathlib import Path

from evalbench.results.journal.safe_read import MAX_LINE_BYTES, open_run_file

POLL_BYTES = 16 * 1024 * 1024


class JournalTail:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""
        self._skipping = False  # inside a line too long to keep: dropped up to its newline

    def read(self) -> list[bytes]:
        """The lines completed since the last call, with their newlines (none while the file does not exist)."""
        with open_run_file(self.path.parent, self.path.name, missing_ok=True) as handle:
            if handle is None:
                return []
            handle.seek(self.offset)
            data = handle.read(POLL_BYTES)
        self.offset += len(data)
        if self._skipping:
            end = data.find(b"\n")
            if end < 0:
                return []
            self._skipping, data = False, data[end + 1:]
        *lines, self._partial = (self._partial + data).split(b"\n")
        if len(self._partial) > MAX_LINE_BYTES:
            self._partial, self._skipping = b"", True
        return [line + b"\n" for line in lines if line.strip()]

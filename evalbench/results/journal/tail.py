"""Following a journal that another process is writing: each call returns the lines completed
since the last one. A line is complete once its newline is written (the writer appends whole
lines, or cuts a half line off again: :class:`~evalbench.results.journal.rundir.RunWriter`)."""

from __future__ import annotations

from pathlib import Path


class JournalTail:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self._partial = b""

    def read(self) -> list[str]:
        """The lines completed since the last call (none while the file does not exist)."""
        try:
            with self.path.open("rb") as handle:
                handle.seek(self.offset)
                data = handle.read()
        except FileNotFoundError:
            return []
        self.offset += len(data)
        *lines, self._partial = (self._partial + data).split(b"\n")
        return [line.decode("utf-8") + "\n" for line in lines if line.strip()]

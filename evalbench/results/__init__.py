"""The run directory: journal, summaries and the readers other tools use."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from evalbench.results.rundir import JOURNAL


def read_journal(run_dir: Path | str) -> Iterator[dict[str, Any]]:
    """The conversation records of a run, in completion order."""
    with (Path(run_dir) / JOURNAL).open(encoding="utf-8") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


__all__ = ["read_journal"]

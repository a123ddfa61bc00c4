"""A run directory read as the typed run record (:mod:`evalbench.results.schema`): the reader API
for tools and notebooks.

>>> from evalbench.results import load_manifest, load_summary, read_records
>>> manifest = load_manifest("results/my_run")
>>> manifest.dataset.items, manifest.sessions[-1].finished_at
>>> for record in read_records("results/my_run"):
...     print(record.item_id, record.outcome, [p.passed for p in record.phases])

Each file is read as the internal readers read it (a journal line cut short or not a conversation
record is skipped with a warning, a conversation journaled twice counts once), then upgraded to
the current schema version (:func:`~evalbench.results.schema.upgrade`): a run written by an older
evalbench reads the same; one written by a newer evalbench is a
:class:`~evalbench.core.errors.RunDirError` naming the file.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TypeVar

from evalbench.core.errors import RunDirError
from evalbench.results.journal.files import JOURNAL
from evalbench.results.journal.reader import read_journal
from evalbench.results.journal.shapes import read_manifest, read_summary
from evalbench.results.schema import JournalRecord, Manifest, RunRecord, Summary, upgrade

M = TypeVar("M", bound=RunRecord)


def _typed(model: type[M], data: dict[str, object], where: Path) -> M:
    try:
        return model.model_validate(upgrade(data))
    except ValueError as exc:  # the types were checked when read: only the version is left to refuse
        raise RunDirError(str(exc), file=str(where), key="schema_version") from None


def load_manifest(run_dir: Path | str) -> Manifest:
    """``run_dir/manifest.json`` as a :class:`~evalbench.results.schema.Manifest`."""
    run_dir = Path(run_dir)
    return _typed(Manifest, read_manifest(run_dir), run_dir / "manifest.json")


def load_summary(run_dir: Path | str) -> Summary | None:
    """``run_dir/summary.json`` as a :class:`~evalbench.results.schema.Summary`; None when the run
    has none (it did not finish: ``evalbench report RUN_DIR`` writes it)."""
    run_dir = Path(run_dir)
    data = read_summary(run_dir)
    return None if data is None else _typed(Summary, data, run_dir / "summary.json")


def read_records(run_dir: Path | str) -> Iterator[JournalRecord]:
    """The conversation records of ``run_dir``'s journal, as
    :class:`~evalbench.results.schema.JournalRecord`, in the order they completed."""
    run_dir = Path(run_dir)
    for record in read_journal(run_dir):
        yield _typed(JournalRecord, record, run_dir / JOURNAL)

"""``evalbench.results.read_run(path)``: one run directory as pandas DataFrames, for notebooks
and scripts.

>>> from evalbench.results import read_run
>>> run = read_run("results/my_run")
>>> run.conversations.groupby("category")["passed"].mean()

Everything comes from the journal (``conversations.jsonl``, read as :func:`read_journal` reads
it: a line cut short is skipped, a conversation recorded twice counts once), the manifest and the
summary (recomputed from the journal when summary.json is missing: a run that did not finish).
The columns are documented in ``docs/results_schema.md``. pandas is imported only here.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from evalbench.core.errors import EvalbenchError, RunDirError
from evalbench.results.journal.files import JOURNAL
from evalbench.results.journal.lines import trial_of
from evalbench.results.journal.reader import read_journal
from evalbench.results.journal.shapes import read_manifest, read_summary
from evalbench.results.summary.cost import record_cost
from evalbench.results.summary.taxonomy import passed, record_diagnosis

if TYPE_CHECKING:  # pragma: no cover
    import pandas

log = logging.getLogger(__name__)

CONVERSATION_COLUMNS = [
    "run_id", "item_id", "dialect", "database", "trial", "category", "query_type", "difficulty", "ambiguous",
    "has_follow_up", "source", "seed", "outcome", "passed", "reward", "turns", "clarifications", "elapsed_s",
    "tokens_total", "cost_usd", "leaks", "diagnosis", "diagnosis_phase", "diagnosis_message",
]
PHASE_COLUMNS = [
    "run_id", "item_id", "dialect", "trial", "phase", "outcome", "primary", "passed", "clarifications", "debug_used",
    "question", "sql", "golden_sql", "answer", "generated_row_count", "golden_row_count", "generated_error", "error",
]
SCORE_COLUMNS = ["run_id", "item_id", "dialect", "database", "trial", "phase", "scorer", "value", "passed", "applicable",
                 "detail", "flags", "diagnosis"]


class RunReadError(EvalbenchError):
    """The path is not a run directory (exit 2)."""

    exit_code = 2


@dataclass
class Run:
    """A run directory read by :func:`read_run`: one row per conversation, per (conversation,
    phase) and per (conversation, phase, scorer); the manifest and summary as dicts."""

    path: Path
    manifest: dict[str, object]
    summary: dict[str, object]
    conversations: pandas.DataFrame
    phases: pandas.DataFrame
    scores: pandas.DataFrame


def _pandas() -> ModuleType:
    try:
        import pandas
    except ImportError:  # pragma: no cover - pandas is a dependency; a trimmed install may lack it
        raise RunReadError("read_run needs pandas: pip install pandas (or pip install 'evalbench[dev]')") from None
    return pandas


def read_run(path: Path | str) -> Run:
    """The run directory at ``path`` as DataFrames (see :class:`Run` and docs/results_schema.md)."""
    pd = _pandas()
    path = Path(path)
    if not (path / JOURNAL).is_file():
        raise RunReadError(f"{path}: not a run directory (no {JOURNAL})")
    try:
        manifest = read_manifest(path, missing_ok=True)
        summary = read_summary(path) or {}
    except RunDirError as exc:
        raise RunReadError(str(exc)) from None
    if not summary:
        summary = _rebuilt_summary(path)
    run_id = str(summary.get("run_id") or manifest.get("run_id") or path.name)
    conversations: list[dict[str, object]] = []
    phases: list[dict[str, object]] = []
    scores: list[dict[str, object]] = []
    malformed = 0
    for record in read_journal(path):
        try:
            rows = _rows(record, run_id)
        except (AttributeError, KeyError, TypeError, ValueError):  # a record of an unexpected shape
            malformed += 1
            continue
        conversations.append(rows[0])
        phases.extend(rows[1])
        scores.extend(rows[2])
    if malformed:
        log.warning("%s: %d malformed record(s) left out of the DataFrames", path / JOURNAL, malformed)
    return Run(path=path, manifest=manifest, summary=summary,
               conversations=pd.DataFrame(conversations, columns=CONVERSATION_COLUMNS),
               phases=pd.DataFrame(phases, columns=PHASE_COLUMNS),
               scores=pd.DataFrame(scores, columns=SCORE_COLUMNS))


def _rows(record: dict[str, Any], run_id: str) -> tuple[dict[str, object], list[dict[str, object]], list[dict[str, object]]]:
    phases = [phase_row(record, phase, run_id) for phase in record.get("phases") or []]
    scores = [row for phase in record.get("phases") or [] for row in score_rows(record, phase, run_id)]
    return conversation_row(record, run_id), phases, scores


def _rebuilt_summary(path: Path) -> dict[str, object]:
    """The summary recomputed from the journal (summary.json is missing); {} when the journal's
    records cannot be summarised (a warning says why)."""
    from evalbench.results.summary.rebuild import rebuild_summary

    try:
        return rebuild_summary(path)
    except (AttributeError, KeyError, TypeError, ValueError) as exc:
        log.warning("%s: cannot summarise the journal (%s: %s); .summary is empty", path, type(exc).__name__, exc)
        return {}


def conversation_row(record: dict[str, Any], run_id: str) -> dict[str, object]:
    """One row of :attr:`Run.conversations`."""
    diagnosis = record_diagnosis(record) or {}
    return {
        "run_id": record.get("run_id") or run_id, "item_id": record["item_id"], "dialect": record.get("dialect"),
        "database": record.get("database"), "trial": trial_of(record), "category": record.get("category"),
        "query_type": record.get("query_type"), "difficulty": record.get("difficulty"),
        "ambiguous": record.get("ambiguous"), "has_follow_up": record.get("has_follow_up"),
        "source": record.get("source"), "seed": record.get("seed"), "outcome": record.get("outcome"),
        "passed": passed(record), "reward": record.get("reward"), "turns": len(record.get("turns") or []),
        "clarifications": sum(int(p.get("clarifications") or 0) for p in record.get("phases") or []),
        "elapsed_s": record.get("elapsed_s"), "tokens_total": (record.get("tokens") or {}).get("total"),
        "cost_usd": record_cost(record),  # every role's model calls (None: a model without a price)
        "leaks": record.get("leaks"), "diagnosis": diagnosis.get("kind"), "diagnosis_phase": diagnosis.get("phase"),
        "diagnosis_message": diagnosis.get("message"),
    }


def phase_row(record: dict[str, Any], phase: dict[str, Any], run_id: str) -> dict[str, object]:
    """One row of :attr:`Run.phases`."""
    generated = phase.get("generated") or {}
    goldens = [g for g in phase.get("golden") or [] if g]
    golden_sql = phase.get("golden_sql") or []
    return {
        "run_id": record.get("run_id") or run_id, "item_id": record["item_id"], "dialect": record.get("dialect"),
        "trial": trial_of(record), "phase": phase.get("phase"), "outcome": phase.get("outcome"),
        "primary": phase.get("primary"), "passed": phase.get("passed"), "clarifications": phase.get("clarifications"),
        "debug_used": phase.get("debug_used"), "question": phase.get("question"), "sql": phase.get("sql"),
        "golden_sql": golden_sql[0] if golden_sql else None, "answer": phase.get("answer"),
        "generated_row_count": generated.get("row_count"), "golden_row_count": goldens[0].get("row_count") if goldens else None,
        "generated_error": generated.get("error"), "error": phase.get("error"),
    }


def score_rows(record: dict[str, Any], phase: dict[str, Any], run_id: str) -> list[dict[str, object]]:
    """The rows of :attr:`Run.scores` for one phase (scores_native.csv's columns, with the trial)."""
    rows: list[dict[str, object]] = []
    found = record_diagnosis(record) or {}
    kind = found.get("kind") if found.get("phase", "main") == phase.get("phase") else None
    for name, score in (phase.get("scores") or {}).items():
        rows.append({
            "run_id": record.get("run_id") or run_id, "item_id": record["item_id"], "dialect": record.get("dialect"),
            "database": record.get("database"), "trial": trial_of(record), "phase": phase.get("phase"), "scorer": name,
            "value": score.get("value"), "passed": score.get("passed"), "applicable": score.get("applicable"),
            "detail": score.get("detail"), "flags": ";".join(map(str, score.get("flags") or [])), "diagnosis": kind,
        })
    return rows


__all__ = ["CONVERSATION_COLUMNS", "PHASE_COLUMNS", "SCORE_COLUMNS", "Run", "RunReadError", "read_run"]

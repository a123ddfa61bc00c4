"""EvalBench-compatible ``evals.csv``, ``scores.csv``, ``summary.csv`` and ``configs.csv``.

Google's EvalBench writes four CSV files to ``<output_directory>/<job_id>/`` (its
``reporting/csv.py``, ``CsvReporter.store``) and the same four tables to BigQuery, where its
Looker Studio dashboard reads them. This module writes the same four files from a run's journal
so that dashboards and scripts built for EvalBench keep working on our runs. The column names and
value conventions are EvalBench's own; where they come from is cited next to each constant below
and in ``docs/evalbench_csv.md``.

Streaming: evals and scores rows are written while the journal is read, and only one small tally
per (scorer, phase) is kept, so memory does not grow with the number of conversations. Each file
is written to a temporary name and renamed into place.

Multi-turn: EvalBench is single-turn, so each *phase* of a conversation is one EvalBench eval.
The main phase keeps the item id; a later phase gets ``<item_id>:<phase>`` (for example
``greenleaf_7:follow_up``), so the (job_id, id) join between evals and scores that EvalBench's
dashboard does stays one-to-one. Summary metrics are named the same way (``exec_match`` for the
main phase, ``exec_match:follow_up``). Extension columns (``phase``, ``item_id``, ...) follow
EvalBench's columns, never in between them.
"""

from __future__ import annotations

import contextlib
import csv
import datetime as dt
import json
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, TypeVar

from evalbench.core.json_types import maybe_number, maybe_obj, number, obj, obj_items, objs, seq
from evalbench.results.journal.csvsafe import safe_cell, safe_row  # noqa: F401  (re-exported)
from evalbench.results.journal.files import OutputError, create_new
from evalbench.results.summary.taxonomy import record_diagnosis

T = TypeVar("T")

# --------------------------------------------------------------------------- EvalBench's columns
#
# Matched against GoogleCloudPlatform/evalbench (commits named in docs/evalbench_csv.md).
#
# evals.csv: the keys of one eval output dict. ``EvalOutput`` starts as the ``EvalInputRequest``
# fields (dataset/evalinput.py); evaluator/evaluator.py adds job_id and run_time; work/promptgenwork.py
# adds prompt, generated_prompt, prompt_generator_error; work/sqlgenwork.py sets generated_sql,
# sql_generator_error, sql_generator_time; work/sqlexecwork.py adds sanitized_sql, generated_result,
# eval_results, generated_error, golden_result, golden_eval_results, golden_error. The orchestrator
# (evaluator/oneshotorchestrator.py, ``process``) dumps them with ``json.dump(sort_keys=True)`` and
# evalbench.py loads them into a DataFrame (reporting/report.py, ``get_dataframe``, dtype "string"),
# so the columns come out in sorted order. (``scoring_error`` appears only when scoring crashed.)
EVALBENCH_EVALS_COLUMNS = [
    "cleanup_sql", "database", "dialects", "eval_query", "eval_results", "explanation", "generated_error",
    "generated_prompt", "generated_result", "generated_sql", "golden_error", "golden_eval_results", "golden_result",
    "golden_sql", "id", "job_id", "nl_prompt", "other", "prompt", "prompt_generator_error", "query_type", "run_time",
    "sanitized_sql", "setup_sql", "sql_generation_details", "sql_generator_error", "sql_generator_time", "tags",
    "trace_id",
]
# scores.csv: scorers/comparator.py ``ComparisonResult.to_dict`` (comparator, score, comparison_error,
# comparison_logs) plus the keys scorers/score.py ``compare`` adds (id, generated_sql, generated_error,
# dialects, database, job_id); dumped with sort_keys=True as above, and returned unchanged (apart
# from string dtypes) by reporting/analyzer.py ``analyze_result``.
EVALBENCH_SCORES_COLUMNS = [
    "comparator", "comparison_error", "comparison_logs", "database", "dialects", "generated_error", "generated_sql",
    "id", "job_id", "score",
]
# summary.csv: reporting/analyzer.py ``analyze_one_metric`` returns metric_name, metric_score,
# correct_results_count, total_results_count; evalbench.py then sets job_id and run_time.
EVALBENCH_SUMMARY_COLUMNS = ["metric_name", "metric_score", "correct_results_count", "total_results_count", "job_id", "run_time"]
# configs.csv: util/config.py ``config_to_df``: one row per flattened config key.
EVALBENCH_CONFIGS_COLUMNS = ["job_id", "run_time", "config", "value"]

# Our extension columns, always after EvalBench's (extra trailing columns do not disturb readers
# that select EvalBench's columns by name, nor BigQuery loads with ALLOW_FIELD_ADDITION).
EXTRA_EVALS_COLUMNS = ["item_id", "phase", "outcome", "turns", "clarifications", "generated_row_count", "golden_row_count",
                       "diagnosis", "diagnosis_message"]
EXTRA_SCORES_COLUMNS = ["item_id", "phase", "value", "passed", "flags"]
EXTRA_SUMMARY_COLUMNS = ["phase", "not_applicable_count"]

FILES = ("evals.csv", "scores.csv", "summary.csv", "configs.csv")
# Our own scores.csv / summary.csv, when found where the EvalBench files go, are kept under these names.
NATIVE_NAMES = {"scores.csv": "scores_native.csv", "summary.csv": "summary_native.csv"}
_NATIVE_HEADERS = {"scores.csv": "run_id,item_id,", "summary.csv": "run_id,metric_name,"}

MAIN_PHASE = "main"
PHASE_SEPARATOR = ":"
EXECUTABLE = "executable"  # EvalBench always reports this metric, with metric_score 1
PASS_SCORE = 100  # EvalBench comparators score 0 or 100; a binary metric counts the rows scoring 100
EXECUTABLE_SCORE = 1


def evalbench_id(item_id: str, phase: str) -> str:
    """The EvalBench ``id`` of one phase: the item id for the main phase, ``<item>:<phase>`` after it."""
    return item_id if phase == MAIN_PHASE else f"{item_id}{PHASE_SEPARATOR}{phase}"


def metric_name(scorer: str, phase: str) -> str:
    """The EvalBench ``metric_name`` of a scorer in one phase (named like :func:`evalbench_id`)."""
    return scorer if phase == MAIN_PHASE else f"{scorer}{PHASE_SEPARATOR}{phase}"


# --------------------------------------------------------------------------- cell conventions


def cell(value: object) -> str:
    """One CSV cell as EvalBench's pandas frames write it (dtype "string", ``str()`` of the value).

    None is an empty cell; lists and dicts are their Python ``repr`` (``['postgres']``), booleans
    ``True``/``False``, as ``DataFrame.to_csv`` writes them; numbers as they are, and texts made
    safe for spreadsheets by :func:`safe_cell`.
    """
    if value is None:
        return ""
    if isinstance(value, (int, float)):  # numbers (and booleans) stay numbers
        return str(value)
    return safe_cell(str(value))


def result_text(execution: Mapping[str, object] | None) -> str | None:
    """An execution preview as EvalBench stores a result: a JSON list of row objects.

    EvalBench keeps up to ``truncate_execution_outputs`` rows and appends
    ``...and N more items truncated`` (util/loghandler.py); we keep the journal's preview
    (``execution.preview_rows``, 5 by default) and append the same suffix with the true row count.
    """
    if execution is None:
        return None
    columns = seq(execution.get("columns"))
    preview = seq(execution.get("preview"))
    rows = [dict(zip(columns, seq(row), strict=False)) for row in preview]  # duplicate column names: the last wins, as in SQLAlchemy's _asdict
    text = json.dumps(rows, default=str)
    more = number(execution.get("row_count")) - len(preview)
    if more > 0:
        text += f"...and {more} more items truncated"
    return text


def flatten_config(data: Mapping[str, object], separator: str = ".") -> dict[str, object]:
    """``pandas.json_normalize(data, sep=".")`` for one dict, as EvalBench's ``config_to_df`` uses it.

    Top-level non-dict values first, then nested dicts flattened depth first; lists are kept whole;
    empty dicts disappear (pandas' ``_normalise_json_ordered``).
    """
    top = {k: v for k, v in data.items() if not isinstance(v, dict)}
    nested: dict[str, object] = {}

    def walk(value: Mapping[str, object], prefix: str) -> None:
        for key, sub in value.items():
            name = f"{prefix}{separator}{key}" if prefix else str(key)
            if isinstance(sub, dict):
                walk(sub, name)
            else:
                nested[name] = sub

    walk({k: v for k, v in data.items() if isinstance(v, dict)}, "")
    return {**top, **nested}


def evalbench_run_time(created_at: str | None) -> str:
    """EvalBench's ``run_time`` cell: ``str(datetime)`` (space separator, as pandas writes it)."""
    if not created_at:
        return ""
    try:
        return str(dt.datetime.fromisoformat(created_at))
    except ValueError:
        return created_at


def evalbench_config(manifest: Mapping[str, object]) -> dict[str, object]:
    """Our config snapshot in EvalBench's shape: ``experiment_config``, ``model_config``, ``db_configs``.

    EvalBench's ``model_config`` is the agent's own YAML and ``db_configs`` the database configs
    grouped by dialect; everything else of the run config is ``experiment_config``. The manifest's
    snapshot already has every secret redacted.
    """
    config = dict(obj(manifest.get("config")))
    model = config.pop("model_config", None)
    databases = seq(config.pop("database_configs", None))
    by_dialect: dict[str, list[object]] = {}
    for db in databases:
        dialect = db.get("dialect", "") if isinstance(db, dict) else ""
        by_dialect.setdefault(str(dialect), []).append(db)
    return {"experiment_config": config, "model_config": model if isinstance(model, dict) else {"model_config": model},
            "db_configs": by_dialect}


def _run_metadata(manifest: Mapping[str, object]) -> dict[str, object]:
    """What the manifest records besides the config (our extension rows of configs.csv)."""
    keys = ("evalbench_version", "git_sha", "config_fingerprint", "seed", "dataset", "agent", "vuser", "scorers")
    return {"run": {k: manifest[k] for k in keys if k in manifest}}


# --------------------------------------------------------------------------- rows


def _phase_turns(record: Mapping[str, object], phase: str) -> list[dict[str, object]]:
    return [t for t in objs(record.get("turns")) if t.get("phase", MAIN_PHASE) == phase]


def _first(record: Mapping[str, object], phase: Mapping[str, object], key: str, default: object) -> object:
    """A field of the phase, else of the record (fields a later schema may add), else ``default``."""
    if phase.get(key) is not None:
        return phase[key]
    if record.get(key) is not None:
        return record[key]
    return default


def _generator_error(record: Mapping[str, object], phase: Mapping[str, object]) -> str | None:
    """EvalBench's ``sql_generator_error``: why the phase ended without a scored answer."""
    outcome = phase.get("outcome") or record.get("outcome")
    if outcome in (None, "scored"):
        return None
    error = phase.get("error") or record.get("error")
    return f"{outcome}: {error}" if error else str(outcome)


def _transcript(turns: list[dict[str, object]]) -> str | None:
    if not turns:
        return None
    out = []
    for turn in turns:
        reply = obj(turn.get("reply"))
        vuser = obj(turn.get("vuser"))
        out.append({"user": turn.get("user_text"), "role": turn.get("user_role"), "kind": reply.get("kind"),
                    "agent": reply.get("sql") or reply.get("text") or reply.get("error"),
                    "vuser_action": vuser.get("action")})
    return json.dumps(out, default=str)


def _phases(record: Mapping[str, object]) -> list[dict[str, object]]:
    phases = objs(record.get("phases"))
    if phases:
        return phases
    # A conversation that ended before its first phase still counts (nothing is dropped).
    return [{"phase": MAIN_PHASE, "question": None, "outcome": record.get("outcome"), "error": record.get("error"),
             "clarifications": 0, "sql": None, "generated": None, "golden": [], "scores": {}}]


def eval_row(record: dict[str, object], phase: Mapping[str, object], job_id: str, run_time: str) -> dict[str, object]:
    """One evals.csv row (EvalBench's keys, then ours) for one phase of a journal record."""
    name = str(phase.get("phase", MAIN_PHASE))
    turns = _phase_turns(record, name)
    generated = maybe_obj(phase.get("generated"))
    golden_list = seq(phase.get("golden"))
    golden = maybe_obj(golden_list[0]) if golden_list else None  # EvalBench runs the first golden SQL only
    replies = [obj(t["reply"]) for t in turns if t.get("reply")]
    explanation = next((r.get("text") for r in reversed(replies) if r.get("text")), None)
    other = obj(record.get("other"))
    tags = record.get("tags")
    if tags is None:
        tags = [t for t in (record.get("category"), record.get("difficulty")) if t]
    sql = phase.get("sql")
    return {
        "cleanup_sql": _first(record, phase, "cleanup_sql", []),
        "database": record.get("database"),
        "dialects": [record.get("dialect")],
        "eval_query": _first(record, phase, "eval_query", []),
        "eval_results": None,
        "explanation": explanation,
        "generated_error": generated.get("error") if generated else None,
        "generated_prompt": phase.get("question"),
        "generated_result": result_text(generated),
        "generated_sql": sql,
        "golden_error": golden.get("error") if golden else None,
        "golden_eval_results": None,
        "golden_result": result_text(golden),
        # The journal (schema 1) does not keep the golden SQL text; a record that has it is used.
        "golden_sql": _first(record, phase, "golden_sql", []),
        "id": evalbench_id(str(record["item_id"]), name),
        "job_id": job_id,
        "nl_prompt": phase.get("question"),
        "other": {k: json.dumps(v) for k, v in other.items()},  # EvalBench's build_normalized_other
        "prompt": phase.get("question"),
        "prompt_generator_error": None,
        "query_type": record.get("query_type"),
        "run_time": run_time,
        "sanitized_sql": sql if generated is not None else None,
        "setup_sql": _first(record, phase, "setup_sql", []),
        "sql_generation_details": _transcript(turns),
        "sql_generator_error": _generator_error(record, phase),
        "sql_generator_time": round(sum(number(r.get("latency_s")) or 0.0 for r in replies), 6),
        "tags": tags,
        "trace_id": None,
        # extensions
        "item_id": record["item_id"],
        "phase": name,
        "outcome": phase.get("outcome") or record.get("outcome"),
        "turns": len(turns),
        "clarifications": phase.get("clarifications", 0),
        "generated_row_count": generated.get("row_count") if generated else None,
        "golden_row_count": golden.get("row_count") if golden else None,
        # why the conversation failed, on the row of the phase it is about (summary/taxonomy.py; empty: passed)
        **_diagnosis_cells(record, name),
    }


def _diagnosis_cells(record: dict[str, object], phase: str) -> dict[str, object]:
    found = record_diagnosis(record)
    if found is None or found.get("phase", MAIN_PHASE) != phase:
        return {"diagnosis": None, "diagnosis_message": None}
    flags = seq(found.get("flags"))
    message = str(found.get("message") or "") + (f" [{', '.join(map(str, flags))}]" if flags else "")
    return {"diagnosis": found.get("kind"), "diagnosis_message": message}


def score_cells(score: Mapping[str, object]) -> tuple[float | int | None, str | None, str | None]:
    """(score, comparison_error, comparison_logs) of one of our scores, in EvalBench's terms.

    Pass/fail scorers score 100 or 0 as EvalBench's comparators do; metrics keep their value
    (EvalBench's turn_count and latency scorers do the same). A scorer that crashed scores 0 with
    the message as ``comparison_error``.
    """
    detail = score.get("detail") or None
    detail = detail if isinstance(detail, str) else None  # a text (the schema's), or None
    if score.get("passed") is None:
        points: float | int | None = maybe_number(score.get("value"))
    else:
        points = PASS_SCORE if score["passed"] else 0
    if detail and detail.startswith("scorer error:"):
        return points, detail, None
    return points, None, detail


def score_rows(eval_: Mapping[str, object], phase: Mapping[str, object]) -> Iterator[dict[str, object]]:
    """scores.csv rows of one phase: one per applicable scorer (not-applicable ones are left out,
    as EvalBench's analyzer would count them in its denominator)."""
    for name, score in obj_items(phase.get("scores")):
        if not score.get("applicable", True):
            continue
        points, error, logs = score_cells(score)
        yield {
            "comparator": name, "comparison_error": error, "comparison_logs": logs,
            "database": eval_["database"], "dialects": eval_["dialects"], "generated_error": eval_["generated_error"],
            "generated_sql": eval_["generated_sql"], "id": eval_["id"], "job_id": eval_["job_id"], "score": points,
            "item_id": eval_["item_id"], "phase": eval_["phase"], "value": score.get("value"),
            "passed": score.get("passed"), "flags": ";".join(map(str, seq(score.get("flags")))),
        }


# --------------------------------------------------------------------------- summary


@dataclass
class _Tally:
    rows: int = 0  # applicable scores (EvalBench's total_results_count)
    correct: int = 0  # scores of 100 (pass/fail scorers)
    value_sum: float = 0.0  # metrics: EvalBench's correct_results_count is the sum of the scores
    values: int = 0
    not_applicable: int = 0
    metric_votes: int = 0  # applicable scores with passed None (a metric)


class _Summary:
    """Per (scorer, phase) tallies, plus EvalBench's own ``executable`` count per phase."""

    def __init__(self, scorers: list[str], metrics: set[str] | None, order: list[tuple[str, str]]) -> None:
        self.scorers = scorers
        self.metrics = metrics  # None: infer from the records
        self.order = list(order)
        self.tallies: dict[tuple[str, str], _Tally] = {key: _Tally() for key in order}
        self.phase_rows: dict[str, int] = {}
        self.phase_executable: dict[str, int] = {}

    def add(self, eval_: Mapping[str, object], phase: Mapping[str, object]) -> None:
        name = str(eval_["phase"])
        self.phase_rows[name] = self.phase_rows.get(name, 0) + 1
        if eval_["generated_sql"] and eval_["generated_error"] is None:
            self.phase_executable[name] = self.phase_executable.get(name, 0) + 1
        for scorer, score in obj_items(phase.get("scores")):
            key = (scorer, name)
            if key not in self.tallies:
                self.tallies[key] = _Tally()
                self.order.append(key)
            tally = self.tallies[key]
            if not score.get("applicable", True):
                tally.not_applicable += 1
                continue
            tally.rows += 1
            if score.get("passed"):
                tally.correct += 1
            if score.get("passed") is None:
                tally.metric_votes += 1
            value = maybe_number(score.get("value"))
            if value is not None:
                tally.value_sum += value
                tally.values += 1

    def _is_metric(self, scorer: str) -> bool:
        if self.metrics is not None:
            return scorer in self.metrics
        tallies = [t for (s, _), t in self.tallies.items() if s == scorer and t.rows]
        return bool(tallies) and all(t.metric_votes == t.rows for t in tallies)

    def rows(self, job_id: str, run_time: str) -> Iterator[dict[str, object]]:
        """EvalBench's order: configured scorers (not ``executable``), other scorers seen, then ``executable``."""
        phase_rank = {MAIN_PHASE: 0, "follow_up": 1}
        names = [s for s in self.scorers if s != EXECUTABLE]
        names += [s for s, _ in self.order if s not in names and s != EXECUTABLE]
        seen_phases = sorted(set(self.phase_rows) | {p for _, p in self.order}, key=lambda p: (phase_rank.get(p, 9), p))
        for scorer in dict.fromkeys(names):
            phases = [p for p in seen_phases if (scorer, p) in self.tallies] or [MAIN_PHASE]
            for phase in phases:
                tally = self.tallies.get((scorer, phase), _Tally())
                if self._is_metric(scorer):
                    mean = tally.value_sum / tally.values if tally.values else 0.0
                    row = (mean, tally.value_sum, tally.rows)
                else:
                    row = (PASS_SCORE, tally.correct, tally.rows)
                yield self._row(metric_name(scorer, phase), row, job_id, run_time, phase, tally.not_applicable)
        for phase in seen_phases or [MAIN_PHASE]:
            executable = self.tallies.get((EXECUTABLE, phase))
            if executable is not None:  # our executable scorer ran: its verdicts are the count
                row = (EXECUTABLE_SCORE, executable.correct, executable.rows)
                not_applicable = executable.not_applicable
            else:  # EvalBench's count: phases whose SQL ran without an error, out of all phases
                row = (EXECUTABLE_SCORE, self.phase_executable.get(phase, 0), self.phase_rows.get(phase, 0))
                not_applicable = 0
            yield self._row(metric_name(EXECUTABLE, phase), row, job_id, run_time, phase, not_applicable)

    @staticmethod
    def _row(name: str, values: tuple[float, float, int], job_id: str, run_time: str, phase: str, na: int) -> dict[str, object]:
        score, correct, total = values
        return {"metric_name": name, "metric_score": score, "correct_results_count": correct,
                "total_results_count": total, "job_id": job_id, "run_time": run_time,
                "phase": phase, "not_applicable_count": na}


# --------------------------------------------------------------------------- files


def _writing(path: Path, action: Callable[[], T]) -> T:
    """``action()``, an OS error (disk full, ...) raised as the run directory's OutputError naming ``path``."""
    try:
        return action()
    except OSError as exc:
        raise OutputError(path, exc, temporary=path.with_name(f".{path.name}.tmp")) from None


class _CsvFile:
    """A CSV file written under a temporary name and renamed into place by :meth:`commit`."""

    def __init__(self, path: Path, columns: list[str]) -> None:
        self.path = path
        self.columns = columns
        self.tmp = path.with_name(f".{path.name}.tmp")
        self.handle: IO[str] = _writing(self.path, lambda: os.fdopen(create_new(self.tmp), "w", encoding="utf-8", newline=""))
        self.writer = csv.writer(self.handle)
        _writing(self.path, lambda: self.writer.writerow(columns))

    def write(self, row: Mapping[str, object]) -> None:
        cells = [cell(row.get(c)) for c in self.columns]
        _writing(self.path, lambda: self.writer.writerow(cells))

    def commit(self) -> Path:
        def move() -> None:
            self.handle.close()
            _keep_native(self.path)
            os.replace(self.tmp, self.path)

        _writing(self.path, move)
        return self.path

    def abort(self) -> None:
        with contextlib.suppress(OSError):  # unflushed rows of a file that is given up
            self.handle.close()
        with contextlib.suppress(OSError):
            self.tmp.unlink(missing_ok=True)


def _keep_native(path: Path) -> None:
    """Our own scores.csv / summary.csv found where an EvalBench file goes is kept under its native name."""
    prefix = _NATIVE_HEADERS.get(path.name)
    if prefix is None or not path.is_file():
        return
    with path.open(encoding="utf-8-sig", errors="replace") as handle:
        head = handle.readline()
    if head.startswith(prefix):
        os.replace(path, path.with_name(NATIVE_NAMES[path.name]))


class EvalbenchCsvWriter:
    """EvalBench's four files, written incrementally: :meth:`add` each journal record (as the run
    completes conversations), then :meth:`commit` (or :meth:`abort`). Memory stays flat."""

    def __init__(self, out_dir: Path, manifest: Mapping[str, object], *, metrics: set[str] | None = None,
                 order: list[tuple[str, str]] | None = None, extensions: bool = True) -> None:
        _writing(out_dir, lambda: out_dir.mkdir(parents=True, exist_ok=True))
        self.manifest = manifest
        self.extensions = extensions
        scorers = [str(s) for s in seq(manifest.get("scorers")) or seq(obj(manifest.get("config")).get("scorers"))]
        self.summary = _Summary(scorers, metrics, order or [])
        self.job_id = str(manifest.get("run_id") or "")
        created_at = manifest.get("created_at")
        self.run_time = evalbench_run_time(created_at if isinstance(created_at, str) else None)

        def columns(base: list[str], extra: list[str]) -> list[str]:
            return base + extra if extensions else list(base)

        self.files: list[_CsvFile] = []
        try:
            for name, file_columns in (("evals.csv", columns(EVALBENCH_EVALS_COLUMNS, EXTRA_EVALS_COLUMNS)),
                                       ("scores.csv", columns(EVALBENCH_SCORES_COLUMNS, EXTRA_SCORES_COLUMNS)),
                                       ("summary.csv", columns(EVALBENCH_SUMMARY_COLUMNS, EXTRA_SUMMARY_COLUMNS)),
                                       ("configs.csv", list(EVALBENCH_CONFIGS_COLUMNS))):
                self.files.append(_CsvFile(out_dir / name, file_columns))
        except BaseException:  # an unwritable directory: the temporary files opened so far go
            self.abort()
            raise

    def add(self, record: dict[str, object]) -> None:
        evals_file, scores_file = self.files[0], self.files[1]
        self.job_id = self.job_id or str(record.get("run_id") or "")
        for phase in _phases(record):
            row = eval_row(record, phase, self.job_id, self.run_time)
            evals_file.write(row)
            for score in score_rows(row, phase):
                scores_file.write(score)
            self.summary.add(row, phase)

    def commit(self) -> list[Path]:
        """Write the summary and config rows and move the files into place (evals, scores, summary, configs)."""
        summary_file, configs_file = self.files[2], self.files[3]
        try:
            for row in self.summary.rows(self.job_id, self.run_time):
                summary_file.write(row)
            if self.manifest:
                flat = flatten_config(evalbench_config(self.manifest))
                if self.extensions:
                    flat.update(flatten_config(_run_metadata(self.manifest)))
                for key, value in flat.items():
                    configs_file.write({"job_id": self.job_id, "run_time": self.run_time, "config": key, "value": value})
        except BaseException:
            self.abort()
            raise
        return [file.commit() for file in self.files]

    def abort(self) -> None:
        for file in self.files:
            file.abort()


def write_evalbench_csvs(run_dir: Path, records: Iterable[dict[str, object]] | None = None, *,
                         out_dir: Path | None = None, extensions: bool = True) -> list[Path]:
    """Write EvalBench's ``evals.csv``, ``scores.csv``, ``summary.csv`` and ``configs.csv``.

    ``records`` are journal records (``conversations.jsonl`` lines); by default the run's journal
    is read, one line at a time. ``manifest.json`` (config, run id, start time) and ``summary.json``
    (which scorers are metrics) are read when present. Files go to ``out_dir`` (default: the run
    directory, where EvalBench's CSV reporter puts them: ``<output_directory>/<job_id>/``); our own
    ``scores.csv``/``summary.csv`` found there are first renamed to ``scores_native.csv`` /
    ``summary_native.csv``. ``extensions=False`` writes EvalBench's columns only.

    Returns the paths written, in the order evals, scores, summary, configs.
    """
    from evalbench.results.journal.reader import read_journal
    from evalbench.results.journal.shapes import read_manifest, read_summary

    run_dir = Path(run_dir)
    manifest = read_manifest(run_dir, missing_ok=True)
    summary_json = read_summary(run_dir) or {}
    # Which scorers are metrics: the manifest says so, else summary.json does, else the records tell.
    metrics: set[str] | None = {str(m) for m in seq(manifest["metric_scorers"])} if "metric_scorers" in manifest else None
    order: list[tuple[str, str]] = []
    if summary_json.get("scorers"):
        scorers = obj_items(summary_json["scorers"])
        if metrics is None:
            metrics = {name for name, phases in scorers if any("mean" in obj(t) for t in phases.values())}
        order = [(name, phase) for name, phases in scorers for phase in phases]
    writer = EvalbenchCsvWriter(Path(out_dir) if out_dir is not None else run_dir, manifest, metrics=metrics,
                                order=order, extensions=extensions)
    try:
        for record in read_journal(run_dir) if records is None else records:
            writer.add(record)
    except BaseException:
        writer.abort()
        raise
    return writer.commit()


__all__ = [
    "EVALBENCH_CONFIGS_COLUMNS",
    "EVALBENCH_EVALS_COLUMNS",
    "EVALBENCH_SCORES_COLUMNS",
    "EVALBENCH_SUMMARY_COLUMNS",
    "EXTRA_EVALS_COLUMNS",
    "EXTRA_SCORES_COLUMNS",
    "EXTRA_SUMMARY_COLUMNS",
    "EvalbenchCsvWriter",
    "evalbench_id",
    "metric_name",
    "write_evalbench_csvs",
]

"""The types of what a run directory holds, as its readers use them: a journal record, a
manifest, a summary. A file read from a run directory (:mod:`~evalbench.results.journal.safe_read`)
is checked against these models before any reader touches it, so a value of the wrong type
(a list for an object, a string for a number, null, a count of 10**18, a shard ``1/99999999999``)
is refused where it is read — a journal line is skipped as "not a conversation record", a manifest
or summary is a :class:`~evalbench.core.errors.RunDirError` naming the file and the key — instead of
crashing (or looping) later in whichever reader meets it.

The models check types only, and allow every other key (the files hold more than the readers
need); the readers go on using the dicts, which are then known to have these types.
"""

from __future__ import annotations

import math
import os
import re
from pathlib import Path
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from evalbench.core.errors import RunDirError
from evalbench.core.json_types import json_type
from evalbench.results.journal.safe_read import read_json

MAX_COUNT = 10**9  # items, conversations, rows: far above any real run, far below a loop that never ends
MAX_SHARDS = 10_000  # --workers and --shard i/n


class _Shape(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")  # other keys are left to the readers


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("a finite number")
    return value


Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Number = Annotated[float, AfterValidator(_finite)]
Text = str | None


def _shard(text: str) -> str:
    match = re.fullmatch(r"(\d{1,9})/(\d{1,9})", text)
    if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)) <= MAX_SHARDS:
        raise ValueError(f"i/n with 1 <= i <= n <= {MAX_SHARDS}")
    return text


# ------------------------------------------------------------------------------ journal records


Tokens = Annotated[int, Field(ge=0, le=10**15)]  # a conversation's tokens of one role (10**15: no real run comes near)


class UsageShape(_Shape):
    """The usage of one role's model calls: a record's ``usage.<role>``, or a judge's / virtual user's own."""

    model: Text = None
    calls: Count = 0
    prompt: Tokens = 0
    completion: Tokens = 0
    total: Tokens = 0
    unreported: Count = 0
    price: dict[str, Number] | None = None
    cost_usd: Number | None = None
    replayed: bool | None = None


class ScoreShape(_Shape):
    value: Number | None
    passed: bool | None
    applicable: bool
    detail: Text
    flags: list[str]
    usage: UsageShape | None = None


class ExecutionShape(_Shape):
    columns: list[str] | None = None
    row_count: Count | None = None
    truncated: bool | None = None
    elapsed_s: Number | None = None
    error: Text = None
    error_kind: Text = None
    rows_sha256: Text = None
    preview: list[list[Any]] | None = None
    preview_truncated: bool | None = None


class AttemptShape(_Shape):
    sql: Text = None
    answer: Text = None
    scores: dict[str, bool | None] | None = None


class PhaseShape(_Shape):
    phase: str
    scores: dict[str, ScoreShape]
    passed: bool | None = None
    primary: Text = None
    outcome: Text = None
    error: Text = None
    question: Text = None
    sql: Text = None
    answer: Text = None
    compared_sql: Text = None
    golden_sql: list[Text] | None = None
    golden_is_script: bool | None = None
    golden_run_sql: list[list[Text]] | None = None
    clarifications: Count | None = None
    clarification_budget: Count | None = None
    debug_used: Count | None = None
    attempts: list[AttemptShape] | None = None
    conditions: dict[str, Any] | None = None
    generated: ExecutionShape | None = None
    golden: list[ExecutionShape | None] | None = None
    compared: ExecutionShape | None = None


class ReplyShape(_Shape):
    kind: Text = None
    text: Text = None
    sql: Text = None
    tool_calls: list[dict[str, Any]] | None = None
    usage: dict[str, Count | None] | None = None
    latency_s: Number | None = None
    error: Text = None
    error_kind: Text = None


class VUserShape(_Shape):
    action: Text = None
    action_kind: Text = None
    text: Text = None
    error: Text = None
    audit: dict[str, Any] | None = None
    usage: UsageShape | None = None


class TurnShape(_Shape):
    index: Count | None = None
    phase: Text = None
    user_role: Text = None
    user_text: Text = None
    reply: ReplyShape | None = None
    vuser: VUserShape | None = None


class DiagnosisShape(_Shape):
    kind: str
    phase: Text = None
    message: Text = None
    flags: list[str] | None = None


class RecordShape(_Shape):
    """One journal line: a conversation record (docs/results_schema.md)."""

    item_id: str
    outcome: str
    phases: list[PhaseShape]
    turns: list[TurnShape] = []
    dialect: Text = None
    database: Text = None
    trial: Annotated[int, Field(ge=1, le=MAX_COUNT)] | None = None
    schema_version: int | None = None
    run_id: Text = None
    category: Text = None
    query_type: Text = None
    difficulty: Text = None
    source: Text = None
    error: Text = None
    ambiguous: bool | None = None
    ambiguity_types: list[str] | None = None
    has_follow_up: bool | None = None
    record_truncated: bool | None = None
    seed: int | None = None
    elapsed_s: Number | None = None
    reward: Number | None = None
    leaks: Count | None = None
    sessions_opened: Count = 1
    stage_seconds: dict[str, Number] | None = None
    tokens: dict[str, Count] | None = None
    usage: dict[str, UsageShape] | None = None  # per role; absent in journals written before it
    cost_usd: Number | None = None
    tools: dict[str, Count] | None = None
    invalid_phases: list[dict[str, str]] | None = None
    simulator: dict[str, Any] | None = None
    diagnosis: DiagnosisShape | None = None
    tags: list[Any] | dict[str, Any] | str | None = None
    other: dict[str, Any] | None = None


def record_problem(value: Any) -> str | None:
    """Why ``value`` (a parsed journal line) is not a conversation record; None when it is one."""
    if not isinstance(value, dict):
        return "not a JSON object"
    try:
        RecordShape.model_validate(value)
    except ValidationError as exc:
        key, message = _first_error(exc)
        return f"{key}: {message}"
    return None


# ------------------------------------------------------------------------------ manifest and summary


class SubsetShape(_Shape):
    shard: Annotated[str, AfterValidator(_shard)] | None = None
    of: Count | None = None
    shards: Annotated[int, Field(ge=1, le=MAX_SHARDS)] | None = None
    merged_from: list[str] | None = None


class DatasetShape(_Shape):
    path: Text = None
    sha256: Text = None
    format: Text = None
    items: Count | None = None
    trials: Annotated[int, Field(ge=1, le=MAX_COUNT)] | None = None
    groups: dict[str, Count] | None = None
    record_errors: Count | None = None
    subset: SubsetShape | None = None


class ConfigShape(_Shape):
    """``manifest.json → config`` (the run's config snapshot): the keys read from it without the
    config model (``--resume``'s comparison, ``compare``, configs.csv, ``rescore``)."""

    scorers: dict[str, Any] | None = None
    trials: Annotated[int, Field(ge=1, le=MAX_COUNT)] | None = None
    subset: dict[str, Any] | None = None
    run_id: Text = None
    reporting: dict[str, Any] | None = None
    model_config_: dict[str, Any] | str | None = Field(default=None, alias="model_config")
    vuser_model_config: dict[str, Any] | None = None
    database_configs: list[Any] | None = None


class SessionShape(_Shape):
    started_at: Text = None
    finished_at: Text = None
    elapsed_s: Number | None = None
    conversations: Count | None = None
    resumed_with: Count | None = None
    cancelled: bool | None = None
    shard: Text = None


class SummaryExtraShape(_Shape):
    """``manifest.json → summary_extra``: the run facts a rebuilt summary copies (only these keys are copied)."""

    elapsed_s: Number | None = None
    conversations_per_s: Number | None = None
    dataset: dict[str, Any] | None = None
    record_errors: list[str] | None = None
    databases: dict[str, dict[str, Any]] | None = None
    cancelled: bool | None = None
    sessions: Count | None = None
    scoring: dict[str, Any] | None = None


class ManifestShape(_Shape):
    """manifest.json: the keys its readers use (docs/results_schema.md)."""

    schema_version: int | None = None
    run_id: Text = None
    created_at: Text = None
    finished_at: Text = None
    evalbench_version: Text = None
    git_sha: Text = None
    python: Text = None
    platform: Text = None
    packages: dict[str, Text] | None = None
    config_file: Text = None
    config: ConfigShape | None = None
    config_fingerprint: Text = None
    seed: int | None = None
    dataset: DatasetShape | None = None
    agent: dict[str, Any] | None = None
    vuser: dict[str, Any] | None = None
    scorers: list[str] | None = None
    metric_scorers: list[str] | None = None
    scoring: dict[str, Any] | None = None
    sessions: list[SessionShape] | None = None
    summary_extra: SummaryExtraShape | None = None
    databases: dict[str, dict[str, Any]] | None = None
    merged_from: list[str] | None = None
    command: list[str] | None = None
    scorer_details: dict[str, Any] | None = None
    rescored_from: dict[str, Any] | None = None
    prices: dict[str, Any] | None = None


class RateShape(_Shape):
    rate: Number | None = None
    mean: Number | None = None
    ci: list[Number | None] | None = None
    passed: Count | None = None
    total: Count | None = None
    applicable: Count | None = None
    not_applicable: Count | None = None


class CompletenessShape(_Shape):
    reasons: list[str] | None = None
    cancelled: Count | None = None
    expected_items: Count | None = None
    conversations: Count | None = None
    missing: Count | None = None
    finished: bool | None = None


class SummaryShape(_Shape):
    """summary.json: the keys its readers use (``runs``, ``view``, ``compare``, the gates' ``--baseline``)."""

    run_id: Text = None
    total_items: Count | None = None
    complete: bool | None = None
    cancelled: bool | None = None
    completeness: CompletenessShape | None = None
    success: dict[str, RateShape | None] | None = None
    scorers: dict[str, dict[str, RateShape | None]] | None = None
    conversation: dict[str, Any] | None = None
    scoring: dict[str, Any] | None = None
    outcomes: dict[str, Count] | None = None
    infra_errors: Count | None = None
    invalid_items: dict[str, Any] | None = None
    official: dict[str, Number | None] | None = None
    cost: dict[str, Any] | None = None


def _first_error(exc: ValidationError) -> tuple[str, str]:
    """(the key path, what is wrong) of a validation's first error."""
    error = exc.errors(include_url=False)[0]
    message = str(error["msg"]).removeprefix("Value error, ")
    return ".".join(str(part) for part in error["loc"]), message


def _checked(model: type[_Shape], run_dir: Path, name: str, what: str, *, missing_ok: bool) -> dict[str, Any] | None:
    where = str(Path(run_dir) / name)
    if missing_ok and Path(run_dir).is_dir() and not os.path.lexists(where):
        return None
    data = read_json(run_dir, name)
    if not isinstance(data, dict):
        raise RunDirError(f"expected a JSON object ({what}), got {json_type(data)}", file=where)
    try:
        model.model_validate(data)
    except ValidationError as exc:
        key, message = _first_error(exc)
        raise RunDirError(f"{message} (in {what})", file=where, key=key) from None
    return data


def read_manifest(run_dir: Path, *, missing_ok: bool = False) -> dict[str, Any]:
    """``run_dir/manifest.json``, checked (:class:`ManifestShape`); ``{}`` when it does not exist
    and ``missing_ok``; anything else wrong is a :class:`RunDirError` naming the file and key."""
    return _checked(ManifestShape, run_dir, "manifest.json", "a run manifest", missing_ok=missing_ok) or {}


def summary_extra(manifest: dict[str, Any]) -> dict[str, Any]:
    """The run facts of a (checked) manifest that a summary rebuilt from the journal copies: only
    the keys of :class:`SummaryExtraShape` (another key could replace a computed one, e.g. ``scorers``)."""
    extra = manifest.get("summary_extra") or {}
    return {key: extra[key] for key in SummaryExtraShape.model_fields if key in extra}


def read_summary(run_dir: Path) -> dict[str, Any] | None:
    """``run_dir/summary.json``, checked (:class:`SummaryShape`); None when it does not exist
    (a run that did not finish)."""
    return _checked(SummaryShape, run_dir, "summary.json", "a run summary", missing_ok=True)

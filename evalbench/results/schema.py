"""The run record, typed: :class:`Manifest` (manifest.json), :class:`JournalRecord` (one line of
conversations.jsonl) and :class:`Summary` (summary.json).

These models are the schema of a run directory: the writers check what they write against them
(:mod:`evalbench.results.journal.rundir`, :mod:`evalbench.results.render.reports`), the readers
check what they read (:mod:`evalbench.results.journal.shapes`) and return them
(:mod:`evalbench.results.journal.typed`), ``evalbench results schema`` prints their JSON Schema
and docs/results_schema.md's tables are generated from them (:mod:`evalbench.results.schema_docs`).

They check types, and keep every other key (``extra="allow"``): the files hold more than a model
names (a plugin's scorer settings, an agent's own description). A value of the wrong type (a list
for an object, a string for a number, NaN, a count of 10**18) is refused where it is read.

Schema versions: 1 (up to evalbench 0.x of November 2026) and 2 (summary.json carries
``schema_version``; the three files are checked against these models when written). A version-1
file reads as version 2 (:func:`upgrade`); a newer version than :data:`SCHEMA_VERSION` is refused.
"""

from __future__ import annotations

import math
import re
from typing import Annotated, Any

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError

from evalbench.core.errors import EvalbenchError

SCHEMA_VERSION = 2  # written in manifest.json, each journal record and summary.json
READABLE_VERSIONS = (1, 2)
MAX_COUNT = 10**9  # items, conversations, rows: far above any real run, far below a loop that never ends
MAX_SHARDS = 10_000  # --workers and --shard i/n

JSONObject = dict[str, object]  # an object whose keys this schema leaves to its writer


class RunRecord(BaseModel):
    """A part of a run record: strict types, other keys kept."""

    model_config = ConfigDict(strict=True, extra="allow")


def _finite(value: float) -> float:
    if not math.isfinite(value):
        raise ValueError("a finite number")
    return value


def _shard(text: str) -> str:
    match = re.fullmatch(r"(\d{1,9})/(\d{1,9})", text)
    if match is None or not 1 <= int(match.group(1)) <= int(match.group(2)) <= MAX_SHARDS:
        raise ValueError(f"i/n with 1 <= i <= n <= {MAX_SHARDS}")
    return text


Count = Annotated[int, Field(ge=0, le=MAX_COUNT)]
Positive = Annotated[int, Field(ge=1, le=MAX_COUNT)]
Number = Annotated[float, AfterValidator(_finite)]
Tokens = Annotated[int, Field(ge=0, le=10**15)]  # a conversation's tokens of one role (10**15: no real run comes near)
Text = str | None
Shard = Annotated[str, AfterValidator(_shard)]


def doc(text: str, default: object = None) -> Any:  # as pydantic.Field: the default, typed as the field
    """A field's default and its meaning (docs/results_schema.md's tables are made of these)."""
    return Field(default, description=text)


# ------------------------------------------------------------------------------ journal record


class Usage(RunRecord):
    """The model calls of one role in a conversation (``usage.<role>``), or of one judge or virtual-user turn."""

    model: Text = doc("the model called")
    calls: Count = doc("responses received", 0)
    prompt: Tokens = doc("prompt tokens", 0)
    completion: Tokens = doc("completion tokens (thinking included)", 0)
    total: Tokens = doc("all tokens", 0)
    unreported: Count = doc("responses that reported no usage", 0)
    price: dict[str, Number] | None = doc("`input`, `output` in USD per 1M tokens used; `null`: the model has no price")
    cost_usd: Number | None = doc("`null`: the model has no price (its tokens are still counted); 0 when no token was spent")
    replayed: bool | None = doc("`true` for a role replayed from another run (`evalbench rescore`)")


class Score(RunRecord):
    value: Number | None = doc("1.0 / 0.0 for a pass/fail scorer, a number for a metric")
    passed: bool | None = doc("the verdict; `null` for a metric")
    applicable: bool = doc("whether the scorer applies to this phase", ...)
    detail: Text = doc("its one-line explanation", ...)
    flags: list[str] = doc("its flags (e.g. `ordered_equal`)", ...)
    usage: Usage | None = doc("the model calls of a scorer that called one (an LLM judge)")


class Execution(RunRecord):
    """What running one SQL returned (rows are not kept: their hash and first rows are)."""

    columns: list[str] | None = doc("column names")
    row_count: Count | None = doc("rows returned (up to `execution.max_rows`)")
    truncated: bool | None = doc("the result hit `execution.max_rows` or `execution.max_result_bytes`")
    elapsed_s: Number | None = doc("seconds the database took")
    error: Text = doc("the database's error")
    error_kind: Text = doc("`syntax`: the database could not parse it; `sql`: any other error of the SQL; `timeout`; `forbidden`: "
                         "a statement kind the mode does not allow; `connection`: the database failed; `preprocess`: the "
                         "item's preprocess SQL failed")
    rows_sha256: Text = doc("hash of every row")
    preview: list[list[object]] | None = doc("the first rows")
    preview_truncated: bool | None = doc("more rows than the preview")


class Attempt(RunRecord):
    sql: Text = doc("the SQL of an earlier attempt (debugging)")
    answer: Text = doc("its answer in words")
    scores: dict[str, bool | None] | None = doc("per scorer, its verdict")


class Phase(RunRecord):
    """One phase of a conversation: ``main``, then ``follow_up`` when it was reached."""

    phase: str = doc("`main` or `follow_up`", ...)
    question: Text = doc("the question asked (the ambiguous one for an ambiguous main phase)")
    outcome: Text = doc("how the phase ended")
    error: Text = doc("why it ended early, if it did")
    clarifications: Count | None = doc("questions the agent asked")
    clarification_budget: Count | None = doc("how many it could ask")
    debug_used: Count | None = doc("debugging rounds used")
    attempts: list[Attempt] | None = doc("the earlier attempts")
    sql: Text = doc("the agent's final SQL")
    answer: Text = doc("its answer in words (when it answered without SQL)")
    golden_sql: list[Text] | None = doc("the golden SQL (several: any matches)")
    golden_is_script: bool | None = doc("the golden SQL is a script, run in order")
    conditions: JSONObject | None = doc("comparison conditions: `order`, `distinct`, `decimal`")
    generated: Execution | None = doc("what the agent's SQL returned")
    golden: list[Execution | None] | None = doc("what each golden SQL returned")
    compared_sql: Text = doc("the SQL compared when a semantics cleaned it (BIRD-Interact); `null` otherwise")
    compared: Execution | None = doc("what the compared SQL returned")
    golden_run_sql: list[list[Text]] | None = doc("the golden SQL as run, when a semantics cleaned it")
    scores: dict[str, Score] = doc("per scorer", ...)
    primary: Text = doc("the scorer that gave the phase's verdict")
    passed: bool | None = doc("the phase's verdict (`null`: no pass/fail scorer applies)")


class Reply(RunRecord):
    kind: Text = doc("`sql`, `clarification`, `answer` or `error`")
    text: Text = doc("the reply's text")
    sql: Text = doc("the SQL it carried")
    tool_calls: list[JSONObject] | None = doc("`name`, `args`, `response`, `id` of each tool call (32 at most)")
    usage: dict[str, Tokens | None] | None = doc("tokens the agent reported")
    latency_s: Number | None = doc("seconds the reply took")
    error: Text = doc("what went wrong")
    error_kind: Text = doc("the kind of error")
    raw: object = doc("the agent's raw events or response, as it sent them (capped)")


class VUserTurn(RunRecord):
    action: Text = doc("what the virtual user chose (`labeled(\"…\")`, ...)")
    action_kind: Text = doc("the kind of action")
    text: Text = doc("its answer")
    error: Text = doc("what went wrong")
    audit: JSONObject | None = doc("the leak audit of the answer (`leaks`, ...)")
    usage: Usage | None = doc("its model calls; `null` for a virtual user that calls no model")


class Turn(RunRecord):
    index: Count | None = doc("0-based position")
    phase: Text = doc("the phase the turn belongs to")
    user_role: Text = doc("`user` (the dataset's question) or `vuser` (a clarification answer)")
    user_text: Text = doc("the text sent")
    reply: Reply | None = doc("the agent's reply")
    vuser: VUserTurn | None = doc("the virtual user's answer to this turn's clarification")


class Diagnosis(RunRecord):
    kind: str = doc("the failure kind (`sql_error`, `wrong_columns`, `missing_clarification`, ...)", ...)
    phase: Text = doc("the phase it is about")
    message: Text = doc("one line of evidence")
    flags: list[str] | None = doc("e.g. `vuser_leak`")


class JournalRecord(RunRecord):
    """One line of conversations.jsonl: a conversation, with its turns and the verdict of each phase."""

    schema_version: int | None = doc("the run schema's version")
    run_id: Text = doc("the run")
    item_id: str = doc("the item", ...)
    dialect: Text = doc("where it ran: the SQL dialect")
    database: Text = doc("and the database")
    trial: Positive | None = doc("1-based trial number (`trials: k`); absent in older runs, read as 1")
    category: Text = doc("the item's category (`Query`, `Management`, as the dataset says)")
    query_type: Text = doc("`dql`, `dml`, ... as the dataset says")
    difficulty: Text = doc("the item's difficulty")
    ambiguous: bool | None = doc("the opening question needs clarification")
    ambiguity_types: list[str] | None = doc("the kinds of its ambiguities")
    has_follow_up: bool | None = doc("the item has a follow-up question")
    source: Text = doc("`file:line` of the item")
    seed: int | None = doc("the conversation's own seed")
    outcome: str = doc("`scored`, `max_turns`, `agent_error`, `vuser_error`, `db_error`, `timeout`, `cancelled`, `invalid_item`", ...)
    error: Text = doc("why the conversation ended early, if it did")
    elapsed_s: Number | None = doc("wall clock")
    stage_seconds: dict[str, Number] | None = doc("seconds per stage (`prompt`, `generate`, `vuser`, `execute`, `score`)")
    sessions_opened: Count = doc("agent sessions opened (1 unless the agent was restarted)", 1)
    tokens: dict[str, Tokens] | None = doc("`prompt`, `completion`, `total` over every agent reply")
    usage: dict[str, Usage] | None = doc("the conversation's model calls per role: `agent` (always; `calls` counts its replies, each possibly several model "
                                           "calls), `vuser` (a virtual user that calls a model), `judge:<scorer>` (each scorer that called "
                                           "a model, over every phase and debugging attempt). Absent in journals written before it (readers "
                                           "then take the agent's `tokens`, unpriced)")
    cost_usd: Number | None = doc("the sum of the roles' `cost_usd`; `null` when one is unknown")
    reward: Number | None = doc("BIRD-Interact's reward (0.7 / 0.5 main, 0.3 / 0.2 follow-up)")
    invalid_phases: list[dict[str, str]] | None = doc("every phase of the item whose golden work cannot judge an answer, reached or not: "
                                                         "`phase`, `reason` (the first error of the validity checks, docs/scoring.md#invalid-items); "
                                                         "absent when none, and in older runs")
    leaks: Count | None = doc("virtual-user replies whose audit found a leak of the golden SQL")
    tools: dict[str, Count] | None = doc("discovery tool calls, errors and refusals")
    turns: list[Turn] = doc("the turns, in order", [])
    phases: list[Phase] = doc("`main`, then `follow_up` when it was reached", ...)
    simulator: JSONObject | None = doc("who played the user: `vuser`, `model`, prompt hashes")
    diagnosis: Diagnosis | None = doc("why the conversation failed, or `null` when it passed; computed from the record as "
                                         "written (`taxonomy.diagnose(record)`); older runs lack it, and readers compute it")
    record_truncated: bool | None = doc("`true` when tighter caps were applied to fit the record cap")
    tags: list[object] | JSONObject | str | None = doc("the item's tags, as the dataset gives them")
    other: JSONObject | None = doc("the item's other fields, as the dataset gives them")


# ------------------------------------------------------------------------------ manifest


class Subset(RunRecord):
    shard: Shard | None = doc("`i/n`: the shard this run holds")
    of: Count | None = doc("items of the whole dataset")
    shards: Annotated[int, Field(ge=1, le=MAX_SHARDS)] | None = doc("shards merged")
    merged_from: list[str] | None = doc("the shard runs merged")


class DatasetInfo(RunRecord):
    path: Text = doc("the dataset file")
    sha256: Text = doc("its hash")
    format: Text = doc("its format")
    items: Count | None = doc("the number of items the run should have")
    groups: dict[str, Count] | None = doc("items per `dialect/database`")
    record_errors: Count | None = doc("malformed records skipped")
    trials: Positive | None = doc("trials per item")
    subset: Subset | None = doc("the subset or shard run")


class ConfigSnapshot(RunRecord):
    """The keys of ``config`` read without the config model (``--resume``, ``compare``, configs.csv, ``rescore``)."""

    scorers: JSONObject | None = doc("the scorers' settings")
    trials: Positive | None = doc("trials per item")
    subset: JSONObject | None = doc("the subset")
    run_id: Text = doc("the run id asked for")
    reporting: JSONObject | None = doc("report settings")
    model_config_: JSONObject | str | None = Field(default=None, alias="model_config", description="the agent")
    vuser_model_config: JSONObject | None = doc("the virtual user")
    database_configs: list[object] | None = doc("the databases")


class Session(RunRecord):
    started_at: Text = doc("ISO 8601 UTC")
    finished_at: Text = doc("ISO 8601 UTC; absent: the process did not finish")
    command: list[str] | None = doc("its command line (secrets redacted)")
    resumed_with: Count | None = doc("conversations the journal held when it started")
    conversations: Count | None = doc("conversations it journaled")
    elapsed_s: Number | None = doc("its wall clock")
    cancelled: bool | None = doc("it was cancelled")
    shard: Text = doc("the shard it ran (`--workers`)")


class SummaryExtra(RunRecord):
    """The run facts a summary rebuilt from the journal copies (only these keys are copied)."""

    elapsed_s: Number | None = doc("wall clock of the run")
    conversations_per_s: Number | None = doc("throughput")
    dataset: JSONObject | None = doc("the dataset's path, format, item count, `filtered_out`")
    record_errors: list[str] | None = doc("malformed records skipped")
    databases: dict[str, JSONObject] | None = doc("how each database was set up")
    cancelled: bool | None = doc("the run was cancelled")
    sessions: Count | None = doc("processes that worked on the run")
    scoring: JSONObject | None = doc("semantics and primary verdicts")


class Manifest(RunRecord):
    """manifest.json: what was run. Written before the first item and again at the end."""

    schema_version: int | None = doc("the run schema's version; readers refuse a newer one")
    run_id: Text = doc("the run's id (`--run-id`, else a time stamp and the config's name)")
    created_at: Text = doc("ISO 8601 UTC")
    evalbench_version: Text = doc("the harness that ran")
    git_sha: Text = doc("its git commit when run from a checkout")
    python: Text = doc("the interpreter's version")
    platform: Text = doc("the OS")
    packages: dict[str, Text] | None = doc("versions of the key packages")
    command: list[str] | None = doc("the command line (`--set` values redacted)")
    config_file: Text = doc("the config file")
    config: ConfigSnapshot | None = doc("the resolved config (every key, defaults included)")
    config_fingerprint: Text = doc("hash of what decides the results; `--resume` refuses a different one")
    seed: int | None = doc("the run seed; each conversation's seed derives from it")
    dataset: DatasetInfo | None = doc("the dataset")
    agent: JSONObject | None = doc("the agent's own description: `agent`, `model` when it has one, its settings")
    vuser: JSONObject | None = doc("the virtual user: `vuser`, `model`, prompt hashes, `patience`, ...")
    scorers: list[str] | None = doc("the scorers run")
    metric_scorers: list[str] | None = doc("those that are metrics (no pass/fail verdict)")
    scoring: JSONObject | None = doc("comparison semantics, empty-golden rule and primary verdicts")
    scorer_details: JSONObject | None = doc("each scorer's settings")
    prices: JSONObject | None = doc("the price table the journal's costs were computed with: `currency`, `unit`, "
                                       "`defaults_as_of`, `source`, `models` (per model: `input`, `output` in USD per 1M tokens, "
                                       "`from`: `default` or `config`)")
    sessions: list[Session] | None = doc("one entry per process that worked on the run")
    databases: dict[str, JSONObject] | None = doc("per `dialect/database`: how it was set up (`action`, `checksum`, "
                                                     "`sandbox_user`, rows loaded, `warning`/`error`)")
    finished_at: Text = doc("ISO 8601 UTC; absent: the run did not finish")
    summary_extra: SummaryExtra | None = doc("run facts that `evalbench report` copies into a rebuilt summary")
    merged_from: list[str] | None = doc("`evalbench merge`: the runs merged")
    rescored_from: JSONObject | None = doc("`evalbench rescore`: the run rescored")


# ------------------------------------------------------------------------------ summary


class Rate(RunRecord):
    rate: Number | None = doc("the pass rate")
    mean: Number | None = doc("a metric's mean")
    ci: list[Number | None] | None = doc("its 95 % interval")
    passed: Count | None = doc("verdicts passed")
    total: Count | None = doc("verdicts given")
    applicable: Count | None = doc("phases the scorer applies to")
    not_applicable: Count | None = doc("phases it does not apply to")


class Completeness(RunRecord):
    reasons: list[str] | None = doc("why the run is not complete")
    cancelled: Count | None = doc("conversations cancelled")
    expected_items: Count | None = doc("conversations the run should have")
    conversations: Count | None = doc("conversations in the journal")
    missing: Count | None = doc("conversations missing")
    finished: bool | None = doc("the run finished")
    journal: dict[str, Count] | None = doc("`truncated_lines`, `unreadable_lines`, `duplicate_records` of the journal")


class Summary(RunRecord):
    """summary.json: the run's verdicts, rates and costs (``evalbench report`` rebuilds it from the journal)."""

    schema_version: int | None = doc("the run schema's version (absent in version 1)")
    total_items: Count | None = doc("conversations in the journal: the denominator of every rate")
    outcomes: dict[str, Count] | None = doc("conversations per outcome (every outcome, zeros included)")
    infra_errors: Count | None = doc("`db_error` + `vuser_error` conversations (gated by `--max-infra-errors`)")
    invalid_items: JSONObject | None = doc("`count` and `items` (`item_id`, `phase`, `reason`): each phase whose golden work cannot "
                                              "judge an answer, once, reached or not (kept out of every rate; the same list as "
                                              "`evalbench validate --json → invalid`)")
    empty_gold_judged: Count | None = doc("judged phases whose golden result was empty")
    primary_scorer: Text = doc("the headline scorer")
    primary: JSONObject | None = doc("per phase, how many verdicts each primary scorer gave")
    success: dict[str, Rate | None] | None = doc("per phase: `total`, `passed`, `rate`, `ci` (95 % percentile bootstrap "
                                                    "interval; with trials it resamples items) of each phase's own verdict — the headline is "
                                                    "`success.main`")
    scorers: dict[str, dict[str, Rate | None]] | None = doc("per scorer and phase: `applicable`, `passed`, `rate`, `ci`, `flags`")
    taxonomy: dict[str, Count] | None = doc("failed conversations per failure kind")
    taxonomy_flags: dict[str, Count] | None = doc("flag counts (`vuser_leak`)")
    slices: JSONObject | None = doc("per slice key (`database`, `dialect`, `category`, ...) and value: `total`, `passed`, `rate`, `ci`")
    conversation: JSONObject | None = doc("`turns`, `mean_turns`, `clarifications`, `follow_up_phases`, `sessions_opened`, "
                                             "`vuser_actions`, `vuser_replies`, `vuser_leaks`, `vuser_errors`, `mean_reward`, `agent_calls`, "
                                             "`mean_agent_latency_s`, `conversation_seconds`, `tokens`, `tools`")
    trials: JSONObject | None = doc("with `trials: k`: pass@k, pass^k and per-item consistency")
    cost: JSONObject | None = doc("what the run's model calls cost, from the journal's `usage`: `currency` (`USD`), `total_usd` "
                                     "(`null` when a role's cost is unknown), `priced_usd`, `mean_per_conversation_usd`, "
                                     "`conversations`, `without_usage`, `roles` (per role and model), and `spent_usd` in a "
                                     "rescored run. Invalid items count here (their calls were made)")
    official: dict[str, Number | None] | None = doc("`semantics: bird_interact` only: BIRD-Interact's own figures over every "
                                                         "conversation — `total`, `passed`, `success_rate`, `follow_up_passed`, `follow_up_rate`, "
                                                         "`mean_reward` (docs/scoring.md)")
    run_id: Text = doc("the run")
    elapsed_s: Number | None = doc("wall clock of the run")
    conversations_per_s: Number | None = doc("throughput")
    dataset: JSONObject | None = doc("the dataset's path, format, item count, `filtered_out`")
    record_errors: list[str] | None = doc("malformed records skipped")
    databases: dict[str, JSONObject] | None = doc("how each database was set up (as in the manifest)")
    cancelled: bool | None = doc("the run was cancelled")
    sessions: Count | None = doc("processes that worked on the run")
    scoring: JSONObject | None = doc("semantics and primary verdicts (as in the manifest)")
    complete: bool | None = doc("the journal holds every item of a finished run")
    completeness: Completeness | None = doc("`expected_items`, `conversations`, `missing`, `cancelled`, `finished`, `journal`, `reasons`")


MODELS: dict[str, type[RunRecord]] = {"manifest": Manifest, "journal": JournalRecord, "summary": Summary}


def upgrade(data: dict[str, object]) -> dict[str, object]:
    """A parsed file of any readable version, as version :data:`SCHEMA_VERSION` has it.

    Version 1 differs only in summary.json having no ``schema_version``: the same keys and types
    read the same. A newer version is a ``ValueError`` (this evalbench does not know its keys).
    """
    version = data.get("schema_version")
    version = 1 if version is None else version  # summaries of version 1 have none
    if type(version) is not int or version not in READABLE_VERSIONS:  # True == 1, 2.0 == 2: not versions
        raise ValueError(f"schema_version {version!r}: this evalbench reads versions "
                         f"{', '.join(map(str, READABLE_VERSIONS))} (a newer evalbench wrote it?)")
    return {**data, "schema_version": SCHEMA_VERSION}


class RecordRefused(EvalbenchError):
    """evalbench built a manifest, journal record or summary that its own run schema refuses (a bug
    in evalbench or in a plugin): the run stops (exit 3) naming the file and the key, rather than
    write what its readers would refuse."""


def check_written(model: type[RunRecord], data: dict[str, object], file: str) -> None:
    """Raise :class:`RecordRefused` unless ``data`` is a valid ``model`` (the writers call it on
    what they are about to write; the journal's writer logs it instead, see
    :meth:`~evalbench.results.journal.rundir.RunWriter.record`)."""
    try:
        model.model_validate(data)
    except ValidationError as exc:
        error = exc.errors(include_url=False)[0]
        key = ".".join(str(part) for part in error["loc"])
        raise RecordRefused(f"{file}: evalbench built a {model.__name__} its run schema refuses at {key}: "
                            f"{error['msg']} (a bug: please report it)") from None

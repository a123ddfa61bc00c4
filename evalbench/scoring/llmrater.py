"""``llmrater``: an LLM judge (a Gemini model through google-genai) decides whether the agent's
SQL answers the question, by majority of ``votes`` calls.

**Rule.** Not applicable to management tasks (``phase.is_query`` false). Failed without calling
the judge when the phase has no answer (an error or timeout outcome, no SQL, SQL that was not
run), when the generated SQL failed or its result was truncated at the row cap (the same checks
as ``set_match``: :func:`evalbench.scoring.result_match.comparable`), or when the item has no golden
SQL. Otherwise the judge is called ``votes`` times (k, odd); vote ``i`` (0-based) uses sampling
seed ``seed + i`` at temperature 0, so the k calls are not the same request. Each reply must be a
JSON object ``{"verdict": "correct" | "incorrect", "reason": "<string>"}`` with nothing else
(the request carries that response schema, with ``responseMimeType: application/json``). A vote
that fails — an HTTP error after retries, a blocked prompt, an empty reply, text that is not such
an object — counts as not correct. Passed when the correct votes are more than k / 2; value 1.0
or 0.0. The detail gives the count and the first reason on the winning side, e.g. ``2/3 votes
correct: <reason>``. Flags: ``split_vote`` when the answered votes disagree; ``judge_error``
when at least one vote failed. When every vote failed the score is 0.0, failed, detail
``llmrater: ...`` and flag ``judge_error``; :meth:`LlmRater.score` never raises.

**Prompt.** ``prompt_file`` (default ``prompts/llmrater.txt``) is sent as the single user message.
Its placeholders are replaced literally in one pass (other braces, e.g. a JSON example, are left
alone; a value that contains a placeholder is not expanded):

- ``{generated_sql}`` (required): the agent's SQL;
- ``{question}``: the phase's question as the user asked it (``phase.question``);
- ``{context}``: main phase of an ambiguous item — the fully specified question
  (``item.question``); follow-up phase — the main question it follows; otherwise empty;
- ``{golden_sql}``: the phase's golden SQL (several are numbered);
- ``{golden_results}`` and ``{generated_result}``: result previews (:func:`preview`): the row
  count, the columns and the first :data:`PREVIEW_ROWS` rows, each cell at most
  :data:`CELL_CHARS` characters, each preview at most :data:`PREVIEW_CHARS` characters (the
  golden previews together at most twice that); a failed golden SQL shows its error.

Each SQL is cut at :data:`SQL_CHARS` characters and the question at :data:`QUESTION_CHARS`.

**Calls.** The client is made when the scorer is built (:func:`evalbench.clients.genai.make_genai_client`:
API key from ``api_key_env``, or Vertex AI), so a missing key is a :class:`ConfigError` before the
run starts. A call that fails with 429, any 5xx, a connection error or a timeout is sent again after
:func:`~evalbench.clients.limits.backoff_delay` (``Retry-After`` honoured), up to ``max_retries``
times; the judge has no side effects. Malformed replies are not retried (at temperature 0 with the
same seed they would likely repeat). :meth:`LlmRater.describe` is what the run manifest records.
The score carries the token usage of every response the votes received (``Score.usage``),
which the journal reports as the role ``judge:<scorer name>``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import time
from dataclasses import dataclass, replace
from pathlib import Path

from pydantic import Field, ValidationError, field_validator

from evalbench.backends.base import ExecutionResult
from evalbench.clients.calls import CallFailed, truncate
from evalbench.clients.limits import CallLimiter, backoff_delay
from evalbench.config.agents import default_prompt
from evalbench.config.types import GenaiClientOptions, ResolvedPath
from evalbench.core import deadline
from evalbench.core.conversation import Conversation, Phase, PhaseRecord
from evalbench.core.json_types import JsonDict
from evalbench.core.usage import CallUsage
from evalbench.scoring import Score
from evalbench.scoring.options import config_error
from evalbench.scoring.result_match import comparable, compared_result

log = logging.getLogger(__name__)

NAME = "llmrater"
PROMPT = "llmrater.txt"
REQUIRED_PLACEHOLDER = "{generated_sql}"
PLACEHOLDERS = ("question", "context", "golden_sql", "golden_results", "generated_sql", "generated_result")
TEMPERATURE = 0.0
VERDICTS = ("correct", "incorrect")

PREVIEW_ROWS = 20  # rows of a result shown to the judge
PREVIEW_CHARS = 3_000  # characters of one result preview
CELL_CHARS = 80  # characters of one cell
SQL_CHARS = 4_000  # characters of one SQL statement
QUESTION_CHARS = 4_000
REASON_KEPT = 500  # characters of the judge's reason kept in the detail
ERROR_KEPT = 300  # characters of a failed vote's error kept in the detail

# The response schema of every call (REST form: an OpenAPI subset, as google-genai's types.Schema).
RESPONSE_SCHEMA: JsonDict = {
    "type": "OBJECT",
    "properties": {
        "verdict": {"type": "STRING", "enum": list(VERDICTS), "description": "whether the SQL answers the question"},
        "reason": {"type": "STRING", "description": "one or two sentences saying why"},
    },
    "required": ["verdict", "reason"],
    "property_ordering": ["verdict", "reason"],
}


# --------------------------------------------------------------------------- options


class LlmRaterOptions(GenaiClientOptions):
    """Options of ``scorers: {llmrater: {...}}``; the client settings mirror the gemini agent's."""

    model: str = Field(alias="vertex_model", min_length=1, description="the Gemini model of the judge")
    votes: int = Field(1, ge=1, strict=True, description="judge calls per phase (odd): the majority decides")
    seed: int = Field(0, strict=True, description="sampling seed of the first vote; vote i uses seed + i")
    prompt_file: ResolvedPath | None = Field(None, description="judge prompt template (default: prompts/llmrater.txt)")
    timeout_s: float = Field(60.0, gt=0, description="time one judge call may take")
    max_retries: int = Field(4, ge=0, strict=True,
                             description="retries of a call that failed with 429, 5xx, a connection error or a timeout")
    backoff_s: float = Field(0.5, gt=0, description="first backoff; doubles each retry, with full jitter")
    max_backoff_s: float = Field(30.0, gt=0, description="cap of one backoff (Retry-After is honoured up to this)")
    execs_per_minute: float | None = Field(None, gt=0, description="rate limit of judge calls")
    max_concurrency: int | None = Field(None, ge=1, description="judge calls in flight at once")

    @field_validator("votes")
    @classmethod
    def _odd(cls, value: int) -> int:
        if value % 2 == 0:
            raise ValueError(f"votes must be odd (a majority of k calls decides), got {value}")
        return value


_FIELD_OF_ALIAS = {f.alias: name for name, f in LlmRaterOptions.model_fields.items() if f.alias}


def parse_options(options: object) -> LlmRaterOptions:
    """The validated options; a :class:`ConfigError` naming ``scorers.llmrater.<option>`` otherwise."""
    if options is None:
        options = {}
    if not isinstance(options, dict):
        raise config_error(NAME, f"options must be a mapping (model: ..., votes: ...), got {options!r}")
    try:
        return LlmRaterOptions.model_validate(options)
    except ValidationError as exc:
        error = exc.errors()[0]
        loc = error.get("loc") or ()
        option = str(loc[0]) if loc else None
        option = _FIELD_OF_ALIAS.get(option, option) if option else None
        if error["type"] == "extra_forbidden" and option in LlmRaterOptions.model_fields:
            alias = LlmRaterOptions.model_fields[option].alias
            message = f"option {option!r} is given twice (as {option!r} and as {alias!r})"
        elif error["type"] == "extra_forbidden":
            known = ", ".join(LlmRaterOptions.model_fields)
            message = f"unknown option {option!r} (options: {known})"
        elif error["type"] == "missing":
            message = f"option {option!r} is required"
        else:
            message = f"option {option!r}: {error['msg']}, got {error.get('input')!r}"
        raise config_error(NAME, message, option) from None


def load_prompt(path: Path | None, default: str = PROMPT, required: str = REQUIRED_PLACEHOLDER,
                scorer: str = NAME) -> tuple[Path, str, str]:
    """(path, template, sha256 of the file's bytes) of the judge prompt."""
    path = path or default_prompt(default)
    try:
        data = path.read_bytes()
        text = data.decode("utf-8-sig")  # a BOM is accepted
    except (OSError, UnicodeDecodeError) as exc:
        raise config_error(scorer, f"cannot read the prompt {path}: {exc}", "prompt_file") from None
    if required not in text:
        raise config_error(scorer, f"the prompt {path} lacks the placeholder {required}", "prompt_file")
    return path, text, hashlib.sha256(data).hexdigest()


# --------------------------------------------------------------------------- the prompt


def render(template: str, values: dict[str, str]) -> str:
    """``template`` with each ``{name}`` of ``values`` replaced in one pass (a value holding a
    placeholder is inserted as it is; other braces are left alone)."""
    pattern = re.compile("|".join(re.escape("{" + name + "}") for name in values))
    return pattern.sub(lambda m: values[m.group(0)[1:-1]], template)


def _cell(value: object) -> str:
    text = "NULL" if value is None else str(value)
    text = text.replace("\r", "\\r").replace("\n", "\\n")
    return text if len(text) <= CELL_CHARS else text[:CELL_CHARS] + "…"


def preview(result: ExecutionResult | None) -> str:
    """What the judge sees of a result: row count, columns and the first rows, bounded."""
    if result is None:
        return "(not run)"
    if result.error is not None:
        return f"(the query failed: {truncate(result.error, ERROR_KEPT)})"
    count = result.row_count
    if result.truncated:
        head = f"at least {count} rows (cut at the row cap)"
    else:
        head = f"{count} row" + ("" if count == 1 else "s")
    width = len(result.columns)
    lines = [f"{head}; {width} column{'' if width == 1 else 's'}: " + ", ".join(_cell(c) for c in result.columns)]
    if result.rows:
        lines.append(" | ".join(_cell(c) for c in result.columns))
        lines.extend(" | ".join(_cell(v) for v in row) for row in result.rows[:PREVIEW_ROWS])
        if count > PREVIEW_ROWS:
            lines.append(f"(the first {PREVIEW_ROWS} of {count} rows are shown)")
    return truncate("\n".join(lines), PREVIEW_CHARS) or ""


def prompt_values(conversation: Conversation, phase: PhaseRecord) -> dict[str, str]:
    item = conversation.item
    context = ""
    if phase.phase is Phase.FOLLOW_UP:
        context = ("\nThis question follows up an earlier question of the user, which was answered before:\n"
                   f"<earlier_question>\n{truncate(item.question, QUESTION_CHARS)}\n</earlier_question>\n")
    elif item.question.strip() != phase.question.strip():
        context = ("\nThe question was vague; the user explained what they meant when asked. Stated precisely:\n"
                   f"<precise_question>\n{truncate(item.question, QUESTION_CHARS)}\n</precise_question>\n")
    goldens = [sql for sql in phase.golden_sql if isinstance(sql, str)]
    numbered = len(goldens) > 1
    sql_parts, result_parts = [], []
    for i, sql in enumerate(goldens):
        label = f"-- correct query #{i + 1}\n" if numbered else ""
        sql_parts.append(label + (truncate(sql.strip(), SQL_CHARS) or ""))
        result = phase.golden[i] if i < len(phase.golden) else None
        result_parts.append((f"correct query #{i + 1}: " if numbered else "") + preview(result))
    return {
        "question": truncate(phase.question, QUESTION_CHARS) or "",
        "context": context,
        "golden_sql": "\n\n".join(sql_parts),
        "golden_results": truncate("\n\n".join(result_parts), 2 * PREVIEW_CHARS) or "",
        "generated_sql": truncate((phase.sql or "").strip(), SQL_CHARS) or "",
        "generated_result": preview(compared_result(phase)),
    }


# --------------------------------------------------------------------------- verdicts


class InvalidVerdict(ValueError):
    """A judge reply that is not ``{"verdict": "correct" | "incorrect", "reason": "..."}``."""


def parse_verdict(text: str) -> tuple[str, str]:
    """(verdict, reason) of a judge reply, read strictly; raises :class:`InvalidVerdict`."""
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidVerdict(f"not JSON ({exc.msg} at character {exc.pos}): {truncate(text, 200)}") from None
    if not isinstance(data, dict):
        raise InvalidVerdict(f"not a JSON object: {truncate(text, 200)}")
    extra = sorted(set(data) - {"verdict", "reason"})
    if extra:
        raise InvalidVerdict(f"unexpected keys {', '.join(extra)}")
    verdict, reason = data.get("verdict"), data.get("reason")
    if verdict not in VERDICTS:
        raise InvalidVerdict(f"verdict must be \"correct\" or \"incorrect\", got {verdict!r}")
    if not isinstance(reason, str):
        raise InvalidVerdict(f"reason must be a string, got {reason!r}")
    return verdict, reason.strip()


@dataclass(frozen=True)
class Vote:
    """One judge call's outcome: a verdict and its reason, or an error."""

    verdict: str | None = None
    reason: str = ""
    error: str | None = None


def tally(votes: list[Vote]) -> Score:
    """The majority of ``votes`` as a score (rule in the module docstring)."""
    k = len(votes)
    answered = [v for v in votes if v.error is None]
    failed = [v for v in votes if v.error is not None]
    if not answered:
        return Score(0.0, False, detail=f"llmrater: {k}/{k} votes failed: {failed[0].error}", flags=("judge_error",))
    correct = sum(1 for v in answered if v.verdict == "correct")
    passed = correct > k / 2
    side = "correct" if passed else "incorrect"
    reason = next((v.reason for v in answered if v.verdict == side), None)
    if reason is None:  # failed only because votes failed
        reason = "too few votes answered"
    detail = f"{correct}/{k} votes correct"
    if failed:
        detail += f" ({len(failed)} failed: {failed[0].error})"
    detail += f": {truncate(reason, REASON_KEPT) or '(no reason given)'}"
    flags: list[str] = []
    if 0 < correct < len(answered):
        flags.append("split_vote")
    if failed:
        flags.append("judge_error")
    return Score(1.0 if passed else 0.0, passed, detail=detail, flags=tuple(flags))


def _retryable(failure: CallFailed) -> bool:
    return failure.retryable or failure.kind in ("timeout", "connection") or re.fullmatch(r"http_5\d\d", failure.kind) is not None


# --------------------------------------------------------------------------- the scorer


class LlmRater:
    """An LLM judge of the agent's SQL and result against the golden SQL and result; the exact
    rule, prompt placeholders and retries are in the module docstring (and docs/scoring.md)."""

    name = NAME
    is_metric = False
    prompt_name, required_placeholder, config_key = PROMPT, REQUIRED_PLACEHOLDER, f"scorers.{NAME}"

    def __init__(self, options: object) -> None:
        from google.genai import types

        from evalbench.clients.genai import make_genai_client

        self.options = parse_options(options)
        self.prompt_path, self.template, self.prompt_sha256 = load_prompt(
            self.options.prompt_file, self.prompt_name, self.required_placeholder, self.config_key.split(".", 1)[1])
        made = make_genai_client(self.options, who=f"{self.config_key} judge", config_key=self.config_key)
        self.client, self.project, self.location = made.client, made.project, made.location
        self.limiter = CallLimiter(self.options.execs_per_minute, self.options.max_concurrency)
        self.rng = random.Random(self.options.seed)  # backoff jitter only
        self.generation = [
            types.GenerateContentConfig(
                temperature=TEMPERATURE,
                seed=self.options.seed + i,
                response_mime_type="application/json",
                response_schema=types.Schema.model_validate(RESPONSE_SCHEMA),
            )
            for i in range(self.options.votes)
        ]

    @property
    def endpoint(self) -> str | None:
        from evalbench.core.redaction import redact_url

        return redact_url(self.options.base_url) if self.options.base_url else None

    def describe(self) -> JsonDict:
        """What the run manifest records about the judge."""
        o = self.options
        return {
            "scorer": NAME, "model": o.model, "prompt_file": str(self.prompt_path), "prompt_sha256": self.prompt_sha256,
            "votes": o.votes, "seed": o.seed, "temperature": 0, "base_url": self.endpoint, "vertexai": o.vertexai,
            "project": self.project, "location": self.location, "timeout_s": o.timeout_s, "max_retries": o.max_retries,
        }

    def close(self) -> None:
        self.client.close()

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        verdict = comparable(phase)
        if verdict is not None:
            return verdict
        if not any(isinstance(sql, str) and sql.strip() for sql in phase.golden_sql):
            return Score(0.0, False, detail="no golden SQL to judge against")
        return self.judge(conversation, prompt_values(conversation, phase))

    def judge(self, conversation: Conversation, values: dict[str, str]) -> Score:
        """The votes on the prompt rendered with ``values``, as a score carrying the token usage
        of every response (retries and malformed replies included); never raises."""
        usage = CallUsage(model=self.options.model)
        try:
            prompt = render(self.template, values)
            return replace(tally([self._vote(prompt, i, usage) for i in range(self.options.votes)]), usage=usage)
        except Exception as exc:  # a bug: still a score, never raised into the pipeline
            log.warning("%s: item %s: judging failed", self.config_key, conversation.item.id, exc_info=True)
            return Score(0.0, False, detail=f"llmrater: {type(exc).__name__}: {exc}", flags=("judge_error",), usage=usage)

    def _vote(self, prompt: str, index: int, usage: CallUsage) -> Vote:
        """One judge call (with retries) as a vote, each response counted in ``usage``; never
        raises :class:`CallFailed`."""
        o = self.options
        for attempt in range(o.max_retries + 1):
            try:
                with self.limiter.slot():
                    try:
                        text = self._call(prompt, index, usage)
                    except CallFailed as exc:
                        failure = exc
                    else:
                        try:
                            verdict, reason = parse_verdict(text)
                        except InvalidVerdict as exc:
                            return Vote(error=f"malformed verdict: {truncate(str(exc), ERROR_KEPT)}")
                        return Vote(verdict, reason)
            except deadline.Expired as exc:  # waiting for the limiter took the whole deadline
                return Vote(error=truncate(str(exc), ERROR_KEPT))
            retryable = _retryable(failure)
            if not retryable or attempt == o.max_retries or deadline.passed():
                suffix = f" (after {attempt + 1} attempts)" if retryable else ""
                return Vote(error=truncate(f"{failure}{suffix}", ERROR_KEPT))
            delay = backoff_delay(attempt, o.backoff_s, o.max_backoff_s, failure.retry_after, self.rng)
            log.info("llmrater: %s; retrying in %.2f s", failure, delay)
            time.sleep(delay)
        raise AssertionError("unreachable")

    def _call(self, prompt: str, index: int, usage: CallUsage) -> str:
        """One generate_content call, its response counted in ``usage``: the reply's text.
        Raises :class:`CallFailed`."""
        from google.genai import types

        from evalbench.clients.genai import count_call, generate, response_text

        contents = [types.Content(role="user", parts=[types.Part(text=prompt)])]
        response = generate(self.client, self.options.model, contents, self.generation[index],
                            endpoint=self.endpoint, timeout_s=self.options.timeout_s)
        count_call(usage, response)
        return response_text(response, empty="empty reply")

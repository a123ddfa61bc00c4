"""The journal record of one completed conversation: the contract other tools read.

One JSON object per line of ``conversations.jsonl``, versioned by ``schema_version``.
Results keep their row counts, columns, errors, a hash of all their rows and a short preview,
never the full rows.

Every record is made safe and bounded here, where it is built, before anything serializes it
(the journal, and every report derived from the in-memory record):

- **Text.** Lone surrogates (text decoded with ``surrogateescape`` from invalid UTF-8, or a
  ``"\\ud800"`` escape) are replaced by U+FFFD; a valid surrogate pair becomes its character.
  NUL and other control characters are kept: JSON writes them as ``\\u0000`` escapes, so the
  journal is always valid UTF-8 JSON and reads back as written.
- **Caps** (UTF-8 bytes, :data:`CAPS`): each text, each result preview (per cell and in total),
  each agent reply's raw events and tool calls. A cut text ends with ``...[N more bytes]`` (the
  whole text, marker included, stays within its cap); a structured value over its cap (raw
  events, tool arguments or responses, a json cell) is replaced by the beginning of its JSON
  text, cut the same way; a preview cut by its caps says ``"preview_truncated": true``. A record
  still larger than ``CAPS.record`` is rebuilt with tighter caps, step by step (raw events first,
  then tool payloads, previews and texts), and says ``"record_truncated": true``.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import enum
import hashlib
import json
import math
import threading
from collections.abc import Iterable, Mapping, Sequence
from decimal import Decimal
from typing import Any, TypeVar, cast

from evalbench.core.conversation import AgentReply, Conversation, Outcome, Phase, PhaseRecord, ToolCall, Turn
from evalbench.core.execution_result import ExecutionResult
from evalbench.core.items import Item
from evalbench.core.redaction import scrub, scrub_value
from evalbench.core.scores import Score
from evalbench.results.schema import SCHEMA_VERSION
from evalbench.results.summary.taxonomy import diagnosis_field


@dataclasses.dataclass(frozen=True)
class Caps:
    """Byte caps (UTF-8) on what one journal record stores."""

    text: int = 16 * 1024  # any one text: SQL, agent and user text, questions, answers, errors
    cell: int = 1024  # one cell of a result preview
    preview: int = 8 * 1024  # one result preview, all its cells (rows are kept whole, in order)
    raw: int = 16 * 1024  # an agent reply's raw events
    tool_payload: int = 4 * 1024  # the arguments of one tool call, and its response
    tool_calls: int = 32  # tool calls kept per reply (the others are counted in tool_calls_omitted)
    record: int = 64 * 1024  # one record (journal line): above it, tighter caps are applied


CAPS = Caps()
_MEMO = threading.local()  # JSON texts of the raw values of the record being built (bounded_record)
MAX_TEXT = CAPS.text  # kept for readers of the old constant (now bytes, not characters)


def _tighter(caps: Caps) -> list[Caps]:
    """The caps tried, in order, until a record fits ``caps.record``."""
    def at_most(**limits: int) -> Caps:
        return dataclasses.replace(caps, **{k: min(getattr(caps, k), v) for k, v in limits.items()})

    return [
        caps,
        at_most(raw=2048, tool_payload=1024),
        at_most(raw=256, tool_payload=256, tool_calls=8, preview=2048, cell=256, text=4096),
        at_most(raw=0, tool_payload=0, tool_calls=4, preview=0, cell=0, text=1024),
        at_most(raw=0, tool_payload=0, tool_calls=0, preview=0, cell=0, text=256),
    ]


# --------------------------------------------------------------------------- text


def clean_text(text: str) -> str:
    """``text`` encodable as UTF-8: lone surrogates become U+FFFD (a valid pair, its character)."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


def _marker(omitted: int) -> str:
    return f"...[{omitted} more bytes]"


def clip_text(text: str, limit: int | None, total: int | None = None) -> str:
    """``text`` cleaned (:func:`clean_text`) and cut to ``limit`` UTF-8 bytes, the marker
    ``...[N more bytes]`` included (idempotent: a clipped text is not clipped again).
    ``total``: the text's size in bytes, when known."""
    if limit is None or len(text) * 4 <= limit:
        return clean_text(text)
    if total is None:
        total = len(text.encode("utf-8", "surrogatepass"))  # a lone surrogate counts 3 bytes, as U+FFFD
    if total <= limit:
        cleaned = clean_text(text)
        if len(cleaned.encode("utf-8")) <= limit:
            return cleaned
    # only the head is cleaned: at most ``limit`` code points are enough for ``limit`` bytes
    head = clean_text(text[:limit]).encode("utf-8")[:max(0, limit - len(_marker(total)))]
    kept = head.decode("utf-8", "ignore")  # never half a character
    return kept + _marker(max(0, total - len(kept.encode("utf-8"))))


def _clip(text: str | None, limit: int | None = MAX_TEXT) -> str | None:
    return None if text is None else clip_text(str(text), limit)


def _key(key: object) -> str | int | float | bool | None:
    if type(key) is str and len(key) <= 256 and key.isascii():  # the common key: nothing to clean or cut
        return key
    if isinstance(key, str):
        return clip_text(key, 1024)
    if key is None or isinstance(key, (bool, int, float)):
        return key  # json.dumps writes these keys itself
    return clip_text(str(key), 1024)


_T = TypeVar("_T")


def clean_value(value: _T) -> _T:
    """``value`` with every text in it (keys too) cleaned by :func:`clean_text`; containers keep
    their types and anything else is returned as it is (for summaries and manifests, which are
    not capped)."""
    return cast(_T, _clean(value))  # each container is rebuilt as its own type: the type is kept


def _clean(value: object) -> object:
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, dict):
        return {clean_text(k) if isinstance(k, str) else k: _clean(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_clean(v) for v in value]
    if isinstance(value, tuple):
        return tuple(_clean(v) for v in value)
    return value


MAX_DEPTH = 100  # levels of nesting a journaled value keeps (backends keep deeper results as text)
DEEP = "...[nested too deep]"


def plain(value: object, limit: int | None = None, depth: int = 0) -> Any:
    """A JSON-able copy of ``value``: texts cleaned and cut to ``limit`` bytes, dicts with string
    keys, tuples and sets as lists, enums by value, dataclasses as dicts, anything else as ``str``;
    a value nested deeper than :data:`MAX_DEPTH` (a hostile reply's) as a marker, never a RecursionError."""
    if depth > MAX_DEPTH:
        return DEEP
    # the exact built-in types first: a journal record is mostly these
    if type(value) is str:
        return clip_text(value, limit)
    if type(value) is dict:
        return {_key(k): plain(v, limit, depth + 1) for k, v in value.items()}
    if type(value) is list or type(value) is tuple:
        return [plain(v, limit, depth + 1) for v in value]
    if value is None or type(value) is int or type(value) is bool or type(value) is float:
        return value
    if isinstance(value, (bool, int)):
        return value
    if isinstance(value, str):
        return clip_text(value, limit)
    if isinstance(value, float):
        return value
    if isinstance(value, enum.Enum):
        return plain(value.value, limit, depth + 1)
    if isinstance(value, dict):
        return {_key(k): plain(v, limit, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [plain(v, limit, depth + 1) for v in value]
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (bytes, bytearray, memoryview)):
        return clip_text("\\x" + bytes(value).hex(), limit)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: plain(getattr(value, f.name), limit, depth + 1) for f in dataclasses.fields(value)}
    model_dump = getattr(value, "model_dump", None)  # pydantic models
    if callable(model_dump):
        try:
            return plain(model_dump(), limit, depth + 1)
        except Exception:  # noqa: BLE001 - a model that cannot dump itself is written as text
            pass
    return clip_text(str(value), limit)


def dumps(value: object) -> str:
    """The journal's JSON text of a :func:`plain` value (UTF-8 safe, NUL as ``\\u0000``)."""
    return json.dumps(value, ensure_ascii=False, default=str)


def _size(value: object) -> int:
    return len(dumps(value).encode("utf-8"))


def bounded(value: object, limit: int) -> tuple[object, bool]:
    """``value`` as :func:`plain` when its JSON fits ``limit`` bytes, else the beginning of its
    JSON text (or of the text itself) with the ``...[N more bytes]`` marker; and whether it was cut."""
    if value is None:
        return None, False
    if isinstance(value, str):
        clipped = clip_text(value, limit)
        return clipped, len(clipped) != len(value) or clipped != clean_text(value)
    memo: dict[int, tuple[str, int]] | None = getattr(_MEMO, "texts", None)  # set by bounded_record
    known = memo.get(id(value)) if memo is not None else None
    if known is None:
        try:  # measured first (in C): a huge value is never walked
            text = json.dumps(value, ensure_ascii=False, default=str)
        except (TypeError, ValueError, RecursionError):  # keys json cannot write, a circular value...
            text = dumps(plain(value))
        known = text, len(text.encode("utf-8", "surrogatepass"))
        if memo is not None:
            memo[id(value)] = known
    text, size = known
    if size <= limit:
        kept = plain(value)
        if kept == value or _size(kept) <= limit:  # equal: the same JSON, whose size is known
            return kept, False
    return clip_text(text, limit, size), True


# --------------------------------------------------------------------------- results


def _cell(value: object, limit: int | None) -> tuple[object, bool]:
    """One preview cell (a text, or a structured value whose JSON fits ``limit`` bytes, else the
    beginning of that JSON); and whether it was cut."""
    if isinstance(value, float):
        return (value if math.isfinite(value) else str(value)), False
    if isinstance(value, (dict, list, tuple)):
        return bounded(value, limit) if limit is not None else (plain(value), False)
    kept = plain(value, limit)
    if isinstance(kept, str) and limit is not None and len(kept) * 4 > limit:
        full = plain(value)
        return kept, kept != full
    return kept, False


def json_value(value: object, limit: int | None = CAPS.cell) -> object:
    """A JSON-able form of a database value for previews (a text, or the JSON of a structured
    value, cut to ``limit`` bytes)."""
    return _cell(value, limit)[0]


def _canonical(value: object, depth: int = 0) -> object:
    """One cell as hashed: JSON numbers, texts, booleans and nulls as they are; structured values
    recursively (past :data:`MAX_DEPTH`, a marker); any other type as ``{"$<type>": text}``."""
    if depth > MAX_DEPTH:
        return DEEP
    if value is None or isinstance(value, (bool, int, str)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else {"$float": repr(value)}
    if isinstance(value, dict):
        return {str(k): _canonical(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_canonical(v, depth + 1) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return {"$bytes": bytes(value).hex()}
    return _tagged(value)


def _tagged(value: object) -> dict[str, str]:
    """What :func:`_canonical` makes of a scalar JSON has no type for (dates, decimals)."""
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return {f"${type(value).__name__}": value.isoformat()}
    return {f"${type(value).__name__}": str(value)}


_ENCODE = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), sort_keys=True, allow_nan=False).encode
# rows of these exact types are encoded in C as they are (a non-finite float raises: the slow path)
_SCALARS = frozenset({int, str, type(None), bool, float, Decimal, dt.date, dt.datetime, dt.time})
_ENCODE_SCALARS = json.JSONEncoder(ensure_ascii=True, separators=(",", ":"), sort_keys=True, allow_nan=False,
                                   default=_tagged).encode


def _row_text(row: Iterable[object]) -> str:
    cells = row if isinstance(row, (tuple, list)) else list(row)
    if all(type(v) in _SCALARS for v in cells):
        try:
            return _ENCODE_SCALARS(cells)
        except ValueError:  # NaN or an infinity
            pass
    return _ENCODE([_canonical(v) for v in cells])


def rows_sha256(rows: Iterable[Iterable[object]]) -> str:
    """sha256 of every row, in order: each row's cells as a compact JSON array (ASCII, keys sorted,
    :func:`_canonical` cells) followed by a newline."""
    digest = hashlib.sha256()
    for row in rows:
        digest.update(_row_text(row).encode("ascii"))
        digest.update(b"\n")
    return digest.hexdigest()


def _preview(rows: Sequence[Sequence[object]], preview_rows: int, caps: Caps) -> tuple[list[list[object]], bool]:
    """The first ``preview_rows`` rows, cells cut to ``caps.cell`` and whole rows kept while the
    preview stays within ``caps.preview`` bytes; and whether the caps cut anything."""
    preview: list[list[object]] = []
    used, cut = 2, False  # the enclosing brackets
    for row in rows[:preview_rows]:
        cells = []
        for value in row:
            kept, cell_cut = _cell(value, caps.cell)
            cut = cut or cell_cut
            cells.append(kept)
        size = _size(cells) + 1
        if used + size > caps.preview:
            return preview, True
        used += size
        preview.append(cells)
    return preview, cut


def execution_record(result: ExecutionResult | None, preview_rows: int, caps: Caps = CAPS,
                     hashes: dict[int, str] | None = None) -> dict[str, object] | None:
    if result is None:
        return None
    if hashes is not None and id(result) in hashes:
        digest = hashes[id(result)]
    else:
        digest = rows_sha256(result.rows)
        if hashes is not None:
            hashes[id(result)] = digest
    preview, cut = _preview(result.rows, preview_rows, caps)
    return {
        "columns": [clip_text(str(c), 1024) for c in result.columns],
        "row_count": result.row_count,
        "truncated": result.truncated,
        "elapsed_s": round(result.elapsed_s, 6),
        "error": _clip(result.error, caps.text),
        "error_kind": result.error_kind,
        "rows_sha256": digest,  # of every row the database returned (up to execution.max_rows)
        "preview": preview,
        "preview_truncated": cut,  # the byte caps cut a cell or left out rows preview_rows would keep
    }


def _tool_call(call: object, caps: Caps) -> dict[str, object]:
    args: object
    response: object
    call_id: str | None
    if isinstance(call, ToolCall):
        name, args, response, call_id = call.name, call.args, call.response, call.id
    else:  # not a ToolCall: kept as a tool call with its text as arguments
        name, args, response, call_id = type(call).__name__, call, None, None
    record = {
        "name": _clip(name, 1024),
        "args": bounded(args, caps.tool_payload)[0],
        "response": bounded(response, caps.tool_payload)[0],
        "id": _clip(call_id, 1024),
    }
    if isinstance(call, ToolCall) and call.outcome is not None:  # run by the harness (a discovery tool)
        record |= {"outcome": _clip(call.outcome, 64), "latency_s": round(call.latency_s or 0.0, 6),
                   "result_bytes": call.result_bytes}
    return record


def tool_counts(conv: Conversation) -> dict[str, int] | None:
    """Discovery tool calls the harness ran for the conversation (calls, errors, calls refused
    over the budget), counted before any cap drops a call from the record; None without any."""
    counts = {"calls": 0, "errors": 0, "budget": 0}
    for turn in conv.turns:
        for call in turn.reply.tool_calls if turn.reply is not None else ():
            outcome = getattr(call, "outcome", None)
            if outcome is not None:
                counts["calls"] += 1
                counts["errors"] += outcome == "error"
                counts["budget"] += outcome == "budget"
    return counts if counts["calls"] else None


def reply_record(reply: AgentReply | None, caps: Caps = CAPS) -> dict[str, object] | None:
    if reply is None:
        return None
    calls = list(reply.tool_calls or [])
    record = {
        "kind": plain(reply.kind),
        "text": _clip(reply.text, caps.text),
        "sql": _clip(reply.sql, caps.text),
        "tool_calls": [_tool_call(call, caps) for call in calls[:caps.tool_calls]],
        "usage": plain(reply.usage),
        "latency_s": round(reply.latency_s, 6),
        "error": _clip(reply.error, caps.text),
        "error_kind": _clip(reply.error_kind, 1024),
        "raw": bounded(reply.raw, caps.raw)[0],
    }
    if len(calls) > caps.tool_calls:
        record["tool_calls_omitted"] = len(calls) - caps.tool_calls
    return record


def turn_record(turn: Turn, caps: Caps = CAPS) -> dict[str, object]:
    vuser = turn.vuser
    return {
        "index": turn.index,
        "phase": turn.phase.value,
        "user_role": _clip(turn.user_role, 1024),
        "user_text": _clip(turn.user_text, caps.text),
        "reply": reply_record(turn.reply, caps),
        "vuser": None
        if vuser is None
        else {
            "action": _clip(str(vuser.action), caps.text) if vuser.action else None,
            "action_kind": _clip(vuser.action.kind, 1024) if vuser.action else None,
            "text": _clip(vuser.text, caps.text),
            "error": _clip(vuser.error, caps.text),
            "audit": plain(vuser.audit, caps.text),
            "usage": plain(vuser.usage, 1024),  # the model calls of this reply (null: no model called)
        },
    }


def phase_record(phase: PhaseRecord, preview_rows: int, caps: Caps = CAPS,
                 hashes: dict[int, str] | None = None) -> dict[str, object]:
    def clip(text: str | None) -> str | None:
        return _clip(text, caps.text)

    def execution(result: ExecutionResult | None) -> dict[str, object] | None:
        return execution_record(result, preview_rows, caps, hashes)

    return {
        "phase": phase.phase.value,
        "question": clip(phase.question),
        "outcome": phase.outcome.value if phase.outcome else None,
        "error": clip(phase.error),
        "clarifications": phase.clarifications,
        "clarification_budget": phase.clarification_budget,
        "debug_used": phase.debug_used,
        "attempts": plain(phase.attempts, caps.text),
        "sql": clip(phase.sql),
        "answer": clip(phase.answer),
        "golden_sql": [clip(sql) for sql in phase.golden_sql],
        "golden_is_script": phase.golden_is_script,
        "conditions": plain(phase.conditions.model_dump(), caps.text),
        "generated": execution(phase.generated),
        "golden": [execution(g) for g in phase.golden],
        # the SQL actually compared when it differs from what was written (bird_interact cleans it)
        "compared_sql": clip(phase.compared_sql),
        "compared": execution(phase.compared),
        "golden_run_sql": [[clip(sql) for sql in run] for run in phase.golden_run_sql]
        if _cleaned(phase) else None,
        "scores": {_key(name): _score(score, caps.text) for name, score in phase.scores.items()},
        # the phase's verdict: its primary scorer's (what success rates, flips and gates use)
        "primary": _clip(phase.primary, 1024),
        "passed": phase.passed if phase.primary is not None else None,  # None: no pass/fail scorer applies
    }


def _score(score: Score, limit: int) -> dict[str, object]:
    if type(score) is not Score:  # a plugin's subclass: every field it has
        fields = dataclasses.asdict(score)
    else:  # the fields by name (dataclasses.asdict deep-copies every value first: a sixth of a record's cost)
        fields = {"value": score.value, "passed": score.passed, "applicable": score.applicable, "detail": score.detail}
        if score.usage is not None:  # a judge's model calls
            fields["usage"] = score.usage
    kept: dict[str, object] = plain(fields | {"flags": list(score.flags)}, limit)
    return kept


def _cleaned(phase: PhaseRecord) -> bool:
    """The golden SQL was run in another form than the dataset wrote it."""
    written = [list(phase.golden_sql)] if phase.golden_is_script else [[sql] for sql in phase.golden_sql]
    return bool(phase.golden_run_sql) and phase.golden_run_sql != written


def ambiguity_types(item: Item) -> list[str]:
    """The kinds of ambiguity the item's opening question has, for slicing: the annotated type
    (``semantic_ambiguity``, ...) of each critical ambiguity, ``knowledge`` for deleted knowledge."""
    types = {a.type or a.kind if a.kind == "critical" else "knowledge" for a in item.ambiguities if a.kind != "non_critical"}
    return sorted(types)


# BIRD-Interact's reward of a solved phase: (first try, after debugging).
REWARDS = {Phase.MAIN: (0.7, 0.5), Phase.FOLLOW_UP: (0.3, 0.2)}


def reward(conv: Conversation) -> float:
    """BIRD-Interact's reward of a conversation, from each phase's primary verdict."""
    total = 0.0
    for phase in conv.phases:
        if phase.outcome is Outcome.SCORED and phase.passed:
            first, debugged = REWARDS[phase.phase]
            total += debugged if phase.debug_used else first
    return round(total, 4)


def _build(conv: Conversation, run_id: str, preview_rows: int, caps: Caps, hashes: dict[int, str]) -> dict[str, object]:
    item = conv.item
    usage = {"prompt": 0, "completion": 0, "total": 0}
    for turn in conv.turns:
        if turn.reply is not None:
            usage["prompt"] += turn.reply.usage.prompt
            usage["completion"] += turn.reply.usage.completion
            usage["total"] += turn.reply.usage.total
    # every text of the record's own fields (item fields, ids...) is cleaned and capped; the
    # turns and phases are built clean (each of their texts is cut where it is read)
    record: dict[str, object] = plain({
        "schema_version": SCHEMA_VERSION,
        "run_id": run_id,
        "item_id": item.id,
        "dialect": item.dialect,
        "database": item.database,
        "category": item.category,
        "query_type": item.query_type,
        "difficulty": item.difficulty,
        "ambiguous": item.needs_clarification,
        "ambiguity_types": ambiguity_types(item),
        "has_follow_up": item.follow_up is not None,
        "source": item.source,
        "trial": conv.trial,
        "seed": conv.seed,
        "outcome": conv.outcome.value if conv.outcome else None,
        "error": _clip(conv.error, caps.text),
        "elapsed_s": round(conv.elapsed_s, 6),
        "sessions_opened": conv.sessions_opened,
        "stage_seconds": {k: round(v, 6) for k, v in conv.stage_seconds.items()},
        "tokens": usage,
        "reward": reward(conv),
        "leaks": sum(1 for t in conv.turns if t.vuser is not None and t.vuser.audit.get("leaks")),
    }, caps.text)
    tools = tool_counts(conv)
    if tools is not None:
        record["tools"] = tools
    if conv.invalid_phases:  # every phase whose golden work cannot judge, reached or not
        record["invalid_phases"] = [{"phase": phase, "reason": _clip(reason, caps.text)}
                                    for phase, reason in conv.invalid_phases.items()]
    record["turns"] = [turn_record(t, caps) for t in conv.turns]
    record["phases"] = [phase_record(p, preview_rows, caps, hashes) for p in conv.phases]
    return record


def bounded_record(conv: Conversation, run_id: str, preview_rows: int = 5, *, extra: Mapping[str, object] | None = None,
                   caps: Caps = CAPS) -> tuple[dict[str, object], str]:
    """The record of ``conv`` (with ``extra`` fields) within ``caps``, and its journal line (JSON,
    no newline). Above ``caps.record`` bytes the record is rebuilt with tighter caps, step by
    step; the last step is kept whatever its size (a conversation of very many turns)."""
    hashes: dict[int, str] = {}  # each result is hashed once, whatever the number of steps
    _MEMO.texts = {}  # and each raw value serialized once (the conversation holds them: ids are stable)
    try:
        extra_fields: dict[str, object] = plain(extra or {}, caps.text)
        steps = _tighter(caps)
        for step, step_caps in enumerate(steps):
            record = _build(conv, run_id, preview_rows, step_caps, hashes) | extra_fields
            if step:
                record["record_truncated"] = True
            # why it failed, from the record as written (so it equals diagnose() of the journal line)
            record["diagnosis"] = diagnosis_field(record)
            line = dumps(record)
            if len(line.encode("utf-8")) <= caps.record or step == len(steps) - 1:
                return _without_secrets(record, line)
        raise AssertionError("unreachable")
    finally:
        _MEMO.texts = None


def _without_secrets(record: dict[str, object], line: str) -> tuple[dict[str, object], str]:
    """The record with the secrets this process knows (an agent that echoes its API key, an error
    quoting a URL's token) replaced by ``***`` — rare, so the line is rebuilt only then."""
    if scrub(line) == line:
        return record, line
    record = scrub_value(record)
    return record, dumps(record)


def conversation_record(conv: Conversation, run_id: str, preview_rows: int = 5, caps: Caps = CAPS) -> dict[str, object]:
    """The journal record of ``conv`` (see :func:`bounded_record`)."""
    return bounded_record(conv, run_id, preview_rows, caps=caps)[0]

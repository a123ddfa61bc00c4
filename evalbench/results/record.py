"""The journal record of one completed conversation: the contract other tools read.

One JSON object per line of ``conversations.jsonl``, versioned by ``schema_version``.
Results keep their row counts, columns, errors and a short preview, never the full rows.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import math
from decimal import Decimal
from typing import Any

from evalbench.conversation import AgentReply, Conversation, Outcome, Phase, PhaseRecord, Turn
from evalbench.db.sandbox import ExecutionResult

SCHEMA_VERSION = 1
MAX_TEXT = 20_000  # characters of any one text kept in the journal


def json_value(value: Any) -> Any:
    """A JSON-able form of a database value for previews."""
    if value is None or isinstance(value, (str, bool, int)):
        return value[:MAX_TEXT] if isinstance(value, str) else value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return float(value) if value.is_finite() else str(value)
    if isinstance(value, (dt.date, dt.datetime, dt.time)):
        return value.isoformat()
    if isinstance(value, (dict, list)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return "\\x" + bytes(value).hex()[:200]
    return str(value)


def _clip(text: str | None) -> str | None:
    if text is None or len(text) <= MAX_TEXT:
        return text
    return text[:MAX_TEXT] + f"... [{len(text) - MAX_TEXT} more characters]"


def execution_record(result: ExecutionResult | None, preview_rows: int) -> dict[str, Any] | None:
    if result is None:
        return None
    return {
        "columns": result.columns,
        "row_count": result.row_count,
        "truncated": result.truncated,
        "elapsed_s": round(result.elapsed_s, 6),
        "error": _clip(result.error),
        "error_kind": result.error_kind,
        "preview": [[json_value(v) for v in row] for row in result.rows[:preview_rows]],
    }


def reply_record(reply: AgentReply | None) -> dict[str, Any] | None:
    if reply is None:
        return None
    return {
        "kind": reply.kind.value,
        "text": _clip(reply.text),
        "sql": _clip(reply.sql),
        "tool_calls": [dataclasses.asdict(call) for call in reply.tool_calls],
        "usage": dataclasses.asdict(reply.usage),
        "latency_s": round(reply.latency_s, 6),
        "error": _clip(reply.error),
        "error_kind": reply.error_kind,
        "raw": reply.raw,
    }


def turn_record(turn: Turn) -> dict[str, Any]:
    vuser = turn.vuser
    return {
        "index": turn.index,
        "phase": turn.phase.value,
        "user_role": turn.user_role,
        "user_text": _clip(turn.user_text),
        "reply": reply_record(turn.reply),
        "vuser": None
        if vuser is None
        else {
            "action": str(vuser.action) if vuser.action else None,
            "action_kind": vuser.action.kind if vuser.action else None,
            "text": _clip(vuser.text),
            "error": vuser.error,
            "audit": vuser.audit,
        },
    }


def phase_record(phase: PhaseRecord, preview_rows: int) -> dict[str, Any]:
    return {
        "phase": phase.phase.value,
        "question": phase.question,
        "outcome": phase.outcome.value if phase.outcome else None,
        "error": _clip(phase.error),
        "clarifications": phase.clarifications,
        "clarification_budget": phase.clarification_budget,
        "debug_used": phase.debug_used,
        "attempts": phase.attempts,
        "sql": _clip(phase.sql),
        "answer": _clip(phase.answer),
        "golden_sql": [_clip(sql) for sql in phase.golden_sql],
        "golden_is_script": phase.golden_is_script,
        "conditions": phase.conditions.model_dump(),
        "generated": execution_record(phase.generated, preview_rows),
        "golden": [execution_record(g, preview_rows) for g in phase.golden],
        # the SQL actually compared when it differs from what was written (bird_interact cleans it)
        "compared_sql": _clip(phase.compared_sql),
        "compared": execution_record(phase.compared, preview_rows),
        "golden_run_sql": [[_clip(sql) for sql in run] for run in phase.golden_run_sql]
        if _cleaned(phase) else None,
        "scores": {name: dataclasses.asdict(score) | {"flags": list(score.flags)} for name, score in phase.scores.items()},
        # the phase's verdict: its primary scorer's (what success rates, flips and gates use)
        "primary": phase.primary,
        "passed": phase.passed if phase.primary is not None else None,  # None: no pass/fail scorer applies
    }


def _cleaned(phase: PhaseRecord) -> bool:
    """The golden SQL was run in another form than the dataset wrote it."""
    written = [list(phase.golden_sql)] if phase.golden_is_script else [[sql] for sql in phase.golden_sql]
    return bool(phase.golden_run_sql) and phase.golden_run_sql != written


def ambiguity_types(item: Any) -> list[str]:
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


def conversation_record(conv: Conversation, run_id: str, preview_rows: int = 5) -> dict[str, Any]:
    item = conv.item
    usage = {"prompt": 0, "completion": 0, "total": 0}
    for turn in conv.turns:
        if turn.reply is not None:
            usage["prompt"] += turn.reply.usage.prompt
            usage["completion"] += turn.reply.usage.completion
            usage["total"] += turn.reply.usage.total
    return {
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
        "seed": conv.seed,
        "outcome": conv.outcome.value if conv.outcome else None,
        "error": _clip(conv.error),
        "elapsed_s": round(conv.elapsed_s, 6),
        "sessions_opened": conv.sessions_opened,
        "stage_seconds": {k: round(v, 6) for k, v in conv.stage_seconds.items()},
        "tokens": usage,
        "reward": reward(conv),
        "leaks": sum(1 for t in conv.turns if t.vuser is not None and t.vuser.audit.get("leaks")),
        "turns": [turn_record(t) for t in conv.turns],
        "phases": [phase_record(p, preview_rows) for p in conv.phases],
    }

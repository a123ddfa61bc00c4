"""Why a conversation failed: a closed failure taxonomy, decided from one journal record alone.

:func:`diagnose` reads a record of ``conversations.jsonl`` (no database, no config, no dataset)
and returns ``None`` when the conversation passed, else one :class:`Diagnosis`: a
:class:`FailureKind`, the phase it is about and a one-line message with the evidence (the SQL
error, ``generated 0 rows, golden 12``, the column counts and names, ...).

**Passed** means: the conversation's outcome is ``scored`` and, in every phase, the primary
verdict passed. A phase's primary verdict is the verdict of the ``primary`` scorer when it is
given and applicable to the phase, else of the scorer the phase record names as ``primary``,
else of the first applicable pass/fail scorer in the phase's scores (config order; metrics such
as ``turn_count`` have no verdict) — the same verdict that drives debugging, the follow-up and
the reward. A phase without any applicable verdict does not fail (nothing judged it).

**Precedence** — the first rule that applies wins. The diagnosis is always the agent's own
failure (or the harness's, or the dataset's); a virtual-user reply that leaked the answer is a
**flag** next to it (``vuser_leak``), never the diagnosis:

1. ``cancelled``: the run was cancelled while the conversation was in flight.
2. ``db_error``: the harness's database failed (lost connection, setup).
3. ``invalid_item``: the item's golden SQL cannot judge an answer (a dataset bug); such items
   are in no rate's denominator.
4. The first failing phase (``main``, then ``follow_up``); a phase fails when its outcome is not
   ``scored`` or its primary verdict is a failure:

   a. the phase ended early — its outcome names the kind: ``timeout``, ``agent_error``,
      ``vuser_error``, ``db_error``, ``cancelled``, ``max_turns``;
   b. ``other``: the deciding scorer itself crashed (``scorer error: ...``);
   c. ``wrong_answer``: the agent answered in words, was judged by ``answer_match``, and the
      answer does not give the golden result (or refuses);
   d. ``no_sql``: the agent replied without SQL (and its words were not what was judged);
   e. ``sql_error``: the agent's SQL failed (including a statement timeout);
   f. ``empty_gold``: the golden result is empty, so every answer fails (BIRD-Interact's rule,
      and ours with ``empty_gold: fail``; for ``state_match``, a golden statement that changes
      nothing);
   g. ``missing_clarification``: an ambiguous item's main phase answered without any question;
   h. ``needless_clarification``: a question asked in a phase that needs none (a clear main
      question, or a follow-up), and the answer then failed;
   i. the result comparison, generated vs the first golden result: ``empty_result`` (0 rows,
      the golden has some), ``wrong_columns`` (column count), ``wrong_row_count``,
      ``ordering_only`` (the same rows as a multiset in another order, from the scorer's
      ``order_only`` flag or complete previews), ``wrong_values`` (same shape, other values).
      Equality of the rows is decided by ``rows_sha256`` (every row, in order) when both results
      carry it — equal hashes: the results agree, and the verdict is explained by a later rule;
      previews are compared only when complete (every row kept, ``preview_truncated`` false):
      a partial preview never decides "agree" or "in another order", and gives no example;
   j. ``test_case_failed``: a management task's test case failed (its assertion or error is given);
   k. ``wrong_state``: a management task without test cases left the database in another state
      than its golden SQL (``state_match``);
   l. ``other``: nothing above explains the failing verdict; its scorer and detail are given.

5. A conversation whose outcome is not ``scored`` though no phase failed (a stage failed while
   scoring): the outcome's kind, with the conversation's error.

The journal record carries its diagnosis as its ``diagnosis`` field (:func:`diagnosis_field`,
computed when the record is written, from the record itself); evals.csv and scores_native.csv
carry its kind. :func:`record_diagnosis` reads the field, or computes it for older records.

Empty results are checked before columns on purpose: an empty result may carry no column names
(so ``exec_match`` reports a column count of 0), and "returned nothing" is the useful evidence.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any, TypedDict

from evalbench.core.json_types import obj, objs, seq


class FailureKind(str, Enum):
    """The closed set of reasons a conversation failed."""

    AGENT_ERROR = "agent_error"
    NO_SQL = "no_sql"
    SQL_ERROR = "sql_error"
    TIMEOUT = "timeout"
    EMPTY_RESULT = "empty_result"
    WRONG_ROW_COUNT = "wrong_row_count"
    WRONG_COLUMNS = "wrong_columns"
    WRONG_VALUES = "wrong_values"
    ORDERING_ONLY = "ordering_only"
    MAX_TURNS = "max_turns"
    NEEDLESS_CLARIFICATION = "needless_clarification"
    MISSING_CLARIFICATION = "missing_clarification"
    VUSER_ERROR = "vuser_error"
    TEST_CASE_FAILED = "test_case_failed"
    WRONG_STATE = "wrong_state"
    WRONG_ANSWER = "wrong_answer"
    EMPTY_GOLD = "empty_gold"
    DB_ERROR = "db_error"
    INVALID_ITEM = "invalid_item"
    CANCELLED = "cancelled"
    OTHER = "other"

    def __str__(self) -> str:
        return self.value


class DiagnosisDict(TypedDict):
    """A journal record's ``diagnosis`` field (:meth:`Diagnosis.as_dict`)."""

    kind: str
    phase: str
    message: str
    flags: list[str]


@dataclass(frozen=True)
class Diagnosis:
    """Why one conversation failed: the kind, the phase it is about, and the evidence."""

    kind: FailureKind
    phase: str  # "main" | "follow_up"
    message: str  # one line
    flags: tuple[str, ...] = ()  # e.g. ("vuser_leak",): worth knowing, not the cause

    def __str__(self) -> str:
        flags = f" [{', '.join(self.flags)}]" if self.flags else ""
        return f"{self.kind.value} — {self.message}{flags}"

    def as_dict(self) -> DiagnosisDict:
        """JSON-able form (for reports)."""
        return {"kind": self.kind.value, "phase": self.phase, "message": self.message, "flags": list(self.flags)}


# Outcomes (evalbench.core.conversation.Outcome values) that end a phase early, and their kind.
OUTCOME_KINDS: dict[str, FailureKind] = {
    "timeout": FailureKind.TIMEOUT,
    "agent_error": FailureKind.AGENT_ERROR,
    "vuser_error": FailureKind.VUSER_ERROR,
    "db_error": FailureKind.DB_ERROR,
    "cancelled": FailureKind.CANCELLED,
    "max_turns": FailureKind.MAX_TURNS,
}

MAX_MESSAGE = 300  # characters of a diagnosis message
_NAMES_SHOWN = 6  # column names listed in a message


# --------------------------------------------------------------------------- verdicts


def primary_verdict(phase: Mapping[str, object], primary: str | None = None) -> tuple[str, Mapping[str, object]] | None:
    """``(scorer, score)`` of the phase's primary verdict, or None when no scorer gave one."""
    scores = obj(phase.get("scores"))
    for name in (primary, phase.get("primary")):  # the given scorer, then the one the record names
        if not isinstance(name, str):  # none named (a key of another type names no score either)
            continue
        score = scores.get(name)
        if isinstance(score, Mapping) and score.get("applicable", True) and score.get("passed") is not None:
            return name, score
    for name, score in scores.items():
        if isinstance(score, Mapping) and score.get("applicable", True) and score.get("passed") is not None:
            return name, score
    return None


def phase_failed(phase: Mapping[str, object], primary: str | None = None) -> bool:
    """The phase ended early, or its primary verdict is a failure (a phase whose golden SQL is
    broken — ``invalid_item`` — judged nothing: it does not fail)."""
    outcome = phase.get("outcome")
    if outcome == "invalid_item":
        return False
    if outcome is not None and outcome != "scored":
        return True
    verdict = primary_verdict(phase, primary)
    return verdict is not None and verdict[1].get("passed") is False


def passed(record: Mapping[str, object], primary: str | None = None) -> bool:
    """The conversation scored and every phase's primary verdict passed."""
    if record.get("outcome") != "scored":
        return False
    return not any(phase_failed(p, primary) for p in objs(record.get("phases")))


# --------------------------------------------------------------------------- diagnose


def diagnose(record: Mapping[str, object], primary: str | None = None) -> Diagnosis | None:
    """Why the conversation of ``record`` failed (see the module docstring for the rules and
    their precedence); None when it passed."""
    if passed(record, primary):
        return None
    outcome = record.get("outcome")
    phases = objs(record.get("phases"))
    if outcome in ("cancelled", "db_error"):
        where = next((p for p in phases if p.get("outcome") in (outcome, None)), phases[-1] if phases else None)
        message = (where or {}).get("error") or record.get("error") or outcome
        if outcome == "cancelled":
            message = f"{message} after {len(seq(record.get('turns')))} turn(s)"
        return _make(OUTCOME_KINDS[str(outcome)], _phase_name(where), message)
    if outcome == "invalid_item":
        return _make(FailureKind.INVALID_ITEM, "main", record.get("error") or "the golden SQL cannot judge an answer")
    for phase in phases:
        if phase_failed(phase, primary):
            return _diagnose_phase(record, phase, primary)
    kind = OUTCOME_KINDS.get(str(outcome), FailureKind.OTHER)
    last = phases[-1] if phases else None
    return _make(kind, _phase_name(last), record.get("error") or f"conversation ended with outcome {outcome}")


def diagnosis_field(record: Mapping[str, object]) -> DiagnosisDict | None:
    """The journal record's ``diagnosis`` field: :meth:`Diagnosis.as_dict` of :func:`diagnose`
    (each phase's own primary verdict), or None when the conversation passed."""
    found = diagnose(record)
    return None if found is None else found.as_dict()


def record_diagnosis(record: Mapping[str, object]) -> Mapping[str, Any] | None:
    """A record's diagnosis as its ``diagnosis`` field holds it; computed from the record when the
    field is absent (records journaled before the field existed)."""
    stored = record.get("diagnosis", _ABSENT)
    if stored is None:
        return None
    if isinstance(stored, dict) and isinstance(stored.get("kind"), str):
        return stored
    return diagnosis_field(record)


_ABSENT = object()


def taxonomy_counts(records: Iterable[Mapping[str, object]], primary: str | None = None) -> dict[str, int]:
    """Failed conversations per failure kind: every kind, in :class:`FailureKind` order, zeros included."""
    counts: Counter[str] = Counter()
    for record in records:
        diagnosis = diagnose(record, primary)
        if diagnosis is not None:
            counts[diagnosis.kind.value] += 1
    return {kind.value: counts.get(kind.value, 0) for kind in FailureKind}


def _diagnose_phase(record: Mapping[str, object], phase: Mapping[str, object], primary: str | None) -> Diagnosis:
    name = _phase_name(phase)
    outcome = phase.get("outcome")
    if outcome is not None and outcome != "scored":
        kind = OUTCOME_KINDS.get(str(outcome), FailureKind.OTHER)
        return _make(kind, name, _early_end_message(record, phase, kind))
    diagnosis = _diagnose_answer(record, phase, primary)
    leaks = _phase_leaks(record, name)
    if leaks:  # a flag, and the evidence after the agent's own failure
        return _make(diagnosis.kind, name, f"{diagnosis.message} ({leaks})", flags=("vuser_leak",))
    return diagnosis


def _diagnose_answer(record: Mapping[str, object], phase: Mapping[str, object], primary: str | None) -> Diagnosis:
    """Rules c to j: the phase was answered and its verdict is a failure."""
    name = _phase_name(phase)
    verdict = primary_verdict(phase, primary)
    detail = str(verdict[1].get("detail") or "") if verdict else ""
    if detail.startswith("scorer error"):
        return _make(FailureKind.OTHER, name, f"{verdict[0]} {detail}" if verdict else detail)
    if verdict is not None and verdict[0] == "answer_match":
        return _make(FailureKind.WRONG_ANSWER, name, f"{_answer_text(phase)}: {detail or 'wrong answer'}")
    generated = phase.get("generated")
    if not phase.get("sql") or not isinstance(generated, Mapping):  # None: no SQL was run
        return _make(FailureKind.NO_SQL, name, _no_sql_message(record, name))
    if generated.get("error") is not None:
        error = str(generated["error"])
        if generated.get("error_kind") == "timeout":
            error = f"statement timeout: {error}"
        return _make(FailureKind.SQL_ERROR, name, error)
    if verdict is not None and "empty_gold" in seq(verdict[1].get("flags")):
        return _make(FailureKind.EMPTY_GOLD, name, f"{verdict[0]}: {detail}")
    result = _compare_results(phase, verdict)
    asked = _int(phase.get("clarifications"))
    if name == "main" and record.get("ambiguous") and asked == 0:
        evidence = f"; {result[1]}" if result else ""
        return _make(FailureKind.MISSING_CLARIFICATION, name, f"ambiguous question answered without asking anything{evidence}")
    if asked and (name != "main" or not record.get("ambiguous")):
        question = _first_question(record, name)
        what = "the follow-up question" if name == "follow_up" else "a clear question"
        evidence = f"; {result[1]}" if result else ""
        return _make(FailureKind.NEEDLESS_CLARIFICATION, name,
                     f"asked {asked} clarification(s) about {what}" + (f" ({question!r})" if question else "") + evidence)
    if result is not None:
        return _make(result[0], name, result[1])
    if verdict is not None and verdict[0] == "test_cases":
        return _make(FailureKind.TEST_CASE_FAILED, name, detail or "a test case failed")
    if verdict is not None and verdict[0] == "state_match":
        return _make(FailureKind.WRONG_STATE, name, detail or "another database state than the golden SQL leaves")
    if verdict is not None:
        return _make(FailureKind.OTHER, name, f"{verdict[0]}: {detail or 'failed'}")
    return _make(FailureKind.OTHER, name, phase.get("error") or "failed for no recorded reason")


def _compare_results(phase: Mapping[str, object],
                     verdict: tuple[str, Mapping[str, object]] | None) -> tuple[FailureKind, str] | None:
    """Rule h: what differs between the generated and the (first usable) golden result."""
    generated = phase.get("generated")
    goldens = objs(phase.get("golden"))  # the golden results that ran (a null: none)
    golden = next((g for g in goldens if g.get("error") is None), None)
    if not isinstance(generated, Mapping) or golden is None:
        return None
    suffix = f" (first of {len(goldens)} golden results)" if len(goldens) > 1 else ""
    gen_rows, gold_rows = _int(generated.get("row_count")), _int(golden.get("row_count"))
    if golden.get("truncated"):
        return FailureKind.OTHER, f"the golden result was truncated at the row cap ({gold_rows} rows kept): it cannot be compared"
    if generated.get("truncated"):
        return FailureKind.WRONG_ROW_COUNT, f"generated more than {_n(gen_rows, 'row')} (truncated at the row cap), golden {gold_rows}{suffix}"
    if gen_rows == 0 and gold_rows > 0:
        return FailureKind.EMPTY_RESULT, f"generated 0 rows, golden {gold_rows}{suffix}"
    gen_cols, gold_cols = list(seq(generated.get("columns"))), list(seq(golden.get("columns")))
    if gen_rows and len(gen_cols) != len(gold_cols):
        return FailureKind.WRONG_COLUMNS, (f"generated {_columns(gen_cols)}, golden {_columns(gold_cols)}{suffix}")
    if gen_rows != gold_rows:
        return FailureKind.WRONG_ROW_COUNT, f"generated {_n(gen_rows, 'row')}, golden {gold_rows}{suffix}"
    if gen_rows == 0:
        return None  # both empty: nothing in the results explains the verdict
    flags = set(seq(verdict[1].get("flags"))) if verdict else set()
    for score in obj(phase.get("scores")).values():
        flags.update(seq(obj(score).get("flags")))
    # rows_sha256 (of every row, in order) decides equality when both results carry it; previews
    # count only when complete: every row kept, and no cell or row cut by the record's byte caps.
    gen_hash, gold_hash = _sha(generated), _sha(golden)
    same_rows = gen_hash == gold_hash if gen_hash is not None and gold_hash is not None else None
    gen_preview, gold_preview = _rows(generated), _rows(golden)
    complete = _complete(generated, gen_preview, gen_rows) and _complete(golden, gold_preview, gold_rows)
    if same_rows:
        return None  # the very same rows in the same order: the verdict comes from elsewhere (SQL text, ...)
    if "order_only" in flags or (complete and gen_preview != gold_preview and Counter(gen_preview) == Counter(gold_preview)):
        return FailureKind.ORDERING_ONLY, f"the same {_n(gen_rows, 'row')} in another order; the order matters for this item{suffix}"
    if complete and gen_preview == gold_preview and same_rows is None:
        return None  # the results agree: the verdict comes from elsewhere (SQL text, test cases, ...)
    shape = f"same shape ({_n(gen_rows, 'row')} x {_n(len(gen_cols), 'column')}), different values"
    if not complete:  # an example from partial previews could be a row the other result has further on
        why = ("the previews are cut" if generated.get("preview_truncated") or golden.get("preview_truncated")
               else "the previews hold only some rows")
        return FailureKind.WRONG_VALUES, f"{shape} ({why}: no example){suffix}"
    example = _first_difference(gen_preview, gold_preview)
    if example is None:  # complete previews that agree, rows that do not: they differ beyond what a preview shows
        return FailureKind.WRONG_VALUES, (f"{shape}: they differ only in precision or type, which the previews do not show "
                                          f"(rows_sha256 differs){suffix}")
    return FailureKind.WRONG_VALUES, f"{shape}; e.g. {example}{suffix}"


# --------------------------------------------------------------------------- messages


def _early_end_message(record: Mapping[str, object], phase: Mapping[str, object], kind: FailureKind) -> str:
    error = phase.get("error") or record.get("error") or str(phase.get("outcome"))
    name = _phase_name(phase)
    if kind in (FailureKind.AGENT_ERROR, FailureKind.TIMEOUT):
        reply = _last_reply(record, name)
        if reply is not None and reply.get("kind") == "error" and reply.get("error_kind"):
            return f"{error} [{reply['error_kind']}]"
    if kind is FailureKind.MAX_TURNS:
        return f"{error} after {phase.get('clarifications', 0)} clarification(s)"
    if kind is FailureKind.VUSER_ERROR:
        return f"the virtual user failed: {error}"
    return str(error)


def _answer_text(phase: Mapping[str, object]) -> str:
    text = " ".join(str(phase.get("answer") or "").split())
    return f"the answer {_clip(text, 120)!r}" if text else "no answer"


def _no_sql_message(record: Mapping[str, object], phase: str) -> str:
    reply = _last_reply(record, phase)
    if reply is not None and reply.get("kind") == "answer":
        text = " ".join(str(reply.get("text") or "").split())
        return f"the agent answered in words, without SQL: {text!r}" if text else "the agent answered in words, without SQL"
    return "the agent returned no SQL"


def _phase_leaks(record: Mapping[str, object], phase: str) -> str:
    found = []
    for turn in objs(record.get("turns")):
        leaks = seq(obj(obj(turn.get("vuser")).get("audit")).get("leaks"))
        if turn.get("phase") == phase and leaks:
            found.append(f"turn {_int(turn.get('index', 0)) + 1}: " + "; ".join(str(x) for x in leaks))
    if not found:
        return ""
    return "the virtual user's reply leaked the answer (" + " | ".join(found) + ")"


def _first_question(record: Mapping[str, object], phase: str) -> str | None:
    for turn in objs(record.get("turns")):
        reply = obj(turn.get("reply"))
        if turn.get("phase") == phase and reply.get("kind") == "clarification":
            return _clip(" ".join(str(reply.get("text") or "").split()), 80) or None
    return None


def _last_reply(record: Mapping[str, object], phase: str) -> Mapping[str, object] | None:
    replies = [obj(t.get("reply")) for t in objs(record.get("turns")) if t.get("phase") == phase and t.get("reply")]
    return replies[-1] if replies else None


def _n(count: int, word: str) -> str:
    return f"{count} {word}" + ("" if count == 1 else "s")


def _columns(columns: Sequence[object]) -> str:
    names = ", ".join(str(c) for c in columns[:_NAMES_SHOWN]) + (", ..." if len(columns) > _NAMES_SHOWN else "")
    count = _n(len(columns), "column")
    return f"{count} ({names})" if columns else count


def _sha(result: Mapping[str, object]) -> str | None:
    digest = result.get("rows_sha256")
    return digest if isinstance(digest, str) and digest else None


def _complete(result: Mapping[str, object], preview: list[str], row_count: int) -> bool:
    """The preview holds the whole result: every row, none cut by the record's caps."""
    return len(preview) == row_count and not result.get("preview_truncated") and not result.get("truncated")


def _rows(result: Mapping[str, object]) -> list[str]:
    """Preview rows in a hashable form (their JSON text)."""
    return [json.dumps(row, sort_keys=True, default=str) for row in seq(result.get("preview"))]


def _first_difference(gen: list[str], gold: list[str]) -> str | None:
    only_gen = list((Counter(gen) - Counter(gold)).elements())
    only_gold = list((Counter(gold) - Counter(gen)).elements())
    parts = []
    if only_gen:
        parts.append(f"generated {_clip(only_gen[0], 80)}")
    if only_gold:
        parts.append(f"golden {_clip(only_gold[0], 80)}")
    return " vs ".join(parts) or None


def _phase_name(phase: Mapping[str, object] | None) -> str:
    return str((phase or {}).get("phase") or "main")


# A record's values are JSON as read (or as built: lists, never tuples); these read the shapes the
# run schema gives them (:class:`~evalbench.results.schema.JournalRecord`), a null or absent value as empty.


def _int(value: object) -> int:
    """A count of the record as an int (0: null or absent)."""
    return int(value) if isinstance(value, (int, float, str)) and value else 0


def _clip(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _make(kind: FailureKind, phase: str, message: object, flags: tuple[str, ...] = ()) -> Diagnosis:
    return Diagnosis(kind, phase, _clip(" ".join(str(message).split()), MAX_MESSAGE), flags)


__all__ = [
    "OUTCOME_KINDS",
    "Diagnosis",
    "FailureKind",
    "diagnose",
    "diagnosis_field",
    "passed",
    "phase_failed",
    "primary_verdict",
    "record_diagnosis",
    "taxonomy_counts",
]

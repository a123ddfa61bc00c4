"""Scorers that compare the agent's result rows with the golden results: ``set_match``,
``exact_match`` and ``recall_match``.

Every scorer's docstring states its exact rule (summarised in docs/scoring.md). None of them
raises on bad input: a missing or failed result is a failed (or not applicable) score, never an
exception.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Hashable

from evalbench.core.conversation import Conversation, PhaseRecord
from evalbench.core.execution_result import ExecutionResult
from evalbench.core.scores import Score
from evalbench.scoring.compare import normalise_rows
from evalbench.scoring.options import ScorerOptions, no_options

__all__ = ["ExactMatch", "RecallMatch", "SetMatch", "comparable", "compared_result", "precision_recall", "unusable"]


def unusable(result: ExecutionResult | None, side: str) -> str | None:
    """Why ``result`` cannot be compared (None when it can)."""
    if result is None:
        return "no SQL was executed" if side == "generated" else "no golden result"
    if result.error is not None:
        return f"{side} SQL failed: {result.error}"
    if result.truncated:
        return f"{side} result was truncated at the row cap; truncated results never match"
    return None


def compared_result(phase: PhaseRecord) -> ExecutionResult | None:
    """The agent's result as the run's semantics compares it: under ``bird_interact``, its SQL
    after BIRD-Interact's cleaning (like the golden result it is compared with), else as run."""
    return phase.compared if phase.compared is not None else phase.generated


def comparable(phase: PhaseRecord) -> Score | None:
    """The verdict when the phase's result cannot be compared (None when it can)."""
    if not phase.is_query:
        return Score.not_applicable("management task: results are not compared")
    problem = answer_problem(phase) or unusable(compared_result(phase), "generated")
    return Score(0.0, False, detail=problem) if problem else None


def answer_problem(phase: PhaseRecord) -> str | None:
    """Why the phase has no answer to compare (None when it has one)."""
    if phase.outcome is not None and phase.outcome.value != "scored":
        return f"no answer to score: {phase.outcome.value}"
    if phase.generated is None:
        return "the agent returned no SQL"
    return None


class ResultScorer:
    """A pass/fail scorer of the generated result against the golden ones, with no options: the
    phases it cannot compare (management tasks, no answer, an unusable result) are decided by
    :func:`comparable`, the others by :meth:`judge`."""

    name: str
    is_metric = False

    def __init__(self, options: ScorerOptions) -> None:
        no_options(self.name, options)

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        verdict = comparable(phase)
        if verdict is not None:
            return verdict
        generated = compared_result(phase)
        assert generated is not None  # comparable() said so
        return self.judge(phase, generated)

    def judge(self, phase: PhaseRecord, generated: ExecutionResult) -> Score:
        raise NotImplementedError


# --------------------------------------------------------------------------- set_match


class SetMatch(ResultScorer):
    """BIRD's EX: the generated rows equal a golden result's rows **as sets** — order and
    duplicates ignored, columns by position (names ignored), cells normalised with
    ``compare.normalise_rows`` at ``conditions.decimal`` (no float tolerance beyond that).
    Any golden result may match. An errored or truncated result (either side) never matches;
    two empty results match (flagged ``both_empty``). Not applicable to management tasks."""

    name = "set_match"

    def judge(self, phase: PhaseRecord, generated: ExecutionResult) -> Score:
        decimal = phase.conditions.decimal
        gen_set = set(normalise_rows(generated.rows, decimal))

        def compare(golden: ExecutionResult) -> tuple[bool, str]:
            gold_set = set(normalise_rows(golden.rows, decimal))
            if gen_set == gold_set:
                return True, f"same set of {len(gen_set)} distinct rows"
            return False, (f"different sets of rows: {len(gen_set - gold_set)} generated rows not in golden, "
                           f"{len(gold_set - gen_set)} golden rows missing")

        return _any_golden(phase, compare, empty=not gen_set)


def _any_golden(phase: PhaseRecord, compare: Callable[[ExecutionResult], tuple[bool, str]], *, empty: bool) -> Score:
    """Passed when ``compare`` matches any usable golden result (two empty results are flagged
    ``both_empty``); otherwise failed with the first golden result's reason."""
    reasons = []
    for golden in phase.golden:
        problem = unusable(golden, "golden")
        if problem:
            reasons.append(problem)
            continue
        same, detail = compare(golden)
        if same:
            if empty:
                return Score(1.0, True, detail="both results are empty", flags=("both_empty",))
            return Score(1.0, True, detail=detail)
        reasons.append(detail)
    return Score(0.0, False, detail=reasons[0] if reasons else "no golden result")


# --------------------------------------------------------------------------- exact_match


class ExactMatch(ResultScorer):
    """EvalBench's ``exact_match`` (``scorers/exactmatcher.py``, ``ExactMatcher.compare``: the
    golden and generated execution results are equal, ``golden_execution_result ==
    generated_execution_result``). EvalBench's results are lists of rows as column-name → value
    mappings, so here: the same number of rows, **in the same order**, and row by row the same
    mapping of column name to value (column order ignored, names matter; values as the driver
    returned them, compared exactly — no rounding, no tolerance). Any golden result may match.
    Differences from EvalBench: an errored or truncated result (either side) never matches
    (EvalBench compares two failed executions as equal), and two empty results match, flagged
    ``both_empty``. Not applicable to management tasks."""

    name = "exact_match"

    def judge(self, phase: PhaseRecord, generated: ExecutionResult) -> Score:
        mine = _as_mappings(generated)

        def compare(golden: ExecutionResult) -> tuple[bool, str]:
            if _as_mappings(golden) == mine:
                return True, f"the same {len(mine)} rows in the same order"
            return False, (f"results differ ({len(generated.rows)} generated rows, {len(golden.rows)} golden rows; "
                           "compared in order, by column name, exactly)")

        return _any_golden(phase, compare, empty=not mine)


def _as_mappings(result: ExecutionResult) -> list[dict[str, object]]:
    # a later column of the same name wins, as in a Python dict built from the row
    return [dict(zip(result.columns, row, strict=False)) for row in result.rows]


# --------------------------------------------------------------------------- recall_match


def precision_recall(gen_rows: list[tuple[Hashable, ...]], gold_rows: list[tuple[Hashable, ...]]) -> tuple[float, float, int]:
    """(precision, recall, matched) of two multisets of rows: matched = size of the multiset
    intersection; precision = matched / generated rows; recall = matched / golden rows. An empty
    side gives 1.0 when the other side is empty too, else 0.0 (precision) / 1.0 (recall of an
    empty golden: nothing was missed)."""
    matched = sum((Counter(gen_rows) & Counter(gold_rows)).values())
    if gen_rows:
        precision = matched / len(gen_rows)
    else:
        precision = 1.0 if not gold_rows else 0.0
    recall = matched / len(gold_rows) if gold_rows else 1.0
    return precision, recall, matched


class RecallMatch(ResultScorer):
    """Value: the recall of the golden rows in the generated rows, as multisets (columns by
    position, cells normalised at ``conditions.decimal``): recall = matched / golden rows,
    precision = matched / generated rows, matched = the size of the multiset intersection.
    Passed when recall == 1 and precision == 1 (then the results are equal as multisets). With
    several golden results the best one counts (passed first, then recall, then precision).
    An errored or truncated result (either side) scores 0. Two empty results: 1, flagged
    ``both_empty``. Not applicable to management tasks (``phase.is_query`` false)."""

    name = "recall_match"

    def judge(self, phase: PhaseRecord, generated: ExecutionResult) -> Score:
        decimal = phase.conditions.decimal
        gen_rows = normalise_rows(generated.rows, decimal)
        best: tuple[bool, float, float, int, int] | None = None
        reasons = []
        for golden in phase.golden:
            golden_problem = unusable(golden, "golden")
            if golden_problem:
                reasons.append(golden_problem)
                continue
            gold_rows = normalise_rows(golden.rows, decimal)
            precision, recall, matched = precision_recall(gen_rows, gold_rows)
            candidate = (precision == 1.0 and recall == 1.0, recall, precision, matched, len(gold_rows))
            if best is None or candidate[:3] > best[:3]:
                best = candidate
        if best is None:
            return Score(0.0, False, detail=reasons[0] if reasons else "no golden result")
        passed, recall, precision, matched, gold_count = best
        flags = ("both_empty",) if not gen_rows and gold_count == 0 else ()
        detail = (f"precision {precision:.4g} ({matched}/{len(gen_rows)} generated rows in golden), "
                  f"recall {recall:.4g} ({matched}/{gold_count} golden rows returned)")
        return Score(recall, passed, detail=detail, flags=flags)

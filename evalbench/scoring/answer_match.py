"""``answer_match``: a question answered in words, judged against the golden result.

EvalBench's data-agent specification asks that an agent "generate correct SQL or provide correct
natural language responses"; this scorer judges the second. It applies to a question's phase
whose final reply carries text — a reply without SQL, or SQL with a textual answer — and is not
applicable to a reply that is SQL alone, or to a management task. In this order:

1. not applicable when the phase ended without an answer (an error or timeout outcome: the
   primary scorer fails it); fail when the reply is empty;
2. a **refusal** ("I cannot", "I'm sorry", "unable to", "I don't have access", ...): fail, flag
   ``refusal``;
3. the first usable golden result: an empty one follows ``empty_gold`` (default ``fail``); one
   of more than ``max_cells`` non-NULL cells (default 50) is too large to be stated in prose:
   fail, flag ``too_large``;
4. the answer must not be a dump: more numbers than ``max(10, 3 × cells)``, or more listed
   entries (separated by commas, semicolons, lines, bullets, "and"/"or") than ``2 × cells + 2``:
   fail, flag ``unfocused`` (a list of every candidate would contain any answer);
5. every distinct non-NULL golden cell must be **stated** (:mod:`evalbench.scoring.answer_text`
   reads the values written; SQL code and markdown emphasis are dropped first):

   - a number: some number written in the text (``1,234.5``, ``-3``, ``45%`` read as 0.45 too)
     that equals the golden value rounded half-up to the places the text shows and is within
     1 % of it (``3.14`` gives 3.14159; ``3`` does not, nor does ``1`` give 0.5);
   - a boolean: ``yes``/``true`` or ``no``/``false`` as a word;
   - a date: ``2024-03-05``, ``March 5, 2024``, ``5 March 2024`` (month names or their first
     three letters); a timestamp: its date, with its ``HH:MM`` written beside it when it is not
     midnight;
   - text (and anything else, by its text form): the value, case and spaces ignored, as a whole
     word sequence;

   and not under a negation scoped to it ("it is not 9": flag ``denied``); then nothing else
   may be asserted — no other value, no other listed entry, no hedge, and each golden row's
   values stated together (:mod:`evalbench.scoring.answer_rules`: flags ``extra_values``,
   ``extra_entities``, ``hedge``, ``misaligned``);

6. with the ``llmrater`` option (the judge's model, votes, seed, ...: the ``llmrater`` scorer's
   options), a deterministic pass is confirmed by a pinned LLM judge (temperature 0, seeded,
   prompt ``prompts/answer_rater.txt``): a judge that says ``incorrect`` fails the answer,
   flag ``judge_disagrees``.

With ``accept_nl_answers: true`` in the run config, a question answered in words without SQL is
judged by this scorer (it counts towards ``success``); otherwise it only reports.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from evalbench.backends.base import ExecutionResult
from evalbench.core.conversation import Conversation, PhaseRecord
from evalbench.core.json_types import JsonDict
from evalbench.scoring import Score
from evalbench.scoring.answer_rules import (
    Context,
    Golden,
    both_ways,
    extra_entities,
    extra_values,
    hedges,
    misaligned_rows,
)
from evalbench.scoring.answer_text import Mention, cell_kind, clean, numbers_in, read_mentions
from evalbench.scoring.compare import EMPTY_GOLD_POLICIES, EmptyGold
from evalbench.scoring.options import integer

NAME = "answer_match"
OPTIONS = ("max_cells", "empty_gold", "llmrater")

REFUSAL = re.compile(
    r"\b(?:i\s*(?:am|'m)\s*(?:sorry|unable|not able)|i\s*(?:cannot|can't|can\s*not|could\s*not|couldn't)"
    r"|unable\s+to\s+(?:answer|find|determine|access|provide)|(?:do|does)\s*(?:not|n't)\s+have\s+(?:access|enough)"
    r"|no\s+(?:data|information)\s+(?:is\s+)?available|not\s+(?:possible|able)\s+to\s+(?:answer|tell|determine))",
    re.IGNORECASE,
)
_SEPARATORS = re.compile(r";|\n|,(?!\d{3}\b)|\s+(?:and|or)\s+|\s[-*•]\s")
_TRUE, _FALSE = ("yes", "true"), ("no", "false", "not")


def list_entries(text: str) -> int:
    """How many entries the text lists (separated by commas, semicolons, lines, bullets, and/or)."""
    return sum(1 for part in _SEPARATORS.split(text) if part.strip(" .:-*•"))


def _word_found(words: tuple[str, ...], text: str) -> bool:
    return any(re.search(r"(?<!\w)" + word + r"(?!\w)", text, re.IGNORECASE) for word in words)


def _shown(values: Sequence[object]) -> str:
    return ", ".join(repr(v) if isinstance(v, str) else str(v) for v in values[:3])


# --------------------------------------------------------------------------- the scorer


class AnswerMatch:
    """A natural-language answer gives the golden result's values (rules in the module docstring)."""

    name = NAME
    is_metric = False

    def __init__(self, options: Mapping[str, object] | None) -> None:
        options = options or {}
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"answer_match options: unknown {unknown} (known: {', '.join(OPTIONS)})")
        self.max_cells = integer(options.get("max_cells", 50))
        empty_gold = options.get("empty_gold", "fail")
        if empty_gold not in EMPTY_GOLD_POLICIES:
            raise ValueError(f"answer_match: empty_gold must be one of {', '.join(EMPTY_GOLD_POLICIES)}")
        self.empty_gold: EmptyGold = empty_gold
        self.judge = None
        if options.get("llmrater") is not None:
            from evalbench.scoring.answer_rater import AnswerRater

            self.judge = AnswerRater(options["llmrater"])

    def describe(self) -> JsonDict:
        return {"scorer": NAME, "max_cells": self.max_cells, "empty_gold": self.empty_gold,
                "judge": self.judge.describe() if self.judge is not None else None}

    def close(self) -> None:
        if self.judge is not None:
            self.judge.close()

    def score(self, conversation: Conversation, phase: PhaseRecord) -> Score:
        if not phase.is_query:
            return Score.not_applicable("management task: judged by its effect, not by words")
        if phase.outcome is not None:
            return Score.not_applicable(f"no answer in words: {phase.outcome.value}")
        text = (phase.answer or "").strip()
        if phase.sql and not text:
            return Score.not_applicable("the agent answered with SQL alone")
        if not text:
            return Score(0.0, False, detail="the agent gave no answer")
        turns = conversation.turns if conversation is not None else []  # (a phase scored on its own: the question only)
        context = Context.of([phase.question, *(t.user_text for t in turns if t.phase == phase.phase)])
        verdict = self._deterministic(text, _golden(phase), context)
        if verdict.passed and self.judge is not None:
            return self._confirm(conversation, phase, verdict)
        return verdict

    def _deterministic(self, text: str, golden: ExecutionResult | None, context: Context) -> Score:
        if REFUSAL.search(text):
            return Score(0.0, False, detail="the answer is a refusal", flags=("refusal",))
        if golden is None:
            return Score(0.0, False, detail="no usable golden result to compare the answer with")
        if not golden.rows:
            if self.empty_gold == "n/a":
                return Score(None, None, applicable=False, detail="the golden result is empty (empty_gold: n/a)")
            return Score(0.0, False, detail=f"the golden result is empty (empty_gold: {self.empty_gold})", flags=("empty_gold",))
        cells = Golden.of(golden.rows, golden.columns)
        if len(cells.cells) > self.max_cells:
            return Score(0.0, False, detail=f"the golden result has {len(cells.cells)} values, more than an answer in words "
                                            f"can be checked for (max_cells: {self.max_cells})", flags=("too_large",))
        text = clean(text)
        return self._unfocused(text, cells) or self._judged(text, cells, context)

    @staticmethod
    def _unfocused(text: str, golden: Golden) -> Score | None:
        """A dump: so many numbers or entries that it would contain any answer."""
        count = len(golden.cells)
        numbers = numbers_in(text)
        if len(numbers) > max(10, 3 * count):
            return Score(0.0, False, detail=f"the answer holds {len(numbers)} numbers for {count} golden values",
                         flags=("unfocused",))
        entries = list_entries(text)
        if entries > 2 * count + 2:
            return Score(0.0, False, detail=f"the answer lists {entries} entries for {count} golden values", flags=("unfocused",))
        return None

    @staticmethod
    def _judged(text: str, golden: Golden, context: Context) -> Score:
        """The rules of :mod:`evalbench.scoring.answer_rules`, in their order."""
        mentions = read_mentions(text, golden.cells)
        if len(mentions) > max(20, 4 * len(golden.cells)):  # the values said over and over: a dump, not an answer
            return Score(0.0, False, detail=f"the answer states {len(mentions)} values for {len(golden.cells)} golden values",
                         flags=("unfocused",))
        missing, denied = _missing(text, golden, mentions)
        if missing:
            flags = ("denied",) if denied else ()
            why = f" ({len(denied)} only denied: {_shown(denied)})" if denied else ""
            return Score(0.0, False, flags=flags, detail=f"{len(missing)}/{len(golden.cells)} golden value(s) not in the "
                                                         f"answer: {_shown(missing)}{why}")
        extras = extra_values(mentions, text, golden, context)
        if extras:
            shown = [text[m.start:m.end] for m in extras]
            return Score(0.0, False, flags=("extra_values",),
                         detail=f"the answer also states {len(extras)} value(s) not in the golden result: {_shown(shown)}")
        entities, alternatives = extra_entities(text, mentions, golden, context)
        if entities:
            return Score(0.0, False, flags=("extra_entities",),
                         detail=f"the answer lists {len(entities)} entr(y/ies) not in the golden result: {_shown(entities)}")
        hedged = [(text[a.start:a.end], text[b.start:b.end]) for a, b in hedges(mentions, text)]
        if not hedged and any(cell_kind(c) == "bool" for c in golden.cells) and both_ways(text):
            hedged = [("yes", "no")]
        if hedged or alternatives:
            pair = f"{hedged[0][0]!r} and {hedged[0][1]!r}" if hedged else f"a golden value and {alternatives[0]!r}"
            return Score(0.0, False, flags=("hedge",), detail=f"the answer hedges between {pair}")
        apart = misaligned_rows(mentions, golden)
        if apart:
            rows = [tuple(golden.cells[i] for i in sorted(golden.rows[r], key=str)) for r in apart]
            return Score(0.0, False, flags=("misaligned",), detail=f"{len(apart)} golden row(s) not stated together "
                                                                   f"(values attached to other rows?): {_shown(rows)}")
        return Score(1.0, True, detail=f"all {len(golden.cells)} golden value(s) are in the answer, row by row, and nothing else")

    def _confirm(self, conversation: Conversation, phase: PhaseRecord, verdict: Score) -> Score:
        assert self.judge is not None
        judged = self.judge.score(conversation, phase)
        if judged.passed:
            return Score(1.0, True, detail=f"{verdict.detail}; the judge agrees ({judged.detail})", flags=judged.flags,
                         usage=judged.usage)
        return Score(0.0, False, detail=f"{verdict.detail}, but the judge disagrees: {judged.detail}",
                     flags=("judge_disagrees", *judged.flags), usage=judged.usage)


def _missing(text: str, golden: Golden, mentions: list[Mention]) -> tuple[list[object], list[object]]:
    """The golden cells the answer does not state, and among them those it only denies."""
    stated = {i for m in mentions if not m.negated for i in m.cells}
    negated = {i for m in mentions if m.negated for i in m.cells}
    missing: list[object] = []
    denied: list[object] = []
    for index, cell in enumerate(golden.cells):
        found = _word_found(_TRUE if cell else _FALSE, text) if cell_kind(cell) == "bool" else index in stated
        if not found:
            missing.append(cell)
            if index in negated:
                denied.append(cell)
    return missing, denied


def _golden(phase: PhaseRecord) -> ExecutionResult | None:
    """The golden result as the dataset's SQL gives it: when the semantics ran a cleaned form
    (``bird_interact`` strips ROUND and DISTINCT), the SQL as written is run for the answer,
    which states the values the question asks for."""
    written = [list(phase.golden_sql)] if phase.golden_is_script else [[sql] for sql in phase.golden_sql]
    if phase.golden_run_sql and phase.golden_run_sql != written and phase.sandbox is not None and written:
        from evalbench.scoring.semantics import golden_mode

        as_written = phase.sandbox.execute(written[0], mode=golden_mode(phase, written[0]), preprocess=phase.preprocess,
                                           preprocess_errors=phase.preprocess_errors, actor="golden")
        if as_written.error is None and not as_written.truncated:
            written_result: ExecutionResult = as_written
            return written_result
    return next((g for g in phase.golden if g.error is None and not g.truncated), None)

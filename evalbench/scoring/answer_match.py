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
5. every distinct non-NULL golden cell must be **found** in the text:

   - a number: some number written in the text (``1,234.5``, ``-3``, ``45%`` read as 0.45 too)
     that equals the golden value rounded half-up to the places the text shows and is within
     1 % of it (``3.14`` gives 3.14159; ``3`` does not, nor does ``1`` give 0.5);
   - a boolean: ``yes``/``true`` or ``no``/``false`` as a word;
   - a date: ``2024-03-05``, ``March 5, 2024``, ``5 March 2024`` (month names or their first
     three letters); a timestamp: its date, and its ``HH:MM`` when it is not midnight;
   - text (and anything else, by its text form): the value, case and spaces ignored, as a whole
     word sequence;

6. with the ``llmrater`` option (the judge's model, votes, seed, ...: the ``llmrater`` scorer's
   options), a deterministic pass is confirmed by a pinned LLM judge (temperature 0, seeded,
   prompt ``prompts/answer_rater.txt``): a judge that says ``incorrect`` fails the answer,
   flag ``judge_disagrees``.

With ``accept_nl_answers: true`` in the run config, a question answered in words without SQL is
judged by this scorer (it counts towards ``success``); otherwise it only reports.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable
from decimal import Decimal, InvalidOperation
from typing import Any

from evalbench.backends.base import ExecutionResult
from evalbench.conversation import Conversation, PhaseRecord
from evalbench.scoring import SCORERS, Score
from evalbench.scoring.compare import EMPTY_GOLD_POLICIES, round_half_up

NAME = "answer_match"
OPTIONS = ("max_cells", "empty_gold", "llmrater")
NUMBER_TOLERANCE = Decimal("0.01")  # a written number may be rounded, by at most 1 %

REFUSAL = re.compile(
    r"\b(?:i\s*(?:am|'m)\s*(?:sorry|unable|not able)|i\s*(?:cannot|can't|can\s*not|could\s*not|couldn't)"
    r"|unable\s+to\s+(?:answer|find|determine|access|provide)|(?:do|does)\s*(?:not|n't)\s+have\s+(?:access|enough)"
    r"|no\s+(?:data|information)\s+(?:is\s+)?available|not\s+(?:possible|able)\s+to\s+(?:answer|tell|determine))",
    re.IGNORECASE,
)
_NUMBER = re.compile(r"(?<![\w.])-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(%?)")
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_DATE_FORMS = (
    re.compile(r"\b(\d{4})-(\d{2})-(\d{2})\b"),
    re.compile(_MONTH + r"\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b", re.IGNORECASE),
    re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+" + _MONTH + r"\.?,?\s+(\d{4})\b", re.IGNORECASE),
)


# --------------------------------------------------------------------------- reading the text


def numbers_in(text: str) -> list[Decimal]:
    """Every number written in ``text`` (a percentage also as its fraction)."""
    found: list[Decimal] = []
    for match in _NUMBER.finditer(text):
        try:
            value = Decimal(match.group(0).rstrip("%").replace(",", ""))
        except InvalidOperation:
            continue
        found.append(value)
        if match.group(1):  # 45% is also 0.45
            found.append(value.scaleb(-2))
    return found


_SEPARATORS = re.compile(r";|\n|,(?!\d{3}\b)|\s+(?:and|or)\s+|\s[-*•]\s")


def list_entries(text: str) -> int:
    """How many entries the text lists (separated by commas, semicolons, lines, bullets, and/or)."""
    return sum(1 for part in _SEPARATORS.split(text) if part.strip(" .:-*•"))


def dates_in(text: str) -> set[dt.date]:
    found: set[dt.date] = set()
    for index, form in enumerate(_DATE_FORMS):
        for match in form.finditer(text):
            groups = match.groups()
            try:
                if index == 0:
                    found.add(dt.date(int(groups[0]), int(groups[1]), int(groups[2])))
                elif index == 1:
                    found.add(dt.date(int(groups[2]), _month(groups[0]), int(groups[1])))
                else:
                    found.add(dt.date(int(groups[2]), _month(groups[1]), int(groups[0])))
            except ValueError:
                continue
    return found


def _month(name: str) -> int:
    return next(i + 1 for i, month in enumerate(_MONTHS) if month.startswith(name.lower()[:3]))


def number_found(value: Decimal, written: Iterable[Decimal]) -> bool:
    """Some written number equals ``value`` rounded half-up to the places it is written with, and
    is within 1 % of it (so ``3.14`` gives 3.14159, but ``3`` does not, nor ``1`` 0.5)."""
    for number in written:
        exponent = number.as_tuple().exponent
        places = max(0, -exponent) if isinstance(exponent, int) else 0
        if round_half_up(value, places) != number:
            continue
        if number == value or (value != 0 and abs(number - value) <= abs(value) * NUMBER_TOLERANCE):
            return True
    return False


def _normal(text: str) -> str:
    return " ".join(text.casefold().split())


def text_found(value: str, text: str) -> bool:
    wanted = _normal(value)
    if not wanted:
        return True
    return re.search(r"(?<!\w)" + re.escape(wanted) + r"(?!\w)", _normal(text)) is not None


def cell_found(value: Any, text: str, numbers: list[Decimal], dates: set[dt.date]) -> bool:
    if isinstance(value, bool):
        words = ("yes", "true") if value else ("no", "false", "not")
        return any(text_found(word, text) for word in words)
    if isinstance(value, (int, float, Decimal)):
        if isinstance(value, float) and (value != value or value in (float("inf"), float("-inf"))):
            return text_found(str(value), text)
        return number_found(Decimal(repr(value)) if isinstance(value, float) else Decimal(value), numbers)
    if isinstance(value, dt.datetime):
        if value.date() not in dates:
            return False
        return value.time() == dt.time() or value.strftime("%H:%M") in text
    if isinstance(value, dt.date):
        return value in dates
    if isinstance(value, dt.time):
        return value.strftime("%H:%M") in text
    return text_found(str(value), text)


# --------------------------------------------------------------------------- the scorer


@SCORERS.register(NAME)
class AnswerMatch:
    """A natural-language answer gives the golden result's values (rules in the module docstring)."""

    name = NAME
    is_metric = False

    def __init__(self, options: dict[str, Any] | None) -> None:
        options = options or {}
        unknown = sorted(set(options) - set(OPTIONS))
        if unknown:
            raise ValueError(f"answer_match options: unknown {unknown} (known: {', '.join(OPTIONS)})")
        self.max_cells = int(options.get("max_cells", 50))
        self.empty_gold = options.get("empty_gold", "fail")
        if self.empty_gold not in EMPTY_GOLD_POLICIES:
            raise ValueError(f"answer_match: empty_gold must be one of {', '.join(EMPTY_GOLD_POLICIES)}")
        self.judge = None
        if options.get("llmrater") is not None:
            from evalbench.scoring.answer_rater import AnswerRater

            self.judge = AnswerRater(options["llmrater"])

    def describe(self) -> dict[str, Any]:
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
        verdict = self._deterministic(text, _golden(phase))
        if verdict.passed and self.judge is not None:
            return self._confirm(conversation, phase, verdict)
        return verdict

    def _deterministic(self, text: str, golden: ExecutionResult | None) -> Score:
        if REFUSAL.search(text):
            return Score(0.0, False, detail="the answer is a refusal", flags=("refusal",))
        if golden is None:
            return Score(0.0, False, detail="no usable golden result to compare the answer with")
        if not golden.rows:
            if self.empty_gold == "n/a":
                return Score(None, None, applicable=False, detail="the golden result is empty (empty_gold: n/a)")
            return Score(0.0, False, detail=f"the golden result is empty (empty_gold: {self.empty_gold})", flags=("empty_gold",))
        cells = list(dict.fromkeys(v for row in golden.rows for v in row if v is not None))
        if len(cells) > self.max_cells:
            return Score(0.0, False, detail=f"the golden result has {len(cells)} values, more than an answer in words "
                                            f"can be checked for (max_cells: {self.max_cells})", flags=("too_large",))
        numbers, dates = numbers_in(text), dates_in(text)
        if len(numbers) > max(10, 3 * len(cells)):
            return Score(0.0, False, detail=f"the answer holds {len(numbers)} numbers for {len(cells)} golden values",
                         flags=("unfocused",))
        entries = list_entries(text)
        if entries > 2 * len(cells) + 2:  # a list of every candidate "contains" any subset of them
            return Score(0.0, False, detail=f"the answer lists {entries} entries for {len(cells)} golden values",
                         flags=("unfocused",))
        missing = [cell for cell in cells if not cell_found(cell, text, numbers, dates)]
        if missing:
            shown = ", ".join(repr(m) if isinstance(m, str) else str(m) for m in missing[:3])
            return Score(0.0, False, detail=f"{len(missing)}/{len(cells)} golden value(s) not in the answer: {shown}")
        return Score(1.0, True, detail=f"all {len(cells)} golden value(s) are in the answer")

    def _confirm(self, conversation: Conversation, phase: PhaseRecord, verdict: Score) -> Score:
        assert self.judge is not None
        judged = self.judge.score(conversation, phase)
        if judged.passed:
            return Score(1.0, True, detail=f"{verdict.detail}; the judge agrees ({judged.detail})", flags=judged.flags,
                         usage=judged.usage)
        return Score(0.0, False, detail=f"{verdict.detail}, but the judge disagrees: {judged.detail}",
                     flags=("judge_disagrees", *judged.flags), usage=judged.usage)


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
            return as_written
    return next((g for g in phase.golden if g.error is None and not g.truncated), None)

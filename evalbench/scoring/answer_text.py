"""Reading an answer in words for ``answer_match``: the values it mentions, where, and whether
each is asserted or denied.

The reply is cleaned (SQL code dropped, markdown emphasis removed), then read in this order, a
span once read never being read again: the golden result's text values (longest first, as whole
word sequences), dates and timestamps, times of day, then numbers. Each :class:`Mention` records
which golden cells it may state and whether a negation is scoped to it ("not 9", "isn't
Lakeside", "9 is wrong"). :mod:`evalbench.scoring.answer_rules` judges the mentions.
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

from evalbench.scoring.compare import round_half_up

NUMBER_TOLERANCE = Decimal("0.01")  # a written number may be rounded, by at most 1 %

NUMBER = re.compile(r"(?<![\w.])(?<![A-Za-z]-)-?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?(?:[eE][-+]?\d+)?(%?)")
_MONTHS = ["january", "february", "march", "april", "may", "june", "july", "august", "september", "october",
           "november", "december"]
_MONTH = r"(jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)"
_TIME = r"(\d{1,2}):(\d{2})(?::\d{2}(?:\.\d+)?)?(?:\s*([ap])\.?m\.?\b)?"
_AT_TIME = r"(?:(?:[T ]|,?\s+at\s+|\s+)" + _TIME + r")?"
DATE_FORMS = (  # (pattern, group of the year, month, day); the time's three groups follow
    (re.compile(r"\b(\d{4})[-/](\d{2})[-/](\d{2})" + _AT_TIME, re.IGNORECASE), (1, 2, 3)),
    (re.compile(r"\b" + _MONTH + r"\.?\s+(\d{1,2})(?:st|nd|rd|th)?,?\s+(\d{4})\b" + _AT_TIME, re.IGNORECASE), (3, 1, 2)),
    (re.compile(r"\b(\d{1,2})(?:st|nd|rd|th)?\s+" + _MONTH + r"\.?,?\s+(\d{4})\b" + _AT_TIME, re.IGNORECASE), (3, 2, 1)),
)
TIME_OF_DAY = re.compile(r"(?<![\d:])" + _TIME + r"(?![\d:])", re.IGNORECASE)
_SQL_BLOCK = re.compile(r"```[ \t]*(?:sql|postgres(?:ql)?|mysql|sqlite)[^\n]*\n.*?(?:```|$)"
                        r"|```\s*(?=(?:select|with)\b).*?(?:```|$)", re.IGNORECASE | re.DOTALL)
_SQL_INLINE = re.compile(r"`\s*(?:select|with)\b[^`]*`", re.IGNORECASE)
_EMPHASIS = re.compile(r"\*\*|__|(?<!\w)[*_](?=\w)|(?<=\w)[*_](?!\w)|`")
_CLAUSE_END = re.compile(r"[.;:!?\n,](?!\d)")
_NEGATED_BEFORE = re.compile(r"(?:\bnot|n't|\bnever|\bnor|\bneither|\brather\s+than|\binstead\s+of|\bexcept(?:\s+for)?"
                             r"|\bexcluding|\bno\s+longer)\W+(?:[\w'-]+\W+){0,2}$", re.IGNORECASE)
# "9 is wrong", "Riverside is not the top store" (a denial names what the value is not; "is not
# open on Sundays" says something else about it)
_NEGATED_AFTER = re.compile(r"^\W*(?:is|was|are|were)(?:\s+(?:wrong|incorrect)|(?:\s+not|n't)\s+(?:correct|right|the|an?)\b)",
                            re.IGNORECASE)


@dataclass(frozen=True)
class Mention:
    """A value written in the reply: ``cells`` are the indices of the golden cells it may state
    (empty: a value of no golden cell); ``value`` is what was read (a number's readings, a date,
    a time, or the text)."""

    start: int
    end: int
    kind: str  # "text" | "date" | "time" | "number"
    value: Any
    cells: frozenset[int] = field(default_factory=frozenset)
    negated: bool = False


def clean(text: str) -> str:
    """The reply without SQL code (a fenced block, inline code that is a query) nor markdown emphasis."""
    return _EMPHASIS.sub("", _SQL_INLINE.sub(" ", _SQL_BLOCK.sub("\n", text)))


# --------------------------------------------------------------------------- numbers, dates, times


def number_values(match: re.Match[str]) -> tuple[Decimal, ...]:
    """A written number's readings: its value, and a percentage also as its fraction."""
    try:
        value = Decimal(match.group(0).rstrip("%").replace(",", ""))
    except InvalidOperation:
        return ()
    return (value, value.scaleb(-2)) if match.group(1) else (value,)


def numbers_in(text: str) -> list[Decimal]:
    """Every number written in ``text`` (a percentage also as its fraction)."""
    return [value for match in NUMBER.finditer(text) for value in number_values(match)]


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


def date_at(match: re.Match[str], order: tuple[int, int, int]) -> tuple[dt.date, dt.time | None] | None:
    """The date (and time of day, when written) a :data:`DATE_FORMS` match reads."""
    groups = match.groups()
    year, month, day = (groups[i - 1] for i in order)
    try:
        month_number = int(month) if month.isdigit() else _month(month)
        date = dt.date(int(year), month_number, int(day))
    except ValueError:
        return None
    return date, time_of(groups[3:6]) if groups[3] else None


def time_of(groups: Sequence[str | None]) -> dt.time | None:
    hour, minute, half = int(groups[0] or 0), int(groups[1] or 0), (groups[2] or "").lower()
    hour = hour % 12 + (12 if half == "p" else 0) if half else hour
    try:
        return dt.time(hour, minute)
    except ValueError:
        return None


def dates_in(text: str) -> set[dt.date]:
    """Every date written in ``text``."""
    return {read[0] for form, order in DATE_FORMS for m in form.finditer(text) if (read := date_at(m, order))}


def _month(name: str) -> int:
    return next(i + 1 for i, month in enumerate(_MONTHS) if month.startswith(name.lower()[:3]))


# --------------------------------------------------------------------------- golden cells


def cell_kind(value: object) -> str:
    """How a golden cell is written: bool, number, datetime, date, time or text."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, Decimal)) or (isinstance(value, float) and value == value and abs(value) != float("inf")):
        return "number"
    if isinstance(value, dt.datetime):
        return "datetime"
    if isinstance(value, dt.date):
        return "date"
    if isinstance(value, dt.time):
        return "time"
    return "text"


def normal(text: str) -> str:
    return " ".join(text.casefold().split())


def _text_pattern(value: str) -> re.Pattern[str]:
    words = value.split()
    body = r"\s+".join(re.escape(w) for w in words)
    short = len(value) <= 3 and any(c.isupper() for c in value)  # "A", "NY": not the article "a", nor "ny"
    return re.compile(r"(?<!\w)" + body + r"(?!\w)", 0 if short else re.IGNORECASE)


def _number(value: int | float | Decimal) -> Decimal:
    return Decimal(repr(value)) if isinstance(value, float) else Decimal(value)


# --------------------------------------------------------------------------- reading the mentions


def read_mentions(text: str, cells: Sequence[object]) -> list[Mention]:
    """Every value written in ``text`` (cleaned), in order, each with the golden cells it may state."""
    kinds = [cell_kind(c) for c in cells]
    taken = bytearray(len(text))  # characters already read as a value
    found: list[Mention] = []

    def free(start: int, end: int) -> bool:
        return not any(taken[start:end])

    def add(start: int, end: int, kind: str, value: Any, matched: Iterable[int]) -> None:
        taken[start:end] = b"\x01" * (end - start)
        found.append(Mention(start, end, kind, value, frozenset(matched)))

    texts = sorted({normal(str(c)) for c, k in zip(cells, kinds, strict=True) if k == "text" and normal(str(c))}, key=len, reverse=True)
    for wanted in texts:
        original = next(str(c) for c, k in zip(cells, kinds, strict=True) if k == "text" and normal(str(c)) == wanted)
        for m in _text_pattern(original).finditer(text):
            if free(m.start(), m.end()):
                add(m.start(), m.end(), "text", wanted,
                    (i for i, (c, k) in enumerate(zip(cells, kinds, strict=True)) if k == "text" and normal(str(c)) == wanted))
    for form, order in DATE_FORMS:
        for m in form.finditer(text):
            read = date_at(m, order)
            if read is not None and free(m.start(), m.end()):
                add(m.start(), m.end(), "date", read, (i for i, c in enumerate(cells) if _date_states(c, kinds[i], *read)))
    for m in TIME_OF_DAY.finditer(text):
        clock = time_of(m.groups())
        if clock is not None and free(m.start(), m.end()):
            add(m.start(), m.end(), "time", clock,
                (i for i, c in enumerate(cells)
                 if kinds[i] == "time" and isinstance(c, dt.time) and c.strftime("%H:%M") == clock.strftime("%H:%M")))
    for m in NUMBER.finditer(text):
        values = number_values(m)
        if values and free(m.start(), m.end()):
            add(m.start(), m.end(), "number", values,
                (i for i, c in enumerate(cells)
                 if kinds[i] == "number" and isinstance(c, (int, float, Decimal)) and number_found(_number(c), values)))
    found.sort(key=lambda mention: mention.start)
    return _with_negations(text, found)


def _date_states(cell: object, kind: str, date: dt.date, clock: dt.time | None) -> bool:
    if kind == "date":
        return bool(cell == date)
    if kind != "datetime" or not isinstance(cell, dt.datetime) or cell.date() != date:
        return False
    if cell.time().replace(second=0, microsecond=0) == dt.time():
        return clock is None or clock == dt.time()
    return clock is not None and clock == cell.time().replace(second=0, microsecond=0)


def _with_negations(text: str, mentions: list[Mention]) -> list[Mention]:
    """Each mention with ``negated`` set when a negation is scoped to it: in its clause, between
    the previous mention and it ("not 9", "rather than Lakeside"), or right after it ("9 is wrong")."""
    out = []
    for index, mention in enumerate(mentions):
        low = mentions[index - 1].end if index else 0
        high = mentions[index + 1].start if index + 1 < len(mentions) else len(text)
        before = text[low:mention.start]
        ends = list(_CLAUSE_END.finditer(before))
        before = before[ends[-1].end():] if ends else before
        after = text[mention.end:high]
        negated = bool(_NEGATED_BEFORE.search(before) or _NEGATED_AFTER.search(after))
        out.append(Mention(mention.start, mention.end, mention.kind, mention.value, mention.cells, negated))
    return out

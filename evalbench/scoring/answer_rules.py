"""The rules ``answer_match`` applies to the values a reply mentions (docs/scoring.md states them
with examples). Given the mentions read by :mod:`evalbench.scoring.answer_text`, in this order:

1. **found**: every golden cell is stated by a mention that is not negated (a boolean by
   yes/true or no/false); a cell only mentioned under a negation is **denied** ("it is not 9");
2. **extra values**: a number, date or time that states no golden cell, is not negated, and is
   not explained — written in the question or the user's messages, a list marker or ordinal
   ("1.", "2nd", "#1", "rank 2"), the count of the result's rows ("the 3 stores"), a scale
   ("4.5 out of 5"), part of a column name — fails the answer: it buries the answer among other
   values, hedges, or invents a row;
3. **extra entities**: in a sentence or a list that states golden values, another entry —
   an item between separators (commas, "and", "or", "/", lines, table rows) that starts with a
   short name and states no golden value — fails it (over-inclusion: all five stores when three
   were asked for); a name the question gives passes when restated ("Of A, B and C, A sold the
   most"), not when listed beside a golden value ("A and B");
4. **hedges**: two different values, or a golden value and another entry, joined by "or"
   ("either 9 or 11", "Riverside or Lakeside"), or a yes/no answered both ways;
5. **rows**: with several golden rows of several columns, each row's values must be stated
   together — the mentions, in reading order, are cut into runs that each belong to one golden
   row (a run may take a shared value from its neighbour: "A and B both have 3"), and every row
   must be complete in a run: "A has 5 and B has 3" fails against (A, 3), (B, 5).
"""

from __future__ import annotations

import bisect
import datetime as dt
import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import Decimal

from evalbench.scoring.answer_text import Mention, cell_kind, dates_in, normal, numbers_in


def _words(text: str) -> list[str]:
    return text.split()


# Words that make an item prose rather than a listed entry ("which is the highest").
PROSE = frozenset(_words("""
is are was were be been being has have had do does did can could would should will may might must
which that who whom whose what where when why how it its it's they them their there here this these those
we i you he she my our your me us to of in on at for from by per than as if so but with within without
about above below over under after before between into through via according based shows show showed
found find returned returns result results answer answers query data database table tables row rows record records
total overall each all both none other others etc also respectively following followed ranked sorted ordered
listed see note not no yes only just one
"""))
FILLERS = frozenset(_words("the a an either maybe perhaps possibly probably also plus then and or just only"))
NUMBER_WORDS = {w: i for i, w in enumerate(_words("zero one two three four five six seven eight nine ten eleven twelve "
                                                  "thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty"))}
_MARKER_BEFORE = re.compile(r"(?:^|\n)[ \t>|]*(?:[-*•][ \t]*)?$")
_MARKER_AFTER = re.compile(r"^[.)](?:\s|$)")
_RANK_BEFORE = re.compile(r"(?:#|\bno\.?|\bnumber|\brank(?:ed)?|\bplace|\bposition)\s*$", re.IGNORECASE)
_TOP_BEFORE = re.compile(r"\b(?:top|bottom|first|last|best|worst|these|those|the|all)\s+$", re.IGNORECASE)
_COUNTED = re.compile(r"^\s*(?:rows?|results?|records?|entries|entry|items?|matches|match|values?)\b", re.IGNORECASE)
_ORDINAL = re.compile(r"^(?:st|nd|rd|th)\b", re.IGNORECASE)
_NOUN_AFTER = re.compile(r"^\s+(?!(?:and|or|to|nor)\b)[^\W\d]", re.IGNORECASE)
SCALES = frozenset({Decimal(5), Decimal(10), Decimal(100)})  # "4.5 out of 5", "8/10"
_SCALE_BEFORE = re.compile(r"(?:\bout\s+of|/)\s*$", re.IGNORECASE)
_OR_BETWEEN = re.compile(r"\bor\b", re.IGNORECASE)
_SENTENCE = re.compile(r"(?<=[.!?])\s+|\n")
_ITEM_SEPARATORS = re.compile(r";|,(?!\d{3}\b)|:\s|\s(?:and|or|&|plus|as\s+well\s+as|nor)\s|\||(?<=[^\W\d])\s*/\s*(?=[^\W\d])",
                              re.IGNORECASE)
_ALTERNATIVE = re.compile(r"\bor\b|/", re.IGNORECASE)  # between listed items: "Riverside or Lakeside", "Riverside/Lakeside"
# Words that introduce a restatement of what the question compares ("Of Riverside, Lakeside and
# Hillcrest, Riverside sold the most"): entries the question names may follow them.
_RESTATING = re.compile(r"\b(?:of|among|between|from|than|versus|vs|compared|comparing|whether)\b", re.IGNORECASE)
_DENYING = re.compile(r"\b(?:not|never|no)\b|n't\b", re.IGNORECASE)
_BOTH_WAYS = re.compile(r"\b(?:yes|true)\W+(?:(?:and|or)\W+)?(?:no|false)\b|\b(?:no|false)\W+(?:(?:and|or)\W+)?(?:yes|true)\b",
                        re.IGNORECASE)
_LIST_LINE = re.compile(r"^\s*(?:[-*•]|\d+[.)]|\|)")
_TABLE_RULE = re.compile(r"^\s*\|?[\s:|-]*-{2,}[\s:|-]*$")


@dataclass(frozen=True)
class Golden:
    """The golden result as ``answer_match`` reads it: distinct non-NULL cells, and each distinct
    row as the set of its cells' indices."""

    cells: list[object]
    rows: list[frozenset[int]]
    columns: list[str]

    @classmethod
    def of(cls, rows: Sequence[Sequence[object]], columns: Sequence[str]) -> Golden:
        cells = list(dict.fromkeys(v for row in rows for v in row if v is not None and _stated(v)))
        index = {_key(c): i for i, c in enumerate(cells)}
        sets = [frozenset(index[_key(v)] for v in row if v is not None and _key(v) in index) for row in rows]
        return cls(cells, [s for s in dict.fromkeys(sets) if s], list(columns))

    @property
    def text_cells(self) -> list[str]:
        return [str(c) for c in self.cells if cell_kind(c) == "text"]


def _stated(value: object) -> bool:
    return cell_kind(value) != "text" or bool(normal(str(value)))


def _key(value: object) -> tuple[str, object]:
    return (type(value).__name__, value)


@dataclass(frozen=True)
class Context:
    """What the user wrote in the phase (the question, answers to clarifications): values the
    reply may restate."""

    text: str
    numbers: frozenset[Decimal]
    dates: frozenset[dt.date]

    @classmethod
    def of(cls, texts: Sequence[str]) -> Context:
        text = "\n".join(texts)
        words = {Decimal(NUMBER_WORDS[w]) for w in re.findall(r"[a-z]+", text.lower()) if w in NUMBER_WORDS}
        return cls(normal(text), frozenset(numbers_in(text)) | frozenset(words), frozenset(dates_in(text)))

    def has_value(self, mention: Mention) -> bool:
        if mention.kind == "number":
            return any(v in self.numbers for v in mention.value)
        if mention.kind == "date":
            return mention.value[0] in self.dates
        return False

    def has_text(self, item: str) -> bool:
        wanted = normal(item)
        return bool(wanted) and re.search(r"(?<!\w)" + re.escape(wanted) + r"(?!\w)", self.text) is not None


# --------------------------------------------------------------------------- values not in the golden result


def explained(mention: Mention, text: str, golden: Golden, context: Context) -> bool:
    """A value that states no golden cell but belongs in the answer: restated from the question,
    a list marker, an ordinal, a rank, the count of the rows, a scale, or part of a column name."""
    if context.has_value(mention):
        return True
    if mention.kind != "number":
        return False
    before, after = text[max(0, mention.start - 40):mention.start], text[mention.end:mention.end + 20]
    value = mention.value[0]
    rows = len(golden.rows)
    if _ORDINAL.match(after) or (value in SCALES and _SCALE_BEFORE.search(before)):
        return True
    if _MARKER_BEFORE.search(before) and _MARKER_AFTER.match(after):
        return True
    if value == value.to_integral_value() and 1 <= value <= max(rows, 1) and _RANK_BEFORE.search(before):
        return True
    if value == rows and (_COUNTED.match(after) or _TOP_BEFORE.search(before) or (rows >= 2 and _NOUN_AFTER.match(after))):
        return True  # "2 stores match", "the top 3", "1 row" — not "3, 5 and 2"
    names = {Decimal(n) for column in golden.columns for n in re.findall(r"\d+", column)}
    return value in names


def extra_values(mentions: Sequence[Mention], text: str, golden: Golden, context: Context) -> list[Mention]:
    """Numbers, dates and times asserted in the reply that state no golden cell and are not explained."""
    return [m for m in mentions if not m.cells and not m.negated and not explained(m, text, golden, context)]


def hedges(mentions: Sequence[Mention], text: str) -> list[tuple[Mention, Mention]]:
    """Neighbouring asserted values that differ, joined by "or" in one sentence ("9 or 11")."""
    asserted = [m for m in mentions if not m.negated]
    found = []
    for first, second in itertools.pairwise(asserted):
        between = text[first.end:second.start]
        if first.cells & second.cells or _SENTENCE.search(between) or len(between.split()) > 6:
            continue
        if _OR_BETWEEN.search(between) and not (first.kind == second.kind == "number" and set(first.value) & set(second.value)):
            found.append((first, second))
    return found


# --------------------------------------------------------------------------- entities not in the golden result


def extra_entities(text: str, mentions: Sequence[Mention], golden: Golden, context: Context) -> tuple[list[str], list[str]]:
    """Listed entries, in a sentence or list that states golden values, that state none of them:
    those not in the question (over-inclusion), and those joined to a stated golden value by "or"
    (a hedge, even with an entry the question names)."""
    texts = golden.text_cells
    if not texts:
        return [], []
    longest = max(len(t.split()) for t in texts)
    lowercase = any(t == t.lower() and any(c.isalpha() for c in t) for t in texts)
    columns = {normal(c.replace("_", " ")) for c in golden.columns}
    extras: list[str] = []
    hedged: list[str] = []
    starts = [m.start for m in mentions]
    for series in _series(text):
        spans = [_within(mentions, starts, start, end) for start, end, _ in series]
        states = [any(m.cells and not m.negated for m in found) for found in spans]
        if not any(states):
            continue
        for index, ((start, end, separator), found) in enumerate(zip(series, spans, strict=True)):
            item = text[start:end]
            after = series[index + 1][2] if index + 1 < len(series) else ""
            label = index == 0 and after.startswith(":")  # "Employees: Ann, Bob"
            if found or label or normal(item) in columns or _DENYING.search(item):
                continue
            name = _entry(item, longest + 1, lowercase)
            if name is None:
                continue
            if (_ALTERNATIVE.search(separator) and states[index - 1]) or (_ALTERNATIVE.search(after) and states[index + 1]):
                hedged.append(name)
            elif not (context.has_text(name) and (_RESTATING.search(text[series[0][0]:start])
                                                  or not _beside_golden(text, series, spans, index))):
                extras.append(name)
    return extras, hedged


def _within(mentions: Sequence[Mention], starts: list[int], start: int, end: int) -> list[Mention]:
    """The mentions (in reading order, their starts in ``starts``) that overlap [start, end)."""
    first = max(0, bisect.bisect_left(starts, start) - 1)
    return [m for m in mentions[first:bisect.bisect_left(starts, end)] if m.end > start]


def _beside_golden(text: str, series: list[Item], spans: list[list[Mention]], index: int) -> bool:
    """Whether the item is listed right beside a stated golden value ("Riverside and Lakeside"),
    not among other names the question gives ("Ann Lee manages Riverside, Lakeside and Old Town")."""
    if index > 0:
        end = series[index - 1][1]
        if any(m.cells and not m.negated and not text[m.end:end].strip(" )]*\"'.") for m in spans[index - 1]):
            return True
    if index + 1 < len(series):
        start = series[index + 1][0]
        if any(m.cells and not m.negated and not text[start:m.start].strip(" ([*\"'") for m in spans[index + 1]):
            return True
    return False


def both_ways(text: str) -> bool:
    """A yes/no question answered both ways ("yes and no", "true/false")."""
    return _BOTH_WAYS.search(text) is not None


def _entry(item: str, most_words: int, lowercase: bool) -> str | None:
    """The name an item lists — its leading words up to the first prose word ("Hillcrest" in
    "Hillcrest is third") — when it looks like a listed entry; None for prose ("which is the highest")."""
    words = re.findall(r"[\w'&.-]+", item)
    while words and words[0].lower() in FILLERS:
        words = words[1:]
    name = list(itertools.takewhile(lambda w: w.lower().strip(".") not in PROSE, words))
    if not 1 <= len(name) <= max(4, most_words):
        return None
    if not (lowercase or any(w[0].isupper() or w[0].isdigit() for w in name)):
        return None
    return " ".join(name).strip(".")


Item = tuple[int, int, str]  # start, end, and the separator before it


def _series(text: str) -> list[list[Item]]:
    """Items grouped as they are listed: a block of list or table lines is one series, a prose
    sentence is one; items are cut at commas, semicolons, ": ", "and", "or", table bars."""
    series: list[list[Item]] = []
    block: list[Item] = []
    position = 0
    lines = text.split("\n")
    for index, line in enumerate(lines):
        start, position = position, position + len(line) + 1
        header = index + 1 < len(lines) and _TABLE_RULE.match(lines[index + 1]) is not None
        if _TABLE_RULE.match(line) or header or not line.strip():
            continue
        if _LIST_LINE.match(line):
            marker = re.match(r"^\s*(?:[-*•]|\d+[.)])?", line)
            block.extend(_items(line, start, marker.end() if marker else 0))
            continue
        if block:
            series.append(block)
            block = []
        for a, b, _ in _spans(line, _SENTENCE):
            series.append(_items(line[a:b], start + a, 0))
    if block:
        series.append(block)
    return series


def _items(segment: str, offset: int, skip: int) -> list[Item]:
    return [(offset + skip + a, offset + skip + b, separator) for a, b, separator in _spans(segment[skip:], _ITEM_SEPARATORS)
            if segment[skip + a:skip + b].strip(" .:;|-*•()")]


def _spans(text: str, separator: re.Pattern[str]) -> list[Item]:
    spans, start, before = [], 0, ""
    for match in separator.finditer(text):
        spans.append((start, match.start(), before))
        start, before = match.end(), match.group(0)
    spans.append((start, len(text), before))
    return spans


# --------------------------------------------------------------------------- rows stated together


def misaligned_rows(mentions: Sequence[Mention], golden: Golden) -> list[int]:
    """Golden rows (indices) whose values are not stated together (see rule 5 in the module docstring)."""
    if len(golden.rows) < 2 or all(len(row) < 2 for row in golden.rows):
        return []
    runs: list[tuple[set[int], set[int]]] = []  # (candidate rows, cells stated)
    for mention in mentions:
        if mention.negated or not mention.cells:
            continue
        rows = {r for r, row in enumerate(golden.rows) if row & mention.cells}
        if runs and runs[-1][0] & rows:
            runs[-1] = (runs[-1][0] & rows, runs[-1][1] | set(mention.cells))
        else:
            runs.append((rows, set(mention.cells)))
    return [r for r, row in enumerate(golden.rows) if not _complete(r, row, runs)]


def _complete(r: int, row: frozenset[int], runs: list[tuple[set[int], set[int]]]) -> bool:
    for i, (rows, cells) in enumerate(runs):
        if r not in rows:
            continue
        stated = cells & row
        for neighbour in (i - 1, i + 1):  # a value stated once for two rows: "A and B both have 3"
            if 0 <= neighbour < len(runs):
                stated |= runs[neighbour][1] & row
        if stated >= row:
            return True
    return False

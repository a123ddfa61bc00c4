"""CSV cells that no spreadsheet runs as a formula, and that every CSV reader can read.

Used by every CSV the harness writes (EvalBench's four files, the native score and summary files).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from evalbench.results.journal.record import clean_text

# A plain decimal number: never taken for a formula, so left as it is (``-0.5``, ``+3``, ``-1e-05``).
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(text: str) -> str:
    """A text cell no spreadsheet runs as a formula (OWASP's CSV injection advice): a text
    starting with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return gets a leading ``'``,
    unless it is a plain number. Lone surrogates become U+FFFD and NUL is written as the six
    characters ``\\u0000`` (as junit.xml writes it), so every CSV reader can read the file."""
    text = clean_text(text)
    if "\x00" in text:
        text = text.replace("\x00", "\\u0000")
    if text.startswith(_FORMULA_START) and not _NUMBER.fullmatch(text):
        return "'" + text
    return text


def safe_row(values: Iterable[object]) -> list[object]:
    """A row for ``csv.writer``: texts made safe by :func:`safe_cell`, other values (numbers,
    booleans, None) left to the writer."""
    return [safe_cell(v) if isinstance(v, str) else v for v in values]

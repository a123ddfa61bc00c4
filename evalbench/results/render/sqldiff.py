"""A token diff of the golden SQL against the agent's SQL, for the conversation view of
``report.html``.

The diff is computed here (difflib on SQL tokens: words, numbers, quoted texts, punctuation and
runs of whitespace) and embedded as data: a list of ``[op, text]`` segments, ``op`` being ``"="``
(in both), ``"-"`` (golden only) or ``"+"`` (generated only). The page's script renders each
segment with ``textContent``, so no SQL text is ever parsed as HTML.

Keywords are compared case-insensitively and whitespace runs as one space, so ``select`` vs
``SELECT``, a line break vs a space, or a final semicolon is not shown as a difference (the
generated text is shown).
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable

MAX_TOKENS = 4000  # per side: above it, no diff (difflib is quadratic in the worst case)

_TOKEN = re.compile(r"""\s+|'(?:[^']|'')*'?|"(?:[^"]|"")*"?|[A-Za-z_][A-Za-z_0-9$]*|\d+(?:\.\d+)?|.""", re.S)

Segment = list[str]  # [op, text]


def tokens(sql: str) -> list[str]:
    """``sql`` split into tokens whose concatenation is ``sql``."""
    return _TOKEN.findall(sql)


def _norm(token: str) -> str:
    if token[:1].isspace():
        return " "
    if token[:1] in ("'", '"'):
        return token  # quoted texts and identifiers keep their case
    return token.lower()


def sql_diff(golden: str | None, generated: str | None) -> list[Segment] | None:
    """The segments turning ``golden`` into ``generated``; None when either is missing, when
    they are equal up to case and whitespace, or when either has more than :data:`MAX_TOKENS` tokens."""
    if not golden or not generated or golden == generated:
        return None
    old, new = tokens(_trimmed(golden)), tokens(_trimmed(generated))
    if len(old) > MAX_TOKENS or len(new) > MAX_TOKENS:
        return None
    a, b = [_norm(t) for t in old], [_norm(t) for t in new]
    if a == b:
        return None
    out: list[Segment] = []
    matcher = difflib.SequenceMatcher(None, a, b, autojunk=False)
    for op, i1, i2, j1, j2 in matcher.get_opcodes():
        if op == "equal":
            _push(out, "=", new[j1:j2])
            continue
        if op in ("replace", "delete"):
            _push(out, "-", old[i1:i2])
        if op in ("replace", "insert"):
            _push(out, "+", new[j1:j2])
    return out


def _trimmed(sql: str) -> str:
    """Without the trailing semicolons and whitespace (a statement terminator is not a difference)."""
    return sql.rstrip().rstrip(";").rstrip()


def _push(out: list[Segment], op: str, parts: Iterable[str]) -> None:
    text = "".join(parts)
    if not text:
        return
    if out and out[-1][0] == op:
        out[-1][1] += text
    else:
        out.append([op, text])


__all__ = ["MAX_TOKENS", "sql_diff", "tokens"]

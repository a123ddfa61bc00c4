"""The leak audit of virtual-user replies.

A virtual user must explain what the user means without handing over the answer. A reply leaks
when it contains:

- the clear question verbatim (normalized: case and whitespace ignored), or
- a run of golden SQL: four or more consecutive tokens of the golden SQL (keywords, operators,
  identifiers, literals; case and whitespace ignored) that include SQL syntax — a keyword, an
  operator, or an identifier with ``_`` or ``.`` — so plain words shared with the question do not
  count. Runs made only of words of the annotated term the action names are what the term
  itself reveals and do not count either.

The audit is recorded on every vuser turn; the summary counts leaking replies.
"""

from __future__ import annotations

import re
from functools import lru_cache
from typing import TYPE_CHECKING

from sqlglot.errors import TokenError

from evalbench.sql.statements import _tokenizer

if TYPE_CHECKING:
    from evalbench.core.conversation import Conversation, VUserAction

RUN = 4  # consecutive golden SQL tokens that make a leak
# Qualified names split at "." as sqlglot's tokenizer splits the golden SQL (o.order_ts -> o . order_ts).
_WORDS = re.compile(r"[A-Za-z_][A-Za-z0-9_]*|\d+(?:\.\d+)?|'[^']*'|<=|>=|<>|!=|::|[=<>*(),+\-/%.]")
_KEYWORD_LIKE = re.compile(r"^[a-z]+$")


def _sql_tokens(sql: str) -> list[str]:
    try:
        tokens = _tokenizer().tokenize(sql)
    except TokenError:
        return [t.lower() for t in _WORDS.findall(sql)]
    out = []
    for token in tokens:
        text = token.text
        if token.token_type.name in ("STRING", "NATIONAL_STRING"):
            text = f"'{text}'"
        out.append(text.lower())
    return out


@lru_cache(maxsize=512)
def _golden_runs(sql: str) -> frozenset[tuple[str, ...]]:
    tokens = _sql_tokens(sql)
    return frozenset(tuple(tokens[i : i + RUN]) for i in range(len(tokens) - RUN + 1))


def _is_syntax(token: str, keywords: frozenset[str]) -> bool:
    return token in keywords or not token[:1].isalnum() or "_" in token or "." in token or token.startswith("'")


@lru_cache(maxsize=1)
def _keywords() -> frozenset[str]:
    from sqlglot.tokens import Tokenizer

    return frozenset(k.lower() for k in Tokenizer.KEYWORDS if k.replace(" ", "").isalpha())


def _normal(text: str) -> str:
    return " ".join(text.lower().split())


def audit_reply(text: str, conversation: Conversation, action: VUserAction | None = None) -> dict[str, list[str]]:
    """``{"leaks": [...]}``: what in ``text`` gives the answer away (empty when nothing does)."""
    phase = conversation.phase
    leaks: list[str] = []
    clear = conversation.item.question if phase.phase.value == "main" else phase.question
    if len(clear) > 20 and _normal(clear) in _normal(text):
        leaks.append("the clear question verbatim")
    allowed = set()
    for term in getattr(action, "terms", None) or []:
        allowed |= {w.lower() for w in _WORDS.findall(term)}
    reply_tokens = [t.lower() for t in _WORDS.findall(text)]
    keywords = _keywords()
    found: list[str] = []
    for sql in phase.golden_sql:
        runs = _golden_runs(sql)
        for i in range(len(reply_tokens) - RUN + 1):
            window = tuple(reply_tokens[i : i + RUN])
            if window in runs and any(_is_syntax(t, keywords) for t in window) and not set(window) <= allowed:
                found.append(" ".join(window))
    if found:
        leaks.append("golden SQL: " + "; ".join(dict.fromkeys(found[:5])))
    return {"leaks": leaks}

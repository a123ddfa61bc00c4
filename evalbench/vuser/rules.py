"""The offline, deterministic virtual user, with the same action vocabulary as the LLM one.

Encode: a question that names an annotated term (or most of its words) is ``labeled``; one that
names an identifier of the golden SQL is ``unlabeled`` with the golden clause holding it;
anything else is ``unanswerable``. Decode: what the clear question says that the ambiguous one
does not (a word-level diff of the two), the span best matching the term or segment; for a
knowledge ambiguity, the knowledge entry's prose. Never the SQL, never the whole clear question
when a diff exists — and every reply is audited for leaks anyway.
"""

from __future__ import annotations

import difflib
import re

from evalbench.config.vusers import RulesVUserConfig
from evalbench.core.conversation import Conversation, VUserAction, VUserReply
from evalbench.dataset.knowledge import Knowledge
from evalbench.sql.clauses import golden_clauses, identifiers
from evalbench.sql.statements import sqlglot_dialect
from evalbench.vuser.audit import audit_reply

_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"the", "a", "an", "of", "by", "in", "on", "for", "to", "and", "or", "with", "what", "which", "do", "you", "mean", "is", "are"}

REFUSAL = "Sorry, I can't help with that. Please go with your best judgement based on what I asked."


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


class RulesVirtualUser:
    name = "rules"

    def __init__(self, config: RulesVUserConfig, run_seed: int, knowledge: Knowledge) -> None:
        self.patience = config.patience
        self.block_leaks = config.block_leaks
        self.knowledge = knowledge

    def describe(self) -> dict[str, object]:
        return {"vuser": self.name, "patience": self.patience, "block_leaks": self.block_leaks}

    def answer(self, conversation: Conversation, question: str) -> VUserReply:
        action = self.encode(conversation, question)
        text = self.decode(conversation, action)
        audit: dict[str, object] = dict(audit_reply(text, conversation, action))
        first = audit["leaks"]
        if first and self.block_leaks:  # deterministic: the second try is the refusal
            text = REFUSAL
            audit = audit_reply(text, conversation, action) | {"regenerated": True, "first_leaks": first}
        return VUserReply(action=action, text=text, audit=audit)

    # ------------------------------------------------------------------ encode

    def encode(self, conversation: Conversation, question: str) -> VUserAction:
        item = conversation.item
        asked = question.lower()
        asked_words = _words(question)
        labeled = []
        for ambiguity in item.ambiguities:
            term_words = _words(ambiguity.term)
            mentioned = ambiguity.term.lower() in asked or (term_words and len(term_words & asked_words) * 2 > len(term_words))
            if mentioned and ambiguity.term not in labeled:
                labeled.append(ambiguity.term)
        if labeled:
            return VUserAction("labeled", terms=labeled)
        golden = conversation.phase.golden_sql[0]
        dialect = sqlglot_dialect(item.dialect)
        for name in identifiers(golden, dialect):
            variants = {name.lower(), name.lower().replace("_", " ")}
            if any(re.search(rf"\b{re.escape(v)}\b", asked) for v in variants):
                for clause in golden_clauses(golden, dialect):
                    if re.search(rf"\b{re.escape(name.lower())}\b", clause.lower()):
                        return VUserAction("unlabeled", segment=clause)
        return VUserAction("unanswerable")

    # ------------------------------------------------------------------ decode

    def decode(self, conversation: Conversation, action: VUserAction) -> str:
        main = conversation.phase.phase.value == "main"
        clear = conversation.item.question if main else conversation.phase.question
        spans = clarifying_spans(conversation.item.opening_question, clear) if main else []
        if action.kind == "labeled":
            parts = []
            for term in action.terms:
                ambiguity = next(a for a in conversation.item.ambiguities if a.term == term)
                entry = self.knowledge.get(conversation.item.database, {}).get(ambiguity.knowledge_id or -1)
                if entry is not None:
                    # The prose of the knowledge entry; its first definition line is often a formula.
                    prose = entry.definition[-1] if len(entry.definition) > 1 else ""
                    parts.append(f'By "{term}" I mean {entry.name}: {entry.description} {prose}'.strip())
                    continue
                hint = _words(term) | identifier_words(ambiguity.sql_snippet or "")
                parts.append(f'By "{term}" I mean {_best_span(spans, term, hint) or _best_sentence(clear, hint)}')
            return " ".join(parts)
        if action.kind == "unlabeled":
            hint = identifier_words(action.segment or "")
            return f"To be precise: {_best_span(spans, '', hint) or _best_sentence(clear, hint)}"
        return REFUSAL


def clarifying_spans(ambiguous: str, clear: str) -> list[tuple[str, str]]:
    """(ambiguous words, clear words) for each place where the clear question says more or
    something else: a word-level diff of the two questions."""
    a, c = ambiguous.split(), clear.split()

    def key(word: str) -> str:
        return word.lower().strip(".,;:?!'\"()")

    matcher = difflib.SequenceMatcher(a=[key(w) for w in a], b=[key(w) for w in c], autojunk=False)
    return [
        (" ".join(a[i1:i2]), " ".join(c[j1:j2]).rstrip(".,;:?!"))
        for tag, i1, i2, j1, j2 in matcher.get_opcodes()
        if tag in ("replace", "insert") and c[j1:j2]
    ]


def _best_span(spans: list[tuple[str, str]], term: str, hint: set[str]) -> str | None:
    """The clear-side span that replaced ``term``, else the one sharing most words with ``hint``."""
    if not spans:
        return None
    term_words = _words(term)
    scored = [(len(_words(old) & term_words) * 10 + len(_words(new) & hint), new) for old, new in spans]
    score, best = max(scored, key=lambda x: x[0])
    return best if score > 0 or len(spans) == 1 else None


def identifier_words(sql: str) -> set[str]:
    words: set[str] = set()
    for name in identifiers(sql):
        words |= _words(name.replace("_", " "))
    return words


def _best_sentence(text: str, hint: set[str]) -> str:
    sentences = [s.strip() for s in re.split(r"(?<=[.?!])\s+", text) if s.strip()]
    if not sentences:
        return text
    return max(sentences, key=lambda s: len(_words(s) & hint))

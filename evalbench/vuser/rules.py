"""The offline, deterministic virtual user, with the same action vocabulary as the LLM one.

Encode: a question that names an annotated term (or most of its words) is ``labeled``; one that
names an identifier of the golden SQL is ``unlabeled`` with the golden clause holding it;
anything else is ``unanswerable``. Decode: templates filled from the clear question, never
from the SQL itself, so answers do not leak the golden query.
"""

from __future__ import annotations

import re
from typing import Any

from evalbench.conversation import Conversation, VUserAction, VUserReply
from evalbench.dataset.knowledge import Knowledge
from evalbench.sqlclauses import golden_clauses, identifiers
from evalbench.vuser import VUSERS

_WORD = re.compile(r"[a-z0-9]+")
_STOP = {"the", "a", "an", "of", "by", "in", "on", "for", "to", "and", "or", "with", "what", "which", "do", "you", "mean", "is", "are"}

REFUSAL = "Sorry, I can't help with that. Please go with your best judgement based on what I asked."


def _words(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP and len(w) > 1}


class RulesVirtualUser:
    name = "rules"

    def __init__(self, config: Any, run_seed: int, knowledge: Knowledge) -> None:
        self.patience = config.patience
        self.knowledge = knowledge

    def describe(self) -> dict[str, Any]:
        return {"vuser": self.name, "patience": self.patience}

    def answer(self, conversation: Conversation, question: str) -> VUserReply:
        action = self.encode(conversation, question)
        return VUserReply(action=action, text=self.decode(conversation, action))

    # ------------------------------------------------------------------ encode

    def encode(self, conversation: Conversation, question: str) -> VUserAction:
        item = conversation.item
        asked = question.lower()
        asked_words = _words(question)
        labeled = []
        for ambiguity in item.ambiguities:
            term_words = _words(ambiguity.term)
            if ambiguity.term.lower() in asked or (term_words and len(term_words & asked_words) * 2 > len(term_words)):
                if ambiguity.term not in labeled:
                    labeled.append(ambiguity.term)
        if labeled:
            return VUserAction("labeled", terms=labeled)
        golden = conversation.phase.golden_sql[0]
        for name in identifiers(golden):
            variants = {name.lower(), name.lower().replace("_", " ")}
            if any(re.search(rf"\b{re.escape(v)}\b", asked) for v in variants):
                for clause in golden_clauses(golden):
                    if re.search(rf"\b{re.escape(name.lower())}\b", clause.lower()):
                        return VUserAction("unlabeled", segment=clause)
        return VUserAction("unanswerable")

    # ------------------------------------------------------------------ decode

    def decode(self, conversation: Conversation, action: VUserAction) -> str:
        clear = conversation.item.question if conversation.phase.phase.value == "main" else conversation.phase.question
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
                parts.append(f'By "{term}" I mean: {_best_sentence(clear, hint)}')
            return " ".join(parts)
        if action.kind == "unlabeled":
            return f"To be precise: {_best_sentence(clear, identifier_words(action.segment or ''))}"
        return REFUSAL


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


VUSERS.register("rules")(RulesVirtualUser)

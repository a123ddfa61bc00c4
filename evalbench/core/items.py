"""The typed dataset item. Every loader maps its raw records to :class:`Item`."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Literal, SupportsIndex, SupportsInt

from pydantic import BaseModel, ConfigDict, Field

AmbiguityKind = Literal["critical", "non_critical", "knowledge"]
DatasetFormat = Literal["bird-interact", "evalbench"]


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Conditions(_Frozen):
    """How results are compared (BIRD-Interact's ``conditions``)."""

    order: bool = False
    distinct: bool = False
    decimal: int = -1  # round numbers to this many places before comparing; -1: no rounding


class Ambiguity(_Frozen):
    """One annotated ambiguity of the question: the vague ``term`` and the golden SQL that resolves it."""

    term: str
    sql_snippet: str | None = None
    kind: AmbiguityKind
    type: str | None = None
    is_mask: bool = False
    knowledge_id: int | None = None  # BIRD-Interact's deleted_knowledge


class FollowUp(_Frozen):
    question: str
    golden_sql: list[str]
    conditions: Conditions = Conditions()
    category: str = "Query"
    type: str | None = None
    external_knowledge: list[object] = Field(default_factory=list)  # ids (3 or "3") or texts
    test_cases: list[str] = Field(default_factory=list)


class Item(_Frozen):
    """One dataset entry, for one dialect."""

    id: str
    database: str
    dialect: str = "postgres"
    format: DatasetFormat = "evalbench"  # decides how several golden SQLs are read, and the default semantics
    question: str  # the clear, fully specified question
    ambiguous_question: str | None = None  # what the virtual user actually asks first
    ambiguities: list[Ambiguity] = Field(default_factory=list)
    golden_sql: list[str]  # BIRD-Interact: one script, run in order; EvalBench: alternatives, any may match
    conditions: Conditions = Conditions()
    conditions_explicit: bool = False  # conditions came from the item (else derived from the golden SQL)
    category: str = "Query"  # BIRD-Interact: Query | Management
    query_type: str = "dql"  # EvalBench: dql | dml | ddl
    difficulty: str | None = None
    preprocess_sql: list[str] = Field(default_factory=list)
    clean_up_sqls: list[str] = Field(default_factory=list)
    test_cases: list[str] = Field(default_factory=list)
    eval_query: list[str] = Field(default_factory=list)
    external_knowledge: list[object] = Field(default_factory=list)  # ids (3 or "3") or texts
    follow_up: FollowUp | None = None
    tags: list[str] = Field(default_factory=list)
    other: dict[str, object] = Field(default_factory=dict)
    source: str = ""  # file:line, for messages

    @property
    def opening_question(self) -> str:
        return self.ambiguous_question or self.question

    @property
    def ambiguities_to_ask(self) -> int:
        """The annotated ambiguities the agent should ask about (critical and knowledge ones)."""
        return sum(1 for a in self.ambiguities if a.kind != "non_critical")

    @property
    def needs_clarification(self) -> bool:
        """Whether the opening question leaves something the agent should ask about."""
        return self.ambiguities_to_ask > 0

    @property
    def deleted_knowledge(self) -> frozenset[int]:
        """Knowledge entries the item's ambiguities deleted (BIRD-Interact's ``deleted_knowledge``):
        never shown to an agent, which is meant to ask about them."""
        return frozenset(a.knowledge_id for a in self.ambiguities if a.knowledge_id is not None)

    @property
    def golden_is_script(self) -> bool:
        """BIRD-Interact's ``sol_sql`` list is one script (its evaluator runs the statements in
        order and compares the last result); EvalBench's ``golden_sql`` list holds alternatives."""
        return self.format == "bird-interact"

    @property
    def is_query(self) -> bool:
        """A question answered by a result set (not a data-changing task)."""
        return self.category == "Query" and self.query_type == "dql"


def knowledge_refs(refs: Iterable[object]) -> list[int]:
    """The ids among ``external_knowledge`` references, in order (3 and "3" alike; a reference
    that is not a number is skipped)."""
    ids = []
    for ref in refs:
        if not isinstance(ref, (str, bytes, SupportsInt, SupportsIndex)):
            continue
        try:
            ids.append(int(ref))
        except (TypeError, ValueError):
            continue
    return ids


class RecordError(_Frozen):
    """A dataset record that could not be loaded. It is reported, never silently dropped."""

    file: str
    line: int
    message: str
    item_id: str | None = None

    def __str__(self) -> str:
        ident = f" (item {self.item_id})" if self.item_id else ""
        return f"{self.file}:{self.line}{ident}: {self.message}"

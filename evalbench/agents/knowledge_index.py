"""A keyword index over what documents a database: its knowledge entries and its columns, ranked
by BM25 — the agents' ``search_knowledge`` tool, as a documentation index would serve it.

The index is SQLite's FTS5 (in the standard library) with the ``porter unicode61`` tokenizer
(case folded, diacritics removed, English stemming: "members" finds "member") and FTS5's own
``bm25()`` ranking (k1 = 1.2, b = 0.75), a word in the title (an entry's name, a column's
``table.column``) weighing ``TITLE_WEIGHT`` times one in the body. A query is read as words only: each word becomes a
quoted FTS5 term and the terms are OR-ed, so no query text is FTS5 syntax (an operator, a
column filter or an unbalanced quote in a question is a word, never an error).
"""

from __future__ import annotations

import re
import sqlite3
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field

from evalbench.backends.tables import TableInfo
from evalbench.dataset.knowledge import KnowledgeEntry

_WORD = re.compile(r"\w+", re.UNICODE)
TITLE_WEIGHT = 4.0  # a name says what the entry is about; its definition mentions other entries too
MAX_QUERY_TERMS = 64  # a question, not a document: the rest of a longer query is ignored


@dataclass(frozen=True)
class Document:
    """One searchable thing: a knowledge entry (``kind`` knowledge, ``key`` its id) or a column
    (``kind`` column, ``key`` ``table.column``)."""

    kind: str
    key: str
    title: str
    body: str
    fields: Mapping[str, object] = field(default_factory=dict, hash=False, compare=False)


def knowledge_documents(entries: dict[int, KnowledgeEntry]) -> list[Document]:
    return [Document("knowledge", str(e.id), e.name, " ".join((e.description, *e.definition)),
                     {"id": e.id, "name": e.name, "description": e.description,
                      "definition": list(e.definition), **({"type": e.type} if e.type else {})})
            for e in entries.values()]


def column_documents(tables: list[TableInfo], meanings: dict[tuple[str, str], str] | None = None) -> list[Document]:
    """A document per column: its names (split on underscores too, so "unit price" finds
    unit_price), its type and its description when the dataset has one."""
    meanings = meanings or {}
    documents = []
    for t in tables:
        for name, kind in t.columns:
            described = meanings.get((t.name.lower(), name.lower()))
            fields = {"table": t.name, "column": name, "type": kind, **({"description": described} if described else {})}
            body = f"{t.name} {name} {name.replace('_', ' ')} {kind} {described or ''}"
            documents.append(Document("column", f"{t.name}.{name}", f"{t.name}.{name}", body, fields))
    return documents


class KnowledgeIndex:
    """BM25 over ``documents``; safe to search from several threads."""

    def __init__(self, documents: list[Document]) -> None:
        self.documents = documents
        self._lock = threading.Lock()
        self._db = sqlite3.connect(":memory:", check_same_thread=False)
        self._db.execute("CREATE VIRTUAL TABLE docs USING fts5(title, body, tokenize = 'porter unicode61')")
        self._db.executemany("INSERT INTO docs (rowid, title, body) VALUES (?, ?, ?)",
                             [(i, d.title, d.body) for i, d in enumerate(documents)])

    def search(self, query: str, limit: int, exclude: frozenset[tuple[str, str]] = frozenset()) -> list[tuple[Document, float]]:
        """The best ``limit`` documents for the words of ``query`` with their BM25 score (higher
        is better), leaving out the (kind, key) pairs in ``exclude``."""
        words = list(dict.fromkeys(w.lower() for w in _WORD.findall(query)))[:MAX_QUERY_TERMS]
        if not words or limit <= 0:
            return []
        match = " OR ".join('"' + w.replace('"', '""') + '"' for w in words)
        with self._lock:
            rows = self._db.execute(f"SELECT rowid, bm25(docs, {TITLE_WEIGHT}, 1.0) AS rank FROM docs WHERE docs MATCH ? "
                                    "ORDER BY rank, rowid LIMIT ?", (match, limit + len(exclude))).fetchall()
        found = [(self.documents[rowid], -score) for rowid, score in rows]
        return [(d, s) for d, s in found if (d.kind, d.key) not in exclude][:limit]

    def close(self) -> None:
        with self._lock:
            self._db.close()

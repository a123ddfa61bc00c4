"""A hostile agent for end-to-end attack tests: an OpenAI-compatible fake server (a real HTTP
server, :class:`tests.fake_llm_server.FakeLLMServer`) that answers each item's question with the
attack SQL scripted for it, as a ``run_sql`` tool call (what the ``openai_compat`` agent reads as
SQL in its default ``function_calling`` mode). The item is recognised by a tag ``[attack:<id>]``
in its question.

Also: a tiny BIRD-Interact JSONL dataset on the demo database, and a run config around both.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from tests.fake_llm_server import FakeLLMServer, Received, Scripted

ROOT = Path(__file__).resolve().parent.parent
DEMO_SETUP = ROOT / "datasets" / "demo" / "setup"
TAG = re.compile(r"\[attack:([A-Za-z0-9_-]+)\]")


def completion(sql: str | None, text: str | None = None, question: str | None = None) -> dict[str, Any]:
    """A chat completion whose answer is ``sql`` (a run_sql tool call) or ``question`` (an
    ask_user tool call), with optional text."""
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if sql is not None:
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": "run_sql", "arguments": json.dumps({"sql": sql})}}]
    elif question is not None:
        message["tool_calls"] = [{"id": "call_1", "type": "function",
                                  "function": {"name": "ask_user", "arguments": json.dumps({"question": question})}}]
    return {"id": "cmpl-attack", "object": "chat.completion", "model": "attacker",
            "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if message.get("tool_calls") else "stop"}],
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}


class AttackAgent:
    """The fake model server. ``replies[item_id]`` is the SQL sent back for that item, or a ready
    chat-completion body (a dict), or raw bytes, or a whole :class:`Scripted` response (e.g. one
    sent a byte at a time); every item asked is logged in ``asked``."""

    def __init__(self, replies: dict[str, str | bytes | dict[str, Any] | Scripted]) -> None:
        self.replies = replies
        self.asked: list[str] = []
        self.asked_at: list[tuple[str, float]] = []  # (item id, time.monotonic()) of every request
        self.server = FakeLLMServer(self._respond)

    def _respond(self, request: Received) -> Scripted:
        body = request.json()
        if not isinstance(body, dict):  # the preflight's GET /models
            return Scripted(404, {"error": {"message": "attack agent: no models listed"}})
        texts = [m.get("content") or "" for m in body.get("messages", []) if m.get("role") == "user"]
        found = [TAG.search(t) for t in texts]
        ids = [m.group(1) for m in found if m]
        if not ids or ids[0] not in self.replies:
            return Scripted(400, {"error": {"message": f"attack agent: no reply for {ids}"}})
        self.asked.append(ids[0])
        self.asked_at.append((ids[0], time.monotonic()))
        reply = self.replies[ids[0]]
        if isinstance(reply, Scripted):
            return reply
        if isinstance(reply, str):
            reply = completion(reply)
        return Scripted(200, reply)  # a dict is sent as JSON (lone surrogates as \\ud800 escapes), bytes as they are

    @property
    def base_url(self) -> str:
        return self.server.url + "/v1"

    def close(self) -> None:
        self.server.close()

    def __enter__(self) -> AttackAgent:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def item(item_id: str, golden: str | list[str], *, category: str = "Query", test_cases: Iterable[str] = (),
         database: str = "greenleaf", order: bool = False) -> dict[str, Any]:
    """One BIRD-Interact record whose question carries the attack tag."""
    question = f"Answer item [attack:{item_id}] please."
    return {
        "instance_id": item_id, "selected_database": database, "query": question, "amb_user_query": question,
        "preprocess_sql": [], "clean_up_sqls": [], "test_cases": list(test_cases), "category": category,
        "sol_sql": [golden] if isinstance(golden, str) else list(golden),
        "conditions": {"decimal": -1, "distinct": False, "order": order}, "difficulty_tier": "Simple",
        "external_knowledge": [], "user_query_ambiguity": {"critical_ambiguity": [], "non_critical_ambiguity": []},
        "knowledge_ambiguity": [], "follow_up": None,
    }


def write_run(tmp: Path, items: list[dict[str, Any]], agent: AttackAgent, *, sqlexec_runners: int = 1,
              max_in_flight: int = 1, statement_timeout_s: float = 3.0, setup_directory: Path | None = DEMO_SETUP,
              database_configs: list[dict[str, Any]] | None = None, scorers: dict[str, Any] | None = None,
              conversation_timeout_s: float = 120, execution: dict[str, Any] | None = None,
              model: dict[str, Any] | None = None, dialect: str = "postgres") -> Path:
    """Write the dataset and a run config into ``tmp``; returns the config path."""
    dataset = tmp / "attacks.jsonl"
    dataset.write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    config = {
        "dataset_config": str(dataset),
        "dataset_format": "bird-interact",
        "setup_directory": str(setup_directory) if setup_directory else None,
        "dialects": [dialect],
        "database_configs": database_configs or [],
        "model_config": {"agent": "openai_compat", "base_url": agent.base_url, "model": "attacker", "timeout_s": 30,
                         "retry": {"max_retries": 0, "backoff_s": 0.01, "max_backoff_s": 0.05}, **(model or {})},
        "vuser_model_config": {"vuser": "rules"},
        "scorers": scorers or {"exec_match": {}, "test_cases": {}, "executable": {}},
        "runners": {"promptgen_runners": 1, "sqlgen_runners": max(1, max_in_flight), "vuser_runners": 1,
                    "sqlexec_runners": sqlexec_runners, "scoring_runners": 1},
        "max_in_flight": max_in_flight,
        "execution": {"statement_timeout_s": statement_timeout_s, "max_rows": 1000, "preview_rows": 5, **(execution or {})},
        "conversation_timeout_s": conversation_timeout_s,
        "seed": 1,
    }
    path = tmp / "attacks.yaml"
    path.write_text(json.dumps(config, indent=1), encoding="utf-8")  # JSON is YAML
    return path

"""What the LLM agents share: reading a reply (precedence rules) and rendering the system prompt."""

from __future__ import annotations

import pytest

from evalbench.agents.chat import REPLY_FORMATS, SYSTEM_PROMPT, classify, render_system_prompt
from evalbench.agents.config import default_prompt
from evalbench.core.conversation import ReplyKind, ToolCall


@pytest.mark.parametrize(
    ("text", "calls", "kind", "sql", "reply_text"),
    [
        # tools
        ("", [ToolCall("run_sql", {"sql": " SELECT 1 "})], ReplyKind.SQL, "SELECT 1", ""),
        ("", [ToolCall("ask_user", {"question": "Which?"})], ReplyKind.CLARIFICATION, None, "Which?"),
        ("", [ToolCall("run_sql", {"sql": "SELECT 1"}), ToolCall("run_sql", {"sql": "SELECT 2"})], ReplyKind.SQL, "SELECT 2", ""),
        ("", [ToolCall("ask_user", {"question": "Which?"}), ToolCall("run_sql", {"sql": "SELECT 1"})], ReplyKind.SQL, "SELECT 1",
         "Which?"),
        ("", [ToolCall("run_sql", {"sql": ""}), ToolCall("ask_user", {"question": "Which?"})], ReplyKind.CLARIFICATION, None,
         "Which?"),
        # a model offered tools may still answer in text
        ("<sql>SELECT 3</sql>", [ToolCall("lookup", {})], ReplyKind.SQL, "SELECT 3", ""),
        # tags and fences
        ("<SQL>SELECT 1</SQL> then <sql>SELECT 2</sql>", [], ReplyKind.SQL, "SELECT 2", "then"),
        ("<question>Which?</question>\n```postgresql\nSELECT 4\n```", [], ReplyKind.SQL, "SELECT 4", "Which?"),
        ("Sure.\n<sql>\nSELECT 5 FROM t", [], ReplyKind.SQL, "SELECT 5 FROM t", "Sure."),  # cut off by max tokens
        ("<think>is it <sql>SELECT 0</sql>?</think><question>Which?</question>", [], ReplyKind.CLARIFICATION, None, "Which?"),
        ("```python\nprint(1)\n```", [], ReplyKind.ANSWER, None, "```python\nprint(1)\n```"),
        ("Is that per store?", [], ReplyKind.ANSWER, None, "Is that per store?"),
    ],
)
def test_classify(text, calls, kind, sql, reply_text):
    reply = classify(text, calls)
    assert reply.kind is kind
    assert reply.sql == sql
    assert reply.text == reply_text
    assert reply.tool_calls == calls


def test_classify_nothing_usable():
    assert classify("", []).error_kind == "empty"
    assert classify("  <think>hm</think> ", []).error_kind == "empty"
    unusable = classify("", [ToolCall("run_sql", {"_raw": "{oops"})])
    assert unusable.kind is ReplyKind.ERROR and unusable.error_kind == "protocol" and "run_sql" in unusable.error


def test_default_prompt_renders_every_placeholder():
    template = default_prompt(SYSTEM_PROMPT).read_text()
    for placeholder in ("{schema}", "{knowledge}", "{reply_format}", "{database}", "{dialect_name}"):
        assert placeholder in template
    for instructions in REPLY_FORMATS.values():
        text = render_system_prompt(template, schema="CREATE TABLE t (a int);", knowledge="", reply_format=instructions)
        assert "CREATE TABLE t (a int);" in text and instructions in text
        assert "{" not in text.replace("{a", "")  # no placeholder left
        assert "\n\n\n" not in text  # an empty knowledge section leaves no gap
        assert "ONE short clarification question" in text
    sqlite = render_system_prompt(template, schema="s", knowledge="", reply_format="R", database="shop", dialect="sqlite")
    assert "one SQLite database, `shop`," in sqlite and "ONE SQLite statement" in sqlite and "PostgreSQL" not in sqlite


def test_template_without_reply_format_gets_it_appended_and_other_braces_survive():
    text = render_system_prompt("S: {schema} -- '{x}' {knowledge}", schema="", knowledge="K", reply_format="R")
    assert text == "S: (no schema available) -- '{x}' K\n\nR\n"

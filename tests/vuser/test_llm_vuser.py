"""The llm virtual user: the real google-genai SDK pointed (base_url) at the local fake Gemini API.

The fake tells the two steps apart by the first line of the prompt (the encode and decode
templates start differently) and answers each from its own script.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import deque
from collections.abc import Callable, Iterator
from functools import lru_cache
from pathlib import Path
from typing import Any

import pytest

from evalbench.agents.config import default_prompt
from evalbench.config import LlmVUserConfig, load_run_config
from evalbench.core.conversation import Phase, PhaseRecord
from evalbench.core.errors import ConfigError
from evalbench.dataset import Item, load_items
from evalbench.dataset.knowledge import load_knowledge
from evalbench.results import read_journal
from evalbench.run import parts as run_parts
from evalbench.run import run as run_evaluation
from evalbench.run.stages import new_conversation
from evalbench.vuser import build_vuser
from evalbench.vuser.llm import InvalidAction, parse_action
from evalbench.vuser.rules import REFUSAL
from tests.fake_llm_server import FakeLLMServer, Received, Scripted
from tests.helpers import make_item

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "datasets" / "demo"
MODEL = "gemini-vuser-test"
PATH = f"/v1beta/models/{MODEL}:generateContent"
KEY_ENV = "TEST_VUSER_GEMINI_KEY"
FAST_RETRY = {"max_retries": 2, "backoff_s": 0.01, "max_backoff_s": 0.05}
ENCODE_FIRST_LINE = default_prompt("vuser_encode.txt").read_text().splitlines()[0]
DECODE_FIRST_LINE = default_prompt("vuser_decode.txt").read_text().splitlines()[0]


# --------------------------------------------------------------------------- the fake Gemini API


def completion(text: str) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 50, "candidatesTokenCount": 5, "totalTokenCount": 55}, "modelVersion": MODEL}


def api_error(code: int, status: str, message: str = "error") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def prompt_of(request: Received) -> str:
    return request.json()["contents"][0]["parts"][0]["text"]


def step_of(request: Received) -> str:
    first = prompt_of(request).splitlines()[0]
    if first == ENCODE_FIRST_LINE:
        return "encode"
    if first == DECODE_FIRST_LINE:
        return "decode"
    raise AssertionError(f"neither an encode nor a decode prompt: {first[:80]!r}")


class VUserScript:
    """Per-step queues of completions (text) or raw responses (:class:`Scripted`); when a
    queue is empty, ``fallback[step](request)`` answers."""

    def __init__(self) -> None:
        self.queues: dict[str, deque[str | Scripted]] = {"encode": deque(), "decode": deque()}
        self.fallback: dict[str, Callable[[Received], str]] = {}
        self.seen: list[tuple[str, Received]] = []

    def encode(self, *replies: str | Scripted) -> None:
        self.queues["encode"].extend(replies)

    def decode(self, *replies: str | Scripted) -> None:
        self.queues["decode"].extend(replies)

    def steps(self) -> list[str]:
        return [step for step, _ in self.seen]

    def requests(self, step: str) -> list[Received]:
        return [r for s, r in self.seen if s == step]

    def __call__(self, request: Received) -> Scripted:
        step = step_of(request)
        self.seen.append((step, request))
        queue = self.queues[step]
        if queue:
            reply = queue.popleft()
        elif step in self.fallback:
            reply = self.fallback[step](request)
        else:
            return Scripted(500, api_error(500, "INTERNAL", f"fake server: no {step} scripted"))
        return reply if isinstance(reply, Scripted) else Scripted(200, completion(reply))


@pytest.fixture
def script() -> VUserScript:
    return VUserScript()


@pytest.fixture
def server(script: VUserScript) -> Iterator[FakeLLMServer]:
    with FakeLLMServer(responder=script) as fake:
        yield fake


@pytest.fixture
def gemini_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "vuser-key-456")
    for name in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def make_vuser(server: FakeLLMServer, gemini_env: None) -> Iterator[Callable[..., Any]]:
    built: list[Any] = []

    def make(**options: Any) -> Any:
        settings: dict[str, Any] = {"vuser": "llm", "model": MODEL, "api_key_env": KEY_ENV, "base_url": server.url,
                                    "retry": FAST_RETRY} | options
        vuser = build_vuser(LlmVUserConfig(**settings), 7, knowledge())
        built.append(vuser)
        return vuser

    yield make
    for vuser in built:
        vuser.close()


# --------------------------------------------------------------------------- items


@lru_cache(maxsize=1)
def demo_items() -> dict[str, Item]:
    items, errors = load_items(DEMO / "greenleaf.jsonl")
    assert not errors
    return {item.id: item for item in items}


@lru_cache(maxsize=1)
def knowledge() -> Any:
    return load_knowledge(DEMO / "knowledge")


def conversation(item_id: str) -> Any:
    return new_conversation(demo_items()[item_id], seed=1, max_turns=10, patience=3, timeout_s=60)


# greenleaf_16: "Which store did best last spring?" — critical terms "last spring" and "did best".
# greenleaf_22: "Which suppliers are slow to deliver?" — golden SQL without qualified names.
# greenleaf_33: knowledge term "low-stock products" (knowledge entry 6).
# greenleaf_29: golden SQL with JSON operators (p.care_info->>'water').


# --------------------------------------------------------------------------- every action kind


def test_labeled_one_term_is_normalised_and_decoded(server, script, make_vuser):
    script.encode('labeled("LAST  Spring")')
    script.decode("I mean March through May of 2025.")
    vuser = make_vuser(temperature=0.2)
    reply = vuser.answer(conversation("greenleaf_16"), "What period is last spring?")
    assert reply.error is None and reply.text == "I mean March through May of 2025."
    assert reply.action.kind == "labeled" and reply.action.terms == ["last spring"]
    assert reply.audit["leaks"] == [] and reply.audit["encode_raw"] == 'labeled("LAST  Spring")'
    assert [(c["step"], c["status"]) for c in reply.audit["calls"]] == [("encode", "ok"), ("decode", "ok")]
    assert script.steps() == ["encode", "decode"]
    encode, decode = (r for _, r in script.seen)
    assert (encode.method, encode.path) == ("POST", PATH) and encode.headers["x-goog-api-key"] == "vuser-key-456"
    body = encode.json()
    assert body["generationConfig"] == {"temperature": 0.2, "seed": 7}  # the seed defaults to the run seed
    prompt = prompt_of(encode)
    assert "What period is last spring?" in prompt
    assert """- "last spring" -> o.order_ts >= '2025-03-01' AND o.order_ts < '2025-06-01' (value_ambiguity)""" in prompt
    assert "- GROUP BY s.store_id, s.store_name" in prompt and not re.search(r"\{(question|ambiguities|golden_clauses)\}", prompt)
    decoded = prompt_of(decode)
    assert 'labeled("last spring")' in decoded and "What period is last spring?" in decoded
    assert demo_items()["greenleaf_16"].question in decoded  # the clear query, for the decoder's eyes only


def test_labeled_two_terms(script, make_vuser):
    script.encode('labeled("last spring", "did best")')
    script.decode("Spring means March to May 2025, and best means the highest net sales.")
    reply = make_vuser().answer(conversation("greenleaf_16"), "Best by what measure, and which months?")
    assert reply.error is None and reply.action.terms == ["last spring", "did best"]
    assert str(reply.action) == 'labeled("last spring", "did best")'
    assert 'labeled("last spring", "did best")' in prompt_of(script.requests("decode")[0])


def test_labeled_knowledge_term_gets_the_knowledge_entry(script, make_vuser):
    script.encode('labeled("low-stock products")')
    script.decode("Active products with fewer than ten units on hand.")
    reply = make_vuser().answer(conversation("greenleaf_33"), "What counts as low stock?")
    assert reply.error is None and reply.action.terms == ["low-stock products"]
    decoded = prompt_of(script.requests("decode")[0])
    assert "Low Stock Product" in decoded and "A product the buying team must reorder soon." in decoded
    assert "Discontinued products" in decoded  # the prose definition, not the formula
    assert "products.stock_qty < 10" not in decoded


def test_unlabeled_segment_is_matched_ignoring_case_and_spacing(script, make_vuser):
    script.encode("```\nunlabeled(\"P.CARE_INFO->>'water' in ('biweekly', 'monthly')\")\n```")
    script.decode("Plants that need water only every two weeks or once a month.")
    reply = make_vuser().answer(conversation("greenleaf_29"), "How often can they go without water?")
    assert reply.error is None and reply.action.kind == "unlabeled"
    assert reply.action.segment == "P.CARE_INFO->>'water' in ('biweekly', 'monthly')"
    assert reply.text == "Plants that need water only every two weeks or once a month."


def test_unanswerable_is_the_refusal_without_a_decode_call(script, make_vuser):
    script.encode("unanswerable()")
    reply = make_vuser().answer(conversation("greenleaf_16"), "What is your favourite colour?")
    assert reply.error is None and reply.action.kind == "unanswerable" and reply.text == REFUSAL
    assert script.steps() == ["encode"] and [c["step"] for c in reply.audit["calls"]] == ["encode"]
    assert reply.audit["leaks"] == []


# --------------------------------------------------------------------------- invalid actions


def test_unknown_term_then_a_valid_action(script, make_vuser):
    script.encode('labeled("bought")', 'labeled("in a while")')  # "bought" is non-critical: not offered
    script.decode("Nothing since the start of 2025.")
    reply = make_vuser().answer(conversation("greenleaf_17"), "How long is a while?")
    assert reply.error is None and reply.action.terms == ["in a while"]
    assert script.steps() == ["encode", "encode", "decode"]
    first, second, _ = reply.audit["calls"]
    assert 'unknown term "bought"' in first["invalid"] and first["output"] == 'labeled("bought")'
    assert "invalid" not in second and reply.audit["encode_raw"] == 'labeled("in a while")'
    retry = script.requests("encode")[1].json()["contents"]
    assert [c["role"] for c in retry] == ["user", "model", "user"]
    assert retry[1]["parts"][0]["text"] == 'labeled("bought")' and 'unknown term "bought"' in retry[2]["parts"][0]["text"]


def test_unparsable_actions_until_retries_run_out_are_an_error_reply(script, make_vuser):
    script.encode("The user means last spring.", 'labeled("last spring") unanswerable()')  # labeled + labeled merge (EvalBench)
    reply = make_vuser(invalid_action_retries=1).answer(conversation("greenleaf_16"), "Which months?")
    assert reply.action is None and reply.text == ""
    assert reply.error.startswith("invalid action: more than one action") and "after 2 encode attempts" in reply.error
    assert script.steps() == ["encode", "encode"]
    assert [c.get("invalid", "")[:24] for c in reply.audit["calls"]] == ["the reply must be exactl", "more than one action: re"]


def test_segment_outside_the_golden_sql_is_invalid(script, make_vuser):
    script.encode("unlabeled(\"o.status = 'pending'\")", 'unlabeled(" , ")', "unanswerable()")
    reply = make_vuser().answer(conversation("greenleaf_16"), "Which statuses?")
    assert reply.action.kind == "unanswerable"
    assert "not part of the correct SQL" in reply.audit["calls"][0]["invalid"] and "needs a SQL segment" in reply.audit["calls"][1]["invalid"]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ('labeled("a")', 'labeled("a")'),
        ('  Labeled ( "a" ,"b c" )\n', 'labeled("a", "b c")'),
        ('`unanswerable()`', "unanswerable()"),
        ('```text\nunlabeled("x = \\"Y\\" AND z LIKE \'a\\\\_%\'")\n```', 'unlabeled("x = "Y" AND z LIKE \'a\\_%\'")'),
        ('unlabeled("a \\n b")', 'unlabeled("a \\n b")'),  # other escapes stay as written
    ],
)
def test_parse_action(text, expected):
    assert str(parse_action(text)) == expected


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("", "empty completion"),
        ("Action: labeled(\"a\")", "exactly one of"),
        ('labeled("a"), unlabeled("b")', "more than one action"),
        ('labeled("a") because', "text after the action"),
        ('labeled("a)', "unterminated string"),
        ('labeled("a" "b")', "expected ','"),
        ("labeled('a')", "double-quoted"),
        ("labeled()", "at least one term"),
        ('unlabeled("a", "b")', "exactly one SQL segment"),
        ('unanswerable("a")', "takes no argument"),
    ],
)
def test_parse_action_rejects(text, reason):
    with pytest.raises(InvalidAction, match=re.escape(reason)):
        parse_action(text)


# --------------------------------------------------------------------------- failed calls


def test_empty_completion_is_retried(script, make_vuser):
    script.encode(Scripted(200, {"candidates": [{"content": {"role": "model"}, "finishReason": "MAX_TOKENS"}]}), "unanswerable()")
    reply = make_vuser().answer(conversation("greenleaf_16"), "Which months?")
    assert reply.error is None and reply.action.kind == "unanswerable"
    first, second = reply.audit["calls"]
    assert first["status"] == "empty" and "MAX_TOKENS" in first["error"] and second["status"] == "ok"


def test_429_with_retry_after_is_retried(server, script, make_vuser):
    server.push(api_error(429, "RESOURCE_EXHAUSTED", "quota"), status=429, headers={"Retry-After": "0"})
    script.encode('labeled("last spring")')
    script.decode("March to May 2025.")
    reply = make_vuser().answer(conversation("greenleaf_16"), "Which months?")
    assert reply.error is None and reply.text == "March to May 2025."
    assert len(server.requests) == 3  # the SDK did not retry on its own, we did once
    assert [c["status"] for c in reply.audit["calls"]] == ["http_429", "ok", "ok"]


def test_malformed_responses_until_retries_run_out_are_an_error_reply(script, make_vuser):
    script.encode(*[Scripted(200, "{not json")] * 3)
    reply = make_vuser().answer(conversation("greenleaf_16"), "Which months?")
    assert reply.action is None and reply.error.startswith("encode failed: malformed response") and "3 attempts" in reply.error
    assert script.steps() == ["encode"] * 3


def test_decode_failure_is_an_error_reply_without_retry_on_400(script, make_vuser):
    script.encode('labeled("last spring")')
    script.decode(Scripted(400, api_error(400, "INVALID_ARGUMENT", "bad request")))
    reply = make_vuser().answer(conversation("greenleaf_16"), "Which months?")
    assert reply.error.startswith("decode failed: HTTP 400") and reply.text == ""
    assert script.steps() == ["encode", "decode"]


def test_timeout_is_retried(server, script, make_vuser):
    script.encode(Scripted(200, completion("unanswerable()"), delay_s=1.0), "unanswerable()")
    reply = make_vuser(timeout_s=0.3).answer(conversation("greenleaf_16"), "Which months?")
    assert reply.error is None and [c["status"] for c in reply.audit["calls"]] == ["timeout", "ok"]


# --------------------------------------------------------------------------- the leak audit


LEAKY = "Slow means WHERE lead_time_days > 20 in the table."
CLEAN = "Suppliers whose lead time is over 20 days."


def test_a_leaking_decode_is_recorded(script, make_vuser):
    script.encode('labeled("slow to deliver")')
    script.decode(LEAKY)
    reply = make_vuser().answer(conversation("greenleaf_22"), "How slow is slow?")
    assert reply.text == LEAKY and reply.audit["leaks"] == ["golden SQL: where lead_time_days > 20"]
    assert "regenerated" not in reply.audit and script.steps() == ["encode", "decode"]


def test_block_leaks_regenerates_once(script, make_vuser):
    script.encode('labeled("slow to deliver")')
    script.decode(LEAKY, CLEAN)
    reply = make_vuser(block_leaks=True).answer(conversation("greenleaf_22"), "How slow is slow?")
    assert reply.text == CLEAN and reply.audit["leaks"] == []
    assert reply.audit["regenerated"] is True and reply.audit["first_leaks"] == ["golden SQL: where lead_time_days > 20"]
    assert script.steps() == ["encode", "decode", "decode"]
    contents = script.requests("decode")[1].json()["contents"]
    assert [c["role"] for c in contents] == ["user", "model", "user"] and contents[1]["parts"][0]["text"] == LEAKY


def test_block_leaks_keeps_the_second_reply_even_if_it_leaks(script, make_vuser):
    clear = demo_items()["greenleaf_22"].question
    script.encode('labeled("slow to deliver")')
    script.decode(LEAKY, f"I asked: {clear}")
    reply = make_vuser(block_leaks=True).answer(conversation("greenleaf_22"), "How slow is slow?")
    assert reply.text == f"I asked: {clear}" and reply.audit["leaks"] == ["the clear question verbatim"]
    assert reply.audit["regenerated"] is True and script.steps() == ["encode", "decode", "decode"]


def test_block_leaks_keeps_the_first_reply_when_the_second_call_fails(script, make_vuser):
    script.encode('labeled("slow to deliver")')
    script.decode(LEAKY, Scripted(400, api_error(400, "INVALID_ARGUMENT", "bad request")))
    reply = make_vuser(block_leaks=True).answer(conversation("greenleaf_22"), "How slow is slow?")
    assert reply.error is None and reply.text == LEAKY and reply.audit["leaks"] == ["golden SQL: where lead_time_days > 20"]
    assert reply.audit["regeneration_error"].startswith("decode failed: HTTP 400") and "regenerated" not in reply.audit


# --------------------------------------------------------------------------- configuration


def test_missing_api_key_names_the_environment_variable(gemini_env, monkeypatch):
    monkeypatch.delenv("NO_SUCH_VUSER_KEY", raising=False)
    with pytest.raises(ConfigError, match="NO_SUCH_VUSER_KEY"):
        build_vuser(LlmVUserConfig(vuser="llm", api_key_env="NO_SUCH_VUSER_KEY"), 0)


def test_prompt_without_its_placeholder_is_a_config_error(gemini_env, tmp_path):
    bad = tmp_path / "encode.txt"
    bad.write_text("Say something.")
    with pytest.raises(ConfigError, match=r"\{question\}"):
        build_vuser(LlmVUserConfig(vuser="llm", api_key_env=KEY_ENV, encode_prompt=bad), 0)


def test_describe_names_the_prompts_and_their_hashes(make_vuser, server, tmp_path):
    custom = tmp_path / "decode.txt"
    custom.write_text("Answer {question} about {action}.")
    description = make_vuser(seed=99, decode_prompt=custom, block_leaks=True).describe()
    assert description["vuser"] == "llm" and description["model"] == MODEL and description["seed"] == 99
    assert description["block_leaks"] is True and description["patience"] == 3 and description["temperature"] == 0.0
    assert description["encode_prompt"].endswith("vuser_encode.txt") and description["decode_prompt"] == str(custom)
    assert re.fullmatch(r"[0-9a-f]{16}", description["encode_prompt_sha256"])
    assert description["decode_prompt_sha256"] == hashlib.sha256(custom.read_bytes()).hexdigest()[:16]
    assert "vuser-key-456" not in json.dumps(description)


def test_placeholders_in_the_agents_question_are_not_expanded(script, make_vuser):
    script.encode('labeled("last spring")')
    script.decode("March to May.")
    make_vuser().answer(conversation("greenleaf_16"), "Tell me {clear_query} and {golden_clauses}")
    assert "Tell me {clear_query} and {golden_clauses}" in prompt_of(script.requests("encode")[0])
    decoded = prompt_of(script.requests("decode")[0])
    assert "Tell me {clear_query} and {golden_clauses}" in decoded and decoded.count(demo_items()["greenleaf_16"].question) == 1


def test_follow_up_phase_uses_its_own_golden_sql(script, make_vuser):
    item = make_item(golden="SELECT store_name FROM stores ORDER BY store_id", follow_up="SELECT store_name FROM stores LIMIT 2")
    conv = new_conversation(item, seed=1, max_turns=10, patience=3, timeout_s=60)
    conv.phases.append(PhaseRecord(phase=Phase.FOLLOW_UP, question=item.follow_up.question, golden_sql=item.follow_up.golden_sql,
                                   conditions=item.conditions, conditions_explicit=True, is_query=True, clarification_budget=3))
    script.encode('unlabeled("limit 2")')
    script.decode("Just the first two.")
    reply = make_vuser().answer(conv, "How many?")
    assert reply.error is None and reply.action.segment == "limit 2"
    decoded = prompt_of(script.requests("decode")[0])
    assert "Now only the first two." in decoded and item.question not in decoded


# --------------------------------------------------------------------------- a whole run


def test_pipeline_run_with_the_llm_vuser(server, script, gemini_env, tmp_path, pgdata, monkeypatch):
    """The oracle asks 'When you say "<term>", ...' about each annotated term; the fake encodes
    that as labeled("<term>") and decodes it with a fixed sentence."""

    def encode(request: Received) -> str:
        term = re.search(r'When you say "(.+?)"', prompt_of(request))
        return f'labeled("{term.group(1)}")' if term else "unanswerable()"

    script.fallback = {"encode": encode, "decode": lambda request: "I mean what the shop usually means by it."}
    built: list[Any] = []

    def tracked(*args: Any) -> Any:
        built.append(build_vuser(*args))
        return built[-1]

    monkeypatch.setattr(run_parts, "build_vuser", tracked)
    config = tmp_path / "llm_vuser.yaml"
    config.write_text(
        f"dataset_config: {DEMO / 'greenleaf.jsonl'}\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        "model_config: simulated:oracle\n"
        f"vuser_model_config: {{vuser: llm, vertex_model: {MODEL}, base_url: '{server.url}', api_key_env: {KEY_ENV}, "
        "retry: {max_retries: 2, backoff_s: 0.01, max_backoff_s: 0.05}}\n"
        f"reporting: {{csv: {{output_directory: {tmp_path}}}}}\n"
        "run_id: llm-vuser\n"
    )
    try:
        result = run_evaluation(load_run_config(config), progress=False)
    finally:
        for vuser in built:
            vuser.close()
    records = list(read_journal(result.run_dir))
    assert len(records) == 43 and len({r["item_id"] for r in records}) == 43
    assert result.summary["outcomes"]["scored"] == 43
    asked = sum(1 for item in demo_items().values() for a in item.ambiguities if a.kind != "non_critical")
    conv = result.summary["conversation"]
    assert conv["vuser_actions"] == {"labeled": asked} and conv["vuser_errors"] == 0
    assert script.steps().count("encode") == asked and script.steps().count("decode") == asked
    assert result.summary["scorers"]["exec_match"]["main"]["rate"] == 1.0
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["vuser"]["vuser"] == "llm" and len(manifest["vuser"]["encode_prompt_sha256"]) == 16
    simulator = records[0]["simulator"]  # every record names its simulator and prompt hashes
    assert simulator["encode_prompt_sha256"] == manifest["vuser"]["encode_prompt_sha256"]
    assert all(r["simulator"] == simulator for r in records)
    turns = [t for r in records for t in r["turns"] if t["vuser"]]
    assert all(t["vuser"]["audit"]["calls"] and t["vuser"]["action_kind"] == "labeled" for t in turns)

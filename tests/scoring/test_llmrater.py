"""The llmrater scorer: the real google-genai SDK pointed (base_url) at the local fake Gemini API.

The fake answers from a scripted queue; every request it received is inspected (generation
config, response schema, the prompt the judge saw).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbench.agents.config import default_prompt
from evalbench.backends.base import ExecutionResult
from evalbench.core.conversation import Conversation, Outcome, PhaseRecord
from evalbench.core.errors import ConfigError
from evalbench.run.stages import new_conversation
from evalbench.scoring import SCORERS, Score, build_scorers
from evalbench.scoring.llmrater import PREVIEW_ROWS, LlmRater, preview
from tests.fake_llm_server import FakeLLMServer, Received
from tests.helpers import make_item

MODEL = "gemini-judge-test"
PATH = f"/v1beta/models/{MODEL}:generateContent"
KEY_ENV = "TEST_LLMRATER_GEMINI_KEY"
GOLDEN = "SELECT store_name FROM stores ORDER BY store_id"
FAST = {"max_retries": 2, "backoff_s": 0.01, "max_backoff_s": 0.05, "timeout_s": 5}


# --------------------------------------------------------------------------- the fake Gemini API


def completion(text: str) -> dict[str, Any]:
    return {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP", "index": 0}],
            "usageMetadata": {"promptTokenCount": 300, "candidatesTokenCount": 20, "totalTokenCount": 320}, "modelVersion": MODEL}


def verdict(value: str, reason: str = "the rows are the same") -> dict[str, Any]:
    return completion(json.dumps({"verdict": value, "reason": reason}))


def api_error(code: int, status: str, message: str = "error") -> dict[str, Any]:
    return {"error": {"code": code, "message": message, "status": status}}


def prompt_of(request: Received) -> str:
    return request.json()["contents"][0]["parts"][0]["text"]


@pytest.fixture
def server() -> Iterator[FakeLLMServer]:
    with FakeLLMServer() as fake:
        yield fake


@pytest.fixture
def gemini_env(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(KEY_ENV, "judge-key-789")
    for name in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_API_KEY", "GEMINI_API_KEY"):
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def make_rater(server: FakeLLMServer, gemini_env: None) -> Iterator[Callable[..., LlmRater]]:
    made: list[LlmRater] = []

    def make(**options: Any) -> LlmRater:
        settings = {"model": MODEL, "api_key_env": KEY_ENV, "base_url": server.url} | FAST | options
        settings = {k: v for k, v in settings.items() if v is not None}
        rater = SCORERS.get("llmrater")(settings)
        assert isinstance(rater, LlmRater)
        made.append(rater)
        return rater

    yield make
    for rater in made:
        rater.close()


# --------------------------------------------------------------------------- phases to judge


def res(values: list[Any], column: str = "store_name", **kw: Any) -> ExecutionResult:
    return ExecutionResult(columns=[column], rows=[(v,) for v in values], **kw)


def judged(sql: str | None = "SELECT store_name FROM stores ORDER BY 1", generated: ExecutionResult | None = None,
           golden: list[ExecutionResult] | None = None, category: str = "Query", **item: Any) -> tuple[Conversation, PhaseRecord]:
    conv = new_conversation(make_item(golden=GOLDEN, category=category, **item), seed=0, max_turns=10, patience=0, timeout_s=600)
    phase = conv.phase
    phase.sql = sql
    phase.generated = generated if generated is not None else (res(["Downtown", "Harbor"]) if sql else None)
    phase.golden = golden if golden is not None else [res(["Downtown", "Harbor"])]
    phase.outcome = Outcome.SCORED
    return conv, phase


# --------------------------------------------------------------------------- verdicts


def test_correct_verdict_passes(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    server.push(verdict("correct", "same two stores"))
    score = make_rater().score(*judged())
    assert score == Score(1.0, True, detail="1/1 votes correct: same two stores")
    assert len(server.requests) == 1
    request = server.requests[0]
    assert request.method == "POST" and request.path == PATH
    assert request.headers["x-goog-api-key"] == "judge-key-789"


def test_incorrect_verdict_fails(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    server.push(verdict("incorrect", "a store is missing"))
    score = make_rater().score(*judged(generated=res(["Downtown"])))
    assert (score.value, score.passed, score.applicable, score.flags) == (0.0, False, True, ())
    assert score.detail == "0/1 votes correct: a store is missing"


def test_request_has_temperature_seed_and_response_schema(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    server.push(verdict("correct"))
    make_rater(seed=41).score(*judged())
    body = server.requests[0].json()
    config = body["generationConfig"]
    assert config["temperature"] == 0
    assert config["seed"] == 41
    assert config["responseMimeType"] == "application/json"
    schema = config["responseSchema"]
    assert schema["type"] == "OBJECT"
    assert schema["required"] == ["verdict", "reason"]
    assert schema["properties"]["verdict"]["enum"] == ["correct", "incorrect"]
    assert schema["properties"]["reason"]["type"] == "STRING"
    assert [c["role"] for c in body["contents"]] == ["user"] and "systemInstruction" not in body


def test_prompt_shows_question_sqls_and_result_previews(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    server.push(verdict("correct"))
    conv, phase = judged(sql="SELECT store_name FROM stores  -- mine", generated=res(["Downtown", None], column="name"))
    make_rater().score(conv, phase)
    prompt = prompt_of(server.requests[0])
    assert phase.question in prompt
    assert GOLDEN in prompt and "SELECT store_name FROM stores  -- mine" in prompt
    assert "2 rows; 1 column: name\nname\nDowntown\nNULL" in prompt  # generated preview
    assert "2 rows; 1 column: store_name\nstore_name\nDowntown\nHarbor" in prompt  # golden preview
    assert "{golden_sql}" not in prompt and "{context}" not in prompt
    assert '{"verdict": "correct" or "incorrect"' in prompt  # other braces are left alone


def test_ambiguous_question_shows_what_the_user_meant(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    server.push(verdict("correct"))
    conv, phase = judged(ambiguous=True)
    make_rater().score(conv, phase)
    prompt = prompt_of(server.requests[0])
    assert phase.question == "List the shops." and "List the shops." in prompt
    assert f"<precise_question>\n{conv.item.question}\n</precise_question>" in prompt


def test_majority_of_three_votes(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    server.push(verdict("correct", "first says yes"))
    server.push(verdict("incorrect", "second says no"))
    server.push(verdict("correct", "third says yes"))
    score = make_rater(votes=3, seed=7).score(*judged())
    assert (score.value, score.passed) == (1.0, True)
    assert score.detail == "2/3 votes correct: first says yes"
    assert score.flags == ("split_vote",)
    assert [r.json()["generationConfig"]["seed"] for r in server.requests] == [7, 8, 9]
    assert len({prompt_of(r) for r in server.requests}) == 1  # the same prompt, another seed


def test_minority_of_correct_votes_fails(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    for value in ("incorrect", "correct", "incorrect"):
        server.push(verdict(value, f"says {value}"))
    score = make_rater(votes=3).score(*judged())
    assert (score.value, score.passed, score.flags) == (0.0, False, ("split_vote",))
    assert score.detail == "1/3 votes correct: says incorrect"


def test_rate_limited_call_is_retried(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    server.push(api_error(429, "RESOURCE_EXHAUSTED", "quota"), status=429, headers={"Retry-After": "0"})
    server.push(api_error(503, "UNAVAILABLE", "overloaded"), status=503)
    server.push(verdict("correct", "fine"))
    score = make_rater().score(*judged())
    assert (score.passed, score.detail, score.flags) == (True, "1/1 votes correct: fine", ())
    assert len(server.requests) == 3
    assert len({r.body for r in server.requests}) == 1  # the same request sent again


@pytest.mark.parametrize(
    "reply, expected",
    [
        ("this is not JSON", "not JSON"),
        ('{"verdict": "maybe", "reason": "unsure"}', "verdict must be"),
        ('{"verdict": "correct"}', "reason must be a string"),
        ('{"verdict": "correct", "reason": "ok", "score": 1}', "unexpected keys score"),
        ('["correct"]', "not a JSON object"),
    ],
)
def test_malformed_reply_is_a_judge_error(make_rater: Callable[..., LlmRater], server: FakeLLMServer, reply: str,
                                          expected: str) -> None:
    server.push(completion(reply))
    score = make_rater().score(*judged())
    assert (score.value, score.passed, score.applicable, score.flags) == (0.0, False, True, ("judge_error",))
    assert score.detail.startswith("llmrater: 1/1 votes failed: malformed verdict: ")
    assert expected in score.detail
    assert len(server.requests) == 1  # a malformed reply is not retried


def test_retries_run_out(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    for _ in range(3):
        server.push(api_error(500, "INTERNAL", "backend broke"), status=500)
    score = make_rater(max_retries=2).score(*judged())
    assert (score.value, score.passed, score.flags) == (0.0, False, ("judge_error",))
    assert "HTTP 500" in score.detail and "(after 3 attempts)" in score.detail
    assert len(server.requests) == 3


def test_client_error_is_not_retried(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    server.push(api_error(400, "INVALID_ARGUMENT", "bad schema"), status=400)
    score = make_rater().score(*judged())
    assert score.flags == ("judge_error",) and "HTTP 400" in score.detail
    assert len(server.requests) == 1


def test_one_failed_vote_of_three(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    server.push(verdict("correct", "yes"))
    server.push(api_error(400, "INVALID_ARGUMENT", "nope"), status=400)
    server.push(verdict("correct", "yes again"))
    score = make_rater(votes=3).score(*judged())
    assert (score.value, score.passed, score.flags) == (1.0, True, ("judge_error",))
    assert score.detail.startswith("2/3 votes correct (1 failed: HTTP 400") and score.detail.endswith(": yes")


# --------------------------------------------------------------------------- no judge call


def test_management_task_is_not_applicable(make_rater: Callable[..., LlmRater], server: FakeLLMServer) -> None:
    conv, phase = judged(sql="UPDATE stores SET store_name = 'x'", generated=res([]), golden=[res([])], category="Management")
    score = make_rater().score(conv, phase)
    assert not score.applicable and score.passed is None and "management" in score.detail
    assert server.requests == []


@pytest.mark.parametrize(
    "sql, generated, outcome, expected",
    [
        ("SELECT nope FROM stores", res([], error="column nope does not exist"), Outcome.SCORED, "generated SQL failed"),
        ("SELECT store_name FROM stores", res(["a", "b"], truncated=True), Outcome.SCORED, "truncated"),
        (None, None, Outcome.SCORED, "the agent returned no SQL"),
        (None, None, Outcome.AGENT_ERROR, "no answer to score: agent_error"),
    ],
    ids=["errored", "truncated", "no-sql", "agent-error"],
)
def test_unusable_answer_fails_without_a_call(make_rater: Callable[..., LlmRater], server: FakeLLMServer, sql: str | None,
                                              generated: ExecutionResult | None, outcome: Outcome, expected: str) -> None:
    conv, phase = judged(sql=sql, generated=generated)
    phase.outcome = outcome
    score = make_rater().score(conv, phase)
    assert (score.value, score.passed, score.applicable) == (0.0, False, True)
    assert expected in score.detail
    assert server.requests == []


# --------------------------------------------------------------------------- previews


def test_preview_is_bounded() -> None:
    result = ExecutionResult(columns=["id", "note"], rows=[(i, "x" * 500) for i in range(100)])
    text = preview(result)
    assert text.startswith("100 rows; 2 columns: id, note\nid | note\n0 | " + "x" * 80 + "…")
    assert f"(the first {PREVIEW_ROWS} of 100 rows are shown)" in text
    assert f"\n{PREVIEW_ROWS - 1} | " in text and f"\n{PREVIEW_ROWS} | " not in text
    assert len(text) < 3_100
    assert preview(ExecutionResult(error="boom")) == "(the query failed: boom)"
    assert preview(None) == "(not run)"
    assert preview(ExecutionResult(columns=["n"], rows=[(1,)], truncated=True)).startswith("at least 1 rows (cut at the row cap)")


# --------------------------------------------------------------------------- configuration


@pytest.mark.parametrize(
    "options, key, message",
    [
        ({"model": MODEL, "temperature": 0.5}, "scorers.llmrater.temperature", "unknown option 'temperature'"),
        ({}, "scorers.llmrater.model", "option 'model' is required"),
        ({"model": MODEL, "vertex_model": MODEL}, "scorers.llmrater.model", "given twice"),
        ({"model": MODEL, "votes": 2}, "scorers.llmrater.votes", "votes must be odd"),
        ({"model": MODEL, "votes": 0}, "scorers.llmrater.votes", "greater than or equal to 1"),
        ({"model": MODEL, "votes": "3"}, "scorers.llmrater.votes", "valid integer"),
        ({"model": MODEL, "timeout_s": 0}, "scorers.llmrater.timeout_s", "greater than 0"),
        ({"model": MODEL, "max_retries": -1}, "scorers.llmrater.max_retries", "greater than or equal to 0"),
        ({"model": MODEL, "prompt_file": "/nonexistent/judge.txt"}, "scorers.llmrater.prompt_file", "cannot read the prompt"),
    ],
    ids=["unknown-option", "missing-model", "model-twice", "even-votes", "zero-votes", "string-votes", "zero-timeout",
         "negative-retries", "missing-prompt"],
)
def test_bad_options_are_config_errors(gemini_env: None, options: dict[str, Any], key: str, message: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build_scorers({"llmrater": {"api_key_env": KEY_ENV} | options})
    assert caught.value.key == key
    assert message in str(caught.value)
    assert caught.value.exit_code == 2


def test_options_must_be_a_mapping(gemini_env: None) -> None:
    with pytest.raises(ConfigError) as caught:
        SCORERS.get("llmrater")(MODEL)  # type: ignore[arg-type]
    assert caught.value.key == "scorers.llmrater"


def test_missing_api_key_is_a_config_error_at_build_time(gemini_env: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TEST_LLMRATER_UNSET_KEY", raising=False)
    with pytest.raises(ConfigError) as caught:
        build_scorers({"llmrater": {"model": MODEL, "api_key_env": "TEST_LLMRATER_UNSET_KEY"}})
    assert caught.value.key == "scorers.llmrater.api_key_env"
    assert "TEST_LLMRATER_UNSET_KEY is not set" in str(caught.value)
    with pytest.raises(ConfigError) as default:  # the gemini agent's default variable
        build_scorers({"llmrater": {"model": MODEL}})
    assert default.value.key == "scorers.llmrater.api_key_env" and "GEMINI_API_KEY" in str(default.value)


def test_prompt_without_generated_sql_is_a_config_error(gemini_env: None, tmp_path: Path) -> None:
    prompt = tmp_path / "judge.txt"
    prompt.write_text("Is {question} answered?")
    with pytest.raises(ConfigError) as caught:
        build_scorers({"llmrater": {"model": MODEL, "api_key_env": KEY_ENV, "prompt_file": str(prompt)}})
    assert caught.value.key == "scorers.llmrater.prompt_file" and "{generated_sql}" in str(caught.value)


def test_describe_records_model_and_prompt_hash(make_rater: Callable[..., LlmRater]) -> None:
    rater = make_rater(votes=3, seed=5, model=None, vertex_model="gemini-judge-alias")  # EvalBench's key works too
    info = rater.describe()
    expected = hashlib.sha256(default_prompt("llmrater.txt").read_bytes()).hexdigest()
    assert {k: info[k] for k in ("scorer", "model", "prompt_sha256", "votes", "seed", "temperature")} == {
        "scorer": "llmrater", "model": "gemini-judge-alias", "prompt_sha256": expected, "votes": 3, "seed": 5, "temperature": 0}
    assert (rater.name, rater.is_metric) == ("llmrater", False)


def test_custom_prompt_file_is_used_and_hashed(make_rater: Callable[..., LlmRater], server: FakeLLMServer,
                                               tmp_path: Path) -> None:
    prompt = tmp_path / "judge.txt"
    prompt.write_text("Q: {question}\nGOLD: {golden_sql}\nGOT: {generated_sql}\n{unknown} stays\n")
    server.push(verdict("correct"))
    rater = make_rater(prompt_file=str(prompt))
    conv, phase = judged(sql="SELECT 1 -- {question}")
    rater.score(conv, phase)
    assert prompt_of(server.requests[0]) == (f"Q: {phase.question}\nGOLD: {GOLDEN}\nGOT: SELECT 1 -- {{question}}\n"
                                             "{unknown} stays\n")
    assert rater.describe()["prompt_sha256"] == hashlib.sha256(prompt.read_bytes()).hexdigest()


def test_docs_list_every_option_with_its_default() -> None:
    from pydantic_core import PydanticUndefined

    from evalbench.scoring.llmrater import LlmRaterOptions

    text = (Path(__file__).resolve().parents[2] / "docs" / "scoring.md").read_text()
    section = text[text.index("## `llmrater`"):]
    rows = {line.split("|")[1].strip().split()[0].strip("`"): line.split("|")[2].strip()
            for line in section.splitlines() if line.startswith("| `")}
    for name, field in LlmRaterOptions.model_fields.items():
        default = field.default
        if default is PydanticUndefined:
            shown = "**required**"
        elif default is None:
            shown = "—"
        elif isinstance(default, bool):
            shown = f"`{str(default).lower()}`"
        else:
            shown = f"`{default}`"
        key = field.alias if name in ("project",) else name  # the table names project by its EvalBench key
        assert rows.get(key) == shown, (name, rows.get(key), shown)

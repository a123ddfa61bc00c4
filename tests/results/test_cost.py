"""Whole-run cost: every model call's tokens per role (agent, virtual user, each judge) in the
journal, summary, reports and ``compare``, priced by the price table.

The virtual user and the judge are the real ones (google-genai SDK) pointed at the local fake
Gemini API, on the SQLite build of the demo dataset with the offline oracle agent. The fake
reports a different usage for every request (derived from the request body) and remembers what
it reported, per model and per item, so the journal's figures are checked against what the
"provider" said, conversation by conversation.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from evalbench.cli import main
from evalbench.config import load_run_config
from evalbench.config.prices import DEFAULT_PRICES, PRICES_AS_OF, PriceTable
from evalbench.core.errors import ConfigError
from evalbench.results import read_journal
from evalbench.results.render.explain import render_explanation
from evalbench.results.summary.cost import CostTally, cost_lines, usd
from evalbench.results.summary.rebuild import rebuild_summary
from evalbench.run import run as run_evaluation
from tests.fake_llm_server import FakeLLMServer, Received, Scripted

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "datasets" / "demo"
VUSER_MODEL, JUDGE_MODEL = "gemini-vuser-cost", "gemini-judge-cost"
KEY_ENV = "TEST_COST_GEMINI_KEY"
PRICES = {VUSER_MODEL: {"input": 1.5, "output": 6.0}, JUDGE_MODEL: {"input": 0.5, "output": 4.0}}
# questions with and without ambiguity or follow-up, and management tasks (ambiguous ones too)
SUBSET = ["greenleaf_1", "greenleaf_4", "greenleaf_15", "greenleaf_16", "greenleaf_17", "greenleaf_20", "greenleaf_21",
          "greenleaf_36", "greenleaf_41", "greenleaf_42"]
ITEMS = len(SUBSET)


def _questions() -> dict[str, str]:
    """Each item's main and follow-up questions -> its id (the judge's prompt quotes the question)."""
    found = {}
    for line in (DEMO / "greenleaf_sqlite.jsonl").read_text().splitlines():
        if line.strip():
            item = json.loads(line)
            for text in (item["amb_user_query"], item["query"], (item.get("follow_up") or {}).get("query")):
                if text:
                    found[text.strip()] = item["instance_id"]
    return found


class FakeGemini:
    """The fake Gemini API of the virtual user (encode: the term asked about; decode: a sentence)
    and of the judge (always ``correct``). Each response reports usage derived from the request;
    ``reported[model]`` sums it, ``per_item`` the judge's by item."""

    def __init__(self) -> None:
        self.reported: dict[str, Counter[str]] = defaultdict(Counter)
        self.per_item: dict[str, Counter[str]] = defaultdict(Counter)
        self.questions = _questions()
        self.server = FakeLLMServer(self._respond)

    def _respond(self, request: Received) -> Scripted:
        model = re.search(r"/models/([^:]+):generateContent", request.path).group(1)  # type: ignore[union-attr]
        prompt = request.json()["contents"][0]["parts"][0]["text"]
        digest = int(hashlib.sha256(request.body).hexdigest(), 16)
        prompt_tokens, candidates, thoughts = 100 + digest % 900, 1 + digest % 97, digest % 13
        usage = {"prompt": prompt_tokens, "completion": candidates + thoughts}
        self.reported[model].update(usage | {"calls": 1})
        if model == JUDGE_MODEL:
            text = json.dumps({"verdict": "correct", "reason": "same rows"})
            question = re.search(r"<question>\s*(.*?)\s*</question>", prompt, re.DOTALL)
            item = self.questions.get(question.group(1).strip()) if question else None
            self.per_item[str(item)].update(usage)
        elif prompt.splitlines()[0] == _ENCODE_HEAD:
            term = re.search(r'When you say "(.+?)"', prompt)
            text = f'labeled("{term.group(1)}")' if term else "unanswerable()"
        else:
            text = "I mean what the shop usually means by it."
        return Scripted(200, {"candidates": [{"content": {"role": "model", "parts": [{"text": text}]}, "finishReason": "STOP"}],
                              "usageMetadata": {"promptTokenCount": prompt_tokens, "candidatesTokenCount": candidates,
                                                "thoughtsTokenCount": thoughts,
                                                "totalTokenCount": prompt_tokens + candidates + thoughts},
                              "modelVersion": model})


def _encode_head() -> str:
    from evalbench.agents.config import default_prompt

    return default_prompt("vuser_encode.txt").read_text().splitlines()[0]


_ENCODE_HEAD = _encode_head()


@pytest.fixture
def fake(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGemini]:
    monkeypatch.setenv(KEY_ENV, "cost-test-key")
    for name in ("GOOGLE_GENAI_USE_VERTEXAI", "GOOGLE_GENAI_USE_ENTERPRISE", "GOOGLE_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    gemini = FakeGemini()
    with gemini.server:
        yield gemini


def _config(tmp_path: Path, fake: FakeGemini, run_id: str, prices: dict[str, Any] | None = PRICES, seed: int = 3) -> Path:
    client = f"base_url: '{fake.server.url}', api_key_env: {KEY_ENV}"
    config = tmp_path / f"{run_id}.yaml"
    config.write_text(
        f"dataset_config: {DEMO / 'greenleaf_sqlite.jsonl'}\n"
        f"setup_directory: {DEMO / 'setup'}\n"
        "dialects: [sqlite]\n"
        "model_config: simulated:oracle\n"
        f"vuser_model_config: {{vuser: llm, vertex_model: {VUSER_MODEL}, {client}, retry: {{max_retries: 0}}}}\n"
        f"scorers: {{exec_match: {{}}, state_match: {{}}, llmrater: {{vertex_model: {JUDGE_MODEL}, {client}, max_retries: 0}}}}\n"
        + (f"prices: {json.dumps(prices)}\n" if prices is not None else "")
        + f"subset: {{item_ids: {json.dumps(SUBSET)}}}\nseed: {seed}\n"
        f"reporting: {{csv: {{output_directory: {tmp_path}}}}}\nrun_id: {run_id}\n"
    )
    return config


def _run(config: Path) -> Any:
    return run_evaluation(load_run_config(config), progress=False)


def _cost(prompt: int, completion: int, model: str) -> float:
    price = PRICES[model]
    return (prompt * price["input"] + completion * price["output"]) / 1e6


@pytest.fixture
def priced_run(tmp_path: Path, fake: FakeGemini) -> tuple[Any, FakeGemini]:
    return _run(_config(tmp_path, fake, "priced")), fake


# --------------------------------------------------------------------------- the journal


def test_journal_usage_per_role_is_what_the_provider_reported(priced_run: tuple[Any, FakeGemini]) -> None:
    result, fake = priced_run
    records = list(read_journal(result.run_dir))
    assert len(records) == ITEMS
    totals: dict[str, Counter[str]] = defaultdict(Counter)
    for record in records:
        usage = record["usage"]
        assert usage["agent"]["model"] is None and usage["agent"]["cost_usd"] == 0.0  # the oracle calls no model
        assert usage["agent"]["calls"] == sum(1 for t in record["turns"] if t["reply"])
        for role, model in (("vuser", VUSER_MODEL), ("judge:llmrater", JUDGE_MODEL)):
            if role not in usage:
                continue
            entry = usage[role]
            assert entry["model"] == model and entry["price"] == PRICES[model] and entry["unreported"] == 0
            assert math.isclose(entry["cost_usd"], _cost(entry["prompt"], entry["completion"], model), rel_tol=1e-9)
            totals[model].update({k: entry[k] for k in ("calls", "prompt", "completion")})
        # the vuser's calls are the ones its audit lists, turn by turn
        calls = sum(len(t["vuser"]["audit"]["calls"]) for t in record["turns"] if t["vuser"])
        assert usage.get("vuser", {}).get("calls", 0) == calls
        vuser_turns = [t["vuser"]["usage"] for t in record["turns"] if t["vuser"]]
        assert sum(u["prompt"] for u in vuser_turns) == usage.get("vuser", {}).get("prompt", 0)
        # the judge's usage, item by item, as the fake reported it for that item's questions
        judged = fake.per_item.get(record["item_id"], Counter())
        assert usage.get("judge:llmrater", {}).get("prompt", 0) == judged["prompt"]
        assert usage.get("judge:llmrater", {}).get("completion", 0) == judged["completion"]
        assert math.isclose(record["cost_usd"], sum(e["cost_usd"] for e in usage.values()), rel_tol=1e-9)
    assert "None" not in fake.per_item  # every judge call was attributed to an item
    asked = next(r for r in records if "vuser" in r["usage"])
    explained = render_explanation(asked)
    assert f"vuser {VUSER_MODEL} {usd(asked['usage']['vuser']['cost_usd'])}" in explained.replace("\n", " ")
    for model in (VUSER_MODEL, JUDGE_MODEL):  # everything the provider reported, nothing more
        assert totals[model] == fake.reported[model] and fake.reported[model]["calls"] > 0


def test_summary_and_reports_show_the_cost_per_role(priced_run: tuple[Any, FakeGemini]) -> None:
    result, fake = priced_run
    cost = result.summary["cost"]
    roles = {r["role"]: r for r in cost["roles"]}
    assert set(roles) == {"agent", "vuser", "judge:llmrater"}
    expected = 0.0
    for role, model in (("vuser", VUSER_MODEL), ("judge:llmrater", JUDGE_MODEL)):
        reported = fake.reported[model]
        assert (roles[role]["prompt"], roles[role]["completion"], roles[role]["calls"]) == \
            (reported["prompt"], reported["completion"], reported["calls"])
        assert math.isclose(roles[role]["cost_usd"], _cost(reported["prompt"], reported["completion"], model), rel_tol=1e-6)
        expected += roles[role]["cost_usd"]
    assert math.isclose(cost["total_usd"], expected, rel_tol=1e-6) and cost["total_usd"] > 0
    assert math.isclose(cost["mean_per_conversation_usd"], expected / ITEMS, rel_tol=1e-6)
    assert cost["without_usage"] == 0 and "spent_usd" not in cost
    markdown = (result.run_dir / "summary.md").read_text()
    assert "**Cost:**" in markdown and f"| judge:llmrater | {JUDGE_MODEL} |" in markdown
    report = (result.run_dir / "report.html").read_text()
    assert "Cost of model calls" in report and '"cost_usd"' in report  # the panel, and each conversation's usage
    manifest = json.loads((result.run_dir / "manifest.json").read_text())
    assert manifest["prices"]["defaults_as_of"] == PRICES_AS_OF
    assert manifest["prices"]["models"][JUDGE_MODEL] == PRICES[JUDGE_MODEL] | {"from": "config"}
    assert manifest["prices"]["models"]["gemini-2.5-flash"]["from"] == "default"


def test_an_unpriced_model_counts_its_tokens_and_its_cost_is_unknown(tmp_path: Path, fake: FakeGemini) -> None:
    result = _run(_config(tmp_path, fake, "unpriced", prices={VUSER_MODEL: PRICES[VUSER_MODEL]}))
    records = list(read_journal(result.run_dir))
    judged = [r for r in records if "judge:llmrater" in r["usage"] and r["usage"]["judge:llmrater"]["calls"]]
    assert judged and all(r["usage"]["judge:llmrater"]["cost_usd"] is None and r["cost_usd"] is None for r in judged)
    assert all(r["usage"]["judge:llmrater"]["prompt"] > 0 for r in judged)  # counted, not priced
    cost = result.summary["cost"]
    judge = next(r for r in cost["roles"] if r["role"] == "judge:llmrater")
    assert judge["cost_usd"] is None and judge["prompt"] == fake.reported[JUDGE_MODEL]["prompt"]
    assert cost["total_usd"] is None and cost["mean_per_conversation_usd"] is None
    vuser = next(r for r in cost["roles"] if r["role"] == "vuser")
    assert math.isclose(cost["priced_usd"], vuser["cost_usd"], rel_tol=1e-9) and vuser["cost_usd"] > 0
    lines = cost_lines(cost)
    assert lines[0].startswith("cost: unknown") and any(f"cost unknown for judge:llmrater {JUDGE_MODEL}" in line
                                                        for line in lines)


# --------------------------------------------------------------------------- older journals, compare, rescore


def _strip_usage(run_dir: Path) -> None:
    """The run's journal and summary as a version before usage was recorded wrote them."""
    lines = []
    for record in read_journal(run_dir):
        record.pop("usage"), record.pop("cost_usd")
        for turn in record["turns"]:
            if turn["vuser"]:
                turn["vuser"].pop("usage")
        for phase in record["phases"]:
            for score in phase["scores"].values():
                score.pop("usage", None)
        lines.append(json.dumps(record))
    (run_dir / "conversations.jsonl").write_text("\n".join(lines) + "\n")
    summary = json.loads((run_dir / "summary.json").read_text())
    summary.pop("cost")
    (run_dir / "summary.json").write_text(json.dumps(summary))


def test_an_older_journal_is_read_with_the_agents_tokens_unpriced(priced_run: tuple[Any, FakeGemini], tmp_path: Path,
                                                                   capsys: pytest.CaptureFixture[str]) -> None:
    result, _ = priced_run
    _strip_usage(result.run_dir)
    records = list(read_journal(result.run_dir))
    assert len(records) == ITEMS  # every line is still a conversation record
    cost = rebuild_summary(result.run_dir)["cost"]
    assert cost["without_usage"] == ITEMS and [r["role"] for r in cost["roles"]] == ["agent"]
    assert cost["total_usd"] == 0.0  # the oracle spent no token: nothing unknown
    tally = CostTally()
    tally.add(records[0] | {"tokens": {"prompt": 10, "completion": 5, "total": 15}})  # a model agent's tokens, model unknown
    assert tally.result()["total_usd"] is None and tally.result()["roles"][0]["total"] == 15
    assert main(["report", str(result.run_dir)]) == 0
    assert "journaled before usage was recorded" in (result.run_dir / "summary.md").read_text()


def test_compare_shows_the_cost_delta(tmp_path: Path, fake: FakeGemini, capsys: pytest.CaptureFixture[str]) -> None:
    doubled = {model: {"input": 2 * p["input"], "output": 2 * p["output"]} for model, p in PRICES.items()}
    a = _run(_config(tmp_path, fake, "a"))
    b = _run(_config(tmp_path, fake, "b", prices=doubled))  # the same calls (same seed), priced twice as high
    cost_a, cost_b = a.summary["cost"]["total_usd"], b.summary["cost"]["total_usd"]
    assert cost_a > 0 and math.isclose(cost_b, 2 * cost_a, rel_tol=1e-6)
    capsys.readouterr()
    assert main(["compare", str(a.run_dir), str(b.run_dir)]) == 0
    text = capsys.readouterr().out
    delta = re.search(r"cost: A \$([\d.]+) → B \$([\d.]+) \(\+\$([\d.]+)\)", text)
    assert delta is not None, text
    assert math.isclose(float(delta.group(3)), cost_b - cost_a, abs_tol=1e-4)
    markdown = (b.run_dir / "compare.md").read_text()
    assert "### Cost of model calls" in markdown and "Items whose cost changed most:" in markdown
    assert "Cost of model calls" in (b.run_dir / "compare.html").read_text()


def test_rescore_counts_its_judge_calls_and_marks_the_replayed_roles(priced_run: tuple[Any, FakeGemini], tmp_path: Path) -> None:
    source, fake = priced_run
    judged_before = fake.reported[JUDGE_MODEL]["calls"]
    vuser_before = fake.reported[VUSER_MODEL]["calls"]
    assert main(["rescore", str(source.run_dir), "--run-id", "again", "--output-dir", str(tmp_path / "rescored"),
                 "--no-progress"]) == 0
    assert fake.reported[VUSER_MODEL]["calls"] == vuser_before  # the virtual user is replayed, not called
    judged = fake.reported[JUDGE_MODEL]["calls"] - judged_before
    assert judged == judged_before  # every judgement made again
    summary = json.loads((tmp_path / "rescored" / "again" / "summary.json").read_text())
    roles = {r["role"]: r for r in summary["cost"]["roles"]}
    source_roles = {r["role"]: r for r in source.summary["cost"]["roles"]}
    assert roles["vuser"]["replayed"] and roles["agent"]["replayed"] and "replayed" not in roles["judge:llmrater"]
    assert roles["vuser"]["prompt"] == source_roles["vuser"]["prompt"]  # the source's usage, as recorded
    assert roles["judge:llmrater"]["calls"] == judged
    assert math.isclose(summary["cost"]["spent_usd"], roles["judge:llmrater"]["cost_usd"], rel_tol=1e-9)


# --------------------------------------------------------------------------- the price table


def test_price_table_defaults_overrides_and_unknown_models() -> None:
    from evalbench.config.prices import ModelPrice

    table = PriceTable({"my-local-model": ModelPrice(input=0, output=0),
                        "gemini-2.5-flash": ModelPrice(input=1, output=2)})
    assert table.cost("gemini-2.5-pro", 1_000_000, 1_000_000) == DEFAULT_PRICES["gemini-2.5-pro"].input + \
        DEFAULT_PRICES["gemini-2.5-pro"].output
    assert table.cost("models/gemini-2.5-flash", 2_000_000, 500_000) == 2 * 1 + 0.5 * 2  # the config's price wins
    assert table.cost("my-local-model", 123, 456) == 0.0
    assert table.cost("no-such-model", 1, 0) is None and table.cost(None, 0, 1) is None
    assert table.cost("no-such-model", 0, 0) == 0.0  # no token spent: nothing is unknown


@pytest.mark.parametrize("prices, message", [
    ("{m: {input: -1, output: 1}}", "greater than or equal to 0"),
    ("{m: {input: 1}}", "required"),
    ("{m: {input: 1, output: 1, cached: 0.1}}", "unknown key"),
    ("{m: {input: .inf, output: 1}}", "finite"),
])
def test_bad_prices_are_config_errors(tmp_path: Path, prices: str, message: str) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"dataset_config: {DEMO / 'greenleaf_sqlite.jsonl'}\nmodel_config: simulated:oracle\nprices: {prices}\n")
    with pytest.raises(ConfigError, match=message):
        load_run_config(config)


def test_prices_do_not_change_the_config_fingerprint(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text(f"dataset_config: {DEMO / 'greenleaf_sqlite.jsonl'}\nmodel_config: simulated:oracle\n")
    priced = load_run_config(config, prices={"m": {"input": 1, "output": 2}})
    assert priced.fingerprint() == load_run_config(config).fingerprint()


def test_each_agent_is_priced_by_the_model_it_names() -> None:
    from evalbench.agents import build_agent
    from evalbench.config.agents import AdkAgentConfig
    from evalbench.config.prices import run_pricing

    adk = build_agent(AdkAgentConfig(agent="adk", base_url="http://127.0.0.1:9", app_name="a", model="gemini-2.5-pro"))
    pricing = run_pricing({}, adk.describe(), {"vuser": "rules"})
    assert pricing.agent_model == "gemini-2.5-pro" and pricing.replayed == frozenset()
    assert pricing.table.cost(pricing.agent_model, 1_000_000, 0) == DEFAULT_PRICES["gemini-2.5-pro"].input
    unnamed = build_agent(AdkAgentConfig(agent="adk", base_url="http://127.0.0.1:9", app_name="a"))
    assert run_pricing({}, unnamed.describe(), {}).agent_model is None  # the app chooses: its cost is unknown
    replay = {"agent": "replay", "recorded": {"agent": "gemini", "model": "gemini-2.5-flash"}}
    pricing = run_pricing({}, replay, {"vuser": "llm", "replayed_from": "source"})
    assert pricing.agent_model == "gemini-2.5-flash" and pricing.replayed == {"agent", "vuser"}

"""The declared primary verdict: `success` does not depend on the order of the `scorers:` keys;
`compare` and `--baseline` gates refuse runs whose semantics or primary verdicts differ."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from evalbench.cli import main
from evalbench.config import load_run_config
from evalbench.results import read_journal
from evalbench.results.summary.comparison import IncomparableRuns, compare_runs
from evalbench.run import run
from evalbench.scoring.primary import PrimaryPolicy, parse_primary

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
ORDERED = {"exec_match": {}, "test_cases": {}, "answer_match": {}, "executable": {}, "turn_count": {},
           "bird_interact_reward": {}, "set_match": {}, "returned_sql": {}}
REVERSED = dict(reversed(list(ORDERED.items())))  # set_match and returned_sql now come first


def _run(out: Path, run_id: str, **overrides) -> Path:
    config = load_run_config(QUICKSTART, run_id=run_id, reporting={"csv": {"output_directory": str(out)}}, **overrides)
    run(config, progress=False, out=io.StringIO())
    return out / run_id


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, pgdata: Path) -> dict[str, Path]:
    out = tmp_path_factory.mktemp("primary_runs")
    return {
        "ordered": _run(out, "ordered", scorers=ORDERED),
        "reversed": _run(out, "reversed", scorers=REVERSED),
        "evalbench": _run(out, "evalbench", scorers=ORDERED | {"exec_match": {"semantics": "evalbench"}}),
        "set_match": _run(out, "set_match", scorers=ORDERED, primary={"Query": "set_match"}),
    }


def _figures(run_dir: Path) -> dict:
    summary = json.loads((run_dir / "summary.json").read_text())
    for volatile in ("run_id", "elapsed_s", "conversations_per_s", "finished_at", "sessions", "databases"):
        summary.pop(volatile, None)
    summary["conversation"].pop("conversation_seconds", None)
    summary["conversation"].pop("mean_agent_latency_s", None)
    return summary


def test_reordering_the_scorers_changes_no_verdict_and_no_figure(runs):
    a, b = runs["ordered"], runs["reversed"]
    for ra, rb in zip(sorted(read_journal(a), key=lambda r: r["item_id"]), sorted(read_journal(b), key=lambda r: r["item_id"]), strict=True):
        assert ra["item_id"] == rb["item_id"] and ra["reward"] == rb["reward"]
        for pa, pb in zip(ra["phases"], rb["phases"], strict=True):
            assert (pa["primary"], pa["passed"]) == (pb["primary"], pb["passed"]), ra["item_id"]
            assert {n: s["passed"] for n, s in pa["scores"].items()} == {n: s["passed"] for n, s in pb["scores"].items()}
    assert _figures(a) == _figures(b)
    # set_match and returned_sql listed first decide nothing: success is exec_match's (and test_cases')
    records = list(read_journal(b))
    deciders = {p["primary"] for r in records for p in r["phases"] if p["primary"]}
    assert deciders <= {"exec_match", "test_cases", "answer_match"} and "exec_match" in deciders
    comparison = compare_runs(a, b)  # the same agent, the same seed: no flip, nothing significant
    assert all(pc.n10 == pc.n01 == 0 and pc.p_value == 1.0 for pc in comparison.phases), comparison.phases


def test_the_manifest_records_the_semantics_and_the_primary_verdicts(runs):
    manifest = json.loads((runs["ordered"] / "manifest.json").read_text())
    scoring = manifest["scoring"]
    assert scoring["semantics"] == "bird_interact" and scoring["semantics_source"] == "default"
    assert scoring["primary"] == {"Management": ["test_cases", "state_match"], "Query": ["exec_match"]}
    assert scoring["scorers_added"] == ["state_match"]  # the primary verdict needs it; it was not listed
    assert "state_match" in manifest["scorers"]
    evalbench = json.loads((runs["evalbench"] / "manifest.json").read_text())["scoring"]
    assert evalbench["semantics"] == "evalbench" and evalbench["semantics_source"] == "config"


@pytest.mark.parametrize("other", ["evalbench", "set_match"])
def test_compare_refuses_other_semantics_or_primary_verdicts_unless_forced(runs, other, capsys):
    with pytest.raises(IncomparableRuns) as info:
        compare_runs(runs["ordered"], runs[other])
    assert ("scoring semantics" if other == "evalbench" else "scoring primary") in str(info.value)
    assert compare_runs(runs["ordered"], runs[other], force=True).forced
    assert main(["compare", str(runs["ordered"]), str(runs[other])]) == 2
    assert "scoring" in capsys.readouterr().err


def test_baseline_gates_refuse_other_semantics_unless_forced(runs, capsys):
    base = ["report", str(runs["evalbench"]), "--no-html", "--baseline", str(runs["ordered"]),
            "--max-regression", "success=100%"]
    assert main(base) == 2
    assert "decides its verdicts otherwise" in capsys.readouterr().err
    assert main([*base, "--force"]) == 0


def test_primary_config_is_validated(tmp_path):
    with pytest.raises(ValueError, match="unknown key"):
        parse_primary({"Queries": "exec_match"})
    with pytest.raises(ValueError, match="non-empty list"):
        parse_primary({"Query": []})
    assert parse_primary({"Query/follow_up": ["set_match", "exec_match"]})["Query/follow_up"] == ("set_match", "exec_match")
    from evalbench.core.errors import ConfigError

    with pytest.raises(ConfigError) as info:
        load_run_config(QUICKSTART, primary={"Query": "no_such_scorer"})
    assert "primary" in str(info.value) and "no_such_scorer" in str(info.value)
    policy = PrimaryPolicy(parse_primary({"Query/follow_up": "set_match"}))
    assert policy.candidates(True, "follow_up") == ("set_match",) and policy.candidates(True, "main") == ("exec_match",)

"""Runs people can manage: subsets (--limit, --item-ids, --sample), repeated trials (pass@k,
pass^k, consistency) and --resume --retry-errors after a flaky agent endpoint — all through the
CLI, on the demo database, with agents over HTTP where the endpoint matters."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from evalbench.cli import main
from evalbench.dataset.loader import load_items
from evalbench.results.summary.clustered import cluster_rate_ci
from evalbench.results.summary.stats import rate_ci
from tests.attack_agent import AttackAgent, item, write_run
from tests.conftest import ROOT
from tests.fake_llm_server import Received, Scripted

QUICKSTART = ROOT / "configs" / "quickstart.yaml"
VOLATILE = {"run_id", "elapsed_s", "conversations_per_s", "databases", "sessions", "cancelled"}
VOLATILE_CONVERSATION = {"mean_agent_latency_s", "conversation_seconds"}


def _run(tmp: Path, run_id: str, *args: str, config: Path = QUICKSTART) -> int:
    return main(["run", "--config", str(config), "--output-dir", str(tmp), "--run-id", run_id, "--no-progress", *args])


def _records(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "conversations.jsonl").read_text(encoding="utf-8").splitlines()]


def _summary(run_dir: Path) -> dict[str, Any]:
    return json.loads((run_dir / "summary.json").read_text(encoding="utf-8"))


def _comparable(summary: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in summary.items() if k not in VOLATILE}
    out["conversation"] = {k: v for k, v in summary["conversation"].items() if k not in VOLATILE_CONVERSATION}
    return out


# --------------------------------------------------------------------------- subsets


def test_limit_runs_the_first_items_and_resume_extends_it(tmp_path: Path) -> None:
    assert _run(tmp_path, "lim", "--limit", "4") == 0
    run_dir = tmp_path / "lim"
    assert sorted(r["item_id"] for r in _records(run_dir)) == sorted(f"greenleaf_{i}" for i in range(1, 5))
    summary = _summary(run_dir)
    assert summary["complete"] is True and summary["total_items"] == 4
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["dataset"]["subset"]["chosen"] == 4 and manifest["dataset"]["subset"]["of"] > 4
    # the subset may change on resume: the next items run, the first four are kept
    assert main(["run", "--config", str(QUICKSTART), "--resume", str(run_dir), "--limit", "7", "--no-progress"]) == 0
    records = _records(run_dir)
    assert sorted(r["item_id"] for r in records) == sorted(f"greenleaf_{i}" for i in range(1, 8))
    summary = _summary(run_dir)
    assert summary["complete"] is True and summary["total_items"] == 7
    assert json.loads((run_dir / "manifest.json").read_text())["sessions"][-1]["config_changes"] == ["subset.limit: 4 -> 7"]


def test_item_ids_from_the_command_line_and_a_file(tmp_path: Path) -> None:
    ids = tmp_path / "ids.txt"
    ids.write_text("# chosen by hand\ngreenleaf_3\n\ngreenleaf_7\n", encoding="utf-8")
    assert _run(tmp_path, "ids", "--item-ids", "greenleaf_1", f"@{ids}") == 0
    assert sorted(r["item_id"] for r in _records(tmp_path / "ids")) == ["greenleaf_1", "greenleaf_3", "greenleaf_7"]


def test_unknown_item_id_is_an_error_before_the_run(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "bad", "--item-ids", "greenleaf_1", "no_such_item") == 2
    err = capsys.readouterr().err
    assert "no_such_item" in err and "--item-ids" in err and "greenleaf_1" not in err.split("no_such_item")[0][-30:]
    assert not (tmp_path / "bad" / "conversations.jsonl").exists()


def test_sample_is_seeded_and_stratified(tmp_path: Path) -> None:
    assert _run(tmp_path, "s1", "--sample", "12") == 0
    assert _run(tmp_path, "s2", "--sample", "12") == 0
    assert _run(tmp_path, "s3", "--sample", "12", "--set", "seed=99") == 0
    first, again, other = ({r["item_id"] for r in _records(tmp_path / name)} for name in ("s1", "s2", "s3"))
    assert len(first) == 12 and first == again and first != other
    items, _ = load_items(ROOT / "datasets" / "demo" / "greenleaf.jsonl")
    share = sum(1 for i in items if i.category == "Management") / len(items)
    management = sum(1 for r in _records(tmp_path / "s1") if r["category"] == "Management")
    assert abs(management - 12 * share) < 1  # proportional quota, rounded


# --------------------------------------------------------------------------- trials


def test_trials_give_pass_hat_k_pass_at_k_and_consistency(tmp_path: Path) -> None:
    assert _run(tmp_path, "tri", "--trials", "3", "--set", "model_config=simulated:noisy") == 0
    run_dir = tmp_path / "tri"
    records = _records(run_dir)
    by_item: dict[str, list[int]] = {}
    for record in records:
        by_item.setdefault(record["item_id"], []).append(record["trial"])
    assert all(sorted(trials) == [1, 2, 3] for trials in by_item.values())
    seeds = {(r["item_id"], r["trial"]): r["seed"] for r in records}
    assert len(set(seeds.values())) == len(seeds)  # every trial its own seed
    summary = _summary(run_dir)
    assert summary["complete"] is True and summary["total_items"] == 3 * len(by_item)
    trials = summary["trials"]
    hat = [trials["pass_hat_k"][k]["rate"] for k in ("1", "2", "3")]
    at = [trials["pass_at_k"][k]["rate"] for k in ("1", "2", "3")]
    assert hat[0] >= hat[1] >= hat[2] and at[0] <= at[1] <= at[2] and hat[0] == pytest.approx(at[0])
    assert hat[0] > hat[2]  # the noisy agent is not consistent: the figures must differ
    for entry in (*trials["pass_hat_k"].values(), *trials["pass_at_k"].values()):
        low, high = entry["ci95"]
        assert low <= entry["rate"] <= high
    consistency = trials["consistency"]
    assert consistency["items"] == len(by_item) and 0 <= consistency["consistent"] < len(by_item)
    inconsistent = {(i["item_id"], i["passed"]) for i in trials["inconsistent_items"]}
    assert len(inconsistent) == len(by_item) - consistency["consistent"]
    assert "pass^3" in (run_dir / "summary.md").read_text(encoding="utf-8")
    # the rates' intervals resample items with their trials (docs/runs.md, "Statistics by item")
    per_item: dict[str, list[int]] = {}
    for record in records:
        counts = per_item.setdefault(record["item_id"], [0, 0])
        counts[0] += 1
        counts[1] += bool(record["phases"] and record["phases"][0]["passed"])
    success = summary["success"]["main"]
    assert success["ci"] == [round(v, 4) for v in cluster_rate_ci([(n, c) for n, c in per_item.values()])]
    assert success["ci"] != [round(v, 4) for v in rate_ci(success["passed"], success["total"])]  # not by outcome
    # pass^k is recomputed from the journal alone by `evalbench report`
    assert main(["report", str(run_dir), "--no-html"]) == 0
    assert _summary(run_dir)["trials"] == trials


def test_trial_one_is_the_run_without_trials_and_trials_grow_on_resume(tmp_path: Path) -> None:
    assert _run(tmp_path, "one", "--set", "model_config=simulated:noisy", "--limit", "12") == 0
    assert _run(tmp_path, "two", "--set", "model_config=simulated:noisy", "--trials", "2", "--limit", "12") == 0
    single = {r["item_id"]: (r["seed"], r["outcome"], r["reward"]) for r in _records(tmp_path / "one")}
    first = {r["item_id"]: (r["seed"], r["outcome"], r["reward"]) for r in _records(tmp_path / "two") if r["trial"] == 1}
    assert first == single
    # a third trial is added by --resume; fewer trials are refused
    assert main(["run", "--config", str(QUICKSTART), "--resume", str(tmp_path / "one"), "--trials", "3",
                 "--set", "model_config=simulated:noisy", "--limit", "12", "--no-progress"]) == 0
    assert sorted({r["trial"] for r in _records(tmp_path / "one")}) == [1, 2, 3]
    assert _summary(tmp_path / "one")["complete"] is True
    assert main(["run", "--config", str(QUICKSTART), "--resume", str(tmp_path / "one"), "--trials", "2",
                 "--set", "model_config=simulated:noisy", "--limit", "12", "--no-progress"]) == 2


# --------------------------------------------------------------------------- retry errors


GOLDEN = {f"q{i}": f"SELECT store_name FROM stores WHERE store_id <= {i} ORDER BY store_id" for i in range(1, 9)}


class FlakyOracle(AttackAgent):
    """An agent over HTTP answering each item's golden SQL, except for ``down`` items: 503."""

    def __init__(self, down: set[str]) -> None:
        super().__init__(dict(GOLDEN))
        self.down = down

    def _respond(self, request: Received) -> Scripted:
        if not isinstance(request.json(), dict):  # not a chat completion (a check that the model is listed)
            return Scripted(200, {"object": "list", "data": [{"id": "attacker", "object": "model"}]})
        text = json.dumps(request.json())
        if any(f"[attack:{item_id}]" in text for item_id in self.down):
            return Scripted(503, {"error": {"message": "service unavailable"}})
        return super()._respond(request)


def test_retry_errors_after_a_flaky_endpoint_equals_an_uninterrupted_run(tmp_path: Path) -> None:
    items = [item(item_id, sql, order=True) for item_id, sql in GOLDEN.items()]
    with FlakyOracle(down={"q2", "q5", "q6"}) as flaky, FlakyOracle(down=set()) as healthy:
        flaky_config = write_run(tmp_path, items, flaky)
        healthy_config = tmp_path / "healthy.yaml"  # the same run, another endpoint
        settings = json.loads(flaky_config.read_text(encoding="utf-8"))
        settings["model_config"]["base_url"] = healthy.base_url
        healthy_config.write_text(json.dumps(settings), encoding="utf-8")
        assert _run(tmp_path, "flaky", config=flaky_config) in (0, 1)
        run_dir = tmp_path / "flaky"
        assert sorted(r["item_id"] for r in _records(run_dir) if r["outcome"] == "agent_error") == ["q2", "q5", "q6"]
        # without --retry-errors nothing is left to run, and the endpoint may not change
        assert main(["run", "--config", str(healthy_config), "--resume", str(run_dir), "--no-progress"]) == 2
        # --retry-errors redoes the errors, here against the healthy endpoint
        assert main(["run", "--config", str(healthy_config), "--resume", str(run_dir), "--retry-errors",
                     "--no-progress"]) == 0
        assert _run(tmp_path, "clean", config=healthy_config) == 0
    records = _records(run_dir)
    assert len(records) == len(GOLDEN) and {r["outcome"] for r in records} == {"scored"}
    assert _comparable(_summary(run_dir)) == _comparable(_summary(tmp_path / "clean"))
    session = json.loads((run_dir / "manifest.json").read_text())["sessions"][-1]
    assert session["retry_errors"] is True
    assert any(change.startswith("model_config.base_url") for change in session["config_changes"])


def test_retry_errors_needs_resume(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "x", "--retry-errors") == 2
    assert "--retry-errors needs --resume" in capsys.readouterr().err


def test_compare_pairs_trials_trial_by_trial(tmp_path: Path) -> None:
    from evalbench.results.summary.comparison import MCNEMAR, SIGN_FLIP, compare_runs, render_markdown, render_text

    subset = ("--limit", "10")
    assert _run(tmp_path, "n3", "--trials", "3", "--set", "model_config=simulated:noisy", *subset) == 0
    assert _run(tmp_path, "o3", "--trials", "3", "--set", "model_config=simulated:oracle", *subset) == 0
    assert _run(tmp_path, "o1", "--set", "model_config=simulated:oracle", *subset) == 0
    items = len({r["item_id"] for r in _records(tmp_path / "o1")})
    both = compare_runs(tmp_path / "n3", tmp_path / "o3", force=True)
    main_phase = both.phase("main")
    assert main_phase.pairs == 3 * items and not main_phase.only_in_a and not main_phase.only_in_b
    assert any(flip.trial == 3 and flip.name.endswith("(trial 3)") for flip in both.improvements)
    # one trial against three: trial 1 is paired, the later trials are listed as unpaired
    mixed = compare_runs(tmp_path / "o1", tmp_path / "o3", force=True).phase("main")
    assert mixed.pairs == items and len(mixed.only_in_b) == 2 * items
    # with trials, the p-value and interval take the item as the unit
    assert main_phase.test == SIGN_FLIP and main_phase.items == items and mixed.test == MCNEMAR
    assert f"{3 * items} paired trial(s) of {items} item(s)" in render_markdown(both)
    assert "sign-flip by item p" in render_text(both)


def test_a_gate_with_trials_pairs_items(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """--max-regression on runs with trials pairs each item's pass rate over its trials."""
    subset = ("--limit", "10", "--trials", "2")
    assert _run(tmp_path, "oracle", "--set", "model_config=simulated:oracle", *subset) == 0
    assert _run(tmp_path, "noisy", "--set", "model_config=simulated:noisy", *subset,
                "--baseline", str(tmp_path / "oracle"), "--max-regression", "success=5%") == 1
    out = capsys.readouterr().out
    assert "gate max-regression success=5%: FAIL" in out and "paired over 10 item(s)" in out, out
    assert _run(tmp_path, "noisy2", "--set", "model_config=simulated:noisy", "--set", "seed=7", *subset,
                "--baseline", str(tmp_path / "noisy"), "--max-regression", "success=0") == 0
    assert "paired over 10 item(s)" in capsys.readouterr().out


def test_gates_on_pass_hat_k(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ("--limit", "8", "--set", "model_config=simulated:oracle", "--trials", "2")
    assert _run(tmp_path, "g1", *args, "--fail-under", "pass_hat_k.2=90%", "--fail-under", "consistency=0.9") == 0
    assert _run(tmp_path, "g2", *args, "--fail-under", "pass_hat_k.5=90%") == 2  # a misspelt gate fails before the run
    assert "pass_hat_k.5" in capsys.readouterr().err and not (tmp_path / "g2").exists()

"""Comparing two runs (evalbench/results/summary/comparison.py) on real quickstart runs: the noisy agent
with two seeds, on the embedded PostgreSQL."""

from __future__ import annotations

import io
import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from evalbench.config import load_run_config
from evalbench.core.errors import EvalbenchError
from evalbench.results import read_journal
from evalbench.results.summary.comparison import (
    CompareError,
    Comparison,
    Flip,
    IncomparableRuns,
    PhaseComparison,
    RunInfo,
    Side,
    compare_runs,
    render_html,
    render_markdown,
    render_text,
    write_comparison,
)
from evalbench.results.summary.stats import mcnemar_exact
from evalbench.run import run

ROOT = Path(__file__).resolve().parents[2]
METRIC = "exec_match"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory, pgdata: Path) -> tuple[Path, Path]:
    """Two quickstart runs (noisy agent, seeds 42 and 7): run directories A and B."""
    out = tmp_path_factory.mktemp("compare_runs")
    for run_id, seed in (("a", 42), ("b", 7)):
        config = load_run_config(ROOT / "configs" / "quickstart.yaml", seed=seed, run_id=run_id,
                                 reporting={"csv": {"output_directory": str(out)}})
        run(config, progress=False, out=io.StringIO())
    return out / "a", out / "b"


def copy_run(src: Path, dst: Path, *, manifest: Callable[[dict[str, Any]], None] | None = None,
             records: Callable[[list[dict[str, Any]]], list[dict[str, Any]]] | None = None) -> Path:
    """A copy of a run directory, with its manifest and/or journal records edited."""
    shutil.copytree(src, dst)
    if manifest is not None:
        data = json.loads((dst / "manifest.json").read_text())
        manifest(data)
        (dst / "manifest.json").write_text(json.dumps(data))
    if records is not None:
        edited = records(list(read_journal(dst)))
        (dst / "conversations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in edited))
    return dst


def verdicts(run_dir: Path, metric: str = METRIC) -> dict[tuple[str, str], bool | None]:
    """(item, phase) -> passed (None: not applicable), straight from the journal."""
    out = {}
    for record in read_journal(run_dir):
        for phase in record["phases"]:
            score = phase["scores"][metric]
            out[(record["item_id"], phase["phase"])] = score["passed"] if score["applicable"] else None
    return out


def _compare(run_a: Path, run_b: Path, **options: Any) -> Any:
    """compare_runs on one scorer (these tests check its per-scorer rules; the default is ``success``)."""
    options.setdefault("metric", METRIC)
    return compare_runs(run_a, run_b, **options)


def score_of(record: dict[str, Any], phase: str = "main") -> dict[str, Any]:
    return next(p for p in record["phases"] if p["phase"] == phase)["scores"][METRIC]


# ------------------------------------------------------------------------------ two real runs


def test_flips_and_counts_match_the_journals(runs):
    run_a, run_b = runs
    assert compare_runs(run_a, run_b).metric == "success"  # by default: each phase's own verdict
    c = _compare(run_a, run_b, metric=METRIC)
    assert not c.differences and not c.forced  # agent seed and run id differ: that is expected

    va, vb = verdicts(run_a), verdicts(run_b)
    expected_regressions = sorted(k for k in va.keys() & vb.keys() if va[k] is True and vb[k] is False)
    expected_improvements = sorted(k for k in va.keys() & vb.keys() if va[k] is False and vb[k] is True)
    assert sorted((f.item_id, f.phase) for f in c.regressions) == expected_regressions
    assert sorted((f.item_id, f.phase) for f in c.improvements) == expected_improvements
    assert expected_regressions or expected_improvements, "the two seeds should disagree somewhere"
    for flip in c.regressions:
        assert flip.a.passed is True and flip.b.passed is False and flip.b.detail
    for flip in c.improvements:
        assert flip.a.passed is False and flip.b.passed is True and flip.a.detail

    for phase in c.phases:
        keys = {k for k in va.keys() & vb.keys() if k[1] == phase.phase}
        pairs = [(va[k], vb[k]) for k in keys]
        assert (phase.n11, phase.n10, phase.n01, phase.n00) == (
            pairs.count((True, True)), pairs.count((True, False)), pairs.count((False, True)), pairs.count((False, False)))
        assert sorted(phase.only_in_a) == sorted(i for i, p in va.keys() - vb.keys() if p == phase.phase)
        assert sorted(phase.only_in_b) == sorted(i for i, p in vb.keys() - va.keys() if p == phase.phase)
        assert 0.0 <= phase.p_value <= 1.0
        assert phase.p_value == mcnemar_exact(phase.n10, phase.n01)
        if phase.pairs:
            low, high = phase.ci
            assert -1.0 <= low <= phase.diff <= high <= 1.0

    main = c.headline
    items = len(list(read_journal(run_a)))
    assert main.pairs + main.not_applicable == items  # every item is counted; the main phase always exists
    summary_a = json.loads((run_a / "summary.json").read_text())["scorers"][METRIC]["main"]
    summary_b = json.loads((run_b / "summary.json").read_text())["scorers"][METRIC]["main"]
    assert main.rate_a == pytest.approx(summary_a["rate"], abs=1e-4)
    assert main.rate_b == pytest.approx(summary_b["rate"], abs=1e-4)
    assert main.diff == pytest.approx(main.rate_b - main.rate_a)
    assert c.a.records == c.b.records == items
    assert sum(c.a.outcomes.values()) == items and c.a.seed == 42 and c.b.seed == 7


def test_a_run_compared_with_itself(runs):
    run_a, _ = runs
    c = _compare(run_a, run_a)
    assert c.regressions == [] and c.improvements == []
    for phase in c.phases:
        assert phase.p_value == 1.0
        assert phase.ci == (0.0, 0.0)
        assert phase.diff == 0.0
        assert phase.only_in_a == phase.only_in_b == []
    assert "no significant difference" in render_text(c)


def test_renderings(runs, tmp_path):
    c = _compare(*runs)
    text = render_text(c)
    assert f"compare {METRIC}: A = a vs B = b" in text
    assert "McNemar p" in text and "main" in text
    if c.regressions:
        assert c.regressions[0].item_id in text

    markdown = render_markdown(c)
    assert markdown.startswith("## evalbench compare: a → b")
    assert "McNemar exact p" in markdown and "| phase | pairs |" in markdown
    assert f"### Regressions (A pass → B fail): {len(c.regressions)}" in markdown

    page = render_html(c, tmp_path / "out")
    assert page.startswith("<!DOCTYPE html>") and page.rstrip().endswith("</html>")
    for flip in c.regressions + c.improvements:
        assert f"<td>{flip.item_id}</td>" in page
    for external in ("http://", "https://", "<script", "<link", "src=", "@import", "url("):
        assert external not in page, external

    paths = write_comparison(c, tmp_path / "out")
    assert [p.name for p in paths] == ["compare.html", "compare.md"]
    assert paths[0].read_text() == page and paths[1].read_text() == markdown
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["compare.html", "compare.md"]  # no temp files left


def test_another_pass_fail_metric(runs):
    c = _compare(*runs, metric="executable")
    va, vb = verdicts(runs[0], "executable"), verdicts(runs[1], "executable")
    assert c.metric == "executable"
    assert sorted((f.item_id, f.phase) for f in c.regressions) == sorted(
        k for k in va.keys() & vb.keys() if va[k] is True and vb[k] is False)


def test_each_phase_own_verdict(runs):
    c = _compare(*runs, metric="success")
    verdict = {}
    for label, run_dir in zip("ab", runs, strict=True):
        for record in read_journal(run_dir):
            for phase in record["phases"]:
                if "passed" in phase:
                    passed = phase["passed"]
                else:  # records written before phases carried their verdict: the first pass/fail score
                    passed = next((bool(s["passed"]) for s in phase["scores"].values() if s["passed"] is not None), False)
                verdict[(label, record["item_id"], phase["phase"])] = passed
    main = c.headline
    items = len(list(read_journal(runs[0])))
    assert main.pairs == items and main.not_applicable == 0  # every phase has a verdict
    expected = sorted((i, p) for (label, i, p), passed in verdict.items()
                      if label == "a" and passed and verdict.get(("b", i, p)) is False)
    assert sorted((f.item_id, f.phase) for f in c.regressions) == expected


@pytest.mark.parametrize("metric", ["turn_count", "no_such_scorer"])
def test_a_metric_scorer_or_an_unknown_one_is_refused(runs, metric):
    with pytest.raises(CompareError, match=metric):
        _compare(*runs, metric=metric)


# ------------------------------------------------------------------------------ refusals


def test_refuses_a_different_dataset_and_scorer_set_listing_both(runs, tmp_path):
    def edit(manifest: dict[str, Any]) -> None:
        manifest["dataset"]["sha256"] = "0" * 64
        manifest["scorers"] = ["exec_match", "executable", "turn_count", "set_match"]

    other = copy_run(runs[1], tmp_path / "b2", manifest=edit)
    with pytest.raises(IncomparableRuns) as caught:
        _compare(runs[0], other)
    assert len(caught.value.differences) == 2
    message = str(caught.value)
    assert "dataset" in message and "000000000000" in message
    assert "scorers" in message and "set_match" in message and "--force" in message
    assert isinstance(caught.value, EvalbenchError) and caught.value.exit_code == 2

    forced = _compare(runs[0], other, force=True)
    assert forced.forced and forced.differences == caught.value.differences
    assert forced.headline.pairs == _compare(*runs).headline.pairs
    for rendering in (render_text(forced), render_markdown(forced), render_html(forced)):
        assert "compared with --force although dataset" in rendering


def test_refuses_a_different_virtual_user(runs, tmp_path):
    def edit(manifest: dict[str, Any]) -> None:
        manifest["vuser"] |= {"vuser": "llm", "model": "gemini-x", "temperature": 0.7, "encode_prompt_sha256": "ab"}

    other = copy_run(runs[1], tmp_path / "b2", manifest=edit)
    with pytest.raises(IncomparableRuns) as caught:
        _compare(runs[0], other)
    assert [d.split(":")[0] for d in caught.value.differences] == [
        "virtual user vuser", "virtual user model", "virtual user encode_prompt_sha256", "virtual user temperature"]


def test_options_of_the_compared_scorer_refuse_and_other_settings_are_notes(runs, tmp_path):
    def edit(manifest: dict[str, Any]) -> None:
        manifest["config"]["scorers"]["executable"] = {"something": 1}
        manifest["vuser"]["patience"] = 5
        manifest["agent"] = {"agent": "gemini", "model": "gemini-2.5-flash"}

    other = copy_run(runs[1], tmp_path / "b2", manifest=edit)
    c = _compare(runs[0], other)  # executable is not the compared scorer; patience is a note
    assert any("scorer executable options" in n for n in c.notes)
    assert any("patience" in n for n in c.notes)
    assert c.b.agent == "gemini gemini-2.5-flash"
    with pytest.raises(IncomparableRuns, match="scorer executable options"):
        _compare(runs[0], other, metric="executable")


def test_not_a_run_directory(runs, tmp_path):
    with pytest.raises(CompareError, match="no such run directory"):
        _compare(tmp_path / "missing", runs[1])
    (tmp_path / "empty").mkdir()
    with pytest.raises(CompareError, match=r"no manifest\.json"):
        _compare(runs[0], tmp_path / "empty")


def test_a_journal_line_cut_short_is_ignored_with_a_warning(runs, tmp_path, caplog):
    other = copy_run(runs[1], tmp_path / "b2")
    with (other / "conversations.jsonl").open("a") as handle:
        handle.write('{"schema_version": 1, "item_id": "trunc')  # a crash in the middle of a line
    assert _compare(runs[0], other).headline == _compare(*runs).headline
    assert "the last line is cut short" in caplog.text


def test_a_record_of_a_newer_schema_is_named(runs, tmp_path):
    other = copy_run(runs[1], tmp_path / "b3")
    count = len(list(read_journal(other)))
    record = next(iter(read_journal(other)))
    with (other / "conversations.jsonl").open("a") as handle:
        handle.write(json.dumps({**record, "item_id": "new", "schema_version": 99}) + "\n")
    with pytest.raises(CompareError, match=f"record {count + 1} has unsupported schema_version 99"):
        _compare(runs[0], other)


# ------------------------------------------------------------------------------ alignment


def test_items_in_one_run_only_are_listed_not_paired(runs, tmp_path):
    full = _compare(*runs).headline
    records_b = list(read_journal(runs[1]))
    kept = [r for r in records_b if score_of(r)["applicable"]][:-3]
    dropped = sorted({r["item_id"] for r in records_b} - {r["item_id"] for r in kept})
    partial = copy_run(runs[1], tmp_path / "partial", records=lambda rs: kept)  # as if B had stopped early
    c = _compare(runs[0], partial)
    assert c.headline.pairs + c.headline.not_applicable == len(kept)
    assert c.headline.pairs == full.pairs - 3
    assert sorted(c.headline.only_in_a) == sorted(dropped)
    assert not {f.item_id for f in c.regressions + c.improvements if f.phase == "main"} & set(dropped)
    assert "journaled in A only" in render_text(c)

    reverse = _compare(partial, runs[0])
    assert sorted(reverse.headline.only_in_b) == sorted(dropped)


def test_not_applicable_pairs_are_excluded_and_counted(runs, tmp_path):
    before = _compare(*runs).headline
    va, vb = verdicts(runs[0]), verdicts(runs[1])
    both = sorted(item for (item, phase), passed in va.items() if phase == "main" and passed is not None
                  and vb[(item, phase)] is not None)
    neither, one_side = both[0], both[1]

    def not_applicable(ids: set[str]) -> Callable[[list[dict[str, Any]]], list[dict[str, Any]]]:
        def edit(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
            for record in records:
                if record["item_id"] in ids:
                    score_of(record).update(applicable=False, passed=None, detail="not applicable")
            return records
        return edit

    a2 = copy_run(runs[0], tmp_path / "a2", records=not_applicable({neither}))
    b2 = copy_run(runs[1], tmp_path / "b2", records=not_applicable({neither, one_side}))
    c = _compare(a2, b2)
    assert c.headline.not_applicable == before.not_applicable + 1
    assert c.headline.applicability_differs == [one_side]
    assert c.headline.pairs == before.pairs - 2
    assert not {f.item_id for f in c.regressions + c.improvements if f.phase == "main"} & {neither, one_side}


def test_a_run_without_summary_compares(runs, tmp_path):
    crashed = copy_run(runs[0], tmp_path / "a2")
    (crashed / "summary.json").unlink()  # a run that did not finish has no summary
    assert _compare(crashed, runs[1]).headline.pairs == _compare(*runs).headline.pairs


def test_details_are_escaped(runs, tmp_path):
    c = _compare(*runs)
    flip = (c.regressions or c.improvements)[0]
    nasty = '<script>alert("x")</script> | `code` & *stars*\nsecond line'

    def edit(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for record in records:
            if record["item_id"] == flip.item_id:
                next(p for p in record["phases"] if p["phase"] == flip.phase)["scores"][METRIC]["detail"] = nasty
        return records

    b2 = copy_run(runs[1], tmp_path / "b2", records=edit)
    c2 = _compare(runs[0], b2)
    page, markdown = render_html(c2), render_markdown(c2)
    assert "<script" not in page and "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;" in page
    assert "<script" not in markdown and "&lt;script&gt;" in markdown and "\\|" in markdown
    row = next(line for line in markdown.splitlines() if "&lt;script&gt;" in line)
    assert row.count(" | ") == 5 and "second line" in row  # still one table row of six cells


# ------------------------------------------------------------------------------ rendering limits


def test_markdown_caps_the_flips_and_html_lists_them_all():
    side_pass = Side("scored", True, True, "same rows")
    side_fail = Side("agent_error", False, True, "agent failed")
    flips = [Flip(f"item_{i}", "main", side_pass, side_fail) for i in range(60)]
    main = PhaseComparison("main", n11=10, n10=60, n01=0, n00=5, p_value=mcnemar_exact(60, 0), ci=(-0.9, -0.7))
    run_a = RunInfo(Path("/runs/a"), "a", "simulated:noisy", 1, None, None, 75, {"scored": 75})
    run_b = RunInfo(Path("/runs/b"), "b", "simulated:noisy", 2, None, None, 75, {"scored": 15, "agent_error": 60})
    c = Comparison(run_a, run_b, METRIC, [main], regressions=flips, improvements=[])
    markdown = render_markdown(c)
    assert markdown.count("| pass | fail (agent\\_error) |") == 50
    assert "… and 10 more" in markdown
    assert "B is worse than A" in markdown
    assert render_html(c).count("<tr><td>item_") == 60
    assert "... and 50 more" in render_text(c)

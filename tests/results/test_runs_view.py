"""Many runs: `evalbench runs`, `evalbench view` (index.html in headless Chromium, its matrix links
resolving to existing reports and conversations), compare.html links, read_run, the diagnosis in
the journal and the CSVs, the SQL diff in report.html, and docs/results_schema.md kept complete.

Three real quickstart runs (embedded PostgreSQL, rules virtual user) are shared by the module:
the noisy agent with seeds 42 and 7, and the oracle."""

from __future__ import annotations

import csv
import json
import re
import shutil
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import pytest

from evalbench.cli import main
from evalbench.results import read_journal, read_run
from evalbench.results.render.evalbench_csv import cell, eval_row
from evalbench.results.render.html_report import write_report
from evalbench.results.render.links import conversation_anchor
from evalbench.results.render.sqldiff import sql_diff
from evalbench.results.summary.taxonomy import diagnose, passed
from tests.results.test_html_report import CHROMIUM_FLAGS, chromium_binary, embedded_data, save_artifact

ROOT = Path(__file__).resolve().parents[2]
RUNS = {"a_noisy": [], "b_oracle": ["--set", "model_config=simulated:oracle"], "c_noisy7": ["--set", "seed=7"]}


@pytest.fixture(scope="module")
def runs_root(tmp_path_factory: pytest.TempPathFactory, pgdata: Path) -> Path:
    """A folder with three complete quickstart runs, made in the order of RUNS."""
    root = tmp_path_factory.mktemp("many_runs")
    for run_id, extra in RUNS.items():
        code = main(["run", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--output-dir", str(root),
                     "--run-id", run_id, "--no-progress", *extra])
        assert code == 0, run_id
    return root


@pytest.fixture(scope="module")
def mixed_root(runs_root: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One complete run, an interrupted copy of it (journal cut mid-line, no summary.json, no
    finished_at), a folder with a broken manifest and no journal, and a folder that is no run."""
    root = tmp_path_factory.mktemp("mixed_runs")
    shutil.copytree(runs_root / "a_noisy", root / "a_noisy")
    partial = root / "partial"
    partial.mkdir()
    manifest = json.loads((runs_root / "a_noisy" / "manifest.json").read_text())
    manifest.pop("finished_at")
    manifest["sessions"][-1].pop("finished_at")
    (partial / "manifest.json").write_text(json.dumps(manifest))
    journal = (runs_root / "a_noisy" / "conversations.jsonl").read_bytes()
    cut = journal.index(b"\n", len(journal) // 3) + 40  # ten-odd whole lines, then half a line
    (partial / "conversations.jsonl").write_bytes(journal[:cut])
    (root / "broken").mkdir()
    (root / "broken" / "manifest.json").write_text("{not json")
    (root / "notes").mkdir()
    (root / "notes" / "readme.txt").write_text("not a run")
    return root


def records_of(run_dir: Path) -> list[dict[str, Any]]:
    return list(read_journal(run_dir))


# --------------------------------------------------------------------------- evalbench runs


def test_runs_lists_runs_oldest_first_with_headline_and_status(runs_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", str(runs_root)]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:3] == ["RUN", "DATE", "(UTC)"]
    listed = [line.split()[0] for line in lines[1:4]]
    assert listed == list(RUNS)  # made in that order: sorted by date
    for line, run_id in zip(lines[1:4], RUNS, strict=True):
        summary = json.loads((runs_root / run_id / "summary.json").read_text())
        main_phase = summary["success"]["main"]
        lo, hi = main_phase["ci"]
        headline = f"{100 * main_phase['rate']:.1f}% [{100 * lo:.1f}–{100 * hi:.1f}%] {main_phase['passed']}/{main_phase['total']}"
        assert headline in line and " complete " in line
        manifest = json.loads((runs_root / run_id / "manifest.json").read_text())
        assert manifest["agent"]["agent"] in line
        assert line.rstrip().endswith(manifest["config_file"])
    assert "100.0% [100.0–100.0%] 43/43" in lines[2]  # the oracle
    assert "3 run(s)" in lines[-1]

    assert main(["runs", str(runs_root), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert [d["run_id"] for d in data] == list(RUNS)
    assert all(d["status"] == "complete" and len(d["ci"]) == 2 for d in data)
    manifest = json.loads((runs_root / "a_noisy" / "manifest.json").read_text())
    assert data[0]["dataset"] == manifest["dataset"]["path"] and data[0]["config_file"] == manifest["config_file"]


def test_runs_tolerates_broken_and_partial_run_dirs(mixed_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", str(mixed_root), "--json"]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    by_name = {d["name"]: d for d in json.loads(captured.out)}
    assert set(by_name) == {"a_noisy", "partial", "broken"}  # notes/ holds no run file: not a run
    assert by_name["a_noisy"]["status"] == "complete"
    partial = by_name["partial"]
    assert partial["status"].startswith("incomplete: the run did not finish")
    conversations = len(records_of(mixed_root / "partial"))
    assert 0 < conversations < 43 and partial["total"] == conversations  # recomputed from the journal
    assert partial["rate"] is not None
    assert by_name["broken"]["status"].startswith("broken: no conversations.jsonl")
    assert "manifest.json is unreadable" in by_name["broken"]["status"]

    assert main(["runs", str(mixed_root)]) == 0
    text = capsys.readouterr().out
    assert "partial (run_id a_noisy)" in text and "broken: no conversations.jsonl" in text


def test_runs_of_a_missing_folder_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["runs", str(tmp_path / "nowhere")]) == 2
    err = capsys.readouterr().err
    assert "nowhere: no such directory" in err and "Traceback" not in err
    assert main(["view", str(tmp_path / "nowhere")]) == 2


# --------------------------------------------------------------------------- evalbench view


def report_anchors(report: Path) -> set[str]:
    """The fragments report.html opens: one per row of its embedded data (links.py's form)."""
    rows = embedded_data(report.read_text(encoding="utf-8"))["rows"]
    return {conversation_anchor({"item_id": r["id"], "trial": r.get("trial", 1)}) for r in rows}


def check_link(page: Path, href: str) -> tuple[Path, str]:
    """``href`` (relative to ``page``) names an existing report.html and one of its conversations."""
    parts = urlsplit(href)
    assert not parts.scheme and not parts.netloc, href  # relative
    target = (page.parent / unquote(parts.path)).resolve()
    assert target.is_file() and target.name == "report.html", href
    assert parts.fragment in report_anchors(target), href
    return target, parts.fragment


def test_view_writes_index_with_every_run_and_the_matrix(runs_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = runs_root / "index.html"
    assert main(["view", str(runs_root), "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    page = out.read_text(encoding="utf-8")
    assert "default-src 'none'" in page
    assert not re.search(r"""(?:src|href)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I)
    data = json.loads(re.search(r'<script type="application/json" id="evalbench-view">(.*?)</script>', page, re.S).group(1))
    assert [r["id"] for r in data["runs"]] == list(RUNS)
    assert [r["href"] for r in data["runs"]] == [f"{run_id}/report.html" for run_id in RUNS]
    ids = {r["item_id"] for r in records_of(runs_root / "a_noisy")}
    assert {r["id"] for r in data["rows"]} == ids and len(data["rows"]) == len(ids)
    for index, run_id in enumerate(RUNS):
        for record in records_of(runs_root / run_id):
            row = next(r for r in data["rows"] if r["id"] == record["item_id"])
            code = row["c"][index]
            errors = ("agent_error", "timeout", "db_error", "vuser_error", "cancelled")
            assert code[0] == ("e" if record["outcome"] in errors else "p" if passed(record) else "f")
            assert code[3] == (None if passed(record) else diagnose(record).kind.value)


def test_view_in_headless_chromium(runs_root: Path, tmp_path: Path) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no Chromium binary (chromium on PATH, /usr/bin/chromium or EVALBENCH_CHROMIUM)")
    from playwright.sync_api import sync_playwright  # the dev extra

    out = runs_root / "site" / "index.html"  # in a subfolder: links must climb out of it
    assert main(["view", str(runs_root), "-o", str(out)]) == 0
    records = {run_id: {r["item_id"]: r for r in records_of(runs_root / run_id)} for run_id in RUNS}
    items = sorted(records["a_noisy"])
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(out.as_uri())
            page.wait_for_selector("html[data-ready]", timeout=10_000)

            # the matrix: one row per item, one column per run, every cell a link
            assert int(page.inner_text("#v-count")) == len(items)
            assert page.locator("#matrix-body tr").count() == len(items)
            assert page.locator("#matrix-head th.run").count() == len(RUNS)
            cell_links = page.eval_on_selector_all("#matrix-body td.cell a", "els => els.map(e => e.getAttribute('href'))")
            assert len(cell_links) == len(items) * len(RUNS)
            oracle_rate = page.inner_text("#matrix-head th.run:nth-child(5) .rate")
            assert oracle_rate == f"100.0% ({len(items)}/{len(items)})"
            page.screenshot(path=str(tmp_path / "view-index.png"), full_page=True)

            # every link resolves: run reports, and each cell to an existing conversation of that run
            for href in page.eval_on_selector_all("#runs-table a", "els => els.map(e => e.getAttribute('href'))"):
                assert (out.parent / unquote(href)).resolve().is_file(), href
            for href in cell_links:
                check_link(out, href)

            # filters: a slice, then rows where the runs disagree
            management = sum(1 for r in records["a_noisy"].values() if r["category"] == "Management")
            assert 0 < management < len(items)
            page.select_option("#v-slice-cat", "Management")
            assert int(page.inner_text("#v-count")) == management
            page.click("#v-reset")
            disagree = sum(1 for i in items if len({passed(records[run][i]) for run in RUNS}) > 1)
            page.select_option("#v-rows", "differ")
            assert int(page.inner_text("#v-count")) == disagree
            page.click("#v-reset")
            page.select_option("#v-phase", "2")  # the follow-up phase: items that reached it in some run
            reached = sum(1 for i in items if any(len(records[run][i]["phases"]) > 1 for run in RUNS))
            assert int(page.inner_text("#v-count")) == reached
            page.click("#v-reset")

            # following a failing cell opens that conversation in that run's report, with its SQL diff
            failing = next(i for i in items if not passed(records["c_noisy7"][i])
                           and sql_diff(records["c_noisy7"][i]["phases"][0]["golden_sql"][0], records["c_noisy7"][i]["phases"][0]["sql"]))
            row = page.locator("#matrix-body tr", has=page.locator("td.id", has_text=re.compile(f"^{failing}$")))
            row.locator("td.cell a").nth(2).click()
            page.wait_for_selector("#detail[open]", timeout=10_000)
            assert page.inner_text("#detail-title") == failing
            assert page.url.split("#")[0].endswith("c_noisy7/report.html")
            assert failing in page.url and "Diagnosis:" in page.inner_text("#detail-body")
            assert page.locator("#detail .sql-diff").count() >= 1
            page.screenshot(path=str(tmp_path / "view-followed.png"))
            assert page.evaluate("document.querySelectorAll('script').length") == 2
        finally:
            browser.close()
    assert errors == []
    assert all(u.startswith(("file:", "data:")) for u in requests), requests
    for name in ("view-index.png", "view-followed.png"):
        save_artifact(tmp_path / name)


def test_view_lists_broken_runs_without_a_column(mixed_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["view", str(mixed_root)]) == 0
    out = capsys.readouterr().out
    assert "broken: broken: no conversations.jsonl" in out and "not in the matrix" in out
    assert "no report.html" in out  # the interrupted copy: its cells do not link
    page = (mixed_root / "index.html").read_text(encoding="utf-8")
    data = json.loads(re.search(r'id="evalbench-view">(.*?)</script>', page, re.S).group(1))
    assert [r["id"] for r in data["runs"] if r["column"]] == ["a_noisy", "partial (run_id a_noisy)"]
    assert "broken" in [r["id"] for r in data["runs"]]


HOSTILE_RUN = 'big"><img src=x onerror=alert(1)>'
HOSTILE_ITEM = "<script>alert(2)</script>&trial=2#x"
ITEMS = 2000


def test_view_of_thousands_of_items_stays_usable_and_inert(runs_root: Path, tmp_path: Path) -> None:
    """Two runs of 2,000 conversations each (the quickstart's records under new item ids, one
    hostile), in folders whose names are markup: the page draws 300 rows at a time, filters
    them, runs no injected markup and its links still resolve."""
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no Chromium binary (chromium on PATH, /usr/bin/chromium or EVALBENCH_CHROMIUM)")
    from playwright.sync_api import sync_playwright

    root = tmp_path / "big"
    for index, source in enumerate(("a_noisy", "c_noisy7")):
        target = root / f"{HOSTILE_RUN}{index}"
        target.mkdir(parents=True)
        shutil.copy(runs_root / source / "manifest.json", target / "manifest.json")
        base = records_of(runs_root / source)
        with (target / "conversations.jsonl").open("w", encoding="utf-8") as out:
            for n in range(ITEMS):
                record = base[n % len(base)] | {"item_id": HOSTILE_ITEM if n == 0 else f"item_{n}"}
                out.write(json.dumps(record) + "\n")
        write_report(target)  # report.html only (its summary recomputed from the journal)
    out = root / "index.html"
    assert main(["view", str(root)]) == 0
    dialogs: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.goto(out.as_uri())
            page.wait_for_selector("html[data-ready]", timeout=20_000)
            assert int(page.inner_text("#v-count")) == ITEMS
            assert page.locator("#matrix-body tr").count() == 300
            page.click("#v-more")
            assert page.locator("#matrix-body tr").count() == 600
            page.fill("#v-q", "item_29")
            assert int(page.inner_text("#v-count")) == sum("item_29" in f"item_{n}" for n in range(1, ITEMS))
            page.fill("#v-q", "<script>")
            assert page.inner_text("#matrix-body td.id") == HOSTILE_ITEM
            href = page.get_attribute("#matrix-body td.cell a", "href")
            target, fragment = check_link(out, href)
            assert unquote(fragment) == HOSTILE_ITEM and target.parent.name == f"{HOSTILE_RUN}0"
            assert page.evaluate("document.querySelectorAll('img').length") == 0
            assert page.evaluate("document.querySelectorAll('script').length") == 2
            assert HOSTILE_RUN in page.inner_text("#runs-table")
            page.goto(out.parent.as_uri() + "/" + href)  # the hostile conversation opens in its report
            page.wait_for_selector("#detail[open]", timeout=20_000)
            assert page.inner_text("#detail-title") == HOSTILE_ITEM
        finally:
            browser.close()
    assert dialogs == []


def test_malformed_records_never_give_a_traceback(runs_root: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A journal with records of unexpected shapes (hand-edited, another tool's): they are not
    conversation records (results/journal/shapes.py), so every reader skips them as it skips a
    line that is not JSON: `runs` and `view` list the run as incomplete, read_run leaves them out."""
    run = tmp_path / "odd" / "w"
    run.mkdir(parents=True)
    shutil.copy(runs_root / "b_oracle" / "manifest.json", run / "manifest.json")
    good = records_of(runs_root / "b_oracle")[0]
    lines = [{"item_id": "x", "outcome": "scored", "phases": [1, 2]}, good,
             {"item_id": "z", "outcome": "scored", "phases": [{"phase": "main", "scores": "none"}]}]
    (run / "conversations.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    assert main(["runs", str(run.parent)]) == 0
    assert main(["view", str(run.parent)]) == 0
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err and " incomplete: " in captured.out
    data = read_run(run)
    assert list(data.conversations["item_id"]) == [good["item_id"]]
    (run / "summary.json").write_text(json.dumps({"complete": True, "success": {"main": {"rate": 1.0, "passed": 1, "total": 1}}}))
    assert main(["view", str(run.parent)]) == 0  # now listed as a run with a column: the good record only
    page = (run.parent / "index.html").read_text(encoding="utf-8")
    assert '"id":"' + good["item_id"] + '"' in page and '"id":"x"' not in page and '"id":"z"' not in page


# --------------------------------------------------------------------------- compare.html


def test_compare_html_links_flips_to_both_conversations(runs_root: Path, tmp_path: Path) -> None:
    out_dir = tmp_path / "cmp"
    assert main(["compare", str(runs_root / "a_noisy"), str(runs_root / "c_noisy7"), "--output-dir", str(out_dir)]) == 0
    page = out_dir / "compare.html"
    text = page.read_text(encoding="utf-8")
    links = re.findall(r'<a href="([^"]+)"', text)
    flips = len(re.findall(r"<tr><td>[^<]+</td><td>(?:main|follow_up)</td>", text))
    assert flips > 0 and len(links) == 2 * flips
    targets = {check_link(page, href)[0].parent.name for href in links}
    assert targets == {"a_noisy", "c_noisy7"}


# --------------------------------------------------------------------------- diagnosis, CSVs, read_run


def test_diagnosis_in_the_journal_and_the_csvs(runs_root: Path) -> None:
    run = runs_root / "a_noisy"
    records = records_of(run)
    failed = [r for r in records if not passed(r)]
    assert failed and len(failed) < len(records)
    for record in records:
        assert "diagnosis" in record
        expected = diagnose(record)
        assert record["diagnosis"] == (None if expected is None else expected.as_dict())
    with (run / "evals.csv").open(newline="", encoding="utf-8") as handle:
        evals = list(csv.DictReader(handle))
    for record in records:
        for row in (r for r in evals if r["item_id"] == record["item_id"]):
            found = record["diagnosis"]
            if found is not None and found["phase"] == row["phase"]:
                assert row["diagnosis"] == found["kind"] and row["diagnosis_message"].lstrip("'").startswith(found["message"][:40])
            else:
                assert row["diagnosis"] == "" and row["diagnosis_message"] == ""
    with (run / "scores_native.csv").open(newline="", encoding="utf-8") as handle:
        scores = list(csv.DictReader(handle))
    kinds = {(r["item_id"], r["phase"]): r["diagnosis"] for r in scores}
    assert sum(1 for v in kinds.values() if v) == len(failed)


def test_diagnosis_cells_are_formula_safe(runs_root: Path) -> None:
    record = next(r for r in records_of(runs_root / "a_noisy") if r["diagnosis"])
    record = record | {"diagnosis": record["diagnosis"] | {"message": "=HYPERLINK(\"http://x\")", "kind": "@other"}}
    row = eval_row(record, record["phases"][0] if record["diagnosis"]["phase"] == "main" else record["phases"][1], "j", "t")
    assert cell(row["diagnosis_message"]).startswith("'=") and cell(row["diagnosis"]) == "'@other"


def test_read_run_returns_dataframes(runs_root: Path) -> None:
    run_dir = runs_root / "a_noisy"
    run = read_run(run_dir)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert run.summary == summary and run.manifest == json.loads((run_dir / "manifest.json").read_text())
    records = records_of(run_dir)
    assert run.conversations.shape[0] == summary["total_items"] == len(records)
    assert run.phases.shape[0] == sum(len(r["phases"]) for r in records)
    with (run_dir / "scores_native.csv").open(newline="", encoding="utf-8") as handle:
        assert run.scores.shape[0] == sum(1 for _ in handle) - 1
    assert {"item_id", "passed", "diagnosis", "trial", "category"} <= set(run.conversations.columns)
    assert int(run.conversations["diagnosis"].notna().sum()) == sum(summary["taxonomy"].values())
    main_phase = run.phases[run.phases["phase"] == "main"]
    assert sum(1 for v in main_phase["passed"] if v is True) == summary["success"]["main"]["passed"]
    by_category = run.conversations.groupby("category")["passed"].mean()
    assert set(by_category.index) == {r["category"] for r in records}


def test_read_run_of_a_folder_that_is_no_run(tmp_path: Path) -> None:
    from evalbench.results.journal.dataframes import RunReadError

    with pytest.raises(RunReadError, match="not a run directory"):
        read_run(tmp_path)


# --------------------------------------------------------------------------- SQL diff


def test_sql_diff_segments_rebuild_both_sides() -> None:
    golden = "SELECT store_name, city FROM stores WHERE city = 'Oslo' ORDER BY store_id;"
    generated = "select store_name from stores where city = 'oslo' order by store_id"
    segments = sql_diff(golden, generated)
    assert segments is not None
    assert "".join(t for op, t in segments if op != "-") == generated
    assert "".join(t for op, t in segments if op != "+").lower() == golden.rstrip(";").lower()
    assert ["-", ", city"] in segments and any(op == "+" and "'oslo'" in t for op, t in segments)
    assert sql_diff("SELECT 1;", "select\n  1") is None  # case, whitespace and the final semicolon only
    assert sql_diff(None, "SELECT 1") is None


def test_report_embeds_the_sql_diff(runs_root: Path) -> None:
    run = runs_root / "a_noisy"
    data = embedded_data((run / "report.html").read_text(encoding="utf-8"))
    assert len(data["diffs"]) == len(data["details"]) == len(records_of(run))
    shown = 0
    for detail, diffs in zip(data["details"], data["diffs"], strict=True):
        expected = [sql_diff((p["golden_sql"] or [None])[0], p["sql"]) for p in detail["phases"]]
        assert diffs == (expected if any(expected) else None)
        shown += sum(1 for d in expected if d)
    assert shown > 0
    oracle = embedded_data((runs_root / "b_oracle" / "report.html").read_text(encoding="utf-8"))
    assert oracle["diffs"] == [None] * len(oracle["details"])  # the golden SQL itself


def test_explain_shows_the_sql_diff(runs_root: Path, capsys: pytest.CaptureFixture[str]) -> None:
    record = next(r for r in records_of(runs_root / "a_noisy")
                  if sql_diff((r["phases"][0]["golden_sql"] or [None])[0], r["phases"][0]["sql"]))
    assert main(["explain", str(runs_root / "a_noisy"), record["item_id"]]) == 0
    out = capsys.readouterr().out
    segments = sql_diff(record["phases"][0]["golden_sql"][0], record["phases"][0]["sql"])
    assert "SQL diff (golden → final" in out
    flat = "".join(out.split())  # wrapped lines: compare without whitespace
    for op, text in segments:
        if op != "=":
            marked = f"[-{text}-]" if op == "-" else f"{{+{text}+}}"
            assert "".join(marked.split()) in flat


# --------------------------------------------------------------------------- docs/results_schema.md


def test_results_schema_names_every_file_column_and_key(runs_root: Path) -> None:
    doc = (ROOT / "docs" / "results_schema.md").read_text(encoding="utf-8")
    documented = set(re.findall(r"`([^`\s]+)`", doc))
    run = runs_root / "a_noisy"
    missing = []
    for path in sorted(run.iterdir()):
        if path.name not in documented:
            missing.append(f"file {path.name}")
        if path.suffix == ".csv":
            with path.open(newline="", encoding="utf-8") as handle:
                missing += [f"{path.name} column {c}" for c in next(csv.reader(handle)) if c not in documented]
    for name in ("summary.json", "manifest.json"):
        missing += [f"{name} key {k}" for k in json.loads((run / name).read_text()) if k not in documented]
    record = records_of(run)[0]
    missing += [f"record field {k}" for k in record if k not in documented]
    missing += [f"phase field {k}" for k in record["phases"][0] if k not in documented]
    missing += [f"turn field {k}" for k in record["turns"][0] if k not in documented]
    missing += [f"read_run column {c}" for c in read_run(run).conversations.columns if c not in documented]
    for name in ("compare.html", "compare.md", "index.html", "junit.xml", "report.html"):
        if name not in documented:
            missing.append(f"file {name}")
    assert not missing, f"docs/results_schema.md does not name: {', '.join(missing)}"

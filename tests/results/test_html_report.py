"""report.html: one self-contained page for a run, checked as text and in headless Chromium."""

from __future__ import annotations

import html
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import pytest

from evalbench.cli import main
from evalbench.results import read_journal
from evalbench.results.render.html_report import REPORT, render_report, write_report

ROOT = Path(__file__).resolve().parents[2]
XSS_QUESTION = "<script>alert(1)</script> Which stores </script> have a greenhouse?"
XSS_SQL = "SELECT '</script><script>alert(2)</script>' AS x, '<!--' AS y, 1 < 2 AS z"
XSS_ID = 'greenleaf_x"><img src=x onerror=alert(3)>'
XSS_AGENT = "<b onmouseover=alert(4)>agent</b>"
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                  "--disable-background-networking", "--disable-dev-shm-usage"]


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory: pytest.TempPathFactory, pgdata: Path) -> Path:
    """The quickstart run (noisy agent, rules virtual user, embedded PostgreSQL)."""
    out = tmp_path_factory.mktemp("html_runs")
    code = main(["run", "--config", str(ROOT / "configs" / "quickstart.yaml"), "--output-dir", str(out),
                 "--run-id", "r", "--no-progress"])
    assert code == 0
    return out / "r"


@pytest.fixture(scope="module")
def hostile_run(run_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, int]:
    """A copy of the run with markup in a question, SQL, an item id and the manifest; returns the
    run directory and the journal index of the record that carries the question and SQL."""
    target = tmp_path_factory.mktemp("hostile") / "r"
    shutil.copytree(run_dir, target)
    records = list(read_journal(target))
    index = next(i for i, r in enumerate(records)
                 if r["phases"][0]["golden"] and r["phases"][0]["golden"][0]["row_count"] > 0 and r["turns"][0]["reply"]["sql"])
    record = records[index]
    record["phases"][0]["question"] = record["turns"][0]["user_text"] = XSS_QUESTION
    record["phases"][0]["sql"] = record["turns"][0]["reply"]["sql"] = XSS_SQL
    records[(index + 1) % len(records)]["item_id"] = XSS_ID
    (target / "conversations.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    manifest = json.loads((target / "manifest.json").read_text())
    manifest["agent"]["agent"] = XSS_AGENT
    (target / "manifest.json").write_text(json.dumps(manifest))
    return target, index


def embedded_data(page: str) -> dict[str, Any]:
    match = re.search(r'<script type="application/json" id="evalbench-data">(.*?)</script>', page, re.S)
    assert match, "no embedded data"
    return json.loads(match.group(1))


def search_text(record: dict[str, Any]) -> str:
    """What the search box matches (docs/report.md): item id, the questions and every SQL."""
    parts = [record["item_id"]]
    for phase in record["phases"]:
        parts += [phase.get("question") or "", phase.get("sql") or ""]
    parts += [t["reply"]["sql"] for t in record["turns"] if t.get("reply") and t["reply"].get("sql")]
    return "\n".join(parts).lower()


# --------------------------------------------------------------------------- the page as text


def test_report_is_self_contained(run_dir: Path) -> None:
    page = render_report(run_dir)
    assert not re.search(r"""(?:src|href|action|data)\s*=\s*["']?\s*(?:https?:)?//""", page, re.I), "network reference"
    assert not re.search(r"url\(\s*['\"]?\s*(?:https?:)?//|@import", page, re.I)
    assert "default-src 'none'" in page  # Content-Security-Policy: no network, only the page's own script
    scripts = re.findall(r"<script\b[^>]*>", page)
    assert scripts == ['<script type="application/json" id="evalbench-data">', "<script>"]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    for text in (manifest["config_fingerprint"], "simulated:noisy", "rules", "Success rate by slice", "Outcomes"):
        assert text in page, text
    assert page.count("<svg") >= 3  # outcomes, taxonomy, slices


def test_embedded_records_round_trip(run_dir: Path) -> None:
    data = embedded_data(render_report(run_dir))
    records = list(read_journal(run_dir))
    assert [row["id"] for row in data["rows"]] == [r["item_id"] for r in records]
    assert [row["line"] for row in data["rows"]] == list(range(1, len(records) + 1))
    for detail, record in zip(data["details"], records, strict=True):
        for turn in record["turns"]:
            if turn["reply"] is not None:
                turn["reply"].pop("raw", None)  # raw agent events stay in the journal
        assert detail == record
    summary = json.loads((run_dir / "summary.json").read_text())
    assert data["meta"]["total"] == summary["total_items"] == len(records)
    if "taxonomy" in summary:  # the table's diagnoses are the summary's failure taxonomy
        kinds: dict[str, int] = {}
        for row in data["rows"]:
            if row.get("dk"):
                kinds[row["dk"]] = kinds.get(row["dk"], 0) + 1
        assert kinds == summary["taxonomy"]
        assert sum(row["pass"] == "fail" for row in data["rows"]) == sum(summary["taxonomy"].values())


def test_markup_in_records_and_manifest_is_inert(hostile_run: tuple[Path, int]) -> None:
    run, index = hostile_run
    page = render_report(run)
    for raw in ("<script>alert(1)", "</script><script>alert(2)", "<img src=x", "<!--", XSS_AGENT):
        assert raw not in page, raw
    assert page.count("</script>") == 2  # only the two script elements close
    assert html.escape(XSS_AGENT) in page
    data = embedded_data(page)
    assert data["details"][index]["phases"][0]["question"] == XSS_QUESTION
    assert data["details"][index]["phases"][0]["sql"] == XSS_SQL
    assert XSS_ID in [row["id"] for row in data["rows"]]


def test_write_report_replaces_atomically(run_dir: Path) -> None:
    path = write_report(run_dir)
    assert path == run_dir / REPORT
    assert path.read_text(encoding="utf-8") == render_report(run_dir)
    assert not list(run_dir.glob(".*.tmp"))


def test_large_runs_embed_rows_for_all_and_details_for_the_first(run_dir: Path) -> None:
    page = render_report(run_dir, max_details=5)
    data = embedded_data(page)
    total = len(data["rows"])
    assert sum(d is not None for d in data["details"]) == 5 and data["details"][5:] == [None] * (total - 5)
    assert all("text" not in row for row in data["rows"][:5])
    assert all(row["text"].startswith(row["id"]) for row in data["rows"][5:])
    assert f"first 5 of {total}" in page
    few_bytes = embedded_data(render_report(run_dir, max_detail_bytes=1))
    assert sum(d is not None for d in few_bytes["details"]) == 1


def test_an_unfinished_run_is_summarized_from_its_journal(run_dir: Path, tmp_path: Path) -> None:
    target = tmp_path / "r"
    shutil.copytree(run_dir, target)
    (target / "summary.json").unlink()
    page = render_report(target)
    assert "recomputed from the journal" in page
    assert len(embedded_data(page)["rows"]) == len(list(read_journal(run_dir)))
    with pytest.raises(FileNotFoundError, match="not a run directory"):
        render_report(tmp_path)


# --------------------------------------------------------------------------- the page in Chromium


def chromium_binary() -> str | None:
    for candidate in (os.environ.get("EVALBENCH_CHROMIUM"), shutil.which("chromium"), "/usr/bin/chromium",
                      shutil.which("chromium-browser")):
        if candidate and Path(candidate).is_file():
            return candidate
    return None


def save_artifact(path: Path) -> None:
    target_dir = os.environ.get("EVALBENCH_ARTIFACTS")
    if target_dir:
        Path(target_dir).mkdir(parents=True, exist_ok=True)
        path = Path(shutil.copy(path, Path(target_dir) / path.name))
    print(f"screenshot: {path}")


def test_report_in_headless_chromium(hostile_run: tuple[Path, int], tmp_path: Path) -> None:
    binary = chromium_binary()
    if binary is None:
        pytest.skip("no Chromium binary (chromium on PATH, /usr/bin/chromium or EVALBENCH_CHROMIUM)")
    from playwright.sync_api import sync_playwright  # the dev extra

    run, index = hostile_run
    records = list(read_journal(run))
    summary = json.loads((run / "summary.json").read_text())
    url = write_report(run).as_uri()
    dialogs: list[str] = []
    errors: list[str] = []
    requests: list[str] = []
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=binary, args=CHROMIUM_FLAGS)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            page.on("dialog", lambda d: (dialogs.append(d.message), d.dismiss()))
            page.on("pageerror", lambda e: errors.append(str(e)))
            page.on("request", lambda r: requests.append(r.url))
            page.goto(url)
            page.wait_for_selector("html[data-ready]", timeout=10_000)

            def visible() -> int:
                shown = int(page.inner_text("#visible-count"))
                assert page.locator("#conv-body tr").count() == shown
                return shown

            assert visible() == len(records)
            page.screenshot(path=str(tmp_path / "report-page.png"), full_page=True)

            # search: every term must occur in the item id, a question or an SQL
            term = "order_items"
            expected = sum(term in search_text(r) for r in records)
            assert 0 < expected < len(records)
            page.fill("#q", term.upper())
            assert visible() == expected

            # filters: an outcome, then pass / fail
            page.click("#reset")
            outcome = min((o for o, n in summary["outcomes"].items() if n), key=lambda o: summary["outcomes"][o])
            page.select_option("#f-outcome", outcome)
            assert visible() == summary["outcomes"][outcome]
            page.click("#reset")
            page.select_option("#f-verdict", "fail")
            assert visible() == sum(summary["taxonomy"].values())
            page.click("#reset")
            assert visible() == len(records)

            # sorting: most turns first after two clicks on the Turns header
            page.click('#conv-table th[data-sort="turns"] button')
            page.click('#conv-table th[data-sort="turns"] button')
            assert page.get_attribute('#conv-table th[data-sort="turns"]', "aria-sort") == "descending"
            assert int(page.inner_text("#conv-body tr:first-child td:nth-child(8)")) == max(len(r["turns"]) for r in records)

            # detail: a click opens the conversation's turns, SQL and golden row count
            record = records[index]
            page.click(f'#conv-body tr[data-index="{index}"]')
            page.wait_for_selector("#detail[open]")
            assert page.inner_text("#detail-title") == record["item_id"]
            assert page.locator("#detail .user-text").first.text_content() == XSS_QUESTION
            assert page.locator("#detail .phase-sql").first.text_content() == XSS_SQL
            golden_rows = record["phases"][0]["golden"][0]["row_count"]
            assert page.locator("#detail .golden-rows").first.inner_text().startswith(f"{golden_rows} row")
            for turn in record["turns"]:
                assert turn["user_text"] in page.inner_text("#detail-body")
            page.screenshot(path=str(tmp_path / "report-detail.png"))

            # keyboard: Escape closes, Enter on a focused row opens
            page.keyboard.press("Escape")
            page.wait_for_selector("#detail:not([open])", state="attached")
            page.focus('#conv-body tr[data-index="0"]')
            page.keyboard.press("Enter")
            page.wait_for_selector("#detail[open]")
            assert page.inner_text("#detail-title") == records[0]["item_id"]

            # nothing injected ran or was parsed as markup, and nothing was fetched
            assert page.evaluate("document.querySelectorAll('script').length") == 2
            assert page.evaluate("document.querySelectorAll('img').length") == 0
            assert XSS_AGENT in page.inner_text("header")
            page.keyboard.press("Escape")
            page.fill("#q", XSS_ID)
            assert visible() == 1
            assert page.inner_text("#conv-body td.id") == XSS_ID
        finally:
            browser.close()
    assert dialogs == [] and errors == []
    assert all(u.startswith(("file:", "data:")) for u in requests), requests
    for name in ("report-page.png", "report-detail.png"):
        assert (tmp_path / name).stat().st_size > 10_000
        save_artifact(tmp_path / name)

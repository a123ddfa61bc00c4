"""Docs that must match the code."""

from __future__ import annotations

from pathlib import Path

from evalbench.config.reference import BEGIN, END, render

ROOT = Path(__file__).resolve().parents[2]


def test_configuration_reference_is_generated_from_the_models():
    text = (ROOT / "docs" / "configuration.md").read_text()
    block = text[text.index(BEGIN) : text.index(END) + len(END)]
    assert block == render(), "docs/configuration.md is stale: run `python -m evalbench.config.reference`"


def test_readme_starts_with_the_two_commands():
    readme = (ROOT / "README.md").read_text()
    assert "make demo" in readme and "make test" in readme
    assert readme.index("make demo") < readme.index("## Running")


def test_every_doc_linked_from_the_readme_exists():
    import re

    readme = (ROOT / "README.md").read_text()
    for link in re.findall(r"\]\(((?:docs|bench)/[^)#]+)", readme):
        assert (ROOT / link).is_file(), link


def test_the_run_record_tables_are_generated_from_the_models():
    from evalbench.results.schema_docs import TABLES, begin, end
    from evalbench.results.schema_docs import render as render_tables

    text = (ROOT / "docs" / "results_schema.md").read_text()
    for block in TABLES:
        found = text[text.index(begin(block)) : text.index(end(block)) + len(end(block))]
        assert found == render_tables(block), "docs/results_schema.md is stale: run `python -m evalbench.results.schema_docs`"

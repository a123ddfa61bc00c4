"""docs/results_schema.md's tables of the run record, generated from :mod:`evalbench.results.schema`.

``python -m evalbench.results.schema_docs`` rewrites the generated blocks (one per file: manifest,
journal, summary); a test fails when one is stale.
"""

from __future__ import annotations

from evalbench.config import reference
from evalbench.results import schema

# per block: (table title, model) in the order the page shows them
TABLES: dict[str, list[tuple[str, type[schema.RunRecord]]]] = {
    "manifest": [
        ("`manifest.json`", schema.Manifest),
        ("`config` (the keys read without the config model)", schema.ConfigSnapshot),
        ("`dataset`", schema.DatasetInfo),
        ("`dataset.subset`", schema.Subset),
        ("`sessions[]`", schema.Session),
        ("`summary_extra`", schema.SummaryExtra),
    ],
    "journal": [
        ("Conversation record", schema.JournalRecord),
        ("Turn (`turns[]`)", schema.Turn),
        ("Agent reply (`turns[].reply`)", schema.Reply),
        ("Virtual user's answer (`turns[].vuser`)", schema.VUserTurn),
        ("Phase (`phases[]`)", schema.Phase),
        ("Execution result (`phases[].generated`, `golden[]`, `compared`)", schema.Execution),
        ("Score (`phases[].scores.<scorer>`)", schema.Score),
        ("Attempt (`phases[].attempts[]`)", schema.Attempt),
        ("Usage (`usage.<role>`, `scores.<scorer>.usage`, `turns[].vuser.usage`)", schema.Usage),
        ("Diagnosis (`diagnosis`)", schema.Diagnosis),
    ],
    "summary": [
        ("`summary.json`", schema.Summary),
        ("Rate (`success.<phase>`, `scorers.<scorer>.<phase>`)", schema.Rate),
        ("`completeness`", schema.Completeness),
    ],
}


def begin(block: str) -> str:
    return f"<!-- BEGIN GENERATED: python -m evalbench.results.schema_docs ({block}) -->"


def end(block: str) -> str:
    return f"<!-- END GENERATED ({block}) -->"


def _table(title: str, model: type[schema.RunRecord]) -> list[str]:
    out = [f"### {title}", "", "| field | type | meaning |", "|---|---|---|"]
    for name, field in model.model_fields.items():
        spelled = (reference.type_name(field.annotation) + (", required" if field.is_required() else "")).replace("|", "\\|")
        meaning = (field.description or "").replace("|", "\\|")
        out.append(f"| `{field.alias or name}` | {spelled} | {meaning} |")
    return [*out, ""]


def render(block: str) -> str:
    out = [begin(block), ""]
    for title, model in TABLES[block]:
        out += _table(title, model)
    return "\n".join([*out, end(block)])


if __name__ == "__main__":
    reference.main("docs/results_schema.md", [(begin(block), end(block), render(block)) for block in TABLES])

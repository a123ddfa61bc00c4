"""``junit.xml``: a run as JUnit XML, for CI systems that show test reports.

One ``<testsuite>`` named after the run, one ``<testcase classname="evalbench.<database>"
name="<item_id>" time="<elapsed_s>">`` per conversation:

- passed (see :func:`evalbench.results.summary.taxonomy.passed`): an empty test case;
- failed: ``<failure type="<kind>" message="<outcome>: <kind> — <message>">`` whose text gives
  each phase's details (outcome, final SQL, generated vs golden results, scores);
- no answer could be judged because the harness, the virtual user or the agent endpoint broke
  (outcomes in :data:`ERROR_OUTCOMES`): ``<error>`` with the same message and text;
- cancelled, invalid_item (the golden SQL cannot judge the item): ``<skipped>``.

The ``tests``, ``failures``, ``errors``, ``skipped`` and ``time`` attributes of ``<testsuite>``
(and of the enclosing ``<testsuites>``) count exactly those elements. Text is escaped by
ElementTree; characters XML 1.0 cannot carry (control characters) are written as ``\\uXXXX``.
"""

from __future__ import annotations

import io
import re
import shutil
import tempfile
import xml.etree.ElementTree as ET
from collections.abc import Iterable
from pathlib import Path
from typing import TextIO

from evalbench.core.json_types import objs
from evalbench.results.render.explain import phase_lines
from evalbench.results.summary.taxonomy import diagnose

JUNIT = "junit.xml"

# Outcomes reported as <error> (the item could not be judged), not as <failure>. A timeout or
# max_turns is the agent's own failure; agent_error counts as an error because an agent
# endpoint's crash (HTTP 500, an upstream quota error) usually says nothing about its answers.
ERROR_OUTCOMES = frozenset({"db_error", "vuser_error", "agent_error"})
SKIPPED_OUTCOMES = frozenset({"cancelled", "invalid_item"})  # not a verdict on the agent

_ILLEGAL_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def render_junit(records: Iterable[dict[str, object]], *, run_id: str, primary: str | None = None) -> str:
    """The JUnit XML document (a string, with its XML declaration) for ``records``."""
    builder = JunitBuilder(primary)
    try:
        for record in records:
            builder.add(record)
        out = io.StringIO()
        builder.write(out, run_id)
        return out.getvalue()
    finally:
        builder.close()


def write_junit(run_dir: Path, records: Iterable[dict[str, object]], *, run_id: str, primary: str | None = None) -> Path:
    """Write ``run_dir/junit.xml`` (atomically) from ``records``; its path."""
    builder = JunitBuilder(primary)
    try:
        for record in records:
            builder.add(record)
        return builder.commit(Path(run_dir), run_id)
    finally:
        builder.close()


class JunitBuilder:
    """junit.xml built incrementally: :meth:`add` each record as the run completes it, then
    :meth:`commit`. The suite's counts come first in the document, so the test cases are spooled
    (to disk when large) until every record is counted; memory stays flat."""

    def __init__(self, primary: str | None = None) -> None:
        self.primary = primary
        self.counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
        self.total_time = 0.0
        self.cases = tempfile.SpooledTemporaryFile(max_size=1 << 22, mode="w+", encoding="utf-8")  # noqa: SIM115 (closed by close())

    def add(self, record: dict[str, object]) -> None:
        elapsed = _seconds(record.get("elapsed_s"))
        self.total_time += elapsed
        self.counts["tests"] += 1
        case = _testcase(record, elapsed, self.primary, self.counts)
        ET.indent(case, level=2)
        self.cases.write("    " + ET.tostring(case, encoding="unicode").rstrip() + "\n")

    def write(self, out: TextIO, run_id: str) -> None:
        attributes = {key: str(value) for key, value in self.counts.items()} | {"time": f"{self.total_time:.3f}"}
        root = ET.Element("testsuites", {"name": "evalbench", **attributes})
        suite = ET.SubElement(root, "testsuite", {"name": _xml(run_id), **attributes})
        properties = ET.SubElement(suite, "properties")
        ET.SubElement(properties, "property", name="run_id", value=_xml(run_id))
        if self.primary is not None:
            ET.SubElement(properties, "property", name="primary_scorer", value=_xml(self.primary))
        ET.indent(root)
        properties.tail = "\x00"  # where the test cases go
        head, _, tail = ET.tostring(root, encoding="unicode").partition("\x00")
        out.write('<?xml version="1.0" encoding="UTF-8"?>\n' + head + "\n")
        self.cases.seek(0)
        shutil.copyfileobj(self.cases, out)
        out.write("  " + tail + "\n")

    def commit(self, run_dir: Path, run_id: str) -> Path:
        """Write ``run_dir/junit.xml`` atomically; its path."""
        from evalbench.results.journal.files import write_atomic_with

        return write_atomic_with(run_dir / JUNIT, lambda out: self.write(out, run_id))

    def close(self) -> None:
        self.cases.close()


def _case_name(record: dict[str, object]) -> str:
    """The item id; a repeated trial (``trials: k``) adds `` (trial N)`` so test names stay unique."""
    from evalbench.results.journal.lines import trial_of

    trial = trial_of(record)
    return str(record.get("item_id")) + (f" (trial {trial})" if trial > 1 else "")


def _testcase(record: dict[str, object], elapsed: float, primary: str | None, counts: dict[str, int]) -> ET.Element:
    case = ET.Element("testcase", classname=_xml(f"evalbench.{record.get('database')}"),
                      name=_xml(_case_name(record)), time=f"{elapsed:.3f}")
    outcome = str(record.get("outcome"))
    if outcome in SKIPPED_OUTCOMES:
        counts["skipped"] += 1
        ET.SubElement(case, "skipped", message=_xml(f"{outcome}: {record.get('error') or 'run cancelled'}"))
        return case
    diagnosis = diagnose(record, primary)
    if diagnosis is None:
        return case
    tag = "error" if outcome in ERROR_OUTCOMES else "failure"
    counts["errors" if tag == "error" else "failures"] += 1
    element = ET.SubElement(case, tag, type=diagnosis.kind.value,
                            message=_xml(f"{outcome}: {diagnosis.kind.value} — {diagnosis.message}"))
    element.text = _xml(_details(record, diagnosis.phase))
    return case


def _details(record: dict[str, object], phase: str) -> str:
    lines = [f"item {record.get('item_id')} ({record.get('dialect')}/{record.get('database')}), "
             f"outcome {record.get('outcome')}, diagnosed phase {phase}"]
    if record.get("error"):
        lines.append(f"error: {record['error']}")
    for phase_record in objs(record.get("phases")):
        lines.append("")
        lines.extend(phase_lines(phase_record, width=120, preview=False))
    return "\n".join(lines) + "\n"


def _xml(text: str) -> str:
    """``text`` without the characters XML 1.0 cannot represent (shown as ``\\uXXXX``)."""
    return _ILLEGAL_XML.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _seconds(value: object) -> float:
    if not isinstance(value, (int, float, str)):  # null, or not a number: float() would raise TypeError
        return 0.0
    try:
        return max(0.0, float(value))
    except (TypeError, ValueError):
        return 0.0


__all__ = ["ERROR_OUTCOMES", "JUNIT", "SKIPPED_OUTCOMES", "JunitBuilder", "render_junit", "write_junit"]

"""Issue 12 at the record boundary: any text is journaled safely (lone surrogates, NUL, text
decoded from invalid UTF-8), every report is derived from such a journal, ``--resume`` reads it
back, and what a record stores is bounded (caps, markers, a hash of all the rows)."""

from __future__ import annotations

import csv
import hashlib
import json
import xml.etree.ElementTree as ET

import pytest
from hypothesis import given
from hypothesis import strategies as st

from evalbench.core.conversation import MAX_SQL_BYTES, AgentReply, ReplyKind, ToolCall, VUserAction, VUserReply
from evalbench.dataset import Ambiguity, Conditions, Item
from evalbench.results import read_journal
from evalbench.results.journal.files import JOURNAL
from evalbench.results.journal.record import CAPS, Caps, _canonical, bounded_record, clip_text, conversation_record, rows_sha256
from evalbench.results.journal.rundir import RunWriter
from evalbench.results.render.reports import regenerate
from evalbench.run.resume import repair_journal
from evalbench.run.stages import Parts, run_conversation
from evalbench.scoring import build_scorers
from tests.helpers import FixedVUser, ScriptedAgent, make_item, sql

GOLDEN = "SELECT store_name FROM stores ORDER BY store_id"
SCORERS = {"exec_match": {}, "executable": {}, "turn_count": {}}
INVALID_UTF8 = b"caf\xe9 \xff\xfe".decode("utf-8", "surrogateescape")  # what os.fsdecode / argv give
HOSTILE = "lone \ud800 and \udfff, NUL \x00, pair \ud83d\ude00, " + INVALID_UTF8


def _item(item_id: str = "hostile", question: str = "List the names of all stores, by store id.") -> Item:
    return Item(
        id=item_id, database="greenleaf", question=question, ambiguous_question=question + " (shops)",
        ambiguities=[Ambiguity(term="the shops", sql_snippet="FROM stores", kind="critical")],
        golden_sql=[GOLDEN], conditions=Conditions(order=True), conditions_explicit=True,
        category="Query", query_type="dql",
    )


def _hostile_conversation(sandbox):
    """A conversation whose every text field holds a lone surrogate, NUL and undecodable bytes."""

    def script(session: int, turn: int, text: str) -> AgentReply:
        if turn == 0:
            return AgentReply(ReplyKind.CLARIFICATION, text="Which shops? " + HOSTILE,
                              tool_calls=[ToolCall(name="look\ud800", args={"q\udcff": HOSTILE, "n": 1},
                                                   response=[HOSTILE, b"\xff\x00"], id="\ud800")],
                              raw={"events": [HOSTILE], "\udcff": HOSTILE})
        reply = sql(GOLDEN)
        reply.text = "Here you are " + HOSTILE
        reply.raw = HOSTILE
        return reply

    vuser = FixedVUser(VUserReply(action=VUserAction("labeled", terms=["the shops" + HOSTILE]), text="All " + HOSTILE,
                                  audit={"leaks": [HOSTILE], HOSTILE: HOSTILE}))
    parts = Parts(agent=ScriptedAgent(script), vuser=vuser, sandbox=sandbox, scorers=build_scorers(SCORERS))
    conv = run_conversation(_item("hostile\ud800", "Which stores? " + HOSTILE), parts)
    conv.error = "boom " + HOSTILE  # an error message with the same text
    return conv


def _manifest(run_id: str) -> dict:
    return {"schema_version": 1, "run_id": run_id, "created_at": "2026-01-01T00:00:00+00:00", "scorers": list(SCORERS),
            "metric_scorers": ["turn_count"], "config": {"seed": HOSTILE}, "command": ["evalbench", HOSTILE]}


def _strings(value):
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, sub in value.items():
            yield str(key)
            yield from _strings(sub)
    elif isinstance(value, list):
        for sub in value:
            yield from _strings(sub)


def test_hostile_text_is_journaled_and_every_report_reads_it_back(demo_sandbox, tmp_path):
    run_dir = tmp_path / "run"
    writer = RunWriter(run_dir, "r1", preview_rows=5, metric_scorers={"turn_count"}, simulator={"vuser": HOSTILE})
    writer.write_manifest(_manifest("r1"))
    record = writer.record(_hostile_conversation(demo_sandbox))
    writer.record(run_conversation(make_item("plain"), Parts(ScriptedAgent(lambda s, t, x: sql(GOLDEN)),
                                                              FixedVUser(VUserReply(None, "")), demo_sandbox,
                                                              build_scorers(SCORERS))))
    writer.close()

    # the journal is valid UTF-8 JSON: surrogates became U+FFFD (a valid pair its character), NUL kept
    raw = (run_dir / JOURNAL).read_bytes()
    raw.decode("utf-8")  # strict
    assert b"\\u0000" in raw and "\U0001f600".encode() in raw
    journaled = list(read_journal(run_dir))
    assert journaled[0] == json.loads(json.dumps(record))  # what was reported is what was journaled
    for text in _strings(journaled[0]):
        text.encode("utf-8")  # no lone surrogate anywhere
    first = journaled[0]
    assert first["item_id"] == "hostile\ufffd"
    assert "lone \ufffd and \ufffd, NUL \x00, pair \U0001f600, caf\ufffd \ufffd\ufffd" in first["phases"][0]["question"]
    assert first["turns"][0]["reply"]["tool_calls"][0]["name"] == "look\ufffd"
    assert "\x00" in first["turns"][1]["reply"]["text"] and "\x00" in first["error"]
    assert first["simulator"] == {"vuser": HOSTILE.replace("\ud800", "\ufffd").replace("\udfff", "\ufffd")
                                  .replace("\udce9", "\ufffd").replace("\udcff", "\ufffd").replace("\udcfe", "\ufffd")
                                  .replace("\ud83d\ude00", "\U0001f600")}

    # every derived report, from the journal alone (evalbench report)
    summary, paths = regenerate(run_dir)
    assert summary["total_items"] == 2
    names = {p.name for p in paths}
    assert {"summary.json", "summary_native.csv", "summary.md", "junit.xml", "report.html", "evals.csv", "scores.csv",
            "scores_native.csv"} <= names
    for path in run_dir.iterdir():
        path.read_bytes().decode("utf-8")  # every file of the run directory is valid UTF-8
    ET.parse(run_dir / "junit.xml")  # NUL is written as \u0000 there: well-formed XML
    for name in ("evals.csv", "scores.csv", "summary.csv", "configs.csv", "scores_native.csv", "summary_native.csv"):
        with (run_dir / name).open(encoding="utf-8", newline="") as handle:
            for row in csv.reader(handle):
                assert not any("\x00" in cell for cell in row), name  # NUL written as \u0000 in CSV files
    evals = (run_dir / "evals.csv").read_text(encoding="utf-8")
    assert "NUL \\u0000" in evals and "\ufffd" in evals

    # --resume reads it back: both conversations are done, nothing is dropped
    state = repair_journal(run_dir, lambda record: None)
    assert state.done == {("postgres", "hostile\ufffd", 1), ("postgres", "plain", 1)} and state.dropped_partial == 0


def test_a_normal_record_is_small_and_not_cut(demo_sandbox):
    conv = run_conversation(make_item(ambiguous=True), Parts(
        ScriptedAgent(lambda s, t, x: sql(GOLDEN) if t else AgentReply(ReplyKind.CLARIFICATION, text="Which shops?")),
        FixedVUser(VUserReply(VUserAction("labeled", terms=["the shops"]), "All of our stores.")), demo_sandbox,
        build_scorers(SCORERS)))
    record, line = bounded_record(conv, "r")
    assert len(line.encode()) < 8 * 1024
    assert "record_truncated" not in record
    generated = record["phases"][0]["generated"]
    assert generated["preview_truncated"] is False and len(generated["preview"]) == 5
    assert generated["row_count"] == len(conv.phases[0].generated.rows) and generated["columns"] == ["store_name"]
    # the same rows hash the same: results can be compared without being stored
    assert generated["rows_sha256"] == record["phases"][0]["golden"][0]["rows_sha256"] == rows_sha256(conv.phases[0].generated.rows)


def test_pathological_agent_output_is_bounded(demo_sandbox):
    """Megabyte texts, a 50 KB result cell, hundreds of wide rows, a thousand tool calls, megabytes
    of raw events, SQL just under the agent SQL limit: the record stays within CAPS.record and
    says what was cut."""
    head = "SELECT repeat('x', 50000) AS big, n, repeat('é', 3000) AS wide FROM generate_series(1, 500) AS n -- "
    big_sql = head + "y" * (MAX_SQL_BYTES - len(head.encode()))

    def script(session: int, turn: int, text: str) -> AgentReply:
        reply = sql(big_sql)
        reply.text = "z" * 2_000_000
        reply.raw = {"events": ["e" * 100_000] * 30}
        reply.tool_calls = [ToolCall(name=f"t{i}", args={"blob": "a" * 50_000}, response="r" * 50_000)
                            for i in range(1000)]
        return reply

    conv = run_conversation(make_item(), Parts(ScriptedAgent(script), FixedVUser(VUserReply(None, "")), demo_sandbox,
                                               build_scorers(SCORERS)))
    result = conv.phases[0].generated
    assert result.error is None and result.row_count == 500
    record, line = bounded_record(conv, "r")
    assert len(line.encode("utf-8")) <= CAPS.record
    assert record["record_truncated"] is True
    reply = record["turns"][0]["reply"]
    assert reply["text"].endswith(" more bytes]") and reply["sql"].endswith(" more bytes]")
    assert reply["tool_calls_omitted"] >= 1000 - CAPS.tool_calls
    generated = record["phases"][0]["generated"]
    assert generated["row_count"] == 500 and generated["columns"] == ["big", "n", "wide"]
    assert generated["preview_truncated"] is True
    assert generated["rows_sha256"] == rows_sha256(result.rows)  # of all 500 rows, not of the preview

    # with the default caps (before any tightening) each part keeps its own cap
    roomy = Caps(record=10**9)
    loose, loose_line = bounded_record(conv, "r", caps=roomy)
    assert "record_truncated" not in loose
    reply = loose["turns"][0]["reply"]
    kept = reply["text"].split("...[")[0]
    assert len(reply["text"].encode()) <= roomy.text and reply["text"] == kept + f"...[{2_000_000 - len(kept)} more bytes]"
    assert _size(reply["raw"]) <= roomy.raw and reply["raw"].startswith('{"events": ["eee')  # the JSON text, cut
    assert len(reply["tool_calls"]) == roomy.tool_calls and reply["tool_calls_omitted"] == 1000 - roomy.tool_calls
    for call in reply["tool_calls"]:
        assert _size(call["args"]) <= roomy.tool_payload
        assert call["response"].endswith(" more bytes]")
    preview = loose["phases"][0]["generated"]["preview"]
    assert 1 <= len(preview) < 5 and len(json.dumps(preview, ensure_ascii=False).encode()) <= roomy.preview
    assert all(_size(cell) <= roomy.cell for row in preview for cell in row)
    assert preview[0][1] == 1  # numbers stay numbers
    # even without the record cap, the per-part caps keep it far from the ~40 MB the agent produced
    assert len(loose_line.encode()) < 512 * 1024


def _size(value) -> int:
    """Bytes of a text (the cap counts the text, not its JSON escapes), or of a value's JSON."""
    return len((value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)).encode("utf-8"))


def test_clip_text_counts_bytes_and_never_splits_a_character():
    text = "é" * 1000  # 2000 bytes
    clipped = clip_text(text, 100)
    assert len(clipped.encode("utf-8")) <= 100
    kept = clipped.split("...[")[0]
    assert set(kept) == {"é"} and clipped.endswith(f"...[{2000 - 2 * len(kept)} more bytes]")
    assert clip_text(clipped, 100) == clipped  # idempotent
    assert clip_text("short", 100) == "short"
    assert clip_text("a\ud800b", 100) == "a\ufffdb"


def test_rows_hash_is_canonical():
    import datetime as dt
    from decimal import Decimal

    rows = [(1, "a", None, 1.5, Decimal("2.50"), dt.date(2024, 1, 2), b"\x00", {"k": [1, 2]}, True)]
    digest = rows_sha256(rows)
    line = '[1,"a",null,1.5,{"$Decimal":"2.50"},{"$date":"2024-01-02"},{"$bytes":"00"},{"k":[1,2]},true]\n'
    assert digest == hashlib.sha256(line.encode()).hexdigest()
    assert rows_sha256([(Decimal("2.5"),)]) != rows_sha256([("2.5",)])  # types are told apart
    assert rows_sha256([]) == hashlib.sha256(b"").hexdigest()


_CELLS = st.one_of(
    st.none(), st.booleans(), st.integers(), st.text(), st.floats(), st.decimals(), st.dates(), st.datetimes(), st.times(),
    st.binary(max_size=8), st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=3), st.integers(), max_size=3),
)


@given(st.lists(st.tuples(_CELLS, _CELLS, _CELLS), max_size=4))
def test_rows_hash_fast_path_equals_the_canonical_form(rows):
    """Rows of plain scalars are encoded in C; the digest is the one of the canonical form."""
    slow = hashlib.sha256()
    for row in rows:
        slow.update(json.dumps([_canonical(v) for v in row], ensure_ascii=True, separators=(",", ":"), sort_keys=True,
                               allow_nan=False).encode("ascii") + b"\n")
    assert rows_sha256(rows) == slow.hexdigest()


def test_conversation_record_keeps_its_signature(demo_sandbox):
    conv = run_conversation(make_item(), Parts(ScriptedAgent(lambda s, t, x: sql(GOLDEN)), FixedVUser(VUserReply(None, "")),
                                               demo_sandbox, build_scorers(SCORERS)))
    record = conversation_record(conv, "r", 2)
    assert len(record["phases"][0]["generated"]["preview"]) == 2
    assert record["phases"][0]["generated"]["preview_truncated"] is False  # preview_rows is not a cut by the caps


@pytest.mark.parametrize("preview_rows", [0, 5])
def test_preview_rows_zero_or_more(demo_sandbox, preview_rows):
    conv = run_conversation(make_item(), Parts(ScriptedAgent(lambda s, t, x: sql(GOLDEN)), FixedVUser(VUserReply(None, "")),
                                               demo_sandbox, build_scorers(SCORERS)))
    generated = conversation_record(conv, "r", preview_rows)["phases"][0]["generated"]
    assert len(generated["preview"]) == min(preview_rows, generated["row_count"])


def test_a_value_nested_past_pythons_recursion_limit_is_journaled_with_a_marker():
    """A hostile reply's value nested deeper than Python can walk never stops the journal writer."""
    from evalbench.results.journal.record import DEEP, MAX_DEPTH, _canonical, bounded, plain

    deep: list = []
    for _ in range(5000):
        deep = [deep]
    kept = json.loads(json.dumps(plain({"events": deep})))
    level, depth = kept["events"], 1
    while isinstance(level, list):
        level, depth = level[0], depth + 1
    assert level == DEEP and depth == MAX_DEPTH + 1
    assert DEEP in json.dumps(bounded(deep, 100_000)[0]) and DEEP in json.dumps(_canonical(deep))

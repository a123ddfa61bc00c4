"""Every bad input a clear error (issue 12): malformed configs and dataset records are fuzzed —
mutations of configs/quickstart.yaml and of lines of datasets/demo/greenleaf.jsonl, plus the
classic YAML bombs — and each must load, or fail with a clear error naming the file (and, for a
config, the line or key), or be a reported record error: never a traceback, never a hang (each
example runs under a 5-second alarm), never a record dropped silently. No database is needed.
"""

from __future__ import annotations

import contextlib
import json
import re
import signal
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalbench.cli import main
from evalbench.config import load_run_config
from evalbench.config.yamlfile import MAX_YAML_BYTES, MAX_YAML_DEPTH, load_yaml
from evalbench.core.errors import ConfigError, DatasetError
from evalbench.dataset import Dataset, Item, RecordError

ROOT = Path(__file__).resolve().parents[2]
DEMO = ROOT / "datasets" / "demo"
QUICKSTART = ROOT / "configs" / "quickstart.yaml"
TIME_LIMIT_S = 5

FUZZ = settings(max_examples=150, deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


class Hang(Exception):
    pass


@contextlib.contextmanager
def time_bound(seconds: float = TIME_LIMIT_S) -> Iterator[None]:
    """Fail (raise :class:`Hang`) when the block runs longer than ``seconds``."""

    def expire(signum: int, frame: Any) -> None:
        raise Hang(f"still running after {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


# ------------------------------------------------------------------------------------ configs


def _base_config_text() -> str:
    """configs/quickstart.yaml with absolute paths, so that a copy loads from anywhere."""
    text = QUICKSTART.read_text(encoding="utf-8")
    text = text.replace("../datasets/demo/greenleaf.jsonl", str(DEMO / "greenleaf.jsonl"))
    text = text.replace("../datasets/demo/setup", str(DEMO / "setup"))
    text = text.replace("agents/noisy.yaml", str(ROOT / "configs" / "agents" / "noisy.yaml"))
    return text.replace("output_directory: ../results", "output_directory: /tmp/evalbench-robust-never-written")


BASE_CONFIG = _base_config_text()
BASE_DATA = yaml.safe_load(BASE_CONFIG)


@pytest.fixture(scope="module")
def work_dir() -> Iterator[Path]:
    with tempfile.TemporaryDirectory(prefix="evalbench-robust-") as name:
        yield Path(name)


def check_config_loads_or_fails_clearly(path: Path) -> ConfigError | DatasetError | None:
    """Load ``path``; any error must be ours and name the file (and a line or key for a config)."""
    try:
        with time_bound():
            load_run_config(path)
    except ConfigError as exc:
        assert exc.file, f"no file named: {exc}"
        assert str(exc).startswith(exc.file), exc
        if exc.file == str(path) and not _file_level(exc.message):
            assert exc.line is not None or exc.key, f"neither line nor key: {exc}"
        return exc
    except DatasetError as exc:
        assert exc.file and str(exc).startswith(exc.file), exc
        return exc
    return None


def _file_level(message: str) -> bool:  # problems of the whole file, which have no line
    return message.startswith(("file is larger than", "file not found", "cannot read file"))


def test_the_unmutated_config_loads(work_dir):
    path = work_dir / "base.yaml"
    path.write_text(BASE_CONFIG, encoding="utf-8")
    assert check_config_loads_or_fails_clearly(path) is None


def _key_paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [prefix] if prefix else []
    if isinstance(value, dict):
        for key, sub in value.items():
            out += _key_paths(sub, (*prefix, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value):
            out += _key_paths(sub, (*prefix, index))
    return out


KEY_PATHS = sorted(_key_paths(BASE_DATA), key=lambda path: path != ("seed",))  # hypothesis favours the first

weird_text = st.one_of(
    st.text(max_size=20),
    st.sampled_from(["", "\x00", "\ud800", "\ufeff", "${NO_SUCH_VARIABLE_X}", "${", "../../../etc/passwd", "simulated:",
                     "simulated:wizard", "x" * 5000, "http://user:pw@host/db", "-1", "1e999", "nan", "~", "yes", "on"]),
)
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(), st.integers(min_value=-(10**400), max_value=10**400),
    st.floats(allow_nan=True, allow_infinity=True), weird_text,
)
values = st.recursive(scalars, lambda children: st.one_of(st.lists(children, max_size=4),
                                                          st.dictionaries(st.text(max_size=8), children, max_size=4)),
                      max_leaves=12)


@st.composite
def structural_mutation(draw: st.DrawFn) -> str:
    """The quickstart config with a key deleted, renamed or given a value of another type."""
    data = json.loads(json.dumps(BASE_DATA))
    for _ in range(draw(st.integers(1, 3))):
        key_path = KEY_PATHS[draw(st.integers(0, len(KEY_PATHS) - 1))]
        parent = data
        try:
            for part in key_path[:-1]:
                parent = parent[part]
        except (KeyError, IndexError, TypeError):
            continue
        last = key_path[-1]
        if not isinstance(parent, (dict, list)):
            continue
        if isinstance(parent, list) and not (isinstance(last, int) and last < len(parent)):
            continue
        if isinstance(parent, dict) and last not in parent:
            continue
        action = draw(st.sampled_from(["delete", "rename", "retype", "retype"]))
        if action == "delete":
            del parent[last]
        elif action == "rename" and isinstance(parent, dict):
            parent[draw(st.text(min_size=1, max_size=12))] = parent.pop(last)
        else:
            parent[last] = draw(values)
    try:
        return yaml.safe_dump(data, allow_unicode=draw(st.booleans()), sort_keys=False)
    except yaml.YAMLError:  # e.g. a lone surrogate cannot be written as YAML
        return yaml.safe_dump(data, allow_unicode=False, sort_keys=False)


TEXT_INSERTS = ["\t", "\x00", "\ufeff", "\x85", "\u2028", "&a ", "*a", "*nope", "<<: *a\n", "? ", "!!python/object:os.system ",
                "!!binary ", "!!int ", "!!float ", "2020-13-45", "{", "}", "[", "]", "'", '"', "\\", ":", "- ", "---\n",
                "...\n", "%YAML 1.1\n", '"\\ud800"', "[" * 200, "${HOME}", "\n  \t", "#"]


@st.composite
def textual_mutation(draw: st.DrawFn) -> bytes:
    """The quickstart config's text with lines deleted, duplicated or swapped, characters and
    random bytes inserted, or cut short."""
    lines = BASE_CONFIG.splitlines(keepends=True)
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["delete", "duplicate", "swap", "insert", "insert", "garble"]))
        i = draw(st.integers(0, len(lines) - 1))
        if kind == "delete" and len(lines) > 1:
            del lines[i]
        elif kind == "duplicate":
            lines.insert(i, lines[i])
        elif kind == "swap":
            j = draw(st.integers(0, len(lines) - 1))
            lines[i], lines[j] = lines[j], lines[i]
        elif kind == "insert":
            at = draw(st.integers(0, len(lines[i])))
            lines[i] = lines[i][:at] + draw(st.sampled_from(TEXT_INSERTS) | st.text(max_size=5)) + lines[i][at:]
        elif kind == "garble":  # a key's characters changed
            key, sep, rest = lines[i].partition(":")
            if sep:
                lines[i] = draw(st.text(min_size=1, max_size=len(key) + 1)) + sep + rest
    raw = "".join(lines).encode("utf-8", "surrogatepass")
    if draw(st.integers(0, 2)) == 2:
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(min_size=1, max_size=6)) + raw[at:]
    if draw(st.integers(0, 9)) == 9:
        raw = raw[: draw(st.integers(0, len(raw)))]
    return raw


@FUZZ
@given(text=structural_mutation())
def test_fuzzed_config_structures(work_dir, text):
    path = work_dir / "structural.yaml"
    path.write_text(text, encoding="utf-8", errors="surrogatepass")
    check_config_loads_or_fails_clearly(path)


@FUZZ
@given(raw=textual_mutation())
def test_fuzzed_config_texts(work_dir, raw):
    path = work_dir / "textual.yaml"
    path.write_bytes(raw)
    check_config_loads_or_fails_clearly(path)


def _laughs(levels: int, width: int, mapping: bool = False) -> str:
    lines = ["l0: &l0 [" + ", ".join(["lol"] * width) + "]"]
    for n in range(1, levels):
        refs = ", ".join([f"*l{n - 1}"] * width)
        body = "{" + ", ".join(f"k{i}: *l{n - 1}" for i in range(width)) + "}" if mapping else f"[{refs}]"
        lines.append(f"l{n}: &l{n} {body}")
    return "\n".join(lines) + "\n"


YAML_BOMBS = {
    "billion laughs": _laughs(9, 10),
    "billion laughs in mappings": _laughs(9, 10, mapping=True),
    "billion laughs, narrow and deep": _laughs(40, 2),
    "merge-key laughs": "a: &a {x: 1, y: 2}\n" + "".join(
        f"m{n}: &m{n}\n  <<: *{'a' if n == 0 else f'm{n - 1}'}\n  l: [{', '.join([f'*m{n - 1}' if n else '*a'] * 8)}]\n"
        for n in range(12)),
    "recursive list anchor": "a: &a [1, *a]\n",
    "recursive mapping anchor": "a: &a\n  b: *a\n",
    "recursive merge key": "a: &a\n  <<: *a\n",
    "self-referencing nested anchor": "a: &a\n  b:\n    c: [*a]\n",
    "deep flow nesting": "a: " + "[" * 100_000 + "]" * 100_000 + "\n",
    "deep block nesting": "".join("  " * i + f"k{i}:\n" for i in range(MAX_YAML_DEPTH + 10)) + "  " * 80 + "x: 1\n",
    "many values": "a: [" + ",".join(["1"] * 300_000) + "]\n",
    "long line of brackets": "a: " + "[" * 5_000_000 + "\n",
    "invalid UTF-8": "seed: 1\nname: caf\xe9\n".encode("latin-1"),
    "NUL byte": b"seed: 1\nname: a\x00b\n",
    "control character": b"seed: 1\nname: a\x07b\n",
    "tab indentation": "reporting:\n\tcsv: {}\n",
    "top-level list": "- seed: 1\n",
    "top-level scalar": "just a string\n",
    "duplicate key": "seed: 1\nseed: 2\n",
    "nested duplicate key": "runners:\n  sqlgen_runners: 1\n  sqlgen_runners: 2\n",
    "non-string key": "1: a\n",
    "boolean key": "on: push\n",
    "list as key": "? [a, b]\n: 1\n",
    "python object tag": "seed: !!python/object/apply:os.system ['true']\n",
    "unknown tag": "seed: !custom 1\n",
    "invalid timestamp": "seed: 2020-13-45\n",
    "invalid explicit int": "seed: !!int abc\n",
    "two documents": "seed: 1\n---\nseed: 2\n",
    "undefined alias": "seed: *nope\n",
    "duplicate anchor": "a: &x 1\nb: &x 2\n",
    "unterminated string": "seed: 'abc\n",
    "lone surrogate escape": 'seed: "\\ud800"\n',
}


@pytest.mark.parametrize("name", list(YAML_BOMBS))
def test_yaml_bombs_and_malformed_yaml_are_config_errors(work_dir, name):
    content = YAML_BOMBS[name]
    path = work_dir / f"bomb-{re.sub(r'[^a-z]+', '-', name)}.yaml"
    path.write_bytes(content if isinstance(content, bytes) else content.encode("utf-8"))
    with time_bound(), pytest.raises(ConfigError) as caught:
        load_yaml(path)
    err = caught.value
    assert err.file == str(path) and str(err).startswith(f"{path}:")
    assert err.line is not None, err  # every one of these has a line to point at


def test_an_oversized_config_is_refused_without_reading_it(work_dir):
    path = work_dir / "huge.yaml"
    with path.open("wb") as handle:
        handle.truncate(MAX_YAML_BYTES + 1)  # sparse: nothing is written
    with time_bound(1), pytest.raises(ConfigError, match="larger than 10 MB") as caught:
        load_yaml(path)
    assert caught.value.file == str(path)


def test_the_line_map_and_environment_variables_still_work(work_dir, monkeypatch):
    monkeypatch.setenv("ROBUST_SEED", "7")
    path = work_dir / "env.yaml"
    path.write_text("\ufeff# a BOM, a comment\nbase: &b {x: 1}\nother:\n  <<: *b\n  y: ${ROBUST_SEED}\n"
                    "  z: ${ROBUST_UNSET:-dflt}\n", encoding="utf-8")
    doc = load_yaml(path)
    assert doc.data == {"base": {"x": 1}, "other": {"x": 1, "y": "7", "z": "dflt"}}
    assert doc.line_of(("other", "y")) == 5 and doc.line_of(("base", "x")) == 2
    assert doc.env_keys == {("other", "y"), ("other", "z")}


def test_cli_names_the_file_of_a_malformed_config_and_exits_2(work_dir, capsys):
    path = work_dir / "cli.yaml"
    path.write_text(BASE_CONFIG.replace("seed: 42", "seed: 42\nseed: 43"), encoding="utf-8")
    assert main(["validate", "--config", str(path)]) == 2
    err = capsys.readouterr().err
    assert f"{path}:" in err and "duplicate key 'seed'" in err and "Traceback" not in err
    path.write_text(YAML_BOMBS["billion laughs"], encoding="utf-8")
    with time_bound():
        assert main(["run", "--config", str(path), "--no-progress"]) == 2
    err = capsys.readouterr().err
    assert f"{path}:" in err and "billion laughs" in err


# ------------------------------------------------------------------------------------ datasets


DEMO_LINES = [line for line in (DEMO / "greenleaf.jsonl").read_bytes().split(b"\n") if line.strip()]
DEMO_RECORDS = [json.loads(line) for line in DEMO_LINES[:6]]


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False, allow_infinity=False),
              st.text(max_size=10), st.sampled_from(["\x00", "a\x00b", "\ud800", "\udfff x", "\ufeff", "greenleaf_1"])),
    lambda children: st.one_of(st.lists(children, max_size=3), st.dictionaries(st.text(max_size=6), children, max_size=3)),
    max_leaves=8)


@st.composite
def record_line(draw: st.DrawFn) -> bytes:
    """One mutated line of greenleaf.jsonl: keys deleted, retyped or renamed, huge or deep values,
    or the bytes themselves garbled (random bytes, BOM, NUL, invalid UTF-8, cut short)."""
    record = json.loads(json.dumps(draw(st.sampled_from(DEMO_RECORDS))))
    record["instance_id"] = "mutant"  # not a duplicate of the lines around it (unless mutated into one)
    keys = sorted(record)
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(keys))
        action = draw(st.sampled_from(["delete", "rename", "retype", "huge", "deep", "nested"]))
        if key not in record:
            continue
        if action == "delete":
            del record[key]
        elif action == "rename":
            record[draw(st.text(max_size=12))] = record.pop(key)
        elif action == "retype":
            record[key] = draw(json_values)
        elif action == "huge":
            record[key] = draw(st.sampled_from(["HUGE_INT", "HUGE_FLOAT", "NAN", 10**200, -(10**30), 2**63, "x" * 100_000]))
        elif action == "deep":
            record[key] = f"DEEP_{draw(st.sampled_from([50, 150, 5000]))}"
        elif action == "nested" and isinstance(record[key], dict) and record[key]:
            inner = draw(st.sampled_from(sorted(record[key])))
            record[key][inner] = draw(json_values)
    text = json.dumps(record, ensure_ascii=draw(st.booleans()))
    text = (text.replace('"HUGE_INT"', "9" * 5000).replace('"HUGE_FLOAT"', "1e999").replace('"NAN"', "NaN"))
    text = re.sub(r'"DEEP_(\d+)"', lambda m: "[" * int(m.group(1)) + '"x"' + "]" * int(m.group(1)), text)
    raw = text.encode("utf-8", "surrogatepass")  # a lone surrogate becomes bytes that are not UTF-8
    garble = draw(st.sampled_from(["none", "none", "bytes", "bom", "nul", "cut", "latin1", "dup_key", "two"]))
    if garble == "bytes":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + draw(st.binary(min_size=1, max_size=8)).replace(b"\n", b" ") + raw[at:]
    elif garble == "bom":
        raw = b"\xef\xbb\xbf" + raw
    elif garble == "nul":
        at = draw(st.integers(0, len(raw)))
        raw = raw[:at] + b"\x00" + raw[at:]
    elif garble == "cut":
        raw = raw[: draw(st.integers(0, len(raw)))]
    elif garble == "latin1":
        raw = raw.replace(b"e", b"\xe9", 1)
    elif garble == "dup_key":
        raw = raw.replace(b'{"', b'{"instance_id": "dup", "', 1)
    elif garble == "two":  # two objects on one line, the second malformed
        raw = raw + b" " + raw[: len(raw) // 2]
    return raw


def _scan(path: Path) -> tuple[list[Item], list[RecordError]]:
    items: list[Item] = []
    errors: list[RecordError] = []
    with time_bound():
        dataset = Dataset(path)
        scan = dataset.scan()
        for record in dataset.iter_records():
            (errors if isinstance(record, RecordError) else items).append(record)
        assert sum(1 for _ in dataset.items()) == scan.total == len(items)
        assert len(scan.errors) == len(errors)
    for error in errors:
        assert error.file == str(path) and error.line >= 1 and error.message
        str(error).encode("utf-8")  # printable: no lone surrogate from the file leaks into a message
    return items, errors


def _accounted(path: Path, items: list[Item], errors: list[RecordError]) -> None:
    """Every non-blank line of a JSONL file gave an item or a record error: nothing dropped silently."""
    lines = path.read_bytes().split(b"\n")
    seen = {int(item.source.rsplit(":", 1)[1]) for item in items} | {e.line for e in errors}
    for number, raw in enumerate(lines, start=1):
        if raw.removeprefix(b"\xef\xbb\xbf").decode("utf-8", "replace").strip():
            assert number in seen, f"line {number} was dropped silently: {raw[:200]!r}"


@FUZZ
@given(line=record_line(), first=st.booleans())
def test_fuzzed_dataset_lines(work_dir, line, first):
    """A mutated record among good ones (first, or in the middle): the good ones load, the
    mutated one loads or is a record error with its line; the scan never raises."""
    good = [DEMO_LINES[0], DEMO_LINES[1]]
    lines = [line, *good] if first else [good[0], line, good[1]]
    path = work_dir / "fuzzed.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    try:
        items, errors = _scan(path)
    except DatasetError as exc:
        assert exc.file == str(path)
        return
    _accounted(path, items, errors)
    good_lines = {2, 3} if first else {1, 3}
    loaded = {int(item.source.rsplit(":", 1)[1]) for item in items}
    assert good_lines <= loaded | {e.line for e in errors if "duplicate item id" in e.message}


@FUZZ
@given(line=record_line())
def test_fuzzed_json_array_elements(work_dir, line):
    """The same mutations as an element of an EvalBench-style JSON array (one element per line)."""
    path = work_dir / "fuzzed.json"
    path.write_bytes(b"[" + DEMO_LINES[0] + b",\n" + line + b",\n" + DEMO_LINES[1] + b"]\n")
    try:
        items, errors = _scan(path)
    except DatasetError as exc:
        assert exc.file == str(path)
        return
    assert any(item.id == "greenleaf_1" for item in items)  # the element before the mutated one
    stopped = ("the rest of the file was not read", "expected ',' or ']' after an array element")  # both stop reading
    if not any(any(text in e.message for text in stopped) for e in errors):
        assert any(item.id == "greenleaf_2" for item in items) or any(e.line == 3 for e in errors)


@pytest.mark.parametrize("suffix", [".jsonl", ".json"])
def test_a_byte_order_mark_is_accepted(work_dir, suffix):
    path = work_dir / f"bom{suffix}"
    body = b"\n".join(DEMO_LINES[:3]) + b"\n"
    path.write_bytes(b"\xef\xbb\xbf" + (body if suffix == ".jsonl" else b"[" + b",\n".join(DEMO_LINES[:3]) + b"]\n"))
    items, errors = _scan(path)
    assert [i.id for i in items] == ["greenleaf_1", "greenleaf_2", "greenleaf_3"] and errors == []
    single = work_dir / f"bom-single{suffix}"
    single.write_bytes(b"\xef\xbb\xbf" + DEMO_LINES[0])
    items, errors = _scan(single)
    assert [i.id for i in items] == ["greenleaf_1"] and errors == []


BAD_RECORDS = {
    "invalid UTF-8": (DEMO_LINES[3].replace(b"greenleaf_4", b"greenleaf_\xff4"), "not valid UTF-8"),
    "NUL escape": (DEMO_LINES[3].replace(b'"query": "', b'"query": "\\u0000', 1), "key 'query': contains a NUL character"),
    "raw NUL": (DEMO_LINES[3].replace(b'"query": "', b'"query": "\x00', 1), "invalid JSON"),
    "lone surrogate": (DEMO_LINES[3].replace(b'"query": "', b'"query": "\\ud800', 1), "key 'query': contains a lone surrogate"),
    "huge integer": (DEMO_LINES[3].replace(b'"decimal": -1', b'"decimal": ' + b"9" * 5000, 1), "more than 1000 digits"),
    "huge float": (DEMO_LINES[3].replace(b'"decimal": -1', b'"decimal": 1e999', 1), "number 1e999 is out of range"),
    "NaN": (DEMO_LINES[3].replace(b'"decimal": -1', b'"decimal": NaN', 1), "number NaN is not valid JSON"),
    "rounding to a billion places": (DEMO_LINES[3].replace(b'"decimal": -1', b'"decimal": 1000000000', 1), "out of range"),
    "deep nesting": (DEMO_LINES[3].replace(b'"external_knowledge": []', b'"external_knowledge": ' + b"[" * 500 + b"]" * 500, 1),
                     "nested more than 100 levels deep"),
    "very deep nesting": (b"[" * 200_000, "nested too deeply"),
    "not an object": (b"[1, 2, 3]", "expected a JSON object, got list"),
    "wrong type the format does not check": (DEMO_LINES[3].replace(b'"external_knowledge": []', b'"external_knowledge": 5', 1),
                                             "cannot read this record"),
}


@pytest.mark.parametrize("name", list(BAD_RECORDS))
def test_each_bad_record_is_a_record_error_with_its_line(work_dir, name):
    line, message = BAD_RECORDS[name]
    path = work_dir / "bad.jsonl"
    path.write_bytes(b"\n".join([DEMO_LINES[0], line, DEMO_LINES[4]]) + b"\n")
    items, errors = _scan(path)
    assert [i.id for i in items] == ["greenleaf_1", "greenleaf_5"]
    assert [e.line for e in errors] == [2] and message in errors[0].message, errors


def test_an_unreadable_dataset_is_a_dataset_error(work_dir):
    path = work_dir / "a-directory.jsonl"
    path.mkdir(exist_ok=True)
    with pytest.raises(DatasetError, match="not found"):
        Dataset(path)

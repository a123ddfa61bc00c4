"""Run and shard directories are untrusted input: every command that reads one (report, run
--resume, merge, compare, explain, rescore, --baseline, runs, view) answers a malformed file with
exit 2 and a message naming it — wrong JSON types, absurd counts, deep nesting, bad UTF-8, huge
files, missing files, a FIFO, a directory, a device, a symlink out of the folder — within bounded
time and memory, never a traceback; ``runs`` and ``view`` list such a run with what is wrong.

The commands run in-process (``main([...])``) under a guard that turns a hang into an alarm and a
runaway read into a MemoryError, so a regression fails the test instead of the machine."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import shutil
import signal
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from evalbench.cli import main

ROOT = Path(__file__).resolve().parents[2]
CONFIG = ROOT / "configs" / "quickstart_sqlite.yaml"
LIMIT = ["--limit", "6"]
ITEM = "greenleaf_2"


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A finished run (``base``) and the two shards of a split run (``s1``, ``s2``), on SQLite."""
    root = tmp_path_factory.mktemp("runs")
    base = ["run", "--config", str(CONFIG), "--output-dir", str(root), "--no-progress", "--no-preflight", *LIMIT]
    assert main([*base, "--run-id", "base"]) in (0, 1)
    for i in (1, 2):
        assert main([*base, "--run-id", f"s{i}", "--shard", f"{i}/2"]) in (0, 1)
    return root


@contextlib.contextmanager
def bounded(seconds: int = 60, memory: int = 2 << 30) -> Iterator[None]:
    """A hang raises TimeoutError after ``seconds``; more than ``memory`` bytes allocated raises MemoryError."""
    def alarm(signum: int, frame: Any) -> None:
        raise TimeoutError(f"still running after {seconds} s")

    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    with open("/proc/self/statm") as statm:
        size = int(statm.read().split()[0]) * resource.getpagesize()
    previous = signal.signal(signal.SIGALRM, alarm)
    resource.setrlimit(resource.RLIMIT_AS, (size + memory, hard))
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))
        signal.signal(signal.SIGALRM, previous)


# --------------------------------------------------------------------------- what is malformed


def _edit_json(path: Path, edit: Callable[[dict[str, Any]], None]) -> None:
    data = json.loads(path.read_text(encoding="utf-8"))
    edit(data)
    path.write_text(json.dumps(data), encoding="utf-8")


def _set(*keys: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def edit(data: dict[str, Any]) -> None:
        for key in keys[:-1]:
            data = data[key]
        data[keys[-1]] = value
    return edit


def _special(kind: str) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        path.unlink()
        if kind == "fifo":
            os.mkfifo(path)
        elif kind == "directory":
            path.mkdir()
        elif kind == "outside":
            outside = path.parent.parent / f"outside-{path.name}"
            outside.write_text("{}\n", encoding="utf-8")
            path.symlink_to(outside)
        elif kind != "missing":
            path.symlink_to(kind)  # a device
    return make


def _huge(extra: int) -> Callable[[Path], None]:
    def make(path: Path) -> None:
        with path.open("ab") as handle:  # sparse: no disk used
            handle.truncate(path.stat().st_size + extra)
    return make


FILE_CLASSES: dict[str, Callable[[Path], None]] = {
    "missing": _special("missing"),
    "fifo": _special("fifo"),
    "directory": _special("directory"),
    "dev_zero": _special("/dev/zero"),
    "dev_urandom": _special("/dev/urandom"),
    "symlink_outside": _special("outside"),
}
JSON_CLASSES: dict[str, Callable[[Path], None]] = {
    "a_list": lambda p: p.write_text("[]", encoding="utf-8"),
    "null": lambda p: p.write_text("null", encoding="utf-8"),
    "a_string": lambda p: p.write_text('"manifest"', encoding="utf-8"),
    "deeply_nested": lambda p: p.write_text("[" * 200_000 + "]" * 200_000, encoding="utf-8"),
    "nested_below_the_recursion_limit": lambda p: p.write_text('{"run_id": ' + "[" * 900 + "]" * 900 + "}", encoding="utf-8"),
    "bad_utf8": lambda p: p.write_bytes(b'{"run_id": "caf\xe9"}'),
    "not_json": lambda p: p.write_text("{oops", encoding="utf-8"),
    "huge": _huge(40 << 20),
    **FILE_CLASSES,
}
MANIFEST_VALUES: dict[str, Callable[[dict[str, Any]], None]] = {
    "items_as_string": _set("dataset", "items", value="5"),
    "items_absurd": _set("dataset", "items", value=10**18),
    "dataset_a_list": _set("dataset", value=[1, 2]),
    "sessions_of_strings": _set("sessions", value=["x"]),
    "elapsed_as_string": _set("summary_extra", "elapsed_s", value="long"),
    "run_id_an_object": _set("run_id", value={"a": 1}),
}
SHARD_VALUES: dict[str, Callable[[dict[str, Any]], None]] = {
    "shard_absurd": _set("dataset", "subset", "shard", value="1/99999999999"),
    "shard_not_i_of_n": _set("dataset", "subset", "shard", value="one of two"),
    "shard_a_number": _set("dataset", "subset", "shard", value=2),
}


# --------------------------------------------------------------------------- the commands


def _case(runs: Path, tmp_path: Path) -> dict[str, Path]:
    for name in ("base", "s1", "s2"):
        shutil.copytree(runs / name, tmp_path / name, symlinks=True)
    shutil.copytree(runs / "base", tmp_path / "good" / "good")
    return {"run": tmp_path / "base", "good": tmp_path / "good" / "good", "s1": tmp_path / "s1", "s2": tmp_path / "s2",
            "out": tmp_path / "out"}


COMMANDS: dict[str, Callable[[dict[str, Path]], list[str]]] = {
    "report": lambda d: ["report", str(d["run"]), "--no-html"],
    "explain": lambda d: ["explain", str(d["run"]), ITEM],
    "compare": lambda d: ["compare", str(d["good"]), str(d["run"]), "--output-dir", str(d["out"]), "--metric", "exec_match"],
    "rescore": lambda d: ["rescore", str(d["run"]), "--output-dir", str(d["out"]), "--no-progress"],
    "resume": lambda d: ["run", "--config", str(CONFIG), "--resume", str(d["run"]), "--no-progress", "--no-preflight", *LIMIT],
    "baseline": lambda d: ["report", str(d["good"]), "--no-html", "--baseline", str(d["run"]), "--max-regression",
                           "success=50%"],
    "runs": lambda d: ["runs", str(d["run"])],
    "view": lambda d: ["view", str(d["run"]), "-o", str(d["out"] / "index.html")],
}
MERGE: Callable[[dict[str, Path]], list[str]] = lambda d: ["merge", str(d["out"] / "merged"), str(d["s1"]), str(d["s2"])]  # noqa: E731
READS = {  # which commands read which file (a command that does not read it is not asked)
    "manifest.json": ["report", "compare", "rescore", "resume", "runs", "view", "merge"],
    "summary.json": ["compare", "baseline", "runs", "view"],
    "conversations.jsonl": ["report", "explain", "compare", "rescore", "resume", "runs", "view", "merge", "baseline"],
}
LISTINGS = ("runs", "view")  # list a broken run with what is wrong (exit 0): one broken run never hides the others


def _invoke(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    with bounded():
        code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def _target(dirs: dict[str, Path], command: str, name: str) -> Path:
    return (dirs["s1"] if command == "merge" else dirs["run"]) / name


def _argv(dirs: dict[str, Path], command: str) -> list[str]:
    return MERGE(dirs) if command == "merge" else COMMANDS[command](dirs)


def _assert_refused(code: int, out: str, err: str, command: str, path: Path) -> None:
    assert "Traceback" not in err + out
    if command in LISTINGS:
        assert code == 0, err
        if command == "view":  # the run's status is in the page
            out = (path.parent.parent / "out" / "index.html").read_text(encoding="utf-8")
        assert path.name in out and any(word in out for word in ("unreadable", "broken", f"no {path.name}")), out
        return
    assert code == 2, (code, err)
    assert str(path) in err or str(path.parent) in err, err


FILE_CASES = [(name, cls, cmd) for name, cmds in READS.items() for cls in JSON_CLASSES if name != "conversations.jsonl"
              for cmd in cmds] + [("conversations.jsonl", cls, cmd) for cls in FILE_CLASSES
                                  for cmd in READS["conversations.jsonl"]]


@pytest.mark.parametrize(("name", "kind", "command"), FILE_CASES, ids=[f"{n}-{k}-{c}" for n, k, c in FILE_CASES])
def test_a_malformed_run_file_is_exit_2_naming_it(runs, tmp_path, capsys, name, kind, command):
    dirs = _case(runs, tmp_path)
    path = _target(dirs, command, name)
    JSON_CLASSES[kind](path)
    code, out, err = _invoke(_argv(dirs, command), capsys)
    if kind == "missing" and (name, command) in MAY_BE_MISSING:  # a run that did not finish (or start)
        assert code in (0, 1) and "Traceback" not in err, err
        return
    _assert_refused(code, out, err, command, path)


# a run killed before its summary (or its first conversation): read as such
# a baseline without a journal is compared through its summary.json, unpaired (docs/ci.md)
MAY_BE_MISSING = ({("summary.json", c) for c in READS["summary.json"] if c != "baseline"}
                  | {("conversations.jsonl", "resume"), ("conversations.jsonl", "baseline")})


def test_run_facts_in_a_manifest_never_replace_computed_summary_keys(runs, tmp_path, capsys):
    dirs = _case(runs, tmp_path)
    _edit_json(dirs["run"] / "manifest.json", _set("summary_extra", value={"run_id": 1, "scorers": [], "total_items": "x"}))
    code, _, err = _invoke(COMMANDS["report"](dirs), capsys)
    assert code in (0, 1) and "Traceback" not in err, err
    summary = json.loads((dirs["run"] / "summary.json").read_text())
    assert summary["run_id"] == "base" and summary["total_items"] == 6 and summary["scorers"]


VALUE_CASES = [(cls, cmd) for cls in MANIFEST_VALUES for cmd in READS["manifest.json"]]


@pytest.mark.parametrize(("kind", "command"), VALUE_CASES, ids=[f"{k}-{c}" for k, c in VALUE_CASES])
def test_a_manifest_value_of_the_wrong_type_is_exit_2_naming_file_and_key(runs, tmp_path, capsys, kind, command):
    dirs = _case(runs, tmp_path)
    path = _target(dirs, command, "manifest.json")
    _edit_json(path, MANIFEST_VALUES[kind])
    code, out, err = _invoke(_argv(dirs, command), capsys)
    _assert_refused(code, out, err, command, path)


@pytest.mark.parametrize("kind", list(SHARD_VALUES))
def test_a_shard_manifest_of_an_absurd_split_is_refused_at_once(runs, tmp_path, capsys, kind):
    dirs = _case(runs, tmp_path)
    path = dirs["s1"] / "manifest.json"
    _edit_json(path, SHARD_VALUES[kind])
    code, _, err = _invoke(MERGE(dirs), capsys)
    assert code == 2 and f"{path}: dataset.subset.shard" in err and "Traceback" not in err, err


def test_a_bom_is_accepted_in_every_run_file(runs, tmp_path, capsys):
    dirs = _case(runs, tmp_path)
    for name in ("manifest.json", "summary.json", "conversations.jsonl"):
        path = dirs["run"] / name
        path.write_bytes(b"\xef\xbb\xbf" + path.read_bytes())
    for command in ("report", "explain", "compare", "baseline", "rescore"):
        code, _, err = _invoke(COMMANDS[command](dirs), capsys)
        assert code in (0, 1) and "Traceback" not in err, (command, err)


def test_a_huge_journal_is_refused_before_it_is_read(runs, tmp_path, capsys):
    dirs = _case(runs, tmp_path)
    path = dirs["run"] / "conversations.jsonl"
    _huge(17 << 30)(path)  # sparse: a read of it would take minutes
    for command in ("report", "explain", "resume"):
        code, _, err = _invoke(COMMANDS[command](dirs), capsys)
        assert code == 2 and str(path) in err and "more than the 16 GiB" in err, err


def test_bad_journal_lines_are_skipped_naming_their_line_and_the_rest_is_read(runs, tmp_path, capsys, caplog):
    """A line too long to hold, not UTF-8, nested deeply or of a record's shape with wrong types is
    not a conversation record: it is skipped with a warning naming the journal and the line."""
    dirs = _case(runs, tmp_path)
    path = dirs["run"] / "conversations.jsonl"
    good = path.read_bytes().splitlines(keepends=True)
    record = json.loads(good[0])
    bad = [b"x" * (17 << 20) + b"\n", b'{"item_id": "caf\xe9"}\n', b"[" * 5000 + b"]" * 5000 + b"\n",
           json.dumps(record | {"phases": [{"phase": 1, "scores": []}]}).encode() + b"\n",
           json.dumps(record | {"trial": 10**18}).encode() + b"\n", json.dumps(record | {"turns": "many"}).encode() + b"\n"]
    path.write_bytes(b"".join(bad) + b"".join(good))
    code, _, err = _invoke(COMMANDS["report"](dirs), capsys)
    assert code in (0, 1), err
    assert f"{path}: 6 line(s) are not a conversation record and are ignored (line 1, 2, 3, 4, 5, ...)" in caplog.text
    summary = json.loads((dirs["run"] / "summary.json").read_text())
    assert summary["total_items"] == len(good)


def test_the_lock_file_cannot_be_used_to_write_elsewhere(runs, tmp_path, capsys):
    """A resumed run directory whose lock file, journal or report files are symlinks out of it (or
    FIFOs) makes evalbench neither follow them nor wait on them."""
    dirs = _case(runs, tmp_path)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n", encoding="utf-8")
    (dirs["run"] / ".lock").unlink()
    (dirs["run"] / ".lock").symlink_to(victim)
    code, _, err = _invoke(COMMANDS["resume"](dirs), capsys)
    assert code == 2 and ".lock" in err, err
    (dirs["run"] / ".lock").unlink()
    for name in ("scores_native.csv", ".summary.json.tmp", ".report.html.tmp"):
        (dirs["run"] / name).unlink(missing_ok=True)
        (dirs["run"] / name).symlink_to(victim)
    os.mkfifo(dirs["run"] / ".junit.xml.tmp")
    code, _, err = _invoke(COMMANDS["resume"](dirs), capsys)
    assert code in (0, 1), err
    assert victim.read_text(encoding="utf-8") == "keep me\n"


def test_a_resume_of_a_run_with_absurdly_many_shards_starts_no_process(runs, tmp_path, capsys):
    """``--resume`` counts the run's shards to start as many workers: past a bound (64, or 4 per
    core) the run directory is a fork bomb, not a run, and ``--workers N`` must say how many."""
    dirs = _case(runs, tmp_path)
    for i in range(1, 202):
        (dirs["run"] / "shards" / f"base-shard-{i}").mkdir(parents=True)
    code, _, err = _invoke(COMMANDS["resume"](dirs), capsys)
    assert code == 2 and f"{dirs['run'] / 'shards'} holds more than" in err and "--workers N" in err, err
    assert not list((dirs["run"] / "shards").glob("*.log"))  # no worker was started


# --------------------------------------------------------------------------- the fuzz


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(10**20), max_value=10**20) | st.floats() | st.text(max_size=8),
    lambda children: st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3),
    max_leaves=12)


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every key path into ``value`` (the places a fuzzed value can go)."""
    out = [prefix]
    if isinstance(value, dict):
        for key, sub in value.items():
            out += _paths(sub, (*prefix, key))
    elif isinstance(value, list):
        for index, sub in enumerate(value[:3]):
            out += _paths(sub, (*prefix, index))
    return out


def _replace(value: Any, path: tuple[Any, ...], new: Any) -> Any:
    if not path:
        return new
    copy = dict(value) if isinstance(value, dict) else list(value)
    copy[path[0]] = _replace(copy[path[0]], path[1:], new)
    return copy


@pytest.fixture(scope="module")
def fuzz_dirs(runs: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    return _case(runs, tmp_path_factory.mktemp("pristine"))


FUZZED = {"manifest.json": ("run", ["report", "compare", "resume", "rescore"]),
          "shard manifest.json": ("s1", ["merge"]),
          "summary.json": ("run", ["baseline", "runs"]),
          "conversations.jsonl": ("run", ["report", "explain", "compare", "resume"])}


@settings(max_examples=int(os.environ.get("FUZZ_EXAMPLES", "60")), deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(line=st.integers(0, 10**6), place=st.integers(0, 10**6), shallow=st.booleans(), value=JSON_VALUES)
@pytest.mark.parametrize("what", list(FUZZED))
@pytest.mark.slow
def test_fuzzed_run_files_give_exit_0_or_2_never_a_traceback(fuzz_dirs, tmp_path_factory, capsys, what, line, place,
                                                              shallow, value):
    """One value anywhere in a manifest, a shard's manifest, a summary or a journal line replaced
    by any JSON value: every command reading it exits 0 (1 for a gate), or 2 with one error."""
    work = tmp_path_factory.getbasetemp() / "fuzzed"
    shutil.rmtree(work, ignore_errors=True)
    dirs = {key: work / path.relative_to(fuzz_dirs["run"].parent) for key, path in fuzz_dirs.items()}
    shutil.copytree(fuzz_dirs["run"].parent, work, symlinks=True)  # every file as the run wrote it
    key, commands = FUZZED[what]
    name = what.split()[-1]
    lines = (dirs[key] / name).read_bytes().splitlines()
    line %= len(lines)
    document = json.loads(lines[line] if name == "conversations.jsonl" else b"\n".join(lines))
    paths = _paths(document)
    paths = [p for p in paths if len(p) <= 2] if shallow else paths  # the keys readers use most, half the time
    fuzzed = _replace(document, paths[place % len(paths)], value)
    if name == "conversations.jsonl":
        lines[line] = json.dumps(fuzzed).encode()
        (dirs[key] / name).write_bytes(b"\n".join(lines) + b"\n")
    else:
        (dirs[key] / name).write_text(json.dumps(fuzzed), encoding="utf-8")
    for command in commands:
        code, out, err = _invoke(_argv(dirs, command), capsys)
        assert code in (0, 1, 2), (command, code, err)  # 1: a gate of `baseline` judged the fuzzed run
        assert "Traceback" not in err + out
        if code == 2:  # one error (resume's may list the config keys that differ, a line each)
            assert err.startswith("error: ") and "error: " not in err[7:], err

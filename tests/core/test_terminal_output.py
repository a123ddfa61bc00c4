"""Issue 24: no control character from data reaches the terminal, whatever the command.

A run whose agent (a fake model server over HTTP) replies with terminal escape sequences in its
text and SQL, on a database whose table, column, cells and name hold them, with items whose
question, id and golden SQL hold them and a manifest whose values (run id, model) hold them; then
every command that reads it. Each is a real ``evalbench`` process: whatever reaches its stdout and
stderr may hold ``\\n`` and ``\\t`` and no other control character (C0, C1, DEL), no bidi control,
and shows the data escaped (``\\u001b``)."""

from __future__ import annotations

import fcntl
import io
import json
import os
import pty
import select
import struct
import subprocess
import sys
import termios
import time
from pathlib import Path

import pytest

from evalbench.core.terminal import SafeStream, escape
from tests.attack_agent import AttackAgent, completion, item
from tests.conftest import ROOT

# retitle the window, clear the screen, move up, return and overwrite, backspaces, a bidi
# override, a C1 CSI and NEL, a DEL
EVIL = "\x1b]0;pwned\x07\x1b[2J\x1b[1A\rPASS\x08\x08\u202eLIAF\u2066\x9b31m\x85\x7f"
DATABASE = "evil\x1b]0;db\x07"
TABLE, COLUMN = "t\x1b[2J", "c\u202e"
RUN_ID = "run\x1b[2J"
ITEM = "e1\x1b[31m"


def _unsafe(output: bytes) -> list[str]:
    """Every character of ``output`` that a terminal would act on, but ``\\n`` and ``\\t``."""
    text = output.decode("utf-8", "surrogateescape")
    return sorted({f"U+{ord(c):04X}" for c in text
                   if (ord(c) < 0x20 and c not in "\n\t") or 0x7F <= ord(c) <= 0x9F
                   or c in "\u061c\u200e\u200f\u2028\u2029" or 0x202A <= ord(c) <= 0x202E or 0x2066 <= ord(c) <= 0x2069
                   or 0xD800 <= ord(c) <= 0xDFFF})


def _setup(tmp: Path) -> Path:
    folder = tmp / "setup" / DATABASE / "sqlite"
    folder.mkdir(parents=True)
    (folder / "setup.sql").write_text(
        f'CREATE TABLE "{TABLE}" ("{COLUMN}" TEXT, n INTEGER);\n'
        f"INSERT INTO \"{TABLE}\" VALUES (char(27) || ']0;cell' || char(7) || char(13) || 'FAIL{EVIL}', 1);\n",
        encoding="utf-8")
    return tmp / "setup"


@pytest.fixture(scope="module")
def hostile_run(tmp_path_factory, pgdata):
    tmp = tmp_path_factory.mktemp("terminal")
    items = []
    for name, golden in (("e1", f'SELECT "{COLUMN}" FROM "{TABLE}"'), ("e2", "SELECT n FROM \"" + TABLE + '"'),
                         ("e3", f"SELECT nope -- {EVIL}")):
        record = dict(item(name, golden, database=DATABASE), dialect="sqlite")
        record["query"] = record["amb_user_query"] = record["query"] + EVIL
        items.append(record)
    items[0]["instance_id"] = ITEM
    (tmp / "items.jsonl").write_text("".join(json.dumps(i) + "\n" for i in items), encoding="utf-8")
    replies = {"e1": completion(f'SELECT "{COLUMN}" FROM "{TABLE}" -- {EVIL}', text="Here" + EVIL),
               "e2": completion(f"SELECT {EVIL} FROM nowhere", text=EVIL)}
    with AttackAgent(replies) as agent:
        config = {"dataset_config": str(tmp / "items.jsonl"), "dataset_format": "bird-interact",
                  "setup_directory": str(_setup(tmp)), "dialects": ["sqlite"],
                  "model_config": {"agent": "openai_compat", "base_url": agent.base_url, "model": "m" + EVIL,
                                   "retry": {"max_retries": 0}},
                  "vuser_model_config": {"vuser": "rules"}, "scorers": {"exec_match": {}, "executable": {}}, "seed": 1}
        (tmp / "run.yaml").write_text(json.dumps(config), encoding="utf-8")
        done = _evalbench(tmp, "run", "--config", "run.yaml", "--no-progress", "--output-dir", "out", "--run-id", RUN_ID)
        yield tmp, done  # the agent's server stays up for the module's tests


def _evalbench(tmp: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), EVALBENCH_PGDATA=os.environ["EVALBENCH_PGDATA"], COLUMNS="100")
    return subprocess.run([sys.executable, "-m", "evalbench", *args], cwd=tmp, env=env, capture_output=True, timeout=300)


def test_the_run_console_summary(hostile_run):
    _, done = hostile_run
    assert done.returncode in (0, 1), done.stderr
    assert _unsafe(done.stdout + done.stderr) == []
    assert f"Run {escape(RUN_ID)}:" in done.stdout.decode()


COMMANDS = [
    ("explain", ["explain", f"out/{RUN_ID}", ITEM], ["\\u001b]0;pwned\\u0007", "\\u202eLIAF", "\\u001b]0;cell\\u0007"]),
    ("explain-unknown", ["explain", f"out/{RUN_ID}", "nope" + EVIL], ["\\u202eLIAF", "e1\\u001b[31m"]),
    ("runs", ["runs", "out"], ["m\\u001b]0;pwned\\u0007"]),
    ("runs-json", ["runs", "out", "--json"], []),
    ("report", ["report", f"out/{RUN_ID}"], []),
    ("gates", ["report", f"out/{RUN_ID}", "--fail-under", "exec_match=0.99", "--fail-under", f"x{EVIL}=0.5"], []),
    ("compare", ["compare", f"out/{RUN_ID}", f"out/{RUN_ID}", "--output-dir", "cmp"], []),
    ("view", ["view", "out"], []),
    ("datasets", ["datasets", "--config", "run.yaml"], ["evil\\u001b]0;db\\u0007"]),
    ("db", ["db", "--config", "run.yaml"], ["t\\u001b[2J", "c\\u202e"]),
    ("validate", ["validate", "--config", "run.yaml"], ["e3 (items.jsonl:3): error"]),
    ("check", ["check", "--config", "run.yaml"], []),
    ("config-error", ["run", "--config", "run.yaml", "--set", f"seed=1{EVIL}"], []),
    ("usage-error", ["explain", "a", "b", f"--bogus{EVIL}"], ["--bogus\\u001b]0;pwned"]),
]


@pytest.mark.parametrize(("name", "args", "shown"), COMMANDS, ids=[c[0] for c in COMMANDS])
def test_every_command_escapes_what_it_shows(hostile_run, name, args, shown):
    tmp, _ = hostile_run
    done = _evalbench(tmp, *args)
    output = done.stdout + done.stderr
    assert _unsafe(output) == [], output.decode("utf-8", "replace")[-2000:]
    text = output.decode("utf-8")
    for escaped in shown:
        assert escaped in text
    if name == "runs-json":
        assert json.loads(done.stdout)[0]["name"] == RUN_ID  # JSON escapes: still valid, the same data


def test_progress_bars_still_draw_on_a_terminal(hostile_run):
    """On a terminal tqdm draws with ``\\r`` (ours, allowed); its label (the database's name) and
    the data's sequences stay escaped."""
    tmp, _ = hostile_run
    main, child = pty.openpty()
    fcntl.ioctl(child, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))  # tqdm draws nothing 0 columns wide
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    process = subprocess.Popen([sys.executable, "-m", "evalbench", "run", "--config", "run.yaml", "--output-dir", "out",
                                "--run-id", "on-a-tty"], cwd=tmp, env=env, stdin=child, stdout=child, stderr=child)
    os.close(child)
    output = b""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        ready, _, _ = select.select([main], [], [], 1)
        if ready:
            try:
                chunk = os.read(main, 65536)
            except OSError:  # the child closed the terminal
                break
            if not chunk:
                break
            output += chunk
        elif process.poll() is not None:
            break
    process.wait(timeout=60)
    os.close(main)
    assert b"\rsqlite/evil\\u001b]0;db\\u0007: 100%" in output  # the bar was drawn, its label escaped
    assert b"\x1b]0;" not in output and b"\x1b[2J" not in output and "\u202e".encode() not in output
    assert b"Run on-a-tty:" in output


@pytest.mark.parametrize(("text", "shown"), [
    ("\x1b]0;title\x07", "\\u001b]0;title\\u0007"),
    ("FAIL\rPASS", "FAIL\\u000dPASS"),
    ("a\r\nb\n\tc", "a\r\nb\n\tc"),
    ("x\x08\x7f\x85\x9b", "x\\u0008\\u007f\\u0085\\u009b"),
    ("\u202eabc\u2066\u200f\u2028", "\\u202eabc\\u2066\\u200f\\u2028"),
    ("lone \ud800", "lone \\ud800"),
    ("plain é 中文 🙂 — ok", "plain é 中文 🙂 — ok"),
])
def test_escape(text, shown):
    assert escape(text) == shown
    assert escape(escape(text)) == escape(text)  # escaping what is escaped changes nothing


def test_escaped_json_is_the_same_json():
    value = {"cell": "\x1b[2J\x85\u202e\u2028 ok"}
    text = json.dumps(value, ensure_ascii=False)
    assert json.loads(escape(text)) == value


def test_an_uncaught_exception_is_printed_escaped(monkeypatch):
    from evalbench.core.terminal import escaping_excepthook

    raw = io.StringIO()
    monkeypatch.setattr(sys, "stderr", raw)
    try:
        raise ValueError("bad cell \x1b[2J\u202e")
    except ValueError as exc:
        escaping_excepthook(type(exc), exc, exc.__traceback__)
    assert "Traceback" in raw.getvalue() and "ValueError: bad cell \\u001b[2J\\u202e" in raw.getvalue()


def test_a_safe_stream_delegates_and_escapes():
    raw = io.StringIO()
    stream = SafeStream(raw)
    print("row\x1b[2J", "x", file=stream)
    stream.writelines(["a\rb\n"])
    assert raw.getvalue() == "row\\u001b[2J x\na\\u000db\n"
    assert stream.isatty() is False and stream.getvalue() == raw.getvalue()

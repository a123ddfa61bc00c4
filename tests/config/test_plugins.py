"""Plugins: a real package declaring an agent, a virtual user and a scorer as entry points,
installed with pip into a folder of its own, used by `evalbench run` in a subprocess."""

from __future__ import annotations

import csv
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "configs" / "quickstart.yaml"

# The build backend is in the package (PEP 517 backend-path): the environment's setuptools may be
# too old to build a wheel (bdist_wheel came with setuptools 70.1), and pip must not need the
# network. It writes the wheel from the same [project] table, entry points included, that a
# setuptools build reads (docs/extending.md shows that one).
PYPROJECT = """\
[build-system]
requires = []
build-backend = "wheel_backend"
backend-path = ["_build"]

[project]
name = "evalbench-demo-plugin"
version = "0.1"

[project.entry-points."evalbench.agents"]
golden_echo = "evalbench_demo_plugin:GoldenEchoAgent"
broken_agent = "evalbench_demo_plugin_missing:Agent"

[project.entry-points."evalbench.vusers"]
shrug = "evalbench_demo_plugin:ShrugUser"

[project.entry-points."evalbench.scorers"]
sql_chars = "evalbench_demo_plugin:SqlChars"
broken_scorer = "evalbench_demo_plugin:NoSuchScorer"

[project.entry-points."evalbench.backends"]
litefile = "evalbench_demo_plugin:LiteFileBackend"
"""

BACKEND = '''\
"""A minimal PEP 517 backend: a pure-Python wheel of every top-level package, with the entry points
of pyproject.toml's [project.entry-points]."""

import base64
import hashlib
import tomllib
import zipfile
from pathlib import Path


def _project():
    return tomllib.loads(Path("pyproject.toml").read_text())["project"]


def get_requires_for_build_wheel(config_settings=None):
    return []


def build_wheel(wheel_directory, config_settings=None, metadata_directory=None):
    project = _project()
    name, version = project["name"].replace("-", "_"), project["version"]
    dist = f"{name}-{version}.dist-info"
    files = {p.as_posix(): p.read_bytes() for p in sorted(Path().glob("*/**/*.py")) if not p.parts[0].startswith("_")}
    files[f"{dist}/METADATA"] = f"Metadata-Version: 2.1\\nName: {project['name']}\\nVersion: {version}\\n".encode()
    files[f"{dist}/WHEEL"] = b"Wheel-Version: 1.0\\nGenerator: wheel_backend\\nRoot-Is-Purelib: true\\nTag: py3-none-any\\n"
    files[f"{dist}/entry_points.txt"] = "".join(
        f"[{group}]\\n" + "".join(f"{key} = {value}\\n" for key, value in points.items()) + "\\n"
        for group, points in project.get("entry-points", {}).items()).encode()
    record = []
    for path, data in files.items():
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        record.append(f"{path},sha256={digest},{len(data)}")
    files[f"{dist}/RECORD"] = ("\\n".join(record + [f"{dist}/RECORD,,"]) + "\\n").encode()
    wheel = f"{name}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(Path(wheel_directory) / wheel, "w") as archive:
        for path, data in files.items():
            archive.writestr(path, data)
    return wheel
'''

MODULE = '''\
"""A plugin package: an agent answering with the item's golden SQL, a virtual user that never
knows, a scorer measuring the SQL's length."""

from typing import Any

from pydantic import BaseModel, ConfigDict

from evalbench.core.conversation import AgentReply, ReplyKind, VUserAction, VUserReply
from evalbench.core.scores import Score


class GoldenEchoAgent:
    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")
        label: str = "plain"

    sticky = True

    def __init__(self, config: Any, context: Any) -> None:
        self.name = config.agent
        self.label = config.options.label

    def open_session(self, conversation):
        return _Session(conversation)

    def describe(self) -> dict[str, Any]:
        return {"agent": self.name, "label": self.label}

    def close(self) -> None:
        pass


class _Session:
    def __init__(self, conversation) -> None:
        self.item = conversation.item

    def send(self, text: str) -> AgentReply:
        follow_up = self.item.follow_up
        if follow_up is not None and text == follow_up.question:
            return AgentReply(ReplyKind.SQL, sql=follow_up.golden_sql[0])
        return AgentReply(ReplyKind.SQL, sql=self.item.golden_sql[0])

    def close(self) -> None:
        pass


class ShrugUser:
    name = "shrug"

    def __init__(self, config: Any, run_seed: int, knowledge: Any) -> None:
        self.reply = config.options.get("reply", "No idea.")

    def answer(self, conversation, question: str) -> VUserReply:
        return VUserReply(action=VUserAction("unanswerable"), text=self.reply)

    def describe(self) -> dict[str, Any]:
        return {"vuser": self.name, "reply": self.reply}


class SqlChars:
    class Config(BaseModel):
        model_config = ConfigDict(extra="forbid")
        scale: float = 1.0

    name = "sql_chars"
    is_metric = True

    def __init__(self, options: "SqlChars.Config") -> None:
        self.scale = options.scale

    def score(self, conversation, phase) -> Score:
        return Score(self.scale * len(phase.sql or ""), detail="characters of the final SQL")


from evalbench.backends.sqlite.backend import SQLiteBackend


class LiteFileBackend(SQLiteBackend):
    """A backend of another package: SQLite files, reading their setup from a "litefile" folder
    (else the "sqlite" one), and saying so in what provisioning reports."""

    name = "litefile"

    def setup_dialects(self):
        return ("litefile", "sqlite")

    def provision(self, config, setup, embedded_dir):
        provisioned = super().provision(config, setup, embedded_dir)
        provisioned.warning = "provisioned by the litefile plugin"
        return provisioned
'''


def _install(root: Path, files: dict[str, str]) -> Path:
    """Write a package of ``files`` (beside the in-tree build backend) and pip-install it, offline
    and without build isolation, into ``root/site``."""
    package = root / "package"
    for name, text in {**files, "_build/wheel_backend.py": BACKEND}.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    site = root / "site"
    done = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--quiet", "--no-index", "--no-deps", "--no-build-isolation",
         "--disable-pip-version-check", "--target", str(site), str(package)],
        capture_output=True, text=True, timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert list(site.glob("*.dist-info/entry_points.txt"))
    return site


@pytest.fixture(scope="module")
def plugin_site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo plugin package, installed by pip into a folder of its own."""
    return _install(tmp_path_factory.mktemp("plugin"),
                    {"pyproject.toml": PYPROJECT, "evalbench_demo_plugin/__init__.py": MODULE})


def _evalbench(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(site))
    return subprocess.run([sys.executable, "-m", "evalbench", *args], capture_output=True, text=True, env=env,
                          cwd=ROOT, timeout=600)


def _run(site: Path, out: Path, *sets: str) -> subprocess.CompletedProcess[str]:
    args = ["run", "--config", str(QUICKSTART), "--output-dir", str(out), "--run-id", "r", "--no-progress"]
    for value in sets:
        args += ["--set", value]
    return _evalbench(site, *args)


def test_plugin_agent_vuser_and_scorer_are_used_by_a_run(plugin_site, tmp_path, pgdata):
    done = _run(plugin_site, tmp_path, "model_config={agent: golden_echo, label: from-config}", "vuser_model_config=shrug",
                "scorers={exec_match: {}, sql_chars: {scale: 1000}}", "primary={Query: exec_match, Management: exec_match}",
                "subset={limit: 3}")
    assert done.returncode == 0, done.stderr
    run_dir = tmp_path / "r"
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["config"]["model_config"] == {"agent": "golden_echo", "label": "from-config"}
    text = json.dumps(manifest)
    assert '"label": "from-config"' in text and '"reply": "No idea."' in text  # the plugins' describe()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["total_items"] == 3
    assert summary["scorers"]["exec_match"]["main"]["rate"] == 1.0  # the golden SQL, echoed by the plugin agent
    assert summary["scorers"]["sql_chars"]["main"]["applicable"] == 3
    with (run_dir / "scores.csv").open(newline="") as f:
        rows = [r for r in csv.DictReader(f) if "sql_chars" in r.values()]
    assert rows and all(float(r["value"]) > 10_000 for r in rows), rows  # scale: 1000 reached the scorer


def test_a_broken_entry_point_is_a_config_error_naming_the_plugin(plugin_site, tmp_path):
    done = _run(plugin_site, tmp_path, "model_config=broken_agent")
    assert done.returncode == 2, done.stderr
    assert "model_config.agent" in done.stderr and "agent 'broken_agent'" in done.stderr
    assert "evalbench_demo_plugin_missing:Agent" in done.stderr and "ModuleNotFoundError" in done.stderr

    done = _run(plugin_site, tmp_path, "scorers={exec_match: {}, broken_scorer: {}}")
    assert done.returncode == 2, done.stderr
    assert "scorers.broken_scorer" in done.stderr and "scorer 'broken_scorer'" in done.stderr
    assert "AttributeError" in done.stderr


def test_unknown_names_list_the_built_in_and_plugin_ones(plugin_site, tmp_path):
    done = _run(plugin_site, tmp_path, "model_config=no_such_agent")
    assert done.returncode == 2, done.stderr
    line = next(line for line in done.stderr.splitlines() if "unknown agent 'no_such_agent'" in line)
    assert "model_config.agent" in line
    known = line.split("(known: ", 1)[1]
    for name in ("golden_echo", "broken_agent", "simulated:oracle", "adk"):
        assert name in known, line

    done = _run(plugin_site, tmp_path, "vuser_model_config={vuser: nobody}", "scorers={no_such_scorer: {}}")
    assert done.returncode == 2, done.stderr
    assert "unknown scorer 'no_such_scorer'" in done.stderr and "sql_chars" in done.stderr


def test_plugin_options_are_validated_by_its_config_model(plugin_site, tmp_path):
    done = _run(plugin_site, tmp_path, "model_config={agent: golden_echo, lable: typo}")
    assert done.returncode == 2, done.stderr
    assert "options of agent 'golden_echo': lable: unknown key" in done.stderr

    done = _run(plugin_site, tmp_path, "scorers={exec_match: {}, sql_chars: {scale: big}}")
    assert done.returncode == 2, done.stderr
    assert "scorers.sql_chars: options of scorer 'sql_chars': scale: Input should be a valid number" in done.stderr


def test_without_the_plugin_installed_its_name_is_unknown(tmp_path):
    done = _evalbench(tmp_path, "run", "--config", str(QUICKSTART), "--output-dir", str(tmp_path), "--no-progress",
                      "--set", "model_config=golden_echo")
    assert done.returncode == 2
    assert "unknown agent 'golden_echo'" in done.stderr and "golden_echo," not in done.stderr.split("known:")[1]


def _doc_block(text: str, marker: str) -> str:
    """The fenced block after ``<!-- extending.md test: MARKER -->`` in docs/extending.md."""
    after = text[text.index(f"<!-- extending.md test: {marker}"):]
    block = after[after.index("```"):]
    body = block[block.index("\n") + 1:]
    return body[:body.index("```")]


def test_the_agent_of_docs_extending_md_runs(tmp_path, pgdata):
    """The documented agent and its pyproject.toml, as written, installed and run."""
    text = (ROOT / "docs" / "extending.md").read_text()
    module = _doc_block(text, "agent module")
    pyproject = _doc_block(text, "agent pyproject.toml")
    assert '[project.entry-points."evalbench.agents"]' in pyproject
    # the same [project] table, built by the in-tree backend instead of setuptools (see PYPROJECT)
    start, end = pyproject.index("[build-system]"), pyproject.index("[project]")
    pyproject = pyproject[:start] + PYPROJECT[:PYPROJECT.index("[project]")] + pyproject[end:]
    site = _install(tmp_path / "doc", {"pyproject.toml": pyproject, "acme_sqlbot/__init__.py": module})

    done = _run(site, tmp_path, "model_config={agent: acme_sqlbot, ask_first: true, temperature: 0.2}",
                "subset={limit: 2}")
    assert done.returncode == 0, done.stderr
    manifest = json.loads((tmp_path / "r" / "manifest.json").read_text())
    assert manifest["agent"] == {"agent": "acme_sqlbot", "temperature": 0.2, "ask_first": True}
    with (tmp_path / "r" / "evals.csv").open(newline="") as f:
        generated = [row["generated_sql"] for row in csv.DictReader(f)]
    assert generated and all(sql.startswith("SELECT COUNT(*) FROM ") for sql in generated), generated
    turns = [json.loads(line) for line in (tmp_path / "r" / "conversations.jsonl").read_text().splitlines()]
    assert any("Which columns would you like to see?" in json.dumps(t) for t in turns)  # ask_first was read


def test_a_plugin_backend_serves_a_run(plugin_site, tmp_path):
    """A backend of another package, selected by db_type: the SQLite quickstart on it."""
    databases = ('database_configs=[{db_type: litefile, dialect: sqlite, database_name: greenleaf, '
                 f'database_path: "{tmp_path / "dbs"}"}}]')
    done = _evalbench(plugin_site, "run", "--config", str(ROOT / "configs" / "quickstart_sqlite.yaml"), "--output-dir",
                      str(tmp_path), "--run-id", "r", "--no-progress", "--set", "model_config=simulated:oracle",
                      "--set", databases, "--limit", "5")
    assert done.returncode == 0, done.stderr
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["databases"]["sqlite/greenleaf"]["warning"] == "provisioned by the litefile plugin"
    assert summary["scorers"]["exec_match"]["main"]["rate"] == 1.0
    assert (tmp_path / "dbs" / "greenleaf.db").is_file()
    unknown = _evalbench(plugin_site, "run", "--config", str(ROOT / "configs" / "quickstart_sqlite.yaml"), "--set",
                         "database_configs=[{db_type: nosuch, dialect: sqlite, database_name: greenleaf}]")
    assert unknown.returncode == 2 and "litefile" in unknown.stderr  # the known backends include the plugin's
